//! What the daemon found when it read each new checkpoint back against its manifest:
//! `<run>/.verdict.<name>.json`, one small file per checkpoint beside it, written by
//! the daemon's verifier (so a daemon restart does not hash everything again) and by
//! `lavenderd verify` (so `lavenderd checkpoints` shows what it found).
//! Hidden, so nothing lists it as a checkpoint; in the run directory itself, so the
//! status refresher's watch of the run sees each new verdict. Verdicts in a run say
//! a verifier watches it: retention then keeps the newest checkpoint found intact
//! and everything newer, so a run is never left without a checked checkpoint.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::contents::{self, Depth, Verdict};
use super::listing::Checkpoint;
use crate::error::Result;

/// The start of a verdict's file name in the run directory.
pub const PREFIX: &str = ".verdict.";

/// Written into a run folder before its first save by whoever will read its
/// checkpoints back (the daemon, when it creates the run): from the first save on,
/// retention — the daemon's and `lavender-worker`'s own — keeps everything newer than
/// the newest checkpoint found intact, none found yet meaning all.
pub const WATCHED: &str = ".verdicts-watched";

/// One checkpoint's verdict as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recorded {
    #[serde(flatten)]
    pub verdict: Verdict,
    /// When it was read back (RFC 3339 UTC).
    pub checked_at: String,
    /// The checkpoint's files as they were when read back ([`stamp`]): a verdict
    /// whose files changed since is read back again. Absent in older verdicts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stamp: Option<String>,
}

/// What one `stat` of every file of the checkpoint at `dir` says (path, size,
/// mtime, inode, ctime), hashed: it changes when a file is written, replaced,
/// added or removed (bit rot changes no `stat`). `None` when the folder cannot be
/// listed.
pub fn stamp(dir: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).ok()? {
            let e = e.ok()?;
            let md = e.metadata().ok()?;
            if md.is_dir() {
                stack.push(e.path());
            } else {
                let rel = e
                    .path()
                    .strip_prefix(dir)
                    .ok()?
                    .to_string_lossy()
                    .into_owned();
                files.push(format!(
                    "{rel}\0{}\0{}.{}\0{}\0{}.{}",
                    md.len(),
                    md.mtime(),
                    md.mtime_nsec(),
                    md.ino(),
                    md.ctime(),
                    md.ctime_nsec()
                ));
            }
        }
    }
    files.sort();
    Some(blake3::hash(files.join("\n").as_bytes()).to_hex()[..32].to_string())
}

