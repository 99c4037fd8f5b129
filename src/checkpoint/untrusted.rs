//! Names read from outside — a manifest's entry paths, a bucket's run and checkpoint
//! names — checked before any local path is built from them. Each check says what is
//! wrong in words a refusal can quote; none touches the file system.
//!
//! An entry path is relative and normalised: `/`-separated components, each a plain
//! file name (not empty, `.` or `..`, no `\`, NUL or control character, at most 255
//! bytes), so `base.join(path)` names a file strictly below `base` whatever `base` is.
//! A run name is what lavender writes (`run-YYYY-MM-DD_HH-MM-SS`); a checkpoint name
//! is lavender's (`<stage>-<HH-MM-SS>-<NNNN>`) or the Hugging Face Trainer's
//! (`checkpoint-<N>`): one path component each, never hidden.

use super::CheckpointName;

/// The longest entry path accepted, in bytes (Linux's `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;
/// The longest component accepted, in bytes (Linux's `NAME_MAX`).
pub const MAX_NAME_BYTES: usize = 255;

/// Whether `path` is a normalised relative path inside the folder it is joined to;
/// the error says why not.
pub fn entry_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("an empty path".into());
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(format!(
            "a path of {} bytes (at most {MAX_PATH_BYTES})",
            path.len()
        ));
    }
    if path.starts_with('/') {
        return Err("an absolute path".into());
    }
    for part in path.split('/') {
        component(part)?;
    }
    Ok(())
}

/// One plain file name: not empty, `.` or `..`, without `/`, `\`, NUL or control
/// characters, at most [`MAX_NAME_BYTES`].
fn component(part: &str) -> Result<(), String> {
    match part {
        "" => Err("an empty component (`//`, or a `/` at the end)".into()),
        "." => Err("a `.` component (not normalised)".into()),
        ".." => Err("a `..` component (it leaves the folder)".into()),
        _ if part.len() > MAX_NAME_BYTES => Err(format!(
            "a component of {} bytes (at most {MAX_NAME_BYTES})",
            part.len()
        )),
        _ if part.contains('\\') => Err("a `\\` (not a separator here, one elsewhere)".into()),
        _ if part.chars().any(char::is_control) => Err("a control character".into()),
        _ => Ok(()),
    }
}

/// Whether `name` is a run folder's name as lavender writes it.
pub fn run_name(name: &str) -> Result<(), String> {
    crate::run::parse_run_name(name)
        .map(|_| ())
        .map_err(|_| format!("{name:?} is not a run name (run-YYYY-MM-DD_HH-MM-SS)"))
}

/// Whether `name` is a checkpoint folder's name lavender or the Hugging Face Trainer
/// writes.
pub fn checkpoint_name(name: &str) -> Result<(), String> {
    let hf = name
        .strip_prefix("checkpoint-")
        .is_some_and(|n| !n.is_empty() && n.len() <= 20 && n.bytes().all(|b| b.is_ascii_digit()));
    if hf || name.parse::<CheckpointName>().is_ok() {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a checkpoint name (<stage>-<HH-MM-SS>-<NNNN> or checkpoint-<N>)"
        ))
    }
}

/// Whether `hash` is lowercase hex of a 256-bit digest (what both hash algorithms
/// give).
pub fn digest_hex(hash: &str) -> Result<(), String> {
    if hash.len() == 64 && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        Ok(())
    } else {
        Err(format!(
            "hash {:?} is not 64 lowercase hex digits",
            hash.chars().take(80).collect::<String>()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::path::{Component, Path};

    #[test]
    fn entry_paths_stay_inside() {
        for ok in [
            "model.safetensors",
            "optimizer.pt",
            "global_step10/mp_rank_00_model_states.pt",
            "a b/c..d/.hidden",
        ] {
            assert_eq!(entry_path(ok), Ok(()), "{ok}");
        }
        for (bad, says) in [
            ("", "empty"),
            ("/etc/passwd", "absolute"),
            ("../outside", "`..`"),
            ("a/../../b", "`..`"),
            ("./a", "`.`"),
            ("a//b", "empty component"),
            ("a/", "empty component"),
            ("a\\..\\b", "`\\`"),
            ("a\0b", "control"),
            ("a\nb", "control"),
        ] {
            let e = entry_path(bad).unwrap_err();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
        assert!(
            entry_path(&"a".repeat(256))
                .unwrap_err()
                .contains("256 bytes")
        );
        assert!(
            entry_path(&"a/".repeat(2100))
                .unwrap_err()
                .contains("at most 4096")
        );
    }

    #[test]
    fn names_are_the_ones_lavender_writes() {
        assert_eq!(run_name("run-2026-04-24_16-08-45"), Ok(()));
        assert_eq!(checkpoint_name("pretrain-16-08-47-0003"), Ok(()));
        assert_eq!(checkpoint_name("checkpoint-200"), Ok(()));
        for bad in [
            "",
            "..",
            ".",
            "/home/u",
            "run-x",
            "a/b",
            "run-2026-04-24_16-08-45/..",
        ] {
            assert!(run_name(bad).is_err(), "{bad}");
        }
        for bad in [
            "",
            "..",
            "checkpoint-",
            "checkpoint-1/..",
            "/tmp/x",
            ".tmp-pretrain-16-08-47-0003",
            "checkpoint-123456789012345678901",
        ] {
            assert!(checkpoint_name(bad).is_err(), "{bad}");
        }
        assert_eq!(digest_hex(&"0a".repeat(32)), Ok(()));
        assert!(digest_hex(&"0A".repeat(32)).is_err());
        assert!(digest_hex("00").is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

        /// Whatever a path holds, one accepted names a file strictly below the base:
        /// every component normal, nothing absolute, no prefix.
        #[test]
        fn an_accepted_path_joins_below_its_base(path in "(/|\\.|\\.\\.|[a-z]{1,3}|\\\\|\0|){0,6}", other in any::<String>()) {
            for p in [path.as_str(), other.as_str()] {
                if entry_path(p).is_ok() {
                    let base = Path::new("/base/ckpt");
                    let joined = base.join(p);
                    prop_assert!(joined.starts_with(base) && joined != base, "{p:?}");
                    prop_assert!(Path::new(p).components().all(|c| matches!(c, Component::Normal(_))), "{p:?}");
                    prop_assert_eq!(Path::new(p).components().count(), p.split('/').count());
                }
            }
        }

        /// An accepted run or checkpoint name is one plain, visible component.
        #[test]
        fn an_accepted_name_is_one_component(name in "(\\.|/|run-|checkpoint-|[0-9]{1,4}|-|_|[a-z]{1,4}){0,8}") {
            for check in [run_name, checkpoint_name] {
                if check(&name).is_ok() {
                    prop_assert!(!name.contains('/') && !name.starts_with('.'), "{name:?}");
                    prop_assert_eq!(entry_path(&name), Ok(()));
                }
            }
        }
    }
}
