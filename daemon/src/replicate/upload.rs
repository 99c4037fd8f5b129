//! One checkpoint up: every file (large ones in parts, a few parts in flight, under
//! `replicate.max_mbps`), hashed as it is read and checked against the checkpoint's
//! content manifest; then every object read back (HEAD for its size, GET hashed);
//! then the remote manifest, last: only now is the remote copy complete.

use std::path::{Path, PathBuf};

use lavender::checkpoint::Checkpoint;
use lavender::checkpoint::contents::{self, ContentManifest, FileEntry, HashAlgorithm};
use lavender::checkpoint::untrusted;
use lavender::trainer_state;
use object_store::path::Path as Key;
use object_store::{PutPayload, WriteMultipart};
use tokio::io::AsyncReadExt;

use super::manifest::{self, RemoteManifest};
use super::remote::{Remote, RemoteError, dir_name};
use super::throttle::Throttle;

/// Files up to this size go in one PUT; larger ones in parts of this size.
pub(crate) const PART: usize = 8 << 20;
/// Parts of one file in flight at once.
pub(crate) const PARTS_IN_FLIGHT: usize = 4;

/// The hashes of the run-level files already taken, by path, with the `stat` they
/// were taken at: the DPO reference (a whole model) is hashed once, not at every
/// upload, while it stays as it was.
#[derive(Debug, Default)]
pub(crate) struct RunFileHashes(std::collections::BTreeMap<PathBuf, (FileStat, u64, String)>);

/// What one `stat` says of a file: size, mtime, inode, ctime.
type FileStat = (u64, i64, i64, u64, i64, i64);

impl RunFileHashes {
    /// The size and hash of `path`, from the cache while its `stat` is unchanged.
    fn get(&mut self, path: &Path, algorithm: HashAlgorithm) -> lavender::Result<(u64, String)> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).map_err(|e| lavender::Error::io("stat", path, e))?;
        let stat = (
            m.len(),
            m.mtime(),
            m.mtime_nsec(),
            m.ino(),
            m.ctime(),
            m.ctime_nsec(),
        );
        if let Some((at, size, hash)) = self.0.get(path)
            && *at == stat
        {
            return Ok((*size, hash.clone()));
        }
        let (size, hash) = contents::hash_file(path, algorithm)?;
        self.0
            .insert(path.to_path_buf(), (stat, size, hash.clone()));
        Ok((size, hash))
    }
}

/// What one upload did.
#[derive(Debug, Clone)]
pub struct Uploaded {
    pub manifest: RemoteManifest,
    /// The local checkpoint had no `manifest.json`: one was built from its files for
    /// the remote copy (the local checkpoint is left as it is).
    pub built_manifest: bool,
    /// Seconds sending the files, and reading them back.
    pub sent_s: f64,
    pub read_back_s: f64,
}

/// The local checkpoint and the content manifest its upload is checked against.
struct Local {
    checkpoint: Checkpoint,
    content: ContentManifest,
    built: bool,
}

fn local(dir: &Path) -> Result<Local, RemoteError> {
    let checkpoint = Checkpoint::load(dir).map_err(|_| RemoteError::Vanished(dir.to_path_buf()))?;
    let (content, built) = match contents::read(dir) {
        Ok(Some(m)) => (m, false),
        // Until every writer writes one: built from the files as they are now.
        Ok(None) => (
            contents::build_from_disk(dir, HashAlgorithm::Blake3)
                .map_err(|e| RemoteError::Local(e.to_string()))?,
            true,
        ),
        // A manifest that does not parse is this checkpoint's damage: said, and the
        // ones after it still go up.
        Err(lavender::Error::Malformed { path, reason }) => {
            return Err(RemoteError::Damaged {
                path,
                detail: format!("{reason}; not replicated"),
            });
        }
        Err(e) => return Err(RemoteError::Local(e.to_string())),
    };
    Ok(Local {
        checkpoint,
        content,
        built,
    })
}

