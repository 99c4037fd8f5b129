//! The workspace's binaries, found where cargo built the running test: a test runs
//! as `<target>/<profile>/deps/<test>-<hash>`, the binaries are `<target>/<profile>/<name>`
//! (where `env!("CARGO_BIN_EXE_<name>")` points, which only the binary's own package sees).

use std::path::PathBuf;

/// The daemon and CLI.
pub fn lavenderd() -> PathBuf {
    built("lavenderd")
}

/// The stand-in worker the daemon's tests drive (daemon/src/bin/lavender-fake-worker.rs).
pub(crate) fn fake_worker() -> PathBuf {
    built("lavender-fake-worker")
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
