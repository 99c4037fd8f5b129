//! A worker's generation: every process it started, wherever it went. A launcher
//! such as torchrun starts each rank in a new session, so signalling the worker's
//! process group misses them; killing only the worker leaves ranks training into the
//! same run as the next worker. So each local worker is started with a marker in its
//! environment ([`GENERATION_ENV`], inherited by everything it starts), the daemon is
//! the child subreaper (an orphaned rank is re-parented to it, not to init), and a
//! generation ends only when no process carrying its marker, or descending from its
//! worker, is left: each is SIGKILLed and, when it is the daemon's (adopted) child,
//! reaped. `/proc` is Linux's; elsewhere only the process group is known.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use nix::sys::signal::Signal;

use super::{Alive, ProcessIdentity};

/// The variable naming a worker's generation in its environment and its descendants'.
pub(crate) const GENERATION_ENV: &str = "LAVENDER_WORKER_GENERATION";

/// How long a generation's processes get to vanish after SIGKILL before the daemon
/// says which are left and goes on (a process in uninterruptible sleep, on a hung
/// NFS mount or a GPU driver call, cannot be killed sooner than it wakes).
pub(crate) const END_DEADLINE: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(20);

/// A token no other worker of this machine has: the daemon's pid, the time, a counter.
pub(crate) fn new_token() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{}-{nanos}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Makes this process the child subreaper: a descendant whose parent dies is
/// re-parented here, where the daemon can kill and reap it. Idempotent.
pub(crate) fn become_subreaper() {
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        tracing::warn!(error = %e, "cannot become the child subreaper: processes a worker's launcher leaves behind are re-parented to init and found by their environment only");
    }
}

/// One process as `/proc/<pid>/stat` shows it.
#[derive(Debug, Clone)]
struct Proc {
    ppid: u32,
    pgrp: u32,
    session: u32,
    zombie: bool,
    start_time: String,
}

#[cfg(target_os = "linux")]
fn read_stat(pid: u32) -> Option<Proc> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid …": comm may hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(Proc {
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        session: fields.get(3)?.parse().ok()?,
        zombie: matches!(fields.first(), Some(&"Z") | Some(&"X")),
        start_time: fields.get(19)?.to_string(),
    })
}

#[cfg(not(target_os = "linux"))]
fn read_stat(_pid: u32) -> Option<Proc> {
    None
}

#[cfg(target_os = "linux")]
fn all_processes() -> BTreeMap<u32, Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return BTreeMap::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, read_stat(pid)?)))
        .collect()
}

#[cfg(not(target_os = "linux"))]
fn all_processes() -> BTreeMap<u32, Proc> {
    BTreeMap::new()
}

/// What `pid`'s environment says of `token`'s generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    Carries,
    Lacks,
    /// Unreadable or empty: a process caught mid-exec, or not ours to read. Looked
    /// at again (see [`end`]).
    Unknown,
}

fn marker(pid: u32, token: &str) -> Marker {
    let environ = match std::fs::read(format!("/proc/{pid}/environ")) {
        Ok(e) if !e.is_empty() => e,
        _ => return Marker::Unknown,
    };
    let wanted = format!("{GENERATION_ENV}={token}");
    if environ.split(|&b| b == 0).any(|v| v == wanted.as_bytes()) {
        Marker::Carries
    } else {
        Marker::Lacks
    }
}

/// Whether `pid` is a log relay (`lavenderd log-relay`): adopted by the daemon as the
/// subreaper, it outlives every worker it serves and is never a generation's.
fn is_relay(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| c.split(|&b| b == 0).nth(1) == Some(b"log-relay".as_slice()))
}

/// A generation's processes as one scan found them.
struct Scan {
    /// Besides the leader: see [`members`].
    members: Vec<(ProcessIdentity, Proc)>,
    /// Processes started since the leader whose environment could not be read, by
    /// pid and start time.
    unknown: Vec<(u32, String)>,
}

