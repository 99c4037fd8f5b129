//! Why a worker ended without finishing: the `failure` field of its last heartbeat
//! and of its `failed` event, and the exit code that says the same when neither
//! could be written. The daemon's restart policy is chosen by the kind: a failure
//! that will repeat (a bad config, an incompatible checkpoint, missing data) is not
//! retried, a divergence is rolled back, a damaged checkpoint is set aside for the
//! one before it, a full disk is waited out, anything else is restarted.

use serde::{Deserialize, Serialize};

/// The closed set of reasons a worker gives for ending without finishing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// A non-finite loss or gradient, or a loss spike that lasted
    /// `training.spike.patience` steps.
    Diverged,
    /// The device (or host) ran out of memory.
    OutOfMemory,
    /// The worker rejects its config or arguments.
    Config,
    /// The checkpoint to resume from does not fit: shapes, tokenizer or vocabulary.
    IncompatibleCheckpoint,
    /// The checkpoint to resume from cannot be read: a file of it missing, cut short
    /// or not parseable. The daemon sets it aside and resumes from the one before.
    DamagedCheckpoint,
    /// Inputs are missing or corrupt.
    Data,
    /// The checkpoint to resume from needs a file of its run folder that is not
    /// there (`lavender::run::RUN_FILES`: the DPO reference of a checkpoint taken
    /// mid-DPO): the checkpoint is intact, its run folder is not whole.
    MissingRunFile,
    /// A write found no space left (`ENOSPC`) or the quota used up (`EDQUOT`). The
    /// worker removes what it had half written; the daemon waits for free space and
    /// resumes from the latest verified checkpoint (not a crash, not a restart).
    DiskFull,
    /// Anything else, a signal included.
    Crash,
}

impl FailureKind {
    pub const ALL: [FailureKind; 9] = [
        FailureKind::Diverged,
        FailureKind::OutOfMemory,
        FailureKind::Config,
        FailureKind::IncompatibleCheckpoint,
        FailureKind::DamagedCheckpoint,
        FailureKind::Data,
        FailureKind::MissingRunFile,
        FailureKind::DiskFull,
        FailureKind::Crash,
    ];

    /// The wire name (`"diverged"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Diverged => "diverged",
            FailureKind::OutOfMemory => "out_of_memory",
            FailureKind::Config => "config",
            FailureKind::IncompatibleCheckpoint => "incompatible_checkpoint",
            FailureKind::DamagedCheckpoint => "damaged_checkpoint",
            FailureKind::Data => "data",
            FailureKind::MissingRunFile => "missing_run_file",
            FailureKind::DiskFull => "disk_full",
            FailureKind::Crash => "crash",
        }
    }

    /// The exit code a worker uses for this kind. `crash` is any non-zero code
    /// without a meaning of its own; 1 is what an uncaught error gives.
    pub fn exit_code(self) -> i32 {
        match self {
            FailureKind::Crash => 1,
            FailureKind::Data => 65,
            FailureKind::Config => 78,
            FailureKind::IncompatibleCheckpoint => 79,
            FailureKind::Diverged => 80,
            FailureKind::OutOfMemory => 81,
            FailureKind::DamagedCheckpoint => 82,
            FailureKind::DiskFull => 83,
            FailureKind::MissingRunFile => 84,
        }
    }

    /// The kind an exit code says, for a worker that could write neither heartbeat
    /// nor event. Codes without a meaning here are a `crash`.
    pub fn from_exit_code(code: i32) -> FailureKind {
        FailureKind::ALL
            .into_iter()
            .find(|k| k.exit_code() == code)
            .unwrap_or(FailureKind::Crash)
    }
}

/// Whether `error` says the disk is full: `ENOSPC`, or `EDQUOT` (a quota reached is
/// the same to the run: nothing more can be written until space is freed).
pub fn is_disk_full(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

/// Whether `error` or any error under it is a full disk ([`is_disk_full`]).
pub fn disk_full_in(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if e.downcast_ref::<std::io::Error>().is_some_and(is_disk_full) {
            return true;
        }
        next = e.source();
    }
    false
}

