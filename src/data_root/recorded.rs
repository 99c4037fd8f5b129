//! Paths as the daemon records them in its state files (`state/pipeline.json`, the
//! done-markers): relative to the data root when inside it, so the records stay
//! true after the data root is moved (`mv` to another disk).

use std::path::{Path, PathBuf};

use super::{CHECKPOINTS, LOGS};

/// The data root's directories a recorded path may point into: what is looked for
/// when an old record's absolute path no longer exists because the root was moved.
const MOVABLE_DIRS: &[&str] = &[CHECKPOINTS, LOGS];

/// `path` as written into a record: relative to `data_root` when inside it;
/// unchanged otherwise.
pub fn to_recorded(data_root: &Path, path: &Path) -> PathBuf {
    match path.strip_prefix(data_root) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel.to_path_buf(),
        _ => path.to_path_buf(),
    }
}

/// A recorded path made usable: a relative one lies under `data_root`. An absolute
/// one (records written before paths were relative) is kept, unless it no longer
/// exists and the same `checkpoints/…` or `logs/…` tail exists under this data root:
/// the root was moved since.
pub fn resolve_recorded(data_root: &Path, path: &Path) -> PathBuf {
    if path.is_relative() {
        return data_root.join(path);
    }
    if path.exists() {
        return path.to_path_buf();
    }
    let parts: Vec<_> = path.components().collect();
    for (i, part) in parts.iter().enumerate().rev() {
        let name = part.as_os_str();
        if MOVABLE_DIRS.iter().any(|d| name == *d) {
            let moved: PathBuf = data_root.join(parts[i..].iter().collect::<PathBuf>());
            if moved.exists() {
                return moved;
            }
        }
    }
    path.to_path_buf()
}
