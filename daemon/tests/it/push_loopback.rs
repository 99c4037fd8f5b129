//! Notifications against real HTTP servers on loopback that record what they
//! receive: texts and levels per channel, retries, the rate limit, coalescing, a
//! server that is down, a missing Bark key, no resend after a restart, `test()`.

use std::path::Path;
use std::time::Duration;

use crate::push_support::*;
use lavender::config::{PipelineStep, WebhookFormat};
use lavender::events;
use lavender::failure::{Failure, FailureKind};
use lavender_testkit::notify::*;
use lavenderd::alert::Alert;
use lavenderd::events::EventFollower;
use lavenderd::exit::ExitOutcome;
use lavenderd::push::{Level, Notification, Notifier, Options, milestone, pushes};
use serde_json::{Value, json};
use tokio::time::Instant;

#[tokio::test]
async fn milestones_are_silent_and_alerts_loud_on_every_channel() {
    let server = Recorder::start().await;
    let state = tempfile::tempdir().unwrap();
    std::fs::write(
        state.path().join("phone.bark.env"),
        format!("BARK_KEY=devkey\nBARK_SERVER={}\n", server.url()),
    )
    .unwrap();
    let calls = state.path().join("desktop-calls.txt");
    let fake_notify_send = state.path().join("notify-send");
    lavender_testkit::write_executable(
        &fake_notify_send,
        &format!(
            "#!/bin/sh\nprintf '%s|' \"$@\" >> '{}'\necho >> '{}'\n",
            calls.display(),
            calls.display()
        ),
    );

    let mut cfg = quiet_config();
    cfg.ntfy.server = server.url();
    cfg.ntfy.topic = Some("runs".into());
    cfg.ntfy.token = Some("tk_123".into());
    webhook(
        &mut cfg,
        "slack",
        format!("{}/slack", server.url()),
        WebhookFormat::Slack,
    );
    webhook(
        &mut cfg,
        "discord",
        format!("{}/discord", server.url()),
        WebhookFormat::Discord,
    );
    webhook(
        &mut cfg,
        "hook",
        format!("{}/hook", server.url()),
        WebhookFormat::Json,
    );
    let options = Options {
        desktop_program: Some(fake_notify_send.clone()),
        ..fast()
    };
    let n = Notifier::start_with(&cfg, state.path(), options);
    assert_eq!(
        n.channels(),
        ["bark", "ntfy", "slack", "discord", "hook", "desktop"]
    );

    let saved = event(
        "checkpoint_saved",
        json!({"name": "pretrain-04-30-11-0002", "epoch": 2, "epochs": 3, "ce_loss": 1.2345, "remaining_hours": 3.21}),
    );
    let m = milestone(&saved, n.prefix()).unwrap();
    assert_eq!(m.level, Level::Milestone);
    n.send(m);
    n.send(crash());
    let text = "[lavender] checkpoint saved: pretrain-04-30-11-0002, epoch 2/3, CE 1.234, ETA 3.2h";
    for channel in n.channels() {
        settle(&n, &channel, |sent, _, _| sent == 2).await;
    }

    let bark = server.at("/push");
    assert_eq!(bark.len(), 2, "{bark:?}");
    let by_level = |level: &str| {
        bark.iter()
            .map(Received::json)
            .find(|j| j["level"] == level)
            .unwrap_or_else(|| panic!("no {level} push in {bark:?}"))
    };
    let passive = by_level("passive");
    assert_eq!(passive["device_key"], "devkey");
    assert_eq!(passive["body"], text);
    assert_eq!(passive["group"], "lavender");
    assert!(passive.get("title").is_none(), "{passive}");
    let loud = by_level("timeSensitive");
    assert_eq!(loud["title"], "[lavender] crashed: exit code 1");
    assert_eq!(
        loud["body"],
        "step 40 loss 2.1\nRuntimeError: out of memory"
    );

    let ntfy = server.at("/runs");
    assert_eq!(ntfy.len(), 2);
    let low = ntfy
        .iter()
        .find(|r| r.header("priority") == Some("low"))
        .unwrap();
    assert_eq!(low.body, text);
    assert_eq!(low.header("tags"), Some("checkpoint_saved"));
    assert_eq!(low.header("authorization"), Some("Bearer tk_123"));
    let high = ntfy
        .iter()
        .find(|r| r.header("priority") == Some("high"))
        .unwrap();
    assert_eq!(
        high.header("title"),
        Some("[lavender] crashed: exit code 1")
    );
    assert_eq!(high.header("tags"), Some("warning,crashed"));
    assert!(high.body.ends_with("out of memory"), "{}", high.body);

    let slack: Vec<Value> = server.at("/slack").iter().map(Received::json).collect();
    assert!(slack.contains(&json!({ "text": text })), "{slack:?}");
    assert!(
        slack.contains(&json!({ "text": "[lavender] crashed: exit code 1\nstep 40 loss 2.1\nRuntimeError: out of memory" })),
        "{slack:?}"
    );
    let discord: Vec<Value> = server.at("/discord").iter().map(Received::json).collect();
    assert!(discord.contains(&json!({ "content": text })), "{discord:?}");
    let hook: Vec<Value> = server.at("/hook").iter().map(Received::json).collect();
    assert!(
        hook.iter().any(|j| j["level"] == "milestone"
            && j["kind"] == "checkpoint_saved"
            && j["body"] == text),
        "{hook:?}"
    );

    let desktop = std::fs::read_to_string(&calls).unwrap();
    assert!(
        desktop.contains(&format!(
            "--app-name=lavender|--urgency=low|--|lavender|{text}|"
        )),
        "{desktop}"
    );
    assert!(
        desktop.contains("--urgency=critical|--|[lavender] crashed: exit code 1|"),
        "{desktop}"
    );
    for (channel, c) in n.counts() {
        assert_eq!((c.sent, c.failed, c.dropped), (2, 0, 0), "{channel}");
    }
}

