//! Workers that are not processes, for unit tests of the pipeline actor (restart,
//! backoff, escalation under `tokio::time::pause()`): the test decides when each
//! one exits and sees the signals it got. Their pids are beyond any real pid, and
//! their signals never reach the kernel.

use std::sync::{Arc, Condvar, Mutex};

use lavender::config::PipelineStep;
use nix::sys::signal::Signal;
use tokio::sync::oneshot;

use super::backend::Launched;
use super::{ProcessIdentity, WorkerHandle};
use crate::exit::ExitOutcome;

/// Above Linux's largest `pid_max` (2^22) and macOS's: never a real process.
const FAKE_PID_BASE: u32 = 1 << 30;

#[derive(Debug, Clone, Default)]
pub struct FakeBackend {
    state: Arc<Mutex<State>>,
    /// Wakes launches held by [`FakeBackend::hold_launches`].
    released: Arc<Condvar>,
}

#[derive(Debug, Default)]
struct State {
    workers: Vec<FakeWorker>,
    /// Workers ignore SIGTERM (a stop must escalate to SIGKILL).
    ignore_sigterm: bool,
    /// Launches fail from now on (the worker program vanished, sbatch refuses).
    refuse_launches: bool,
    /// Launches wait until released, as behind a slow `sbatch`.
    hold_launches: bool,
    /// Launches waiting now.
    held: usize,
}

#[derive(Debug)]
struct FakeWorker {
    step: PipelineStep,
    exit: Option<oneshot::Sender<ExitOutcome>>,
    signals: Vec<Signal>,
}

impl FakeBackend {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn launch(&self, step: PipelineStep) -> anyhow::Result<Launched> {
        let (tx, rx) = oneshot::channel();
        let mut st = self.state();
        st.held += 1;
        while st.hold_launches {
            st = self.released.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        st.held -= 1;
        if st.refuse_launches {
            anyhow::bail!("fake worker of step {step}: launches are refused");
        }
        let pid = FAKE_PID_BASE + st.workers.len() as u32;
        st.workers.push(FakeWorker {
            step,
            exit: Some(tx),
            signals: Vec::new(),
        });
        Ok(Launched {
            handle: WorkerHandle::Local(ProcessIdentity {
                pid,
                start_time: "fake".into(),
                generation: None,
            }),
            exit: Box::pin(async move { rx.await.unwrap_or(ExitOutcome::Unknown) }),
        })
    }

    /// Records the signal; SIGKILL ends the worker, and so does SIGTERM (exit 0,
    /// as a worker that saved) unless SIGTERM is ignored.
    pub fn signal(&self, handle: &WorkerHandle, signal: Signal) -> bool {
        let Some(i) = handle.pid().and_then(|p| p.checked_sub(FAKE_PID_BASE)) else {
            return false;
        };
        let mut st = self.state();
        let ignore_sigterm = st.ignore_sigterm;
        let Some(w) = st.workers.get_mut(i as usize) else {
            return false;
        };
        w.signals.push(signal);
        let outcome = match signal {
            Signal::SIGKILL => Some(ExitOutcome::Signal(9)),
            Signal::SIGTERM if !ignore_sigterm => Some(ExitOutcome::Code(0)),
            _ => None,
        };
        if let Some(outcome) = outcome
            && let Some(exit) = w.exit.take()
        {
            let _ = exit.send(outcome);
        }
        true
    }

    /// The steps launched so far, in order.
    pub fn launched(&self) -> Vec<PipelineStep> {
        self.state().workers.iter().map(|w| w.step).collect()
    }

    /// Ends worker `n` (0-based, in launch order) with `outcome`.
    pub fn exit(&self, n: usize, outcome: ExitOutcome) {
        if let Some(exit) = self.state().workers.get_mut(n).and_then(|w| w.exit.take()) {
            let _ = exit.send(outcome);
        }
    }

    pub fn signals(&self, n: usize) -> Vec<Signal> {
        self.state()
            .workers
            .get(n)
            .map(|w| w.signals.clone())
            .unwrap_or_default()
    }

    pub fn ignore_sigterm(&self) {
        self.state().ignore_sigterm = true;
    }

    pub fn refuse_launches(&self) {
        self.state().refuse_launches = true;
    }

    /// Launches wait from now on until [`FakeBackend::release_launches`].
    pub fn hold_launches(&self) {
        self.state().hold_launches = true;
    }

    pub fn release_launches(&self) {
        self.state().hold_launches = false;
        self.released.notify_all();
    }

    /// How many launches are waiting to be released.
    pub fn held_launches(&self) -> usize {
        self.state().held
    }
}
