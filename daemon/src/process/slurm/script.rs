//! The batch script of a step. It runs the worker under `srun` and handles the
//! time-limit notice itself, so a job resumes even while no daemon watches:
//! Slurm sends SIGTERM to the batch shell `grace_s` before the limit
//! (`--signal=B:TERM@grace_s`); the script passes it on to the worker's step, waits
//! for the save, then puts the job back in the queue (`scontrol requeue`). When the
//! job starts again (`SLURM_RESTART_COUNT` > 0) the train step resumes from the run's
//! newest complete checkpoint, if there is one.

use crate::process::SpawnSpec;

/// Everything the script needs to know.
pub struct ScriptSpec<'a> {
    /// The step, its arguments, environment and first `--resume`; a requeued train
    /// step resumes from its run directory instead.
    pub launch: &'a SpawnSpec,
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
        spec.launch.step
    ));
    if !spec.unset.is_empty() {
        s.push_str(&format!("unset {}\n", spec.unset.join(" ")));
    }
    for (k, v) in &spec.launch.env {
        s.push_str(&format!("export {k}={}\n", quote(v)));
    }
    s.push_str(&format!(
        "argv=({})\n",
        words(&spec.launch.argv_without_resume())
    ));
    s.push_str(&format!("resume=({})\n", words(&spec.launch.resume_args())));
    s.push_str("restart=${SLURM_RESTART_COUNT:-0}\n");
    if let Some(run_dir) = spec
        .launch
        .run_dir
        .as_ref()
        .filter(|_| spec.launch.trains())
    {
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
        let text = render(&ScriptSpec {
            launch: &crate::process::spec::tests::train_spec("worker"),
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
