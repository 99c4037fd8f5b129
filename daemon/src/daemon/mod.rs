//! `lavenderd serve`: one daemon per state directory. It owns the pipeline actor,
//! the status cache and the API, and reacts to signals: SIGTERM/SIGINT stop the
//! pipeline gracefully and exit 0; SIGHUP reloads the config without touching the
//! worker; SIGUSR2 (or `POST /daemon/restart`) restarts the daemon alone, leaving
//! the worker training (`reexec`). A SIGKILLed daemon leaves the worker running for
//! the next one to adopt.

pub(crate) mod deadman;
pub mod foreground;
pub mod lock;
pub mod progress;
pub mod reexec;
pub mod sd_notify;

/// How the status refresher runs: part of what `serve` is given.
pub use crate::status::RefreshOptions;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use lavender::data_root::{Identity, RootGone};
use lavender::status::PipelineState;
use tokio::net::{TcpListener, UnixListener};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use lavender_api::{ReloadReport, StartRequest};

use crate::alert::AlertSender;
use crate::checkpoints::{Lifecycle, Retention, RetentionHandle};
use crate::config_source::ConfigSource;
use crate::events::EventFollower;
use crate::feed::{self, Feed};
use crate::pipeline::{self, PipelineHandle};
use crate::push::{self, Notifier};
use crate::server::{self, AppState};
use crate::settings::Settings;
use crate::status::{self, StatusCache};
use crate::web::WebState;
use foreground::ForegroundView;
use lavender::compose::StatusSettings;
use lavender::layout::Layout;
use lavender::pipeline_file::StopCause;
use sd_notify::ServiceNotifier;

pub struct ServeOptions {
    pub settings: Settings,
    /// Overrides `supervisor.listen`.
    pub listen: Option<SocketAddr>,
    pub allow_non_loopback: bool,
    /// Start the pipeline right away (`start --foreground`).
    pub start: Option<StartRequest>,
    /// Foreground mode: a live progress line, and exit when the pipeline ends.
    pub foreground: bool,
    /// The status refresher's timings (`serve`'s hidden options).
    pub status: RefreshOptions,
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
    /// The data root is not the folder the daemon started on any more.
    RootGone(RootGone),
}

/// How long a restart alone waits for open requests to finish before it re-executes.
const RESTART_DRAIN: Duration = Duration::from_secs(5);
/// How often the daemon checks that its data root is still the folder it started on.
const ROOT_CHECK: Duration = Duration::from_secs(1);
/// How often the foreground view redraws its progress bar.
const VIEW_REFRESH: Duration = Duration::from_millis(250);

pub async fn run(mut opts: ServeOptions) -> Result<DaemonExit> {
    let start = opts.start.take();
    let mut daemon = Daemon::build(opts).await?;
    if let Some(req) = start
        && let Some(line) = daemon.start_pipeline(req).await?
    {
        // Nothing to run: the pipeline stays as it was, and this daemon goes.
        println!("{line}");
        let state = daemon.pipeline.record().state.kind();
        return Ok(daemon.shut_down(DaemonExit::PipelineEnded(state)).await);
    }
    match daemon.signal_loop().await? {
        LoopEnd::Exit(exit) => Ok(daemon.shut_down(exit).await),
        LoopEnd::Restart => Err(daemon.restart_alone().await),
        LoopEnd::RootGone(gone) => Err(daemon.root_gone(gone).await),
    }
}

/// The parts a running daemon holds until it ends.
struct Daemon {
    layout: Layout,
    pipeline: PipelineHandle,
    cache: StatusCache,
    retention: RetentionHandle,
    /// The terminal's view (`start --foreground`); such a daemon ends with its pipeline.
    view: Option<ForegroundView>,
    service: ServiceNotifier,
    /// How to execute this daemon again; `None` in a terminal, where it never restarts alone.
    reexec: Option<reexec::Reexec>,
    restarts: mpsc::Receiver<()>,
    /// `POST /daemon/reload`, answered with what the reload changed.
    reloads: mpsc::Receiver<server::ReloadReply>,
    shutdown: watch::Sender<bool>,
    server: JoinHandle<Result<()>>,
    /// The data root as it was at the start (an unplugged disk ends the daemon).
    root: Identity,
    _lock: lock::InstanceLock,
}

/// The signals the serving loop answers.
struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
    usr2: Signal,
}

