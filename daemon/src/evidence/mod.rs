//! Evidence of a hang, taken before the hung worker is killed (and on demand,
//! `lavenderd debug stacks`): for every live process of the worker's generation
//! (`process::generation`), each thread's stack — Python frames by `py-spy dump`, native
//! frames by elfutils' `eu-stack` — and from `/proc/<pid>/` its status, wchan,
//! kernel stack (root only) and open files; the run's last heartbeat, the last 50
//! lines of the pipeline log and `nvidia-smi` when there is one. Written to
//! `<run>/incidents/<UTC time>-<what>/` (`layout.rs` names the files), at most
//! [`MAX_BYTES`]. Each tool has a deadline within the capture's [`BUDGET`]; a
//! missing tool or one that overran is said in the bundle's index, never an error.
//! Blocking: callers run it on the blocking pool.

mod layout;
pub(crate) mod tool;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lavender::pipeline_file::ProcessIdentity;

pub(crate) use layout::Bundle;
use layout::{Index, ProcessEvidence, Writer};
use tool::Ran;

/// The most a capture may add between a hang's verdict and its SIGTERM.
pub(crate) const BUDGET: Duration = Duration::from_secs(8);
/// One tool's deadline (within what is left of the budget).
const TOOL_TIMEOUT: Duration = Duration::from_secs(5);
/// The bundle's bound on disk.
pub(crate) const MAX_BYTES: u64 = 50 << 20;
/// One tool's output kept, at most.
const TOOL_OUTPUT: usize = 4 << 20;
/// Lines of the pipeline log kept.
const LOG_LINES: usize = 50;

/// What to capture, and where.
pub(crate) struct Request {
    /// "hang" (before a kill) or "stacks" (asked for).
    pub what: &'static str,
    /// Why, in words ("hung at step 40 for 5m 0s").
    pub note: String,
    /// The worker; its generation's other processes are found from it.
    pub worker: ProcessIdentity,
    /// The bundle goes under `<run_dir>/incidents/` (else `<fallback>/incidents/`).
    pub run_dir: Option<PathBuf>,
    pub fallback: PathBuf,
    pub log_file: Option<PathBuf>,
    /// Where to look for tools besides `PATH` (the daemon's `.venv/bin`, …).
    pub tool_dirs: Vec<PathBuf>,
}

/// Takes the evidence `req` asks for; `Err` only when no bundle directory could be
/// made.
pub(crate) fn capture(req: &Request) -> std::io::Result<Bundle> {
    let started = Instant::now();
    let deadline = started + BUDGET;
    let at = lavender::time::now_utc();
    let parent = req.run_dir.as_deref().unwrap_or(&req.fallback);
    let dir =
        parent
            .join("incidents")
            .join(format!("{}-{}", at.format("%Y%m%dT%H%M%S%.3fZ"), req.what));
    let mut w = Writer::create(&dir, MAX_BYTES)?;
    let mut index = Index {
        what: req.what.to_string(),
        at: lavender::time::rfc3339_z(at),
        note: req.note.clone(),
        processes: Vec::new(),
        heartbeat: None,
        log_tail: None,
        nvidia_smi: None,
        took_s: 0.0,
        bytes: 0,
        truncated: false,
    };
    let pids = crate::process::generation::live_members(&req.worker);
    for pid in pids {
        index
            .processes
            .push(process(&mut w, pid, &req.tool_dirs, deadline));
    }
    index.heartbeat =
        req.run_dir
            .as_deref()
            .map(|run| match std::fs::read(lavender::heartbeat::path(run)) {
                Ok(bytes) => w.put("heartbeat.json", &bytes),
                Err(e) => format!("unreadable: {e}"),
            });
    index.log_tail = req
        .log_file
        .as_deref()
        .map(|log| match crate::logs::tail(log, LOG_LINES) {
            Ok(text) => w.put("log-tail.txt", text.as_bytes()),
            Err(e) => format!("{}: unreadable: {e}", log.display()),
        });
    index.nvidia_smi = Some(match tool::find("nvidia-smi", &[]) {
        None => Ran::Missing {
            looked: "nvidia-smi on PATH (no NVIDIA driver here)".into(),
        },
        Some(smi) => {
            let (ran, out) = tool::run(&smi, &[], left(deadline), TOOL_OUTPUT);
            w.put("nvidia-smi.txt", &out);
            ran
        }
    });
    index.took_s = started.elapsed().as_secs_f64();
    Ok(w.finish(index))
}

/// What is left of the budget for the next tool.
fn left(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .min(TOOL_TIMEOUT)
}