/// The verdict recorded for the checkpoint at `dir`, as its file says.
fn recorded(dir: &Path) -> Option<Recorded> {
    let name = dir.file_name()?.to_str()?;
    let text = std::fs::read_to_string(path(dir.parent()?, name)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Whether the verdict recorded for `ckpt` was made on its files as they are now.
pub fn current(ckpt: &Checkpoint) -> bool {
    recorded(&ckpt.path).is_some_and(|r| r.stamp.is_some() && r.stamp == stamp(&ckpt.path))
}

/// What a reader shows for `ckpt`: its recorded check, or pending when its files
/// changed since it was read back (a verdict of files that are no longer there says
/// nothing; the daemon reads it again at its next pass, `lavenderd verify` at once).
/// A verdict older than the stamp is taken as it is.
pub fn shown(ckpt: &Checkpoint) -> Check {
    let Some(recorded) = recorded(&ckpt.path) else {
        return Check::Pending;
    };
    match recorded.stamp {
        Some(s) if Some(&s) != stamp(&ckpt.path).as_ref() => Check::Pending,
        _ => Check::Done(recorded.verdict),
    }
}

/// The "verified" recorded for the checkpoint at `dir` when it still holds: made on
/// its files as they are now (one `stat` of each: size, mtime, inode, ctime) and
/// younger than `max_age` (bit rot changes no `stat`, so an old verdict is read
/// again). A resume takes it instead of reading every byte once more. `None`: no
/// such verdict, and the caller reads the checkpoint.
pub fn reusable(dir: &Path, max_age: std::time::Duration) -> Option<Verdict> {
    let recorded = recorded(dir)?;
    if !matches!(recorded.verdict, Verdict::Verified { .. }) {
        return None;
    }
    let checked = crate::time::parse_rfc3339(&recorded.checked_at)?;
    let age = (crate::time::now_utc() - checked).to_std().ok()?;
    (age < max_age && recorded.stamp.is_some() && recorded.stamp == stamp(dir))
        .then_some(recorded.verdict)
}

/// The resume's check ([`super::fallback::check`]), unless the checkpoint's recorded
/// "verified" still holds ([`reusable`]): a restart then loads at once instead of
/// reading every byte again.
pub fn check_reusing(max_age: std::time::Duration) -> impl Fn(&Path) -> Verdict {
    move |dir| reusable(dir, max_age).unwrap_or_else(|| super::fallback::check(dir))
}

/// Where a checkpoint stands for the verifier.
#[derive(Debug, Clone, PartialEq)]
pub enum Check {
    /// Not read back yet.
    Pending,
    Done(Verdict),
}

impl Check {
    /// Read back and not damaged: verified, or without a manifest to check (nothing
    /// better will come of waiting for it).
    pub fn is_good(&self) -> bool {
        matches!(
            self,
            Check::Done(Verdict::Verified { .. } | Verdict::Unverified)
        )
    }

    /// For a person: verified, damaged (and what), pending, unverified.
    pub fn describe(&self) -> String {
        match self {
            Check::Pending => "pending".into(),
            Check::Done(Verdict::Verified { files, bytes }) => {
                format!("verified ({files} files, {bytes} bytes)")
            }
            Check::Done(Verdict::Unverified) => {
                "unverified (no manifest, or one that does not list trainer_state.json)".into()
            }
            Check::Done(Verdict::Damaged { damage }) => {
                format!("damaged: {}", super::fallback::describe(damage))
            }
        }
    }

    /// One word: `verified`, `damaged`, `pending`, `unverified`.
    pub fn word(&self) -> &'static str {
        match self {
            Check::Pending => "pending",
            Check::Done(Verdict::Verified { .. }) => "verified",
            Check::Done(Verdict::Unverified) => "unverified",
            Check::Done(Verdict::Damaged { .. }) => "damaged",
        }
    }
}

fn path(run_dir: &Path, name: &str) -> PathBuf {
    run_dir.join(format!("{PREFIX}{name}.json"))
}

/// The checkpoint names of the verdicts recorded in `run_dir`.
fn recorded_names(run_dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(run_dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let file = e.file_name().to_string_lossy().into_owned();
            Some(
                file.strip_prefix(PREFIX)?
                    .strip_suffix(".json")?
                    .to_string(),
            )
        })
        .collect()
}

/// Whether a verifier watches `run_dir`: it said so before the first save
/// ([`watch`]), or it recorded a verdict there.
pub fn watched(run_dir: &Path) -> bool {
    run_dir.join(WATCHED).exists() || !recorded_names(run_dir).is_empty()
}

/// Says that a verifier will read back every checkpoint saved in `run_dir` (see
/// [`WATCHED`]).
pub fn watch(run_dir: &Path) -> Result<()> {
    crate::atomic::write_file(
        &run_dir.join(WATCHED),
        b"lavenderd reads back each checkpoint of this run; retention keeps every checkpoint newer than the newest found intact\n",
    )
}

/// The recorded check of checkpoint `name` of `run_dir`.
pub fn read(run_dir: &Path, name: &str) -> Check {
    recorded(&run_dir.join(name)).map_or(Check::Pending, |r| Check::Done(r.verdict))
}

/// Reads `ckpt` back against its manifest (every byte) and records the verdict.
pub fn verify_and_record(ckpt: &Checkpoint) -> Result<Verdict> {
    verify_and_record_with(ckpt, contents::Hashing::OneThread)
        .map(|v| v.unwrap_or(Verdict::Unverified))
}

