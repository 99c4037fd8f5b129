//! The replay check with the real daemon and the real worker: a worker killed in
//! the middle of pretraining is restarted from its newest checkpoint and trains the
//! steps after it again; on the CPU they must give the same losses bit for bit.
//! A resume that forgets a piece of its state (the `--forget-on-resume` test hook:
//! the data position, or the random state with dropout on) gives others, and the
//! daemon says so: a `resume mismatch` decision naming the first replayed step, an
//! alert, the status's `training.replay`. The clean resume passes with nothing said.

use std::path::Path;
use std::time::Duration;

use lavender_testkit::Lavenderd;

const WORKER: &str = env!("CARGO_BIN_EXE_lavender-worker");
const T: Duration = Duration::from_secs(90);

/// The first worker hangs once step 30 is done (a checkpoint at 20 before it, the
/// steps after it in the run's record); every later one runs with `hook` (a flag
/// of the worker's, or nothing).
fn daemon(dir: &Path, hook: &str, model: &str, supervisor: &str) -> Lavenderd {
    lavender_testkit::training::write_tokens(&dir.join("data"));
    let marker = dir.join("first-worker-ran");
    let script = format!(
        "if [ -e {m} ]; then exec {WORKER} \"$@\" {hook}; else touch {m}; exec {WORKER} \"$@\" --hang-at-step 30; fi",
        m = marker.display()
    );
    let stages = "    - {name: pretrain, steps: 60, lr: 3.0e-3, checkpoint_every: 20}";
    let config = lavender_testkit::training::TrainOnly {
        worker: WORKER,
        model,
        keep_checkpoints: 3,
        stages,
        supervisor,
        notify: "",
        extra: "",
    }
    .yaml();
    let config = lavender_testkit::training::shell_worker(&config, WORKER, &script);
    let mut d = Lavenderd::with_real_worker(dir, &config);
    d.serve();
    d.start(&[]);
    d
}

/// Kills the first worker once it is at step 30 (the daemon restarts it at once).
fn kill_at_step_30(d: &Lavenderd) {
    d.wait_status(T, "the first worker at step 30", |st| {
        assert_ne!(st["pipeline"]["state"], "failed", "{st:#}");
        st["training"]["step"].as_u64() == Some(30)
    });
    let worker = d.worker_pid().unwrap();
    lavender_testkit::send_signal(-worker, 9);
}

/// Restarts at once; bit for bit (`auto` would be too, for `lavender-worker` named
/// as the command, but the command here is the shell that wraps it).
const RESTART_AT_ONCE: &str = "  restart_backoff_s: [0]\n  replay_tolerance: exact";

#[test]
fn a_clean_restart_replays_every_step_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let small = lavender_testkit::training::SMALL_MODEL;
    let d = daemon(dir.path(), "", small, RESTART_AT_ONCE);
    kill_at_step_30(&d);
    let st = d.wait_replay_verdict(T);
    let replay = &st["training"]["replay"];
    assert_eq!(replay["verdict"], "passed", "{st:#}");
    // From the checkpoint at step 20: steps 21 to 30 again.
    assert_eq!(replay["steps_checked"], 10, "{st:#}");
    assert_eq!(replay["largest_difference"], 0.0, "{st:#}");
    assert_eq!(replay["tolerance"], "exact", "{st:#}");
    let st = d.wait_state("finished", T);
    assert_eq!(st["training"]["replay"]["verdict"], "passed", "{st:#}");
    d.assert_no_resume_mismatch();
}

/// The data cursor not restored: the epoch's data starts over, so the first
/// replayed step trains another batch.
#[test]
fn a_resume_that_forgets_the_data_position_is_a_mismatch_at_the_first_replayed_step() {
    let dir = tempfile::tempdir().unwrap();
    let small = lavender_testkit::training::SMALL_MODEL;
    let d = daemon(
        dir.path(),
        "--forget-on-resume cursor",
        small,
        RESTART_AT_ONCE,
    );
    kill_at_step_30(&d);
    assert_mismatch_at_21(&d);
    // Alert (the default): training goes on.
    d.wait_state("finished", T);
}

