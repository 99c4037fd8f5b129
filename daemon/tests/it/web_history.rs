//! `GET /runs/{id}/history`: a 200,000-step history is cut to at most N points per
//! series keeping each bucket's lowest and highest loss, parsed once (then served
//! from the cache), and drawn as fast as a 200-step one. Prints the timings.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use lavender_testkit::http::{get, get_json};
use lavender_testkit::*;
use serde_json::Value;

const BIG: &str = "run-2026-01-01_00-00-00";
const SMALL: &str = "run-2026-01-02_00-00-00";

/// Noisy falling loss with rare spikes and dips; an eval entry every 1000 steps.
fn write_history(run_dir: &std::path::Path, steps: u64) -> Vec<[f64; 2]> {
    std::fs::create_dir_all(run_dir).unwrap();
    let mut text = String::new();
    let mut loss = Vec::new();
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    for step in 1..=steps {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let noise = (x % 1000) as f64 / 2000.0;
        let spike = match x % 4999 {
            0 => 9.0,
            1 => -2.0,
            _ => 0.0,
        };
        let l = 8.0 / (1.0 + step as f64 / 5000.0) + noise + spike;
        loss.push([step as f64, l]);
        let stage = if step * 10 > steps * 9 {
            "sft"
        } else {
            "pretrain"
        };
        writeln!(
            text,
            r#"{{"step":{step},"epoch":{},"learning_rate":{},"loss":{l},"grad_norm":1.0,"stage":"{stage}"}}"#,
            step as f64 / steps as f64,
            1e-3 * (1.0 - step as f64 / steps as f64)
        )
        .unwrap();
        if step.is_multiple_of(1000) {
            writeln!(
                text,
                r#"{{"step":{step},"eval_loss":{},"stage":"{stage}"}}"#,
                l * 1.1
            )
            .unwrap();
        }
    }
    std::fs::write(run_dir.join("log_history.jsonl"), text).unwrap();
    loss
}

fn timed(addr: &str, path: &str) -> (Value, Duration) {
    let t = Instant::now();
    let v = get_json(addr, path);
    (v, t.elapsed())
}

fn points(v: &Value, series: &str) -> Vec<[f64; 2]> {
    v["series"][series]["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| [p[0].as_f64().unwrap(), p[1].as_f64().unwrap()])
        .collect()
}

#[test]
fn long_histories_are_downsampled_keeping_extremes_and_served_from_cache() {
    let mut env = Env::new(&[], "", "[train]");
    let root = env.data_root.join("checkpoints");
    let big = write_history(&root.join(BIG), 200_000);
    write_history(&root.join(SMALL), 200);
    env.serve();
    let addr = env.addr();

    let n = 1000;
    let (first, parse_time) = timed(&addr, &format!("/runs/{BIG}/history?points={n}"));
    let (cached, big_time) = timed(&addr, &format!("/runs/{BIG}/history?points={n}"));
    let (_, small_first) = timed(&addr, &format!("/runs/{SMALL}/history?points={n}"));
    let (small, small_time) = timed(&addr, &format!("/runs/{SMALL}/history?points={n}"));
    eprintln!(
        "history timings: 200,000 steps: first {parse_time:?} (parse), then {big_time:?}; 200 steps: first {small_first:?}, then {small_time:?}"
    );
    assert_eq!(first, cached);
    assert_eq!(first["run"], BIG);
    assert_eq!(first["source"], "log_history.jsonl");
    assert_eq!(first["entries"], 200_200);
    assert_eq!(first["series"]["loss"]["total"], 200_000);
    assert_eq!(first["series"]["eval_loss"]["total"], 200);
    assert_eq!(
        first["stages"],
        serde_json::json!([{"name": "pretrain", "step": 1.0}, {"name": "sft", "step": 180001.0}])
    );

    // Each series fits in N points; the loss keeps every bucket's min and max.
    for s in [
        "loss",
        "loss_smooth",
        "learning_rate",
        "grad_norm",
        "eval_loss",
    ] {
        let p = points(&first, s);
        assert!(!p.is_empty() && p.len() <= n, "{s}: {} points", p.len());
        assert!(
            p.windows(2).all(|w| w[0][0] < w[1][0]),
            "{s} not in step order"
        );
    }
    let loss = points(&first, "loss");
    let buckets = n / 2;
    for b in 0..buckets {
        let bucket = &big[b * big.len() / buckets..(b + 1) * big.len() / buckets];
        let lo = bucket
            .iter()
            .cloned()
            .fold([0.0, f64::INFINITY], |m, p| if p[1] < m[1] { p } else { m });
        let hi =
            bucket.iter().cloned().fold(
                [0.0, f64::NEG_INFINITY],
                |m, p| if p[1] > m[1] { p } else { m },
            );
        assert!(loss.contains(&lo), "bucket {b}: min {lo:?} missing");
        assert!(loss.contains(&hi), "bucket {b}: max {hi:?} missing");
    }

    // A short run comes back whole.
    assert_eq!(small["series"]["loss"]["total"], 200);
    assert_eq!(points(&small, "loss").len(), 200);

    // Served from the cache, the long run costs about what the short one does.
    assert!(
        big_time < Duration::from_millis(500) && big_time < parse_time,
        "a cached 200,000-step history took {big_time:?} (first: {parse_time:?})"
    );

    // `current` is the newest run; bad ids and sizes are refused with a reason.
    assert_eq!(
        get_json(&addr, "/runs/current/history?points=10")["run"],
        SMALL
    );
    for bad in [
        "/runs/run-nope/history",
        "/runs/..%2Fstate/history",
        "/runs/.hidden/history",
    ] {
        let r = get(&addr, bad);
        assert_eq!(r.status, 404, "{bad}");
        assert!(r.body.contains("GET /runs lists them"), "{bad}");
    }
    let r = get(&addr, &format!("/runs/{SMALL}/history?points=1"));
    assert_eq!(r.status, 400, "{}", r.body);
    let r = get(&addr, &format!("/runs/{SMALL}/history?bogus=1"));
    assert_eq!(r.status, 400);

    // A run with no history yet: 404 that says so.
    std::fs::create_dir_all(root.join("run-2026-01-03_00-00-00")).unwrap();
    let r = get(&addr, "/runs/run-2026-01-03_00-00-00/history");
    assert_eq!(r.status, 404);
    assert!(r.body.contains("no log_history.jsonl or log_history.json"));
}

#[test]
fn a_training_runs_history_grows_as_it_trains() {
    let mut env = Env::new(
        &["--total-steps", "100000", "--step-ms", "10"],
        "",
        "[train]",
    );
    env.serve();
    let addr = env.addr();
    let r = env.uds("POST", "/pipeline/start", Some("{}")).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let mut seen = 0;
    wait_until(Duration::from_secs(20), "history entries", || {
        let r = get(&addr, "/runs/current/history?points=100");
        if r.status == 200 {
            let v = r.json();
            seen = v["series"]["loss"]["total"].as_u64().unwrap();
        }
        seen >= 20
    });
    wait_until(Duration::from_secs(20), "more history entries", || {
        let v = get_json(&addr, "/runs/current/history?points=100");
        let total = v["series"]["loss"]["total"].as_u64().unwrap();
        assert!(points(&v, "loss").len() <= 100);
        total > seen + 20
    });
}
