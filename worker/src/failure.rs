//! Why the worker ends without finishing: its errors classified into the
//! protocol's [`FailureKind`]s, which its last heartbeat, its `failed` event and its
//! exit code carry (`lavender::failure`).
//!
//! Where an error is made, the code that knows what it means tags it
//! ([`KindExt::kind`]: a rejected config, a checkpoint that does not fit, missing
//! data). [`failure_of`] reads the tags back: libtorch running out of memory wins
//! over any tag (it can happen anywhere), then the innermost tag (the most specific),
//! then a config error from the core library; anything else is a `crash`.

use std::error::Error as StdError;
use std::fmt;

use lavender::config::ConfigError;
use lavender::failure::{Failure, FailureKind};

/// An error that says what kind of failure it is. Its message and sources are the
/// wrapped error's, so `{:#}` reads exactly as the error did before the tag.
#[derive(Debug)]
struct Tagged {
    kind: FailureKind,
    /// For `diverged`: the detection step and the step the divergence began.
    step: Option<u64>,
    since_step: Option<u64>,
    error: anyhow::Error,
}

impl fmt::Display for Tagged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl StdError for Tagged {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.error.source()
    }
}

/// Tags `error` with `kind`; an error tagged already keeps its tag, the one given
/// where it was made (a tag directly on a tag would hide it: `Tagged`'s source is its
/// error's source).
pub fn tag(error: anyhow::Error, kind: FailureKind) -> anyhow::Error {
    if error.is::<Tagged>() {
        return error;
    }
    anyhow::Error::new(Tagged {
        kind,
        step: None,
        since_step: None,
        error,
    })
}

/// A `diverged` error detected at `step`, the divergence having begun at `since_step`.
pub fn diverged(message: String, step: u64, since_step: u64) -> anyhow::Error {
    anyhow::Error::new(Tagged {
        kind: FailureKind::Diverged,
        step: Some(step),
        since_step: Some(since_step),
        error: anyhow::Error::msg(message),
    })
}

/// An error reading a file of the checkpoint being resumed: a `data` tag (a file
/// missing, cut short or unparseable: `TensorFile::read`) becomes
/// `damaged_checkpoint`, so the daemon resumes from the checkpoint before; any other
/// error (a tensor of another shape: `incompatible_checkpoint`) is left as it is.
pub fn damaged_checkpoint(error: anyhow::Error) -> anyhow::Error {
    match error.downcast::<Tagged>() {
        Ok(mut t) if t.kind == FailureKind::Data => {
            t.kind = FailureKind::DamagedCheckpoint;
            anyhow::Error::new(t)
        }
        Ok(t) => anyhow::Error::new(t),
        Err(e) => e,
    }
}

/// `result.kind(FailureKind::Data)`: tags the error, if any.
pub trait KindExt<T> {
    fn kind(self, kind: FailureKind) -> anyhow::Result<T>;
}

impl<T, E: Into<anyhow::Error>> KindExt<T> for Result<T, E> {
    fn kind(self, kind: FailureKind) -> anyhow::Result<T> {
        self.map_err(|e| tag(e.into(), kind))
    }
}

/// libtorch's words for an allocation that failed, on every device
/// ("CUDA out of memory", "MPS backend out of memory", the CPU allocator's
/// "can't allocate memory … (Cannot allocate memory)").
pub fn says_out_of_memory(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("out of memory") || m.contains("can't allocate memory")
}

/// Whether a full disk (or quota) is anywhere in `error`, a tagged error's own head
/// included (a tag's `source` skips it).
fn says_disk_full(error: &anyhow::Error) -> bool {
    error.chain().any(|e| {
        lavender::failure::disk_full_in(e)
            || e.downcast_ref::<Tagged>()
                .is_some_and(|t| says_disk_full(&t.error))
    })
}

/// What `error` says about why the worker ends: kind, the whole message on one
/// line, and (for a divergence) its steps.
pub fn failure_of(error: &anyhow::Error) -> Failure {
    let message = format!("{error:#}").replace('\n', " ");
    if error.chain().any(|e| says_out_of_memory(&e.to_string())) {
        return Failure::new(FailureKind::OutOfMemory, message);
    }
    // Like running out of memory, a full disk (or quota) can meet any write: it
    // wins over the tag of what was being written.
    if says_disk_full(error) {
        return Failure::new(FailureKind::DiskFull, message);
    }
    if let Some(t) = error
        .chain()
        .filter_map(|e| e.downcast_ref::<Tagged>())
        .last()
    {
        let mut f = Failure::new(t.kind, message);
        f.step = t.step;
        f.since_step = t.since_step;
        return f;
    }
    if error.chain().any(|e| e.is::<ConfigError>()) {
        return Failure::new(FailureKind::Config, message);
    }
    Failure::new(FailureKind::Crash, message)
}

