//! The training step a checkpoint directory stands for.

use std::path::Path;

use crate::error::{ExportError, Result};
use lavender::trainer_state;

/// The step in a `checkpoint-<N>` (Hugging Face), `step_<N>` or `step_<N>.ckpt`
/// name; `None` for any other name.
pub fn step_from_name(name: &str) -> Option<u64> {
    let digits = match name.strip_prefix("checkpoint-") {
        Some(rest) => rest,
        None => {
            let rest = name.strip_prefix("step_")?;
            rest.strip_suffix(".ckpt").unwrap_or(rest)
        }
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The step of the checkpoint at `path`: from its name when it says
/// ([`step_from_name`]), else from its lavender `trainer_state.json` (lavender's
/// `<stage>-<HH-MM-SS>-<NNNN>` names carry a save counter, not a step).
pub fn checkpoint_step(path: &Path) -> Result<u64> {
    if let Some(step) = dir_name(path).as_deref().and_then(step_from_name) {
        return Ok(step);
    }
    if lavender::checkpoint::is_complete(path) {
        return Ok(trainer_state::read(path)?.step);
    }
    Err(ExportError::NoStep {
        path: path.to_path_buf(),
    })
}

/// The last component of `path`, also for `.`-like paths (`run/checkpoint-4/.`).
pub(crate) fn dir_name(path: &Path) -> Option<String> {
    match path.file_name() {
        Some(n) => Some(n.to_string_lossy().into_owned()),
        None => path
            .canonicalize()
            .ok()?
            .file_name()
            .map(|n| n.to_string_lossy().into_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_carry_a_step() {
        assert_eq!(step_from_name("checkpoint-120"), Some(120));
        assert_eq!(step_from_name("step_7"), Some(7));
        assert_eq!(step_from_name("step_7.ckpt"), Some(7));
        assert_eq!(step_from_name("checkpoint-0"), Some(0));
        for other in [
            "checkpoint-",
            "checkpoint-12a",
            "step_",
            "step_.ckpt",
            "step_3.pt",
            "pretrain-16-08-47-0003",
            "checkpoint-+3",
        ] {
            assert_eq!(step_from_name(other), None, "{other}");
        }
    }
}
