//! Which checkpoint a resume takes: the newest that verifies at that moment. Every
//! resume (a restart after a crash, `start --resume`, a rollback, a resume at daemon
//! start) walks its candidates newest first; one whose files do not match its
//! manifest is moved to `<run>/damaged/<name>/` (never deleted) and the one before
//! it is tried. A checkpoint without a manifest is unverified: taken, and if the
//! worker cannot load it, set aside the same way.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::contents::{self, Damage, Depth, Verdict};
use super::listing::{self, Checkpoint};
use crate::error::{IoContext, Result};

/// The folder of a run that damaged checkpoints are moved into.
pub const DAMAGED_DIR: &str = "damaged";

/// A checkpoint found damaged and moved out of the way (or, in observe mode, left
/// where it is: `moved` false, `moved_to` where it would have gone).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SetAside {
    pub name: String,
    pub moved_to: PathBuf,
    /// What was wrong, in one line: the file, expected against found.
    pub reason: String,
    pub moved: bool,
}

impl std::fmt::Display for SetAside {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.moved {
            write!(
                f,
                "checkpoint {} is damaged ({}); set aside as {}",
                self.name,
                self.reason,
                self.moved_to.display()
            )
        } else {
            write!(
                f,
                "checkpoint {} is damaged ({}); left in place (would have set it aside as {})",
                self.name,
                self.reason,
                self.moved_to.display()
            )
        }
    }
}

/// What a walk does with a damaged candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnDamage {
    /// Moved to `<run>/damaged/` ([`set_aside`]).
    SetAside,
    /// Left where it is, said as what would have been done (observe mode, or a
    /// checkpoint outside the data root).
    Leave,
}

/// Where a resume may come from, newest first.
#[derive(Debug, Clone, PartialEq)]
pub enum Candidates {
    /// Nothing: training starts at step 0.
    None,
    /// Exactly this checkpoint (`--resume PATH`).
    Exact(PathBuf),
    /// The run's own checkpoints, then `then` (where the pipeline started from).
    Run {
        run_dir: PathBuf,
        then: Option<PathBuf>,
    },
    /// `target` and the checkpoints completed before it, in its own run (`within_run`:
    /// a chunk continuing the previous one) or under the whole checkpoints root
    /// (`--resume latest`).
    UpTo {
        target: PathBuf,
        root: PathBuf,
        within_run: bool,
    },
}

/// The outcome of a walk: the checkpoint to resume from (`None`: none left), and
/// those set aside on the way.
#[derive(Debug, Default)]
pub struct Resolved {
    pub chosen: Option<Checkpoint>,
    pub verdict: Option<Verdict>,
    pub set_aside: Vec<SetAside>,
    /// Candidates there were: none at all means a start from step 0, not a failure.
    pub tried: usize,
    /// The walk stopped at a checkpoint whose files could not be read (a storage
    /// error, not damage): which one and what the storage said. Nothing was set aside
    /// for it, nor is anything older taken in its place.
    pub storage_error: Option<String>,
}

/// What a resume checks: every file's size and hash against the manifest. The
/// files a worker does not load are small (configs, the tokenizer), so hashing all
/// costs what hashing the loaded ones does, and a damaged config is caught too.
pub fn check(dir: &Path) -> Verdict {
    contents::verify(dir, Depth::Full, None)
}

