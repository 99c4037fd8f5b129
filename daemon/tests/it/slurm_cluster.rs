//! The Slurm backend on a two-node cluster: `scripts/slurm/start-cluster.sh` starts a
//! slurmctld and two slurmd, each in its own network namespace with its own address,
//! and the real `lavenderd` runs examples/torchrun across both nodes (one torchrun
//! agent, one gloo rank per node) with docs/SLURM.md's "Two nodes" configuration:
//!
//! - the status names the job and both nodes, and rank 0's heartbeat drives it;
//!   `stop` saves once and ends the job, `start --resume latest` continues in a new
//!   job, and the final weights equal an uninterrupted two-node run's, bit for bit;
//! - the same run under a two-minute time limit: Slurm's notice reaches both ranks,
//!   rank 0 saves, the job goes back in the queue and resumes from that save on both
//!   nodes, and its next checkpoint equals the uninterrupted run's at that step;
//! - a node lost mid-run (`scripts/slurm/cluster-node.sh fail n2`: its processes
//!   killed, its link down): Slurm marks it DOWN and requeues the job; the status and
//!   a push say "node n2 lost at step N; waiting for 2 nodes" while it waits; the node
//!   back, the job resumes from the latest complete checkpoint; a second job beside
//!   it, with `on_node_failure: fail`, is cancelled and its pipeline fails naming n2;
//! - lavender-worker on two nodes is refused before anything is submitted;
//! - the doc's status lines have the shape of the live ones.
//!
//! A [`Cluster`] guard runs `stop-cluster.sh` whatever happens. The waits are on
//! Slurm's and the worker's events, with generous deadlines.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use lavender_testkit::python::{require_modules, say, step_of, venv_tool};
use lavender_testkit::*;
use serde_json::Value;

const DOC: &str = include_str!("../../../docs/SLURM.md");
const CLUSTER_DIR: &str = "/tmp/lavender-slurm-cluster";

fn script(name: &str) -> PathBuf {
    repo().join("scripts/slurm").join(name)
}

/// The running cluster; dropping it removes everything `start-cluster.sh` made.
struct Cluster {
    conf: String,
}

impl Cluster {
    fn up() -> Cluster {
        let started = Instant::now();
        let out = Command::new("bash")
            .arg(script("start-cluster.sh"))
            .output()
            .expect("run scripts/slurm/start-cluster.sh");
        let cluster = Cluster {
            conf: format!("{CLUSTER_DIR}/slurm.conf"),
        };
        assert!(
            out.status.success(),
            "could not start the two-node test cluster with scripts/slurm/start-cluster.sh \
             (it needs root, iproute2, util-linux and the slurm/munge packages: see \
             scripts/ci-deps.sh):\n{}{}",
            stdout(&out),
            stderr(&out)
        );
        say(format!(
            "two-node cluster up in {:.1} s:\n{}",
            started.elapsed().as_secs_f64(),
            stdout(&out).trim_end()
        ));
        cluster
    }

    /// `cluster-node.sh fail|restore <node>`.
    fn node(&self, action: &str, node: &str) {
        let out = Command::new("bash")
            .arg(script("cluster-node.sh"))
            .args([action, node])
            .output()
            .expect("run scripts/slurm/cluster-node.sh");
        assert!(
            out.status.success(),
            "cluster-node.sh {action} {node}:\n{}{}",
            stdout(&out),
            stderr(&out)
        );
        say(stdout(&out).trim_end());
    }

    fn slurm(&self, program: &str, args: &[&str]) -> String {
        let out = Command::new(program)
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .output()
            .unwrap_or_else(|e| panic!("run {program}: {e}"));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn job(&self, id: &str) -> String {
        self.slurm("scontrol", &["-o", "show", "job", id])
    }

    /// `scontrol update ARGS…`; true when Slurm took it.
    fn update(&self, args: &[&str]) -> bool {
        Command::new("scontrol")
            .arg("update")
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .status()
            .is_ok_and(|s| s.success())
    }

    fn node_state(&self, node: &str) -> String {
        field(
            &self.slurm("scontrol", &["-o", "show", "node", node]),
            "State",
        )
        .unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let out = Command::new("bash").arg(script("stop-cluster.sh")).output();
        if let Ok(out) = out {
            eprintln!("{}{}", stdout(&out), stderr(&out));
        }
    }
}

fn field(line: &str, key: &str) -> Option<String> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .map(str::to_string)
}

// ---- docs/SLURM.md's "Two nodes" ---------------------------------------------------

/// The text of the section `## Two nodes`, up to the next `## `.
fn two_nodes_section() -> &'static str {
    let start = DOC
        .find("\n## Two nodes\n")
        .expect("docs/SLURM.md has a \"## Two nodes\" section");
    let rest = &DOC[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    &rest[..end]
}

/// The fenced blocks of `lang` in the section, in order.
fn blocks(lang: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in two_nodes_section().lines() {
        match (&mut current, line.trim_end()) {
            (None, l) if l == format!("```{lang}") => current = Some(String::new()),
            (Some(b), "```") => {
                out.push(std::mem::take(b));
                current = None;
            }
            (Some(b), l) => {
                b.push_str(l);
                b.push('\n');
            }
            (None, _) => {}
        }
    }
    out
}

