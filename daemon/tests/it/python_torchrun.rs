//! A hand-written DDP loop (examples/torchrun) on two ranks under real `torchrun`
//! (gloo on CPU) under the real `lavenderd`, the first test with its config
//! examples/torchrun/lavender.yaml as the docs show it: start → running with steps → stop: every
//! rank stops after the same step and rank 0 saves once → `start --resume latest`
//! continues from it → SIGKILL one rank → torchrun exits non-zero → the daemon
//! restarts from the run's newest checkpoint → finished. Every status schema-valid.

use std::time::Duration;

use lavender_testkit::python::*;
use lavender_testkit::*;

/// examples/torchrun/lavender.yaml as written: 300 steps, a save every 50, keep 2.
const MAX_STEPS: u64 = 300;
const KEEP: usize = 2;
const SLOW: Duration = Duration::from_secs(300);

fn rank_pids(agent: i32) -> Vec<i32> {
    children(agent)
        .into_iter()
        .filter(|p| cmdline(*p).iter().any(|a| a.ends_with("train.py")))
        .collect()
}

/// The example's DDP loop on two ranks under `torchrun --standalone` (no restarts of
/// its own: lavenderd restarts), saving every 10 steps; `extra` arguments after.
fn torchrun_env(max_steps: u64, extra: &[&str]) -> Env {
    require_modules(&["torch"]);
    let mut command: Vec<String> = vec![
        venv_tool("torchrun"),
        "--standalone".into(),
        "--nproc_per_node=2".into(),
        "--max_restarts=0".into(),
        example("torchrun/train.py"),
        "--max-steps".into(),
        max_steps.to_string(),
    ];
    for a in ["--save-every", "10", "--batch-size", "4", "--seq-len", "32"]
        .iter()
        .chain(extra)
    {
        command.push(a.to_string());
    }
    let mut env = Env::python(
        &command,
        "  max_restarts: 2",
        &format!("training:\n  keep_checkpoints: {KEEP}"),
    );
    env.worker_name = "train.py".into();
    env
}

#[test]
fn torchrun_two_ranks_stop_resume_kill_one_rank_restart_finish() {
    require_modules(&["torch"]);
    let mut env = Env::example("examples/torchrun/lavender.yaml", "train.py");
    env.serve();

    // 1. start → running with steps, two ranks under the torchrun agent.
    env.start(&[]);
    let first_run = env.run_dir();
    let st = env.wait_step(12, SLOW);
    assert_eq!(st["pipeline"]["state"], "running");
    let agent = env.worker_pid().unwrap();
    assert!(cmdline(agent).iter().any(|a| a.contains("torchrun")));
    assert_eq!(rank_pids(agent).len(), 2, "{:?}", cmdline(agent));
    say(format!(
        "torchrun: started, running at step {}",
        st["training"]["step"]
    ));

    // 2. stop → SIGTERM to the group; every rank stops after the same step; one save.
    let said = env.stop_saved();
    env.wait_state("stopped", SLOW);
    let finals: Vec<_> = events(&first_run)
        .into_iter()
        .filter(|e| e["kind"] == "final_saved")
        .collect();
    assert_eq!(finals.len(), 1, "rank 0 saves once: {finals:?}");
    let stop_step = step_of(&finals[0]);
    let stop_ckpt = finals[0]["path"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_string();
    assert!(said.contains(&stop_ckpt), "{said}");
    let stopped = assert_ranks_stopped_at(&env, 2, stop_step);
    say(format!(
        "torchrun: stop saved {stop_ckpt} at step {stop_step}; ranks: {stopped:?}"
    ));

    // 3. start --resume latest → continues from it.
    env.start(&["--resume", "latest"]);
    let run = env.run_dir();
    let loaded = wait_event(&env, &run, SLOW, "checkpoint_loaded", |e| {
        e["kind"] == "checkpoint_loaded"
    });
    assert_eq!(step_of(&loaded), stop_step);
    let after = wait_event(&env, &run, SLOW, "a save after the resume", |e| {
        e["kind"] == "checkpoint_saved" && step_of(e) > stop_step
    });
    say(format!(
        "torchrun: resumed from {stop_ckpt} (step {stop_step}); saved at step {}",
        step_of(&after)
    ));

    // 4. SIGKILL one rank → torchrun exits non-zero → restart from the newest checkpoint.
    let agent = env.worker_pid().unwrap();
    let ranks = rank_pids(agent);
    assert_eq!(ranks.len(), 2);
    let newest = complete(&run).last().unwrap().clone();
    send_signal(ranks[1], 9);
    say(format!(
        "torchrun: SIGKILL rank pid {} of agent {agent}; newest complete checkpoint {} (step {})",
        ranks[1], newest.0, newest.1
    ));
    let (restarted, resumed_step) = restarted_in(&env, &run, agent, SLOW);
    assert!(resumed_step >= newest.1);
    // torchrun exited non-zero.
    env.log_with(
        "ALERT step train crashed (exit code",
        Duration::from_secs(10),
    );
    say(format!(
        "torchrun: restarted as {restarted}, resumed from step {resumed_step}"
    ));

    // 5. → finished.
    let st = env.wait_state("finished", SLOW);
    assert_eq!(st["training"]["step"].as_u64(), Some(MAX_STEPS));
    say(format!("torchrun: finished at step {MAX_STEPS}"));

    wait_until(Duration::from_secs(10), "the last retention pass", || {
        complete(&run).len() <= KEEP + 1
    });
    let left = complete(&run);
    say(format!(
        "torchrun: retention kept {} complete checkpoint(s) {left:?}",
        left.len()
    ));
}

/// Whether `pid` is a live process (not a zombie) running the example's train.py.
fn rank_alive(pid: i32) -> bool {
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit(')')
                .next()?
                .split_whitespace()
                .next()
                .map(str::to_string)
        });
    state.is_some_and(|s| s != "Z" && s != "X")
        && cmdline(pid).iter().any(|a| a.ends_with("train.py"))
}

