//! The batch script of a step. It runs the worker under `srun` and handles the
//! time-limit notice itself, so a job resumes even while no daemon watches:
//! Slurm sends SIGTERM to the batch shell `grace_s` before the limit
//! (`--signal=B:TERM@grace_s`); the script passes it on to the worker's step, waits
//! for the save, then puts the job back in the queue (`scontrol requeue`). When the
//! job starts again (`SLURM_RESTART_COUNT` > 0) the train step resumes from the run's
//! newest complete checkpoint, if there is one.

use std::collections::BTreeMap;
use std::path::Path;

/// Everything the script needs to know.
pub struct ScriptSpec<'a> {
    pub step: &'a str,
    /// The worker's argv without `--resume`.
    pub argv: &'a [String],
    /// `--resume <path>` of the first start, if any.
    pub resume: Option<&'a str>,
    /// The train step's run directory: where a requeued job resumes from.
    pub run_dir: Option<&'a Path>,
    pub env: &'a BTreeMap<String, String>,
    /// Variables of the daemon's service manager the worker must not see.
    pub unset: &'a [&'a str],
    pub ntasks: u32,
    pub nodes: u32,
    pub requeue: bool,
}

/// `s` as one single-quoted shell word.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn words(items: &[String]) -> String {
    items.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" ")
}

pub fn render(spec: &ScriptSpec) -> String {
    let mut s = String::new();
    s.push_str("#!/bin/bash\n");
    s.push_str(&format!(
        "# lavenderd: step {} as a Slurm batch job (docs/SLURM.md)\n",
        spec.step
    ));
    if !spec.unset.is_empty() {
        s.push_str(&format!("unset {}\n", spec.unset.join(" ")));
    }
    for (k, v) in spec.env {
        s.push_str(&format!("export {k}={}\n", quote(v)));
    }
    s.push_str(&format!("argv=({})\n", words(spec.argv)));
    let resume: Vec<String> = spec
        .resume
        .map(|r| vec!["--resume".to_string(), r.to_string()])
        .unwrap_or_default();
    s.push_str(&format!("resume=({})\n", words(&resume)));
    s.push_str("restart=${SLURM_RESTART_COUNT:-0}\n");
    if let Some(run_dir) = spec.run_dir {
        let dir = quote(&run_dir.display().to_string());
        s.push_str(&format!(
            "if [ \"$restart\" -gt 0 ] && compgen -G {dir}'/*/trainer_state.json' >/dev/null; then\n  resume=(--resume {dir})\nfi\n"
        ));
    }
    s.push_str(
        r#"say() { echo "=== $(date -u +%Y-%m-%dT%H:%M:%SZ) lavenderd: Slurm job $SLURM_JOB_ID: $*"; }
say "start $((restart + 1)) on $(hostname): ${argv[*]} ${resume[*]}"
requeue=0
on_term() {
  [ "$requeue" = 1 ] && return
  say "SIGTERM to the batch shell (time limit near, or preempted): the worker saves"
  requeue=__REQUEUE__
  scancel --signal=TERM "$SLURM_JOB_ID"
}
trap on_term TERM
srun --ntasks=__NTASKS__ --nodes=__NODES__ --kill-on-bad-exit=1 "${argv[@]}" "${resume[@]}" &
worker=$!
while :; do
  wait "$worker"
  rc=$?
  kill -0 "$worker" 2>/dev/null || break
done
if [ "$requeue" = 1 ]; then
  say "the worker exited ($rc) after its save; back to the queue, it resumes from the latest checkpoint"
  if scontrol requeue "$SLURM_JOB_ID"; then
    sleep 600 &
    wait $!
  fi
fi
exit "$rc"
"#
        .replace("__REQUEUE__", if spec.requeue { "1" } else { "2" })
        .replace("__NTASKS__", &spec.ntasks.to_string())
        .replace("__NODES__", &spec.nodes.to_string())
        .as_str(),
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_quotes_and_spaces() {
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), "'it'\\''s'");
    }

    #[test]
    fn script_is_valid_bash_and_resumes_a_requeued_train_step() {
        let env = BTreeMap::from([("A".to_string(), "x y".to_string())]);
        let argv = vec!["worker".to_string(), "train".to_string()];
        let text = render(&ScriptSpec {
            step: "train",
            argv: &argv,
            resume: Some("/ck/a"),
            run_dir: Some(Path::new("/runs/r 1")),
            env: &env,
            unset: &["NOTIFY_SOCKET"],
            ntasks: 2,
            nodes: 1,
            requeue: true,
        });
        assert!(text.contains("export A='x y'"), "{text}");
        assert!(text.contains("resume=('--resume' '/ck/a')"), "{text}");
        assert!(text.contains("resume=(--resume '/runs/r 1')"), "{text}");
        assert!(text.contains("srun --ntasks=2 --nodes=1"), "{text}");
        let out = std::process::Command::new("bash")
            .args(["-n", "-c", &text])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
