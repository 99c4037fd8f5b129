//! `lavenderd serve`: one daemon per state directory. It owns the pipeline actor,
//! the status cache and the API, and reacts to signals: SIGTERM/SIGINT stop the
//! pipeline gracefully and exit 0; SIGHUP reloads the config without touching the
//! worker. A SIGKILLed daemon leaves the worker running for the next one to adopt.

pub mod lock;
pub mod progress;
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

pub async fn run(opts: ServeOptions) -> Result<DaemonExit> {
    let settings = opts.settings;
    let layout = settings.layout.clone();
    layout
        .ensure_state_dir()
        .with_context(|| format!("create state directory {}", layout.state_dir.display()))?;
    let _lock = lock::acquire(&layout)?;
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
        notify_cfg
            .milestones
            .then(|| EventFollower::new(&notifier, &layout.state_dir)),
    );
    let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
    let app = AppState {
        pipeline: pipeline.clone(),
        cache: cache.clone(),
        layout: layout.clone(),
        web: WebState::start(feed, cache.clone(), pipeline.clone(), layout.clone())
            .with_notifications(std::sync::Arc::new(notifier.clone())),
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
                reply.active_step.as_deref().unwrap_or("-")
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
    let mut records = pipeline.subscribe();
    let mut progress = tokio::time::interval(std::time::Duration::from_millis(250));
    let exit = loop {
        tokio::select! {
            _ = term.recv() => break DaemonExit::Signalled,
            _ = int.recv() => break DaemonExit::Signalled,
            _ = hup.recv() => match Settings::load(&opts.args) {
                Ok(new) => {
                    cache.set_settings(StatusSettings::from_config(&new.config));
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
                    break DaemonExit::PipelineEnded(state);
                }
            }
        }
    };
    service.stopping("shutting down: stopping the pipeline gracefully");
    if exit == DaemonExit::Signalled {
        tracing::info!("shutting down: stopping the pipeline gracefully");
        let summary = || progress::line(&cache.status());
        match service
            .during(&pipeline, summary, pipeline.stop(None))
            .await
        {
            Ok(report) if report.was_running => tracing::info!("{}", report.message),
            Ok(_) => {}
            Err(e) => tracing::error!("{e:#}"),
        }
        if let Some(view) = &view {
            cache.caught_up(&pipeline.record()).await;
            view.finish(&cache.status()).await;
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