/// Uploads the complete checkpoint at `dir` as `<run>/<checkpoint>/`, reads it back
/// and commits it with its remote manifest.
pub(crate) async fn upload(
    remote: &Remote,
    run: &str,
    dir: &Path,
    throttle: &Throttle,
    hashes: &mut RunFileHashes,
) -> Result<Uploaded, RemoteError> {
    let ckpt = dir_name(dir);
    // A copy a restore would refuse is not made.
    if let Err(detail) = untrusted::run_name(run).and_then(|()| untrusted::checkpoint_name(&ckpt)) {
        return Err(RemoteError::Damaged {
            path: dir.to_path_buf(),
            detail: format!(
                "{detail}: a restore accepts only the names lavender writes; not replicated"
            ),
        });
    }
    let owned = dir.to_path_buf();
    let Local {
        checkpoint,
        content,
        built,
    } = tokio::task::spawn_blocking(move || local(&owned))
        .await
        .map_err(|e| RemoteError::Local(e.to_string()))??;
    let algorithm = content.algorithm;
    let started = std::time::Instant::now();

    let mut files: Vec<FileEntry> = Vec::new();
    for entry in &content.files {
        let key = remote.key(&[run, &ckpt, &entry.path]);
        let (size, hash) =
            put_file(remote, &key, &dir.join(&entry.path), algorithm, throttle).await?;
        if (size, hash.as_str()) != (entry.size, entry.hash.as_str()) {
            return Err(RemoteError::Damaged {
                path: dir.join(&entry.path),
                detail: format!(
                    "the local file ({size} bytes, {algorithm} {hash}) is not what the checkpoint's manifest lists ({} bytes, {}); not replicated",
                    entry.size, entry.hash
                ),
            });
        }
        files.push(entry.clone());
    }
    // A manifest written before the commit marker was covered does not list it.
    if content.entry(trainer_state::FILE).is_none() {
        let key = remote.key(&[run, &ckpt, trainer_state::FILE]);
        let (size, hash) = put_file(
            remote,
            &key,
            &dir.join(trainer_state::FILE),
            algorithm,
            throttle,
        )
        .await?;
        files.push(FileEntry {
            path: trainer_state::FILE.into(),
            size,
            hash,
        });
    }
    let manifest_bytes = if built {
        serde_json::to_vec_pretty(&content).expect("a manifest serializes")
    } else {
        tokio::fs::read(dir.join(contents::FILE))
            .await
            .map_err(|e| vanished_or(dir, e))?
    };
    let (size, hash) = put_bytes(
        remote,
        &remote.key(&[run, &ckpt, contents::FILE]),
        manifest_bytes,
        algorithm,
        throttle,
    )
    .await?;
    files.push(FileEntry {
        path: contents::FILE.into(),
        size,
        hash,
    });

    let sent_s = started.elapsed().as_secs_f64();
    // Read back before committing: a copy that does not read back is not complete.
    for entry in &files {
        let key = remote.key(&[run, &ckpt, &entry.path]);
        let (size, hash) = remote.read_back(&key, algorithm).await?;
        if size != entry.size || hash != entry.hash {
            return Err(RemoteError::Mismatch {
                object: remote.url(&key),
                detail: format!(
                    "read back {size} bytes hashing to {hash}, wrote {} bytes hashing to {}",
                    entry.size, entry.hash
                ),
            });
        }
    }

    let run_dir = dir.parent().unwrap_or(dir);
    let run_files = put_run_files(remote, run, run_dir, algorithm, throttle, hashes).await?;
    let read_back_s = started.elapsed().as_secs_f64() - sent_s;
    let m = remote.seal(RemoteManifest {
        uploaded_at: lavender::time::rfc3339_z(lavender::time::now_utc()),
        algorithm,
        files,
        run_files,
        lineage: Some(remote.lineage_of(run_dir)),
        ..RemoteManifest::describe(run, &checkpoint)
    });
    let key = remote.key(&[run, &ckpt, manifest::FILE]);
    let bytes = serde_json::to_vec_pretty(&m).expect("a manifest serializes");
    let len = bytes.len() as u64;
    remote
        .store()
        .put(&key, PutPayload::from(bytes))
        .await
        .map_err(|e| remote.error(e))?;
    let head = remote
        .store()
        .head(&key)
        .await
        .map_err(|e| remote.error(e))?;
    if head.size != len {
        return Err(RemoteError::Mismatch {
            object: key.to_string(),
            detail: format!("wrote {len} bytes, HEAD says {}", head.size),
        });
    }
    Ok(Uploaded {
        manifest: m,
        built_manifest: built,
        sent_s,
        read_back_s,
    })
}

