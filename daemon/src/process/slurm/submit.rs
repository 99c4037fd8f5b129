//! Submitting a step: write its batch script, call `sbatch` with the options of
//! `launch.slurm`, remember the job id.

use std::io::Write as _;
use std::path::Path;

use anyhow::{Context, Result, bail};
use lavender::config::{PipelineStep, SlurmConfig};

use super::SlurmJob;
use super::script::{self, ScriptSpec};
use crate::process::SpawnSpec;
use crate::process::spawn::SCRUBBED_ENV;

/// The sbatch arguments for a step (without the script path).
pub fn sbatch_args(
    cfg: &SlurmConfig,
    step: PipelineStep,
    log_file: &Path,
    tasks: u32,
    nodes: u32,
) -> Vec<String> {
    let mut args = vec![
        "--parsable".to_string(),
        format!("--job-name=lavender-{step}"),
        format!("--output={}", log_file.display()),
        "--open-mode=append".into(),
        format!("--ntasks={tasks}"),
        format!("--nodes={nodes}"),
        format!("--signal=B:TERM@{}", cfg.grace_s),
        if cfg.requeue {
            "--requeue"
        } else {
            "--no-requeue"
        }
        .into(),
    ];
    let opt = |name: &str, v: &Option<String>| v.as_ref().map(|v| format!("--{name}={v}"));
    args.extend(opt("partition", &cfg.partition));
    args.extend(opt("account", &cfg.account));
    args.extend(opt("gres", &cfg.gres));
    args.extend(opt("mem", &cfg.mem));
    args.extend(opt("time", &cfg.time_limit));
    args.extend(cfg.cpus_per_task.map(|c| format!("--cpus-per-task={c}")));
    args.extend(cfg.extra_args.iter().cloned());
    args
}

pub fn submit(cfg: &SlurmConfig, jobs_dir: &Path, spec: &SpawnSpec) -> Result<SlurmJob> {
    if spec.command.is_empty() {
        bail!("the worker command is empty (config key worker.command)");
    }
    let step = spec.step;
    // Only training runs as many tasks; a data step run twice at once would race itself.
    let (tasks, nodes) = if spec.trains() {
        (cfg.ntasks, cfg.nodes)
    } else {
        (1, 1)
    };
    let text = script::render(&ScriptSpec {
        launch: spec,
        unset: SCRUBBED_ENV,
        ntasks: tasks,
        nodes,
        requeue: cfg.requeue,
    });
    std::fs::create_dir_all(jobs_dir).with_context(|| format!("create {}", jobs_dir.display()))?;
    let stamp = lavender::time::now_utc().format("%Y%m%d_%H%M%S%.3f");
    let script_path = jobs_dir.join(format!("{step}-{stamp}.sbatch"));
    lavender::atomic::write_file(&script_path, text.as_bytes())
        .with_context(|| format!("write batch script {}", script_path.display()))?;
    if let Some(dir) = spec.log_file.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("create log directory {}", dir.display()))?;
    }
    let mut args = sbatch_args(cfg, step, &spec.log_file, tasks, nodes);
    args.push(script_path.display().to_string());
    let out = super::run("sbatch", &args).with_context(|| {
        format!(
            "submit step {step} to Slurm (config section launch.slurm; batch script {})",
            script_path.display()
        )
    })?;
    let job_id = out
        .lines()
        .rev()
        .find_map(|l| {
            l.split(';')
                .next()
                .map(str::trim)
                .filter(|id| !id.is_empty())
        })
        .filter(|id| id.chars().all(|c| c.is_ascii_digit() || c == '_'))
        .with_context(|| format!("sbatch printed no job id: {out:?}"))?
        .to_string();
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&spec.log_file)
        .with_context(|| format!("open worker log {}", spec.log_file.display()))?;
    let _ = writeln!(
        log,
        "=== {} lavenderd: step {step} submitted as Slurm job {job_id} (batch script {})",
        lavender::time::rfc3339_z(lavender::time::now_utc()),
        script_path.display()
    );
    Ok(SlurmJob {
        job_id,
        state: Some("PENDING".into()),
        seen: Box::new(super::JobSeen {
            run_dir: spec.run_dir.clone().filter(|_| spec.trains()),
            ..super::JobSeen::default()
        }),
        ..SlurmJob::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sbatch_args_follow_the_config() {
        let cfg = SlurmConfig {
            partition: Some("gpu".into()),
            gres: Some("gpu:4".into()),
            time_limit: Some("4:00:00".into()),
            cpus_per_task: Some(8),
            extra_args: vec!["--qos=high".into()],
            grace_s: 300,
            ..SlurmConfig::default()
        };
        let args = sbatch_args(&cfg, PipelineStep::Train, Path::new("/l/p.log"), 4, 1).join(" ");
        for part in [
            "--partition=gpu",
            "--gres=gpu:4",
            "--time=4:00:00",
            "--cpus-per-task=8",
            "--qos=high",
            "--signal=B:TERM@300",
            "--requeue",
            "--ntasks=4",
            "--output=/l/p.log",
        ] {
            assert!(args.contains(part), "{part} in {args}");
        }
        assert!(!args.contains("--account"), "{args}");
    }
}
