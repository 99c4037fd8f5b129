//! How fast the daemon notices things, measured from the moment they happen:
//!
//! - `detect-crash`: SIGKILL the supervised worker, then poll `GET /status` until
//!   `pipeline.state` is `crashed`; with `--hook ADDR`, also wait for the `crashed`
//!   alert at a webhook receiver listening there. Also records when the process is
//!   actually gone (a zombie or reaped). Repeats after each restart.
//! - `detect-heartbeat`: replace `heartbeat.json` in `--run-dir` (temp file + rename,
//!   as a worker does) with a new step, then poll until `/status` shows that step.
//!
//! Each poll is one request on a kept-alive connection (a fraction of a
//! millisecond), so the figures are the daemon's, give or take one poll.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use lavender_client::{Client, Request};
use serde_json::{Value, json};

use crate::args::Args;
use crate::hook;
use crate::stats::{Latencies, ms};

unsafe extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}
const SIGKILL: i32 = 9;

/// The process exists and is not a zombie.
fn process_alive(pid: i64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().to_string())
        })
        .is_some_and(|rest| !rest.starts_with('Z') && !rest.starts_with('X'))
}

fn status(client: &mut Client) -> Result<Value, String> {
    let r = client
        .request(&Request::get("/status").render())
        .map_err(|e| format!("GET /status: {e}"))?;
    if r.status != 200 {
        return Err(format!("GET /status: HTTP {}: {}", r.status, r.text()));
    }
    serde_json::from_slice(&r.body).map_err(|e| format!("GET /status: not JSON: {e}"))
}

/// Polls the status until `pick` returns something, or fails after `timeout`.
fn poll<T>(
    client: &mut Client,
    timeout: Duration,
    what: &str,
    mut pick: impl FnMut(&Value) -> Option<T>,
) -> Result<(T, Instant), String> {
    let deadline = Instant::now() + timeout;
    loop {
        let st = status(client)?;
        let now = Instant::now();
        if let Some(v) = pick(&st) {
            return Ok((v, now));
        }
        if now > deadline {
            return Err(format!("timed out waiting for {what}; last status: {st}"));
        }
    }
}

/// A pause that does not line up with the daemon's 2 s safety refresh.
fn settle(i: usize) -> Duration {
    Duration::from_millis(300 + (i as u64 * 137) % 500)
}

fn summary(name: &str, samples: &[Duration]) -> Value {
    let lat = Latencies::new(samples.iter().map(|d| d.as_nanos() as u64).collect());
    json!({
        "what": name,
        "samples": lat.len(),
        "p50_ms": ms(lat.quantile(0.5)),
        "p90_ms": ms(lat.quantile(0.9)),
        "max_ms": ms(lat.max()),
        "all_ms": samples.iter().map(|d| ms(*d)).collect::<Vec<_>>(),
    })
}

pub fn crash(args: &Args) -> Result<(), String> {
    let target = args.target()?;
    let repeat: usize = args.get("repeat", 10)?;
    let timeout = Duration::from_secs_f64(args.get("timeout", 30.0)?);
    let hook = args.str("hook").map(hook::listen).transpose()?;
    let mut client = Client::new(target);
    let (mut to_status, mut to_alert, mut to_dead) = (Vec::new(), Vec::new(), Vec::new());
    let mut last_pid: Option<i64> = None;
    for i in 0..repeat {
        let (pid, _) = poll(&mut client, timeout, "a training worker", |st| {
            let p = &st["pipeline"];
            let pid = p["pid"].as_i64()?;
            (p["state"] == "running"
                && p["running"] == true
                && st["active_step"] == "train"
                && st["training"]["step"].as_u64().is_some()
                && Some(pid) != last_pid)
                .then_some(pid)
        })?;
        std::thread::sleep(settle(i));
        if let Some(rx) = &hook {
            while rx.try_recv().is_ok() {}
        }
        let t0 = Instant::now();
        if unsafe { kill(pid as i32, SIGKILL) } != 0 {
            return Err(format!(
                "kill -9 {pid}: {}",
                std::io::Error::last_os_error()
            ));
        }
        // When the kernel has actually ended the process (SIGKILL waits for a
        // process in uninterruptible sleep, e.g. in fsync), checked between polls.
        let mut dead_at: Option<Instant> = None;
        let (_, seen) = poll(&mut client, timeout, "pipeline.state = crashed", |st| {
            if dead_at.is_none() && !process_alive(pid) {
                dead_at = Some(Instant::now());
            }
            (st["pipeline"]["state"] == "crashed").then_some(())
        })?;
        to_status.push(seen - t0);
        to_dead.push(dead_at.unwrap_or(seen) - t0);
        if let Some(rx) = &hook {
            let deadline = t0 + timeout;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let got = rx
                    .recv_timeout(left)
                    .map_err(|_| format!("no crashed alert within {timeout:?}"))?;
                let kind = serde_json::from_str::<Value>(&got.body)
                    .ok()
                    .and_then(|v| v["kind"].as_str().map(str::to_string));
                if kind.as_deref() == Some("crashed") {
                    to_alert.push(got.at - t0);
                    break;
                }
            }
        }
        last_pid = Some(pid);
        eprintln!(
            "crash {}/{repeat}: process gone {:.1} ms, status {:.1} ms{}",
            i + 1,
            ms(to_dead[i]),
            ms(seen - t0),
            to_alert
                .last()
                .filter(|_| hook.is_some())
                .map(|d| format!(", alert {:.1} ms", ms(*d)))
                .unwrap_or_default()
        );
    }
    let mut out = vec![
        summary("sigkill_to_process_gone", &to_dead),
        summary("sigkill_to_status_crashed", &to_status),
    ];
    if hook.is_some() {
        out.push(summary("sigkill_to_webhook_alert", &to_alert));
    }
    println!("{}", Value::Array(out));
    Ok(())
}

pub fn heartbeat(args: &Args) -> Result<(), String> {
    let target = args.target()?;
    let run_dir = PathBuf::from(args.required("run-dir")?);
    let repeat: usize = args.get("repeat", 20)?;
    let timeout = Duration::from_secs_f64(args.get("timeout", 10.0)?);
    let path = lavender::heartbeat::path(&run_dir);
    let tmp = run_dir.join(".tmp-bench-heartbeat.json");
    let mut client = Client::new(target);
    let mut samples = Vec::new();
    for i in 0..repeat {
        let mut hb = lavender::heartbeat::read(&path).map_err(|e| e.to_string())?;
        let step = hb.step + 1000;
        hb.step = step;
        hb.total_steps = hb.total_steps.max(step + 1000);
        hb.timestamp = lavender::time::rfc3339_z(lavender::time::now_utc());
        let bytes = serde_json::to_vec(&hb).map_err(|e| e.to_string())?;
        std::fs::write(&tmp, bytes).map_err(|e| format!("write {}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, &path).map_err(|e| format!("rename to {}: {e}", path.display()))?;
        let t0 = Instant::now();
        let (_, seen) = poll(&mut client, timeout, "the new heartbeat step", |st| {
            (st["training"]["step"].as_u64() == Some(step)).then_some(())
        })?;
        samples.push(seen - t0);
        eprintln!("heartbeat {}/{repeat}: {:.1} ms", i + 1, ms(seen - t0));
        std::thread::sleep(settle(i));
    }
    println!("{}", summary("heartbeat_write_to_status", &samples));
    Ok(())
}
