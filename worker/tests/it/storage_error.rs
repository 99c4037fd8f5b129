//! A read error is not damage, on a real file system that fails: the checkpoints of
//! the real `lavender-worker` under the real `lavenderd` live on a FUSE passthrough
//! (`lavender_testkit::failfs`) whose reads of every tensor file fail with EIO for a
//! few seconds, as a failing disk or an NFS hiccup gives them. The worker is frozen
//! (no save in flight), the storage starts failing, the worker is killed: the
//! relaunch waits for the storage (one `storage_error` alert naming the file and the
//! error), sets nothing aside, and once the files read again resumes from the newest
//! checkpoint and the run finishes. Before, the walk back set every good checkpoint
//! aside in milliseconds and the run ended with "no intact checkpoint is left".

use std::path::PathBuf;
use std::time::Duration;

use lavender_testkit::Lavenderd;
use lavender_testkit::damage;
use lavender_testkit::failfs::FailingFs;

const WORKER: &str = env!("CARGO_BIN_EXE_lavender-worker");
const T: Duration = Duration::from_secs(120);

#[test]
fn eio_on_every_checkpoint_for_seconds_is_waited_out_and_nothing_is_set_aside() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // The data root's checkpoints on the file system that fails on purpose.
    let fs = FailingFs::mount(&dir.path().join("backing"), &data.join("checkpoints"));
    lavender_testkit::training::write_tokens(&data);
    let config = lavender_testkit::training::TrainOnly {
        worker: WORKER,
        model: lavender_testkit::training::SMALL_MODEL,
        keep_checkpoints: 4,
        stages: "    - {name: pretrain, steps: 120, lr: 3.0e-3, checkpoint_every: 10}
    - {name: sft, steps: 4, lr: 1.0e-3, checkpoint_every: 10}
    - {name: dpo, steps: 4, lr: 5.0e-4, checkpoint_every: 10, beta: 0.1}",
        supervisor: "  storage_error_wait_s: 120",
        notify: "",
        extra: "",
    }
    .yaml();
    let mut d = Lavenderd::with_real_worker(dir.path(), &config);
    d.serve();
    d.start(&[]);
    let frozen = damage::freeze_at(&d, 3, T);
    let kept: Vec<PathBuf> = frozen.checkpoints.clone();
    let newest = kept.last().unwrap().clone();
    // Read back and verified first: the relaunch's check takes that verdict, and the
    // worker's own load meets the error.
    damage::wait_verified(&frozen, &newest, T);

    // Every tensor file of every checkpoint now fails with EIO.
    fs.fail("*.safetensors");
    frozen.kill();
    // The relaunch meets it (at its check, or at the worker's own load when a
    // recorded verdict spared the check the read): one alert naming the file and the
    // error, and the daemon reads it again with a backoff.
    damage::assert_storage_wait(&d, ".safetensors", T);
    let st = d.status();
    assert_ne!(st["pipeline"]["state"], "failed", "{st:#}");
    // The storage reads again: the run resumes from the newest checkpoint, nothing
    // set aside, and finishes.
    fs.heal();
    damage::assert_resumed(&d, &frozen, &newest, &[], "", T);
    d.wait_status(T, "the run to finish", |st| {
        assert_ne!(st["pipeline"]["state"], "failed", "{st:#}");
        st["pipeline"]["state"] == "finished"
    });
    assert!(
        !frozen.run.join("damaged").exists(),
        "something was set aside"
    );
    let events = std::fs::read_to_string(frozen.run.join("events.jsonl")).unwrap();
    assert!(!events.contains("\"checkpoint_damaged\""), "{events}");
    drop(d);
}
