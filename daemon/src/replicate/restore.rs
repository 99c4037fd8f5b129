//! One checkpoint down: every object of a committed remote checkpoint into a hidden
//! folder of the run (never listed, never resumed from), each hashed as it arrives
//! and checked against the remote manifest, the checkpoint's own `manifest.json`
//! checked to list the same; then renamed into place, the commit.

use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use futures_util::StreamExt;
use lavender::checkpoint::contents::{self, FileEntry, HashAlgorithm};
use lavender::trainer_state;
use tokio::io::AsyncWriteExt;

use super::manifest::RemoteManifest;
use super::remote::{Remote, RemoteError};

/// What a restore did.
#[derive(Debug)]
pub struct Restored {
    pub path: PathBuf,
    /// False when a complete checkpoint of that name was there already.
    pub downloaded: bool,
    pub manifest: RemoteManifest,
    /// Newer remote checkpoints passed over: each name and why.
    pub skipped: Vec<(String, String)>,
    /// The other lineages under the prefix, never picked: each name and its newest
    /// checkpoint (`run/checkpoint`).
    pub other_lineages: Vec<(String, String)>,
}

/// Downloads the committed remote checkpoint `m` into `<checkpoints_root>/<run>/`,
/// verified; a checkpoint of that name already complete there is left as it is
/// (`downloaded` false).
///
/// `m` came from the bucket: it is checked again ([`RemoteManifest::check`]) before a
/// path is built from it; no symlink is followed below `checkpoints_root`; nothing is
/// created, truncated or deleted outside the hidden folder the download goes to until
/// every object has matched its entry; a download stops the moment an object passes
/// its entry's size; and the free space is checked against the manifest first.
pub async fn pull(
    remote: &Remote,
    m: &RemoteManifest,
    checkpoints_root: &Path,
) -> Result<(PathBuf, bool), RemoteError> {
    let object = format!("{}/{}/{}", remote.target(), m.run, m.checkpoint);
    let refused = |detail: String| RemoteError::Refused {
        object: object.clone(),
        detail,
    };
    m.check(&m.run, &m.checkpoint).map_err(refused)?;
    let local = |e: std::io::Error, p: &Path| RemoteError::Local(format!("{}: {e}", p.display()));
    let run_dir = checkpoints_root.join(&m.run);
    let dest = run_dir.join(&m.checkpoint);
    tokio::fs::create_dir_all(checkpoints_root)
        .await
        .map_err(|e| local(e, checkpoints_root))?;
    if !real_dir(&run_dir).map_err(refused)? {
        match tokio::fs::create_dir(&run_dir).await {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(local(e, &run_dir)),
        }
        real_dir(&run_dir).map_err(refused)?;
    }
    let leftover = real_dir(&dest).map_err(refused)?;
    if leftover && lavender::checkpoint::is_complete(&dest) {
        // Here already; what its resume reads beside it may not be (a DPO reference
        // deleted by hand): brought back from the copy.
        run_files(remote, m, &run_dir).await?;
        return Ok((dest, false));
    }
    let need = m.download_bytes();
    if let Some(free) = crate::filesystem::avail_bytes(&run_dir)
        && free < need
    {
        return Err(RemoteError::Local(format!(
            "{object} needs {:.1} MB and {} has {:.1} MB free: make room (`lavenderd prune`), then pull again",
            need as f64 / 1e6,
            run_dir.display(),
            free as f64 / 1e6
        )));
    }
    let tmp = run_dir.join(format!(
        "{}pull-{}-{}",
        lavender::atomic::TMP_PREFIX,
        m.checkpoint,
        std::process::id()
    ));
    match tokio::fs::symlink_metadata(&tmp).await {
        // Never followed: a link is removed as a link.
        Ok(md) if md.is_dir() => tokio::fs::remove_dir_all(&tmp).await,
        Ok(_) => tokio::fs::remove_file(&tmp).await,
        Err(_) => Ok(()),
    }
    .map_err(|e| local(e, &tmp))?;
    tokio::fs::create_dir(&tmp)
        .await
        .map_err(|e| local(e, &tmp))?;
    let mut result = download(remote, m, &tmp).await;
    if result.is_ok() {
        // Before the checkpoint appears: what its resume reads beside it is there.
        result = run_files(remote, m, &run_dir).await;
    }
    if let Err(e) = result {
        let _ = tokio::fs::remove_dir_all(&tmp).await;
        return Err(e);
    }
    // Sorted as it was: the local checkpoint's completion time comes back.
    let marker = tmp.join(trainer_state::FILE);
    let when = UNIX_EPOCH + Duration::from_millis(m.completed_unix_ms);
    std::fs::File::options()
        .write(true)
        .open(&marker)
        .and_then(|f| f.set_modified(when))
        .map_err(|e| local(e, &marker))?;
    if leftover {
        // An incomplete leftover of the same name (a save cut short): a real folder.
        tokio::fs::remove_dir_all(&dest)
            .await
            .map_err(|e| local(e, &dest))?;
    }
    tokio::fs::rename(&tmp, &dest)
        .await
        .map_err(|e| local(e, &dest))?;
    Ok((dest, true))
}

