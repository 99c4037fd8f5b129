//! The workspace's binaries, found where cargo built the running test: a test runs
//! as `<target>/<profile>/deps/<test>-<hash>`, the binaries are `<target>/<profile>/<name>`
//! (where `env!("CARGO_BIN_EXE_<name>")` points, which only the binary's own package sees).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The daemon and CLI.
pub fn lavenderd() -> PathBuf {
    built("lavenderd")
}

/// The stand-in worker the daemon's tests drive (testkit/src/bin/lavender-fake-worker.rs,
/// a binary of this package: `cargo build -p lavender-testkit` builds it).
pub(crate) fn fake_worker() -> PathBuf {
    let bin = built("lavender-fake-worker");
    // A test of another package (`cargo test -p lavenderd`) does not rebuild it: one
    // older than its source or the core library's would test yesterday's worker.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sources = [
        root.join("src/bin/lavender-fake-worker.rs"),
        root.join("../src"),
    ];
    let built_at = modified(&bin);
    if let Some(newer) = sources.iter().find_map(|s| newer_than(s, built_at)) {
        panic!(
            "{} is older than {}: run `cargo build -p lavender-testkit --bins` \
             (`cargo test --workspace` rebuilds it by itself)",
            bin.display(),
            newer.display()
        );
    }
    bin
}

fn modified(path: &Path) -> SystemTime {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// A `.rs` file at or under `path` modified after `than`.
fn newer_than(path: &Path, than: SystemTime) -> Option<PathBuf> {
    if path.is_dir() {
        let entries = std::fs::read_dir(path).ok()?;
        return entries.flatten().find_map(|e| newer_than(&e.path(), than));
    }
    let rs = path.extension().is_some_and(|e| e == "rs");
    (rs && modified(path) > than).then(|| path.to_path_buf())
}

/// The real libtorch worker.
pub(crate) fn worker() -> PathBuf {
    built("lavender-worker")
}

/// `<target>/<profile>/<name>`; panics, saying how to build it, when it is not there.
/// A package's own binaries are always built before its tests; another package's
/// are when the test runs under `cargo test --workspace`.
fn built(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the running test's path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap_or_else(|| panic!("{} is not in <target>/<profile>/deps", exe.display()));
    let bin = profile_dir.join(name);
    assert!(
        bin.is_file(),
        "this test runs {name}, but {} is not built: run `cargo build --workspace` first \
         (`cargo test --workspace` builds it by itself)",
        bin.display()
    );
    bin
}