#[tokio::test]
async fn alert_texts_for_faults_and_the_end() {
    let server = Recorder::start().await;
    let state = tempfile::tempdir().unwrap();
    let mut cfg = quiet_config();
    webhook(
        &mut cfg,
        "hook",
        format!("{}/hook", server.url()),
        WebhookFormat::Json,
    );
    let n = Notifier::start_with(&cfg, state.path(), fast());
    let p = n.prefix().to_string();
    let log = state.path().join("worker.log");
    std::fs::write(&log, "last line\n").unwrap();
    let alerts = [
        Alert::Stale {
            step: PipelineStep::Train,
            age_s: Some(372),
            stale_after_s: 300,
            training_step: Some(1234),
        },
        Alert::Recovered {
            step: PipelineStep::Train,
            stalled_for: Some(Duration::from_secs(400)),
            training_step: Some(1300),
        },
        Alert::Crashed {
            step: PipelineStep::Train,
            outcome: ExitOutcome::Signal(9),
            failure: Failure::new(FailureKind::Crash, "killed by SIGKILL (signal 9)"),
            restart: 1,
            max_restarts: 3,
            restart_in: Duration::from_secs(10),
            log_file: Some(log),
            repeats: Default::default(),
        },
        Alert::Failed {
            step: PipelineStep::Train,
            reason: "exit code 1".into(),
            restarts: 3,
            last_exit: Some(ExitOutcome::Code(1)),
            failure: None,
        },
        Alert::DiskLow {
            path: "/data".into(),
            avail_bytes: 300 * 1024 * 1024,
            need_bytes: 1024 * 1024 * 1024,
        },
        Alert::Finished {
            duration: Duration::from_secs(3 * 3600 + 720),
            final_loss: Some(1.5),
            final_checkpoint: Some("final-05-12-22-0007".into()),
            goodput: None,
        },
    ];
    for a in &alerts {
        for push in pushes(a, &p, 20) {
            n.send(push);
        }
    }
    let got: Vec<Value> = server
        .wait_for(7)
        .await
        .iter()
        .map(Received::json)
        .collect();
    let titles: Vec<&str> = got.iter().map(|j| j["title"].as_str().unwrap()).collect();
    assert_eq!(
        titles,
        [
            "[lavender] stalled: no heartbeat for 6m 12s",
            "[lavender] recovered: heartbeat is fresh again",
            "[lavender] crashed: killed by SIGKILL (signal 9)",
            "[lavender] restarting: attempt 1 of 3",
            "[lavender] failed: gave up after 3 restarts",
            "[lavender] disk low: 300 MiB free, need 1.0 GiB",
            "[lavender] finished in 3h 12m",
        ]
    );
    assert!(got.iter().all(|j| j["level"] == "alert"));
    assert_eq!(got[2]["body"], "last line");
    assert_eq!(
        got[6]["body"],
        "final loss 1.500, final checkpoint final-05-12-22-0007"
    );
}

