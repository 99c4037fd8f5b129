//! The notify tests' webhook receiver: an HTTP server on loopback that records
//! every request and answers as told, and the config and events they push.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use lavender::config::{NotifyConfig, WebhookConfig, WebhookFormat};
use lavender::events::Event;
use serde_json::Value;
use tokio::time::Instant;

pub const BARK_OK: &str = r#"{"code":200,"message":"success","timestamp":1}"#;

#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: HashMap<String, String>,
    pub body: String,
    pub at: Instant,
}

impl Received {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

#[derive(Clone, Default)]
struct Shared {
    got: Arc<Mutex<Vec<Received>>>,
    /// Answers to give next, in order; then 200 with Bark's success body.
    replies: Arc<Mutex<VecDeque<(u16, String)>>>,
}

/// An HTTP server on 127.0.0.1:0 that records every request.
pub struct Recorder {
    pub addr: SocketAddr,
    shared: Shared,
}

async fn record(
    State(s): State<Shared>,
    uri: Uri,
    headers: HeaderMap,
    body: String,
) -> (StatusCode, String) {
    s.got.lock().unwrap().push(Received {
        path: uri.path().to_string(),
        headers: headers
            .iter()
            .map(|(k, v)| {
                let value = String::from_utf8_lossy(v.as_bytes()).into_owned();
                (k.as_str().to_string(), value)
            })
            .collect(),
        body,
        at: Instant::now(),
    });
    let (code, text) = s
        .replies
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or((200, BARK_OK.to_string()));
    (StatusCode::from_u16(code).unwrap(), text)
}

impl Recorder {
    pub async fn start() -> Recorder {
        let shared = Shared::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().fallback(record).with_state(shared.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Recorder { addr, shared }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A `notify:` config section pushing to this server as the JSON webhook
    /// `hook` (`<url>/hook`), without coalescing or a rate limit; `extra`: more
    /// keys under `notify:`, indented.
    pub fn webhook_yaml(&self, extra: &str) -> String {
        format!(
            "notify:\n  desktop: false\n  coalesce_s: 0\n  max_per_minute: 1000\n  timeout_s: 2\n  attempts: 1\n{extra}  webhooks:\n    - name: hook\n      url: {}/hook\n",
            self.url()
        )
    }

    /// The `kind` of every JSON webhook push received so far, in order.
    pub fn kinds(&self) -> Vec<String> {
        self.received()
            .iter()
            .map(|r| r.json()["kind"].as_str().unwrap_or("").to_string())
            .collect()
    }

    /// The JSON webhook pushes of one kind.
    pub fn of_kind(&self, kind: &str) -> Vec<Value> {
        self.received()
            .iter()
            .map(Received::json)
            .filter(|j| j["kind"] == kind)
            .collect()
    }

    pub fn reply(&self, answers: &[(u16, &str)]) {
        let mut q = self.shared.replies.lock().unwrap();
        q.extend(answers.iter().map(|(c, t)| (*c, t.to_string())));
    }

    pub fn received(&self) -> Vec<Received> {
        self.shared.got.lock().unwrap().clone()
    }

    pub fn at(&self, path: &str) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|r| r.path == path)
            .collect()
    }

    /// Waits until at least `n` requests arrived (or 5 s passed).
    pub async fn wait_for(&self, n: usize) -> Vec<Received> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let got = self.received();
            if got.len() >= n || Instant::now() > deadline {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// A port nothing listens on.
pub async fn closed_port() -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}

pub fn quiet_config() -> NotifyConfig {
    NotifyConfig {
        desktop: false,
        ..NotifyConfig::default()
    }
}

pub fn webhook(cfg: &mut NotifyConfig, name: &str, url: String, format: WebhookFormat) {
    cfg.webhooks.push(WebhookConfig {
        name: Some(name.into()),
        url,
        format,
    });
}

pub fn event(kind: &str, fields: Value) -> Event {
    let mut e = Event::new(kind, format!("{kind} happened"));
    if let Value::Object(map) = fields {
        e.fields = map;
    }
    e
}