/// A step other than train ended with `error`: a `failed` event in the pipeline's
/// run (`failure: {kind, message}`, `step`: the step's name) says why, as the train
/// step's does, so lavenderd's status, alert and push carry the worker's own words
/// and not only an exit code. A write that fails must not hide the step's error.
pub fn record_step_failure(run_dir: &std::path::Path, step: &str, error: &anyhow::Error) {
    use lavender::events::{self, Event, kind};
    let failure = failure_of(error);
    let event = Event::new(kind::FAILED, format!("{step} failed: {}", failure.message))
        .with("failure", &failure)
        .with("step", step);
    let _ = events::append(run_dir, &event);
}

/// The failure a panic's payload describes (libtorch's errors in the tensor
/// operations that panic, such as an allocation that failed, arrive this way).
pub fn failure_of_panic(payload: &(dyn std::any::Any + Send)) -> Failure {
    let what = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into());
    let kind = if says_out_of_memory(&what) {
        FailureKind::OutOfMemory
    } else {
        FailureKind::Crash
    };
    Failure::new(kind, format!("training failed: {what}").replace('\n', " "))
}

#[cfg(test)]
mod tests {
    use anyhow::Context;

    use super::*;

    #[test]
    fn an_unreadable_checkpoint_file_is_damaged_and_a_misfit_stays_incompatible() {
        let unreadable: anyhow::Result<()> = Err(anyhow::anyhow!("truncated"));
        let e = unreadable
            .with_context(|| "could not read model.safetensors")
            .kind(FailureKind::Data)
            .map_err(damaged_checkpoint)
            .context("could not load the weights of checkpoint c")
            .kind(FailureKind::IncompatibleCheckpoint)
            .unwrap_err();
        let f = failure_of(&e);
        assert_eq!(f.kind, FailureKind::DamagedCheckpoint);
        assert_eq!(
            f.message,
            "could not load the weights of checkpoint c: could not read model.safetensors: truncated"
        );
        let misfit: anyhow::Result<()> = Err(anyhow::anyhow!("no tensor h.0"));
        let e = misfit
            .map_err(damaged_checkpoint)
            .kind(FailureKind::IncompatibleCheckpoint)
            .unwrap_err();
        assert_eq!(failure_of(&e).kind, FailureKind::IncompatibleCheckpoint);
    }

    #[test]
    fn the_innermost_tag_names_the_kind_and_the_message_is_unchanged() {
        let inner: anyhow::Result<()> = Err(anyhow::anyhow!("tensor file truncated"));
        let e = inner
            .kind(FailureKind::Data)
            .context("could not load the weights")
            .kind(FailureKind::IncompatibleCheckpoint)
            .unwrap_err();
        let f = failure_of(&e);
        assert_eq!(f.kind, FailureKind::Data);
        assert_eq!(
            f.message,
            "could not load the weights: tensor file truncated"
        );
        assert_eq!((f.step, f.since_step), (None, None));
    }

    #[test]
    fn out_of_memory_wins_over_tags_and_untagged_errors_are_crashes() {
        let e = tag(
            anyhow::anyhow!("CUDA out of memory. Tried to allocate 2.00 GiB"),
            FailureKind::Data,
        );
        assert_eq!(failure_of(&e).kind, FailureKind::OutOfMemory);
        let e = anyhow::anyhow!("disk full").context("could not write the history");
        assert_eq!(failure_of(&e).kind, FailureKind::Crash);
        let panic: Box<dyn std::any::Any + Send> = Box::new(String::from(
            "DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes",
        ));
        assert_eq!(failure_of_panic(&*panic).kind, FailureKind::OutOfMemory);
        let panic: Box<dyn std::any::Any + Send> = Box::new("index out of range");
        let f = failure_of_panic(&*panic);
        assert_eq!(f.kind, FailureKind::Crash);
        assert!(f.message.contains("index out of range"), "{}", f.message);
    }

    #[test]
    fn a_full_disk_or_quota_wins_over_the_tag_of_what_was_written() {
        // Linux's ENOSPC and EDQUOT, as a failed write returns them.
        for errno in [28, 122] {
            let write: std::io::Result<()> = Err(std::io::Error::from_raw_os_error(errno));
            let e = write
                .kind(FailureKind::Data)
                .context("could not write model.safetensors")
                .unwrap_err();
            let f = failure_of(&e);
            assert_eq!(
                f.kind,
                FailureKind::DiskFull,
                "errno {errno}: {}",
                f.message
            );
            assert_eq!(f.kind.exit_code(), 83);
        }
        let write: std::io::Result<()> = Err(std::io::Error::from_raw_os_error(5));
        let e = write.context("could not write").unwrap_err();
        assert_eq!(failure_of(&e).kind, FailureKind::Crash);
    }

    #[test]
    fn a_config_error_is_a_config_failure_and_a_divergence_carries_its_steps() {
        let err = lavender::config::Config::from_yaml_str("chunk: 9\n", "c.yaml").unwrap_err();
        let e = anyhow::Error::new(err).context("loading the config");
        assert_eq!(failure_of(&e).kind, FailureKind::Config);
        let f = failure_of(&diverged("loss is NaN at step 7".into(), 7, 5));
        assert_eq!(f.kind, FailureKind::Diverged);
        assert_eq!((f.step, f.since_step), (Some(7), Some(5)));
        assert_eq!(f.message, "loss is NaN at step 7");
    }
}
