//! The order of a checkpoint's life after its save, as a pure function: [`next`]
//! says which duty follows the one just done, from what it found and the rules in
//! force. The lifecycle task (`lifecycle.rs`) runs exactly what it says; the table
//! test below is the whole order.
//!
//! The invariant: retention and replication run only after every new checkpoint of
//! the run was read back and its verdict recorded, in that order, and neither runs
//! while a read failed on the storage (nothing is set aside or deleted for it; it is
//! read again later).

/// One duty of the room, in the only order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Duty {
    /// Read back every checkpoint of the run not checked yet (every byte against its
    /// manifest) and record each verdict.
    Verify,
    /// Retention for the run: `training.keep_checkpoints`, the newest, the best, and
    /// nothing older before the newest checkpoint found intact.
    Retain,
    /// Observe mode: say what retention would have deleted; delete nothing.
    WouldRetain,
    /// Hand the run to replication, which uploads what has a good verdict.
    Replicate,
    /// A checkpoint could not be read (EIO, ESTALE, EACCES, …): read it again after a
    /// backoff; nothing deleted meanwhile.
    RetryLater,
    /// Nothing more until the next save.
    Rest,
}

/// What the duty just done found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// It did its work (a retention or upload error is logged, not a reason to stop).
    Done,
    /// Verify: a file or manifest could not be read at all.
    StorageError,
    /// Verify: a storage error that has lasted past [`super::lifecycle::STORAGE_WAIT`]:
    /// the rest of the order runs (retention keeps what was not found intact anyway),
    /// and the error stays in the daemon's log and the room's report.
    StorageErrorPersists,
}

/// Who deletes the run's old checkpoints at this save.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retaining {
    /// The daemon (`supervisor.retention: daemon` and a worker that does not prune
    /// its own).
    Daemon,
    /// The daemon would, but `supervisor.mode: observe`.
    Observe,
    /// Nobody here: the worker prunes its own, `retention: worker`, no save in what
    /// was read, or a run outside the checkpoints root.
    Nobody,
}

/// The rules in force for one pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    pub retaining: Retaining,
    /// `replicate:` names a target.
    pub replicating: bool,
}

/// The duty after `done`, which found `found`.
pub fn next(done: Duty, found: Found, rules: Rules) -> Duty {
    let after_retention = if rules.replicating {
        Duty::Replicate
    } else {
        Duty::Rest
    };
    match (done, found) {
        (Duty::Verify, Found::StorageError) => Duty::RetryLater,
        (Duty::Verify, Found::Done | Found::StorageErrorPersists) => match rules.retaining {
            Retaining::Daemon => Duty::Retain,
            Retaining::Observe => Duty::WouldRetain,
            Retaining::Nobody => after_retention,
        },
        (Duty::Retain | Duty::WouldRetain, _) => after_retention,
        (Duty::Replicate | Duty::Rest, _) => Duty::Rest,
        // The retry starts the order again from the read.
        (Duty::RetryLater, _) => Duty::Verify,
    }
}

#[cfg(test)]
mod tests {
    use super::Duty::*;
    use super::*;

    /// The duties one pass runs from [`Duty::Verify`], when the read finds `read`.
    pub fn pass(read: Found, rules: Rules) -> Vec<Duty> {
        let mut out = vec![Duty::Verify];
        let mut duty = next(Duty::Verify, read, rules);
        while duty != Duty::Rest {
            out.push(duty);
            if duty == Duty::RetryLater {
                return out;
            }
            duty = next(duty, Found::Done, rules);
        }
        out
    }

    /// The whole order: for each rule set and what the read found, the duties one
    /// pass runs, in order.
    #[test]
    fn the_order_table() {
        use Found::{Done as Read, StorageError as Eio, StorageErrorPersists as EioLong};
        use Retaining::{Daemon, Nobody, Observe};
        let rows: &[(Retaining, bool, Found, &[Duty])] = &[
            (Daemon, true, Read, &[Verify, Retain, Replicate]),
            (Daemon, false, Read, &[Verify, Retain]),
            (Observe, true, Read, &[Verify, WouldRetain, Replicate]),
            (Observe, false, Read, &[Verify, WouldRetain]),
            (Nobody, true, Read, &[Verify, Replicate]),
            (Nobody, false, Read, &[Verify]),
            // A read the storage refused: nothing after it, in any mode.
            (Daemon, true, Eio, &[Verify, RetryLater]),
            (Daemon, false, Eio, &[Verify, RetryLater]),
            (Observe, true, Eio, &[Verify, RetryLater]),
            (Nobody, true, Eio, &[Verify, RetryLater]),
            (Nobody, false, Eio, &[Verify, RetryLater]),
            // One that does not clear holds retention back no longer.
            (Daemon, true, EioLong, &[Verify, Retain, Replicate]),
            (Observe, false, EioLong, &[Verify, WouldRetain]),
        ];
        for (retaining, replicating, read, want) in rows {
            let rules = Rules {
                retaining: *retaining,
                replicating: *replicating,
            };
            assert_eq!(
                pass(*read, rules),
                *want,
                "{retaining:?}, replicating {replicating}, read {read:?}"
            );
        }
    }

    /// The invariant, over every duty, finding and rule: retention and replication
    /// follow only a read that was done, and a retry always reads first.
    #[test]
    fn nothing_is_retained_or_replicated_but_after_a_read() {
        let duties = [Verify, Retain, WouldRetain, Replicate, RetryLater, Rest];
        let founds = [
            Found::Done,
            Found::StorageError,
            Found::StorageErrorPersists,
        ];
        let retainings = [Retaining::Daemon, Retaining::Observe, Retaining::Nobody];
        for done in duties {
            for found in founds {
                for retaining in retainings {
                    for replicating in [true, false] {
                        let rules = Rules {
                            retaining,
                            replicating,
                        };
                        let then = next(done, found, rules);
                        if done == Verify && found == Found::StorageError {
                            assert_eq!(then, RetryLater);
                        }
                        if then == Retain {
                            assert!(done == Verify && retaining == Retaining::Daemon);
                        }
                        if then == WouldRetain {
                            assert!(done == Verify && retaining == Retaining::Observe);
                        }
                        if then == Replicate {
                            assert!(replicating && matches!(done, Verify | Retain | WouldRetain));
                            assert!(done != Verify || found != Found::StorageError);
                        }
                        if done == RetryLater {
                            assert_eq!(then, Verify);
                        }
                    }
                }
            }
        }
    }
}
