//! The `replicate:` section: a copy of every complete checkpoint off the machine, in
//! S3-compatible storage (`s3://bucket/prefix`, with `endpoint`/`region`/`path_style`
//! for servers other than AWS) or a mounted folder (`file:///mnt/nas/…`). The daemon
//! uploads (daemon/src/replicate/); this is only what the operator asked for, checked.
//! No secret lives here: credentials come from the environment or `credentials_file`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::error::{ConfigError, ConfigErrorKind};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReplicateConfig {
    /// Where the copies go: `s3://bucket[/prefix]` or `file:///absolute/folder`;
    /// null = no replication.
    pub url: Option<String>,
    /// An S3-compatible server's base URL (`http://127.0.0.1:8333`); null = AWS.
    pub endpoint: Option<String>,
    /// The bucket's region; null = `AWS_REGION`/`AWS_DEFAULT_REGION`, else us-east-1.
    pub region: Option<String>,
    /// Address the bucket in the path (`endpoint/bucket/key`), as most S3-compatible
    /// servers want, instead of as a host name (`bucket.endpoint/key`).
    pub path_style: bool,
    /// An AWS shared-credentials file (`[default]` with `aws_access_key_id`,
    /// `aws_secret_access_key`, optionally `aws_session_token`); null = the
    /// environment's `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_SESSION_TOKEN`.
    pub credentials_file: Option<PathBuf>,
    /// A file of at least 32 secret bytes, kept outside the data root and copied to
    /// every machine that restores: each remote manifest is signed with it, and a
    /// restore refuses one that is unsigned or does not verify. null = the bucket is
    /// trusted (whoever can write it decides what a restore brings back).
    pub signing_key_file: Option<PathBuf>,
    /// The name of this training's copies (`[A-Za-z0-9._-]`, up to 128), written into
    /// every remote manifest: `start --resume latest` and `pull` take only this
    /// lineage's checkpoints, never another's under the same prefix. null = the name
    /// of the run the training started with (its lineage's root), and a prefix holding
    /// several lineages is refused until one is named here.
    pub lineage: Option<String>,
    /// With a `file://` URL: refuse a folder on the file system of the data root or
    /// of `/` (an unmounted NAS's mount point is a folder of the root disk, and a copy
    /// there is lost with it). false = copy to a local folder on purpose.
    pub require_mounted: bool,
    /// Remote checkpoints kept per run: the newest `keep`, plus the best by validation
    /// loss, each stage's last and the run's final; the rest are deleted remotely.
    pub keep: u32,
    /// Upload bandwidth cap in megabytes (10^6 bytes) per second; null = no cap.
    pub max_mbps: Option<f64>,
    /// Seconds a local checkpoint may wait to be safely remote before the status
    /// says the replication is behind (`replication.behind`); null = never.
    pub max_lag_s: Option<u64>,
}

impl Default for ReplicateConfig {
    fn default() -> Self {
        ReplicateConfig {
            url: None,
            endpoint: None,
            region: None,
            path_style: false,
            credentials_file: None,
            signing_key_file: None,
            lineage: None,
            require_mounted: true,
            keep: 5,
            max_mbps: None,
            max_lag_s: None,
        }
    }
}

impl ReplicateConfig {
    pub fn is_default(&self) -> bool {
        *self == ReplicateConfig::default()
    }

    /// Whether a target is configured.
    pub fn enabled(&self) -> bool {
        self.url.is_some()
    }

    /// The target, parsed (`None` when replication is off). Validation guarantees a
    /// configured URL parses.
    pub fn target(&self) -> Option<Target> {
        self.url.as_deref().and_then(|u| Target::parse(u).ok())
    }
}

/// Where the copies go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `s3://bucket/prefix`: `prefix` has no leading or trailing `/` (may be empty).
    S3 { bucket: String, prefix: String },
    /// `file:///folder`: an absolute folder (a NAS mount).
    File { root: PathBuf },
}