/// The random state not restored, with dropout on: the first replayed step draws
/// other dropout masks. `on_resume_mismatch: stop` stops the pipeline.
#[test]
fn a_resume_that_forgets_the_random_state_is_a_mismatch_and_stop_stops_the_pipeline() {
    let dir = tempfile::tempdir().unwrap();
    let dropout = lavender_testkit::training::SMALL_MODEL.replace("dropout: 0.0", "dropout: 0.1");
    let supervisor = format!("{RESTART_AT_ONCE}\n  on_resume_mismatch: stop");
    let d = daemon(dir.path(), "--forget-on-resume rng", &dropout, &supervisor);
    kill_at_step_30(&d);
    assert_mismatch_at_21(&d);
    let st = d.wait_state("stopped", T);
    assert_eq!(st["training"]["replay"]["verdict"], "mismatch", "{st:#}");
}

fn assert_mismatch_at_21(d: &Lavenderd) {
    let st = d.wait_replay_verdict(T);
    let replay = &st["training"]["replay"];
    assert_eq!(replay["verdict"], "mismatch", "{st:#}");
    let said = replay["mismatch"].as_str().unwrap();
    assert!(said.starts_with("step 21 loss "), "{said}");
    let log = d.log_with("ALERT step train: the run resumed from", T);
    assert!(log.contains("step 21 loss"), "{log}");
    let decided = d.decisions();
    let mismatch = decided
        .iter()
        .find(|l| l["kind"] == "resume_mismatch")
        .unwrap_or_else(|| panic!("no resume_mismatch decision: {decided:?}"));
    assert_eq!(mismatch["saw"]["last_step"], 21, "{mismatch:#}");
    let out = d.run(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("RESUME MISMATCH"), "{text}");
}

/// No false alarm: the real worker (named as the command, so `auto` is bit for
/// bit) killed 20 times wherever it happens to be, each time restarted from its
/// newest checkpoint; every replay agrees, and the verdict outlives a graceful stop.
#[test]
fn twenty_kills_anywhere_replay_bit_for_bit_and_raise_nothing() {
    let dir = tempfile::tempdir().unwrap();
    lavender_testkit::training::write_tokens(&dir.path().join("data"));
    let stages = "    - {name: pretrain, steps: 4000, lr: 3.0e-3, checkpoint_every: 20}";
    let config = lavender_testkit::training::TrainOnly {
        worker: WORKER,
        model: lavender_testkit::training::SMALL_MODEL,
        keep_checkpoints: 3,
        stages,
        supervisor: "  restart_backoff_s: [0]\n  max_restarts: 100\n  max_same_failure: 100",
        notify: "",
        extra: "",
    }
    .yaml();
    let mut d = Lavenderd::with_real_worker(dir.path(), &config);
    d.serve();
    d.start(&[]);
    let (mut checked, mut last_pid, mut last_step) = (0, None, 0);
    for _ in 0..20 {
        // A worker of its own each time, a few steps past where the last one was
        // killed (or past the first checkpoint).
        let st = d.wait_status(T, "a new worker training", |st| {
            assert_ne!(st["pipeline"]["state"], "failed", "{st:#}");
            st["pipeline"]["pid"].as_u64().is_some()
                && st["pipeline"]["pid"].as_u64() != last_pid
                && st["training"]["running"] == true
                && st["training"]["step"].as_u64() > Some(last_step.max(20) + 5)
        });
        checked = st["training"]["replay"]["steps_checked"]
            .as_u64()
            .unwrap_or(0);
        last_pid = st["pipeline"]["pid"].as_u64();
        last_step = st["training"]["step"].as_u64().unwrap();
        lavender_testkit::send_signal(-(last_pid.unwrap() as i32), 9);
    }
    // The last worker past the steps its predecessor trained: its replay is whole.
    d.wait_status(T, "the last replay checked", |st| {
        assert_ne!(st["pipeline"]["state"], "failed", "{st:#}");
        st["pipeline"]["pid"].as_u64().is_some()
            && st["pipeline"]["pid"].as_u64() != last_pid
            && st["training"]["running"] == true
            && st["training"]["step"].as_u64() > Some(last_step + 5)
            && st["training"]["replay"]["verdict"] == "passed"
    });
    // 4,000 steps keep the run going through any number of kills on a fast
    // machine; a graceful stop ends it, whatever the machine's speed.
    d.stop_saved();
    let st = d.wait_state("stopped", T);
    let replay = &st["training"]["replay"];
    assert_eq!(replay["verdict"], "passed", "{st:#}");
    assert_eq!(replay["tolerance"], "exact", "{st:#}");
    assert!(replay["steps_checked"].as_u64() >= Some(checked), "{st:#}");
    assert!(
        replay["steps_checked"].as_u64() >= Some(20),
        "too few replayed steps to say anything: {st:#}"
    );
    eprintln!("20 kills: {replay}");
    d.assert_no_resume_mismatch();
}