#[tokio::test]
async fn repeated_alerts_of_one_kind_coalesce() {
    let server = Recorder::start().await;
    let state = tempfile::tempdir().unwrap();
    let mut cfg = quiet_config();
    webhook(
        &mut cfg,
        "hook",
        format!("{}/hook", server.url()),
        WebhookFormat::Json,
    );
    let mut options = fast();
    options.timings.coalesce_window = Duration::from_millis(300);
    let n = Notifier::start_with(&cfg, state.path(), options);
    let stalled = |secs| {
        pushes(
            &Alert::Stale {
                step: PipelineStep::Train,
                age_s: Some(secs),
                stale_after_s: 300,
                training_step: None,
            },
            "",
            0,
        )
        .remove(0)
    };
    let recovered = pushes(
        &Alert::Recovered {
            step: PipelineStep::Train,
            stalled_for: None,
            training_step: None,
        },
        "",
        0,
    )
    .remove(0);
    // A run of one kind is one push; a change of kind lets the next one through.
    n.send(stalled(301));
    n.send(stalled(302));
    n.send(stalled(303));
    n.send(recovered);
    n.send(stalled(304));
    settle(&n, "hook", |sent, _, dropped| sent == 3 && dropped == 2).await;
    // After the window, a repeat is a reminder and goes through.
    tokio::time::sleep(Duration::from_millis(350)).await;
    n.send(stalled(700));
    settle(&n, "hook", |sent, _, _| sent == 4).await;
    let kinds: Vec<String> = server
        .received()
        .iter()
        .map(|r| r.json()["kind"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(kinds, ["stalled", "recovered", "stalled", "stalled"]);
    assert_eq!(
        server.received()[3].json()["title"],
        "stalled: no heartbeat for 11m 40s"
    );
}

#[tokio::test]
async fn missing_bark_key_is_a_no_op() {
    let server = Recorder::start().await;
    let state = tempfile::tempdir().unwrap();
    let mut cfg = quiet_config();
    cfg.bark.server = Some(server.url());
    // No env file at all, then one without a key.
    for env in [None, Some("BARK_SERVER=http://127.0.0.1:9\n# no key\n")] {
        if let Some(text) = env {
            std::fs::write(state.path().join("phone.bark.env"), text).unwrap();
        }
        let n = Notifier::start_with(&cfg, state.path(), fast());
        assert!(n.channels().is_empty());
        n.send(crash());
        n.send(Notification::milestone(
            "run_started",
            "[lavender] run started",
        ));
        assert!(n.counts().is_empty());
        let answer = n.test(Some("bark")).await;
        let why = answer[0].1.as_ref().unwrap_err();
        assert!(why.starts_with("the bark channel is off: no"), "{why}");
        assert!(n.test(None).await.is_empty());
    }
    // No channel, so nothing to send on: the pushes were not queued anywhere.
    assert!(server.received().is_empty());
}

#[tokio::test]
async fn a_500_is_retried_and_a_400_is_not() {
    let server = Recorder::start().await;
    let state = tempfile::tempdir().unwrap();
    let mut cfg = quiet_config();
    cfg.ntfy.server = server.url();
    cfg.ntfy.topic = Some("runs".into());
    let n = Notifier::start_with(&cfg, state.path(), fast());

    server.reply(&[(500, "busy"), (503, "busy")]);
    n.send(crash());
    settle(&n, "ntfy", |sent, _, _| sent == 1).await;
    assert_eq!(server.received().len(), 3, "two failures, then success");
    assert_eq!(n.counts()["ntfy"].failed, 0);

    server.reply(&[(400, "bad topic")]);
    n.send(Notification::milestone("run_started", "run started"));
    // Counted as failed after its last attempt: a retry would have come first.
    settle(&n, "ntfy", |_, failed, _| failed == 1).await;
    assert_eq!(server.received().len(), 4, "a refusal is not retried");

    // Three 500s exhaust the attempts.
    server.reply(&[(500, "a"), (500, "b"), (500, "c")]);
    n.send(Notification::milestone(
        "stage_started",
        "sft stage started",
    ));
    settle(&n, "ntfy", |_, failed, _| failed == 2).await;
    assert_eq!(server.received().len(), 7);
}

#[tokio::test]
async fn an_attempt_that_hangs_times_out_and_is_retried() {
    // Accepts connections and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            held.push(socket);
        }
    });
    let state = tempfile::tempdir().unwrap();
    let mut cfg = quiet_config();
    webhook(
        &mut cfg,
        "hook",
        format!("http://{addr}/hook"),
        WebhookFormat::Json,
    );
    let mut options = fast();
    options.timings.attempt_timeout = Duration::from_millis(100);
    let n = Notifier::start_with(&cfg, state.path(), options);
    let start = Instant::now();
    n.send(crash());
    settle(&n, "hook", |_, failed, _| failed == 1).await;
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 3);
    let answer = n.test(Some("hook")).await;
    assert_eq!(answer[0].1, Err("no answer within 0.1 s".to_string()));
}

