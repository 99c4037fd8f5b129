//! Processes the tests start or look for: what `/proc` says of them, signals, and
//! a finished command's output as text.

use std::process::Output;

/// Whether `pid`'s command line contains `word` (a pid reused by another program does not).
pub(crate) fn cmdline_has(pid: i32, word: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.contains(word))
}

/// `pid`'s argv.
pub fn cmdline(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// Children of `pid`.
pub fn children(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if ppid == Some(pid) {
            out.push(child);
        }
    }
    out
}

/// Whether `pid` is running; a zombie counts as dead.
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// `kill(pid, sig)`; a negative `pid` is a process group. Errors are ignored: the
/// tests signal processes that may have exited already.
pub fn send_signal(pid: i32, sig: i32) {
    unsafe { libc_kill(pid, sig) };
}

/// Freezes the process group `pgid` (SIGSTOP) and returns once every thread of its
/// leader is stopped, so nothing it writes lands after this returns.
pub fn freeze_group(pgid: i32) {
    send_signal(-pgid, 19);
    let stopped = || {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pgid}/task")) else {
            return true; // gone: it writes nothing more either
        };
        tasks.flatten().all(|t| {
            std::fs::read_to_string(t.path().join("stat")).map_or(true, |s| {
                let state = s.rsplit(')').next().unwrap_or("").trim_start();
                state.starts_with('T') || state.starts_with('t') || state.starts_with('Z')
            })
        })
    };
    crate::wait_until(
        std::time::Duration::from_secs(30),
        "the frozen group to stop",
        stopped,
    );
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Writes an executable file (mode 755) from a child process, so this process never
/// holds it open for writing. A test binary runs its tests on threads: a file
/// written here is inherited, still open, by any child another thread forks at that
/// moment, and executing it fails with "Text file busy" (ETXTBSY) until that child
/// has exec'd.
pub fn write_executable(path: &std::path::Path, text: &str) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("sh")
        .args(["-c", "cat > \"$1\" && chmod 755 \"$1\"", "sh"])
        .arg(path)
        .stdin(Stdio::piped())
        .spawn()
        .expect("run sh to write an executable");
    child
        .stdin
        .take()
        .expect("a pipe to sh")
        .write_all(text.as_bytes())
        .expect("write the executable's text to sh");
    let status = child.wait().expect("wait for sh");
    assert!(
        status.success(),
        "writing {} failed: {status}",
        path.display()
    );
}

/// Stand-ins for the service managers' tools (`systemctl`, `journalctl`, `loginctl`,
/// `launchctl`) in `<dir>/shims`: each appends its name and arguments to
/// `<dir>/shim-calls.txt` and succeeds. Returns (the shims' directory, the calls file).
pub fn service_shims(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let bin = dir.join("shims");
    std::fs::create_dir_all(&bin).unwrap();
    let calls = dir.join("shim-calls.txt");
    for name in ["systemctl", "journalctl", "loginctl", "launchctl"] {
        write_executable(
            &bin.join(name),
            &format!("#!/bin/sh\necho \"{name} $*\" >> '{}'\n", calls.display()),
        );
    }
    (bin, calls)
}
