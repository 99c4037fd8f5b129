//! What the notify tests that drive a `Notifier` in-process share: fast timings,
//! a wait for a channel's counts, and a crash alert's push.

use std::time::Duration;

use tokio::time::Instant;

use lavender::config::PipelineStep;
use lavenderd::alert::Alert;
use lavenderd::backoff::Backoff;
use lavenderd::exit::ExitOutcome;
use lavenderd::push::{Notification, Notifier, Options, Timings, pushes};

pub fn fast() -> Options {
    Options {
        timings: Timings {
            attempt_timeout: Duration::from_millis(500),
            retry_backoff: Backoff::new(vec![Duration::from_millis(10), Duration::from_millis(20)]),
            rate_window: Duration::from_secs(60),
            coalesce_window: Duration::from_secs(60),
        },
        desktop_program: None,
    }
}

/// Waits until `counts()` of `channel` satisfy `done` (or 5 s passed).
pub async fn settle(n: &Notifier, channel: &str, done: impl Fn(u64, u64, u64) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Some(c) = n.counts().get(channel)
            && done(c.sent, c.failed, c.dropped)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{channel} did not settle: {:?}", n.counts());
}

pub fn crash() -> Notification {
    let log =
        std::env::temp_dir().join(format!("lavender-notify-crash-{}.log", std::process::id()));
    std::fs::write(&log, "step 40 loss 2.1\nRuntimeError: out of memory\n").unwrap();
    let alert = Alert::Crashed {
        step: PipelineStep::Train,
        outcome: ExitOutcome::Code(1),
        failure: lavender::failure::Failure::new(
            lavender::failure::FailureKind::Crash,
            "exit code 1",
        ),
        restart: 1,
        max_restarts: 3,
        restart_in: Duration::from_secs(10),
        log_file: Some(log.clone()),
        repeats: Default::default(),
    };
    let push = pushes(&alert, "[lavender] ", 20).remove(0);
    let _ = std::fs::remove_file(log);
    push
}
