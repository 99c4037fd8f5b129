//! `lavenderd prune --keep-runs N [--yes] [--remote]`: delete old run directories,
//! never the active one. It names what it would delete and asks first (`--yes`
//! without a terminal); it deletes exactly what it named. When a daemon runs, it asks
//! the daemon (`POST /runs/prune`), which knows the run it is starting and holds a
//! start back while it deletes; without one it works on the files itself. With
//! `--remote`, the remote copies (`replicate:`) of the runs it deleted go too, from
//! here: network deletes never hold the daemon's actor (nor a start) back.

use std::process::ExitCode;

use anyhow::{Context, Result};
use lavender::pipeline_file::PipelineRecord;
use lavender_api::PruneRequest;
use lavender_api::endpoint::Prune;

use crate::client::Client;
use crate::confirm::confirm;
use crate::old_runs::Delete;
use crate::settings::Settings;

pub async fn run(
    settings: &Settings,
    keep_runs: usize,
    yes: bool,
    remote: bool,
) -> Result<ExitCode> {
    let layout = &settings.layout;
    // Opened first: a missing target or credential stops before anything is deleted.
    let target = if remote {
        Some(super::pull::open(settings).context("prune --remote")?)
    } else {
        None
    };
    let root = layout.checkpoints_root();
    let client = Client::new(&layout.socket());
    let daemon = client.is_up().await;
    let active = if daemon {
        None
    } else {
        let record = PipelineRecord::load(layout)?;
        let busy = record.is_active() || record.worker().is_some();
        record.run_dir.filter(|_| busy)
    };
    let ask = |delete: Option<Vec<String>>| {
        let req = PruneRequest { keep_runs, delete };
        let (client, root, active) = (&client, &root, active.clone());
        async move {
            if daemon {
                return client.call::<Prune>(&req).await?.ok();
            }
            let delete = req.delete.map_or(Delete::Nothing, Delete::Named);
            let root2 = root.clone();
            tokio::task::spawn_blocking(move || {
                crate::old_runs::prune(&root2, keep_runs, active.as_deref(), &delete)
            })
            .await?
            .with_context(|| format!("prune runs in {}", root.display()))
        }
    };
    let plan = ask(None).await?;
    if plan.planned.is_empty() {
        println!(
            "nothing to prune: {} holds at most {keep_runs} run(s) besides the active one",
            root.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let and_remote = target.as_ref().map_or(String::new(), |t| {
        format!(" and their copies in {}", t.target())
    });
    confirm(
        &format!(
            "delete {} run(s) under {} ({}, {}){and_remote}",
            plan.planned.len(),
            root.display(),
            plan.planned.join(", "),
            mib(plan.bytes)
        ),
        yes,
    )?;
    let done = ask(Some(plan.planned)).await?;
    for name in &done.removed {
        println!("removed {}", root.join(name).display());
    }
    for name in &done.kept {
        println!("kept {name}: a start needs it now");
    }
    println!(
        "pruned {} run(s), freed {}",
        done.removed.len(),
        mib(done.bytes_freed)
    );
    match &target {
        Some(target) => {
            for name in &done.removed {
                let gone = target.delete_run(name).await.with_context(|| {
                    format!(
                        "delete the remote copies of {name} in {} (the local run is already gone: delete {}/{name}/ on the server by hand)",
                        target.target(),
                        target.target()
                    )
                })?;
                println!(
                    "removed {} remote checkpoint(s) of {name} from {}",
                    gone.len(),
                    target.target()
                );
            }
        }
        None if settings.config.replicate.url.is_some() && !done.removed.is_empty() => {
            println!("their remote copies are kept (prune --remote deletes them too)");
        }
        None => {}
    }
    Ok(ExitCode::SUCCESS)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}
