//! The goodput ledger under a real daemon and the fake worker: a night of
//! failures (a rollback, SIGKILLs, a SIGSTOP hang) with a daemon restart in the
//! middle, after which the buckets add up to the wall clock and `rework` to the
//! steps computed twice, measured by the worker's own clock (the `time` of each
//! step in its `.fake-timeline.jsonl`, which nothing cuts back).

use std::path::Path;
use std::time::{Duration, Instant};

use lavender_testkit::*;
use serde_json::Value;

const SIGKILL: i32 = 9;
const SIGSTOP: i32 = 19;
const STEP_MS: f64 = 100.0;

fn now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Waits until the worker `pid` wrote the heartbeat of step `step` (polls the file
/// every 2 ms, so a signal lands within the next step).
fn wait_beat(run: &Path, pid: i32, step: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let hb = std::fs::read_to_string(run.join("heartbeat.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok());
        if let Some(hb) = hb
            && hb["pid"] == pid
            && hb["step"].as_u64() >= Some(step)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for pid {pid} at step {step}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Waits for a worker other than `old` and returns its pid.
fn next_worker(env: &Env, old: i32) -> i32 {
    let mut pid = None;
    wait_until(Duration::from_secs(30), "the next worker", || {
        pid = env.worker_pid().filter(|p| *p != old);
        pid.is_some() && env.pipeline_json()["state"] == "running"
    });
    pid.unwrap()
}

/// The run's section of `state/goodput.json`.
fn ledger(env: &Env, run: &Path) -> Value {
    let name = run.file_name().unwrap().to_str().unwrap();
    let file = read_json(&env.state_dir().join("goodput.json"));
    file["pipeline"]["runs"][name].clone()
}

/// The steps computed and then thrown away, by the fake worker's `.fake-timeline.jsonl`:
/// (how many, and the seconds they took by the worker's clock, each step's time
/// the time since the step before it in the same process; the first step of a
/// process, whose start is not there, at the median step time).
fn thrown_away(run: &Path) -> (u64, f64, f64) {
    let text = std::fs::read_to_string(run.join(".fake-timeline.jsonl")).unwrap();
    let lines: Vec<(u64, f64)> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("time").is_some())
        .map(|v| (v["step"].as_u64().unwrap(), v["time"].as_f64().unwrap()))
        .collect();
    let mut durations = Vec::new();
    let mut steps: Vec<(u64, Option<f64>)> = Vec::new();
    let mut thrown: Vec<Option<f64>> = Vec::new();
    for (i, &(step, t)) in lines.iter().enumerate() {
        let before = i.checked_sub(1).map(|j| lines[j]);
        let dur = before.filter(|(s, _)| *s + 1 == step).map(|(_, t0)| t - t0);
        if let Some(d) = dur {
            durations.push(d);
        }
        while steps.last().is_some_and(|(s, _)| *s >= step) {
            thrown.push(steps.pop().unwrap().1);
        }
        steps.push((step, dur));
    }
    durations.sort_by(f64::total_cmp);
    let median = durations[durations.len() / 2];
    let seconds = thrown.iter().map(|d| d.unwrap_or(median)).sum();
    (thrown.len() as u64, seconds, median)
}

/// When the last step before `t` ended, by the worker's clock.
fn last_step_before(run: &Path, t: f64) -> f64 {
    let text = std::fs::read_to_string(run.join(".fake-timeline.jsonl")).unwrap();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["time"].as_f64())
        .filter(|x| *x <= t)
        .fold(0.0, f64::max)
}

#[test]
fn a_night_of_failures_adds_up_to_the_wall_clock_and_rework_to_the_steps_redone() {
    let mut env = Env::new(
        &[
            "--step-ms",
            "100",
            "--total-steps",
            "100",
            "--checkpoint-every",
            "10",
            // The first worker diverges at its step 27, since step 15: back to 10.
            "--crash-after",
            "27",
            "--crash-times",
            "1",
            "--crash-kind",
            "diverged",
            "--diverged-since-back",
            "12",
        ],
        "  max_restarts: 10\n  stale_after_s: 1\n  stall_kill_grace_s: 0.3",
        "[train]",
    );
    env.backoff_ms = "300".into();
    env.serve();
    env.start(&[]);
    let run = env.run_dir();
    // The run's clock starts at its first launch, as the daemon recorded it.
    let launched = env.pipeline_json()["worker"]["started_at"]
        .as_str()
        .map(|t| lavender::time::parse_rfc3339(t).unwrap())
        .expect("the first worker's launch");
    let started = launched.timestamp_millis() as f64 / 1000.0;

    // The rollback, then a SIGKILL at step 37 (back to 30).
    let first = env.worker_pid().unwrap();
    let second = next_worker(&env, first);
    wait_beat(&run, second, 37);
    send_signal(second, SIGKILL);
    let kill_1 = now_s();

    // A hang at step 46 (SIGSTOP): killed after a second of silence, back to 40.
    let third = next_worker(&env, second);
    wait_beat(&run, third, 46);
    send_signal(third, SIGSTOP);

    // The daemon restarts in place at step 52; the ledger goes on from its file.
    let fourth = next_worker(&env, third);
    wait_beat(&run, fourth, 52);
    let before = ledger(&env, &run);
    let out = env.run(&["daemon", "restart"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    wait_until(Duration::from_secs(10), "the ledger to count again", || {
        ledger(&env, &run)["figures"]["updated_at"] != before["figures"]["updated_at"]
    });
    let after = ledger(&env, &run);
    assert!(
        after["figures"]["wall_s"].as_f64() >= before["figures"]["wall_s"].as_f64(),
        "the restarted daemon kept the ledger:\n{before:#}\n{after:#}"
    );
    assert_eq!(
        after["figures"]["seconds"]["rework"], before["figures"]["seconds"]["rework"],
        "rework so far is kept"
    );
    assert_eq!(
        after["figures"]["interruptions"],
        before["figures"]["interruptions"]
    );

    // A SIGKILL at step 67 (back to 60); then the run finishes.
    wait_beat(&run, fourth, 67);
    send_signal(fourth, SIGKILL);
    let kill_2 = now_s();
    env.wait_state("finished", Duration::from_secs(60));
    wait_until(
        Duration::from_secs(10),
        "the ledger to see the finish",
        || ledger(&env, &run)["ledger"]["seen"]["state"] == "finished",
    );
    let g = ledger(&env, &run)["figures"].clone();

    // Every second of the run is in one bucket; they add up to the wall clock.
    let wall = g["wall_s"].as_f64().unwrap();
    let sum: f64 = g["seconds"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_f64().unwrap())
        .sum();
    let until = lavender::time::parse_rfc3339(g["updated_at"].as_str().unwrap()).unwrap();
    let clock = until.timestamp_millis() as f64 / 1000.0 - started;
    println!("ledger: {g:#}");
    println!("wall clock {clock:.3} s, ledger wall {wall:.3} s, buckets' sum {sum:.3} s");
    assert!((sum - wall).abs() < 0.01, "{sum} vs {wall}");
    assert!(
        (wall - clock).abs() <= 0.01 * clock,
        "the ledger's wall {wall:.3} s against the clock's {clock:.3} s"
    );

    // Rework: the steps computed twice, by the worker's clock, and the step a
    // SIGKILL cut short.
    let (redone, redone_s, step_s) = thrown_away(&run);
    let cut = (kill_1 - last_step_before(&run, kill_1)) + (kill_2 - last_step_before(&run, kill_2));
    let truth = redone_s + cut;
    let rework = g["seconds"]["rework"].as_f64().unwrap();
    println!(
        "steps redone {redone} × {step_s:.4} s ({redone_s:.3} s) + cut short {cut:.3} s = {truth:.3} s; ledger rework {rework:.3} s ({:+.1} %)",
        (rework - truth) / truth * 100.0
    );
    assert_eq!(redone, 17 + 7 + 6 + 7, "the schedule's steps redone");
    // The ledger sees each of the four interruptions when it reads the heartbeat
    // after it: on a loaded machine that read may come a step late. 5 %, or a step
    // per interruption where that is more (clean-clone run 24: +5.1 %, 0.21 s: two
    // steps over four interruptions).
    let slack = (0.05 * truth).max(4.0 * step_s);
    assert!(
        (rework - truth).abs() <= slack,
        "rework {rework:.3} s against the ground truth {truth:.3} s (± {slack:.3} s)"
    );
    assert!(step_s > STEP_MS / 1000.0 * 0.9);

    let kinds = &g["interruptions"];
    assert_eq!(kinds["rolled_back"], 1, "{g:#}");
    assert_eq!(kinds["failed"], 2, "{g:#}");
    assert_eq!(kinds["hung"], 1, "{g:#}");
    // The hang: a second of silence before it was judged, then the kill's grace.
    let hang = g["seconds"]["hang_detection"].as_f64().unwrap();
    assert!((1.0..5.0).contains(&hang), "hang_detection {hang}");
    assert!(g["seconds"]["backoff"].as_f64().unwrap() > 0.0);
    assert!(g["seconds"]["startup"].as_f64().unwrap() > 0.0);
    assert!(g["mtbf_s"].as_f64().unwrap() > 0.0);
    assert!(g["mttr_s"].as_f64().unwrap() > 0.0);
    let goodput = g["goodput"].as_f64().unwrap();
    let productive = g["seconds"]["productive"].as_f64().unwrap();
    assert!((goodput - productive / wall).abs() < 0.001);

    // Where a person looks: the status and its line.
    let st = env.wait_status(Duration::from_secs(10), "goodput in the status", |s| {
        s["goodput"]["updated_at"] == g["updated_at"]
    });
    assert_eq!(st["goodput"]["seconds"], g["seconds"]);
    let out = env.run(&["status"]);
    let text = stdout(&out);
    println!("{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("goodput "))
        .unwrap_or_else(|| panic!("no goodput line:\n{text}"));
    assert!(
        line.contains(&format!("goodput {:.1} %", goodput * 100.0)) && line.contains("rework"),
        "{line}"
    );
}

/// The daemon's log once it holds `line`, or what it holds after `timeout`.
fn log_after(env: &Env, line: &str, timeout: Duration) -> (bool, String) {
    let deadline = Instant::now() + timeout;
    loop {
        let log = std::fs::read_to_string(env.daemon_log()).unwrap_or_default();
        if log.contains(line) || Instant::now() >= deadline {
            return (log.contains(line), log);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A run whose steps take half again as long from step 60 to 140 (beside a busy
/// process) says so within `supervisor.slowdown.for_s` of the slowdown, naming the
/// process, and says when it is back to speed; the same run without the slowdown
/// (at the same time, beside the same process) says nothing.
#[test]
fn a_run_that_gets_half_again_slower_says_so_and_a_clean_run_does_not() {
    let supervisor = "  slowdown: {factor: 1.3, for_s: 2}";
    let common = [
        "--step-ms",
        "100",
        "--total-steps",
        "200",
        "--checkpoint-every",
        "1000",
    ];
    let mut slow_args = common.to_vec();
    slow_args.extend([
        "--slow-step-ms",
        "150",
        "--slow-from",
        "60",
        "--slow-to",
        "140",
    ]);
    let mut slow = Env::new(&slow_args, supervisor, "[train]");
    let mut clean = Env::new(&common, supervisor, "[train]");
    slow.serve();
    clean.serve();
    slow.start(&[]);
    clean.start(&[]);
    let run = slow.run_dir();
    let worker = slow.worker_pid().unwrap();

    // A busy process from step 50 on.
    wait_beat(&run, worker, 50);
    let mut hog = std::process::Command::new("sh")
        .args(["-c", "while :; do :; done"])
        .spawn()
        .unwrap();
    let hog_pid = hog.id();

    // Slower from step 60: 5 of the window's 8 steps later the median is over the
    // limit, and for_s (2 s) after that the alert.
    wait_beat(&run, worker, 60);
    let slowed = Instant::now();
    let hog_ticks = cpu_ticks(hog_pid as i32);
    let (alerted, log) = log_after(&slow, "ALERT training is slower", Duration::from_secs(15));
    let took = slowed.elapsed();
    // The hog's share of a CPU meanwhile: on a machine busy with other tests it
    // shares the cores with them, and may be no busier than they are.
    let hog_share = (cpu_ticks(hog_pid as i32) - hog_ticks) as f64
        / clock_ticks()
        / took.as_secs_f64().max(1e-3);
    let _ = hog.kill();
    let _ = hog.wait();
    assert!(alerted, "no slowdown alert:\n{log}");
    let alert = log
        .lines()
        .find(|l| l.contains("training is slower"))
        .unwrap()
        .to_string();
    println!("{alert}\n(after {took:?})");
    assert!(
        took < Duration::from_secs_f64(8.0 * 0.15 + 2.0 + 3.0),
        "the alert came {took:?} after the slowdown began"
    );
    assert!(
        alert.contains("s/step in pretrain against 0.1"),
        "it says the numbers: {alert}"
    );
    // The busy process is named, or every process named was at least as busy as it
    // was: five of them, or any when it got under the tenth of a CPU the alert names
    // from (a machine busy with other tests starves it).
    let shares: Vec<f64> = alert
        .split(" % of a CPU")
        .filter_map(|part| part.rsplit(' ').next()?.parse().ok())
        .collect();
    assert!(
        alert.contains(&format!("sh (pid {hog_pid})"))
            || ((shares.len() == 5 || hog_share < 0.1)
                && shares.iter().all(|s| s / 100.0 >= hog_share - 0.1)),
        "it names the busy process (it used {:.0} % of a CPU): {alert}",
        hog_share * 100.0
    );
    assert!(
        alert.contains("CPU steal") && alert.contains("swap in use"),
        "{alert}"
    );

    // The status shows the step time against its baseline while it is slow.
    let st = slow.wait_status(
        Duration::from_secs(10),
        "the slow step time in the status",
        |s| s["goodput"]["step_time"]["slow"] == true,
    );
    let t = &st["goodput"]["step_time"];
    let (baseline, current) = (
        t["baseline_s"].as_f64().unwrap(),
        t["current_s"].as_f64().unwrap(),
    );
    assert!((0.095..0.15).contains(&baseline), "{t}");
    assert!(current / baseline > 1.3, "{t}");

    // Back to speed from step 140.
    let (back, log) = log_after(&slow, "training is back to speed", Duration::from_secs(30));
    assert!(back, "no recovery:\n{log}");
    slow.wait_state("finished", Duration::from_secs(30));
    assert_eq!(
        log.matches("training is slower").count(),
        1,
        "one alert:\n{log}"
    );

    clean.wait_state("finished", Duration::from_secs(30));
    let log = std::fs::read_to_string(clean.daemon_log()).unwrap();
    assert!(
        !log.contains("training is slower"),
        "the clean run raised:\n{log}"
    );
    let st = clean.status();
    assert_eq!(
        st["goodput"]["step_time"]["slow"], false,
        "{:#}",
        st["goodput"]
    );
}

fn clock_ticks() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .map_or(100.0, |t| t as f64)
}

/// utime + stime of `pid` in clock ticks.
fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    // After the name: state is field 3, utime 14 and stime 15.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// A power cut: the daemon and its worker SIGKILLed together, the machine "off" for
/// a few seconds, the daemon started again (it resumes the run from the newest
/// checkpoint). The time both were down is `stopped`, not the bucket the run was
/// last in and never `rework`: rework stays the steps redone (those since the
/// checkpoint, by the worker's clock), and the buckets still add up to the wall.
#[test]
fn a_power_cut_is_counted_as_stopped_not_as_rework() {
    let mut env = Env::new(
        &[
            "--step-ms",
            "100",
            "--total-steps",
            "100",
            "--checkpoint-every",
            "10",
        ],
        "",
        "[train]",
    );
    env.serve();
    env.start(&[]);
    let run = env.run_dir();
    let worker = env.worker_pid().unwrap();
    // Past a checkpoint (step 70), and past the ledger's periodic write.
    wait_beat(&run, worker, 75);
    env.kill_daemons();
    send_signal(-worker, SIGKILL);
    let cut = now_s();
    wait_until(Duration::from_secs(5), "the worker to be gone", || {
        !alive(worker)
    });
    // The machine stays off for three seconds of wall clock.
    let off = Duration::from_secs(3);
    wait_until(
        off + Duration::from_secs(2),
        "the power to come back",
        || now_s() - cut >= off.as_secs_f64(),
    );
    env.serve();
    let back = now_s();
    env.wait_state("finished", Duration::from_secs(60));
    wait_until(
        Duration::from_secs(10),
        "the ledger to see the finish",
        || ledger(&env, &run)["ledger"]["seen"]["state"] == "finished",
    );
    let g = ledger(&env, &run)["figures"].clone();
    println!("ledger after a power cut of {:.1} s: {g:#}", back - cut);
    let wall = g["wall_s"].as_f64().unwrap();
    let sum: f64 = g["seconds"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_f64().unwrap())
        .sum();
    assert!((sum - wall).abs() < 0.01, "{sum} vs {wall}");
    let stopped = g["seconds"]["stopped"].as_f64().unwrap();
    assert!(
        stopped >= (back - cut) - 1.0,
        "the {:.1} s down are stopped: {stopped:.3} s",
        back - cut
    );
    let (redone, redone_s, _) = thrown_away(&run);
    let cut_short = cut - last_step_before(&run, cut);
    let truth = redone_s + cut_short;
    let rework = g["seconds"]["rework"].as_f64().unwrap();
    println!("steps redone {redone} ({truth:.3} s); ledger rework {rework:.3} s");
    assert!(
        rework <= truth + 0.5,
        "rework {rework:.3} s is more than the {truth:.3} s redone: the time down counted as rework"
    );
    assert!(
        rework >= 0.5 * truth,
        "rework {rework:.3} s is less than half the {truth:.3} s redone"
    );
}