impl Signals {
    fn install() -> Result<Signals> {
        let one = |kind: SignalKind, name: &str| {
            signal(kind).with_context(|| format!("install the {name} handler"))
        };
        Ok(Signals {
            term: one(SignalKind::terminate(), "SIGTERM")?,
            int: one(SignalKind::interrupt(), "SIGINT")?,
            hup: one(SignalKind::hangup(), "SIGHUP")?,
            usr2: one(SignalKind::user_defined2(), "SIGUSR2")?,
        })
    }
}

impl Daemon {
    /// The composition root: the instance lock and the listeners, then each part
    /// wired to the next; the API serves once they all run.
    async fn build(opts: ServeOptions) -> Result<Daemon> {
        let ServeOptions { settings, .. } = opts;
        let layout = settings.layout.clone();
        layout
            .ensure_state_dir()
            .with_context(|| format!("create state directory {}", layout.state_dir.display()))?;
        let lock = lock::acquire(&layout)?;
        std::fs::create_dir_all(&layout.data_root)
            .with_context(|| format!("create data root {}", layout.data_root.display()))?;
        let root = Identity::capture(&layout.data_root, settings.data_root.choice.describe())
            .with_context(|| format!("read data root {}", layout.data_root.display()))?;
        tracing::info!("{}", settings.data_root.line());
        crate::logging::rotate_own_log(&layout.daemon_log(), settings.config.logging)?;
        let started_at: Arc<str> = lavender::time::rfc3339_z(lavender::time::now_utc()).into();
        // A daemon in a terminal (`start --foreground`) ends with its pipeline; only a
        // serving daemon restarts alone.
        let reexec = match opts.foreground {
            true => None,
            false => Some(reexec::Reexec::capture()?),
        };
        let (restart_tx, restarts) = mpsc::channel(1);
        let (reload_tx, reloads) = mpsc::channel(4);
        let token = server::token::load_or_create(&layout.token())?;
        let allow_non_loopback =
            opts.allow_non_loopback || settings.config.supervisor.allow_non_loopback;
        let (tcp, unix) = listen(&settings, opts.listen, allow_non_loopback).await?;
        let access =
            server::auth::TcpAccess::new(token, settings.config.api.clone(), allow_non_loopback);

        let feed = Feed::new(feed::bus::DEFAULT_CAPACITY);
        let notify_cfg = &settings.config.notify;
        let notifier = Notifier::start(notify_cfg, &layout.state_dir);
        let sink = push::spawn_sink(Some(notifier.clone()), notify_cfg.log_lines);
        let alerts = feed::alerts::tee(feed.clone(), sink);
        let pipeline = pipeline::actor::spawn(
            layout.clone(),
            settings.config.clone(),
            ConfigSource::from_process(settings.config_file.clone()),
            alerts.clone(),
        )?;
        let (pruner, retention) = Retention::new(&settings.config, layout.checkpoints_root());
        let replication = crate::replicate::Replication::from_config(
            &settings.config,
            &settings.layout.data_root,
            alerts.clone(),
        );
        let lifecycle = Lifecycle::start(pruner, replication.clone())
            .context("start the checkpoints' lifecycle")?;
        let parts = StatusParts {
            feed,
            notifier: notifier.clone(),
            alerts,
            lifecycle,
            replication,
        };
        let (cache, web) = status_tasks(&settings, &opts.status, &pipeline, parts)?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let app = AppState {
            pipeline: pipeline.clone(),
            cache: cache.clone(),
            layout: layout.clone(),
            web: web.with_notifications(notifier),
            restart: reexec.is_some().then_some(restart_tx),
            reload: reload_tx,
            started_at,
        };
        let view = opts
            .foreground
            .then(|| ForegroundView::start(app.web.feed.clone()));
        let server = tokio::spawn(server::serve(app, tcp, unix, access, shutdown_rx));
        deadman::spawn(settings.config.notify.deadman.as_ref(), pipeline.clone());
        let mut service = ServiceNotifier::from_env();
        service.ready(progress::line(&cache.status()));
        Ok(Daemon {
            layout,
            pipeline,
            cache,
            retention,
            view,
            service,
            reexec,
            restarts,
            reloads,
            shutdown,
            server,
            root,
            _lock: lock,
        })
    }

