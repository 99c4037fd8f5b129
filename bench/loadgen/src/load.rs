//! `loadgen load`: one thread and one kept-alive connection per `--connections`,
//! for `--duration` seconds after `--warmup`. Without `--rate` each connection sends
//! its next request as soon as the answer arrives (closed loop: throughput, and with
//! one connection the latency of an idle server). With `--rate R` requests go out on
//! a fixed schedule (R per second in total) and latency counts from the scheduled
//! moment, so a server that falls behind shows it. Prints one JSON object.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lavender_client::{Client, Request};
use serde_json::json;

use crate::args::Args;
use crate::stats::{Latencies, ms};

struct ThreadResult {
    latencies_ns: Vec<u64>,
    errors: u64,
    first_error: Option<String>,
    bytes: u64,
}

pub fn run(args: &Args) -> Result<(), String> {
    let target = args.target()?;
    let connections: usize = args.get("connections", 1)?;
    let duration = Duration::from_secs_f64(args.get("duration", 10.0)?);
    let warmup = Duration::from_secs_f64(args.get("warmup", 1.0)?);
    let rate: Option<f64> = args.opt("rate")?;
    let method = args.get("method", "GET".to_string())?;
    let path = args.get("path", "/status".to_string())?;
    let body = args.get("body", String::new())?;
    let headers = args.all("header");
    if connections == 0 {
        return Err("--connections must be at least 1".into());
    }
    if rate.is_some_and(|r| r <= 0.0) {
        return Err("--rate must be positive".into());
    }
    let mut request = Request::new(&method, &path);
    for h in &headers {
        let (name, value) = h
            .split_once(':')
            .ok_or_else(|| format!("--header {h:?}: write it as 'Name: value'"))?;
        request = request.header(name.trim(), value.trim());
    }
    if !body.is_empty() {
        request = request.body(body.as_bytes());
    }
    let request = Arc::new(request.render());

    // Every connection answers once before the clock starts.
    for _ in 0..connections {
        let mut c = Client::new(target.clone());
        let r = c
            .request(&request)
            .map_err(|e| format!("{}: {e}", target.describe()))?;
        if r.status != 200 {
            return Err(format!(
                "{} {path} answered HTTP {}: {}",
                method,
                r.status,
                String::from_utf8_lossy(&r.body)
            ));
        }
    }

    let start = Instant::now() + Duration::from_millis(20);
    let measure_from = start + warmup;
    let end = measure_from + duration;
    let interval = rate.map(|r| Duration::from_secs_f64(connections as f64 / r));
    let handles: Vec<_> = (0..connections)
        .map(|i| {
            let target = target.clone();
            let request = Arc::clone(&request);
            std::thread::spawn(move || {
                let mut client = Client::new(target);
                let mut out = ThreadResult {
                    latencies_ns: Vec::with_capacity(1 << 16),
                    errors: 0,
                    first_error: None,
                    bytes: 0,
                };
                // Spread the connections' schedules over one interval.
                let offset = interval
                    .map(|iv| iv.mul_f64(i as f64 / connections as f64))
                    .unwrap_or_default();
                let mut k: u32 = 0;
                loop {
                    let scheduled = match interval {
                        Some(iv) => {
                            let at = start + offset + iv * k;
                            k += 1;
                            let now = Instant::now();
                            if at > now {
                                std::thread::sleep(at - now);
                            }
                            at
                        }
                        None => Instant::now(),
                    };
                    if scheduled >= end {
                        break;
                    }
                    let result = client.request(&request);
                    let done = Instant::now();
                    if scheduled < measure_from {
                        continue;
                    }
                    match result {
                        Ok(r) if r.status == 200 => {
                            out.latencies_ns.push((done - scheduled).as_nanos() as u64);
                            out.bytes += r.body.len() as u64;
                        }
                        Ok(r) => {
                            out.errors += 1;
                            out.first_error
                                .get_or_insert_with(|| format!("HTTP {}", r.status));
                        }
                        Err(e) => {
                            out.errors += 1;
                            out.first_error.get_or_insert_with(|| e.to_string());
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                }
                out
            })
        })
        .collect();
    let mut all = Vec::new();
    let (mut errors, mut bytes, mut first_error) = (0, 0, None);
    for h in handles {
        let r = h.join().map_err(|_| "a load thread panicked".to_string())?;
        all.extend(r.latencies_ns);
        errors += r.errors;
        bytes += r.bytes;
        first_error = first_error.or(r.first_error);
    }
    let lat = Latencies::new(all);
    let secs = duration.as_secs_f64();
    let report = json!({
        "target": target.describe(),
        "transport": target.kind(),
        "method": method,
        "path": path,
        "connections": connections,
        "rate": rate,
        "duration_s": secs,
        "requests": lat.len(),
        "errors": errors,
        "first_error": first_error,
        "requests_per_s": (lat.len() as f64 / secs).round(),
        "mean_body_bytes": if lat.is_empty() { 0 } else { bytes / lat.len() as u64 },
        "p50_ms": ms(lat.quantile(0.50)),
        "p90_ms": ms(lat.quantile(0.90)),
        "p99_ms": ms(lat.quantile(0.99)),
        "max_ms": ms(lat.max()),
        "client_cpu_s": own_cpu_seconds(),
    });
    println!("{report}");
    Ok(())
}

/// This process's user + system CPU time so far (Linux), so a report can say what
/// the load itself cost.
fn own_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of proc_pid_stat(5), in USER_HZ (100 on Linux).
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}
