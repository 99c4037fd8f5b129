//! A push channel whose server is down costs one log line and nothing else.
//! Its own test binary: it captures log lines with a thread-local subscriber,
//! which tests running in parallel threads would otherwise disturb.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::push_support::*;
use lavender::config::WebhookFormat;
use lavender_testkit::notify::*;
use lavenderd::push::Notifier;

/// Log lines at WARN and above, for counting.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;
    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

impl Logs {
    fn lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .map(str::to_string)
            .collect()
    }
}

// current_thread (the default): the delivery tasks log on this thread, where the
// capturing subscriber is set.
#[tokio::test]
async fn a_server_that_is_down_costs_one_log_line() {
    let logs = Logs::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer(logs.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let server = Recorder::start().await;
    let down = closed_port().await;
    let state = tempfile::tempdir().unwrap();
    let mut cfg = quiet_config();
    cfg.bark.key = Some("k".into());
    cfg.bark.server = Some(format!("http://{down}"));
    webhook(
        &mut cfg,
        "hook",
        format!("{}/hook", server.url()),
        WebhookFormat::Json,
    );
    let n = Notifier::start_with(&cfg, state.path(), fast());

    let push = crash();
    let started = std::time::Instant::now();
    n.send(push);
    assert!(
        started.elapsed() < Duration::from_millis(50),
        "send() waited"
    );
    settle(&n, "bark", |_, failed, _| failed == 1).await;
    settle(&n, "hook", |sent, _, _| sent == 1).await;
    let lines = logs.lines();
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(lines[0].contains("WARN"), "{}", lines[0]);
    assert!(
        lines[0].contains("bark: dropped `crashed` push after 3 attempts"),
        "{}",
        lines[0]
    );
    assert_eq!(n.counts()["bark"].sent, 0);
    assert_eq!(server.at("/hook").len(), 1);
}
