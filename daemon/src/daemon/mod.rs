//! `lavenderd serve`: one daemon per state directory. It owns the pipeline actor,
//! the status cache and the API, and reacts to signals: SIGTERM/SIGINT stop the
//! pipeline gracefully and exit 0; SIGHUP reloads the config without touching the
//! worker; SIGUSR2 (or `POST /daemon/restart`) restarts the daemon alone, leaving
//! the worker training (`reexec`). A SIGKILLed daemon leaves the worker running for
//! the next one to adopt.

pub mod lock;
pub mod progress;
pub mod reexec;
pub mod sd_notify;

use std::net::SocketAddr;

use anyhow::{Context, Result};
use lavender::status::PipelineState;
use tokio::signal::unix::{SignalKind, signal};

use crate::feed::{self, Feed};
use crate::notify::{EventFollower, Notifier};
use crate::pipeline::{self, StartRequest, alert};
use crate::server::{self, AppState};
use crate::settings::{GlobalArgs, Settings};
use crate::status::{self, StatusSettings};
use crate::web::WebState;

pub struct ServeOptions {
    pub args: GlobalArgs,
    pub settings: Settings,
    /// Overrides `supervisor.listen`.
    pub listen: Option<SocketAddr>,
    pub allow_non_loopback: bool,
    /// Start the pipeline right away (`start --foreground`).
    pub start: Option<StartRequest>,
    /// Foreground mode: a live progress line, and exit when the pipeline ends.
    pub foreground: bool,
    /// The status refresher's timings (`serve`'s hidden options).
    pub status: status::RefreshOptions,
}

/// What the daemon ended with, for the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DaemonExit {
    Signalled,
    PipelineEnded(PipelineState),
}

/// Why the serving loop ended.
enum LoopEnd {
    Exit(DaemonExit),
    /// Restart the daemon alone.
    Restart,
}

/// How long a restart alone waits for open requests to finish before it re-executes.
const RESTART_DRAIN: std::time::Duration = std::time::Duration::from_secs(5);