/// A status line's shape: numbers are `N`, so the doc's job 17 matches a live job 5.
fn shape(line: &str) -> String {
    let mut out = String::new();
    let mut in_number = false;
    for c in line.trim_end().chars() {
        if c.is_ascii_digit() {
            if !in_number {
                out.push('N');
            }
            in_number = true;
        } else {
            out.push(c);
            in_number = false;
        }
    }
    out
}

/// The status lines the doc shows (its ```text blocks), one list per block.
fn doc_status_blocks() -> Vec<Vec<String>> {
    blocks("text")
        .iter()
        .map(|b| b.lines().map(shape).collect())
        .collect()
}

/// `lavenderd status`'s text shows every line of a doc block (by shape).
fn assert_shows_doc_block(text: &str, block: &[String]) {
    let live: Vec<String> = text.lines().map(shape).collect();
    for line in block {
        assert!(
            live.contains(line),
            "docs/SLURM.md shows `{line}`, the live status has no such line:\n{text}"
        );
    }
}

/// The doc's configuration with this checkout's paths, the test's worker arguments
/// and rendezvous port, and a quick poll.
fn config_yaml(max_steps: u64, save_every: u64, rdzv_port: u16) -> String {
    let doc = blocks("yaml")
        .into_iter()
        .next()
        .expect("a ```yaml block in \"Two nodes\"");
    let root = repo().display().to_string();
    let train = "examples/torchrun/train.py]";
    assert!(doc.contains(train), "{doc}");
    let args = format!(
        "examples/torchrun/train.py, --max-steps, \"{max_steps}\", --save-every, \"{save_every}\", --batch-size, \"4\", --seq-len, \"32\", --eval-batches, \"0\"]"
    );
    let env = "env: {";
    assert!(doc.contains(env), "{doc}");
    let pythonpath = repo().join("python/src").display().to_string();
    let yaml = doc
        .replace(train, &args)
        .replace(
            env,
            &format!("env: {{PYTHONPATH: {pythonpath:?}, LAVENDER_RDZV_PORT: \"{rdzv_port}\", "),
        )
        .replace("examples/", &format!("{root}/examples/"))
        .replace(".venv/", &format!("{root}/.venv/"))
        .replace("  slurm:\n", "  slurm:\n    poll_interval_s: 1\n");
    format!(
        "steps: [train]\nsupervisor:\n  listen: 127.0.0.1:0\n  poll_interval_ms: 50\n  stop_timeout_s: 90\n  \
         stale_after_s: 600\n  startup_grace_s: 600\n  restart_backoff_s: [0.2]\ntraining:\n  keep_checkpoints: 100\n{yaml}"
    )
}

/// `yaml` with its first `from` replaced by `to` (a change to the doc's configuration
/// that must apply).
fn edited(yaml: &str, from: &str, to: &str) -> String {
    assert!(yaml.contains(from), "no {from:?} to change in:\n{yaml}");
    yaml.replacen(from, to, 1)
}

/// A daemon in a tempdir running `yaml` against the cluster.
struct Run {
    d: Lavenderd,
    _dir: tempfile::TempDir,
}

impl Run {
    fn new(cluster: &Cluster, yaml: &str, extra: &str) -> Run {
        let dir = tempfile::tempdir().unwrap();
        let mut d = Lavenderd::in_dir(dir.path(), &format!("{yaml}{extra}"), "slurm-torchrun");
        d.env.push(("SLURM_CONF".into(), cluster.conf.clone()));
        d.serve();
        Run { d, _dir: dir }
    }

    fn text(&self) -> String {
        let out = self.d.run(&["status"]);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    }

    fn worker_log(&self) -> String {
        let mut text = String::new();
        if let Ok(entries) = std::fs::read_dir(self.d.data_root.join("logs")) {
            for e in entries.flatten() {
                text.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
            }
        }
        text
    }

    fn events(&self, run_dir: &Path) -> Vec<Value> {
        events(run_dir)
    }

