//! Replication against a real S3 server (SeaweedFS, `scripts/s3/start.sh`) with the
//! real `lavenderd` started detached by `lavenderd start` and the real worker: a run
//! trains, uploads its checkpoints, is stopped; its data root's checkpoints are
//! removed; `start --resume latest` brings the newest remote checkpoint that
//! downloads whole back (the newest was altered on the server behind lavender's
//! back: it is passed over), resumes, and finishes with the final weights of the same
//! run left alone, byte for byte. The same when the checkpoints are lost mid-run
//! (the worker killed, the pipeline failed, the checkpoints removed).

use std::path::Path;
use std::time::Duration;

use lavender_testkit::s3::S3;
use lavender_testkit::{Lavenderd, stderr, stdout, training};

const WORKER: &str = env!("CARGO_BIN_EXE_lavender-worker");
const T: Duration = Duration::from_secs(120);

/// The train step alone on the synthetic tokens: a one-layer model, a checkpoint
/// every 10 steps, and `extra` (the `replicate:` section).
fn config(extra: &str) -> String {
    training::TrainOnly {
        worker: WORKER,
        model: training::SMALL_MODEL,
        keep_checkpoints: 3,
        stages: "    - {name: pretrain, steps: 200, lr: 3.0e-3, checkpoint_every: 10}",
        supervisor: "",
        notify: "",
        extra,
    }
    .yaml()
}

fn final_weights(d: &Lavenderd) -> Vec<u8> {
    let last = training::checkpoints(&d.run_dir())
        .pop()
        .expect("a checkpoint");
    assert!(
        last.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("final-"),
        "{}",
        last.display()
    );
    std::fs::read(last.join("model.safetensors")).unwrap()
}

/// The final weights of the run of `config` on the synthetic tokens, left alone.
fn left_alone(config: &str) -> Vec<u8> {
    let alone = tempfile::tempdir().unwrap();
    training::write_tokens(&alone.path().join("data"));
    let mut a = Lavenderd::with_real_worker(alone.path(), config);
    a.serve();
    a.start(&[]);
    a.wait_state("finished", T);
    final_weights(&a)
}

fn name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

#[test]
fn a_run_whose_checkpoints_are_gone_comes_back_from_s3_byte_identical() {
    let s3 = S3::start();
    let dir = tempfile::tempdir().unwrap();
    training::write_tokens(&dir.path().join("data"));
    let mut d = Lavenderd::with_real_worker(dir.path(), &config(&s3.replicate_yaml("team/runs")));
    // `start` runs the daemon detached; its log is the data root's.
    d.log = d.state_dir().join("lavenderd.log");
    d.start(&[]);
    d.wait_status(T, "training past step 25", |st| {
        assert_ne!(st["pipeline"]["state"], "failed", "{st:#}");
        st["training"]["step"].as_u64().unwrap_or(0) > 25
    });
    d.stop_saved();
    let run = d.run_dir();
    let local = training::checkpoints(&run);
    let newest = local.last().expect("the stop's checkpoint").clone();
    let previous = local[local.len() - 2].clone();
    // Uploaded newest first, then the older ones; each read back before it counts.
    for ckpt in [&newest, &previous] {
        d.log_with(&format!("REPLICATED {}/{}", name(&run), name(ckpt)), T);
    }
    let key = |ckpt: &Path, file: &str| format!("team/runs/{}/{}/{file}", name(&run), name(ckpt));
    assert_eq!(
        s3.get(&key(&newest, "model.safetensors")),
        std::fs::read(newest.join("model.safetensors")).unwrap()
    );
    let remote: serde_json::Value =
        serde_json::from_slice(&s3.get(&key(&newest, "lavender-remote.json"))).unwrap();
    assert_eq!(remote["checkpoint"], name(&newest));
    let log = std::fs::read_to_string(&d.log).unwrap();
    assert!(
        !log.contains("lavendertestsecret"),
        "the secret is never logged"
    );

    // The newest remote copy altered behind lavender's back.
    let mut weights = s3.get(&key(&newest, "model.safetensors"));
    let last = weights.len() - 1;
    weights[last] ^= 0xff;
    s3.put(&key(&newest, "model.safetensors"), &weights);
    // The disk is wiped; the run comes back from the remote copy.
    std::fs::remove_dir_all(d.data_root.join("checkpoints")).unwrap();
    let listed = stdout(&d.run(&["checkpoints", "--run", &name(&run)]));
    assert!(
        !listed
            .lines()
            .any(|l| l.ends_with("local") || l.ends_with("local+remote")),
        "{listed}"
    );
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with(&name(&previous)) && l.ends_with("  remote")),
        "{listed}"
    );
    // Asked for by name, the altered one is refused, naming the object.
    let out = d.run(&["pull", &name(&run), &name(&newest)]);
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("model.safetensors") && stderr(&out).contains("remote manifest"),
        "{}",
        stderr(&out)
    );

    let out = d.start(&["--resume", "latest"]);
    let said = stdout(&out);
    eprintln!("$ lavenderd start --resume latest\n{said}");
    assert!(
        said.contains(&format!("passed over {}/{}", name(&run), name(&newest))),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "pulled s3://lavender-test/team/runs/{}/{}",
            name(&run),
            name(&previous)
        )),
        "{said}"
    );
    assert!(
        said.lines()
            .any(|l| l.starts_with("resuming from ") && l.ends_with(&name(&previous))),
        "{said}"
    );
    d.wait_state("finished", T);
    let resumed = final_weights(&d);

    // The same run, left alone, without replication.
    assert!(
        resumed == left_alone(&config("")),
        "the run restored from S3 ends with other weights than the run left alone"
    );
}

