//! One checkpoint down: every object of a committed remote checkpoint into a hidden
//! folder of the run (never listed, never resumed from), each hashed as it arrives
//! and checked against the remote manifest, the checkpoint's own `manifest.json`
//! checked to list the same; then renamed into place, the commit.

use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use futures_util::StreamExt;
use lavender::checkpoint::contents;
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
}

/// Downloads the committed remote checkpoint `m` into `<checkpoints_root>/<run>/`,
/// verified; a checkpoint of that name already complete there is left as it is
/// (`downloaded` false).
pub async fn pull(
    remote: &Remote,
    m: &RemoteManifest,
    checkpoints_root: &Path,
) -> Result<(PathBuf, bool), RemoteError> {
    let run_dir = checkpoints_root.join(&m.run);
    let dest = run_dir.join(&m.checkpoint);
    if lavender::checkpoint::is_complete(&dest) {
        return Ok((dest, false));
    }
    let tmp = run_dir.join(format!(
        "{}pull-{}-{}",
        lavender::atomic::TMP_PREFIX,
        m.checkpoint,
        std::process::id()
    ));
    let local = |e: std::io::Error, p: &Path| RemoteError::Local(format!("{}: {e}", p.display()));
    if tmp.exists() {
        tokio::fs::remove_dir_all(&tmp)
            .await
            .map_err(|e| local(e, &tmp))?;
    }
    tokio::fs::create_dir_all(&tmp)
        .await
        .map_err(|e| local(e, &tmp))?;
    let result = download(remote, m, &tmp).await;
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
    if dest.exists() {
        // An incomplete leftover of the same name (a save cut short).
        tokio::fs::remove_dir_all(&dest)
            .await
            .map_err(|e| local(e, &dest))?;
    }
    tokio::fs::rename(&tmp, &dest)
        .await
        .map_err(|e| local(e, &dest))?;
    Ok((dest, true))
}

async fn download(remote: &Remote, m: &RemoteManifest, tmp: &Path) -> Result<(), RemoteError> {
    for entry in &m.files {
        let key = remote.key(&[&m.run, &m.checkpoint, &entry.path]);
        let object = remote.url(&key);
        let path = tmp.join(&entry.path);
        let local = |e: std::io::Error| RemoteError::Local(format!("{}: {e}", path.display()));
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent).await.map_err(local)?;
        }
        let mut file = tokio::fs::File::create(&path).await.map_err(local)?;
        let mut stream = remote
            .store()
            .get(&key)
            .await
            .map_err(|e| remote.error(e))?
            .into_stream();
        let mut hasher = m.algorithm.hasher();
        let mut size = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| remote.error(e))?;
            hasher.update(&chunk);
            size += chunk.len() as u64;
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
    }
    // The checkpoint's own manifest must list what the remote one does.
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
    Ok(())
}

/// Downloads the newest committed remote checkpoint (of `run`, or of any run) that
/// downloads whole: one whose objects do not match its manifest is passed over, and
/// the one before it tried.
pub async fn newest(
    remote: &Remote,
    run: Option<&str>,
    checkpoints_root: &Path,
) -> Result<Option<Restored>, RemoteError> {
    let mut skipped = Vec::new();
    let mut all = remote.manifests(run).await?;
    while let Some(m) = all.pop() {
        match pull(remote, &m, checkpoints_root).await {
            Ok((path, downloaded)) => {
                return Ok(Some(Restored {
                    path,
                    downloaded,
                    manifest: m,
                    skipped,
                }));
            }
            Err(e @ RemoteError::Mismatch { .. }) => {
                tracing::warn!("replicate: {}/{} passed over: {e}", m.run, m.checkpoint);
                skipped.push((format!("{}/{}", m.run, m.checkpoint), e.to_string()));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}