/// The generation's processes besides `leader` (its worker, when still the same
/// process): those in its cgroup, those carrying the marker, the daemon's children
/// in another session than the daemon's that are neither a registered worker nor a
/// log relay (a helper the worker started with an environment of its own, orphaned
/// when it died), and every descendant of those and of the leader. Zombies are
/// included (the daemon's own are reaped by [`end`]).
fn members(token: &str, leader: &ProcessIdentity) -> Scan {
    let procs = all_processes();
    let me = std::process::id();
    let my_session = procs.get(&me).map(|p| p.session);
    let leaders = reaper().leaders.clone();
    let since: u64 = leader.start_time.parse().unwrap_or(0);
    let mut roots: BTreeSet<u32> = BTreeSet::new();
    let mut unknown = Vec::new();
    for (pid, p) in &procs {
        if *pid == me || p.zombie || p.ppid == 2 || *pid == 2 {
            continue;
        }
        match marker(*pid, token) {
            Marker::Carries => {
                roots.insert(*pid);
            }
            Marker::Unknown if p.start_time.parse::<u64>().is_ok_and(|t| t >= since) => {
                unknown.push((*pid, p.start_time.clone()));
            }
            _ => {}
        }
        if p.ppid == me
            && Some(p.session) != my_session
            && !leaders.contains(pid)
            && !is_relay(*pid)
        {
            roots.insert(*pid);
        }
    }
    if let Some(cgroup) = super::cgroup::Cgroup::of(token) {
        roots.extend(cgroup.pids().into_iter().filter(|pid| *pid != me));
    }
    if procs
        .get(&leader.pid)
        .is_some_and(|p| p.start_time == leader.start_time)
    {
        roots.insert(leader.pid);
    }
    let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for (pid, p) in &procs {
        children.entry(p.ppid).or_default().push(*pid);
    }
    let mut found = BTreeSet::new();
    let mut todo: Vec<u32> = roots.into_iter().collect();
    while let Some(pid) = todo.pop() {
        if pid == me || !found.insert(pid) {
            continue;
        }
        todo.extend(children.get(&pid).into_iter().flatten().copied());
    }
    found.remove(&leader.pid);
    unknown.retain(|(pid, _)| !found.contains(pid));
    let members = found
        .into_iter()
        .filter_map(|pid| {
            let p = procs.get(&pid)?.clone();
            let id = ProcessIdentity {
                pid,
                start_time: p.start_time.clone(),
                generation: None,
            };
            Some((id, p))
        })
        .collect();
    Scan { members, unknown }
}

/// The generation's live processes, its worker first when it is still the same
/// process (the evidence of a hang is taken from each).
pub(crate) fn live_members(leader: &ProcessIdentity) -> Vec<u32> {
    let token = leader.generation.as_deref().unwrap_or_default();
    let alive = all_processes()
        .get(&leader.pid)
        .is_some_and(|p| p.start_time == leader.start_time && !p.zombie);
    alive
        .then_some(leader.pid)
        .into_iter()
        .chain(
            members(token, leader)
                .members
                .into_iter()
                .filter(|(_, p)| !p.zombie)
                .map(|(id, _)| id.pid),
        )
        .collect()
}

/// Sends `signal` to every process of the generation outside its worker's process
/// group (which the caller signals as a group), checking each is still the process
/// found, so none hears it twice. Returns how many were signalled.
pub(crate) fn signal_members(token: &str, leader: &ProcessIdentity, signal: Signal) -> usize {
    members(token, leader)
        .members
        .into_iter()
        .filter(|(id, p)| !p.zombie && p.pgrp != leader.pid && send(id, signal))
        .count()
}

fn send(id: &ProcessIdentity, signal: Signal) -> bool {
    let Ok(raw) = i32::try_from(id.pid) else {
        return false;
    };
    id.is_alive() && nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), signal).is_ok()
}

/// Reaps `pid` if it is the daemon's child and has ended (never blocks).
fn reap_if_ended(pid: u32) -> bool {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    !matches!(
        waitpid(nix::unistd::Pid::from_raw(raw), Some(WaitPidFlag::WNOHANG)),
        Ok(WaitStatus::StillAlive) | Err(_)
    )
}

/// How often the daemon looks for adopted processes that ended, to reap them.
const REAP_EVERY: Duration = Duration::from_secs(2);

/// The daemon's children it did not spawn itself: as the subreaper it adopts every
/// orphan below it (a rank whose launcher died, the log relay that left at once), and
/// must reap each when it ends, or zombies accumulate. Its own children belong to
/// tokio (the workers, registered here as leaders while tokio waits for them) or to
/// a blocking `Command` (waited for at once); neither may be reaped behind their
/// back. So only these are reaped: a child that leads its own session (a rank, the
/// relay; the `Command`s start none) and is not a registered leader, and a child
/// seen alive with a generation's marker.
#[derive(Default)]
struct Reaper {
    leaders: BTreeSet<u32>,
    seen: BTreeSet<u32>,
    started: bool,
}

static REAPER: std::sync::Mutex<Reaper> = std::sync::Mutex::new(Reaper {
    leaders: BTreeSet::new(),
    seen: BTreeSet::new(),
    started: false,
});

