//! The data root's filesystem: device and used/available GiB (the status's `disk`
//! block) and the bytes free to the worker, read through `sysinfo` and `statvfs`.

use std::path::{Path, PathBuf};

use lavender::compose::DiskReading;
use lavender::status::DiskStatus;

/// The filesystem holding `path` as read now, for the status.
pub fn read(path: &Path) -> DiskReading {
    DiskReading {
        status: disk_status(path),
        avail_bytes: avail_bytes(path),
    }
}

/// The filesystem holding `path` (or its nearest existing ancestor).
fn disk_status(path: &Path) -> DiskStatus {
    let Some(existing) = nearest_existing(path) else {
        return DiskStatus::unknown();
    };
    let disks = sysinfo::Disks::new_with_refreshed_list().ok();
    let best = disks
        .iter()
        .flat_map(|d| d.iter())
        .filter(|d| existing.starts_with(d.mount_point()))
        .max_by_key(|d| d.mount_point().as_os_str().len());
    if let Some(d) = best {
        let total = d.total_space();
        let avail = d.available_space();
        return DiskStatus::from_bytes(
            Some(d.name().to_string_lossy().into_owned()).filter(|n| !n.is_empty()),
            total.saturating_sub(avail),
            avail,
        );
    }
    // Filesystems sysinfo does not list (overlay, tmpfs in containers): statvfs.
    match nix::sys::statvfs::statvfs(&existing) {
        // The field types differ by platform (u32 on macOS, u64 on Linux).
        #[allow(clippy::unnecessary_cast)]
        Ok(st) => {
            let frag = st.fragment_size() as u64;
            let total = st.blocks() as u64 * frag;
            let free = st.blocks_free() as u64 * frag;
            let avail = st.blocks_available() as u64 * frag;
            DiskStatus::from_bytes(None, total.saturating_sub(free), avail)
        }
        Err(_) => DiskStatus::unknown(),
    }
}

/// Bytes available to an unprivileged writer on the filesystem holding `path`.
pub fn avail_bytes(path: &Path) -> Option<u64> {
    let st = nix::sys::statvfs::statvfs(&nearest_existing(path)?).ok()?;
    // The field types differ by platform (u32 on macOS, u64 on Linux).
    #[allow(clippy::unnecessary_cast)]
    Some(st.blocks_available() as u64 * st.fragment_size() as u64)
}

fn nearest_existing(path: &Path) -> Option<PathBuf> {
    let mut p = std::path::absolute(path).ok()?;
    loop {
        if let Ok(c) = std::fs::canonicalize(&p) {
            return Some(c);
        }
        if !p.pop() {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn tempdir_has_a_disk() {
        let dir = tempfile::tempdir().unwrap();
        let d = super::disk_status(&dir.path().join("not-yet"));
        assert!(d.avail_gib.is_some() && d.used_gib.is_some(), "{d:?}");
    }
}