    /// `start --foreground`: the pipeline starts with the daemon, or the daemon ends;
    /// the line that says so when the start had nothing to do.
    async fn start_pipeline(&mut self, req: StartRequest) -> Result<Option<String>> {
        match self.pipeline.start(req).await {
            Ok(reply) if reply.nothing_to_do.is_some() => Ok(reply.nothing_to_do),
            Ok(reply) => {
                tracing::info!(
                    "pipeline started: chunk {}, scale {}, step {}",
                    reply.chunk,
                    reply.scale,
                    reply.active_step.map_or("-", |s| s.as_str())
                );
                Ok(None)
            }
            Err(e) => {
                let _ = self.shutdown.send(true);
                let _ = (&mut self.server).await;
                Err(anyhow::anyhow!("cannot start the pipeline: {e}"))
            }
        }
    }

    /// Serves until a signal, a restart request or (in a terminal) the pipeline's end.
    async fn signal_loop(&mut self) -> Result<LoopEnd> {
        let mut signals = Signals::install()?;
        let mut records = self.pipeline.subscribe();
        let mut redraw = tokio::time::interval(VIEW_REFRESH);
        let mut root_check = tokio::time::interval(ROOT_CHECK);
        let in_view = self.view.is_some();
        loop {
            tokio::select! {
                _ = signals.term.recv() => return Ok(LoopEnd::Exit(DaemonExit::Signalled)),
                _ = signals.int.recv() => return Ok(LoopEnd::Exit(DaemonExit::Signalled)),
                _ = signals.usr2.recv() => if self.may_restart_alone() {
                    return Ok(LoopEnd::Restart);
                },
                Some(()) = self.restarts.recv() => return Ok(LoopEnd::Restart),
                _ = signals.hup.recv() => {
                    let _ = self.reload().await;
                }
                Some(reply) = self.reloads.recv() => {
                    let _ = reply.send(self.reload().await);
                }
                _ = redraw.tick(), if in_view => self.redraw(),
                _ = root_check.tick() => if let Err(gone) = self.root.check() {
                    return Ok(LoopEnd::RootGone(gone));
                },
                tick = self.service.next() => {
                    let cache = &self.cache;
                    self.service.on_tick(tick, &self.pipeline, || progress::line(&cache.status())).await;
                }
                changed = records.changed(), if in_view => {
                    let state = records.borrow_and_update().state.kind();
                    let ended = matches!(state, PipelineState::Finished | PipelineState::Failed | PipelineState::Stopped);
                    if changed.is_err() || ended {
                        self.finish_view().await;
                        return Ok(LoopEnd::Exit(DaemonExit::PipelineEnded(state)));
                    }
                }
            }
        }
    }

    /// SIGUSR2: whether the daemon may restart alone now; says why not otherwise.
    fn may_restart_alone(&self) -> bool {
        match (&self.reexec, self.pipeline.record().state.kind()) {
            (None, _) => tracing::warn!(
                "SIGUSR2: a daemon in a terminal (start --foreground) does not restart alone"
            ),
            (Some(_), PipelineState::Stopping) => tracing::warn!(
                "SIGUSR2: a stop is under way; restart the daemon once it has finished"
            ),
            (Some(_), _) => return true,
        }
        false
    }

    /// SIGHUP, `lavenderd reload`: the config file read again (by the pipeline's
    /// actor, which logs each changed key and when it takes effect), then applied to
    /// the status, retention and the daemon's log rotation at once; the worker is left
    /// alone. What is not reloaded is said key by key (see `pipeline/reload.rs`).
    async fn reload(&self) -> Result<ReloadReport, String> {
        let reload = self.pipeline.reload().await?;
        let config = &reload.config;
        if let Err(e) = crate::logging::rotate_own_log(&self.layout.daemon_log(), config.logging) {
            tracing::warn!("{e:#}");
        }
        self.cache.set_settings(StatusSettings::from_config(config));
        self.retention.set(config);
        Ok(reload.report)
    }

    fn redraw(&self) {
        if let Some(view) = &self.view {
            view.update(&self.cache.status());
        }
    }

    /// The foreground view's last lines, from a status that shows the pipeline's end.
    async fn finish_view(&self) {
        if let Some(view) = &self.view {
            self.cache.caught_up(&self.pipeline.record()).await;
            view.finish(&self.cache.status()).await;
        }
    }

