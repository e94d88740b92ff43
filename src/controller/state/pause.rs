//! The pause gate: `<domain>/paused: "true"` on a workload stops the controller from rolling
//! it while set (docs/behaviour.md, "Rolling safely"). What made it due meanwhile is kept;
//! once the annotation is removed, it rolls once, to the state of that moment (a trigger that
//! no longer changes anything reconciles to nothing).

use std::collections::{BTreeSet, HashMap, HashSet};

use tokio::time::Instant;
use tracing::info;

use super::gate::{Gate, Gating, Released};
use crate::controller::model::trigger::{SourceChange, Trigger};
use crate::controller::model::workload::{RolloutFacts, WorkloadKey};
use crate::core::verdict::Verdict;

#[derive(Debug, Default)]
pub struct Pause {
    paused: HashSet<WorkloadKey>,
    /// What made each paused workload due while paused.
    held: HashMap<WorkloadKey, BTreeSet<Trigger>>,
    /// Unpaused since the last release, with what they wait to roll for.
    unpaused: Vec<(WorkloadKey, BTreeSet<Trigger>)>,
}

impl Gate for Pause {
    fn admit(
        &mut self,
        workload: &WorkloadKey,
        trigger: &Trigger,
        _change: Option<&SourceChange>,
        _now: Instant,
    ) -> Gating {
        if !self.paused.contains(workload) {
            return Gating::Pass;
        }
        self.held.entry(workload.clone()).or_default().insert(trigger.clone());
        Gating::Hold { event: None }
    }

    fn observed(&mut self, workload: &WorkloadKey, facts: &RolloutFacts) {
        if facts.paused {
            self.paused.insert(workload.clone());
        } else if self.paused.remove(workload) {
            if let Some(triggers) = self.held.remove(workload) {
                info!(workload = %workload, "unpaused: rolling to the state of now");
                self.unpaused.push((workload.clone(), triggers));
            }
        }
    }

    fn release(&mut self, _now: Instant) -> Vec<Released> {
        let mut released = Vec::new();
        for (workload, triggers) in std::mem::take(&mut self.unpaused) {
            for trigger in triggers {
                released.push(Released { workload: workload.clone(), trigger, event: None });
            }
        }
        released
    }

    /// Unpausing comes with a watch event, and a release follows every message: nothing
    /// to wake for.
    fn next_release(&self) -> Option<Instant> {
        None
    }

    fn verdict(&self, workload: &WorkloadKey) -> Option<Verdict> {
        self.paused.contains(workload).then_some(Verdict::Paused)
    }

    fn forget(&mut self, workload: &WorkloadKey) {
        self.paused.remove(workload);
        self.held.remove(workload);
        self.unpaused.retain(|(w, _)| w != workload);
    }
}
