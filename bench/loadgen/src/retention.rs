//! `loadgen retention`: one retention pass (`lavender::checkpoint::enforce_retention`,
//! what the worker runs after every save) over a run directory holding
//! `--checkpoints` complete checkpoints, keeping `--keep`; side by side with the
//! shell idiom `ls -1dt */ | tail -n +K | xargs rm -rf` on an identical directory,
//! and with listing the checkpoints alone. The fixtures are built fresh for every
//! repetition (not timed) in `--dir` (default: the system temp dir) and removed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::args::Args;
use crate::stats::{Latencies, ms};

/// `count` complete checkpoints (`model.safetensors` of `bytes` bytes and a
/// `trainer_state.json`), named as the worker names them.
fn make_run(run: &Path, count: u32, bytes: usize) -> Result<(), String> {
    std::fs::create_dir_all(run).map_err(|e| format!("create {}: {e}", run.display()))?;
    let weights = vec![0u8; bytes];
    for c in 1..=count {
        let secs = c * 7;
        let name = format!(
            "pretrain-{:02}-{:02}-{:02}-{c:04}",
            (secs / 3600) % 24,
            (secs / 60) % 60,
            secs % 60
        );
        let dir = run.join(&name);
        let mut state = lavender::trainer_state::TrainerState::new("pretrain", u64::from(c) * 100);
        state.total_steps = u64::from(count) * 100;
        state.saved_at = lavender::time::rfc3339_z(lavender::time::now_utc());
        let write = || -> std::io::Result<()> {
            std::fs::create_dir(&dir)?;
            std::fs::write(dir.join("model.safetensors"), &weights)?;
            std::fs::write(
                dir.join("trainer_state.json"),
                serde_json::to_vec(&state).unwrap_or_default(),
            )
        };
        write().map_err(|e| format!("create checkpoint {}: {e}", dir.display()))?;
    }
    Ok(())
}

fn remaining(run: &Path) -> usize {
    std::fs::read_dir(run).map(|d| d.count()).unwrap_or(0)
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t0 = Instant::now();
    let out = f();
    (out, t0.elapsed())
}

fn summary(samples: &[Duration]) -> serde_json::Value {
    let lat = Latencies::new(samples.iter().map(|d| d.as_nanos() as u64).collect());
    json!({"median_ms": ms(lat.quantile(0.5)), "max_ms": ms(lat.max()),
           "all_ms": samples.iter().map(|d| ms(*d)).collect::<Vec<_>>()})
}

pub fn run(args: &Args) -> Result<(), String> {
    let count: u32 = args.get("checkpoints", 1000)?;
    let keep: usize = args.get("keep", 3)?;
    let repeat: usize = args.get("repeat", 5)?;
    let bytes: usize = args.get("bytes", 4096)?;
    let base = PathBuf::from(args.get("dir", std::env::temp_dir().display().to_string())?);
    if (count as usize) <= keep {
        return Err("--checkpoints must exceed --keep".into());
    }
    let scratch = base.join(format!("lavender-retention-{}", std::process::id()));
    let (mut listing, mut lavender_pass, mut shell_pass) = (Vec::new(), Vec::new(), Vec::new());
    let result = (|| -> Result<(), String> {
        for i in 0..repeat {
            let run = scratch.join(format!("lavender-{i}"));
            make_run(&run, count, bytes)?;
            let (listed, t) = timed(|| lavender::checkpoint::list_run_checkpoints(&run));
            let listed = listed.map_err(|e| e.to_string())?;
            if listed.len() != count as usize {
                return Err(format!("listed {} of {count} checkpoints", listed.len()));
            }
            listing.push(t);
            let (dropped, t) = timed(|| lavender::checkpoint::enforce_retention(&run, keep));
            let dropped = dropped.map_err(|e| e.to_string())?;
            if dropped.len() != count as usize - keep || remaining(&run) != keep {
                return Err(format!(
                    "retention dropped {} and left {}; expected {} and {keep}",
                    dropped.len(),
                    remaining(&run),
                    count as usize - keep
                ));
            }
            lavender_pass.push(t);

            let run = scratch.join(format!("shell-{i}"));
            make_run(&run, count, bytes)?;
            let script = format!(
                "cd \"$1\" && ls -1dt -- */ | tail -n +{} | xargs rm -rf --",
                keep + 1
            );
            let (status, t) = timed(|| {
                Command::new("sh")
                    .args(["-c", &script, "sh"])
                    .arg(&run)
                    .status()
            });
            let status = status.map_err(|e| format!("run sh: {e}"))?;
            if !status.success() || remaining(&run) != keep {
                return Err(format!(
                    "the shell pass failed ({status}) or left {}",
                    remaining(&run)
                ));
            }
            shell_pass.push(t);
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    result?;
    let report = json!({
        "checkpoints": count,
        "keep": keep,
        "checkpoint_bytes": bytes,
        "list_checkpoints": summary(&listing),
        "lavender_retention_pass": summary(&lavender_pass),
        "shell_ls_xargs_rm": summary(&shell_pass),
    });
    println!("{report}");
    Ok(())
}
