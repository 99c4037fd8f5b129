//! A command run on a pseudo-terminal, as a person at a terminal runs it: its stdin,
//! stdout and stderr are the terminal, and the test types an answer once a prompt
//! shows. For the commands that ask before deleting (and refuse without a terminal).

use std::ffi::{CStr, c_char};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

unsafe extern "C" {
    fn posix_openpt(flags: i32) -> i32;
    fn grantpt(fd: i32) -> i32;
    fn unlockpt(fd: i32) -> i32;
    fn ptsname(fd: i32) -> *const c_char;
}

const O_RDWR: i32 = 0o2;
#[cfg(target_os = "linux")]
const O_NOCTTY: i32 = 0o400;
#[cfg(not(target_os = "linux"))]
const O_NOCTTY: i32 = 0x20000;

/// `ptsname` returns a static buffer: one caller at a time.
static PTSNAME: Mutex<()> = Mutex::new(());

/// A new pseudo-terminal: its controller side and the path of its terminal side.
fn open_pty() -> (File, std::path::PathBuf) {
    // SAFETY: plain libc calls on a descriptor this function owns; `ptsname`'s static
    // buffer is read under a lock and copied before the lock is released.
    unsafe {
        let fd = posix_openpt(O_RDWR | O_NOCTTY);
        assert!(fd >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        let master = File::from_raw_fd(fd);
        assert_eq!(
            grantpt(fd),
            0,
            "grantpt: {}",
            std::io::Error::last_os_error()
        );
        assert_eq!(
            unlockpt(fd),
            0,
            "unlockpt: {}",
            std::io::Error::last_os_error()
        );
        let _guard = PTSNAME.lock().unwrap();
        let name = ptsname(fd);
        assert!(
            !name.is_null(),
            "ptsname: {}",
            std::io::Error::last_os_error()
        );
        let path = CStr::from_ptr(name).to_string_lossy().into_owned();
        (master, path.into())
    }
}

/// What a command printed on the terminal, and how it ended.
pub struct TerminalRun {
    pub output: String,
    pub status: ExitStatus,
}

/// Runs `cmd` with a pseudo-terminal as its stdin, stdout and stderr; once `prompt`
/// shows, types `answer` and Enter. Fails the test when the prompt does not show or
/// the command does not end within `timeout`.
pub fn run_on_terminal(
    cmd: &mut Command,
    prompt: &str,
    answer: &str,
    timeout: Duration,
) -> TerminalRun {
    let (master, slave_path) = open_pty();
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(O_NOCTTY)
        .open(&slave_path)
        .unwrap();
    let mut child = cmd
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave))
        .spawn()
        .unwrap();
    // The command keeps what it was given: swap the terminal side out, so that the
    // child is its last holder and the reader sees it close.
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let output = Arc::new(Mutex::new(Vec::<u8>::new()));
    let mut reader = master.try_clone().unwrap();
    let sink = output.clone();
    // Ends when every holder of the terminal side has closed it (EIO on Linux).
    let reading = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    let text = || String::from_utf8_lossy(&output.lock().unwrap()).into_owned();
    let deadline = Instant::now() + timeout;
    let mut answered = false;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if !answered && text().contains(prompt) {
            let mut writer = master.try_clone().unwrap();
            writer.write_all(format!("{answer}\n").as_bytes()).unwrap();
            answered = true;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{:?} did not end within {timeout:?} (prompt {prompt:?} {}); it printed:\n{}",
                cmd.get_program(),
                if answered { "answered" } else { "never shown" },
                text()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    drop(master);
    let until = Instant::now() + Duration::from_secs(5);
    while !reading.is_finished() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    TerminalRun {
        output: text(),
        status,
    }
}