/// Zombies whose parent is `pid`.
fn zombies_of(pid: u32) -> Vec<i32> {
    children(pid as i32)
        .into_iter()
        .filter(|c| {
            std::fs::read_to_string(format!("/proc/{c}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit(')')
                        .next()?
                        .split_whitespace()
                        .next()
                        .map(str::to_string)
                })
                .as_deref()
                == Some("Z")
        })
        .collect()
}

/// The torchrun launcher alone SIGKILLed (as the OOM killer or a crash would kill
/// it): its ranks, each in a session of its own, must not live on and write into the
/// run beside the next generation. None is alive once the daemon restarts; the
/// restart resumes from a checkpoint that exists; the run finishes; no zombie is left.
/// The ranks set a parent-death signal themselves (`lavender_protocol`), so they die
/// with the launcher whatever the daemon does: what the daemon itself ends is tested
/// by `supervision::a_helper_with_its_own_environment_and_session_dies_with_its_worker`,
/// where no process sets one.
#[test]
fn the_launcher_sigkilled_leaves_no_rank_alive_and_the_run_finishes() {
    let max_steps: u64 = 200;
    let mut env = torchrun_env(max_steps, &["--eval-batches", "0"]);
    let daemon = env.serve();
    env.start(&[]);
    let run = env.run_dir();
    wait_event(&env, &run, SLOW, "a first checkpoint", |e| {
        e["kind"] == "checkpoint_saved" && step_of(e) >= 20
    });
    let agent = env.worker_pid().unwrap();
    let ranks = rank_pids(agent);
    assert_eq!(ranks.len(), 2, "{:?}", cmdline(agent));

    send_signal(agent, 9);
    say(format!(
        "torchrun: SIGKILL the launcher {agent} alone; its ranks {ranks:?}"
    ));
    wait_until(SLOW, "a restarted torchrun", || {
        env.worker_pid().is_some_and(|p| p != agent)
    });
    let restarted = env.worker_pid().unwrap();
    // The daemon reports the exit only once the whole generation is gone, so no rank
    // of the old launcher may be alive now, when the new one runs.
    let alive: Vec<i32> = ranks.iter().copied().filter(|p| rank_alive(*p)).collect();
    assert!(
        alive.is_empty(),
        "ranks of the killed launcher still alive beside the restart: {alive:?}"
    );
    let resume = resume_arg(&cmdline(restarted)).expect("the restart resumes");
    let resumed = lavender::checkpoint::resolve_resume(&resume, &env.data_root)
        .expect("the restart resumes from a checkpoint that exists");
    say(format!(
        "torchrun: no rank of {agent} left; restarted as {restarted} from {resume} (step {})",
        resumed.state.step
    ));

    let st = env.wait_state("finished", SLOW);
    assert_eq!(st["training"]["step"].as_u64(), Some(max_steps));
    let failed: Vec<_> = events(&run)
        .into_iter()
        .filter(|e| e["kind"] == "failed")
        .collect();
    assert!(failed.is_empty(), "no generation failed: {failed:?}");
    // The daemon reaps what it adopted (the ranks, the log relay once the log's
    // input ended) every 2 s: none is left a zombie for long.
    wait_until(
        Duration::from_secs(30),
        "no zombie child of the daemon",
        || zombies_of(daemon).is_empty(),
    );
    say(format!("torchrun: finished at step {max_steps}, no zombie"));
}