fn reaper() -> std::sync::MutexGuard<'static, Reaper> {
    REAPER.lock().unwrap_or_else(|p| p.into_inner())
}

/// Held while a worker is spawned and registered: the reaper never looks at a child
/// in between. Also starts the daemon's reaping task (once; needs a runtime).
pub(crate) struct Launching(std::sync::MutexGuard<'static, Reaper>);

pub(crate) fn launching() -> Launching {
    let mut r = reaper();
    if !r.started {
        r.started = true;
        tokio::spawn(async {
            let mut tick = tokio::time::interval(REAP_EVERY);
            loop {
                tick.tick().await;
                sweep();
            }
        });
    }
    Launching(r)
}

impl Launching {
    /// `pid` is waited for by its owner (tokio, or `watch_adopted`) until [`released`].
    pub(crate) fn register(&mut self, pid: u32) {
        self.0.leaders.insert(pid);
    }
}

/// The owner of `pid` has waited for it.
pub(crate) fn released(pid: u32) {
    reaper().leaders.remove(&pid);
}

/// One look: reap the adopted children that ended, remember the marked ones alive.
fn sweep() {
    let me = std::process::id();
    let mut r = reaper();
    for (pid, p) in all_processes() {
        if p.ppid != me || r.leaders.contains(&pid) {
            continue;
        }
        let adopted = p.session == pid || r.seen.contains(&pid);
        if p.zombie {
            if adopted && reap_if_ended(pid) {
                r.seen.remove(&pid);
                tracing::debug!(pid, "reaped an adopted process");
            }
        } else if std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
            env.split(|&b| b == 0)
                .any(|v| v.starts_with(GENERATION_ENV.as_bytes()))
        }) {
            r.seen.insert(pid);
        }
    }
    r.seen
        .retain(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists());
}

/// How long a process whose environment cannot be read is looked at again before it
/// is taken for another's (an exec takes milliseconds).
const LOOK_AGAIN_FOR: Duration = Duration::from_secs(1);

