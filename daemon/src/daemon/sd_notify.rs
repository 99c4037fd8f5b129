//! Talking to systemd when `serve` runs as a `Type=notify` unit: `READY=1` once the
//! sockets are bound, `WATCHDOG=1` only after a round trip through the pipeline
//! actor (a wedged actor or serve loop stops the pings, so systemd restarts the
//! daemon instead of a free-running timer keeping it "alive"), `STATUS=` when the
//! one-line summary changes, `RELOADING=1` before a restart alone, `STOPPING=1`, and
//! `EXTEND_TIMEOUT_USEC` while a stop waits for the worker's save. Everything is a no-op without `NOTIFY_SOCKET`.

use std::future::Future;
use std::time::Duration;

use sd_notify::NotifyState;
use tokio::time::{Interval, MissedTickBehavior};

use crate::pipeline::PipelineHandle;

/// How often the summary is compared with the last one sent (sent only on change).
const STATUS_EVERY: Duration = Duration::from_secs(1);
/// What each `EXTEND_TIMEOUT_USEC` grants. It is re-sent every `STATUS_EVERY` while
/// a stop lasts and the actor answers, so a slow save outlives `TimeoutStopSec`
/// (the daemon's own `stop_timeout_s` still bounds it), a wedged daemon does not.
const EXTEND_BY: Duration = Duration::from_secs(10);

/// Which timer fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tick {
    Watchdog,
    Status,
}

pub struct ServiceNotifier {
    /// Half of `WATCHDOG_USEC`, systemd's advice for the ping period.
    watchdog: Option<Interval>,
    status: Option<Interval>,
    last_status: Option<String>,
    stopping: bool,
    /// A failed send is logged once, not at every tick.
    warned: bool,
}

fn every(period: Duration) -> Interval {
    let mut interval = tokio::time::interval(period);
    interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
    interval
}

async fn tick_of(interval: &mut Option<Interval>) {
    match interval {
        Some(i) => {
            i.tick().await;
        }
        None => std::future::pending().await,
    }
}

impl ServiceNotifier {
    /// Reads `NOTIFY_SOCKET` and `WATCHDOG_USEC`/`WATCHDOG_PID`; must run inside the runtime.
    pub fn from_env() -> ServiceNotifier {
        let enabled = std::env::var_os("NOTIFY_SOCKET").is_some_and(|s| !s.is_empty());
        let watchdog = sd_notify::watchdog_enabled()
            .filter(|d| enabled && !d.is_zero())
            .map(|d| every(d / 2));
        if let Some(w) = &watchdog {
            tracing::info!(
                "systemd watchdog: pinging every {:?} after a pipeline round trip",
                w.period()
            );
        }
        ServiceNotifier {
            watchdog,
            status: enabled.then(|| every(STATUS_EVERY)),
            last_status: None,
            stopping: false,
            warned: false,
        }
    }

    fn enabled(&self) -> bool {
        self.status.is_some()
    }

    fn send(&mut self, states: &[NotifyState]) {
        if !self.enabled() {
            return;
        }
        if let Err(e) = sd_notify::notify(states)
            && !std::mem::replace(&mut self.warned, true)
        {
            tracing::warn!("sd_notify to $NOTIFY_SOCKET failed: {e}");
        }
    }

    /// `READY=1` with the first status line.
    pub fn ready(&mut self, summary: String) {
        self.send(&[NotifyState::Ready, NotifyState::Status(&summary)]);
        self.last_status = Some(summary);
    }

    /// Resolves when a timer is due; never when not under systemd.
    pub async fn next(&mut self) -> Tick {
        tokio::select! {
            _ = tick_of(&mut self.watchdog) => Tick::Watchdog,
            _ = tick_of(&mut self.status) => Tick::Status,
        }
    }

    /// Pings the pipeline actor, then sends what the tick is for. No answer within
    /// the tick's period means no `WATCHDOG=1`: systemd restarts a wedged daemon.
    pub async fn on_tick(
        &mut self,
        tick: Tick,
        pipeline: &PipelineHandle,
        summary: impl FnOnce() -> String,
    ) {
        let period = match tick {
            Tick::Watchdog => self.watchdog.as_ref().map(Interval::period),
            Tick::Status => self.status.as_ref().map(Interval::period),
        }
        .unwrap_or(STATUS_EVERY);
        let alive = tokio::time::timeout(period, pipeline.ping())
            .await
            .unwrap_or(false);
        if !alive {
            tracing::warn!(
                "the pipeline actor did not answer within {period:?}; withholding the systemd watchdog ping"
            );
            return;
        }
        match tick {
            Tick::Watchdog => self.send(&[NotifyState::Watchdog]),
            Tick::Status => {
                let line = summary();
                if self.last_status.as_deref() != Some(line.as_str()) {
                    self.send(&[NotifyState::Status(&line)]);
                    self.last_status = Some(line);
                }
                if self.stopping {
                    self.extend();
                }
            }
        }
    }

    fn extend(&mut self) {
        let usec = u32::try_from(EXTEND_BY.as_micros()).unwrap_or(u32::MAX);
        self.send(&[NotifyState::ExtendTimeoutUsec(usec)]);
    }

    /// `RELOADING=1` (with `MONOTONIC_USEC`, which newer systemd requires with it):
    /// the daemon re-executes itself to restart alone. The new image keeps the pid
    /// and says `READY=1`, which ends the reload; `systemctl status` shows
    /// "reloading" in between, and the unit is neither stopped nor restarted.
    pub fn reloading(&mut self, why: &str) {
        let mut states = vec![NotifyState::Reloading, NotifyState::Status(why)];
        if let Ok(now) = NotifyState::monotonic_usec_now() {
            states.push(now);
        }
        self.send(&states);
        self.last_status = Some(why.to_string());
    }

    /// `STOPPING=1`: the daemon is shutting down (it stops the worker first).
    pub fn stopping(&mut self, why: &str) {
        self.stopping = true;
        self.send(&[NotifyState::Stopping, NotifyState::Status(why)]);
        self.last_status = Some(why.to_string());
        self.extend();
    }

    /// Runs `work` (the graceful stop) while the watchdog, the status line and the
    /// timeout extension keep going.
    pub async fn during<T>(
        &mut self,
        pipeline: &PipelineHandle,
        summary: impl Fn() -> String,
        work: impl Future<Output = T>,
    ) -> T {
        tokio::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => return out,
                tick = self.next() => self.on_tick(tick, pipeline, &summary).await,
            }
        }
    }
}