    /// Stops serving, lets the actor finish its transition and re-executes the
    /// binary in place; the worker keeps training (no STOPPING=1, no stop).
    /// Returns only the error of an exec that failed.
    async fn restart_alone(mut self) -> anyhow::Error {
        let Some(reexec) = self.reexec.take() else {
            return anyhow::anyhow!("a daemon in a terminal does not restart alone");
        };
        tracing::info!("restarting the daemon alone; the worker keeps training");
        self.service
            .reloading("restarting the daemon; the worker keeps training");
        let _ = self.shutdown.send(true);
        if tokio::time::timeout(RESTART_DRAIN, &mut self.server)
            .await
            .is_err()
        {
            tracing::warn!("requests still open after {RESTART_DRAIN:?}; restarting all the same");
        }
        self.pipeline.detach().await;
        self.remove_addresses();
        reexec.exec()
    }

    /// On a signal the pipeline is stopped gracefully (the worker saves); then the
    /// API drains and the daemon's addresses are removed.
    async fn shut_down(mut self, exit: DaemonExit) -> DaemonExit {
        self.service
            .stopping("shutting down: stopping the pipeline gracefully");
        if exit == DaemonExit::Signalled {
            self.stop_pipeline().await;
        }
        let _ = self.shutdown.send(true);
        match (&mut self.server).await {
            Ok(Err(e)) => tracing::error!("{e:#}"),
            Err(e) => tracing::error!("server task: {e}"),
            Ok(Ok(())) => {}
        }
        // A launch still in flight (a slow `sbatch`) returns, and its worker is
        // cancelled, before the daemon exits.
        self.pipeline.detach().await;
        self.remove_addresses();
        exit
    }

    /// The data root went (its disk unplugged): nothing written from now on would
    /// land where it belongs, and nothing may land in another folder. The worker is
    /// killed without a save (its save would recreate the path on the disk beneath),
    /// the API closes, and the daemon ends with the error naming the folder.
    async fn root_gone(mut self, gone: RootGone) -> anyhow::Error {
        tracing::error!("{gone}");
        self.service.stopping(&gone.to_string());
        if let Err(e) = self
            .pipeline
            .stop_for(StopCause::DaemonExit, Some(Duration::ZERO))
            .await
        {
            tracing::error!("{e:#}");
        }
        let _ = self.shutdown.send(true);
        let _ = (&mut self.server).await;
        self.pipeline.detach().await;
        self.remove_addresses();
        anyhow::anyhow!("{gone}")
    }

    async fn stop_pipeline(&mut self) {
        tracing::info!("shutting down: stopping the pipeline gracefully");
        // In a terminal, Ctrl-C is the operator's stop; a service's SIGTERM (a
        // restart, a shutdown) interrupts the pipeline, which the next start resumes.
        let cause = match self.view {
            Some(_) => StopCause::Operator,
            None => StopCause::DaemonExit,
        };
        let cache = &self.cache;
        let summary = || progress::line(&cache.status());
        let said = match self
            .service
            .during(&self.pipeline, summary, self.pipeline.stop_for(cause, None))
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
        if self.view.is_some() {
            self.finish_view().await;
            // Ctrl-C in the terminal: say there what the stop saved.
            if let Some(said) = said {
                eprintln!("{said}");
            }
        }
    }

    fn remove_addresses(&self) {
        let _ = std::fs::remove_file(self.layout.socket());
        let _ = std::fs::remove_file(self.layout.addr_file());
    }
}

/// Binds the API's TCP address (`--listen`, else `supervisor.listen`) and the Unix
/// socket, and records the TCP address for clients (and tests listening on port 0).
async fn listen(
    settings: &Settings,
    listen: Option<SocketAddr>,
    allow_non_loopback: bool,
) -> Result<(TcpListener, UnixListener)> {
    let (layout, sup) = (&settings.layout, &settings.config.supervisor);
    let tcp = server::bind_tcp(listen.unwrap_or(sup.listen), allow_non_loopback).await?;
    let unix = server::bind_unix(&layout.socket())?;
    let addr = tcp.local_addr().context("read the bound address")?;
    lavender::atomic::write_file(&layout.addr_file(), addr.to_string().as_bytes())?;
    tracing::info!(
        "lavenderd {} (pid {}) serving http://{addr} and {} for data root {}",
        env!("CARGO_PKG_VERSION"),
        std::process::id(),
        layout.socket().display(),
        layout.data_root.display()
    );
    Ok((tcp, unix))
}

/// What the status tasks are wired to.
struct StatusParts {
    feed: Feed,
    notifier: Notifier,
    alerts: AlertSender,
    /// Each checkpoint's life after its save: read back, retention, replication.
    lifecycle: Lifecycle,
    /// Uploads of each new checkpoint (`replicate:`), handed each run by the lifecycle.
    replication: Option<crate::replicate::Replication>,
}

