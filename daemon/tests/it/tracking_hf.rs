//! The Hugging Face example reporting to trackers itself (`report_to`), supervised:
//! the daemon gives it one tracker run per lineage through the environment, so a
//! SIGKILL restart continues the run; the steps the restart trains again are kept
//! from the Trainer's reporters (`LavenderCallback.attach`), so no metric is written
//! twice; the daemon adds only the supervision events (`metrics: worker`).

use std::collections::BTreeSet;
use std::time::Duration;

use lavender_testkit::Env;
use lavender_testkit::mlflow::{Mlflow, events, steps};
use lavender_testkit::python::{hf_example, require_modules};

const SLOW: Duration = Duration::from_secs(240);

/// The example, `max_steps` steps saving every 10, reporting to `report_to`.
fn hf_env(report_to: &str, tracking: &str) -> Env {
    let mut command = hf_example(60, 10);
    command.extend(["--report-to".to_string(), report_to.to_string()]);
    Env::python(
        &command,
        "  restart_backoff_s: [0]",
        &format!("tracking:\n{tracking}"),
    )
}

/// Kills the worker once it has trained past its save and log at step 30: the Trainer
/// gives MLflow its logs in the background, so the kill can come before step 30's (or a
/// later one's) reached the server, or after it did and before the worker noted it.
fn kill_past_30(env: &Env) -> i32 {
    env.wait_step(31, SLOW);
    let pid = env.worker_pid().expect("a worker");
    lavender_testkit::send_signal(pid, 9);
    pid
}

#[test]
fn the_hf_trainer_reporting_to_mlflow_keeps_one_run_across_a_sigkill_with_no_metric_twice() {
    require_modules(&["mlflow"]);
    let m = Mlflow::start();
    let mut env = hf_env("mlflow", &m.yaml("hf", "worker"));
    env.serve();
    env.start(&[]);
    kill_past_30(&env);
    let st = env.wait_state("finished", SLOW);
    let mut runs = Vec::new();
    lavender_testkit::wait_until(SLOW, "the run's end told to MLflow", || {
        runs = m.runs("hf");
        runs.iter()
            .any(|r| events(r).iter().any(|e| e.contains("finished")))
    });
    assert_eq!(
        runs.len(),
        1,
        "one MLflow run across the restart: {runs:#?}"
    );
    let run = &runs[0];
    assert!(
        st["tracking"]["mlflow"]
            .as_str()
            .is_some_and(|l| l.ends_with(run["run_id"].as_str().unwrap())),
        "{st:#}"
    );
    // The Trainer logs `loss` every 5 steps: each once, over the whole run.
    let logged = steps(run, "loss");
    let unique: BTreeSet<u64> = logged.iter().copied().collect();
    assert_eq!(
        logged.len(),
        unique.len(),
        "a step logged twice: {logged:?}"
    );
    assert_eq!(
        unique,
        (1..=12).map(|i| i * 5).collect::<BTreeSet<u64>>(),
        "{logged:?}"
    );
    // The daemon wrote the events, not the metrics a second time.
    let said = events(run);
    assert!(said.iter().any(|e| e.contains(": restart: ")), "{said:#?}");
    assert!(
        run["metrics"].get("lavender/steps_per_s").is_none(),
        "metrics: worker: the daemon writes none: {:#}",
        run["metrics"]
    );
}

/// W&B offline ignores `resume`: each process writes its own offline-run folder. What
/// can be shown offline is that both workers of a SIGKILL restart ran under the one
/// id the daemon gave the lineage, so a sync continues one run.
#[test]
fn the_hf_trainer_reporting_to_wandb_offline_gets_one_run_id_across_a_sigkill() {
    require_modules(&["wandb"]);
    let mut env = hf_env(
        "wandb",
        "  wandb: {project: lavender-test, mode: offline}\n",
    );
    let wandb_dir = env.dir.path().join("wandb-files");
    std::fs::create_dir_all(&wandb_dir).unwrap();
    env.env
        .push(("WANDB_DIR".into(), wandb_dir.display().to_string()));
    env.serve();
    env.start(&[]);
    kill_past_30(&env);
    let st = env.wait_state("finished", SLOW);
    let id = st["tracking"]["wandb"]
        .as_str()
        .expect("the run id in the status");
    let folders: Vec<String> = std::fs::read_dir(wandb_dir.join("wandb"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("offline-run-"))
        .collect();
    assert!(folders.len() >= 2, "one folder per worker: {folders:?}");
    assert!(
        folders.iter().all(|f| f.ends_with(&format!("-{id}"))),
        "every worker ran as W&B run {id}: {folders:?}"
    );
}
