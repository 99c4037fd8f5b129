//! The replication target: an `object_store` for the configured URL, its credentials
//! (the environment or `replicate.credentials_file`, never logged or shown), and the
//! object names of the remote layout (see the module's parent).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use lavender::checkpoint::contents::HashAlgorithm;
use lavender::config::{ReplicateConfig, ReplicateTarget};
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path as Key;
use object_store::{ClientOptions, ObjectStore, RetryConfig};

use super::manifest::{self, RemoteManifest};
use super::signing::SigningKey;
use lavender::checkpoint::untrusted;

/// What went wrong talking to the target, sorted by what the caller does about it.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The setup is wrong (no credentials, an unreadable credentials file): fixed by
    /// the operator, not by retrying.
    #[error("{key}: {message}")]
    Config { key: &'static str, message: String },
    /// The server refused the credentials: fixed by the operator, not by retrying.
    #[error(
        "{target} refused the credentials from {source_of} ({detail}); check the key pair there"
    )]
    Denied {
        target: String,
        source_of: String,
        detail: String,
    },
    /// The checkpoint went away locally while it was being read (retention).
    #[error("{0}: the local checkpoint went away while it was uploaded")]
    Vanished(PathBuf),
    /// A local file is not what the checkpoint's manifest lists: not replicated.
    #[error("{path}: {detail}")]
    Damaged { path: PathBuf, detail: String },
    /// What was read back (or downloaded) is not what was written.
    #[error("{object}: {detail}")]
    Mismatch { object: String, detail: String },
    /// What the bucket holds may not be acted on (a name or path that would leave
    /// its checkpoint, a manifest that names another key, an object longer than its
    /// entry, a signature that does not verify): nothing is written for it.
    #[error("{object}: refused: {detail}")]
    Refused { object: String, detail: String },
    /// A local file could not be read or written.
    #[error("{0}")]
    Local(String),
    /// The server could not be reached or failed: worth another try later.
    #[error("{target}: {detail}")]
    Store { target: String, detail: String },
}

impl RemoteError {
    /// Whether trying again without an operator's change can help.
    pub fn is_transient(&self) -> bool {
        matches!(self, RemoteError::Store { .. } | RemoteError::Local(_))
    }
}

/// The key pair, with where it came from (named in errors; the values never are).
struct Credentials {
    key_id: String,
    secret: String,
    token: Option<String>,
    source_of: String,
}

