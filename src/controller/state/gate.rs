//! A gate between a trigger and the work queue: it may hold a workload that a trigger made
//! due, and release it later. Every trigger passes every gate in order; a workload a gate
//! releases passes the others. The flap guard is one; a maintenance window or a wave is
//! another, added as a file with a [`Gate`] and one line in [`super::State::new`].

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Event;
use tokio::time::Instant;

pub use crate::controller::model::event::Involved;
use crate::controller::model::trigger::WaveMark;
use crate::controller::model::trigger::{Source, SourceChange, Trigger};
use crate::controller::model::workload::{RolloutFacts, WorkloadKey};
use crate::core::verdict::Verdict;
use crate::notify::Notice;

/// What a gate does with a trigger.
#[derive(Debug)]
pub enum Gating {
    /// Let it through.
    Pass,
    /// Hold the workload; record `event` (on the workload, whose uid the router fills in)
    /// when the gate has something to say.
    Hold { event: Option<Box<Event>> },
}

/// A workload a gate lets go, with the trigger it goes on with.
#[derive(Debug)]
pub struct Released {
    pub workload: WorkloadKey,
    pub trigger: Trigger,
    /// Recorded while leading (the router fills in the uid).
    pub event: Option<Event>,
}

/// What a ConfigMap's or Secret's own annotations say of its changes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceSays {
    /// `<domain>/fan-out: "all"`: its changes skip waves.
    pub all_at_once: bool,
    /// `<domain>/resume`: the id of a halted change to go on with.
    pub resume: Option<String>,
}

/// What a workload records of its roll in a change (`<domain>/waves`), with its rollout as
/// the watch last delivered it: a new leader's account of a fan-out.
#[derive(Clone, Debug)]
pub struct RecordedRoll {
    pub workload: WorkloadKey,
    pub wave: u32,
    /// When its patch was made.
    pub at: std::time::SystemTime,
    /// The id a halt at it would have.
    pub halt_id: String,
    pub generation: Option<i64>,
    pub health: crate::core::rollout_health::Health,
}

/// How one wave ended: `completed`, `failed` (a rollout failed) or `timeout`, after `took`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaveOutcome {
    pub outcome: &'static str,
    pub took: std::time::Duration,
}

pub trait Gate: std::fmt::Debug + Send {
    /// Whether `trigger` may make `workload` due at `now`; `change` is the new content of a
    /// source that came with it (none for a workload another gate released).
    fn admit(
        &mut self,
        workload: &WorkloadKey,
        trigger: &Trigger,
        change: Option<&SourceChange>,
        now: Instant,
    ) -> Gating;

    /// `workload` rolled (or would have, in a dry run) at `now` because of `triggers`, patched
    /// from its `generation` (`metadata.generation` before the patch).
    fn rolled(
        &mut self,
        _workload: &WorkloadKey,
        _triggers: &BTreeSet<Trigger>,
        _generation: Option<i64>,
        _now: Instant,
    ) {
    }

    /// `workload`'s reconciliation found its digests current: nothing was patched (an earlier
    /// wave of another source's change rolled it, or its author's own write brought it up to
    /// date through the webhook).
    fn found_current(&mut self, _workload: &WorkloadKey) {}

    /// The watch delivered `workload` anew (its health, its annotations).
    fn observed(&mut self, _workload: &WorkloadKey, _facts: &RolloutFacts) {}

    /// `change` makes workloads due, and `records` are what those tracking its source that
    /// rolled in it before record (a new leader's, or a restarted one's, account).
    fn recorded(&mut self, _change: &SourceChange, _records: &[RecordedRoll]) {}

    /// The watch delivered the ConfigMap or Secret `source`, which `says` this.
    fn source_observed(&mut self, _source: &Source, _says: &SourceSays) {}

    /// The namespace watch delivered `namespace` anew; `roll_window` is its
    /// `<domain>/roll-window` (`None`: it has none, or left the scope).
    fn namespace_observed(&mut self, _namespace: &str, _roll_window: Option<&str>) {}

    /// The workloads it lets go at `now`.
    fn release(&mut self, now: Instant) -> Vec<Released>;

    /// When it next lets something go, if it holds anything.
    fn next_release(&self) -> Option<Instant>;

    /// What it says of `workload`, if it holds it: the verdict of the workloads gauge.
    fn verdict(&self, workload: &WorkloadKey) -> Option<Verdict>;

    /// What `workload`'s roll records on it (`<domain>/waves`).
    fn marks(&self, _workload: &WorkloadKey) -> Vec<WaveMark> {
        Vec::new()
    }

    /// Events it has to say, each about a workload or an object.
    fn events(&mut self) -> Vec<(Involved, Event)> {
        Vec::new()
    }

    /// Notices it has to give (`--notify-config`), built beside its Events; handed out only
    /// while leading.
    fn notices(&mut self) -> Vec<Notice> {
        Vec::new()
    }

    /// How the waves it decided ended since the last call (the waves' metrics).
    fn take_wave_outcomes(&mut self) -> Vec<WaveOutcome> {
        Vec::new()
    }

    /// Changes it holds halted (the halted gauge).
    fn halted_changes(&self) -> usize {
        0
    }

    /// `workload` is gone, or out of scope.
    fn forget(&mut self, workload: &WorkloadKey);
}
