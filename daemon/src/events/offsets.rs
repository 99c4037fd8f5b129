//! `<state_dir>/notify-offsets.json`: how far into each run's `events.jsonl` the
//! milestones were already sent, so a daemon restart does not send them again.
//! The events files are recorded relative to the data root, like `pipeline.json`'s
//! paths: after the data root is moved, the run's milestones are not sent again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use lavender::error::IoContext;
use serde::{Deserialize, Serialize};

use lavender::layout::Layout;

pub(super) const FILE: &str = "notify-offsets.json";

#[derive(Debug, Default, Serialize, Deserialize)]
struct OffsetsFile {
    /// Byte offset per events file (its path, relative to the data root when inside
    /// it; older files have absolute paths).
    offsets: BTreeMap<PathBuf, u64>,
}

pub(super) fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(FILE)
}

/// The saved offsets by absolute path; none when the file is missing. An unreadable
/// file is logged and treated as empty (the run's milestones would be sent again,
/// not lost).
pub(super) fn load(path: &Path, layout: &Layout) -> BTreeMap<PathBuf, u64> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return BTreeMap::new(),
        Err(e) => {
            tracing::warn!(
                "notify: cannot read {}: {e}; starting without saved offsets",
                path.display()
            );
            return BTreeMap::new();
        }
    };
    match serde_json::from_str::<OffsetsFile>(&text) {
        Ok(file) => file
            .offsets
            .into_iter()
            .map(|(events, offset)| (layout.resolve_recorded(&events), offset))
            .collect(),
        Err(e) => {
            tracing::warn!(
                "notify: {} is not valid ({e}); starting without saved offsets",
                path.display()
            );
            BTreeMap::new()
        }
    }
}

/// Saves atomically, forgetting runs whose directory is gone.
pub(super) fn save(
    path: &Path,
    layout: &Layout,
    offsets: &mut BTreeMap<PathBuf, u64>,
) -> lavender::Result<()> {
    offsets.retain(|events, _| events.parent().is_some_and(Path::exists));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).ctx("create state directory", dir)?;
    }
    lavender::atomic::write_json(
        path,
        &OffsetsFile {
            offsets: offsets
                .iter()
                .map(|(events, offset)| (layout.to_recorded(events), *offset))
                .collect(),
        },
    )
}