#[tokio::test]
async fn bark_must_confirm_with_code_200() {
    let server = Recorder::start().await;
    let state = tempfile::tempdir().unwrap();
    let mut cfg = quiet_config();
    cfg.bark.key = Some("wrong".into());
    cfg.bark.server = Some(server.url());
    let n = Notifier::start_with(&cfg, state.path(), fast());
    server.reply(&[(
        400,
        r#"{"code":400,"message":"failed to get device token"}"#,
    )]);
    let answer = n.test(Some("bark")).await;
    let err = answer[0].1.as_ref().unwrap_err();
    assert!(err.contains("failed to get device token"), "{err}");
    server.reply(&[(200, r#"{"code":500,"message":"push failed"}"#)]);
    n.send(crash());
    settle(&n, "bark", |sent, _, _| sent == 1).await;
    assert_eq!(server.received().len(), 3, "a code 500 is retried");
}

#[tokio::test]
async fn the_rate_limit_holds() {
    let server = Recorder::start().await;
    let state = tempfile::tempdir().unwrap();
    let mut cfg = quiet_config();
    cfg.max_per_minute = 2;
    webhook(
        &mut cfg,
        "hook",
        format!("{}/hook", server.url()),
        WebhookFormat::Json,
    );
    let window = Duration::from_millis(300);
    let mut options = fast();
    options.timings.rate_window = window;
    let n = Notifier::start_with(&cfg, state.path(), options);
    let start = Instant::now();
    for i in 0..5 {
        n.send(Notification::milestone(
            "checkpoint_saved",
            format!("save {i}"),
        ));
    }
    // At most 2 per window: push k leaves a window after push k-2 left, so it cannot
    // arrive before k/2 windows from the start. (Arrival times alone say less: a
    // slow first delivery brings pushes 0 and 2 closer than the pace they left at.)
    let got = server.wait_for(5).await;
    assert_eq!(got.len(), 5);
    for (k, push) in got.iter().enumerate() {
        let at = push.at.duration_since(start);
        assert!(
            at >= window * (k as u32 / 2),
            "push {k} arrived after {at:?}"
        );
    }
    let bodies: Vec<String> = got.iter().map(|r| r.json()["body"].to_string()).collect();
    assert_eq!(
        bodies,
        [
            "\"save 0\"",
            "\"save 1\"",
            "\"save 2\"",
            "\"save 3\"",
            "\"save 4\""
        ]
    );
    assert_eq!(n.counts()["hook"].dropped, 0, "waited, not dropped");
}

#[tokio::test]
async fn alerts_jump_the_queue() {
    let server = Recorder::start().await;
    let state = tempfile::tempdir().unwrap();
    let mut cfg = quiet_config();
    cfg.max_per_minute = 1;
    webhook(
        &mut cfg,
        "hook",
        format!("{}/hook", server.url()),
        WebhookFormat::Json,
    );
    let mut options = fast();
    options.timings.rate_window = Duration::from_millis(100);
    let n = Notifier::start_with(&cfg, state.path(), options);
    n.send(Notification::milestone("checkpoint_saved", "save 0"));
    server.wait_for(1).await;
    // The window is now full: these wait, and the alert leaves first.
    n.send(Notification::milestone("checkpoint_saved", "save 1"));
    n.send(Notification::milestone("checkpoint_saved", "save 2"));
    n.send(crash());
    let kinds: Vec<String> = server
        .wait_for(4)
        .await
        .iter()
        .map(|r| r.json()["kind"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        kinds,
        [
            "checkpoint_saved",
            "crashed",
            "checkpoint_saved",
            "checkpoint_saved"
        ]
    );
}

fn append(run: &Path, kind: &str, fields: Value) {
    events::append(run, &event(kind, fields)).unwrap();
}

#[tokio::test]
async fn no_duplicates_after_a_daemon_restart() {
    let server = Recorder::start().await;
    let state = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let run = data.path().join("run-2026-04-24_16-08-45");
    std::fs::create_dir(&run).unwrap();
    let mut cfg = quiet_config();
    webhook(
        &mut cfg,
        "hook",
        format!("{}/hook", server.url()),
        WebhookFormat::Slack,
    );

    append(&run, "run_started", json!({"device": "cpu"}));
    append(
        &run,
        "data_loaded",
        json!({"documents": 1123456, "sources": 12}),
    );
    append(&run, "retention", json!({"dropped": 1}));
    append(&run, "tokenizer_ready", json!({"vocab_size": 2048}));
    {
        let n = Notifier::start_with(&cfg, state.path(), fast());
        let mut follower = EventFollower::new(Some(&n), state.path(), data.path());
        assert_eq!(
            follower.poll(&run).unwrap().pushed,
            3,
            "retention is not pushed"
        );
        assert_eq!(follower.poll(&run).unwrap().pushed, 0);
        settle(&n, "hook", |sent, _, _| sent == 3).await;
    }
    // The daemon restarts: a new notifier and follower from the saved offsets.
    let n = Notifier::start_with(&cfg, state.path(), fast());
    let mut follower = EventFollower::new(Some(&n), state.path(), data.path());
    assert!(follower.offset(&run) > 0);
    let followed = follower.poll(&run).unwrap();
    assert_eq!(followed.pushed, 0);
    // The same read feeds the live feed, which starts from the run's first line.
    assert_eq!(followed.events.len(), 4);
    append(
        &run,
        "dataset_built",
        json!({"dataset": "pretrain", "count": 9876543}),
    );
    let followed = follower.poll(&run).unwrap();
    assert_eq!((followed.pushed, followed.events.len()), (1, 1));
    // The one push this notifier was given (nothing was queued again above).
    settle(&n, "hook", |sent, _, _| sent == 1).await;
    let texts: Vec<Value> = server
        .received()
        .iter()
        .map(|r| r.json()["text"].clone())
        .collect();
    assert_eq!(
        texts,
        [
            "[lavender] run started (device=cpu)",
            "[lavender] data loaded: 1,123,456 docs from 12 sources",
            "[lavender] tokenizer ready (2,048 vocab)",
            "[lavender] pretrain tokenisation done: 9,876,543 chunks",
        ]
    );
    // A run without events yet is not an error.
    let empty = data.path().join("run-2026-04-25_00-00-00");
    std::fs::create_dir(&empty).unwrap();
    assert_eq!(follower.poll(&empty).unwrap().pushed, 0);
}

/// The data root (with its state directory) moved to another disk: the run's
/// milestones are not sent again, whether the offsets were saved relative to the
/// root or (by an earlier version) with absolute paths into the old place.
#[tokio::test]
async fn no_duplicates_after_the_data_root_moves() {
    let disks = tempfile::tempdir().unwrap();
    for (old_format, name) in [(false, "relative"), (true, "absolute")] {
        let old = disks.path().join(format!("{name}/a/lavender"));
        let run = old.join("checkpoints/run-2026-04-24_16-08-45");
        std::fs::create_dir_all(&run).unwrap();
        append(&run, "run_started", json!({"device": "cpu"}));
        append(&run, "tokenizer_ready", json!({"vocab_size": 2048}));
        let n = Notifier::start_with(&quiet_config(), &old.join("state"), fast());
        let mut follower = EventFollower::new(Some(&n), &old.join("state"), &old);
        assert_eq!(follower.poll(&run).unwrap().pushed, 2, "{name}");
        let offset = follower.offset(&run);
        drop(follower);
        let offsets = old.join("state/notify-offsets.json");
        if old_format {
            let key = events::path(&run).display().to_string();
            std::fs::write(&offsets, json!({"offsets": {key: offset}}).to_string()).unwrap();
        } else {
            let saved: Value = serde_json::from_slice(&std::fs::read(&offsets).unwrap()).unwrap();
            assert_eq!(
                saved["offsets"]["checkpoints/run-2026-04-24_16-08-45/events.jsonl"], offset,
                "recorded relative to the data root: {saved}"
            );
        }

        let moved = disks.path().join(format!("{name}/b/lavender"));
        std::fs::create_dir_all(moved.parent().unwrap()).unwrap();
        std::fs::rename(&old, &moved).unwrap();
        let run = moved.join("checkpoints/run-2026-04-24_16-08-45");
        let n = Notifier::start_with(&quiet_config(), &moved.join("state"), fast());
        let mut follower = EventFollower::new(Some(&n), &moved.join("state"), &moved);
        assert_eq!(follower.offset(&run), offset, "{name}");
        assert_eq!(
            follower.poll(&run).unwrap().pushed,
            0,
            "nothing sent again ({name})"
        );
        append(
            &run,
            "dataset_built",
            json!({"dataset": "pretrain", "count": 9}),
        );
        assert_eq!(follower.poll(&run).unwrap().pushed, 1, "{name}");
    }
}

#[tokio::test]
async fn milestones_off_sends_alerts_only() {
    let server = Recorder::start().await;
    let state = tempfile::tempdir().unwrap();
    let mut cfg = quiet_config();
    cfg.milestones = false;
    webhook(
        &mut cfg,
        "hook",
        format!("{}/hook", server.url()),
        WebhookFormat::Json,
    );
    let n = Notifier::start_with(&cfg, state.path(), fast());
    n.send(Notification::milestone("run_started", "run started"));
    n.send(crash());
    settle(&n, "hook", |sent, _, _| sent == 1).await;
    // A milestone queued would be taken next, as soon as the crash was counted:
    // delivered before an alert sent now.
    n.send(Notification::alert("stalled", "stalled: no heartbeat", ""));
    settle(&n, "hook", |sent, _, _| sent == 2).await;
    let kinds: Vec<Value> = server
        .received()
        .iter()
        .map(|r| r.json()["kind"].clone())
        .collect();
    assert_eq!(kinds, ["crashed", "stalled"]);
}

#[tokio::test]
async fn test_push_reports_each_server_answer() {
    let server = Recorder::start().await;
    let down = closed_port().await;
    let state = tempfile::tempdir().unwrap();
    let mut cfg = quiet_config();
    cfg.bark.key = Some("k".into());
    cfg.bark.server = Some(server.url());
    cfg.ntfy.server = server.url();
    cfg.ntfy.topic = Some("runs".into());
    webhook(
        &mut cfg,
        "down",
        format!("http://{down}/x"),
        WebhookFormat::Json,
    );
    let n = Notifier::start_with(&cfg, state.path(), fast());

    server.reply(&[(200, BARK_OK), (200, r#"{"id":"abc","event":"message"}"#)]);
    let results = n.test(None).await;
    let names: Vec<&str> = results.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(names, ["bark", "ntfy", "down"]);
    assert_eq!(results[0].1.as_deref(), Ok(&*format!("200 {BARK_OK}")));
    assert_eq!(
        results[1].1.as_deref(),
        Ok(r#"200 {"id":"abc","event":"message"}"#)
    );
    let err = results[2].1.as_ref().unwrap_err();
    assert!(err.contains(&down.to_string()), "{err}");
    let bark = server.at("/push")[0].json();
    assert_eq!(bark["title"], "[lavender] test push");
    assert_eq!(bark["level"], "timeSensitive");

    let one = n.test(Some("ntfy")).await;
    assert_eq!(one.len(), 1);
    assert!(one[0].1.is_ok());
    let unknown = n.test(Some("pager")).await;
    assert_eq!(
        unknown[0].1.as_ref().unwrap_err(),
        "no channel named `pager`; channels: bark, ntfy, down, desktop"
    );
    // Test pushes do not count as pushes.
    assert!(n.counts().values().all(|c| c.sent == 0 && c.failed == 0));
}