/// A daemon killed in the middle of a replay: the first worker hangs after step 30
/// and is killed; the second replays 21 to 25 and hangs; the daemon is killed then
/// (a power cut of the daemon alone) and a new one adopts the hung worker, which is
/// killed too. The third worker replays 21 to 30 from the same checkpoint: the new
/// daemon compares them from the state the old one left, and every step agrees.
#[test]
fn a_daemon_restarted_in_the_middle_of_a_replay_goes_on_with_it() {
    let dir = tempfile::tempdir().unwrap();
    lavender_testkit::training::write_tokens(&dir.path().join("data"));
    let count = dir.path().join("workers");
    let script = format!(
        "n=$(cat {c} 2>/dev/null || echo 0); echo $((n + 1)) > {c}; \
         case $n in 0) exec {WORKER} \"$@\" --hang-at-step 30;; 1) exec {WORKER} \"$@\" --hang-at-step 25;; *) exec {WORKER} \"$@\";; esac",
        c = count.display()
    );
    let config = lavender_testkit::training::TrainOnly {
        worker: WORKER,
        model: lavender_testkit::training::SMALL_MODEL,
        keep_checkpoints: 3,
        stages: "    - {name: pretrain, steps: 60, lr: 3.0e-3, checkpoint_every: 20}",
        supervisor: RESTART_AT_ONCE,
        notify: "",
        extra: "",
    }
    .yaml();
    let config = lavender_testkit::training::shell_worker(&config, WORKER, &script);
    let mut d = Lavenderd::with_real_worker(dir.path(), &config);
    d.serve();
    d.start(&[]);
    kill_at_step_30(&d);
    let run = d.run_dir();
    let name = run.file_name().unwrap().to_string_lossy().into_owned();
    lavender_testkit::wait_until(T, "5 replayed steps checked", || {
        lavender::replay::Replay::read(&d.state_dir(), &name).is_some_and(|r| r.checked == 5)
    });
    let hung = d.worker_pid().unwrap();
    d.kill_daemons();
    d.serve();
    d.wait_status(T, "the hung worker adopted", |st| {
        st["pipeline"]["pid"].as_i64() == Some(hung as i64)
    });
    let st = d.status();
    assert_eq!(st["training"]["replay"]["verdict"], "checking", "{st:#}");
    assert_eq!(st["training"]["replay"]["steps_checked"], 5, "{st:#}");
    lavender_testkit::send_signal(-hung, 9);
    let st = d.wait_state("finished", T);
    let replay = &st["training"]["replay"];
    assert_eq!(replay["verdict"], "passed", "{st:#}");
    // 5 by the second worker, 10 by the third.
    assert_eq!(replay["steps_checked"], 15, "{st:#}");
    d.assert_no_resume_mismatch();
}
