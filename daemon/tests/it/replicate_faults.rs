//! Replication's faults against a real S3 server (SeaweedFS, `scripts/s3/start.sh`),
//! with the daemon supervising the fake worker: the server killed in the middle of
//! an upload and started again (the checkpoint is uploaded again and committed, the
//! training never waited); a wrong credential (one error naming where the keys came
//! from, no retry storm, the secret nowhere); the status's `replication`.

use std::time::Duration;

use lavender_testkit::s3::S3;
use lavender_testkit::*;

const T: Duration = Duration::from_secs(60);

fn env(worker: &[&str], replicate: &str) -> Env {
    Env::new(
        worker,
        &format!("notify:\n  desktop: false\n{replicate}"),
        "[train]",
    )
}

#[test]
fn the_server_killed_mid_upload_and_started_again_the_checkpoint_is_uploaded_whole() {
    let s3 = S3::start();
    // A 6 MB checkpoint every 5 s of training, uploaded at 2 MB/s: seconds each.
    let mut d = env(
        &[
            "--total-steps",
            "200",
            "--step-ms",
            "100",
            "--checkpoint-every",
            "50",
            "--weights-bytes",
            "6000000",
        ],
        &format!(
            "{}  max_mbps: 2\ntraining:\n  keep_checkpoints: 10\n",
            s3.replicate_yaml("faults")
        ),
    );
    d.serve();
    d.start(&[]);
    let st = d.wait_status(T, "an upload in flight", |st| {
        st["replication"]["in_flight"].is_string()
    });
    let cut = st["replication"]["in_flight"].as_str().unwrap().to_string();
    s3.kill();
    let failed = d.wait_status(T, "the upload to fail", |st| {
        st["replication"]["consecutive_failures"].as_u64() >= Some(1)
    });
    let error = failed["replication"]["last_error"].as_str().unwrap();
    assert!(error.contains("s3://lavender-test/faults"), "{error}");
    let stepped = failed["training"]["step"].as_u64().unwrap();
    let run = d
        .run_dir()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    s3.up();
    // Cut short: not committed, the remote manifest being written last.
    let marker = |ckpt: &str| format!("faults/{run}/{ckpt}/lavender-remote.json");
    let url = |key: &str| format!("{}/{}/{key}", s3.endpoint, s3.bucket);
    let committed = |ckpt: &str| s3.curl(&["--fail", &url(&marker(ckpt))]).status.success();
    let st = d.wait_status(T, "replication to recover", |st| {
        st["replication"]["consecutive_failures"] == 0
            && st["replication"]["newest_remote"]["checkpoint"].is_string()
    });
    let newest = st["replication"]["newest_remote"]["checkpoint"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(committed(&newest));
    let local = std::fs::read(d.run_dir().join(&newest).join("model.safetensors")).unwrap();
    assert_eq!(
        s3.get(&format!("faults/{run}/{newest}/model.safetensors")),
        local
    );
    // The checkpoint cut short is uploaded again (newest first, then the older ones).
    d.log_with(&format!("REPLICATED {run}/{cut} "), T);
    assert!(committed(&cut));
    let done = d.wait_state("finished", T);
    assert!(
        done["training"]["step"].as_u64().unwrap() > stepped,
        "training went on while the server was down"
    );
}

#[test]
fn a_wrong_credential_is_one_clear_error_and_no_retry_storm() {
    let s3 = S3::start();
    let creds = s3.base().join("wrong-credentials");
    std::fs::write(
        &creds,
        "[default]\naws_access_key_id = lavendertestkey\naws_secret_access_key = WRONGSECRETVALUE\n",
    )
    .unwrap();
    let yaml = s3.replicate_yaml("denied").replace(
        &s3.credentials.display().to_string(),
        &creds.display().to_string(),
    );
    let mut d = env(
        &[
            "--total-steps",
            "1000",
            "--step-ms",
            "20",
            "--checkpoint-every",
            "10",
        ],
        &yaml,
    );
    d.serve();
    d.start(&[]);
    let st = d.wait_status(T, "the refusal in the status", |st| {
        st["replication"]["consecutive_failures"].as_u64() >= Some(1)
    });
    let error = st["replication"]["last_error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(error.contains("replicate.credentials_file"), "{error}");
    assert!(error.contains(&creds.display().to_string()), "{error}");
    // Ten more saves: a refusal is tried again at a save at most, never on a timer.
    let saved = st["data"]["checkpoints"].as_u64().unwrap_or(0);
    let step = st["training"]["step"].as_u64().unwrap();
    let later = d.wait_step(step + 100, T);
    let failures = later["replication"]["consecutive_failures"]
        .as_u64()
        .unwrap();
    assert!(failures <= 12, "{failures} attempts for about 10 saves");
    let log = std::fs::read_to_string(d.daemon_log()).unwrap();
    assert_eq!(log.matches("REPLICATE failed").count(), 1, "{log}");
    for text in [
        &log,
        &later.to_string(),
        &stdout(&d.run(&["config", "check"])),
    ] {
        assert!(
            !text.contains("WRONGSECRETVALUE"),
            "the secret leaked: {text}"
        );
    }
    assert!(later["replication"]["newest_remote"].is_null());
    let _ = saved;
}
