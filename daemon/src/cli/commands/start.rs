//! `lavenderd start`: ask the daemon over its socket; start one in the background
//! (own session, log in `state/lavenderd.log`) when none answers.

use std::os::unix::process::CommandExt;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lavender_api::ConfigFileRef;
use lavender_api::endpoint::Start;

use crate::cli::{ListenArgs, PipelineFlags};
use crate::client::Client;
use crate::confirm::confirm;
use crate::settings::{GlobalArgs, Settings};
use lavender::pipeline_file::PipelineRecord;
use lavender::steps::resumable;
use lavender::steps::start::ResolvedStart;

const DAEMON_START_TIMEOUT: Duration = Duration::from_secs(15);

pub async fn run(
    settings: &Settings,
    global: &GlobalArgs,
    flags: &PipelineFlags,
    listen: &ListenArgs,
) -> Result<ExitCode> {
    let layout = &settings.layout;
    let mut req = flags.request(
        global.data_root.as_ref().map(|_| layout.data_root.clone()),
        &settings.config,
    )?;
    req.config = config_ref(settings)?;
    confirm_fresh(settings, flags)?;
    let client = Client::new(&layout.socket());
    let mut spawned = None;
    if !client.is_up().await {
        spawned = Some(spawn_daemon(settings, listen)?);
        let deadline = Instant::now() + DAEMON_START_TIMEOUT;
        while !client.is_up().await {
            if Instant::now() > deadline {
                let log = crate::logs::tail(&layout.daemon_log(), 15).unwrap_or_default();
                bail!(
                    "the background daemon did not come up within {}s; its log ({}) ends with:\n{log}",
                    DAEMON_START_TIMEOUT.as_secs(),
                    layout.daemon_log().display()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let resp = client.call::<Start>(&req).await?;
    if resp.status != 200
        && let Some(pid) = spawned
    {
        // A refused start leaves no daemon behind that it started for nothing; the
        // refusal below is said whether that stop worked or not.
        match super::daemon_stop::terminate(layout, pid, Duration::from_secs(30)).await {
            Ok(_) => eprintln!("stopped the background daemon started for this start (pid {pid})"),
            Err(e) => eprintln!(
                "could not stop the background daemon started for this start (pid {pid}): {e:#}; stop it with `lavenderd daemon stop`"
            ),
        }
    }
    match resp.status {
        200 => {
            let reply = resp.reply()?;
            if let Some(line) = &reply.nothing_to_do {
                println!("{line}");
                return Ok(ExitCode::SUCCESS);
            }
            println!(
                "pipeline {}: chunk {}, scale {}, step {}{}",
                reply.state,
                reply.chunk,
                reply.scale,
                reply.active_step.map_or("-", |s| s.as_str()),
                reply
                    .pid
                    .map(|p| format!(" (worker pid {p})"))
                    .unwrap_or_default()
            );
            if let Some(config) = &reply.config {
                println!("{config}");
            }
            for notice in &reply.notices {
                println!("notice: {notice}");
            }
            if let Some(r) = &reply.resume_from {
                println!("resuming from {}", r.display());
            }
            if let Some(log) = &reply.log_file {
                println!("log: {}", log.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        409 => {
            eprintln!("lavenderd: {}", resp.error_text());
            Ok(ExitCode::from(2))
        }
        _ => bail!("{}", resp.error_text()),
    }
}

/// The config file this command read (`--config`), for the daemon to read again and
/// run with; the hash is of the bytes read here, so an edit in between is noticed.
pub fn config_ref(settings: &Settings) -> Result<Option<ConfigFileRef>> {
    let Some(path) = &settings.config_file else {
        return Ok(None);
    };
    let bytes = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
    // Without `..` (`--config ../project/lavender.yaml`), as the daemon shows it.
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
    Ok(Some(ConfigFileRef::new(&path, &bytes)))
}

/// `--fresh` over an unfinished run walks away from its training: asked first on a
/// terminal, `--yes` without one. Nothing to walk away from, nothing to ask.
pub fn confirm_fresh(settings: &Settings, flags: &PipelineFlags) -> Result<()> {
    if !flags.fresh {
        return Ok(());
    }
    let layout = &settings.layout;
    let record = PipelineRecord::load(layout)?;
    let req = flags.request(Some(layout.data_root.clone()), &settings.config)?;
    let chunk = ResolvedStart::resolve(&req, &settings.config, &record).chunk;
    let Some(run) = resumable::find(layout, &record, chunk) else {
        return Ok(());
    };
    confirm(
        &format!(
            "start chunk {chunk} over from step 0 in a new run, leaving {} unfinished at step {} (its checkpoints stay on disk)",
            layout.to_recorded(&run.run_dir).display(),
            run.step
        ),
        flags.yes,
    )
}

/// Returns the daemon's pid.
fn spawn_daemon(settings: &Settings, listen: &ListenArgs) -> Result<u32> {
    let layout = &settings.layout;
    layout
        .ensure_state_dir()
        .with_context(|| format!("create {}", layout.state_dir.display()))?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(layout.daemon_log())
        .with_context(|| format!("open {}", layout.daemon_log().display()))?;
    // Started by the path this command was run by, so a restart alone after an
    // upgrade runs what is installed there then.
    let exe = crate::exe::invoked_exe()?;
    let mut cmd = std::process::Command::new(exe);
    // The request that follows says what to run: no resume of an interrupted pipeline first.
    cmd.args(settings.to_args()).args(["serve", "--no-resume"]);
    if let Some(addr) = listen.listen {
        cmd.args(["--listen", &addr.to_string()]);
    }
    if listen.allow_non_loopback {
        cmd.arg("--allow-non-loopback");
    }
    cmd.stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    // SAFETY: setsid is async-signal-safe; the daemon leaves our terminal's session.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()
                .map(|_| ())
                .map_err(std::io::Error::from)
        });
    }
    let child = cmd.spawn().context("start the background daemon")?;
    eprintln!(
        "started lavenderd in the background (pid {}, log {})",
        child.id(),
        layout.daemon_log().display()
    );
    Ok(child.id())
}
