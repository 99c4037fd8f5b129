//! `lavenderd drill` with the real worker: a finished run's kept checkpoint resumed
//! in a sandbox trains the steps after it as the run did, and the drill wrote
//! nowhere but its verdict (the data root listed before and after); a worker whose
//! resume forgets its data position (the `--forget-on-resume` test hook) fails the
//! drill naming the first step, and `lavenderd checkpoints` says which passed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lavender_testkit::Lavenderd;

const WORKER: &str = env!("CARGO_BIN_EXE_lavender-worker");
const T: Duration = Duration::from_secs(90);

/// A finished 60-step run (checkpoints at 20 and 40, the final at 60) whose worker
/// command adds `hook`; the daemon is gone after, so only the drill writes.
fn finished_run(dir: &Path, hook: &str) -> Lavenderd {
    lavender_testkit::training::write_tokens(&dir.join("data"));
    let config = hooked_config(
        hook,
        "    - {name: pretrain, steps: 60, lr: 3.0e-3, checkpoint_every: 20}",
        "  replay_tolerance: exact",
    );
    let mut d = Lavenderd::with_real_worker(dir, &config);
    d.serve();
    d.start(&[]);
    d.wait_state("finished", T);
    d.wait_status(T, "every checkpoint verified", |st| {
        st["training"]["verified_checkpoints"] == 3
    });
    d.terminate_daemons();
    d
}

/// Training only, the worker's command a shell adding `hook` to its arguments.
fn hooked_config(hook: &str, stages: &str, supervisor: &str) -> String {
    let config = lavender_testkit::training::TrainOnly {
        worker: WORKER,
        model: lavender_testkit::training::SMALL_MODEL,
        keep_checkpoints: 5,
        stages,
        supervisor,
        notify: "",
        extra: "",
    }
    .yaml();
    let script = format!("exec {WORKER} \"$@\" {hook}");
    lavender_testkit::training::shell_worker(&config, WORKER, &script)
}

/// Every file under `root`: its size and modification time.
fn listing(root: &Path) -> BTreeMap<PathBuf, (u64, std::time::SystemTime)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let md = e.metadata().unwrap();
            if md.is_dir() {
                stack.push(e.path());
            } else {
                out.insert(e.path(), (md.len(), md.modified().unwrap()));
            }
        }
    }
    out
}

fn out(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn a_drill_resumes_a_kept_checkpoint_as_the_run_trained_and_writes_nowhere_else() {
    let dir = tempfile::tempdir().unwrap();
    let d = finished_run(dir.path(), "");
    let before = listing(&d.data_root);
    let drilled = d.run(&["drill", "--steps", "5"]);
    let said = out(&drilled);
    assert!(drilled.status.success(), "{said}");
    assert!(
        said.contains(
            "drill passed: 5 step(s) as the run trained them (exact; largest difference 0.00e0)"
        ),
        "{said}"
    );
    let after = listing(&d.data_root);
    // Only the verdict beside the checkpoint (the newest the run trained past: 40).
    let added: Vec<&PathBuf> = after.keys().filter(|p| !before.contains_key(*p)).collect();
    assert_eq!(added.len(), 1, "{added:?}");
    let name = added[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with(".drill.pretrain-"), "{name}");
    let changed: Vec<&PathBuf> = before
        .iter()
        .filter(|(p, v)| after.get(*p) != Some(v))
        .map(|(p, _)| p)
        .collect();
    assert!(changed.is_empty(), "the drill changed {changed:?}");
    let listed = out(&d.run(&["checkpoints"]));
    assert_eq!(listed.matches("verified, drilled").count(), 1, "{listed}");
}

#[test]
fn a_drill_of_a_resume_that_forgets_its_data_position_fails_naming_the_step() {
    let dir = tempfile::tempdir().unwrap();
    let d = finished_run(dir.path(), "--forget-on-resume cursor");
    let first = lavender::checkpoint::list_run_checkpoints(&d.run_dir()).unwrap()[0].clone();
    assert_eq!(first.state.step, 20);
    let drilled = d.run(&["drill", "--checkpoint", &first.name]);
    let said = out(&drilled);
    assert_eq!(drilled.status.code(), Some(1), "{said}");
    assert!(
        said.contains("DRILL FAILED") && said.contains("step 21 loss"),
        "{said}"
    );
    let listed = out(&d.run(&["checkpoints"]));
    assert!(
        listed.contains("verified, drill failed: step 21 loss"),
        "{listed}"
    );
}

/// A training daemon with `supervisor.drill: {every_checkpoints: 1}`: 400 steps, a
/// checkpoint every 20, the worker command adding `hook`.
fn drilling_daemon(dir: &Path, hook: &str) -> Lavenderd {
    lavender_testkit::training::write_tokens(&dir.join("data"));
    let config = hooked_config(
        hook,
        "    - {name: pretrain, steps: 2000, lr: 3.0e-3, checkpoint_every: 20}",
        "  replay_tolerance: exact\n  drill: {every_checkpoints: 1}",
    );
    let mut d = Lavenderd::with_real_worker(dir, &config);
    d.serve();
    d.start(&[]);
    d
}

/// The drill records of the run: (checkpoint, passed).
fn drilled(run: &Path) -> Vec<(String, bool)> {
    let Ok(entries) = std::fs::read_dir(run) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let ck = name
                .strip_prefix(".drill.")?
                .strip_suffix(".json")?
                .to_string();
            let v = lavender::checkpoint::drills::read(run, &ck)?;
            Some((ck, v.passed))
        })
        .collect()
}

#[test]
fn drills_run_by_themselves_while_training_goes_on_and_a_failed_one_alerts() {
    let dir = tempfile::tempdir().unwrap();
    let d = drilling_daemon(&dir.path().join("good"), "");
    lavender_testkit::wait_until(T, "a drill that passed while the worker trains", || {
        let st = d.status();
        assert_ne!(st["pipeline"]["state"], "failed", "{st:#}");
        st["training"]["running"] == true && drilled(&d.run_dir()).iter().any(|(_, ok)| *ok)
    });
    assert!(
        drilled(&d.run_dir()).iter().all(|(_, ok)| *ok),
        "{:?}",
        drilled(&d.run_dir())
    );

    let d = drilling_daemon(&dir.path().join("bad"), "--forget-on-resume cursor");
    let log = d.log_with("restore drill: checkpoint", T);
    assert!(log.contains("does not resume the run: step "), "{log}");
    assert!(drilled(&d.run_dir()).iter().any(|(_, ok)| !*ok));
}
