//! The dashboard in a real browser: headless Chromium, driven over its DevTools
//! protocol, opens `GET /` of a daemon supervising the fake worker, waits until
//! the loss chart has drawn points and the step counter advances, saves a
//! screenshot (target/tmp/dashboard.png), then stops the pipeline with the page's
//! stop button (a wrong token first, then the right one).
//!
//! Needs Chromium: `apt-get update && apt-get install -y chromium`
//! (scripts/ci-deps.sh). Without it this test fails and says so.

use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lavender_testkit::*;
use serde_json::{Value, json};
use tungstenite::{Message, WebSocket};

const T: Duration = Duration::from_secs(30);

fn find_chromium() -> PathBuf {
    if let Ok(p) = std::env::var("LAVENDER_CHROMIUM") {
        return PathBuf::from(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ] {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "the browser test needs Chromium and found none on PATH (nor LAVENDER_CHROMIUM). \
         Install it: sudo apt-get update && sudo apt-get install -y chromium  (scripts/ci-deps.sh does this)"
    );
}

/// Headless Chromium in its own process group, killed with its helpers on drop.
struct Browser {
    child: Child,
    log: PathBuf,
    port: u16,
}

impl Browser {
    fn launch(profile: &Path) -> Browser {
        let exe = find_chromium();
        let log = profile.with_extension("log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(&exe)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--no-default-browser-check",
                "--hide-scrollbars",
                "--window-size=1280,1100",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", exe.display()));
        let mut browser = Browser {
            child,
            log,
            port: 0,
        };
        // Chromium writes the port it picked to DevToolsActivePort.
        let active = profile.join("DevToolsActivePort");
        let deadline = Instant::now() + T;
        loop {
            if let Some(port) = std::fs::read_to_string(&active)
                .ok()
                .and_then(|s| s.lines().next().and_then(|l| l.trim().parse().ok()))
            {
                browser.port = port;
                return browser;
            }
            if let Ok(Some(status)) = browser.child.try_wait() {
                panic!(
                    "chromium exited ({status}) before listening:\n{}",
                    browser.log_tail()
                );
            }
            assert!(
                Instant::now() < deadline,
                "chromium did not open its DevTools port:\n{}",
                browser.log_tail()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| !l.contains("dbus")).collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// The DevTools websocket of the first page target.
    fn page_socket(&self) -> Cdp {
        let addr = format!("127.0.0.1:{}", self.port);
        let mut url = None;
        wait_until(T, "a page target", || {
            let r = lavender_testkit::http::get(&addr, "/json/list");
            if r.status != 200 {
                return false;
            }
            let targets: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
            url = targets
                .as_array()
                .into_iter()
                .flatten()
                .find(|t| t["type"] == "page")
                .and_then(|t| t["webSocketDebuggerUrl"].as_str().map(String::from));
            url.is_some()
        });
        let url = url.unwrap();
        let stream = TcpStream::connect(&addr).unwrap();
        stream.set_read_timeout(Some(T)).unwrap();
        let (ws, _) =
            tungstenite::client(url.as_str(), stream).expect("DevTools websocket handshake");
        Cdp {
            ws,
            next_id: 0,
            exceptions: Vec::new(),
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        send_signal(-(self.child.id() as i32), 9);
        let _ = self.child.wait();
    }
}

/// A minimal DevTools protocol client: one call at a time; events in between
/// are scanned for uncaught page exceptions and console errors.
struct Cdp {
    ws: WebSocket<TcpStream>,
    next_id: u64,
    exceptions: Vec<String>,
}

impl Cdp {
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let msg = json!({"id": id, "method": method, "params": params});
        self.ws.send(Message::text(msg.to_string())).unwrap();
        loop {
            let text = match self
                .ws
                .read()
                .unwrap_or_else(|e| panic!("DevTools {method}: {e}"))
            {
                Message::Text(t) => t.to_string(),
                _ => continue,
            };
            let v: Value = serde_json::from_str(&text).unwrap();
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{method} failed: {}", v["error"]);
                return v["result"].clone();
            }
            match v["method"].as_str() {
                Some("Runtime.exceptionThrown") => self
                    .exceptions
                    .push(v["params"]["exceptionDetails"].to_string()),
                Some("Runtime.consoleAPICalled") if v["params"]["type"] == "error" => {
                    self.exceptions.push(v["params"]["args"].to_string())
                }
                _ => {}
            }
        }
    }

    /// Evaluates a JS expression in the page and returns its value.
    fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(
            r.get("exceptionDetails").is_none(),
            "{expr}: {}",
            r["exceptionDetails"]
        );
        r["result"]["value"].clone()
    }

    fn screenshot(&mut self, path: &Path) {
        let r = self.call("Page.captureScreenshot", json!({"format": "png"}));
        let png = data_encoding::BASE64
            .decode(r["data"].as_str().unwrap().as_bytes())
            .unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
        eprintln!("dashboard screenshot: {}", path.display());
    }
}

// `null` until the dashboard's document is parsed whole: navigation is
// asynchronous, and while the parser streams the page some elements exist and
// the later ones do not yet.
const PAGE_STATE: &str = r#"document.readyState === 'loading' || !document.getElementById('losschart') ? 'null' : JSON.stringify({
  loss: +document.getElementById('losschart').dataset.points,
  lr: +document.getElementById('lrchart').dataset.points,
  step: parseInt(document.getElementById('step').textContent, 10),
  conn: document.getElementById('conn').textContent,
  state: document.getElementById('state').textContent,
  ckpts: document.querySelectorAll('#ckpts tr td:nth-child(3)').length,
  ckptTime: (document.querySelector('#ckpts tr td:nth-child(3)') || {}).textContent || '',
  ckptVerdicts: [...document.querySelectorAll('#ckpts tr td:nth-child(5)')].map((e) => e.textContent),
  events: document.querySelectorAll('#events li:not(.empty)').length,
  notice: document.getElementById('notice').textContent,
  tokenForm: getComputedStyle(document.getElementById('tokenform')).display,
  recovery: document.getElementById('recovery').textContent,
  rollbacks: [...document.querySelectorAll('#rollbacks li')].map((e) => e.textContent),
  alerts: [...document.querySelectorAll('#events li.alert')].map((e) => e.textContent),
  goodput: document.getElementById('gpline').textContent,
  goodputBar: document.querySelectorAll('#gpbar span').length,
  goodputLegend: [...document.querySelectorAll('#gplegend div')].map((e) => e.textContent),
  trackers: document.getElementById('trackers').textContent,
})"#;