/// The checkpoints lost in the middle of a run: the worker killed (with no restart
/// allowed, the pipeline fails) and the data root's checkpoints removed while the
/// daemon runs; `start --resume latest` brings the newest remote checkpoint back,
/// resumes from it, and the run ends with the weights of the same run left alone.
#[test]
fn a_run_whose_checkpoints_are_wiped_mid_run_comes_back_from_s3() {
    let s3 = S3::start();
    let dir = tempfile::tempdir().unwrap();
    training::write_tokens(&dir.path().join("data"));
    // Long enough that the uploads reach step 20 while it trains, on a loaded machine too.
    let long = |yaml: String| yaml.replace("steps: 200,", "steps: 600,");
    let yaml = long(config(&s3.replicate_yaml("midrun"))).replace(
        "  stop_timeout_s: 60\n",
        "  stop_timeout_s: 60\n  max_restarts: 0\n",
    );
    let mut d = Lavenderd::with_real_worker(dir.path(), &yaml);
    d.log = d.state_dir().join("lavenderd.log");
    d.start(&[]);
    // Frozen once step 20 is saved here, so the upload catches up whatever the speeds.
    // Saved means announced: the worker's writer thread commits a save while it trains
    // on and the worker says `checkpoint_saved` after, which is what the daemon's pass
    // follows; frozen between the two, the save would not go up until a restart.
    let st = d.wait_status(
        T,
        "a checkpoint past step 20 saved, the worker training",
        |st| {
            assert_ne!(st["pipeline"]["state"], "failed", "{st:#}");
            let saved = lavender_testkit::events(&d.run_dir())
                .iter()
                .any(|e| e["kind"] == "checkpoint_saved" && e["step"].as_u64() >= Some(20));
            saved && st["pipeline"]["pid"].as_i64().is_some()
        },
    );
    let run = d.run_dir();
    let pid = st["pipeline"]["pid"].as_i64().unwrap() as i32;
    lavender_testkit::freeze_group(pid);
    d.wait_status(T, "a checkpoint past step 20 safely remote", |st| {
        st["replication"]["newest_remote"]["step"].as_u64() >= Some(20)
    });
    lavender_testkit::send_signal(pid, 9);
    d.wait_state("failed", T);
    // Whatever was saved before the kill goes up; then the disk is lost.
    let st = d.wait_status(T, "replication caught up", |st| {
        st["replication"]["lag_steps"] == 0 && st["replication"]["in_flight"].is_null()
    });
    let newest = st["replication"]["newest_remote"]["checkpoint"]
        .as_str()
        .unwrap()
        .to_string();
    let step = st["replication"]["newest_remote"]["step"].as_u64().unwrap();
    std::fs::remove_dir_all(d.data_root.join("checkpoints")).unwrap();

    let out = d.start(&["--resume", "latest"]);
    let said = stdout(&out);
    eprintln!("$ lavenderd start --resume latest\n{said}");
    assert!(
        said.contains(&format!(
            "pulled s3://lavender-test/midrun/{}/{newest} (step {step},",
            name(&run)
        )),
        "{said}"
    );
    assert!(
        said.lines()
            .any(|l| l.starts_with("resuming from ") && l.ends_with(&newest)),
        "{said}"
    );
    d.wait_state("finished", T);
    let resumed = final_weights(&d);

    assert!(
        resumed == left_alone(&long(config(""))),
        "the run restored from S3 mid-run ends with other weights than the run left alone"
    );
}

/// The three stages, each `steps` long with a save every 10, and `extra`.
fn staged(steps: u64, extra: &str) -> String {
    staged_dpo(steps, steps, extra)
}

/// [`staged`] with a DPO stage of `dpo` steps.
fn staged_dpo(steps: u64, dpo: u64, extra: &str) -> String {
    let stages = format!(
        "    - {{name: pretrain, steps: {steps}, lr: 3.0e-3, checkpoint_every: 10}}
    - {{name: sft, steps: {steps}, lr: 1.0e-3, checkpoint_every: 10}}
    - {{name: dpo, steps: {dpo}, lr: 5.0e-4, checkpoint_every: 10, beta: 0.1}}"
    );
    training::TrainOnly {
        worker: WORKER,
        model: training::SMALL_MODEL,
        keep_checkpoints: 3,
        stages: &stages,
        supervisor: "",
        notify: "",
        extra,
    }
    .yaml()
}