/// Tells the checkpoints room of each refresh that may have seen its run's events
/// grow (a new run, a new mark), straight from the refresher's change stream.
async fn follow_checkpoints(
    mut refreshes: watch::Receiver<Arc<status::StatusSnapshot>>,
    lifecycle: Lifecycle,
) {
    let mut seen: Option<(std::path::PathBuf, u64)> = None;
    loop {
        let looked = {
            let snap = refreshes.borrow_and_update();
            snap.facts
                .run_dir
                .clone()
                .map(|dir| (dir, snap.events_mark))
        };
        if let Some(looked) = looked
            && seen.as_ref() != Some(&looked)
        {
            lifecycle.looked(&looked.0);
            seen = Some(looked);
        }
        if refreshes.changed().await.is_err() {
            return;
        }
    }
}

/// The refresher, the watchdog and the feed's publisher (with the one follower of
/// `events.jsonl`), started on their own thread (`status/tasks.rs`); returns the
/// status cache and the web views over it.
fn status_tasks(
    settings: &Settings,
    refresh: &RefreshOptions,
    pipeline: &PipelineHandle,
    parts: StatusParts,
) -> Result<(StatusCache, WebState)> {
    let StatusParts {
        feed,
        notifier,
        alerts,
        lifecycle,
        replication,
    } = parts;
    let follower = EventFollower::new(
        settings.config.notify.milestones.then_some(&notifier),
        &settings.layout.state_dir,
        &settings.layout.data_root,
    );
    let tasks =
        status::tasks::StatusTasks::start().context("start the thread of the status tasks")?;
    let layout = &settings.layout;
    let sup = &settings.config.supervisor;
    Ok(tasks.enter(|| {
        let cache = status::refresher::spawn(
            layout.clone(),
            pipeline,
            StatusSettings::from_config(&settings.config),
            status::watch::WatchOptions {
                kind: sup.watcher,
                poll_interval: Duration::from_millis(sup.poll_interval_ms),
                simulate_exhausted: false,
            },
            refresh.clone(),
            Some(notifier.clone()),
            replication.clone(),
        );
        let report = lifecycle.subscribe();
        tokio::spawn(follow_checkpoints(cache.subscribe_refreshes(), lifecycle));
        let goodput = crate::goodput::Goodput::load(layout, &settings.config, alerts.clone());
        let alerts_for_drills = alerts.clone();
        status::watchdog::spawn(
            layout.clone(),
            cache.subscribe_refreshes(),
            alerts,
            pipeline.clone(),
        );
        status::replay::spawn(
            layout.state_dir.clone(),
            cache.subscribe_refreshes(),
            pipeline.clone(),
        );
        spawn_tracking(
            &layout.state_dir,
            &settings.config,
            cache.subscribe_refreshes(),
        );
        crate::drill::spawn_schedule(
            layout.clone(),
            settings.config.clone(),
            cache.subscribe_refreshes(),
            alerts_for_drills,
        );
        let web = WebState::start(
            feed,
            cache.clone(),
            pipeline.clone(),
            layout.clone(),
            follower,
            goodput,
        )
        .with_checkpoints(report);
        (cache, web)
    }))
}

/// The tracking task (`tracking:`), told each snapshot's run, state, step and
/// replication lag.
fn spawn_tracking(
    state_dir: &std::path::Path,
    config: &lavender::config::Config,
    mut snapshots: tokio::sync::watch::Receiver<std::sync::Arc<status::cache::StatusSnapshot>>,
) {
    if !config.tracking.any() {
        return;
    }
    let (tx, rx) = tokio::sync::watch::channel(None);
    crate::tracking::spawn(state_dir.to_path_buf(), config.clone(), rx);
    tokio::spawn(async move {
        loop {
            let seen = {
                let snap = snapshots.borrow_and_update();
                snap.record
                    .run_dir
                    .clone()
                    .map(|run_dir| crate::tracking::Seen {
                        run_dir,
                        state: snap.record.state.kind(),
                        step: snap.status.training.step,
                        steps_per_sec: snap.status.training.steps_per_sec,
                        replication_behind: snap.replication.as_ref().is_some_and(|r| r.behind),
                    })
            };
            tx.send_if_modified(|old| {
                let changed = *old != seen;
                *old = seen;
                changed
            });
            if snapshots.changed().await.is_err() || tx.is_closed() {
                return;
            }
        }
    });
}
