//! A process is identified by its pid *and* its start time, so a pid the kernel
//! reused for an unrelated process is never mistaken for our worker.

pub use lavender::pipeline_file::ProcessIdentity;

/// The identity of the live process `pid`, or `None` if there is none (or it is a zombie).
pub fn of(pid: u32) -> Option<ProcessIdentity> {
    start_time(pid).map(|start_time| ProcessIdentity {
        pid,
        start_time,
        generation: None,
    })
}

/// Whether a recorded worker still lives: the daemon's probe of what the record names.
pub trait Alive {
    fn is_alive(&self) -> bool;
}

impl Alive for ProcessIdentity {
    /// True while this very process (same pid, same start time) is alive.
    fn is_alive(&self) -> bool {
        exists(self.pid) && start_time(self.pid).as_deref() == Some(self.start_time.as_str())
    }
}

/// kill(pid, 0): the process exists (EPERM means it exists but is not ours).
fn exists(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    if raw <= 0 {
        return false;
    }
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None) {
        Ok(()) => true,
        Err(e) => e == nix::errno::Errno::EPERM,
    }
}

#[cfg(target_os = "linux")]
fn start_time(pid: u32) -> Option<String> {
    // /proc/<pid>/stat: "pid (comm) state ppid … starttime(22nd field) …"; comm may
    // contain spaces and parentheses, so split after the last ')'.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is the state (3rd field); starttime is the 22nd field overall.
    if fields.first() == Some(&"Z") || fields.first() == Some(&"X") {
        return None;
    }
    fields.get(19).map(|s| s.to_string())
}

#[cfg(not(target_os = "linux"))]
fn start_time(pid: u32) -> Option<String> {
    let out = std::process::Command::new("ps")
        .args(["-o", "stat=,lstart=", "-p", &pid.to_string()])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let (stat, lstart) = text.split_once(char::is_whitespace)?;
    if stat.starts_with('Z') {
        return None;
    }
    Some(lstart.trim().to_string()).filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_alive_and_a_different_start_time_is_not() {
        let me = of(std::process::id()).expect("own identity");
        assert!(me.is_alive());
        let impostor = ProcessIdentity {
            start_time: format!("{}0", me.start_time),
            ..me.clone()
        };
        assert!(
            !impostor.is_alive(),
            "a reused pid must not count as our worker"
        );
    }

    /// A child that ran and exited is not alive: first as a zombie (exited, not yet
    /// reaped: kill(pid, 0) still succeeds), then reaped.
    #[test]
    fn exited_process_is_not_alive() {
        let mut child = std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .unwrap();
        let id = of(child.id()).expect("the identity of a running child");
        assert!(id.is_alive(), "a running child is alive");
        child.kill().unwrap();
        #[cfg(target_os = "linux")]
        {
            use nix::sys::wait::{Id, WaitPidFlag, waitid};
            // Waits for the exit but leaves the child a zombie (WNOWAIT).
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT).unwrap();
            assert!(exists(child.id()), "the zombie is still there");
            assert!(!id.is_alive(), "a zombie is not alive");
            assert!(of(child.id()).is_none(), "a zombie has no identity");
        }
        child.wait().unwrap();
        assert!(!id.is_alive(), "a reaped child is not alive");
    }
}
