//! The first duty of a checkpoint's life: read each new checkpoint back against
//! its manifest (the writer is not trusted), every byte, and record the verdict in
//! `<run>/.verdict.<name>.json` (`lavender::checkpoint::verdicts`), which the status,
//! `lavenderd checkpoints`, retention and replication read. Run by the lifecycle
//! task (`lifecycle.rs`) on its own thread, at low CPU and idle I/O priority
//! ([`lower_priority`]). A damaged one is said in the daemon's log at once; it is set
//! aside when a resume comes to it. A read error is not damage: nothing is recorded
//! for it, and the pass says so ([`Read::storage_error`]).

use std::path::Path;

use lavender::checkpoint::contents::Verdict;
use lavender::checkpoint::list_run_checkpoints;
use lavender::checkpoint::verdicts::{self, Check};

/// What one pass read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Read {
    /// Checkpoints read back and found intact.
    pub verified: u64,
    /// Checkpoints read back and found damaged.
    pub damaged: u64,
    /// The first checkpoint whose files could not be read, and what the storage said.
    pub storage_error: Option<String>,
}

/// Reads back each checkpoint of `run_dir` not checked yet, newest first (the one a
/// resume would take), and drops the verdicts of those gone.
pub fn pass(run_dir: &Path) -> lavender::Result<Read> {
    let mut read = Read::default();
    let ckpts = list_run_checkpoints(run_dir)?;
    for c in ckpts.iter().rev() {
        let due = match verdicts::read(run_dir, &c.name) {
            Check::Pending => true,
            // Its files changed since it was read back (written again, one dropped,
            // one added: the manifest a writer adds after the commit marker, as the
            // Hugging Face callback's `on_save` does; or a verdict of `lavenderd
            // verify` made before that): again.
            Check::Done(_) => !verdicts::current(c),
        };
        if !due {
            continue;
        }
        match verdicts::verify_and_record(c)? {
            v if v.storage_error().is_some() => {
                let error = v
                    .storage_error()
                    .map(ToString::to_string)
                    .unwrap_or_default();
                tracing::warn!(
                    "VERIFY checkpoint {} could not be read ({error}): a storage error, not damage; nothing recorded, nothing set aside or deleted, read again later",
                    c.name,
                );
                read.storage_error
                    .get_or_insert_with(|| format!("checkpoint {}: {error}", c.name));
            }
            Verdict::Damaged { damage } => {
                tracing::warn!(
                    "VERIFY checkpoint {} is damaged: {}; a resume sets it aside",
                    c.name,
                    lavender::checkpoint::fallback::describe(&damage)
                );
                read.damaged += 1;
            }
            Verdict::Verified { files, bytes } => {
                tracing::info!(
                    "VERIFY checkpoint {} verified: {files} files, {bytes} bytes read back",
                    c.name
                );
                read.verified += 1;
            }
            Verdict::Unverified => {
                tracing::info!(
                    "VERIFY checkpoint {} unverified: it has no manifest, or one that does not list trainer_state.json",
                    c.name
                );
            }
        }
    }
    let names: Vec<&str> = ckpts.iter().map(|c| c.name.as_str()).collect();
    verdicts::forget_others(run_dir, &names);
    lavender::checkpoint::drills::forget_others(run_dir, &names);
    Ok(read)
}

/// The calling thread alone: nice 10 and the idle I/O class, so reading a checkpoint back
/// never slows the worker's training or its next save.
pub(super) fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: plain syscalls on the calling thread's own id; failures are ignored.
    unsafe {
        let tid = nix::libc::gettid();
        nix::libc::setpriority(nix::libc::PRIO_PROCESS, tid as nix::libc::id_t, 10);
        const IOPRIO_WHO_PROCESS: nix::libc::c_long = 1;
        const IOPRIO_CLASS_IDLE: nix::libc::c_long = 3;
        nix::libc::syscall(
            nix::libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            tid as nix::libc::c_long,
            IOPRIO_CLASS_IDLE << 13,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lavender::checkpoint::contents::{self, HashAlgorithm};

    /// A "damaged" verdict that no longer says what the files hold (recorded by a
    /// `lavenderd verify` that read a manifest the worker rewrote meanwhile, or by an
    /// older version without a stamp) is read back again at the next pass, not kept.
    #[test]
    fn a_stale_damaged_verdict_is_read_back_again() {
        let root = tempfile::tempdir().unwrap();
        let run = root.path().join("run-2026-01-01_00-00-00");
        let dir = run.join("pretrain-00-00-01-0001");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("model.safetensors"), b"weights").unwrap();
        std::fs::write(dir.join("optimizer.safetensors"), b"moments").unwrap();
        let state = lavender::trainer_state::TrainerState::new("pretrain", 10);
        lavender::trainer_state::write(&dir, &state).unwrap();
        let m = contents::build_from_disk(&dir, HashAlgorithm::Blake3).unwrap();
        contents::write(&dir, &m).unwrap();
        let ckpt = list_run_checkpoints(&run).unwrap().remove(0);
        let torn = Verdict::Damaged {
            damage: vec![contents::Damage::Missing {
                path: "optimizer.safetensors".into(),
            }],
        };
        verdicts::record(&ckpt, &torn).unwrap();
        pass(&run).unwrap();
        assert_eq!(
            verdicts::read(&run, &ckpt.name).word(),
            "damaged",
            "current: kept"
        );
        // What `save_optimizer_state: last` does: the manifest forgets, the file goes.
        contents::forget(&dir, "optimizer.safetensors").unwrap();
        std::fs::remove_file(dir.join("optimizer.safetensors")).unwrap();
        pass(&run).unwrap();
        assert_eq!(verdicts::read(&run, &ckpt.name).word(), "verified");
    }
}