pub async fn run(opts: ServeOptions) -> Result<DaemonExit> {
    let settings = opts.settings;
    let layout = settings.layout.clone();
    layout
        .ensure_state_dir()
        .with_context(|| format!("create state directory {}", layout.state_dir.display()))?;
    let _lock = lock::acquire(&layout)?;
    reexec::started_at();
    // A daemon in a terminal (`start --foreground`) ends with its pipeline; only a
    // serving daemon restarts alone.
    let reexec = if opts.foreground {
        None
    } else {
        Some(reexec::Reexec::capture()?)
    };
    let (restart_tx, mut restart_rx) = tokio::sync::mpsc::channel(1);
    let token = server::token::load_or_create(&layout.token())?;

    let sup = &settings.config.supervisor;
    let listen = opts.listen.unwrap_or(sup.listen);
    let tcp = server::bind_tcp(listen, opts.allow_non_loopback || sup.allow_non_loopback).await?;
    let unix = server::bind_unix(&layout.socket())?;
    let addr = tcp.local_addr().context("read the bound address")?;
    // Lets clients (and tests using port 0) find the TCP address.
    lavender::atomic::write_file(
        &layout.state_dir.join("lavenderd.addr"),
        addr.to_string().as_bytes(),
    )?;

    let feed = Feed::new(feed::bus::DEFAULT_CAPACITY);
    let notify_cfg = &settings.config.notify;
    let notifier = Notifier::start(notify_cfg, &layout.state_dir);
    let alerts = feed::alerts::tee(
        feed.clone(),
        alert::spawn_sink(Some(notifier.clone()), notify_cfg.log_lines),
    );
    let pipeline = pipeline::actor::spawn(layout.clone(), settings.config.clone(), alerts.clone())?;
    let retention = pipeline::retention::spawn(
        layout.clone(),
        pipeline.subscribe(),
        pipeline::retention::RetentionSettings::from_config(&settings.config),
    );
    let follower = EventFollower::new(
        notify_cfg.milestones.then_some(&notifier),
        &layout.state_dir,
        &layout.data_root,
    );
    // The refresher, the watchdog and the feed's publisher, on their own thread.
    let status_tasks =
        status::tasks::StatusTasks::start().context("start the thread of the status tasks")?;
    let (cache, web) = status_tasks.enter(|| {
        let cache = status::refresher::spawn(
            layout.clone(),
            &pipeline,
            StatusSettings::from_config(&settings.config),
            status::watch::WatchOptions {
                kind: sup.watcher,
                poll_interval: std::time::Duration::from_millis(sup.poll_interval_ms),
                simulate_exhausted: false,
            },
            opts.status.clone(),
            Some(notifier.clone()),
        );
        status::watchdog::spawn(
            layout.clone(),
            cache.subscribe_refreshes(),
            alerts,
            pipeline.clone(),
        );
        let web = WebState::start(
            feed,
            cache.clone(),
            pipeline.clone(),
            layout.clone(),
            follower,
        );
        (cache, web)
    });
    let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
    let app = AppState {
        pipeline: pipeline.clone(),
        cache: cache.clone(),
        layout: layout.clone(),
        web: web.with_notifications(notifier.clone()),
        restart: reexec.is_some().then_some(restart_tx),
    };
    let view = opts
        .foreground
        .then(|| crate::cli::foreground::ForegroundView::start(app.web.feed.clone()));
    let server_task = tokio::spawn(server::serve(app, tcp, unix, token, shutdown_rx));
    tracing::info!(
        "lavenderd {} (pid {}) serving http://{addr} and {} for data root {}",
        env!("CARGO_PKG_VERSION"),
        std::process::id(),
        layout.socket().display(),
        layout.data_root.display()
    );
    let mut service = sd_notify::ServiceNotifier::from_env();
    service.ready(progress::line(&cache.status()));

    if let Some(req) = opts.start {
        match pipeline.start(req).await {
            Ok(reply) => tracing::info!(
                "pipeline started: chunk {}, scale {}, step {}",
                reply.chunk,
                reply.scale,
                reply.active_step.map_or("-", |s| s.as_str())
            ),
            Err(e) => {
                let _ = shutdown_tx.send(true);
                let _ = server_task.await;
                return Err(anyhow::anyhow!("cannot start the pipeline: {e}"));
            }
        }
    }

    let mut term = signal(SignalKind::terminate()).context("install SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("install SIGINT handler")?;
    let mut hup = signal(SignalKind::hangup()).context("install SIGHUP handler")?;
    let mut usr2 = signal(SignalKind::user_defined2()).context("install SIGUSR2 handler")?;
    let mut records = pipeline.subscribe();
    let mut progress = tokio::time::interval(std::time::Duration::from_millis(250));
    let end = loop {
        tokio::select! {
            _ = term.recv() => break LoopEnd::Exit(DaemonExit::Signalled),
            _ = int.recv() => break LoopEnd::Exit(DaemonExit::Signalled),
            _ = usr2.recv() => match (&reexec, pipeline.record().state) {
                (None, _) => tracing::warn!("SIGUSR2: a daemon in a terminal (start --foreground) does not restart alone"),
                (Some(_), PipelineState::Stopping) => tracing::warn!("SIGUSR2: a stop is under way; restart the daemon once it has finished"),
                (Some(_), _) => break LoopEnd::Restart,
            },
            Some(()) = restart_rx.recv() => break LoopEnd::Restart,
            _ = hup.recv() => match Settings::load(&opts.args) {
                Ok(new) => {
                    cache.set_settings(StatusSettings::from_config(&new.config));
                    retention.set(pipeline::retention::RetentionSettings::from_config(&new.config));
                    pipeline.reload(new.config).await;
                }
                Err(e) => tracing::error!("SIGHUP: config not reloaded: {e:#}"),
            },
            _ = progress.tick(), if view.is_some() => {
                if let Some(view) = &view {
                    view.update(&cache.status());
                }
            }
            tick = service.next() => service.on_tick(tick, &pipeline, || progress::line(&cache.status())).await,
            changed = records.changed(), if opts.foreground => {
                let record = records.borrow_and_update().clone();
                let state = record.state;
                if changed.is_err() || matches!(state, PipelineState::Finished | PipelineState::Failed | PipelineState::Stopped) {
                    if let Some(view) = &view {
                        cache.caught_up(&record).await;
                        view.finish(&cache.status()).await;
                    }
                    break LoopEnd::Exit(DaemonExit::PipelineEnded(state));
                }
            }
        }
    };
    let exit = match (end, &reexec) {
        (LoopEnd::Exit(exit), _) => exit,
        (LoopEnd::Restart, None) => DaemonExit::Signalled,
        (LoopEnd::Restart, Some(reexec)) => {
            // The worker is left alone: no STOPPING=1, no stop.
            tracing::info!("restarting the daemon alone; the worker keeps training");
            service.reloading("restarting the daemon; the worker keeps training");
            let _ = shutdown_tx.send(true);
            if tokio::time::timeout(RESTART_DRAIN, server_task)
                .await
                .is_err()
            {
                tracing::warn!(
                    "requests still open after {RESTART_DRAIN:?}; restarting all the same"
                );
            }
            pipeline.detach().await;
            let _ = std::fs::remove_file(layout.socket());
            let _ = std::fs::remove_file(layout.state_dir.join("lavenderd.addr"));
            return Err(reexec.exec());
        }
    };
    service.stopping("shutting down: stopping the pipeline gracefully");
    if exit == DaemonExit::Signalled {
        tracing::info!("shutting down: stopping the pipeline gracefully");
        let summary = || progress::line(&cache.status());
        // In a terminal, Ctrl-C is the operator's stop; a service's SIGTERM (a
        // restart, a shutdown) interrupts the pipeline, which the next start resumes.
        let cause = if opts.foreground {
            pipeline::StopCause::Operator
        } else {
            pipeline::StopCause::DaemonExit
        };
        let said = match service
            .during(&pipeline, summary, pipeline.stop_for(cause, None))
            .await
        {
            Ok(report) if report.was_running => {
                tracing::info!("{}", report.message);
                Some(report.message)
            }
            Ok(_) => None,
            Err(e) => {
                tracing::error!("{e:#}");
                None
            }
        };
        if let Some(view) = &view {
            cache.caught_up(&pipeline.record()).await;
            view.finish(&cache.status()).await;
            // Ctrl-C in the terminal: say there what the stop saved.
            if let Some(said) = said {
                eprintln!("{said}");
            }
        }
    }
    let _ = shutdown_tx.send(true);
    match server_task.await {
        Ok(Err(e)) => tracing::error!("{e:#}"),
        Err(e) => tracing::error!("server task: {e}"),
        Ok(Ok(())) => {}
    }
    let _ = std::fs::remove_file(layout.socket());
    let _ = std::fs::remove_file(layout.state_dir.join("lavenderd.addr"));
    Ok(exit)
}