impl Target {
    /// Parses `url`; the error says what is wrong with it (the caller names the key).
    pub fn parse(url: &str) -> Result<Target, String> {
        let (scheme, rest) = url.split_once("://").ok_or_else(|| {
            format!("{url:?} is not a URL; write s3://bucket/prefix or file:///absolute/folder")
        })?;
        match scheme {
            "s3" => {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.contains('@') || bucket.contains(':') {
                    // Not echoed: it may hold a secret.
                    return Err("the URL carries credentials or a port before the bucket (not repeated here); write s3://bucket/prefix, put the keys in the environment or replicate.credentials_file and a server in replicate.endpoint".into());
                }
                if bucket.is_empty() {
                    return Err(format!("{url:?} names no bucket; write s3://bucket/prefix"));
                }
                if url.contains(['?', '#']) {
                    return Err(format!(
                        "{url:?}: query strings are not read; set endpoint, region and path_style as replicate keys"
                    ));
                }
                Ok(Target::S3 {
                    bucket: bucket.to_string(),
                    prefix: prefix.trim_matches('/').to_string(),
                })
            }
            "file" => {
                let path = PathBuf::from(rest);
                if !path.is_absolute() {
                    return Err(format!(
                        "{url:?} is not an absolute folder; write file:///mnt/nas/lavender"
                    ));
                }
                Ok(Target::File { root: path })
            }
            "gs" | "az" | "abfs" | "http" | "https" => Err(format!(
                "{url:?}: this lavenderd copies to s3:// (any S3-compatible server: set replicate.endpoint; Google Cloud Storage answers S3 at https://storage.googleapis.com) or file:// (a mounted folder)"
            )),
            other => Err(format!(
                "{url:?}: unknown scheme {other:?}; write s3://bucket/prefix or file:///absolute/folder"
            )),
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::S3 { bucket, prefix } if prefix.is_empty() => write!(f, "s3://{bucket}"),
            Target::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
            Target::File { root } => write!(f, "file://{}", root.display()),
        }
    }
}

/// A lineage's name: 1 to 128 of `[A-Za-z0-9._-]`, not starting with `.`.
pub fn valid_lineage(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn invalid(path: &str, message: String) -> ConfigError {
    ConfigError::new(ConfigErrorKind::Invalid {
        path: path.into(),
        message,
    })
}

pub(crate) fn validate(r: &ReplicateConfig) -> Result<(), ConfigError> {
    let target = match &r.url {
        None => None,
        Some(url) => Some(Target::parse(url).map_err(|m| invalid("replicate.url", m))?),
    };
    let s3 = matches!(target, Some(Target::S3 { .. }));
    if let Some(endpoint) = &r.endpoint {
        let Some((scheme, rest)) = endpoint.split_once("://") else {
            return Err(invalid(
                "replicate.endpoint",
                format!("{endpoint:?} is not a URL; write http://host:port or https://host"),
            ));
        };
        if !matches!(scheme, "http" | "https") || rest.is_empty() {
            return Err(invalid(
                "replicate.endpoint",
                format!("{endpoint:?}: write http://host:port or https://host"),
            ));
        }
        if rest
            .split('/')
            .next()
            .is_some_and(|host| host.contains('@'))
        {
            return Err(invalid(
                "replicate.endpoint",
                "carries credentials; put them in the environment or replicate.credentials_file"
                    .into(),
            ));
        }
    }
    for (key, set) in [
        ("replicate.endpoint", r.endpoint.is_some()),
        ("replicate.region", r.region.is_some()),
        ("replicate.path_style", r.path_style),
    ] {
        if set && !s3 {
            return Err(invalid(
                key,
                format!(
                    "applies to an s3:// replicate.url only (it is {}); remove it or set the URL",
                    r.url.as_deref().unwrap_or("null")
                ),
            ));
        }
    }
    if let Some(l) = &r.lineage
        && !valid_lineage(l)
    {
        return Err(invalid(
            "replicate.lineage",
            format!(
                "{l:?}: write a name of 1 to 128 letters, digits, `.`, `_` or `-` (an experiment's name)"
            ),
        ));
    }
    if r.keep == 0 {
        return Err(invalid(
            "replicate.keep",
            "keep at least 1 remote checkpoint per run (the newest is the one a restore needs)"
                .into(),
        ));
    }
    if let Some(mbps) = r.max_mbps
        && !(mbps.is_finite() && mbps > 0.0)
    {
        return Err(ConfigError::new(ConfigErrorKind::OutOfRange {
            path: "replicate.max_mbps".into(),
            value: mbps.to_string(),
            range: "above 0 (null = no cap)".into(),
        }));
    }
    if r.max_lag_s == Some(0) {
        return Err(ConfigError::new(ConfigErrorKind::OutOfRange {
            path: "replicate.max_lag_s".into(),
            value: "0".into(),
            range: "1.. (null = no limit)".into(),
        }));
    }
    Ok(())
}
