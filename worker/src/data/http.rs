//! URL sources: a blocking HTTP(S) download that resumes a partial file with `Range`
//! and is verified against the SHA-256 the config gives.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use reqwest::StatusCode;
use reqwest::header::{CONTENT_LENGTH, RANGE};

use super::documents::sha256_file;
use crate::progress::Progress;

/// Download `url` into `partial_dir/<sha256>.part`, resuming what an earlier, interrupted
/// run left there, and verify it. Returns the verified file. On a checksum mismatch the
/// partial file is deleted (the next run starts over) and the step fails.
pub fn fetch(url: &str, sha256: &str, partial_dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(partial_dir)
        .with_context(|| format!("could not create {}", partial_dir.display()))?;
    let part = partial_dir.join(format!("{}.part", sha256.to_ascii_lowercase()));
    let have = std::fs::metadata(&part).map(|m| m.len()).unwrap_or(0);

    let client = reqwest::blocking::Client::builder()
        .connect_timeout(Duration::from_secs(30))
        // The blocking client applies this to each read of the body, not to the whole
        // download: a large corpus takes as long as it takes, a stalled one fails.
        .timeout(Duration::from_secs(120))
        .build()
        .context("could not set up the HTTP client")?;
    let mut req = client.get(url);
    if have > 0 {
        req = req.header(RANGE, format!("bytes={have}-"));
    }
    let mut resp = req
        .send()
        .with_context(|| format!("could not download {url}"))?;
    let status = resp.status();
    let mut out = match status {
        StatusCode::PARTIAL_CONTENT if have > 0 => {
            eprintln!("downloads: resuming {url} at byte {have}");
            OpenOptions::new()
                .append(true)
                .open(&part)
                .with_context(|| format!("could not open {}", part.display()))?
        }
        // The partial file is already whole (or the server disagrees): verify below.
        StatusCode::RANGE_NOT_SATISFIABLE if have > 0 => return verify(url, sha256, part),
        s if s.is_success() => {
            File::create(&part).with_context(|| format!("could not create {}", part.display()))?
        }
        s => bail!("could not download {url}: the server answered HTTP {s}"),
    };
    let total = resp
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let mut progress = Progress::new("downloads", total, "bytes");
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = resp
            .read(&mut buf)
            .with_context(|| format!("download of {url} was interrupted; rerun to resume"))?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])
            .with_context(|| format!("could not write {}", part.display()))?;
        progress.advance(n as u64, n as u64);
    }
    progress.finish();
    out.sync_all()
        .with_context(|| format!("could not write {}", part.display()))?;
    drop(out);
    verify(url, sha256, part)
}

fn verify(url: &str, sha256: &str, part: PathBuf) -> Result<PathBuf> {
    let got = sha256_file(&part)?;
    if !got.eq_ignore_ascii_case(sha256) {
        let _ = std::fs::remove_file(&part);
        bail!(
            "checksum mismatch for {url}: expected sha256 {sha256}, got {got}; the previous corpus is kept. \
             Check the URL, or update its sha256 in data.sources if the file changed on purpose"
        );
    }
    Ok(part)
}
