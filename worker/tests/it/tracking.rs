//! Experiment trackers with the real daemon, the real worker and a real MLflow
//! server: one tracker run per lineage across crash restarts and a stop and resume,
//! each step's metrics once, the supervision events on the run, the goodput at the
//! end, through a daemon killed and started again; the same scalars in TensorBoard
//! event files read by `tbparse`; a server down
//! for a minute costs the run nothing and the gap is said.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use lavender_testkit::Lavenderd;
use lavender_testkit::mlflow::{Mlflow, events, steps};
use serde_json::Value;

const WORKER: &str = env!("CARGO_BIN_EXE_lavender-worker");
const T: Duration = Duration::from_secs(120);

fn daemon(dir: &Path, steps: u64, tracking: &str) -> Lavenderd {
    lavender_testkit::training::write_tokens(&dir.join("data"));
    let stages =
        format!("    - {{name: pretrain, steps: {steps}, lr: 3.0e-3, checkpoint_every: 20}}");
    let extra = format!("tracking:\n{tracking}");
    let config = lavender_testkit::training::TrainOnly {
        worker: WORKER,
        model: lavender_testkit::training::SMALL_MODEL,
        keep_checkpoints: 3,
        stages: &stages,
        supervisor: "  restart_backoff_s: [0]\n  max_restarts: 100\n  max_same_failure: 100",
        notify: "",
        extra: &extra,
    }
    .yaml();
    let mut d = Lavenderd::with_real_worker(dir, &config);
    d.serve();
    d
}

/// The status once a worker other than `last_pid` has trained a few steps past
/// `after`, by its own heartbeat (the status's step may still be the killed one's).
fn worker_past(d: &Lavenderd, after: u64, last_pid: Option<u64>) -> Value {
    d.wait_status(T, "a worker training", |st| {
        assert_ne!(st["pipeline"]["state"], "failed", "{st:#}");
        let pid = st["pipeline"]["pid"].as_u64();
        let own = lavender::heartbeat::read(&lavender::heartbeat::path(&d.run_dir()))
            .is_ok_and(|hb| Some(u64::from(hb.pid)) == pid && hb.step > after + 5);
        pid.is_some() && pid != last_pid && st["training"]["running"] == true && own
    })
}

/// Kills the training worker once it has trained a few steps past `after`; returns
/// the step it had reached and its pid.
fn kill_worker_past(d: &Lavenderd, after: u64, last_pid: Option<u64>) -> (u64, Option<u64>) {
    let st = worker_past(d, after, last_pid);
    let pid = st["pipeline"]["pid"].as_u64();
    lavender_testkit::send_signal(-(pid.unwrap() as i32), 9);
    (st["training"]["step"].as_u64().unwrap(), pid)
}

/// The one run of `experiment` once the daemon told it `status`. The end goes after
/// the record's backlog (2,000 points a batch), which a loaded server takes slowly.
fn the_run(m: &Mlflow, experiment: &str, status: &str) -> Value {
    let mut runs = Vec::new();
    lavender_testkit::wait_until(3 * T, &format!("the MLflow run {status}"), || {
        runs = m.runs(experiment);
        runs.len() == 1 && runs[0]["status"] == status
    });
    assert_eq!(runs.len(), 1, "one MLflow run per lineage: {runs:#?}");
    runs.remove(0)
}

fn assert_each_step_once(run: &Value, key: &str, last: u64) {
    let logged = steps(run, key);
    let unique: BTreeSet<u64> = logged.iter().copied().collect();
    assert_eq!(
        logged.len(),
        unique.len(),
        "{key}: a step logged twice: {logged:?}"
    );
    assert_eq!(
        unique,
        (1..=last).collect::<BTreeSet<u64>>(),
        "{key}: every step once"
    );
}

#[test]
fn one_mlflow_run_across_two_kills_and_a_resume_each_step_once_and_tensorboard_agrees() {
    let m = Mlflow::start();
    let dir = tempfile::tempdir().unwrap();
    let tb = dir.path().join("tb");
    let tracking = format!(
        "{}  tensorboard: {{dir: '{}'}}\n",
        m.yaml("kills", "daemon"),
        tb.display()
    );
    const STEPS: u64 = 500;
    let mut d = daemon(dir.path(), STEPS, &tracking);
    d.start(&[]);
    let (step, pid) = kill_worker_past(&d, 20, None);
    let (step, pid) = kill_worker_past(&d, step, pid);
    // A stop (the worker saves) and a resume.
    worker_past(&d, step, pid);
    let out = d.run(&["stop"]);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        std::fs::read_to_string(d.daemon_log()).unwrap_or_default()
    );
    d.wait_state("stopped", T);
    let killed = the_run(&m, "kills", "KILLED");
    assert!(
        events(&killed).iter().any(|e| e.contains("stopped")),
        "{:#?}",
        events(&killed)
    );
    d.start(&["--resume", "latest"]);
    // The daemon killed mid-run (the worker goes on) and started again: it adopts
    // the worker, and the tracker goes on from what MLflow had taken.
    let st = worker_past(&d, step, pid);
    d.kill_daemons();
    d.serve();
    d.wait_status(T, "the worker adopted", |s| {
        s["pipeline"]["pid"] == st["pipeline"]["pid"] || s["pipeline"]["state"] == "finished"
    });
    let st = d.wait_state("finished", T);
    let link = st["tracking"]["mlflow"].as_str().unwrap_or_default();
    let run = the_run(&m, "kills", "FINISHED");
    assert!(
        link.ends_with(run["run_id"].as_str().unwrap()),
        "the status links the run: {st:#}"
    );
    assert_each_step_once(&run, "loss", STEPS);
    assert_each_step_once(&run, "learning_rate", STEPS);
    let said = events(&run);
    let restarts = said.iter().filter(|e| e.contains(": restart: ")).count();
    assert_eq!(restarts, 2, "two restarts: {said:#?}");
    for what in ["stopped", "finished"] {
        assert!(said.iter().any(|e| e.contains(what)), "{what}: {said:#?}");
    }
    assert!(
        run["metrics"]["lavender/goodput"]
            .as_array()
            .is_some_and(|h| !h.is_empty()),
        "the goodput at the end: {run:#}"
    );
    assert!(
        run["params"]["training.keep_checkpoints"] == "3",
        "the config as params: {:#}",
        run["params"]
    );

    // TensorBoard's event files, read as written (tbparse).
    let lineage = st["tracking"]["lineage"].as_str().unwrap().to_string();
    let scalars = tbparse(&tb.join(&lineage));
    let loss: Vec<u64> = scalars["loss"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect();
    let unique: BTreeSet<u64> = loss.iter().copied().collect();
    assert_eq!(loss.len(), unique.len(), "tensorboard: a step twice");
    assert_eq!(unique, (1..=STEPS).collect::<BTreeSet<u64>>());
    let texts = scalars["texts"].as_array().unwrap();
    assert!(
        texts
            .iter()
            .filter(|t| t.as_str().is_some_and(|t| t.contains(": restart: ")))
            .count()
            == 2,
        "{texts:#?}"
    );
}