/// [`verify_and_record`], hashing as `hashing` says (`lavenderd verify`: every
/// core); `None`, and nothing recorded, when the checkpoint went away meanwhile
/// (retention). Its files changed while they were read (a writer dropping a file
/// from an older checkpoint under `save_optimizer_state: last` rewrites its manifest,
/// then deletes the file: read between the two, the file is "missing"): read once
/// more, so no verdict of files that are no longer there is left to stick.
pub fn verify_and_record_with(
    ckpt: &Checkpoint,
    hashing: contents::Hashing,
) -> Result<Option<Verdict>> {
    let check = || contents::verify_with(&ckpt.path, Depth::Full, None, hashing);
    let before = stamp(&ckpt.path);
    let mut verdict = check();
    let mut after = stamp(&ckpt.path);
    if after != before {
        verdict = check();
        after = stamp(&ckpt.path);
    }
    if !super::is_complete(&ckpt.path) {
        return Ok(None);
    }
    // A storage error says nothing of the bytes: nothing recorded, read again later.
    if verdict.storage_error().is_none() {
        record_stamped(ckpt, &verdict, after)?;
    }
    Ok(Some(verdict))
}

/// Records what reading `ckpt` back found (the daemon's verifier, `lavenderd verify`).
pub fn record(ckpt: &Checkpoint, verdict: &Verdict) -> Result<()> {
    record_stamped(ckpt, verdict, stamp(&ckpt.path))
}

fn record_stamped(ckpt: &Checkpoint, verdict: &Verdict, stamp: Option<String>) -> Result<()> {
    let run_dir = ckpt.path.parent().unwrap_or(Path::new("."));
    let recorded = Recorded {
        verdict: verdict.clone(),
        checked_at: crate::time::rfc3339_z(crate::time::now_utc()),
        stamp,
    };
    crate::atomic::write_json(&path(run_dir, &ckpt.name), &recorded)
}

/// Drops the verdicts of checkpoints no longer in the run (deleted by retention,
/// set aside); `names` are those that are.
pub fn forget_others(run_dir: &Path, names: &[&str]) {
    for name in recorded_names(run_dir) {
        if !names.contains(&name.as_str()) {
            let _ = std::fs::remove_file(path(run_dir, &name));
        }
    }
}

/// The index in `ckpts` (oldest first) of the newest checkpoint read back and found
/// good ([`Check::is_good`]).
pub fn newest_good(run_dir: &Path, ckpts: &[Checkpoint]) -> Option<usize> {
    ckpts.iter().rposition(|c| read(run_dir, &c.name).is_good())
}