/// The damage in one line.
pub fn describe(damage: &[Damage]) -> String {
    damage
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Walks `candidates` newest first with `check` (the real one is [`check`]),
/// setting aside each damaged one, until one verifies or has no manifest.
pub fn resolve(
    candidates: &Candidates,
    check: impl Fn(&Path) -> Verdict,
    on_damage: OnDamage,
) -> Result<Resolved> {
    let mut out = Resolved::default();
    for ckpt in list(candidates)? {
        out.tried += 1;
        let verdict = check(&ckpt.path);
        if let Some(error) = verdict.storage_error() {
            out.storage_error = Some(format!("checkpoint {}: {error}", ckpt.name));
            break;
        }
        match verdict {
            Verdict::Damaged { damage } => {
                let reason = describe(&damage);
                out.set_aside.push(match on_damage {
                    OnDamage::SetAside => set_aside(&ckpt.path, reason)?,
                    OnDamage::Leave => SetAside {
                        name: ckpt.name.clone(),
                        moved_to: aside_path(&ckpt.path),
                        reason,
                        moved: false,
                    },
                });
            }
            verdict => {
                out.verdict = Some(verdict);
                out.chosen = Some(ckpt);
                break;
            }
        }
    }
    Ok(out)
}

/// The complete checkpoints `candidates` names, newest first.
fn list(candidates: &Candidates) -> Result<Vec<Checkpoint>> {
    let mut out = match candidates {
        Candidates::None => Vec::new(),
        Candidates::Exact(path) => listing::is_complete(path)
            .then(|| Checkpoint::load(path))
            .transpose()?
            .into_iter()
            .collect(),
        Candidates::Run { run_dir, then } => {
            let mut all = listing::list_run_checkpoints(run_dir)?;
            if let Some(then) = then.as_deref().filter(|p| listing::is_complete(p))
                && !all.iter().any(|c| c.path == then)
            {
                // Older than anything the run saved since.
                all.insert(0, Checkpoint::load(then)?);
            }
            all
        }
        Candidates::UpTo {
            target,
            root,
            within_run,
        } => {
            let all = match (within_run, target.parent()) {
                (true, Some(run)) => listing::list_run_checkpoints(run)?,
                _ => listing::list_checkpoints(root)?,
            };
            match all.iter().position(|c| &c.path == target) {
                Some(i) => all[..=i].to_vec(),
                // Gone since it was resolved (set aside by an earlier walk): what
                // was older than it is left.
                None => match Checkpoint::load(target) {
                    Ok(t) => all.into_iter().filter(|c| c.mtime <= t.mtime).collect(),
                    Err(_) => all,
                },
            }
        }
    };
    out.reverse();
    Ok(out)
}

/// Moves the checkpoint at `dir` to `<run>/damaged/<name>/` (a numbered name when
/// one is there already), for an operator to look at; lavender never deletes it.
pub fn set_aside(dir: &Path, reason: String) -> Result<SetAside> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let run = dir.parent().unwrap_or(Path::new("."));
    let damaged = run.join(DAMAGED_DIR);
    std::fs::create_dir_all(&damaged).ctx("create", &damaged)?;
    let to = aside_path(dir);
    std::fs::rename(dir, &to).ctx("move aside", dir)?;
    crate::atomic::sync_dir(run)?;
    Ok(SetAside {
        name,
        moved_to: to,
        reason,
        moved: true,
    })
}