/// The environment's credentials, or those of `replicate.credentials_file` (the AWS
/// shared-credentials format: the `[default]` profile, or the only one).
fn credentials(
    config: &ReplicateConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Credentials, RemoteError> {
    const KEY: &str = "replicate.credentials_file";
    if let Some(file) = &config.credentials_file {
        let text = std::fs::read_to_string(file).map_err(|e| RemoteError::Config {
            key: KEY,
            message: format!("cannot read {}: {e}", file.display()),
        })?;
        let values = ini_profile(&text);
        let get = |k: &str| values.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let (Some(key_id), Some(secret)) = (get("aws_access_key_id"), get("aws_secret_access_key"))
        else {
            return Err(RemoteError::Config {
                key: KEY,
                message: format!(
                    "{} has no aws_access_key_id and aws_secret_access_key in a [default] profile",
                    file.display()
                ),
            });
        };
        return Ok(Credentials {
            key_id,
            secret,
            token: get("aws_session_token"),
            source_of: format!("{KEY} ({})", file.display()),
        });
    }
    match (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
        (Some(key_id), Some(secret)) if !key_id.is_empty() && !secret.is_empty() => {
            Ok(Credentials {
                key_id,
                secret,
                token: env("AWS_SESSION_TOKEN").filter(|t| !t.is_empty()),
                source_of: "AWS_ACCESS_KEY_ID in the daemon's environment".into(),
            })
        }
        _ => Err(RemoteError::Config {
            key: KEY,
            message: "no credentials for the s3:// replicate.url: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the daemon's environment, or name an AWS credentials file here".into(),
        }),
    }
}

/// The `key = value` pairs of the `[default]` profile (or of the only profile).
fn ini_profile(text: &str) -> Vec<(String, String)> {
    let mut profiles: Vec<(String, Vec<(String, String)>)> = vec![(String::new(), Vec::new())];
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            profiles.push((name.trim().to_string(), Vec::new()));
        } else if let Some((k, v)) = line.split_once('=') {
            let last = profiles.len() - 1;
            profiles[last]
                .1
                .push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let named: Vec<_> = profiles.iter().filter(|(n, _)| !n.is_empty()).collect();
    match named.iter().find(|(n, _)| n == "default") {
        Some((_, values)) => values.clone(),
        None if named.len() == 1 => named[0].1.clone(),
        None => profiles.swap_remove(0).1,
    }
}

/// One replication target.
#[derive(Clone)]
pub struct Remote {
    store: Arc<dyn ObjectStore>,
    /// The URL's prefix, as path segments.
    prefix: Vec<String>,
    /// The URL, without credentials (there are none in it).
    target: String,
    /// What an object's key is appended to, to name it as a URL (`s3://bucket`).
    base: String,
    /// Where the credentials came from, for a refusal's message.
    source_of: String,
    /// `replicate.signing_key_file`: manifests written are signed, and those read
    /// must verify.
    signing: Option<Arc<SigningKey>>,
    /// `replicate.lineage`: the training whose copies these are.
    lineage: Option<String>,
}

impl Remote {
    /// The target `config` names (`None` when replication is off), its credentials
    /// read from `env` or the credentials file.
    pub fn open(
        config: &ReplicateConfig,
        env: &dyn Fn(&str) -> Option<String>,
        data_root: &Path,
    ) -> Result<Option<Remote>, RemoteError> {
        let Some(target) = config.target() else {
            return Ok(None);
        };
        let name = target.to_string();
        let signing = match &config.signing_key_file {
            None => None,
            Some(file) => Some(Arc::new(SigningKey::load(file).map_err(|message| {
                RemoteError::Config {
                    key: "replicate.signing_key_file",
                    message,
                }
            })?)),
        };
        let base = match &target {
            ReplicateTarget::S3 { bucket, .. } => format!("s3://{bucket}"),
            ReplicateTarget::File { root } => format!("file://{}", root.display()),
        };
        let (store, prefix, source_of): (Arc<dyn ObjectStore>, String, String) = match &target {
            ReplicateTarget::S3 { bucket, prefix } => {
                let creds = credentials(config, env)?;
                let region = config
                    .region
                    .clone()
                    .or_else(|| env("AWS_REGION"))
                    .or_else(|| env("AWS_DEFAULT_REGION"))
                    .unwrap_or_else(|| "us-east-1".into());
                let mut b = AmazonS3Builder::new()
                    .with_bucket_name(bucket)
                    .with_region(region)
                    .with_access_key_id(&creds.key_id)
                    .with_secret_access_key(&creds.secret)
                    .with_virtual_hosted_style_request(!config.path_style)
                    // A few quick retries of one request; the replicator retries a
                    // whole checkpoint later, with its own backoff.
                    .with_retry(RetryConfig {
                        max_retries: 2,
                        retry_timeout: Duration::from_secs(20),
                        ..RetryConfig::default()
                    })
                    .with_client_options(
                        ClientOptions::new()
                            .with_connect_timeout(Duration::from_secs(5))
                            .with_timeout(Duration::from_secs(120)),
                    );
                if let Some(token) = &creds.token {
                    b = b.with_token(token);
                }
                if let Some(endpoint) = &config.endpoint {
                    b = b
                        .with_endpoint(endpoint)
                        .with_allow_http(endpoint.starts_with("http://"));
                }
                let store = b.build().map_err(|e| RemoteError::Config {
                    key: "replicate.url",
                    message: e.to_string(),
                })?;
                (Arc::new(store), prefix.clone(), creds.source_of)
            }
            ReplicateTarget::File { root } => {
                if config.require_mounted {
                    mounted(root, data_root)?;
                }
                std::fs::create_dir_all(root).map_err(|e| RemoteError::Config {
                    key: "replicate.url",
                    message: format!("cannot create {}: {e}", root.display()),
                })?;
                let store =
                    LocalFileSystem::new_with_prefix(root).map_err(|e| RemoteError::Config {
                        key: "replicate.url",
                        message: e.to_string(),
                    })?;
                (
                    Arc::new(store),
                    String::new(),
                    "the local file system".into(),
                )
            }
        };
        Ok(Some(Remote {
            store,
            prefix: prefix
                .split('/')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
            target: name,
            base,
            source_of,
            signing,
            lineage: config.lineage.clone(),
        }))
    }

    /// `replicate.lineage`, when set.
    pub fn lineage(&self) -> Option<&str> {
        self.lineage.as_deref()
    }

    /// The lineage the copies of the run at `run_dir` are written under:
    /// `replicate.lineage`, else the name of the run its training started with.
    pub(crate) fn lineage_of(&self, run_dir: &Path) -> String {
        self.lineage
            .clone()
            .unwrap_or_else(|| lavender::run::lineage_root(run_dir))
    }

    /// `m` as it goes up: signed when a key is set.
    pub(crate) fn seal(&self, m: RemoteManifest) -> RemoteManifest {
        match &self.signing {
            Some(key) => key.sign(m),
            None => m,
        }
    }

    /// The target's URL (no credentials).
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The object `key` as a URL, for messages.
    pub(crate) fn url(&self, key: &Key) -> String {
        format!("{}/{key}", self.base)
    }

    pub(crate) fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The object `<prefix>/<parts…>`; a part holding `/` (a file in a subfolder of
    /// the checkpoint) adds one segment per component.
    pub(crate) fn key(&self, parts: &[&str]) -> Key {
        Key::from_iter(
            self.prefix
                .iter()
                .map(String::as_str)
                .chain(parts.iter().flat_map(|p| p.split('/')))
                .filter(|s| !s.is_empty()),
        )
    }

    /// `e` said as what the caller does about it.
    pub(crate) fn error(&self, e: object_store::Error) -> RemoteError {
        match e {
            object_store::Error::PermissionDenied { source, .. }
            | object_store::Error::Unauthenticated { source, .. } => RemoteError::Denied {
                target: self.target.clone(),
                source_of: self.source_of.clone(),
                detail: first_line(&source.to_string()),
            },
            // A listing's refusal comes back as a generic error: known by its status.
            e if refused(&e.to_string()) => RemoteError::Denied {
                target: self.target.clone(),
                source_of: self.source_of.clone(),
                detail: "403 Forbidden".into(),
            },
            e => RemoteError::Store {
                target: self.target.clone(),
                detail: first_line(&e.to_string()),
            },
        }
    }

    /// Every committed checkpoint (its remote manifest exists) of `run`, or of every
    /// run: `(run, checkpoint)` pairs, in no order.
    pub async fn committed(&self, run: Option<&str>) -> Result<Vec<(String, String)>, RemoteError> {
        let base = match run {
            Some(r) => self.key(&[r]),
            None => self.key(&[]),
        };
        let depth = self.prefix.len();
        let mut listing = self.store.list(Some(&base));
        let mut out = Vec::new();
        while let Some(meta) = listing.next().await {
            let meta = meta.map_err(|e| self.error(e))?;
            let parts: Vec<String> = meta
                .location
                .parts()
                .skip(depth)
                .map(|p| p.as_ref().to_string())
                .collect();
            if let [run, ckpt, file] = parts.as_slice()
                && file == manifest::FILE
            {
                out.push((run.clone(), ckpt.clone()));
            }
        }
        Ok(out)
    }

    /// The remote manifest of `run/ckpt`; `None` when it is not there (not committed).
    /// Refused when the names are not ones lavender writes, when the manifest does
    /// not pass [`RemoteManifest::parse`] for that key, or, with a signing key, when
    /// its signature does not verify.
    pub async fn manifest(
        &self,
        run: &str,
        ckpt: &str,
    ) -> Result<Option<RemoteManifest>, RemoteError> {
        untrusted::run_name(run)
            .and_then(|()| untrusted::checkpoint_name(ckpt))
            .map_err(|detail| RemoteError::Refused {
                object: format!("{}/{run}/{ckpt}", self.target),
                detail,
            })?;
        let key = self.key(&[run, ckpt, manifest::FILE]);
        let got = match self.store.get(&key).await {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.error(e)),
        };
        // Not read into memory past what a manifest holds.
        if got.meta.size > MAX_MANIFEST_BYTES as u64 {
            return Err(RemoteError::Refused {
                object: self.url(&key),
                detail: format!("{} bytes, more than a manifest holds", got.meta.size),
            });
        }
        let bytes = got.bytes().await.map_err(|e| self.error(e))?;
        let m = RemoteManifest::parse(&bytes, &self.url(&key), run, ckpt).map_err(|detail| {
            RemoteError::Refused {
                object: self.url(&key),
                detail,
            }
        })?;
        if let Some(signing) = &self.signing {
            signing.verify(&m).map_err(|detail| RemoteError::Refused {
                object: self.url(&key),
                detail,
            })?;
        }
        Ok(Some(m))
    }

    /// Every committed checkpoint's manifest (of `run`, or of all runs), oldest first
    /// (by when the local checkpoint was completed, then its step). A manifest that
    /// cannot be read or is refused is logged and left out.
    pub async fn manifests(&self, run: Option<&str>) -> Result<Vec<RemoteManifest>, RemoteError> {
        let (out, refused) = self.manifests_and_refusals(run).await?;
        for (name, why) in refused {
            tracing::warn!("replicate: {name} left out: {why}");
        }
        Ok(out)
    }

    /// [`Remote::manifests`], with what was left out: each `run/checkpoint` and why.
    pub async fn manifests_and_refusals(
        &self,
        run: Option<&str>,
    ) -> Result<(Vec<RemoteManifest>, Vec<(String, String)>), RemoteError> {
        let mut out = Vec::new();
        let mut refused = Vec::new();
        for (run, ckpt) in self.committed(run).await? {
            match self.manifest(&run, &ckpt).await {
                Ok(Some(m)) => out.push(m),
                Ok(None) => {}
                Err(e @ (RemoteError::Mismatch { .. } | RemoteError::Refused { .. })) => {
                    refused.push((format!("{run}/{ckpt}"), e.to_string()));
                }
                Err(e) => return Err(e),
            }
        }
        out.sort_by(|a, b| {
            (a.completed_unix_ms, a.step, &a.checkpoint).cmp(&(
                b.completed_unix_ms,
                b.step,
                &b.checkpoint,
            ))
        });
        Ok((out, refused))
    }

    /// Reads the object back: its size (HEAD) and its bytes hashed with `algorithm`
    /// (GET, streamed). S3 servers' checksums are not relied on: SeaweedFS and others
    /// do not keep the SHA-256/CRC32C of a multipart upload, and an ETag is no hash of
    /// the bytes; a GET proves what a restore would read.
    pub async fn read_back(
        &self,
        key: &Key,
        algorithm: HashAlgorithm,
    ) -> Result<(u64, String), RemoteError> {
        let meta = self.store.head(key).await.map_err(|e| self.error(e))?;
        let mut stream = self
            .store
            .get(key)
            .await
            .map_err(|e| self.error(e))?
            .into_stream();
        let mut hasher = algorithm.hasher();
        let mut read = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| self.error(e))?;
            read += chunk.len() as u64;
            hasher.update(&chunk);
        }
        if read != meta.size {
            return Err(RemoteError::Mismatch {
                object: key.to_string(),
                detail: format!("HEAD says {} bytes, GET returned {read}", meta.size),
            });
        }
        Ok((meta.size, hasher.finish_hex()))
    }

    /// Deletes the remote checkpoint `run/ckpt`: its manifest first (so it stops
    /// counting as complete), then its objects.
    pub async fn delete(&self, run: &str, ckpt: &str) -> Result<(), RemoteError> {
        match self
            .store
            .delete(&self.key(&[run, ckpt, manifest::FILE]))
            .await
        {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(self.error(e)),
        }
        self.delete_under(&self.key(&[run, ckpt])).await
    }

    /// Deletes the run-level files of `run` (`<run>/_run/<hash>/<name>`) that none of
    /// `kept` (the run's remaining remote manifests) lists; how many went.
    pub async fn delete_unreferenced_run_files(
        &self,
        run: &str,
        kept: &[&RemoteManifest],
    ) -> Result<usize, RemoteError> {
        let depth = self.prefix.len();
        let keys = self
            .keys_under(&self.key(&[run, manifest::RUN_FILES_DIR]))
            .await?;
        let mut gone = 0;
        for key in keys {
            let parts: Vec<String> = key
                .parts()
                .skip(depth)
                .map(|p| p.as_ref().to_string())
                .collect();
            let referenced = match parts.as_slice() {
                [_, _, hash, name] => kept.iter().any(|m| {
                    m.run_files
                        .iter()
                        .any(|f| &f.hash == hash && &f.path == name)
                }),
                _ => true,
            };
            if !referenced {
                match self.store.delete(&key).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => gone += 1,
                    Err(e) => return Err(self.error(e)),
                }
            }
        }
        Ok(gone)
    }

    /// Every object's key under `prefix`.
    async fn keys_under(&self, prefix: &Key) -> Result<Vec<Key>, RemoteError> {
        self.store
            .list(Some(prefix))
            .map(|m| m.map(|m| m.location))
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<_, _>>()
            .map_err(|e| self.error(e))
    }

    /// Deletes every object under `prefix` (one already gone is no error).
    async fn delete_under(&self, prefix: &Key) -> Result<(), RemoteError> {
        for key in self.keys_under(prefix).await? {
            match self.store.delete(&key).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.error(e)),
            }
        }
        Ok(())
    }
}

