//! The Slurm launch backend against a real single-node Slurm started by
//! `scripts/slurm/start.sh`: submit → running with a job id → stop saves → start
//! resumes; the time limit's notice saves, requeues and resumes; a crashed job is
//! restarted from the latest checkpoint; a 2-task job where rank 0 writes the
//! heartbeat; a restarted daemon adopts the running job; a DDP script on two ranks
//! under real torchrun (examples/torchrun with its Slurm launcher) stops with one
//! save and resumes as a new job. The scenarios run at once (Slurm's time-limit check is the slow part).
//! Slurm that cannot be started fails the test with the script's output.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lavender_testkit::*;
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Job ids seen by any scenario, cancelled at the end whatever happened.
static JOBS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn scontrol_job(id: &str) -> String {
    let out = Command::new("scontrol")
        .args(["-o", "show", "job", id])
        .output()
        .expect("run scontrol");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn field(line: &str, key: &str) -> Option<String> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .map(str::to_string)
}

fn resume_arg(argv: &[String]) -> Option<String> {
    argv.iter()
        .position(|a| a == "--resume")
        .map(|i| argv[i + 1].clone())
}

fn events(run_dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(run_dir.join("events.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A daemon whose config submits to the local Slurm.
fn slurm_env(worker_args: &[&str], slurm: &str) -> Env {
    slurm_env_with_grace(worker_args, slurm, 59)
}

/// As [`slurm_env`], with the time-limit notice `grace_s` seconds before the limit.
fn slurm_env_with_grace(worker_args: &[&str], slurm: &str, grace_s: u32) -> Env {
    let launch = format!(
        "launch:\n  backend: slurm\n  slurm:\n    poll_interval_s: 1\n    grace_s: {grace_s}\n{slurm}"
    );
    let mut env = Env::new(worker_args, &launch, "[train]");
    env.backoff_ms = "200".into();
    env.serve();
    env
}

/// The status, remembering its job id for the clean-up.
fn status(env: &Env) -> Value {
    let st = env.status();
    if let Some(id) = st["pipeline"]["slurm"]["job_id"].as_str() {
        let mut jobs = JOBS.lock().unwrap();
        if !jobs.iter().any(|j| j == id) {
            jobs.push(id.to_string());
        }
    }
    st
}

fn wait_running_job(env: &Env, min_step: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let last = status(env);
        if last["pipeline"]["slurm"]["state"] == "RUNNING"
            && last["training"]["step"].as_u64().unwrap_or(0) >= min_step
        {
            return last;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for a running Slurm job that trains past step {min_step}; \
             the last status:\n{last:#}\nthe daemon's log:\n{}",
            std::fs::read_to_string(env.daemon_log()).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn stop_saves(env: &Env) -> String {
    let said = env.stop_saved();
    let saved = events(&env.run_dir())
        .into_iter()
        .rfind(|e| e["kind"] == "final_saved")
        .expect("the worker saved on the stop");
    let path = saved["path"].as_str().unwrap().to_string();
    assert!(said.contains(&path), "stop names the save {path}: {said}");
    assert!(Path::new(&path).join("trainer_state.json").is_file());
    path
}

fn submit_stop_and_resume() {
    let env = slurm_env(&["--total-steps", "100000", "--step-ms", "20"], "");
    let out = env.run(&["start"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let st = wait_running_job(&env, 5);
    assert_eq!(st["pipeline"]["running"], true);
    assert_eq!(st["pipeline"]["pid"], Value::Null, "no local pid for a job");
    assert_eq!(st["pipeline"]["state"], "running");
    let job = st["pipeline"]["slurm"]["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(st["pipeline"]["slurm"]["node"].is_string(), "{st:#}");
    let info = scontrol_job(&job);
    assert_eq!(field(&info, "JobName").as_deref(), Some("lavender-train"));
    assert_eq!(field(&info, "Requeue").as_deref(), Some("1"), "{info}");

    let saved = stop_saves(&env);
    let st = status(&env);
    assert_eq!(st["pipeline"]["state"], "stopped");
    assert_eq!(st["pipeline"]["running"], false);
    assert_eq!(st["pipeline"]["slurm"], Value::Null);
    let info = scontrol_job(&job);
    assert_eq!(
        field(&info, "JobState").as_deref(),
        Some("COMPLETED"),
        "the worker saved and the job ended by itself: {info}"
    );
    let saved_step: u64 = serde_json::from_str::<Value>(
        &std::fs::read_to_string(Path::new(&saved).join("trainer_state.json")).unwrap(),
    )
    .unwrap()["step"]
        .as_u64()
        .unwrap();

    let out = env.run(&["start", "--resume", "latest"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let st = wait_running_job(&env, saved_step + 1);
    let job2 = st["pipeline"]["slurm"]["job_id"].as_str().unwrap();
    assert_ne!(job2, job, "a new job");
    let calls = env.train_calls();
    assert_eq!(
        resume_arg(calls.last().unwrap()).as_deref(),
        Some(saved.as_str())
    );
    let loaded = events(&env.run_dir())
        .into_iter()
        .find(|e| e["kind"] == "checkpoint_loaded")
        .expect("the new job resumed");
    assert_eq!(loaded["step"], saved_step);
    stop_saves(&env);
}

fn a_restarted_daemon_adopts_the_job() {
    let mut env = slurm_env(&["--total-steps", "100000", "--step-ms", "20"], "");
    let out = env.run(&["start"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let st = wait_running_job(&env, 3);
    let job = st["pipeline"]["slurm"]["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    env.kill_daemons();
    let info = scontrol_job(&job);
    assert_eq!(
        field(&info, "JobState").as_deref(),
        Some("RUNNING"),
        "training outlives the daemon: {info}"
    );
    env.serve();
    let st = wait_running_job(&env, 0);
    assert_eq!(
        st["pipeline"]["slurm"]["job_id"],
        job.as_str(),
        "the same job"
    );
    let log = std::fs::read_to_string(env.daemon_log()).unwrap();
    assert!(log.contains("re-adopted"), "{log}");
    stop_saves(&env);
    assert_eq!(status(&env)["pipeline"]["state"], "stopped");
}

fn time_limit_saves_requeues_and_resumes() {
    // Slurm checks time limits every 30 s, in its own phase, and sends the notice at the
    // first check less than grace + 30 s before the limit. A requeued run's clock starts
    // again, at a moment unrelated to that phase (when the scheduler releases it). With a
    // 1-minute limit and a 5 s grace, every run, the first and the requeued one, trains
    // at least 60 - 5 - 30 = 25 s before its notice and is killed no sooner than 30 s
    // after it, whatever the phase and whatever the machine's speed. (A grace of 30 s
    // made the requeued run's notice come at the first check after it started: 1 s later
    // when the scheduler released it just before a check.)
    let env = slurm_env_with_grace(
        &[
            "--total-steps",
            "100000",
            "--step-ms",
            "20",
            "--checkpoint-every",
            "100000",
        ],
        "    time_limit: \"1\"\n",
        5,
    );
    let out = env.run(&["start"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let st = wait_running_job(&env, 1);
    let job = st["pipeline"]["slurm"]["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        field(&scontrol_job(&job), "TimeLimit").as_deref(),
        Some("00:01:00")
    );
    let run_dir = env.run_dir();
    // The requeue, observed by what it leaves behind: the worker's save on the notice,
    // then the requeued run loading it. Meanwhile every status is sampled.
    let mut seen: Vec<(String, Option<String>)> = Vec::new();
    wait_until(
        Duration::from_secs(180),
        "the requeued job to resume",
        || {
            let st = status(&env);
            if let Some(state) = st["pipeline"]["slurm"]["state"].as_str() {
                let reason = st["pipeline"]["slurm"]["reason"]
                    .as_str()
                    .map(str::to_string);
                if seen.last().map(|(s, r)| (s.as_str(), r)) != Some((state, &reason)) {
                    seen.push((state.to_string(), reason));
                }
            }
            env.train_calls().len() >= 2
                && events(&run_dir)
                    .iter()
                    .any(|e| e["kind"] == "checkpoint_loaded")
        },
    );
    let evs = events(&run_dir);
    let saved = evs
        .iter()
        .find(|e| e["kind"] == "final_saved")
        .expect("the notice made the worker save");
    let calls = env.train_calls();
    assert_eq!(resume_arg(&calls[0]), None);
    assert_eq!(
        resume_arg(&calls[1]).as_deref(),
        Some(run_dir.to_str().unwrap()),
        "the requeued job resumes from the run's latest checkpoint"
    );
    let loaded = evs
        .iter()
        .find(|e| e["kind"] == "checkpoint_loaded")
        .unwrap();
    assert_eq!(loaded["step"], saved["step"]);
    let info = scontrol_job(&job);
    assert_eq!(field(&info, "Restarts").as_deref(), Some("1"), "{info}");
    let log = std::fs::read_to_string(st_log(&env)).unwrap();
    assert!(log.contains("back to the queue"), "{log}");

    // The status followed the job through the requeue: running, then waiting with
    // Slurm's reason (a requeued job waits at least cred_expire + 1 = 6 s for its
    // BeginTime), a running job with none.
    assert_eq!(
        seen.first().map(|s| s.0.as_str()),
        Some("RUNNING"),
        "{seen:?}"
    );
    assert!(
        seen.iter()
            .any(|(s, r)| s == "PENDING" && r.as_deref() == Some("BeginTime")),
        "the requeued job shows PENDING (BeginTime): {seen:?}"
    );
    for (state, reason) in &seen {
        if state == "RUNNING" {
            assert_eq!(reason, &None, "{seen:?}");
        }
    }
    // The requeued run trains past the save, as the same job and without counting as a crash.
    let saved_step = saved["step"].as_u64().unwrap();
    let st = wait_running_job(&env, saved_step + 1);
    assert_eq!(
        st["pipeline"]["slurm"]["job_id"],
        job.as_str(),
        "the same job, requeued"
    );
    assert_eq!(st["pipeline"]["restarts"], 0, "a requeue is not a crash");
    // The daemon's own watch followed it too (it polls each second; the requeue leaves the job
    // pending for at least 6 s): every state it saw is in its log, in order, and the
    // status above showing RUNNING again means it has seen the second run.
    let daemon_states = job_states_logged(&env, &job);
    let first_run = daemon_states.iter().position(|s| s == "RUNNING");
    let between = first_run.and_then(|i| {
        daemon_states[i + 1..]
            .iter()
            .position(|s| s == "RUNNING")
            .map(|j| &daemon_states[i + 1..i + 1 + j])
    });
    assert!(
        between.is_some_and(|b| b.iter().any(|s| s == "PENDING")),
        "the daemon saw RUNNING, then the requeued job PENDING, then RUNNING again: {daemon_states:?}"
    );

    stop_saves(&env);
}

/// The states of `job` the daemon logged (one line per change it saw), in order.
fn job_states_logged(env: &Env, job: &str) -> Vec<String> {
    std::fs::read_to_string(env.daemon_log())
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("Slurm job") && l.contains(&format!("job_id={job} ")))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|kv| kv.strip_prefix("state="))
                .map(str::to_string)
        })
        .collect()
}

fn st_log(env: &Env) -> PathBuf {
    PathBuf::from(env.pipeline_json()["log_file"].as_str().unwrap())
}

fn crashed_job_restarts_from_latest() {
    let env = slurm_env(
        &[
            "--total-steps",
            "40",
            "--step-ms",
            "20",
            "--checkpoint-every",
            "5",
            "--crash-after",
            "12",
            "--crash-times",
            "1",
        ],
        "",
    );
    let out = env.run(&["start"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let first = PipelineJob::of(&env);
    wait_until(Duration::from_secs(60), "the pipeline to finish", || {
        status(&env)["pipeline"]["state"] == "finished"
    });
    let st = status(&env);
    assert_eq!(st["pipeline"]["restarts"], 1);
    assert_eq!(st["training"]["step"], 40);
    let info = scontrol_job(&first.0);
    assert_eq!(
        field(&info, "JobState").as_deref(),
        Some("FAILED"),
        "{info}"
    );
    assert_eq!(field(&info, "ExitCode").as_deref(), Some("3:0"), "{info}");
    let calls = env.train_calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    let resume = resume_arg(&calls[1]).expect("the restart resumes");
    assert!(
        resume.starts_with(env.run_dir().to_str().unwrap()),
        "{resume}"
    );
    assert!(Path::new(&resume).join("trainer_state.json").is_file());
}

/// examples/torchrun under the Slurm backend, as docs/PYTHON.md shows it: the job's
/// task runs `slurm-torchrun.sh`, a torchrun agent with two ranks meeting in a c10d
/// rendezvous on the job's node. Stop → the SIGTERM reaches both ranks through srun
/// and torchrun, they stop after the same step, rank 0 saves once and the job
/// completes; `start --resume latest` → a new job loads that save.
fn torchrun_job_stops_with_one_save_and_resumes() {
    use lavender_testkit::python::*;
    require_modules(&["torch"]);
    let slow = Duration::from_secs(300);
    let command: Vec<String> = [
        example("torchrun/slurm-torchrun.sh"),
        venv_tool("torchrun"),
        "--nproc_per_node=2".into(),
        example("torchrun/train.py"),
    ]
    .into_iter()
    .chain(
        [
            "--max-steps",
            "100000",
            "--save-every",
            "100000",
            "--batch-size",
            "4",
            "--seq-len",
            "32",
        ]
        .map(String::from),
    )
    .collect();
    let mut env = Env::python(
        &command,
        "",
        "launch:\n  backend: slurm\n  slurm:\n    poll_interval_s: 1\n    grace_s: 59\n",
    );
    env.worker_name = "slurm-torchrun".into();
    env.serve();
    env.start(&[]);
    let mut st = Value::Null;
    wait_until(slow, "a running torchrun job that trains", || {
        st = env.status();
        st["pipeline"]["slurm"]["state"] == "RUNNING"
            && st["training"]["step"].as_u64().unwrap_or(0) >= 3
    });
    let job = st["pipeline"]["slurm"]["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    JOBS.lock().unwrap().push(job.clone());
    let run = env.run_dir();

    let said = env.stop_saved();
    let finals: Vec<Value> = events(&run)
        .into_iter()
        .filter(|e| e["kind"] == "final_saved")
        .collect();
    assert_eq!(finals.len(), 1, "rank 0 saves once: {finals:?}");
    let saved = finals[0]["path"].as_str().unwrap().to_string();
    assert!(said.contains(&saved), "stop names the save {saved}: {said}");
    let stop_step = step_of(&finals[0]);
    assert_ranks_stopped_at(&env, 2, stop_step);
    // The stop is judged by the save, not by the exit code: torchrun's agent ends with
    // exit code 1 whenever it was sent SIGTERM, even after its ranks saved and exited
    // 0, so Slurm records the job FAILED (1:0) while the pipeline is `stopped`. Now and
    // then the agent aborts while its interpreter exits after that (`terminate called
    // without an active exception`, SIGABRT: 134:0). Either way the job ended by
    // itself; lavenderd cancelling it would leave it CANCELLED, a signal ends in `:N`.
    assert_eq!(env.status()["pipeline"]["state"], "stopped");
    let info = scontrol_job(&job);
    let ended = (
        field(&info, "JobState").unwrap_or_default(),
        field(&info, "ExitCode").unwrap_or_default(),
    );
    assert!(
        [("COMPLETED", "0:0"), ("FAILED", "1:0"), ("FAILED", "134:0")]
            .contains(&(ended.0.as_str(), ended.1.as_str())),
        "the job ended by itself after the save: {info}\n{}",
        env.worker_log()
    );
    say(format!(
        "torchrun under Slurm: job {job} stopped after step {stop_step}, saved {saved}; Slurm: {} {}",
        ended.0, ended.1
    ));

    env.start(&["--resume", "latest"]);
    // The resumed job trains into a new run directory, from the save.
    let resumed = env.run_dir();
    assert_ne!(resumed, run);
    let loaded = wait_event(&env, &resumed, slow, "checkpoint_loaded", |e| {
        e["kind"] == "checkpoint_loaded"
    });
    assert_eq!(step_of(&loaded), stop_step);
    wait_until(slow, "the resumed job to train past the save", || {
        st = env.status();
        st["pipeline"]["slurm"]["state"] == "RUNNING"
            && st["training"]["step"].as_u64().unwrap_or(0) > stop_step
    });
    let job2 = st["pipeline"]["slurm"]["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    JOBS.lock().unwrap().push(job2.clone());
    assert_ne!(job2, job, "a new job");
    env.stop_saved();
}

/// The job id of the first step, as soon as it is known.
struct PipelineJob(String);

impl PipelineJob {
    fn of(env: &Env) -> PipelineJob {
        let mut id = None;
        wait_until(Duration::from_secs(30), "a job id", || {
            id = env.pipeline_json()["worker"]["slurm"]["job_id"]
                .as_str()
                .map(str::to_string);
            id.is_some()
        });
        let id = id.unwrap();
        JOBS.lock().unwrap().push(id.clone());
        PipelineJob(id)
    }
}

fn two_tasks_rank_zero_writes() {
    let env = slurm_env(
        &[
            "--total-steps",
            "60",
            "--step-ms",
            "20",
            "--checkpoint-every",
            "20",
        ],
        "    ntasks: 2\n",
    );
    let out = env.run(&["start"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let job = PipelineJob::of(&env);
    wait_until(Duration::from_secs(60), "the pipeline to finish", || {
        status(&env)["pipeline"]["state"] == "finished"
    });
    let info = scontrol_job(&job.0);
    assert_eq!(field(&info, "NumTasks").as_deref(), Some("2"), "{info}");
    let lines: Vec<Value> = std::fs::read_to_string(env.data_root.join("fake-worker-calls.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut ranks: Vec<u64> = lines.iter().map(|l| l["rank"].as_u64().unwrap()).collect();
    ranks.sort();
    assert_eq!(ranks, vec![0, 1], "one process per task: {lines:?}");
    let rank0 = lines.iter().find(|l| l["rank"] == 0).unwrap()["pid"].clone();
    let hb: Value = serde_json::from_str(
        &std::fs::read_to_string(env.run_dir().join("heartbeat.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(hb["pid"], rank0, "rank 0 writes the heartbeat");
    assert_eq!(hb["state"], "finished");
    let starts = events(&env.run_dir())
        .iter()
        .filter(|e| e["kind"] == "run_started")
        .count();
    assert_eq!(starts, 1, "only rank 0 writes events");
}

#[test]
fn slurm_backend_end_to_end() {
    let started = Instant::now();
    let ours = !daemon_running("slurmctld.pid", "slurmctld");
    let out = Command::new("bash")
        .arg(repo().join("scripts/slurm/start.sh"))
        .output()
        .expect("run scripts/slurm/start.sh");
    assert!(
        out.status.success(),
        "could not start the test Slurm with scripts/slurm/start.sh (it needs root, or \
         slurmctld, slurmd, slurm-client and munge installed: see scripts/ci-deps.sh):\n{}{}",
        stdout(&out),
        stderr(&out)
    );
    let scenarios: [(&str, fn()); 6] = [
        ("submit_stop_and_resume", submit_stop_and_resume),
        (
            "a_restarted_daemon_adopts_the_job",
            a_restarted_daemon_adopts_the_job,
        ),
        (
            "time_limit_saves_requeues_and_resumes",
            time_limit_saves_requeues_and_resumes,
        ),
        (
            "crashed_job_restarts_from_latest",
            crashed_job_restarts_from_latest,
        ),
        ("two_tasks_rank_zero_writes", two_tasks_rank_zero_writes),
        (
            "torchrun_job_stops_with_one_save_and_resumes",
            torchrun_job_stops_with_one_save_and_resumes,
        ),
    ];
    // `SLURM_E2E_ONLY=<name>` runs one scenario (when reproducing a failure).
    let only = std::env::var("SLURM_E2E_ONLY").ok();
    let handles: Vec<_> = scenarios
        .iter()
        .filter(|(name, _)| only.as_deref().is_none_or(|o| o == *name))
        .map(|(name, f)| (*name, std::thread::spawn(*f)))
        .collect();
    let failed: Vec<&str> = handles
        .into_iter()
        .filter_map(|(name, h)| h.join().is_err().then_some(name))
        .collect();
    for id in JOBS.lock().unwrap().iter() {
        let _ = Command::new("scancel").arg(id).status();
    }
    if ours {
        let _ = Command::new("bash")
            .arg(repo().join("scripts/slurm/stop.sh"))
            .status();
    }
    eprintln!("slurm end-to-end: {:.1} s", started.elapsed().as_secs_f64());
    assert!(failed.is_empty(), "failed scenarios: {failed:?}");
}

/// True when the test Slurm's daemon `name` runs already (then it is left running).
fn daemon_running(pidfile: &str, name: &str) -> bool {
    let base = std::env::var("SLURM_BASE_DIR").unwrap_or_else(|_| "/tmp/lavender-slurm".into());
    std::fs::read_to_string(Path::new(&base).join("run").join(pidfile))
        .ok()
        .and_then(|p| p.trim().parse::<u32>().ok())
        .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).ok())
        .is_some_and(|comm| comm.trim() == name)
}