/// The DPO reference deleted by hand from a run stopped mid-DPO (its checkpoints
/// intact): `start --resume latest` brings it back from the remote copy, says so, and
/// the run finishes.
#[test]
fn a_run_file_deleted_by_hand_comes_back_at_the_next_resume() {
    let s3 = S3::start();
    let dir = tempfile::tempdir().unwrap();
    training::write_tokens(&dir.path().join("data"));
    // DPO long enough that the stop after its first checkpoint lands in it on a
    // loaded machine too (20 steps of it went by first once, four tests beside).
    let config = staged_dpo(30, 600, &s3.replicate_yaml("runfile"));
    let mut d = Lavenderd::with_real_worker(dir.path(), &config);
    d.log = d.state_dir().join("lavenderd.log");
    d.start(&[]);
    d.wait_status(T, "a dpo checkpoint saved", |st| {
        assert_ne!(st["pipeline"]["state"], "failed", "{st:#}");
        st["training"]["latest_checkpoint"]
            .as_str()
            .is_some_and(|c| c.starts_with("dpo-"))
    });
    d.stop_saved();
    let run = d.run_dir();
    let newest = training::checkpoints(&run).pop().unwrap();
    d.wait_status(T, "the stop's checkpoint safely remote", |st| {
        st["replication"]["newest_remote"]["checkpoint"].as_str() == Some(&name(&newest))
    });
    let reference = run.join(lavender::run::DPO_REFERENCE_FILE);
    std::fs::remove_file(&reference).unwrap();
    let out = d.start(&["--resume", "latest"]);
    let said = stdout(&out);
    assert!(
        said.contains(
            "lacked dpo-reference.safetensors, which its resume reads; brought back from"
        ),
        "{said}{}",
        stderr(&out)
    );
    assert!(reference.is_file());
    d.wait_state("finished", T);
}

/// What a resume reads beside its checkpoint comes back with it, at every stage:
/// `checkpoints/` lost in pretrain, in sft and in dpo (a checkpoint mid-DPO needs the
/// run's DPO reference, its tokenizer, its config), then the whole data root on "a new
/// machine" (the same config, the data written again); each time `start --resume
/// latest` pulls the newest remote checkpoint and its run files and resumes, and the
/// run ends with the final weights of the same run left alone, byte for byte.
#[test]
fn checkpoints_lost_in_each_stage_come_back_from_s3_with_their_run_files() {
    let s3 = S3::start();
    let dir = tempfile::tempdir().unwrap();
    training::write_tokens(&dir.path().join("data"));
    let config = |extra: &str| staged(200, extra);
    let mut d = Lavenderd::with_real_worker(dir.path(), &config(&s3.replicate_yaml("stages")));
    d.log = d.state_dir().join("lavenderd.log");
    d.start(&[]);
    for (stage, whole_data_root) in [
        ("pretrain", false),
        ("sft", false),
        ("dpo", false),
        ("dpo", true),
    ] {
        // A checkpoint of this stage saved by the run training now (not the one it
        // was restored from).
        d.wait_status(T, &format!("a {stage} checkpoint saved"), |st| {
            assert_ne!(st["pipeline"]["state"], "failed", "{st:#}");
            let run = d.pipeline_json()["run_dir"]
                .as_str()
                .map(std::path::PathBuf::from);
            run.and_then(|r| training::checkpoints(&r).pop())
                .is_some_and(|c| name(&c).starts_with(&format!("{stage}-")))
        });
        d.stop_saved();
        let newest = training::checkpoints(&d.run_dir())
            .pop()
            .expect("the stop's checkpoint");
        let st = d.wait_status(T, "the stop's checkpoint safely remote", |st| {
            st["replication"]["newest_remote"]["checkpoint"].as_str() == Some(&name(&newest))
        });
        let step = st["replication"]["newest_remote"]["step"].as_u64().unwrap();
        if whole_data_root {
            let out = d.run(&["daemon", "stop"]);
            assert!(out.status.success(), "{}", stderr(&out));
            std::fs::remove_dir_all(&d.data_root).unwrap();
            training::write_tokens(&d.data_root);
        } else {
            std::fs::remove_dir_all(d.data_root.join("checkpoints")).unwrap();
        }
        let out = d.start(&["--resume", "latest"]);
        let said = stdout(&out);
        eprintln!("$ lavenderd start --resume latest ({stage})\n{said}");
        assert!(
            said.contains(&format!("/{} (step {step},", name(&newest))) && said.contains("pulled "),
            "{said}"
        );
        let restored = d
            .data_root
            .join("checkpoints")
            .join(name(newest.parent().unwrap()));
        let mut want = vec!["config.yaml", "tokenizer.json"];
        if stage == "dpo" {
            want.push("dpo-reference.safetensors");
        }
        for file in want {
            assert!(
                restored.join(file).is_file(),
                "{stage}: {file} not restored"
            );
        }
    }
    d.wait_state("finished", T);
    let resumed = final_weights(&d);

    assert!(
        resumed == left_alone(&config("")),
        "the run restored from S3 in every stage ends with other weights than the run left alone"
    );
}