impl Remote {
    /// Deletes every remote copy of `run` (`prune --remote`): each committed
    /// checkpoint by [`Remote::delete`] (its manifest first), then whatever is left
    /// under the run (uploads cut short). The committed checkpoints it held, by name.
    pub async fn delete_run(&self, run: &str) -> Result<Vec<String>, RemoteError> {
        let mut committed: Vec<String> = self
            .committed(Some(run))
            .await?
            .into_iter()
            .map(|(_, ckpt)| ckpt)
            .collect();
        committed.sort();
        for ckpt in &committed {
            self.delete(run, ckpt).await?;
        }
        self.delete_under(&self.key(&[run])).await?;
        Ok(committed)
    }
}

/// A `file://` target must be on another file system than the data root and `/`:
/// the folder (or its nearest existing parent) is compared by device.
fn mounted(root: &Path, data_root: &Path) -> Result<(), RemoteError> {
    use std::os::unix::fs::MetadataExt;
    let device = |p: &Path| {
        p.ancestors()
            .find_map(|a| std::fs::metadata(a).ok())
            .map(|m| m.dev())
    };
    let target = device(root);
    for (what, other) in [("the data root", data_root), ("/", Path::new("/"))] {
        if target.is_some() && target == device(other) {
            return Err(RemoteError::Config {
                key: "replicate.url",
                message: format!(
                    "{} is on the same file system as {what} ({}): a copy there is lost with that disk, and an unmounted NAS looks just like this; mount the NAS there first, or set replicate.require_mounted: false to copy to a local folder on purpose",
                    root.display(),
                    other.display()
                ),
            });
        }
    }
    Ok(())
}