/// One process: its `/proc` files and its threads' stacks.
fn process(w: &mut Writer, pid: u32, tool_dirs: &[PathBuf], deadline: Instant) -> ProcessEvidence {
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let sub = format!("pid-{pid}");
    let read = |name: &str| std::fs::read(proc_dir.join(name));
    let cmdline: Vec<String> = read("cmdline")
        .unwrap_or_default()
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let exe = std::fs::read_link(proc_dir.join("exe")).ok();
    let status = read("status").unwrap_or_default();
    let state = String::from_utf8_lossy(&status)
        .lines()
        .find_map(|l| l.strip_prefix("State:").map(|s| s.trim().to_string()))
        .unwrap_or_default();
    let mut files = Vec::new();
    for (name, from) in [
        ("status", "status"),
        ("wchan", "wchan"),
        ("kernel-stack", "stack"),
    ] {
        let said = match read(from) {
            Ok(bytes) => w.put(&format!("{sub}/{name}"), &bytes),
            // /proc/<pid>/stack needs root (CAP_SYS_ADMIN).
            Err(e) => format!("{sub}/{name}: unreadable: {e}"),
        };
        files.push(said);
    }
    files.push(w.put(&format!("{sub}/fds.txt"), open_files(&proc_dir).as_bytes()));
    let python = is_python(exe.as_deref(), &cmdline);
    let stopped = state.starts_with('T') || state.starts_with('t');
    let (tool_name, ran, file) = if python {
        python_stack(w, &sub, pid, &cmdline, tool_dirs, stopped, deadline)
    } else {
        native_stack(w, &sub, pid, deadline)
    };
    ProcessEvidence {
        pid,
        exe: exe.map(|e| e.display().to_string()),
        cmdline,
        state,
        files,
        stack_tool: tool_name,
        stack: ran,
        stack_file: file,
    }
}

/// `/proc/<pid>/fd`'s links: what the process has open.
fn open_files(proc_dir: &Path) -> String {
    let Ok(dir) = std::fs::read_dir(proc_dir.join("fd")) else {
        return "unreadable\n".into();
    };
    let mut fds: Vec<(u64, String)> = dir
        .flatten()
        .take(100_000)
        .filter_map(|e| {
            let fd = e.file_name().to_str()?.parse().ok()?;
            let target = std::fs::read_link(e.path()).ok()?;
            Some((fd, target.display().to_string()))
        })
        .collect();
    fds.sort();
    fds.iter().map(|(fd, t)| format!("{fd} -> {t}\n")).collect()
}

/// A Python interpreter runs it (the worker protocol's Python workers, torchrun).
fn is_python(exe: Option<&Path>, cmdline: &[String]) -> bool {
    let named = |p: &Path| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("python"))
    };
    exe.is_some_and(named) || cmdline.first().is_some_and(|a| named(Path::new(a)))
}

/// `py-spy dump`: every Python thread's frames. A stopped process (SIGSTOP) cannot
/// be paused again for a consistent read, so it is read as it is
/// (`--nonblocking`); a running one is paused for the dump, read as it is if that fails.
fn python_stack(
    w: &mut Writer,
    sub: &str,
    pid: u32,
    cmdline: &[String],
    tool_dirs: &[PathBuf],
    stopped: bool,
    deadline: Instant,
) -> (String, Ran, Option<String>) {
    // py-spy sits beside the interpreter of a virtual environment.
    let mut dirs: Vec<PathBuf> = cmdline
        .first()
        .map(Path::new)
        .filter(|p| p.is_absolute())
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .into_iter()
        .collect();
    dirs.extend(tool_dirs.iter().cloned());
    let Some(spy) = tool::find("py-spy", &dirs) else {
        let looked = format!(
            "py-spy beside the interpreter, in {:?} and on PATH (pip install py-spy)",
            tool_dirs
        );
        return ("py-spy".into(), Ran::Missing { looked }, None);
    };
    let mut args = vec!["dump".to_string(), "--pid".into(), pid.to_string()];
    if stopped {
        args.push("--nonblocking".into());
    }
    let (mut ran, mut out) = tool::run(&spy, &args, left(deadline), TOOL_OUTPUT);
    if !stopped && matches!(ran, Ran::Failed { .. }) {
        args.push("--nonblocking".into());
        (ran, out) = tool::run(&spy, &args, left(deadline), TOOL_OUTPUT);
    }
    let file = w.put(&format!("{sub}/python-stack.txt"), &out);
    (
        format!("{} {}", spy.display(), args.join(" ")),
        ran,
        Some(file),
    )
}

/// `eu-stack -p`: every thread's native frames (ptrace; symbols from the binary's
/// symbol table and debug info).
fn native_stack(
    w: &mut Writer,
    sub: &str,
    pid: u32,
    deadline: Instant,
) -> (String, Ran, Option<String>) {
    let Some(eu) = tool::find("eu-stack", &[]) else {
        let looked = "eu-stack on PATH (Debian/Ubuntu: apt-get install elfutils)".to_string();
        return ("eu-stack".into(), Ran::Missing { looked }, None);
    };
    let args = vec!["-p".to_string(), pid.to_string()];
    let (ran, out) = tool::run(&eu, &args, left(deadline), TOOL_OUTPUT);
    let file = w.put(&format!("{sub}/native-stack.txt"), &out);
    (
        format!("{} {}", eu.display(), args.join(" ")),
        ran,
        Some(file),
    )
}
