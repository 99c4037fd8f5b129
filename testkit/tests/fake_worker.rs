//! The stand-in worker takes its step as the step table's type, as `lavender-worker`
//! does: every step of the table runs, a name outside it is refused, naming the steps.
//! (Being an integration test of this package, it also makes `cargo test` build the
//! binary the daemon's tests run.)

use std::process::Command;

use lavender::pipeline_step::{STEPS, StepKind};

const FAKE: &str = env!("CARGO_BIN_EXE_lavender-fake-worker");

#[test]
fn every_data_step_of_the_table_runs_and_writes_its_manifest() {
    let dir = tempfile::tempdir().unwrap();
    for spec in STEPS.iter().filter(|s| s.kind != StepKind::Train) {
        let out = Command::new(FAKE)
            .args([spec.name, "--data-root"])
            .arg(dir.path())
            .env("FAKE_DATA_STEP_MS", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}: {out:?}", spec.name);
        let manifest = lavender::manifest::read(dir.path(), spec.name).unwrap();
        assert_eq!(manifest.map(|m| m.step).as_deref(), Some(spec.name));
    }
}

#[test]
fn a_step_outside_the_table_is_refused_naming_the_steps() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(FAKE)
        .args(["trian", "--data-root"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"trian\" is not a pipeline step; the steps are downloads, dedup"),
        "{err}"
    );
}
