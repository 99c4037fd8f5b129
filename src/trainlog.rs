//! The per-run `train.log`: a few greppable lines that answer "when was the last
//! save?" without parsing anything else.
//!
//! ```text
//! CKPT run-dir /data/checkpoints/run-2026-04-24_16-08-45
//! SAVE pretrain-16-08-47-0003 @ 16:08:47
//! RETAIN dropped 2 old ckpt(s)
//! ```

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};

use crate::error::{Error, IoContext, Result};
use crate::time;

pub const FILE: &str = "train.log";

fn append(run_dir: &Path, line: &str) -> Result<()> {
    let path = run_dir.join(FILE);
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .ctx("open", &path)?;
    // One write per line so concurrent writers never interleave within a line.
    f.write_all(format!("{line}\n").as_bytes())
        .ctx("append to", &path)
}

/// `CKPT run-dir <path>`, once per training session.
pub fn log_run_dir(run_dir: &Path) -> Result<()> {
    append(run_dir, &format!("CKPT run-dir {}", run_dir.display()))
}

/// `SAVE <name> @ HH:MM:SS`, once per checkpoint save.
pub fn log_save(run_dir: &Path, name: &str, at: DateTime<Utc>) -> Result<()> {
    append(run_dir, &format!("SAVE {name} @ {}", time::clock(at)))
}

/// `RETAIN dropped N old ckpt(s)`, after a retention pass that deleted anything.
pub fn log_retain(run_dir: &Path, dropped: usize) -> Result<()> {
    if dropped == 0 {
        return Ok(());
    }
    append(run_dir, &format!("RETAIN dropped {dropped} old ckpt(s)"))
}

fn read_log(run_dir: &Path) -> Result<String> {
    let path: PathBuf = run_dir.join(FILE);
    match fs::read(&path) {
        Ok(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(Error::io("read", &path, e)),
    }
}

fn parse_save(line: &str) -> Option<(String, String)> {
    let rest = line.strip_prefix("SAVE ")?;
    let (name, clock) = rest.split_once(" @ ")?;
    Some((name.to_string(), clock.trim().to_string()))
}

/// Every checkpoint name the run's log says was saved, oldest first.
pub fn saved_names(run_dir: &Path) -> Result<Vec<String>> {
    Ok(read_log(run_dir)?
        .lines()
        .filter_map(parse_save)
        .map(|(n, _)| n)
        .collect())
}

/// The last `SAVE` line: (checkpoint name, HH:MM:SS).
pub fn last_save(run_dir: &Path) -> Result<Option<(String, String)>> {
    Ok(read_log(run_dir)?.lines().rev().find_map(parse_save))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn lines_and_last_save() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(last_save(dir.path()).unwrap(), None);
        log_run_dir(dir.path()).unwrap();
        let t = Utc.with_ymd_and_hms(2026, 4, 24, 16, 8, 47).unwrap();
        log_save(dir.path(), "pretrain-16-08-47-0003", t).unwrap();
        log_retain(dir.path(), 0).unwrap();
        log_save(
            dir.path(),
            "pretrain-16-09-10-0004",
            t + chrono::Duration::seconds(23),
        )
        .unwrap();
        log_retain(dir.path(), 2).unwrap();
        let text = fs::read_to_string(dir.path().join(FILE)).unwrap();
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines[0], format!("CKPT run-dir {}", dir.path().display()));
        assert_eq!(lines[1], "SAVE pretrain-16-08-47-0003 @ 16:08:47");
        assert_eq!(lines[3], "RETAIN dropped 2 old ckpt(s)");
        assert_eq!(lines.len(), 4, "RETAIN with nothing dropped writes nothing");
        assert_eq!(
            last_save(dir.path()).unwrap(),
            Some(("pretrain-16-09-10-0004".into(), "16:09:10".into()))
        );
    }
}
