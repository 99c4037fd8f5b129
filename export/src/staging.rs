//! An export directory is built as a [`StagedDir`](lavender::atomic::StagedDir): under a
//! hidden `.tmp-` name, renamed into place (replacing an older export of the same
//! name), so an interrupted export never leaves a directory that looks complete.

use std::fs;
use std::path::Path;

use lavender::atomic::staged_leftover;

/// Removes `.tmp-` directories in `dir` left by export processes that are gone.
/// Only on Linux, where `/proc` says whether a process is alive; elsewhere they stay
/// (hidden and ignored).
pub fn sweep_leftovers(dir: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = staging_pid(&name) else {
            continue;
        };
        if pid != std::process::id() && !Path::new("/proc").join(pid.to_string()).exists() {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// The pid in the name of an export's staged directory
/// (`.tmp-[old-]checkpoint-<step>-<pid>-<n>`); `None` for anything else, such as a
/// worker's in-flight checkpoint.
fn staging_pid(name: &str) -> Option<u32> {
    let is_step = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (target, pid) = staged_leftover(name)?;
    target
        .strip_prefix("checkpoint-")
        .is_some_and(is_step)
        .then_some(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_its_own_names_are_swept() {
        assert_eq!(staging_pid(".tmp-checkpoint-40-123-0"), Some(123));
        assert_eq!(staging_pid(".tmp-old-checkpoint-40-123-4"), Some(123));
        assert_eq!(staging_pid(".tmp-pretrain-12-00-01-0003-123-0"), None);
        // Names of the export's staging before it was a StagedDir are not swept.
        assert_eq!(staging_pid(".tmp-checkpoint-40-123"), None);
        assert_eq!(staging_pid("checkpoint-40"), None);
    }
}