/// Whether `path` is a folder (false: nothing there); an error names what is in
/// the way when it is a symbolic link or not a folder: never followed, never replaced.
fn real_dir(path: &Path) -> Result<bool, String> {
    match std::fs::symlink_metadata(path) {
        Err(_) => Ok(false),
        Ok(md) if md.file_type().is_symlink() => Err(format!(
            "{} is a symbolic link: a restore never follows one (remove it, then pull again)",
            path.display()
        )),
        Ok(md) if !md.is_dir() => Err(format!(
            "{} is in the way and is not a folder (move it, then pull again)",
            path.display()
        )),
        Ok(_) => Ok(true),
    }
}

/// Creates the folders of `rel` (checked by [`RemoteManifest::check`]) below `tmp`,
/// one at a time, each a new real folder or one made for an earlier entry.
async fn folders_below(tmp: &Path, rel: &str) -> Result<PathBuf, RemoteError> {
    let mut at = tmp.to_path_buf();
    let mut parts: Vec<&str> = rel.split('/').collect();
    let file = parts.pop().unwrap_or_default();
    for part in parts {
        at.push(part);
        match tokio::fs::create_dir(&at).await {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                real_dir(&at).map_err(RemoteError::Local)?;
            }
            Err(e) => return Err(RemoteError::Local(format!("{}: {e}", at.display()))),
        }
    }
    Ok(at.join(file))
}

/// The object `key` into the new file `path` (never one already there, nor a link's
/// target), hashed as it arrives: refused the moment it passes `entry`'s size, a
/// mismatch when its bytes are not `entry`'s.
async fn fetch(
    remote: &Remote,
    key: &object_store::path::Path,
    path: &Path,
    entry: &FileEntry,
    algorithm: HashAlgorithm,
) -> Result<(), RemoteError> {
    let object = remote.url(key);
    let local = |e: std::io::Error| RemoteError::Local(format!("{}: {e}", path.display()));
    let mut file = tokio::fs::File::options()
        .write(true)
        .create_new(true)
        .open(path)
        .await
        .map_err(local)?;
    let mut stream = remote
        .store()
        .get(key)
        .await
        .map_err(|e| remote.error(e))?
        .into_stream();
    let mut hasher = algorithm.hasher();
    let mut size = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| remote.error(e))?;
        size += chunk.len() as u64;
        if size > entry.size {
            return Err(RemoteError::Refused {
                object,
                detail: format!(
                    "longer than the {} bytes its remote manifest lists; the download stopped there",
                    entry.size
                ),
            });
        }
        hasher.update(&chunk);
        file.write_all(&chunk).await.map_err(local)?;
    }
    file.sync_all().await.map_err(local)?;
    let hash = hasher.finish_hex();
    if size != entry.size || hash != entry.hash {
        return Err(RemoteError::Mismatch {
            object,
            detail: format!(
                "{size} bytes hashing to {hash}; its remote manifest says {} bytes, {}",
                entry.size, entry.hash
            ),
        });
    }
    Ok(())
}

/// The run-level files `m` lists, into `run_dir` where it has none of that name
/// (one there is the run's own, newer or the same: kept). Each goes to a hidden file
/// first, renamed into place once its bytes match.
async fn run_files(remote: &Remote, m: &RemoteManifest, run_dir: &Path) -> Result<(), RemoteError> {
    for entry in &m.run_files {
        let dest = run_dir.join(&entry.path);
        if tokio::fs::symlink_metadata(&dest).await.is_ok() {
            continue;
        }
        let key = remote.key(&[
            &m.run,
            super::manifest::RUN_FILES_DIR,
            &entry.hash,
            &entry.path,
        ]);
        let tmp = run_dir.join(format!(
            "{}run-file-{}-{}",
            lavender::atomic::TMP_PREFIX,
            entry.path,
            std::process::id()
        ));
        let _ = tokio::fs::remove_file(&tmp).await;
        let fetched = fetch(remote, &key, &tmp, entry, m.algorithm).await;
        if fetched.is_err() {
            let _ = tokio::fs::remove_file(&tmp).await;
            return fetched;
        }
        tokio::fs::rename(&tmp, &dest)
            .await
            .map_err(|e| RemoteError::Local(format!("{}: {e}", dest.display())))?;
    }
    Ok(())
}

