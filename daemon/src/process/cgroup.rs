//! A generation's own cgroup v2, where the daemon can make one: below its own cgroup
//! on the cgroup2 mount (a subtree systemd delegated, `Delegate=yes`, or a writable
//! mount), `lavender-<token>`. A worker is moved into it between fork and exec, so
//! everything it starts is in it whatever it does to its session or environment,
//! and `cgroup.kill` ends them all at once. Where no cgroup can be made (no cgroup2
//! mount, no permission, controllers enabled in the daemon's own cgroup), the
//! generation is found by its marker and the daemon's process tree alone
//! (`generation.rs`); the daemon says once why.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The folder under which generations' cgroups are made, or why there is none.
fn base() -> &'static Result<PathBuf, String> {
    static BASE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BASE.get_or_init(|| {
        let found = find_base();
        if let Ok(dir) = &found {
            remove_stale(dir);
        }
        if let Err(why) = &found {
            tracing::info!(
                "a worker's processes are not put in a cgroup of their own ({why}); they are found by their marker and as the daemon's descendants"
            );
        }
        found
    })
}

#[cfg(target_os = "linux")]
fn find_base() -> Result<PathBuf, String> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("/proc/self/cgroup: {e}"))?;
    let own = cgroups
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or("the daemon is in no cgroup v2 hierarchy")?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    // "id parent dev root mountpoint opts … - fstype source superopts"
    let mount = mounts
        .lines()
        .find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let fields: Vec<&str> = left.split_whitespace().collect();
            (right.split_whitespace().next() == Some("cgroup2") && fields.get(3) == Some(&"/"))
                .then(|| fields.get(4).map(PathBuf::from))
                .flatten()
        })
        .ok_or("no cgroup2 file system is mounted")?;
    let dir = mount.join(own.trim().trim_start_matches('/'));
    // A process may not sit in a cgroup that hands domain controllers down (the
    // root cgroup excepted).
    let controllers =
        std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
    if !controllers.trim().is_empty() && own.trim() != "/" {
        return Err(format!(
            "the daemon's cgroup {} enables controllers for its children ({})",
            dir.display(),
            controllers.trim()
        ));
    }
    let probe = dir.join(format!("lavender-probe-{}", std::process::id()));
    std::fs::create_dir(&probe).map_err(|e| format!("cannot make {}: {e}", probe.display()))?;
    let kill = probe.join("cgroup.kill").exists();
    let _ = std::fs::remove_dir(&probe);
    if !kill {
        return Err(format!(
            "{} has no cgroup.kill (Linux 5.14 or later has it)",
            probe.display()
        ));
    }
    Ok(dir)
}

/// Removes the empty cgroups of generations whose daemon is gone (killed before it
/// could remove them); a cgroup with a process left in it cannot be removed anyway.
fn remove_stale(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // `lavender-<daemon pid>-<nanos>-<n>` (`generation::new_token`).
        let Some(pid) = name
            .strip_prefix("lavender-")
            .and_then(|t| t.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn find_base() -> Result<PathBuf, String> {
    Err("cgroups are Linux's".into())
}

/// The cgroup of generation `token` (it may not exist).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cgroup {
    dir: PathBuf,
}

impl Cgroup {
    /// Makes generation `token`'s cgroup, where the daemon can.
    pub(crate) fn create(token: &str) -> Option<Cgroup> {
        let dir = base().as_ref().ok()?.join(format!("lavender-{token}"));
        match std::fs::create_dir(&dir) {
            Ok(()) => Some(Cgroup { dir }),
            Err(e) => {
                tracing::warn!("cannot make the cgroup {}: {e}", dir.display());
                None
            }
        }
    }

    /// Generation `token`'s cgroup, when it was made.
    pub(crate) fn of(token: &str) -> Option<Cgroup> {
        let dir = base().as_ref().ok()?.join(format!("lavender-{token}"));
        dir.is_dir().then_some(Cgroup { dir })
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its `cgroup.procs`, opened for a child to write `0` into (itself) between
    /// fork and exec.
    pub(crate) fn procs_for_child(&self) -> std::io::Result<std::fs::File> {
        std::fs::OpenOptions::new()
            .write(true)
            .open(self.dir.join("cgroup.procs"))
    }

    /// The processes in it now.
    pub(crate) fn pids(&self) -> Vec<u32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Whether a process is left in it (`cgroup.events`: `populated 1`).
    pub(crate) fn populated(&self) -> bool {
        std::fs::read_to_string(self.dir.join("cgroup.events"))
            .map(|e| e.lines().any(|l| l.trim() == "populated 1"))
            .unwrap_or(false)
    }

    /// SIGKILLs every process in it, those forked meanwhile included.
    pub(crate) fn kill(&self) -> std::io::Result<()> {
        std::fs::OpenOptions::new()
            .write(true)
            .open(self.dir.join("cgroup.kill"))?
            .write_all(b"1")
    }

    /// Removes it once empty.
    pub(crate) fn remove(&self) {
        if let Err(e) = std::fs::remove_dir(&self.dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!("cannot remove the cgroup {}: {e}", self.dir.display());
        }
    }
}