/// Ends the generation after its worker exited (or was found gone): kills its
/// cgroup (`cgroup.kill`, where it has one) and SIGKILLs every process of it found
/// otherwise, reaps those that are the daemon's children, and returns once two
/// scans in a row, the first after the last kill, find none left and no process
/// whose environment could not be read yet, or at `deadline`, naming those left.
/// Returns how many were killed.
pub(crate) async fn end(token: &str, leader: &ProcessIdentity, deadline: Duration) -> usize {
    let started = tokio::time::Instant::now();
    let until = started + deadline;
    let me = std::process::id();
    let cgroup = super::cgroup::Cgroup::of(token);
    // Killed and not yet gone: a zombie no longer shows its marker, so it is followed
    // by pid + start time until its parent (often the daemon) reaps it.
    let mut dying: BTreeMap<u32, ProcessIdentity> = BTreeMap::new();
    let mut killed = BTreeMap::new();
    // Processes whose environment could not be read, and when first seen so.
    let mut unsure: BTreeMap<(u32, String), tokio::time::Instant> = BTreeMap::new();
    let mut clean_scans = 0;
    loop {
        let in_cgroup = cgroup.as_ref().is_some_and(|c| c.populated());
        if let Some(c) = cgroup.as_ref().filter(|_| in_cgroup) {
            for pid in c.pids() {
                killed.entry(pid).or_insert_with(|| comm(pid));
            }
            if let Err(e) = c.kill() {
                tracing::warn!("cgroup.kill in {} failed: {e}", c.dir().display());
            }
        }
        let scan = members(token, leader);
        let mut live = false;
        for (id, p) in scan.members {
            if !p.zombie {
                live = true;
                if send(&id, Signal::SIGKILL) {
                    killed.entry(id.pid).or_insert_with(|| comm(id.pid));
                }
            }
            dying.entry(id.pid).or_insert(id);
        }
        dying.retain(|pid, id| match read_stat(*pid) {
            Some(p) if p.start_time == id.start_time => {
                if p.zombie && p.ppid == me {
                    reap_if_ended(*pid);
                }
                // A zombie is dead: reaped by us now, or by its own parent.
                !p.zombie
            }
            _ => false,
        });
        let now = tokio::time::Instant::now();
        unsure.retain(|id, _| scan.unknown.contains(id));
        for id in scan.unknown {
            unsure.entry(id).or_insert(now);
        }
        let looking_again = unsure.values().any(|seen| now - *seen < LOOK_AGAIN_FOR);
        // One empty scan is not enough: a process caught mid-fork or mid-exec shows
        // up in the next.
        let clean = !live && !in_cgroup && dying.is_empty() && !looking_again;
        clean_scans = if clean { clean_scans + 1 } else { 0 };
        if clean_scans >= 2 {
            break;
        }
        if now >= until {
            let mut left: BTreeSet<u32> = dying.keys().copied().collect();
            left.extend(cgroup.iter().flat_map(|c| c.pids()));
            let pids: Vec<String> = left
                .iter()
                .map(|pid| format!("{pid} ({})", comm(*pid)))
                .collect();
            tracing::error!(
                "processes of the previous worker are still there {}s after SIGKILL: {}; the worker's exit is reported and the next start goes ahead without them (a process in uninterruptible sleep, e.g. on a hung mount or a GPU driver call, ends when that call returns)",
                deadline.as_secs(),
                pids.join(", ")
            );
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    if let Some(c) = &cgroup
        && !c.populated()
    {
        c.remove();
    }
    if !killed.is_empty() {
        let names: Vec<String> = killed
            .iter()
            .map(|(pid, comm)| format!("{pid} ({comm})"))
            .collect();
        let how = match &cgroup {
            Some(c) => format!("its cgroup {} killed", c.dir().display()),
            None => "found by marker and process tree".into(),
        };
        tracing::warn!(
            "killed {} process(es) the worker left behind ({how}): {}",
            killed.len(),
            names.join(", ")
        );
    }
    killed.len()
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// A shell of generation `token` that runs `command` (ending in a `sleep`) in the
    /// background and waits; returns it and the pid of the running `sleep`.
    fn leader_with_sleep(token: &str, command: &str) -> (std::process::Child, u32) {
        let mut leader = std::process::Command::new("sh")
            .args(["-c", &format!("{command} & echo $!; wait")])
            .env(GENERATION_ENV, token)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(leader.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let pid: u32 = line.trim().parse().unwrap();
        // `$!` names the shell's fork before it has exec'd `setsid`, then `sleep`;
        // the escape the tests are about is a running `sleep`.
        let started = std::time::Instant::now();
        while comm(pid) != "sleep" {
            assert!(started.elapsed() < Duration::from_secs(10), "no sleep");
            std::thread::sleep(Duration::from_millis(5));
        }
        (leader, pid)
    }

    /// A shell that starts a `sleep` in a new session (as torchrun starts a rank)
    /// and exits, so the sleep is an orphan carrying the marker.
    #[tokio::test]
    async fn an_escaped_descendant_is_found_by_its_marker_killed_and_the_generation_ends() {
        become_subreaper();
        let token = new_token();
        let (mut leader, sleeper) = leader_with_sleep(&token, "setsid sleep 300");
        let leader_id = crate::process::identity::of(leader.id()).unwrap();
        let found: Vec<u32> = members(&token, &leader_id)
            .members
            .iter()
            .map(|(id, _)| id.pid)
            .collect();
        assert!(found.contains(&sleeper), "{found:?} lacks {sleeper}");
        // The leader dies alone: its escaped child is re-parented to us.
        leader.kill().unwrap();
        leader.wait().unwrap();
        let killed = end(&token, &leader_id, Duration::from_secs(10)).await;
        assert!(killed >= 1);
        assert!(
            crate::process::identity::of(sleeper).is_none(),
            "the escaped sleep is gone (and reaped: no zombie either)"
        );
        assert!(
            !std::path::Path::new(&format!("/proc/{sleeper}")).exists()
                || read_stat(sleeper).is_none_or(|p| p.ppid != std::process::id()),
            "no zombie of ours is left"
        );

        // Without a cgroup (none was made here) and without the marker: a helper
        // started with an environment of its own (`env -i`) in its own session is
        // found as the daemon's adopted child once its worker is gone.
        let token = new_token();
        let (mut leader, helper) = leader_with_sleep(&token, "env -i setsid sleep 301");
        assert!(
            !std::fs::read(format!("/proc/{helper}/environ"))
                .unwrap()
                .windows(GENERATION_ENV.len())
                .any(|w| w == GENERATION_ENV.as_bytes()),
            "the helper carries no marker"
        );
        let leader_id = crate::process::identity::of(leader.id()).unwrap();
        leader.kill().unwrap();
        leader.wait().unwrap();
        assert!(end(&token, &leader_id, Duration::from_secs(10)).await >= 1);
        assert!(
            crate::process::identity::of(helper).is_none(),
            "the helper with its own environment is gone"
        );
    }
}