    /// Waits for `what`, failing with the last status and the worker's log.
    fn wait(&self, timeout: Duration, what: &str, mut done: impl FnMut(&Value) -> bool) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let st = self.d.status();
            if done(&st) {
                return st;
            }
            if Instant::now() > deadline {
                let log = self.worker_log();
                let tail: Vec<&str> = log.lines().rev().take(60).collect();
                panic!(
                    "timed out after {timeout:?} waiting for {what}; the last status:\n{st:#}\n\
                     the worker's log (last lines):\n{}\nthe daemon's log:\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
                    std::fs::read_to_string(self.d.daemon_log()).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn wait_event(&self, run_dir: &Path, timeout: Duration, what: &str, kind: &str) -> Value {
        let mut found = None;
        self.wait(timeout, what, |_| {
            found = self.events(run_dir).into_iter().find(|e| e["kind"] == kind);
            found.is_some()
        });
        found.unwrap()
    }

    /// `torchrun rank R on <host> (pid P): run …, from step S, …` lines of the worker's
    /// log, one per rank and start: (rank, host, pid, S).
    fn ranks(&self) -> Vec<(u64, String, u64, u64)> {
        self.worker_log()
            .lines()
            .filter_map(|l| {
                let rest = l.strip_prefix("torchrun rank ")?;
                let (rank, rest) = rest.split_once(" on ")?;
                let (host, rest) = rest.split_once(" (pid ")?;
                let (pid, rest) = rest.split_once(')')?;
                let (_, from) = rest.split_once(", from step ")?;
                let (from, _) = from.split_once(',')?;
                Some((
                    rank.parse().ok()?,
                    host.to_string(),
                    pid.parse().ok()?,
                    from.parse().ok()?,
                ))
            })
            .collect()
    }

    /// The worker log's lines that contain `text`.
    fn log_lines(&self, text: &str) -> Vec<String> {
        self.worker_log()
            .lines()
            .filter(|l| l.contains(text))
            .map(str::to_string)
            .collect()
    }
}

/// `lavenderd incidents --json` of `run`: each decision's kind and what it did.
fn decisions(run: &Run) -> Vec<(String, String)> {
    let out = run.d.run(&["incidents", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let all: Value = serde_json::from_str(&stdout(&out)).unwrap();
    all.as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let text = |k: &str| d[k].as_str().unwrap_or_default().to_string();
            (text("kind"), text("did"))
        })
        .collect()
}

fn job_of(st: &Value) -> String {
    st["pipeline"]["slurm"]["job_id"]
        .as_str()
        .expect("a Slurm job in the status")
        .to_string()
}

fn nodes_of(st: &Value) -> Vec<String> {
    st["pipeline"]["slurm"]["nodes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|n| n.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn running_on_two(st: &Value, min_step: u64) -> bool {
    st["pipeline"]["slurm"]["state"] == "RUNNING"
        && nodes_of(st).len() == 2
        && st["training"]["step"].as_u64().unwrap_or(0) >= min_step
}

/// The final checkpoint's `model.pt` of a finished run directory.
/// The `model.pt` of a run directory's checkpoint of `step`.
fn weights_at(run: &Path, step: u64) -> PathBuf {
    let found = lavender::checkpoint::list_run_checkpoints(run)
        .unwrap()
        .into_iter()
        .find(|c| c.state.step == step)
        .unwrap_or_else(|| panic!("a checkpoint of step {step} in {}", run.display()));
    run.join(found.name).join("model.pt")
}

fn final_weights(run: &Path) -> PathBuf {
    let last = lavender::checkpoint::list_run_checkpoints(run)
        .unwrap()
        .into_iter()
        .last()
        .expect("a checkpoint");
    run.join(last.name).join("model.pt")
}

const SLOW: Duration = Duration::from_secs(300);

/// Status with both nodes, rank 0's heartbeat, stop with one save, resume in a new job,
/// run to the end; returns the run (its tempdir holds them) and the final weights.
fn stopped_and_resumed(cluster: &Cluster, yaml: &str) -> (Run, PathBuf) {
    let run = Run::new(cluster, yaml, "");
    run.d.start(&[]);
    let st = run.wait(SLOW, "a two-node job that trains", |st| {
        running_on_two(st, 5)
    });
    let job = job_of(&st);
    let mut nodes = nodes_of(&st);
    assert_eq!(
        st["pipeline"]["slurm"]["node"],
        nodes[0].as_str(),
        "the batch node first: {st:#}"
    );
    nodes.sort();
    assert_eq!(nodes, ["n1", "n2"], "{st:#}");
    let info = cluster.job(&job);
    assert_eq!(field(&info, "NumNodes").as_deref(), Some("2"), "{info}");
    assert_eq!(field(&info, "NumTasks").as_deref(), Some("2"), "{info}");
    let text = run.text();
    say(format!("two-node run, `lavenderd status`:\n{text}"));
    assert_shows_doc_block(&text, &doc_status_blocks()[0]);
    // Rank 0's heartbeat drives the status: its pid is rank 0's, on a node of the job.
    let run_dir = run.d.run_dir();
    let ranks = run.ranks();
    let hosts: Vec<&str> = ranks.iter().map(|r| r.1.as_str()).collect();
    assert!(
        ranks.len() == 2 && hosts.contains(&"n1") && hosts.contains(&"n2"),
        "one rank per node: {ranks:?}"
    );
    let rank0 = ranks.iter().find(|r| r.0 == 0).unwrap();
    let hb: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("heartbeat.json")).unwrap())
            .unwrap();
    assert_eq!(
        hb["pid"], rank0.2,
        "rank 0 ({rank0:?}) writes the heartbeat: {hb}"
    );
    let st = run.d.status();
    assert!(
        st["training"]["step"].as_u64().unwrap() <= hb["step"].as_u64().unwrap() + 1000,
        "{st:#}"
    );
    say(format!(
        "rank 0 runs on {} (pid {}), rank 1 on the other node",
        rank0.1, rank0.2
    ));

    let said = run.d.stop_saved();
    let finals: Vec<Value> = run
        .events(&run_dir)
        .into_iter()
        .filter(|e| e["kind"] == "final_saved")
        .collect();
    assert_eq!(finals.len(), 1, "rank 0 saves once: {finals:?}");
    let stop_step = step_of(&finals[0]);
    assert!(said.contains(finals[0]["path"].as_str().unwrap()), "{said}");
    let stopped = run.log_lines("stopped after step");
    assert_eq!(stopped.len(), 2, "both ranks stopped: {stopped:?}");
    assert!(
        stopped
            .iter()
            .all(|l| l.ends_with(&format!("stopped after step {stop_step}"))),
        "after the same step: {stopped:?}"
    );
    let st = run.d.status();
    assert_eq!(st["pipeline"]["state"], "stopped", "{st:#}");
    assert_eq!(st["pipeline"]["slurm"], Value::Null);
    say(format!(
        "stop: job {job} saved at step {stop_step} on both nodes' word and ended"
    ));

    run.d.start(&["--resume", "latest"]);
    let resumed = run.d.run_dir();
    assert_ne!(resumed, run_dir);
    let loaded = run.wait_event(
        &resumed,
        SLOW,
        "the resumed job to load the save",
        "checkpoint_loaded",
    );
    assert_eq!(step_of(&loaded), stop_step);
    let job2 = run.d.pipeline_json()["worker"]["slurm"]["job_id"]
        .as_str()
        .map(str::to_string);
    let st = run.wait(SLOW, "the resumed run to finish", |st| {
        st["pipeline"]["state"] == "finished"
    });
    assert_ne!(job2.as_deref(), Some(job.as_str()), "a new job");
    say(format!(
        "resumed from step {stop_step} in job {job2:?}, finished at step {}",
        st["training"]["step"]
    ));
    let weights = final_weights(&resumed);
    (run, weights)
}

/// The same run left alone; returns it and its final weights.
fn uninterrupted(cluster: &Cluster, yaml: &str) -> (Run, PathBuf) {
    let run = Run::new(cluster, yaml, "");
    run.d.start(&[]);
    run.wait(SLOW, "the uninterrupted run to finish", |st| {
        st["pipeline"]["state"] == "finished"
    });
    let weights = final_weights(&run.d.run_dir());
    (run, weights)
}

/// The same run under a two-minute time limit (`launch.slurm.time_limit`) whose notice
/// comes 30 s before it (`grace_s`: time for the ranks to agree and save on a loaded
/// machine). Slurm checks limits every 30 s and sends the notice at the first check
/// less than grace + 30 s before the limit: 60 to 90 s after the job started, whatever
/// the machine; each step lasting at least 350 ms (the same arithmetic), the 300 steps
/// outlast that on any machine. (With one minute, a loaded machine's torchrun, up to a
/// minute starting, was told to save before its first step.) The notice reaches both
/// ranks through the batch script, rank 0 saves once, the job goes back in the queue
/// (the same job) and resumes from that save on both nodes. While it waits, its limit
/// is lengthened so that no second notice repeats the cycle. Returns the run, the step
/// of its first checkpoint after the resume and that checkpoint's weights.
fn time_limited(cluster: &Cluster, yaml: &str) -> (Run, u64, PathBuf) {
    let yaml = edited(
        yaml,
        "  slurm:\n",
        "  slurm:\n    time_limit: \"2\"\n    grace_s: 30\n",
    );
    let yaml = edited(
        &yaml,
        ", --eval-batches,",
        ", --min-step-ms, \"350\", --eval-batches,",
    );
    let run = Run::new(cluster, &yaml, "");
    run.d.start(&[]);
    let st = run.wait(SLOW, "a two-node job under a time limit", |st| {
        running_on_two(st, 1)
    });
    let job = job_of(&st);
    let info = cluster.job(&job);
    assert_eq!(
        field(&info, "TimeLimit").as_deref(),
        Some("00:02:00"),
        "{info}"
    );
    let run_dir = run.d.run_dir();
    say(format!(
        "time limit: job {job} on {:?}, limit 2 minutes, notice 30 s before; `lavenderd status`:\n{}",
        nodes_of(&st),
        run.text()
    ));

    // The status all along: never a crash nor a lost node; once the job waits in the
    // queue again, the longer limit.
    let mut seen: Vec<String> = Vec::new();
    let mut waiting: Option<String> = None;
    let watch = |st: &Value, seen: &mut Vec<String>| {
        let slurm = &st["pipeline"]["slurm"];
        let state = format!(
            "{} ({})",
            slurm["state"].as_str().unwrap_or("-"),
            slurm["reason"].as_str().unwrap_or("-")
        );
        if seen.last() != Some(&state) {
            seen.push(state);
        }
        assert!(
            !matches!(
                st["pipeline"]["state"].as_str(),
                Some("crashed" | "failed" | "stopped")
            ),
            "a time limit's requeue is neither a crash nor a stop: {st:#}"
        );
        assert_eq!(slurm["message"], Value::Null, "no node was lost: {st:#}");
    };
    let saved = run.wait_event(
        &run_dir,
        Duration::from_secs(180),
        "the time limit's notice to make rank 0 save",
        "final_saved",
    );
    let save_step = step_of(&saved);
    let mut loaded = None;
    run.wait(SLOW, "the requeued job to resume from the save", |st| {
        watch(st, &mut seen);
        if waiting.is_none()
            && st["pipeline"]["slurm"]["state"] == "PENDING"
            && cluster.update(&[&format!("JobId={job}"), "TimeLimit=10"])
        {
            waiting = Some(run.text());
        }
        loaded = run
            .events(&run_dir)
            .into_iter()
            .find(|e| e["kind"] == "checkpoint_loaded");
        loaded.is_some()
    });
    let waiting = waiting.unwrap_or_else(|| {
        panic!("the requeued job was never seen waiting in the queue: {seen:?}")
    });
    say(format!(
        "time limit: the notice made rank 0 save at step {save_step}; the job back in the queue, \
         `lavenderd status`:\n{waiting}"
    ));
    // Both ranks stopped after the saved step, and that save is complete.
    let stopped = run.log_lines("stopped after step");
    assert_eq!(stopped.len(), 2, "both ranks stopped: {stopped:?}");
    assert!(
        stopped
            .iter()
            .all(|l| l.ends_with(&format!("stopped after step {save_step}"))),
        "after the saved step {save_step}: {stopped:?}"
    );
    let complete = python::complete(&run_dir);
    assert!(
        complete.iter().any(|c| c.1 == save_step),
        "the save at step {save_step} is complete: {complete:?}"
    );
    assert_eq!(
        step_of(loaded.as_ref().unwrap()),
        save_step,
        "rank 0 resumed from the save"
    );
    assert!(
        !run.log_lines("SIGTERM to the batch shell (time limit near")
            .is_empty()
            && !run.log_lines("back to the queue").is_empty(),
        "the batch script took the notice and requeued the job:\n{}",
        run.worker_log()
    );
    // Both ranks of the requeued job start from it, one on each node.
    let mut resumed = Vec::new();
    let st = run.wait(SLOW, "both ranks of the requeued job to start", |st| {
        watch(st, &mut seen);
        resumed = run
            .ranks()
            .into_iter()
            .filter(|r| r.3 == save_step)
            .collect();
        resumed.len() == 2 && running_on_two(st, save_step + 1)
    });
    let mut hosts: Vec<&str> = resumed.iter().map(|r| r.1.as_str()).collect();
    hosts.sort();
    assert_eq!(hosts, ["n1", "n2"], "one rank per node: {resumed:?}");
    assert_eq!(job_of(&st), job, "the same job, requeued");
    assert_eq!(st["pipeline"]["restarts"], 0, "a requeue is not a crash");
    say(format!(
        "time limit: job {job} runs again, both ranks from step {save_step} ({resumed:?}); \
         `lavenderd status`:\n{}",
        run.text()
    ));

    // The resumed run's next checkpoint (a step the uninterrupted run saves too) is
    // where the two are compared; the run need not train on to its end for that.
    let mut next = None;
    run.wait(SLOW, "the resumed run's next checkpoint", |st| {
        if st["pipeline"]["state"] != "finished" {
            watch(st, &mut seen);
        }
        next = python::complete(&run_dir)
            .into_iter()
            .find(|c| c.1 > save_step);
        next.is_some()
    });
    let (_, compared_at) = next.unwrap();
    let weights = weights_at(&run_dir, compared_at);
    if run.d.status()["pipeline"]["state"] != "finished" {
        let said = run.d.stop_saved();
        say(format!(
            "time limit: stopped after the checkpoint of step {compared_at}: {said}"
        ));
    }
    // Nothing saved was lost: the notice's save, the next and the stop's, all complete.
    let kept = python::complete(&run_dir);
    assert!(
        kept.iter().any(|c| c.1 == save_step) && kept.iter().any(|c| c.1 == compared_at),
        "{kept:?}"
    );
    // Once per notice; a notice that came before the ranks started (a machine slower
    // than any seen) made no save and is harmless, so more are allowed.
    let info = cluster.job(&job);
    let requeues: u32 = field(&info, "Restarts").unwrap().parse().unwrap();
    assert!(requeues >= 1, "{info}");
    assert!(
        seen.iter().any(|s| s == "PENDING (BeginTime)"),
        "the requeued job waited for its BeginTime: {seen:?}"
    );
    say(format!(
        "time limit: {requeues} requeue(s), Slurm states seen {seen:?}; checkpoints {kept:?}"
    ));
    (run, compared_at, weights)
}

/// Compares two saved states: (every tensor bit-identical, largest absolute
/// difference, the files byte-identical). Byte-identical files hold the same tensors;
/// torch (tens of seconds to start on a loaded machine) reads them only when the files
/// differ, to tell by how much.
fn compare_weights(a: &Path, b: &Path) -> (bool, f64, bool) {
    if std::fs::read(a).unwrap() == std::fs::read(b).unwrap() {
        return (true, 0.0, true);
    }
    let code = r#"
import sys, torch
a = torch.load(sys.argv[1], weights_only=True)
b = torch.load(sys.argv[2], weights_only=True)
same, worst = True, 0.0
for part in ("model",):
    for k, t in a[part].items():
        u = b[part][k]
        same = same and torch.equal(t, u)
        worst = max(worst, (t.double() - u.double()).abs().max().item())
print(same, worst)
"#;
    let out = Command::new(venv_tool("python"))
        .args(["-c", code])
        .arg(a)
        .arg(b)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let mut words = text.split_whitespace();
    let same = words.next() == Some("True");
    let worst: f64 = words.next().unwrap().parse().unwrap();
    (same, worst, false)
}

fn two_node_runs_stopped_or_time_limited_match_an_uninterrupted_one(cluster: &Cluster) {
    // Long enough that the stop lands mid-run on a fast machine, short enough to finish;
    // a checkpoint every 50 steps (saving changes no arithmetic) for the time-limited
    // run to be compared at. The three jobs (one CPU of each node each) at once.
    let (a, b, c) = std::thread::scope(|s| {
        let a = s.spawn(|| stopped_and_resumed(cluster, &config_yaml(300, 50, 29511)));
        let b = s.spawn(|| uninterrupted(cluster, &config_yaml(300, 50, 29512)));
        let c = s.spawn(|| time_limited(cluster, &config_yaml(300, 50, 29514)));
        (a.join(), b.join(), c.join())
    });
    let ((_a_run, a), (b_run, b), (_c_run, step, c)) = (
        a.expect("stopped and resumed"),
        b.expect("uninterrupted"),
        c.expect("requeued at its time limit"),
    );
    let b_at_step = weights_at(&b_run.d.run_dir(), step);
    for (what, weights, reference) in [
        ("stopped+resumed, final".to_string(), &a, &b),
        (
            format!("requeued at its time limit, step {step}"),
            &c,
            &b_at_step,
        ),
    ] {
        let (same, worst, bytes) = compare_weights(weights, reference);
        say(format!(
            "weights, {what} vs uninterrupted: tensors bit-identical: {same}, \
             largest difference {worst:e}, files byte-identical: {bytes}\n  {}\n  {}",
            weights.display(),
            reference.display()
        ));
        assert!(
            same && worst == 0.0,
            "{what}: the weights differ from the uninterrupted run's (largest difference {worst:e})"
        );
    }
}

fn lost_node_waits_and_resumes_or_fails(cluster: &Cluster) {
    let pushes = tokio::runtime::Runtime::new().unwrap();
    let rec = pushes.block_on(notify::Recorder::start());
    let run = Run::new(
        cluster,
        &config_yaml(100_000, 20, 29513),
        &rec.webhook_yaml(""),
    );
    // Beside it, on the same two nodes, a job that fails on a lost node.
    let failing = Run::new(
        cluster,
        &edited(
            &config_yaml(100_000, 20, 29515),
            "on_node_failure: requeue",
            "on_node_failure: fail",
        ),
        "",
    );
    // And a third that waits for the lost node itself (`on_node_failure: wait`).
    let waiting = Run::new(
        cluster,
        &edited(
            &config_yaml(100_000, 20, 29517),
            "on_node_failure: requeue",
            "on_node_failure: wait",
        ),
        "",
    );
    run.d.start(&[]);
    failing.d.start(&[]);
    waiting.d.start(&[]);
    let st = run.wait(SLOW, "a two-node job past two checkpoints", |st| {
        running_on_two(st, 45) && st["training"]["checkpoints"].as_u64().unwrap_or(0) >= 2
    });
    let fst = failing.wait(SLOW, "the second two-node job past a checkpoint", |st| {
        running_on_two(st, 1) && st["training"]["checkpoints"].as_u64().unwrap_or(0) >= 1
    });
    let wst = waiting.wait(SLOW, "the waiting two-node job past a checkpoint", |st| {
        running_on_two(st, 1) && st["training"]["checkpoints"].as_u64().unwrap_or(0) >= 1
    });
    let waiting_job = job_of(&wst);
    let waiting_dir = waiting.d.run_dir();
    let failing_job = job_of(&fst);
    let failing_dir = failing.d.run_dir();
    let failing_saved = python::complete(&failing_dir);
    let job = job_of(&st);
    let run_dir = run.d.run_dir();
    let saved_before = python::complete(&run_dir);
    say(format!(
        "node loss: job {job} on {:?} at step {}, checkpoints {saved_before:?}",
        nodes_of(&st),
        st["training"]["step"]
    ));

    let lost_at = Instant::now();
    cluster.node("fail", "n2");
    let mut seen: Vec<String> = Vec::new();
    let st = run.wait(
        Duration::from_secs(180),
        "the status to say n2 was lost",
        |st| {
            let state = format!(
                "{} {}",
                st["pipeline"]["slurm"]["state"], st["pipeline"]["slurm"]["reason"]
            );
            if seen.last() != Some(&state) {
                seen.push(state);
            }
            assert!(
                !matches!(st["pipeline"]["state"].as_str(), Some("crashed" | "failed")),
                "a lost node is not a crash: {st:#}"
            );
            st["pipeline"]["slurm"]["message"].is_string()
                && st["pipeline"]["slurm"]["state"] == "PENDING"
                && st["pipeline"]["slurm"]["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("DOWN"))
        },
    );
    let message = st["pipeline"]["slurm"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.starts_with("node n2 lost at step ") && message.ends_with("; waiting for 2 nodes"),
        "{message}"
    );
    assert_eq!(job_of(&st), job, "the same job, requeued by Slurm");
    assert!(
        cluster.node_state("n2").contains("DOWN"),
        "{}",
        cluster.node_state("n2")
    );
    let text = run.text();
    say(format!(
        "n2 lost; DOWN and the job pending {:.0} s later; states seen {seen:?}\n`lavenderd status`:\n{text}",
        lost_at.elapsed().as_secs_f64()
    ));
    assert_shows_doc_block(&text, &doc_status_blocks()[1]);
    wait_until(Duration::from_secs(30), "a node_lost push", || {
        !rec.of_kind("node_lost").is_empty()
    });
    let push = rec.of_kind("node_lost").remove(0);
    assert!(
        push.to_string().contains(&message),
        "the push says it: {push}"
    );
    say(format!("push: {push}"));
    let info = cluster.job(&job);
    assert_eq!(field(&info, "Restarts").as_deref(), Some("1"), "{info}");
    // Nothing saved before the loss is gone.
    let after = python::complete(&run_dir);
    for c in &saved_before {
        assert!(after.contains(c), "{c:?} kept: {after:?}");
    }
    let newest = after.last().unwrap().1;

    // `on_node_failure: fail`: the daemon cancelled the requeued job; the pipeline
    // failed naming the node, and kept what it had saved.
    let fst = failing.wait(
        Duration::from_secs(180),
        "the job with on_node_failure: fail to fail its pipeline",
        |st| st["pipeline"]["state"] == "failed",
    );
    let error = fst["pipeline"]["last_error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("node n2 lost at step ")
            && error.contains("the job is cancelled (launch.slurm.on_node_failure: fail)"),
        "{fst:#}"
    );
    assert_eq!(fst["pipeline"]["restarts"], 0, "not restarted: {fst:#}");
    assert_eq!(fst["pipeline"]["slurm"], Value::Null, "{fst:#}");
    let info = cluster.job(&failing_job);
    assert_eq!(
        field(&info, "JobState").as_deref(),
        Some("CANCELLED"),
        "{info}"
    );
    let kept = python::complete(&failing_dir);
    for c in &failing_saved {
        assert!(kept.contains(c), "{c:?} kept: {kept:?}");
    }
    say(format!(
        "on_node_failure: fail: job {failing_job} cancelled, checkpoints {kept:?} kept; \
         pipeline.last_error: {error}\n\
         `lavenderd status`:\n{}",
        failing.text()
    ));

    // `on_node_failure: wait`: the daemon held the requeued job for the nodes it ran
    // on (its `scontrol update … ReqNodeList=` ran): pending while n2 is down.
    let wst = waiting.wait(
        Duration::from_secs(180),
        "the job with on_node_failure: wait to be held for n2",
        |st| {
            assert!(
                !matches!(st["pipeline"]["state"].as_str(), Some("crashed" | "failed")),
                "a lost node is not a crash: {st:#}"
            );
            st["pipeline"]["slurm"]["state"] == "PENDING"
                && st["pipeline"]["slurm"]["message"]
                    .as_str()
                    .is_some_and(|m| {
                        m.starts_with("node n2 lost at step ")
                            && m.ends_with("; waiting for 2 nodes, n2 among them")
                    })
        },
    );
    assert_eq!(job_of(&wst), waiting_job, "the same job, requeued and held");
    let info = cluster.job(&waiting_job);
    let required = field(&info, "ReqNodeList").unwrap_or_default();
    assert!(
        required == "n[1-2]" || required == "n1,n2",
        "the job requires the nodes it ran on: {info}"
    );
    let waiting_saved = python::complete(&waiting_dir);
    let waiting_newest = waiting_saved.last().unwrap().1;
    say(format!(
        "on_node_failure: wait: job {waiting_job} held (ReqNodeList={required}), \
         pipeline.slurm.message: {}\n`lavenderd status`:\n{}",
        wst["pipeline"]["slurm"]["message"],
        waiting.text()
    ));

    cluster.node("restore", "n2");
    let loaded = waiting.wait_event(
        &waiting_dir,
        SLOW,
        "the held job to resume with n2 back",
        "checkpoint_loaded",
    );
    assert_eq!(step_of(&loaded), waiting_newest, "{waiting_saved:?}");
    let wst = waiting.wait(SLOW, "the held job to train on n1 and n2", |st| {
        running_on_two(st, waiting_newest + 1)
    });
    assert_eq!(job_of(&wst), waiting_job);
    let mut on = nodes_of(&wst);
    on.sort();
    assert_eq!(on, ["n1", "n2"], "{wst:#}");
    assert_eq!(
        wst["pipeline"]["restarts"], 0,
        "not counted as a crash: {wst:#}"
    );
    say(format!(
        "n2 back: held job {waiting_job} runs again on {on:?}, resumed from step {waiting_newest}"
    ));
    // Each daemon wrote down what it decided on its own: the node declared lost, and
    // (but for `fail`) the job put back in the queue, held to its nodes for `wait`.
    for (r, requeued) in [
        (&run, Some("any free nodes")),
        (&failing, None),
        (&waiting, Some("held to its nodes")),
    ] {
        let kinds = decisions(r);
        let lost = kinds.iter().filter(|(k, _)| k == "node_lost").count();
        assert_eq!(lost, 1, "{kinds:?}");
        let requeues: Vec<_> = kinds.iter().filter(|(k, _)| k == "requeue").collect();
        match requeued {
            Some(how) => assert!(
                requeues.len() == 1 && requeues[0].1.contains(how),
                "{kinds:?}"
            ),
            None => assert!(requeues.is_empty(), "{kinds:?}"),
        }
    }
    requeue_replayed(&waiting, &waiting_dir);
    waiting.d.stop_saved();
    let loaded = run.wait_event(
        &run_dir,
        SLOW,
        "the requeued job to resume",
        "checkpoint_loaded",
    );
    assert_eq!(
        step_of(&loaded),
        newest,
        "resumed from the latest complete checkpoint ({after:?})"
    );
    let st = run.wait(SLOW, "the resumed job to train on two nodes", |st| {
        running_on_two(st, newest + 1)
    });
    assert_eq!(job_of(&st), job);
    assert_eq!(st["pipeline"]["slurm"]["message"], Value::Null, "{st:#}");
    assert_eq!(
        st["pipeline"]["restarts"], 0,
        "not counted as a crash: {st:#}"
    );
    say(format!(
        "n2 back: job {job} runs again on {:?}, resumed from step {newest}, now at step {}\n`lavenderd status`:\n{}",
        nodes_of(&st),
        st["training"]["step"],
        run.text()
    ));
    requeue_replayed(&run, &run_dir);
    run.d.stop_saved();
    let fst = failing.d.status();
    assert_eq!(
        fst["pipeline"]["state"], "failed",
        "the failed pipeline did not start again with n2 back: {fst:#}"
    );
}

/// The steps between a requeued job's newest checkpoint and the node's loss were
/// kept when the requeue was decided; the job trained them again, and they agree.
fn requeue_replayed(r: &Run, dir: &Path) {
    let name = dir.file_name().unwrap().to_string_lossy().into_owned();
    match lavender::replay::Replay::read(&r.d.state_dir(), &name) {
        Some(kept) => {
            let st = r.d.wait_replay_verdict(SLOW);
            let replay = &st["training"]["replay"];
            assert_eq!(replay["verdict"], "passed", "{st:#}");
            say(format!(
                "requeued job of {name}: the replay of the steps after {} (step {}): {replay}",
                kept.checkpoint, kept.from_step
            ));
        }
        None => say(format!(
            "requeued job of {name}: no step was recorded past its newest checkpoint when n2 was lost; nothing to replay"
        )),
    }
}

fn lavender_worker_on_two_nodes_is_refused(cluster: &Cluster) {
    let yaml = "steps: [train]\nsupervisor:\n  listen: 127.0.0.1:0\nlaunch:\n  backend: slurm\n  slurm:\n    nodes: 2\n    ntasks: 2\n";
    let dir = tempfile::tempdir().unwrap();
    let mut d = Lavenderd::in_dir(dir.path(), yaml, "lavender-worker");
    d.env.push(("SLURM_CONF".into(), cluster.conf.clone()));
    let out = d.run(&["start"]);
    assert!(!out.status.success());
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(
        text.contains("launch.slurm.nodes") && text.contains("examples/torchrun/slurm-torchrun.sh"),
        "{text}"
    );
    assert!(
        !d.state_dir().join("slurm").exists(),
        "no batch script was written"
    );
}

/// One scenario on the shared cluster.
type Scenario = fn(&Cluster);

#[test]
fn slurm_two_nodes() {
    require_modules(&["torch"]);
    let started = Instant::now();
    let cluster = Cluster::up();
    let mut times = Vec::new();
    let mut t = Instant::now();
    let mut lap = |name: &str, t: &mut Instant| {
        times.push(format!("{name}: {:.1} s", t.elapsed().as_secs_f64()));
        *t = Instant::now();
    };
    // In this order (the last alone: it takes a node down). `SLURM_CLUSTER_ONLY=<name>`
    // runs one (when reproducing a failure).
    let scenarios: [(&str, Scenario); 3] = [
        (
            "lavender_worker_on_two_nodes_is_refused",
            lavender_worker_on_two_nodes_is_refused,
        ),
        (
            "two_node_runs_stopped_or_time_limited_match_an_uninterrupted_one",
            two_node_runs_stopped_or_time_limited_match_an_uninterrupted_one,
        ),
        (
            "lost_node_waits_and_resumes_or_fails",
            lost_node_waits_and_resumes_or_fails,
        ),
    ];
    let only = std::env::var("SLURM_CLUSTER_ONLY").ok();
    for (name, scenario) in scenarios {
        if only.as_deref().is_none_or(|o| o == name) {
            scenario(&cluster);
            lap(name, &mut t);
        }
    }
    drop(cluster);
    eprintln!(
        "slurm two nodes: {:.1} s ({})",
        started.elapsed().as_secs_f64(),
        times.join(", ")
    );
}