impl std::fmt::Display for FailureKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `failure: {kind, message, step?, since_step?}` in the last heartbeat and in the
/// `failed` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    pub kind: FailureKind,
    /// One line for a person: what happened and, where known, what to do.
    pub message: String,
    /// The global step at which the failure was detected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// For `diverged`: the first step of the divergence (where a spike began); a
    /// rollback goes to a checkpoint saved before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_step: Option<u64>,
}

impl Failure {
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Failure {
        Failure {
            kind,
            message: message.into(),
            step: None,
            since_step: None,
        }
    }

    /// Reads the `failure` value of a heartbeat or event. A value that does not
    /// parse is a `crash` carrying the raw JSON, so the reader can log it.
    pub fn from_value(value: &serde_json::Value) -> Failure {
        serde_json::from_value(value.clone()).unwrap_or_else(|_| {
            Failure::new(
                FailureKind::Crash,
                format!("unreadable failure record: {value}"),
            )
        })
    }
}

/// The failure the last workers ended with, and how many in a row ended with it:
/// the same kind and message, each at a step within one checkpoint interval of the
/// one before. Kept in the pipeline's record, so neither `restart_reset_after_s` nor
/// a daemon restart forgets it; a step that succeeds does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SameFailure {
    pub kind: FailureKind,
    pub message: String,
    /// The training step it happened at (the failure's own, else the last reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    pub count: u32,
}

impl SameFailure {
    /// After a worker ended with `failure` at `step`: one more of `previous`, or the
    /// first of a new kind. `interval`: the training steps between two checkpoints.
    pub fn after(
        previous: Option<&SameFailure>,
        failure: &Failure,
        step: Option<u64>,
        interval: u64,
    ) -> SameFailure {
        let near = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => a.abs_diff(b) <= interval,
            (None, None) => true,
            _ => false,
        };
        let count = match previous {
            Some(p)
                if p.kind == failure.kind && p.message == failure.message && near(p.step, step) =>
            {
                p.count + 1
            }
            _ => 1,
        };
        SameFailure {
            kind: failure.kind,
            message: failure.message.clone(),
            step,
            count,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_and_exit_codes_round_trip() {
        for kind in FailureKind::ALL {
            let json = serde_json::to_value(kind).unwrap();
            assert_eq!(json, kind.as_str());
            assert_eq!(FailureKind::from_exit_code(kind.exit_code()), kind);
        }
        assert_eq!(FailureKind::from_exit_code(2), FailureKind::Crash);
        assert_eq!(FailureKind::from_exit_code(137), FailureKind::Crash);
        assert_eq!(FailureKind::from_exit_code(83), FailureKind::DiskFull);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn enospc_and_edquot_are_a_full_disk_wherever_they_sit_in_the_chain() {
        use std::io;
        // Linux's ENOSPC and EDQUOT.
        let enospc = io::Error::from_raw_os_error(28);
        let edquot = io::Error::from_raw_os_error(122);
        assert!(is_disk_full(&enospc) && is_disk_full(&edquot));
        assert!(!is_disk_full(&io::Error::from_raw_os_error(5)));
        assert!(!is_disk_full(&io::Error::other("no space left")));
        // Wrapped as the core library wraps its I/O errors: found under the context.
        let wrapped = crate::error::Error::io("write", std::path::Path::new("/x"), edquot);
        assert!(disk_full_in(&wrapped), "{wrapped}");
        let eio = crate::error::Error::io(
            "write",
            std::path::Path::new("/x"),
            io::Error::from_raw_os_error(5),
        );
        assert!(!disk_full_in(&eio));
    }

    #[test]
    fn an_unreadable_record_is_a_crash_naming_the_raw_value() {
        let v = serde_json::json!({"kind": "meteor", "message": "x"});
        let f = Failure::from_value(&v);
        assert_eq!(f.kind, FailureKind::Crash);
        assert!(f.message.contains("meteor"), "{}", f.message);
        let ok = Failure::from_value(&serde_json::json!({
            "kind": "diverged", "message": "loss is NaN", "step": 40, "since_step": 38
        }));
        assert_eq!(ok.kind, FailureKind::Diverged);
        assert_eq!((ok.step, ok.since_step), (Some(40), Some(38)));
    }
}