/// The run-level files a resume of the checkpoint reads (`lavender::run::RUN_FILES`
/// that `run_dir` holds), each up once by content under
/// `<run>/`[`manifest::RUN_FILES_DIR`]`/<hash>/<name>` and read back; one already
/// there (the same bytes, sent with an earlier checkpoint) is not sent again.
async fn put_run_files(
    remote: &Remote,
    run: &str,
    run_dir: &Path,
    algorithm: HashAlgorithm,
    throttle: &Throttle,
    hashes: &mut RunFileHashes,
) -> Result<Vec<FileEntry>, RemoteError> {
    let mut out = Vec::new();
    for name in lavender::run::RUN_FILES {
        let path = run_dir.join(name);
        let (hashed, mut cache) = (path.clone(), std::mem::take(hashes));
        let (got, cache) = tokio::task::spawn_blocking(move || {
            let got = cache.get(&hashed, algorithm);
            (got, cache)
        })
        .await
        .map_err(|e| RemoteError::Local(e.to_string()))?;
        *hashes = cache;
        let (size, hash) = match got {
            Ok(h) => h,
            Err(lavender::Error::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                continue;
            }
            Err(e) => return Err(RemoteError::Local(e.to_string())),
        };
        let key = remote.key(&[run, manifest::RUN_FILES_DIR, &hash, name]);
        let there = matches!(remote.store().head(&key).await, Ok(meta) if meta.size == size);
        if !there {
            let sent = put_file(remote, &key, &path, algorithm, throttle).await?;
            if sent != (size, hash.clone()) || remote.read_back(&key, algorithm).await? != sent {
                // Written meanwhile (a rollback appending to skipped.json): next pass.
                return Err(RemoteError::Local(format!(
                    "{} changed while it was uploaded; sent again at the next pass",
                    path.display()
                )));
            }
        }
        out.push(FileEntry {
            path: name.to_string(),
            size,
            hash,
        });
    }
    Ok(out)
}

/// A local file that cannot be read: gone with its checkpoint (retention), or an
/// error of its own.
fn vanished_or(dir: &Path, e: std::io::Error) -> RemoteError {
    if e.kind() == std::io::ErrorKind::NotFound || !lavender::checkpoint::is_complete(dir) {
        RemoteError::Vanished(dir.to_path_buf())
    } else {
        RemoteError::Local(format!("{}: {e}", dir.display()))
    }
}

async fn put_bytes(
    remote: &Remote,
    key: &Key,
    bytes: Vec<u8>,
    algorithm: HashAlgorithm,
    throttle: &Throttle,
) -> Result<(u64, String), RemoteError> {
    let mut hasher = algorithm.hasher();
    hasher.update(&bytes);
    let size = bytes.len() as u64;
    throttle.take(bytes.len()).await;
    remote
        .store()
        .put(key, PutPayload::from(bytes))
        .await
        .map_err(|e| remote.error(e))?;
    Ok((size, hasher.finish_hex()))
}

/// Uploads the file at `path` as `key`, hashing what it sends; its size and hash.
async fn put_file(
    remote: &Remote,
    key: &Key,
    path: &Path,
    algorithm: HashAlgorithm,
    throttle: &Throttle,
) -> Result<(u64, String), RemoteError> {
    let dir: PathBuf = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut file = tokio::fs::File::open(path)
        .await
        .map_err(|e| vanished_or(&dir, e))?;
    let len = file
        .metadata()
        .await
        .map_err(|e| vanished_or(&dir, e))?
        .len();
    if len as usize <= PART {
        let mut bytes = Vec::with_capacity(len as usize);
        file.read_to_end(&mut bytes)
            .await
            .map_err(|e| vanished_or(&dir, e))?;
        return put_bytes(remote, key, bytes, algorithm, throttle).await;
    }
    let upload = remote
        .store()
        .put_multipart(key)
        .await
        .map_err(|e| remote.error(e))?;
    let mut writer = WriteMultipart::new_with_chunk_size(upload, PART);
    let mut hasher = algorithm.hasher();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    let result: Result<(), RemoteError> = async {
        loop {
            let n = file
                .read(&mut buf)
                .await
                .map_err(|e| vanished_or(&dir, e))?;
            if n == 0 {
                return Ok(());
            }
            throttle.take(n).await;
            hasher.update(&buf[..n]);
            size += n as u64;
            writer
                .wait_for_capacity(PARTS_IN_FLIGHT)
                .await
                .map_err(|e| remote.error(e))?;
            writer.write(&buf[..n]);
        }
    }
    .await;
    match result {
        Ok(()) => {
            writer.finish().await.map_err(|e| remote.error(e))?;
            Ok((size, hasher.finish_hex()))
        }
        Err(e) => {
            // Best effort: a server that is down keeps its parts until it expires them.
            let _ = writer.abort().await;
            Err(e)
        }
    }
}