/// The largest remote manifest read: 16 MiB (lavender writes about 150 bytes a file).
const MAX_MANIFEST_BYTES: usize = 16 << 20;

/// An error text that says the server refused the request's credentials.
fn refused(text: &str) -> bool {
    [
        "403 Forbidden",
        "401 Unauthorized",
        "SignatureDoesNotMatch",
        "InvalidAccessKeyId",
    ]
    .iter()
    .any(|s| text.contains(s))
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().to_string()
}

/// The name of the directory `path` (a run's or a checkpoint's folder name).
pub(crate) fn dir_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(yaml: &str) -> ReplicateConfig {
        lavender::config::Config::from_yaml_str(yaml, "t.yaml")
            .unwrap()
            .replicate
    }

    #[test]
    fn credentials_come_from_the_file_or_the_environment_and_errors_name_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("creds");
        std::fs::write(
            &file,
            "[other]\naws_access_key_id = NO\n[default]\naws_access_key_id = AKID\naws_secret_access_key = S3CRET\n",
        )
        .unwrap();
        let c = config(&format!(
            "replicate: {{url: s3://b/p, credentials_file: {}}}",
            file.display()
        ));
        let none = |_: &str| None;
        let got = credentials(&c, &none).unwrap();
        assert_eq!(
            (got.key_id.as_str(), got.secret.as_str()),
            ("AKID", "S3CRET")
        );
        assert!(got.source_of.contains("replicate.credentials_file"));

        std::fs::write(&file, "[default]\naws_access_key_id = AKID\n").unwrap();
        let e = credentials(&c, &none).err().unwrap().to_string();
        assert!(e.starts_with("replicate.credentials_file: "), "{e}");
        assert!(e.contains("aws_secret_access_key"), "{e}");

        let c = config("replicate: {url: s3://b/p}");
        let e = credentials(&c, &none).err().unwrap().to_string();
        assert!(e.contains("AWS_ACCESS_KEY_ID"), "{e}");
        let env = |k: &str| match k {
            "AWS_ACCESS_KEY_ID" => Some("ENVKEY".to_string()),
            "AWS_SECRET_ACCESS_KEY" => Some("ENVSECRET".to_string()),
            _ => None,
        };
        let got = credentials(&c, &env).unwrap();
        assert_eq!(got.key_id, "ENVKEY");
        assert!(
            !got.source_of.contains("ENV"),
            "names the variable, not the value"
        );
    }

    /// A `file://` folder on the data root's disk (an unmounted NAS looks like
    /// this) is refused, and not created; `require_mounted: false` takes it.
    #[test]
    fn a_file_target_on_the_data_roots_disk_is_refused_unless_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let nas = dir.path().join("mnt/nas/lavender");
        let c = config(&format!("replicate: {{url: 'file://{}'}}", nas.display()));
        let e = Remote::open(&c, &|_| None, dir.path())
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.starts_with("replicate.url: ")
                && e.contains("same file system as the data root")
                && e.contains("replicate.require_mounted: false"),
            "{e}"
        );
        assert!(!nas.exists(), "created on the wrong disk");
        let c = config(&format!(
            "replicate: {{url: 'file://{}', require_mounted: false}}",
            nas.display()
        ));
        assert!(Remote::open(&c, &|_| None, dir.path()).unwrap().is_some());
        assert!(nas.is_dir());
    }

    #[test]
    fn keys_follow_the_layout_under_the_prefix() {
        let c = config(
            "replicate: {url: s3://b/team/runs/, path_style: true, endpoint: http://127.0.0.1:1}",
        );
        let env = |k: &str| Some(format!("x{k}"));
        let r = Remote::open(&c, &env, Path::new("/data")).unwrap().unwrap();
        assert_eq!(r.target(), "s3://b/team/runs");
        assert_eq!(
            r.key(&["run-1", "train-0001", "sub/model.pt"]).as_ref(),
            "team/runs/run-1/train-0001/sub/model.pt"
        );
    }
}
