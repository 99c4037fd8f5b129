//! Replication's faults against a real S3 server (SeaweedFS, `scripts/s3/start.sh`),
//! with the daemon supervising the fake worker: the server killed in the middle of
//! an upload and started again (the checkpoint is uploaded again and committed, the
//! training never waited); a wrong credential (one error naming where the keys came
//! from, no retry storm, the secret nowhere); the status's `replication`; the server
//! down for a while as training goes on (one "replication behind" push to a real
//! webhook receiver, one "caught up" when it is back, the steps never slower); a
//! restart whose program becomes weed late is waited for.

use std::time::{Duration, Instant};

use lavender_testkit::notify::Recorder;
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
    let run = d.run_name();
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

/// The training step and when it was read, from the status (the worker's heartbeats).
fn step_now(d: &Env) -> (Instant, u64) {
    let st = d.status();
    (Instant::now(), st["training"]["step"].as_u64().unwrap_or(0))
}

/// Seconds per step between two readings.
fn s_per_step(a: (Instant, u64), b: (Instant, u64)) -> f64 {
    b.0.duration_since(a.0).as_secs_f64() / (b.1 - a.1).max(1) as f64
}

/// The server stopped while training goes on: the lag passes `max_lag_s` and the
/// attempts keep failing; one push says so, however many attempts fail after it;
/// the server started again, the uploads resume and one push says the copy caught
/// up. The worker never waits: its step time over the outage is that of before.
/// The outage lasts a minute, a save a second: the attempts back off (2 s doubling),
/// not one per save.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_down_a_while_is_one_behind_push_one_caught_up_push_and_training_goes_on() {
    let hook = Recorder::start().await;
    let s3 = S3::start();
    // A checkpoint a second; behind when one waits 4 s.
    let mut d = Env::new(
        &[
            "--total-steps",
            "100000",
            "--step-ms",
            "50",
            "--checkpoint-every",
            "20",
        ],
        &format!(
            "{}{}  max_lag_s: 4\ntraining:\n  keep_checkpoints: 30\n",
            hook.webhook_yaml(""),
            s3.replicate_yaml("outage")
        ),
        "[train]",
    );
    d.serve();
    d.start(&[]);
    d.wait_status(T, "a first checkpoint safely remote", |st| {
        st["replication"]["newest_remote"]["checkpoint"].is_string()
    });
    let start = step_now(&d);
    d.wait_step(start.1 + 100, T);
    let killed = step_now(&d);
    s3.kill();
    wait_until(T, "the replication_behind push", || {
        !hook.of_kind("replication_behind").is_empty()
    });
    let outage = Duration::from_secs(60);
    tokio::time::sleep(outage.saturating_sub(killed.0.elapsed())).await;
    let down = d.wait_status(T, "failed attempts in a row, and behind", |st| {
        st["replication"]["consecutive_failures"].as_u64() >= Some(3)
            && st["replication"]["behind"] == true
    });
    // Attempts at about 2, 6, 14, 30 and 62 s: five, give or take one at the edges;
    // one per save would be sixty.
    let attempts = down["replication"]["consecutive_failures"]
        .as_u64()
        .unwrap();
    assert!(
        (3..=7).contains(&attempts),
        "{attempts} failed attempts in a minute with a save a second"
    );
    let remote_step = down["replication"]["newest_remote"]["step"]
        .as_u64()
        .unwrap();
    let back = step_now(&d);
    s3.up();
    // The next attempt is due up to a minute after the server is back.
    wait_until(2 * T, "the replication_recovered push", || {
        !hook.of_kind("replication_recovered").is_empty()
    });
    let st = d.status();
    let r = &st["replication"];
    assert_eq!(r["consecutive_failures"], 0, "{r:#}");
    assert!(
        r["newest_remote"]["step"].as_u64().unwrap() > back.1,
        "the uploads resumed with the checkpoints saved during the outage: {r:#}"
    );
    assert!(
        remote_step < killed.1 + 20,
        "nothing went up while down: {r:#}"
    );

    let kinds = hook.kinds();
    assert_eq!(hook.of_kind("replication_behind").len(), 1, "{kinds:?}");
    assert_eq!(hook.of_kind("replication_recovered").len(), 1, "{kinds:?}");
    let behind = &hook.of_kind("replication_behind")[0];
    assert_eq!(
        behind["title"],
        "[lavender] replication behind: s3://lavender-test/outage"
    );
    let body = behind["body"].as_str().unwrap();
    assert!(
        body.contains("(replicate.max_lag_s 4)") || body.contains("failed upload attempt(s)"),
        "{body}"
    );
    let over = &hook.of_kind("replication_recovered")[0];
    assert_eq!(
        over["title"],
        "[lavender] replication caught up: s3://lavender-test/outage"
    );
    assert!(
        over["body"]
            .as_str()
            .unwrap()
            .starts_with("caught up after "),
        "{over}"
    );
    // The worker's step time during the outage against before it (50 ms a step).
    let (before, during) = (s_per_step(start, killed), s_per_step(killed, back));
    eprintln!(
        "step time: {:.1} ms before the outage ({} steps), {:.1} ms during it ({} steps, {:.1} s)",
        before * 1e3,
        killed.1 - start.1,
        during * 1e3,
        back.1 - killed.1,
        back.0.duration_since(killed.0).as_secs_f64()
    );
    assert!(
        during < before * 1.5,
        "steps slowed while the server was down: {during:.3} s against {before:.3} s"
    );
    let out = d.run(&["stop"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// Whether `lavenderd checkpoints` lists every checkpoint of `run` as
/// `local+remote`, and at least one.
pub(crate) fn every_checkpoint_remote(d: &Env, run: &str) -> bool {
    let out = stdout(&d.run(&["checkpoints", "--run", run]));
    let both = out.matches("local+remote").count();
    both > 0 && out.matches("local").count() == both
}

/// `prune` deletes old runs locally and keeps their remote copies (the copy is for
/// when the disk is lost); `prune --remote` deletes the copies of the runs it prunes
/// too, every object under the run, and no other run's.
#[test]
fn prune_keeps_the_remote_copies_unless_remote_is_given() {
    let s3 = S3::start();
    let mut d = env(
        &[
            "--total-steps",
            "20",
            "--step-ms",
            "5",
            "--checkpoint-every",
            "5",
        ],
        &s3.replicate_yaml("pruned"),
    );
    d.serve();
    for _ in 0..3 {
        d.start(&[]);
        d.wait_state("finished", T);
        let run = d.run_name();
        wait_until(T, "every checkpoint of the run remote", || {
            every_checkpoint_remote(&d, &run)
        });
        std::fs::remove_dir_all(d.state_dir().join("done")).unwrap();
    }
    let runs = d.tcp("GET", "/runs", None, None).json();
    let names: Vec<String> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect();
    let [newest, middle, oldest] = names.as_slice() else {
        panic!("three runs: {names:?}")
    };
    let objects = |run: &str| s3.keys(&format!("pruned/{run}/"));
    let committed = |run: &str| {
        objects(run)
            .iter()
            .filter(|k| k.ends_with("/lavender-remote.json"))
            .count()
    };
    let held = committed(oldest);
    assert!(held > 0 && committed(middle) > 0 && committed(newest) > 0);

    // Without --remote: the oldest run goes here, its copies stay there.
    let out = d.run(&["prune", "--keep-runs", "2", "--yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!d.data_root.join("checkpoints").join(oldest).exists());
    assert!(
        stdout(&out).contains("their remote copies are kept (prune --remote deletes them too)"),
        "{}",
        stdout(&out)
    );
    assert_eq!(committed(oldest), held);

    // With --remote: the middle run goes here and there, every object of it.
    let out = d.run(&["prune", "--keep-runs", "1", "--yes", "--remote"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!d.data_root.join("checkpoints").join(middle).exists());
    let said = format!("of {middle} from s3://lavender-test/pruned");
    assert!(
        stdout(&out)
            .lines()
            .any(|l| l.starts_with("removed ") && l.ends_with(&said)),
        "{}",
        stdout(&out)
    );
    assert_eq!(objects(middle), Vec::<String>::new());
    assert_eq!(committed(oldest), held, "another run's copies went too");
    assert!(committed(newest) > 0);
    assert!(every_checkpoint_remote(&d, newest));
}

/// Remote and local retention with different keep values agree on what should be
/// remote: each checkpoint goes up at most once (none re-sent after remote retention
/// dropped it), for keep 5 locally and 2 remotely, and 2 locally and 5 remotely.
#[test]
fn uploads_stay_one_per_save_whatever_the_two_keep_values() {
    let s3 = S3::start();
    for (local, remote) in [(5, 2), (2, 5)] {
        let prefix = format!("keep-{local}-{remote}");
        let mut d = env(
            &[
                "--total-steps",
                "230",
                "--step-ms",
                "10",
                "--checkpoint-every",
                "10",
            ],
            &format!(
                "{}  keep: {remote}\ntraining:\n  keep_checkpoints: {local}\n",
                s3.replicate_yaml(&prefix)
            ),
        );
        d.serve();
        d.start(&[]);
        d.wait_state("finished", T);
        let run = d.run_name();
        wait_until(T, "the newest checkpoint remote", || {
            let out = stdout(&d.run(&["checkpoints", "--run", &run]));
            out.lines()
                .last()
                .is_some_and(|l| l.ends_with("local+remote"))
        });
        // The dashboard's checkpoint table: where each one's copies are, as the
        // replication task last listed them; the newest one's remote.
        wait_until(T, "the API naming the newest checkpoint remote", || {
            let r = d
                .uds("GET", &format!("/checkpoints?run={run}"), None)
                .unwrap();
            let list: serde_json::Value = serde_json::from_str(&r.body).unwrap();
            let list = list.as_array().unwrap().clone();
            let copies = list.iter().filter(|c| c["remote"] == true).count();
            list.iter().all(|c| c["remote"].is_boolean())
                && list.last().is_some_and(|c| c["remote"] == true)
                && copies <= remote
        });
        let log = std::fs::read_to_string(d.daemon_log()).unwrap();
        let sent: Vec<&str> = log
            .lines()
            .filter_map(|l| l.split_once("REPLICATED ")?.1.split(' ').next())
            .collect();
        let saves = std::fs::read_to_string(d.run_dir().join("events.jsonl"))
            .unwrap()
            .lines()
            .filter(|l| l.contains("\"checkpoint_saved\"") || l.contains("\"final_saved\""))
            .count();
        let distinct: std::collections::BTreeSet<&&str> = sent.iter().collect();
        eprintln!(
            "local {local}, remote {remote}: {} uploads for {saves} saves",
            sent.len()
        );
        assert_eq!(distinct.len(), sent.len(), "one sent twice: {sent:?}");
        assert!(
            saves >= 20 && sent.len() <= saves,
            "{} uploads for {saves} saves",
            sent.len()
        );
    }
}

/// No credentials when the daemon starts (the common case under systemd): one
/// `replication_unavailable` push to a real receiver, naming the target and what to
/// set, however many saves follow; the training goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credentials_at_start_up_is_one_replication_unavailable_push() {
    let hook = Recorder::start().await;
    let mut d = Env::new(
        &[
            "--total-steps",
            "100",
            "--step-ms",
            "20",
            "--checkpoint-every",
            "10",
        ],
        &format!(
            "{}replicate:\n  url: s3://team-bucket/runs\n  endpoint: http://127.0.0.1:9\n  path_style: true\n",
            hook.webhook_yaml("")
        ),
        "[train]",
    );
    // The daemon's environment holds no AWS keys.
    d.env.push(("AWS_ACCESS_KEY_ID".into(), String::new()));
    d.env.push(("AWS_SECRET_ACCESS_KEY".into(), String::new()));
    d.serve();
    d.start(&[]);
    wait_until(T, "the replication_unavailable push", || {
        !hook.of_kind("replication_unavailable").is_empty()
    });
    d.wait_state("finished", T);
    let pushes = hook.of_kind("replication_unavailable");
    assert_eq!(pushes.len(), 1, "one push per incident");
    let text = pushes[0].to_string();
    assert!(
        text.contains("s3://team-bucket/runs") && text.contains("AWS_ACCESS_KEY_ID"),
        "{text}"
    );
    assert!(hook.of_kind("replication_behind").is_empty());
}

/// The server started again by a program that becomes weed only a second later: for
/// a moment after `start.sh` forks, the pid it keeps is bash's or setsid's, not yet
/// weed's (under load, long enough for the script's first look). The script waits for
/// the server it started instead of calling it gone.
#[test]
fn a_server_slow_to_become_weed_is_waited_for() {
    use std::os::unix::fs::PermissionsExt;

    let s3 = S3::start();
    s3.kill();
    let weed = s3.base().join("weed-in-a-second");
    std::fs::write(
        &weed,
        format!(
            "#!/bin/bash\nsleep 1\nexec {} \"$@\"\n",
            lavender_testkit::python::venv_tool("weed")
        ),
    )
    .unwrap();
    std::fs::set_permissions(&weed, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Panics with the script's output unless the bucket answered.
    s3.up_through(&weed);
}