fn page(cdp: &mut Cdp) -> Value {
    serde_json::from_str(cdp.eval(PAGE_STATE).as_str().unwrap()).unwrap()
}

fn wait_page(cdp: &mut Cdp, what: &str, mut cond: impl FnMut(&Value) -> bool) -> Value {
    let deadline = Instant::now() + T;
    loop {
        let p = page(cdp);
        if !p.is_null() && cond(&p) {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; page: {p}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_dashboard_draws_live_training_and_stops_it_with_the_token() {
    let mut env = Env::new(
        &[
            "--total-steps",
            "100000",
            "--step-ms",
            "40",
            "--checkpoint-every",
            "25",
        ],
        "tracking:\n  tensorboard: {dir: tb}\n  wandb: {project: dash, mode: offline}",
        "[train]",
    );
    env.serve();
    let r = env.uds("POST", "/pipeline/start", Some("{}")).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let addr = env.addr();

    let profile = env.dir.path().join("chromium-profile");
    let browser = Browser::launch(&profile);
    let mut cdp = browser.page_socket();
    cdp.call("Runtime.enable", json!({}));
    cdp.call("Page.enable", json!({}));
    cdp.call("Page.navigate", json!({"url": format!("http://{addr}/")}));

    // Live: the chart has points, the counter moves, a checkpoint is listed with its time.
    let first = wait_page(&mut cdp, "a drawn loss chart", |p| {
        p["loss"].as_u64() > Some(0) && p["step"].as_u64().is_some() && p["conn"] == "live"
    });
    let step0 = first["step"].as_u64().unwrap();
    let later = wait_page(&mut cdp, "the step counter to advance", |p| {
        p["step"].as_u64() > Some(step0 + 10)
            && p["ckpts"].as_u64() > Some(0)
            && p["loss"].as_u64() > first["loss"].as_u64()
    });
    assert_eq!(later["state"], "running");
    assert!(later["lr"].as_u64() > Some(0), "{later}");
    // The lineage's tracker runs (tracking:).
    wait_page(&mut cdp, "the tracker runs", |p| {
        p["trackers"]
            .as_str()
            .is_some_and(|t| t.contains("TensorBoard ") && t.contains("W&B run "))
    });
    assert!(
        later["ckptTime"].as_str().unwrap().contains(':'),
        "checkpoints show their time: {later}"
    );
    assert!(
        later["events"].as_u64() > Some(0),
        "milestones are listed: {later}"
    );
    // Each checkpoint's verdict, as `lavenderd checkpoints` says it: the fake
    // worker's have no manifest, so once read back they are unverified.
    wait_page(&mut cdp, "a checkpoint's verdict in the table", |p| {
        p["ckptVerdicts"]
            .as_array()
            .is_some_and(|v| v.iter().any(|t| t == "unverified"))
    });
    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
    cdp.screenshot(&shot);

    // Stop: the page asks for the token; a wrong one is rejected and forgotten.
    cdp.eval("document.getElementById('stop').click()");
    wait_page(&mut cdp, "the token prompt", |p| p["tokenForm"] == "flex");
    let submit = |token: &str| {
        format!(
            "document.getElementById('token').value = {}; document.getElementById('tokenform').requestSubmit()",
            json!(token)
        )
    };
    cdp.eval(&submit("not-the-token"));
    let p = wait_page(&mut cdp, "the rejection", |p| {
        p["notice"].as_str().unwrap().contains("token rejected")
    });
    assert_eq!(p["tokenForm"], "flex");
    assert_eq!(
        cdp.eval("sessionStorage.getItem('lavender.token')"),
        Value::Null
    );
    assert_eq!(env.status()["pipeline"]["state"], "running");

    cdp.eval(&submit(&env.token()));
    wait_page(&mut cdp, "the stopped state", |p| p["state"] == "stopped");
    // The page hears of the transition from the event stream, which composes from the
    // pipeline's record as it changes; `GET /status` serves the refresher's snapshot,
    // which reads the run's files after the change: milliseconds later.
    env.wait_state("stopped", T);
    // Kept for this tab's session only.
    assert_eq!(
        cdp.eval("sessionStorage.getItem('lavender.token')"),
        json!(env.token())
    );
    assert_eq!(cdp.eval("localStorage.length"), json!(0));
    let p = wait_page(&mut cdp, "the stop report", |p| {
        !p["notice"].as_str().unwrap().starts_with("stopping")
    });
    assert!(p["notice"].as_str().unwrap().contains("saved"), "{p}");
    cdp.screenshot(&PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard-stopped.png"));

    assert!(
        cdp.exceptions.is_empty(),
        "page errors: {:?}",
        cdp.exceptions
    );
    drop(browser);
}

/// A hung worker restarted shows on the page: the pipeline card says what the
/// daemon did (and from which checkpoint), the events list has the alert.
#[test]
fn the_dashboard_shows_a_hung_worker_restarted() {
    let mut env = Env::new(
        &[
            "--hang-after",
            "12",
            "--hang-times",
            "1",
            "--step-ms",
            "40",
            "--checkpoint-every",
            "5",
            "--total-steps",
            "100000",
        ],
        "  stale_after_s: 1\n  stall_kill_grace_s: 0.5",
        "[train]",
    );
    env.serve();
    let r = env.uds("POST", "/pipeline/start", Some("{}")).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let addr = env.addr();
    let profile = env.dir.path().join("chromium-profile");
    let browser = Browser::launch(&profile);
    let mut cdp = browser.page_socket();
    cdp.call("Runtime.enable", json!({}));
    cdp.call("Page.enable", json!({}));
    cdp.call("Page.navigate", json!({"url": format!("http://{addr}/")}));
    let p = wait_page(&mut cdp, "the restart on the page", |p| {
        p["recovery"]
            .as_str()
            .unwrap_or("")
            .contains("hung at step 12")
            && p["alerts"].as_array().is_some_and(|a| {
                a.iter()
                    .any(|e| e.as_str().unwrap().contains("hung at step 12"))
            })
    });
    let recovery = p["recovery"].as_str().unwrap();
    assert!(recovery.contains("restarted from pretrain-"), "{p}");
    // The goodput chart: the hang's silence among the run's buckets (this worker
    // still saves on the kill's SIGTERM, so no step is thrown away).
    let lost = |p: &Value, bucket: &str| {
        p["goodputLegend"].as_array().is_some_and(|l| {
            l.iter().any(|e| {
                let e = e.as_str().unwrap();
                e.starts_with(bucket) && !e.ends_with(" 0s")
            })
        })
    };
    let p = wait_page(&mut cdp, "the hang in the goodput chart", |p| {
        lost(p, "hang detection") && lost(p, "productive")
    });
    assert!(
        p["goodput"]
            .as_str()
            .unwrap()
            .contains(" % goodput · lost "),
        "{p}"
    );
    assert!(p["goodputBar"].as_u64().unwrap() >= 3, "{p}");
    cdp.screenshot(&PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard-hung.png"));
    assert!(
        cdp.exceptions.is_empty(),
        "page errors: {:?}",
        cdp.exceptions
    );
    drop(browser);
}

/// A divergence rolled back (the fake worker reports `diverged` at step 12): the
/// dashboard lists the rollback, says what the daemon did, and shows the push.
#[test]
fn the_dashboard_shows_a_divergence_rolled_back() {
    let mut env = Env::new(
        &[
            "--crash-after",
            "12",
            "--crash-times",
            "1",
            "--crash-kind",
            "diverged",
            "--step-ms",
            "40",
            "--checkpoint-every",
            "5",
            "--total-steps",
            "100000",
        ],
        "",
        "[train]",
    );
    env.serve();
    let r = env.uds("POST", "/pipeline/start", Some("{}")).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let addr = env.addr();
    let profile = env.dir.path().join("chromium-profile");
    let browser = Browser::launch(&profile);
    let mut cdp = browser.page_socket();
    cdp.call("Runtime.enable", json!({}));
    cdp.call("Page.enable", json!({}));
    cdp.call("Page.navigate", json!({"url": format!("http://{addr}/")}));
    let p = wait_page(&mut cdp, "the rollback on the page", |p| {
        p["rollbacks"].as_array().is_some_and(|r| r.len() == 1)
            && p["recovery"]
                .as_str()
                .unwrap_or("")
                .contains("restarted from")
            && p["alerts"].as_array().is_some_and(|a| {
                a.iter()
                    .any(|e| e.as_str().unwrap().contains("rolled back to"))
            })
    });
    let line = p["rollbacks"][0].as_str().unwrap();
    assert!(
        line.starts_with("rolled back to step 10 (pretrain-")
            && line.contains("skipped to step 12"),
        "{p}"
    );
    assert!(
        p["recovery"]
            .as_str()
            .unwrap()
            .contains("diverged at step 12"),
        "{p}"
    );
    cdp.screenshot(&PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard-rollback.png"));
    assert!(
        cdp.exceptions.is_empty(),
        "page errors: {:?}",
        cdp.exceptions
    );
    drop(browser);
}