async fn download(remote: &Remote, m: &RemoteManifest, tmp: &Path) -> Result<(), RemoteError> {
    for entry in &m.files {
        let key = remote.key(&[&m.run, &m.checkpoint, &entry.path]);
        let path = folders_below(tmp, &entry.path).await?;
        fetch(remote, &key, &path, entry, m.algorithm).await?;
    }
    // The checkpoint's own manifest must list what the remote one does: the same
    // entries, and no object beside them but the two files it never lists.
    let content = contents::read(tmp)
        .map_err(|e| RemoteError::Local(e.to_string()))?
        .ok_or_else(|| RemoteError::Mismatch {
            object: format!("{}/{}", m.run, m.checkpoint),
            detail: "the remote copy holds no manifest.json".into(),
        })?;
    for entry in &content.files {
        if m.files.iter().find(|f| f.path == entry.path) != Some(entry) {
            return Err(RemoteError::Mismatch {
                object: format!("{}/{}/{}", m.run, m.checkpoint, entry.path),
                detail: "the checkpoint's manifest.json and its remote manifest disagree".into(),
            });
        }
    }
    if let Some(extra) = m.files.iter().find(|f| {
        f.path != trainer_state::FILE
            && f.path != contents::FILE
            && content.entry(&f.path).is_none()
    }) {
        return Err(RemoteError::Mismatch {
            object: format!("{}/{}/{}", m.run, m.checkpoint, extra.path),
            detail: "listed by the remote manifest and not by the checkpoint's manifest.json"
                .into(),
        });
    }
    Ok(())
}

/// Downloads the newest committed remote checkpoint (of `run`, or of this lineage)
/// that downloads whole: one refused, or whose objects do not match its manifest, is
/// passed over (named in `skipped`), and the one before it tried.
///
/// Without `run`, only one lineage's copies are candidates: `replicate.lineage`'s,
/// or, when none is set, the prefix's only one; a prefix holding several is refused,
/// naming each, since which of them is this training's cannot be told.
pub async fn newest(
    remote: &Remote,
    run: Option<&str>,
    checkpoints_root: &Path,
) -> Result<Option<Restored>, RemoteError> {
    let (mut all, mut skipped) = remote.manifests_and_refusals(run).await?;
    let mut other_lineages: Vec<(String, String)> = Vec::new();
    if run.is_none() {
        // Oldest first: the last of each lineage is its newest.
        for m in &all {
            let at = format!("{}/{}", m.run, m.checkpoint);
            match other_lineages
                .iter_mut()
                .find(|(l, _)| l == m.lineage_name())
            {
                Some(entry) => entry.1 = at,
                None => other_lineages.push((m.lineage_name().to_string(), at)),
            }
        }
        let own = match remote.lineage() {
            Some(l) => l.to_string(),
            None if other_lineages.len() > 1 => {
                let each: Vec<String> = other_lineages
                    .iter()
                    .map(|(l, at)| format!("{l} (newest {at})"))
                    .collect();
                return Err(RemoteError::Refused {
                    object: remote.target().to_string(),
                    detail: format!(
                        "it holds the copies of {} trainings: {}; set replicate.lineage to the one to resume, or pull RUN CHECKPOINT by name",
                        other_lineages.len(),
                        each.join(", ")
                    ),
                });
            }
            None => other_lineages
                .first()
                .map(|(l, _)| l.clone())
                .unwrap_or_default(),
        };
        all.retain(|m| m.lineage_name() == own);
        other_lineages.retain(|(l, _)| *l != own);
    }
    while let Some(m) = all.pop() {
        match pull(remote, &m, checkpoints_root).await {
            Ok((path, downloaded)) => {
                return Ok(Some(Restored {
                    path,
                    downloaded,
                    manifest: m,
                    skipped,
                    other_lineages,
                }));
            }
            Err(e @ (RemoteError::Mismatch { .. } | RemoteError::Refused { .. })) => {
                tracing::warn!("replicate: {}/{} passed over: {e}", m.run, m.checkpoint);
                skipped.push((format!("{}/{}", m.run, m.checkpoint), e.to_string()));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}
