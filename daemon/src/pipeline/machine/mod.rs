//! The pipeline's state machine, written down: one [`Phase`] (each variant holds
//! exactly what exists in it), one [`Event`], and [`step`], a pure function from
//! (phase, record, event, now) to the next phase and the [`Effect`]s to perform. The
//! actor (`pipeline/actor/`) owns the phase, turns what it hears into events, and
//! performs the effects (`actor/effects.rs`): launches, signals, replies, alerts.
//!
//! The record (`state/pipeline.json`) is what the pipeline shows and keeps across a
//! daemon restart; the phase is what the actor is doing about its worker now. What
//! an event changes in the record is one of its effects (`Effect::Record`), so the
//! table test (`tests.rs`) shows the status after each event.

mod effect;
mod event;
mod phase;
mod step;
#[cfg(test)]
mod tests;

pub(crate) use effect::{Effect, KillReason};
pub(crate) use event::{Crash, Event, Found};
pub(crate) use phase::{
    DiskWaiting, Escalation, Launching, LiveWorker, PendingRestart, PendingStart, Phase, Relaunch,
    Restart, Stop,
};
pub(crate) use step::step;