/// The newest checkpoint verified against its manifest, and how many are.
pub fn verified_summary(run_dir: &Path, ckpts: &[Checkpoint]) -> (u64, Option<String>) {
    let verified: Vec<&Checkpoint> = ckpts
        .iter()
        .filter(|c| {
            matches!(
                read(run_dir, &c.name),
                Check::Done(Verdict::Verified { .. })
            )
        })
        .collect();
    (
        verified.len() as u64,
        verified.last().map(|c| c.name.clone()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::contents::HashAlgorithm;
    use crate::checkpoint::listing::list_run_checkpoints;
    use crate::checkpoint::listing::tests::{save, set_mtime};

    #[test]
    fn recorded_verdicts_read_back_and_a_missing_one_is_pending() {
        let root = tempfile::tempdir().unwrap();
        let run = root.path().join("run-2026-01-01_00-00-00");
        for c in 1..=3u32 {
            let p = save(&run, "pretrain", c, None);
            set_mtime(&p, 1_000 * c as u64);
            if c < 3 {
                let m = contents::build_from_disk(&p, HashAlgorithm::Blake3).unwrap();
                contents::write(&p, &m).unwrap();
            }
        }
        let ckpts = list_run_checkpoints(&run).unwrap();
        assert!(!watched(&run));
        assert_eq!(newest_good(&run, &ckpts), None);
        std::fs::write(ckpts[1].path.join("model.safetensors"), b"x").unwrap();
        for c in &ckpts {
            verify_and_record(c).unwrap();
        }
        assert!(watched(&run));
        assert_eq!(read(&run, &ckpts[0].name).word(), "verified");
        assert_eq!(
            read(&run, &ckpts[1].name).describe(),
            "damaged: model.safetensors: 1 bytes, the manifest says 7"
        );
        assert_eq!(read(&run, &ckpts[2].name).word(), "unverified");
        assert_eq!(read(&run, "pretrain-12-00-09-0009"), Check::Pending);
        // No manifest is as good as it gets; damaged is not.
        assert_eq!(newest_good(&run, &ckpts), Some(2));
        assert_eq!(
            verified_summary(&run, &ckpts),
            (1, Some(ckpts[0].name.clone()))
        );
        forget_others(&run, &[ckpts[0].name.as_str()]);
        assert_eq!(read(&run, &ckpts[2].name), Check::Pending);
        assert_eq!(read(&run, &ckpts[0].name).word(), "verified");
    }

    /// One complete checkpoint in `run` with its manifest: its folder and listing.
    fn one_with_manifest(run: &Path) -> (PathBuf, Checkpoint) {
        let p = save(run, "pretrain", 1, None);
        let m = contents::build_from_disk(&p, HashAlgorithm::Blake3).unwrap();
        contents::write(&p, &m).unwrap();
        (p, list_run_checkpoints(run).unwrap().remove(0))
    }

    /// A resume takes a recorded "verified" while its files are unchanged and it is
    /// younger than the limit; a file written since, an old verdict, a limit of 0 or
    /// a verdict that is not "verified" send it back to reading every byte.
    #[test]
    fn a_fresh_verified_verdict_on_unchanged_files_is_reused() {
        use std::time::Duration;
        let root = tempfile::tempdir().unwrap();
        let run = root.path().join("run-2026-01-01_00-00-00");
        let (p, ckpt) = one_with_manifest(&run);
        let day = Duration::from_secs(86_400);
        assert_eq!(reusable(&p, day), None, "nothing recorded yet");
        let verdict = verify_and_record(&ckpt).unwrap();
        assert!(matches!(verdict, Verdict::Verified { .. }));
        assert_eq!(reusable(&p, day), Some(verdict.clone()));
        assert_eq!(shown(&ckpt), Check::Done(verdict.clone()));
        assert_eq!(reusable(&p, Duration::ZERO), None, "0: always read again");
        // Recorded long ago: read again (bit rot changes no stat).
        let file = path(&run, &ckpt.name);
        let mut old: Recorded =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let recorded = old.clone();
        old.checked_at = "2020-01-01T00:00:00.000Z".into();
        crate::atomic::write_json(&file, &old).unwrap();
        assert_eq!(reusable(&p, day), None);
        crate::atomic::write_json(&file, &recorded).unwrap();
        assert_eq!(reusable(&p, day), Some(verdict));
        // A file written since (same bytes, dated elsewhere): its stat changed, read again.
        let w = p.join("model.safetensors");
        std::fs::write(&w, std::fs::read(&w).unwrap()).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&w)
            .unwrap()
            .set_modified(std::time::SystemTime::UNIX_EPOCH)
            .unwrap();
        assert_eq!(reusable(&p, day), None);
        // What a listing shows: not the verdict of files that are no longer there.
        assert_eq!(shown(&ckpt), Check::Pending);
        // A damaged verdict is never taken as it stands.
        std::fs::write(&w, b"x").unwrap();
        verify_and_record(&ckpt).unwrap();
        assert_eq!(reusable(&p, day), None);
    }

    /// A verdict is current while the checkpoint's files are as they were read; a
    /// file rewritten (same size), dropped or added makes it stale, and reading it
    /// back again replaces it; a checkpoint gone meanwhile records nothing.
    #[test]
    fn a_verdict_goes_stale_when_its_files_change() {
        let root = tempfile::tempdir().unwrap();
        let run = root.path().join("run-2026-01-01_00-00-00");
        let (p, ckpt) = one_with_manifest(&run);
        assert!(!current(&ckpt), "nothing recorded yet");
        assert!(!verify_and_record(&ckpt).unwrap().is_damaged());
        assert!(current(&ckpt));
        let weights = p.join("model.safetensors");
        let mut bytes = std::fs::read(&weights).unwrap();
        bytes[0] ^= 1;
        std::fs::write(&weights, &bytes).unwrap();
        assert!(!current(&ckpt), "rewritten in place");
        assert!(verify_and_record(&ckpt).unwrap().is_damaged());
        assert!(current(&ckpt));
        std::fs::write(p.join("optimizer.safetensors"), b"left over").unwrap();
        assert!(!current(&ckpt), "a file added");
        std::fs::remove_dir_all(&p).unwrap();
        assert_eq!(
            verify_and_record_with(&ckpt, contents::Hashing::OneThread).unwrap(),
            None
        );
    }
}