/// Where [`set_aside`] would move `dir`: `<run>/damaged/<name>`, or `<name>.N` when
/// that is taken.
fn aside_path(dir: &Path) -> PathBuf {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let damaged = dir.parent().unwrap_or(Path::new(".")).join(DAMAGED_DIR);
    let mut to = damaged.join(&name);
    let mut n = 1;
    while to.exists() {
        n += 1;
        to = damaged.join(format!("{name}.{n}"));
    }
    to
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::contents::HashAlgorithm;
    use crate::checkpoint::listing::tests::{save, set_mtime};

    /// A run of three checkpoints with manifests, oldest first.
    fn run() -> (tempfile::TempDir, PathBuf, Vec<PathBuf>) {
        let root = tempfile::tempdir().unwrap();
        let run = root.path().join("run-2026-01-01_00-00-00");
        let ckpts: Vec<PathBuf> = (1..=3)
            .map(|c| {
                let p = save(&run, "pretrain", c, None);
                let m = contents::build_from_disk(&p, HashAlgorithm::Blake3).unwrap();
                contents::write(&p, &m).unwrap();
                set_mtime(&p, 1_000 * c as u64);
                p
            })
            .collect();
        (root, run, ckpts)
    }

    /// The walk over `run`'s own checkpoints, with the real check.
    fn walk(run: &Path, on_damage: OnDamage) -> Resolved {
        let candidates = Candidates::Run {
            run_dir: run.to_path_buf(),
            then: None,
        };
        resolve(&candidates, check, on_damage).unwrap()
    }

    fn flip(ckpt: &Path) {
        let model = ckpt.join("model.safetensors");
        let mut bytes = std::fs::read(&model).unwrap();
        bytes[0] ^= 1;
        std::fs::write(&model, bytes).unwrap();
    }

    #[test]
    fn the_newest_two_damaged_are_set_aside_and_the_oldest_taken() {
        let (_root, run, ckpts) = run();
        flip(&ckpts[2]);
        std::fs::write(ckpts[1].join("model.safetensors"), b"w").unwrap();
        let r = walk(&run, OnDamage::SetAside);
        assert_eq!(r.chosen.as_ref().unwrap().path, ckpts[0]);
        assert!(matches!(r.verdict, Some(Verdict::Verified { .. })));
        let names: Vec<&str> = r.set_aside.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["pretrain-12-00-03-0003", "pretrain-12-00-02-0002"]);
        assert!(
            r.set_aside[0].reason.contains("content hash"),
            "{:?}",
            r.set_aside
        );
        assert!(
            r.set_aside[1]
                .reason
                .contains("1 bytes, the manifest says 7"),
            "{:?}",
            r.set_aside
        );
        assert!(
            run.join("damaged/pretrain-12-00-03-0003/model.safetensors")
                .is_file()
        );
        assert!(!ckpts[2].exists());
        assert_eq!(listing::list_run_checkpoints(&run).unwrap().len(), 1);
    }

    #[test]
    fn without_a_manifest_it_is_taken_unverified_and_when_all_are_damaged_none_is() {
        let (_root, run, ckpts) = run();
        std::fs::remove_file(ckpts[2].join(contents::FILE)).unwrap();
        let cands = Candidates::Run {
            run_dir: run.clone(),
            then: None,
        };
        let r = resolve(&cands, check, OnDamage::SetAside).unwrap();
        assert_eq!(r.chosen.unwrap().path, ckpts[2]);
        assert_eq!(r.verdict, Some(Verdict::Unverified));

        for c in &ckpts {
            std::fs::remove_file(c.join("model.safetensors")).unwrap();
            let m = contents::ContentManifest::new(
                HashAlgorithm::Blake3,
                vec![contents::FileEntry {
                    path: "model.safetensors".into(),
                    size: 7,
                    hash: "00".into(),
                }],
            );
            contents::write(c, &m).unwrap();
        }
        let r = resolve(&cands, check, OnDamage::SetAside).unwrap();
        assert!(r.chosen.is_none());
        assert_eq!((r.tried, r.set_aside.len()), (3, 3));
        assert!(r.set_aside[0].reason.contains("model.safetensors: missing"));
    }

    #[test]
    fn up_to_a_target_walks_back_from_it_and_never_forward() {
        let (root, run, ckpts) = run();
        flip(&ckpts[1]);
        let r = resolve(
            &Candidates::UpTo {
                target: ckpts[1].clone(),
                root: root.path().to_path_buf(),
                within_run: true,
            },
            check,
            OnDamage::SetAside,
        )
        .unwrap();
        assert_eq!(r.chosen.unwrap().path, ckpts[0]);
        // A second set-aside of the same name gets a number.
        let again = save(&run, "pretrain", 2, None);
        let s = set_aside(&again, "x".into()).unwrap();
        assert_eq!(
            s.moved_to,
            run.join("damaged").join("pretrain-12-00-02-0002.2")
        );
    }

    #[test]
    fn a_run_without_checkpoints_falls_back_to_where_it_started() {
        let (root, _run, ckpts) = run();
        let fresh = root.path().join("run-2026-01-02_00-00-00");
        std::fs::create_dir_all(&fresh).unwrap();
        let r = resolve(
            &Candidates::Run {
                run_dir: fresh,
                then: Some(ckpts[2].clone()),
            },
            check,
            OnDamage::SetAside,
        )
        .unwrap();
        assert_eq!(r.chosen.unwrap().path, ckpts[2]);
        let r = resolve(&Candidates::None, check, OnDamage::SetAside).unwrap();
        assert_eq!((r.tried, r.chosen.is_none()), (0, true));
    }

    #[test]
    fn left_in_place_the_damaged_stay_where_they_are_and_the_walk_goes_on() {
        let (_root, run, ckpts) = run();
        flip(&ckpts[2]);
        let before: Vec<_> = std::fs::read_dir(&run)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        let r = walk(&run, OnDamage::Leave);
        assert_eq!(r.chosen.unwrap().path, ckpts[1]);
        let s = &r.set_aside[0];
        assert!(!s.moved && ckpts[2].is_dir() && !run.join(DAMAGED_DIR).exists());
        assert_eq!(
            s.moved_to,
            run.join("damaged").join("pretrain-12-00-03-0003")
        );
        assert!(
            s.to_string()
                .contains("left in place (would have set it aside"),
            "{s}"
        );
        let after: Vec<_> = std::fs::read_dir(&run)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(before, after);
    }

    /// A file that cannot be read at all (here a symbolic link loop: ELOOP, as EIO or
    /// ESTALE would be on a failing disk or NFS) is a storage error, not damage: the
    /// walk stops there, sets nothing aside and takes nothing older.
    #[test]
    fn a_read_error_stops_the_walk_and_sets_nothing_aside() {
        let (_root, run, ckpts) = run();
        let model = ckpts[2].join("model.safetensors");
        std::fs::remove_file(&model).unwrap();
        std::os::unix::fs::symlink(&model, &model).unwrap();
        let r = walk(&run, OnDamage::SetAside);
        assert!(r.chosen.is_none() && r.set_aside.is_empty(), "{r:?}");
        let e = r.storage_error.unwrap();
        assert!(
            e.starts_with("checkpoint pretrain-12-00-03-0003: model.safetensors: unreadable: "),
            "{e}"
        );
        assert!(!run.join(DAMAGED_DIR).exists());
        assert!(ckpts.iter().all(|c| c.is_dir()));
    }
}
