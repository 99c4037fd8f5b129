//! A real file system that fails on purpose (`scripts/failfs/failfs.py`, FUSE through
//! `mfusepy`): a folder mounted as a passthrough of a backing folder whose reads fail
//! with EIO while told to. Tests mount it where a data root keeps its checkpoints,
//! so the daemon and the worker meet a storage error as a failing disk or an NFS
//! hiccup gives it: the file is there and cannot be read.
//!
//! Needs `/dev/fuse` and the right to mount (root, as CI runs), and `mfusepy` in the
//! venv (`scripts/ci-deps.sh`); a test fails, never skips, without them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::python::venv_tool;
use crate::repo;

pub struct FailingFs {
    mount: PathBuf,
    control: PathBuf,
    child: Child,
}

impl FailingFs {
    /// Mounts a passthrough of `backing` at `mount` (both created), told to fail
    /// through a control file beside them.
    pub fn mount(backing: &Path, mount: &Path) -> FailingFs {
        std::fs::create_dir_all(backing).unwrap();
        std::fs::create_dir_all(mount).unwrap();
        let control = backing.with_extension("fail");
        let _ = std::fs::remove_file(&control);
        assert!(
            Path::new("/dev/fuse").exists(),
            "/dev/fuse is missing: this test needs FUSE"
        );
        let log = std::fs::File::create(backing.with_extension("log")).unwrap();
        let child = Command::new(venv_tool("python"))
            .arg(repo().join("scripts/failfs/failfs.py"))
            .args([backing, mount, &control])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut fs = FailingFs {
            mount: mount.to_path_buf(),
            control,
            child,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !fs.mounted() {
            if let Ok(Some(status)) = fs.child.try_wait() {
                panic!(
                    "the failing file system exited ({status}) before it was mounted: {}",
                    std::fs::read_to_string(backing.with_extension("log")).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "the failing file system never mounted"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        fs
    }

    fn mounted(&self) -> bool {
        let want = self
            .mount
            .canonicalize()
            .unwrap_or_else(|_| self.mount.clone());
        std::fs::read_to_string("/proc/mounts").is_ok_and(|m| {
            m.lines()
                .any(|l| l.split(' ').nth(1) == Some(want.to_str().unwrap_or_default()))
        })
    }

    /// Reads of the files matching `pattern` (a glob relative to the mount, e.g.
    /// `*/*.safetensors`) fail with EIO from now on.
    pub fn fail(&self, pattern: &str) {
        std::fs::write(&self.control, pattern).unwrap();
    }

    /// Reads succeed again.
    pub fn heal(&self) {
        let _ = std::fs::remove_file(&self.control);
    }
}

impl Drop for FailingFs {
    fn drop(&mut self) {
        // Lazily: a process still in it (a worker being killed) does not keep it.
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