/// `tbparse`'s reading of a TensorBoard run folder: each scalar tag's steps, and the
/// text summaries (`texts`).
fn tbparse(folder: &Path) -> Value {
    lavender_testkit::python::require_modules(&["tbparse"]);
    let code = r#"
import json, sys
from tbparse import SummaryReader
r = SummaryReader(sys.argv[1])
out = {}
for tag, group in r.scalars.groupby("tag"):
    out[tag] = [int(s) for s in group["step"]]
out["texts"] = [str(v) for v in r.text["value"]] if len(r.text) else []
print(json.dumps(out))
"#;
    let out = Command::new(lavender_testkit::python::venv_tool("python"))
        .args(["-c", code])
        .arg(folder)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tbparse: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The server frozen for a minute (it takes connections and answers nothing; the
/// requests queued meanwhile are taken when it thaws, their answers long given up
/// on), then killed and started again: the run trains on throughout, no step is
/// logged twice, and the gap is said.
#[test]
fn a_tracker_down_for_a_minute_costs_the_run_nothing_and_the_gap_is_said() {
    let mut m = Mlflow::start();
    let dir = tempfile::tempdir().unwrap();
    const STEPS: u64 = 100_000;
    let d = daemon(dir.path(), STEPS, &m.yaml("outage", "daemon"));
    d.start(&[]);
    d.wait_status(T, "the MLflow run linked", |st| {
        st["tracking"]["mlflow"].is_string() && st["training"]["step"].as_u64() > Some(20)
    });
    m.freeze(true);
    let down = Instant::now();
    let st = d.wait_status(T, "the tracker said unreachable", |st| {
        st["tracking"]["unreachable"].is_string()
    });
    let at = st["training"]["step"].as_u64().unwrap();
    // A minute of training with the server frozen.
    lavender_testkit::wait_until(Duration::from_secs(90), "a minute down", || {
        let st = d.status();
        assert_eq!(st["pipeline"]["state"], "running", "{st:#}");
        down.elapsed() >= Duration::from_secs(60)
    });
    let st = d.status();
    assert_eq!(st["training"]["running"], true, "{st:#}");
    assert!(
        st["training"]["step"].as_u64() > Some(at),
        "trained on: {st:#}"
    );
    m.freeze(false);
    d.wait_status(T, "the tracker back", |st| {
        st["tracking"]["unreachable"].is_null()
    });
    // Then gone (killed) and back on the same store.
    m.kill();
    d.wait_status(T, "unreachable again", |st| {
        st["tracking"]["unreachable"].is_string()
    });
    m.up();
    d.wait_status(T, "the tracker back again", |st| {
        st["tracking"]["unreachable"].is_null()
    });
    d.stop_saved();
    d.wait_state("stopped", T);
    let run = the_run(&m, "outage", "KILLED");
    let logged = steps(&run, "loss");
    let unique: BTreeSet<u64> = logged.iter().copied().collect();
    let kinds: Vec<String> = d
        .decisions()
        .iter()
        .map(|l| l["kind"].to_string())
        .collect();
    if logged.len() != unique.len() {
        let h = run["metrics"]["loss"].as_array().unwrap();
        let mut seen = std::collections::BTreeMap::new();
        let mut dups = Vec::new();
        for p in h {
            let step = p[0].as_u64().unwrap();
            if let Some(first) = seen.insert(step, p.clone()) {
                dups.push((first, p.clone()));
            }
        }
        let n = dups.len();
        let (a, b) = (dups.first().cloned(), dups.last().cloned());
        panic!(
            "{n} steps twice: first {a:?} last {b:?}; decisions: {kinds:?}\n{}",
            std::fs::read_to_string(d.daemon_log())
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("tracking"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    let last = *unique.last().unwrap();
    assert_eq!(
        unique,
        (1..=last).collect::<BTreeSet<u64>>(),
        "the steps of the outage were sent when it came back"
    );
    assert!(last > at, "steps past the outage's start: {last} vs {at}");
    let said = events(&run);
    assert!(
        said.iter()
            .filter(|e| e.contains("tracker unreachable from"))
            .count()
            >= 2,
        "each gap said: {said:#?}"
    );
    let log = std::fs::read_to_string(d.daemon_log()).unwrap();
    assert!(log.contains("did not take the run's metrics"), "{log}");
    assert!(log.contains("answers again after"), "{log}");
}
