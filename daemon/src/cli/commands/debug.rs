//! `lavenderd debug stacks`: the evidence of a hang, taken on demand from the worker
//! the pipeline record names (daemon or not; reading another process's stacks needs
//! ptrace permission: root, or the same user where `kernel.yama.ptrace_scope` is 0).

use std::process::ExitCode;

use anyhow::{Context, Result};
use lavender::pipeline_file::{PipelineRecord, WorkerHandle};

use crate::evidence::{self, Request};
use crate::settings::Settings;

pub async fn stacks(settings: &Settings) -> Result<ExitCode> {
    let layout = settings.layout.clone();
    let record = PipelineRecord::load(&layout)?;
    let Some(worker) = record.worker() else {
        println!("no worker runs (the pipeline is {})", record.state.kind());
        return Ok(ExitCode::from(4));
    };
    let WorkerHandle::Local(id) = &worker.handle else {
        println!(
            "the worker is {}, on another machine: take its stacks there (py-spy dump, eu-stack)",
            worker.handle
        );
        return Ok(ExitCode::from(4));
    };
    let req = Request {
        what: "stacks",
        note: format!("asked for (lavenderd debug stacks), step {}", worker.step),
        worker: id.clone(),
        run_dir: record.run_dir.clone(),
        fallback: layout.state_dir.clone(),
        log_file: record.log_file.clone(),
        tool_dirs: std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(|d| d.to_path_buf()))
            .into_iter()
            .collect(),
    };
    let bundle = tokio::task::spawn_blocking(move || evidence::capture(&req))
        .await
        .context("the capture failed")?
        .context("cannot write the evidence bundle")?;
    if bundle.index.processes.is_empty() {
        println!("the worker ({}) is no longer running", worker.handle);
    }
    println!("{}", bundle.dir.display());
    Ok(ExitCode::SUCCESS)
}
