//! The waves gate (docs/behaviour.md, "Rolling safely"): the workloads one change makes due
//! roll in health-gated waves ([`FanOut`]), not all at once. It is the last gate, so that a
//! workload another gate holds (a pause, a window) is no member of a wave: released later,
//! it comes without a change and rolls on its own.
//!
//! A change's triggers arrive together (one read, one resolved tag, one template), so a
//! fan-out is formed at the release that follows them. What a new leader needs to go on
//! lives on the rolled workloads (`<domain>/waves`, written with each roll); this gate keeps
//! in memory only what it can rebuild from them and from the workloads' health.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Event;
use tokio::time::Instant;
use tracing::{info, warn};

use super::fan_out::{FanOut, Halt, HaltCause, Health, Member};
use super::gate::{Gate, Gating, Released, WaveOutcome};
use crate::controller::model::event;
use crate::controller::model::trigger::{Source, SourceChange, Trigger};
use crate::controller::model::wave_record::WaveMark;
use crate::controller::model::workload::{RolloutFacts, WorkloadKey};
use crate::core::verdict::Verdict;

/// `--max-wave` and `--wave-timeout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaveLimits {
    pub max_wave: usize,
    pub timeout: Duration,
}

impl Default for WaveLimits {
    fn default() -> Self {
        WaveLimits { max_wave: 50, timeout: Duration::from_secs(600) }
    }
}

/// One change being rolled.
#[derive(Debug)]
struct Rolling {
    change: SourceChange,
    fan_out: FanOut,
    /// The trigger each member came with, for its roll's Event.
    triggers: HashMap<WorkloadKey, Trigger>,
    /// The failing workload whose halt was announced: its Event is recorded once.
    announced: Option<WorkloadKey>,
    halted: bool,
    /// When the current wave was released.
    wave_opened: Instant,
}

/// What the gate knows of a workload's rollout, kept for members and for workloads that
/// record waves (a new leader restores those).
#[derive(Clone, Debug, Default)]
struct Seen {
    generation: Option<i64>,
    health: Health,
}

#[derive(Debug, Default)]
pub struct Waves {
    limits: WaveLimits,
    /// Changes seen since the last release, with their members.
    arriving: BTreeMap<SourceChange, Vec<(WorkloadKey, Trigger)>>,
    rolling: HashMap<Source, Rolling>,
    canaries: HashSet<WorkloadKey>,
    /// Workloads' recorded waves: by the source's name and change id, each workload with its
    /// wave and patch time.
    recorded: HashMap<(String, String), BTreeMap<WorkloadKey, (u32, SystemTime)>>,
    /// What each workload recorded, to drop it from `recorded` when that changes.
    records_of: HashMap<WorkloadKey, Vec<(String, String)>>,
    seen: HashMap<WorkloadKey, Seen>,
    /// The generation each member was patched from: its health counts from a newer one.
    patched_from: HashMap<WorkloadKey, Option<i64>>,
    /// The wall clock at the instant of the first release: records store wall-clock times.
    wall: Option<(Instant, SystemTime)>,
    /// Events to record, on these workloads.
    events: Vec<(WorkloadKey, Event)>,
    /// How waves ended since the metrics last asked.
    outcomes: Vec<WaveOutcome>,
    /// Sources that say `<domain>/fan-out: "all"`: their changes skip waves.
    all_at_once: HashSet<Source>,
}

impl Waves {
    pub fn new(limits: WaveLimits) -> Self {
        Waves { limits, ..Waves::default() }
    }

    fn is_member(&self, workload: &WorkloadKey) -> bool {
        self.rolling.values().any(|r| r.fan_out.is_member(workload))
            || self.arriving.values().any(|m| m.iter().any(|(w, _)| w == workload))
    }

    fn health(&self, workload: &WorkloadKey) -> Health {
        let Some(seen) = self.seen.get(workload) else { return Health::Progressing };
        // A status judged on the generation the patch replaced says nothing of the patch.
        match self.patched_from.get(workload) {
            Some(from) if seen.generation <= *from => Health::Progressing,
            _ => seen.health.clone(),
        }
    }

    /// Forms the fan-outs of the changes that arrived, restoring what their members record.
    fn form(&mut self, now: Instant) {
        for (change, members) in std::mem::take(&mut self.arriving) {
            let listed = members
                .iter()
                .map(|(w, _)| Member { workload: w.clone(), canary: self.canaries.contains(w) });
            let mut fan_out = FanOut::new(listed.collect(), self.limits.max_wave);
            let key = (change.source.record_name(), change.id.clone());
            for (workload, (wave, at)) in self.recorded.get(&key).into_iter().flatten() {
                if !change.source.concerns(workload) {
                    continue;
                }
                if !fan_out.is_member(workload) {
                    // Rolled before this leader: not due again, but still in its wave.
                    fan_out.add_rolled(workload.clone());
                }
                fan_out.restore(workload, *wave, self.instant_of(*at, now));
                self.patched_from.entry(workload.clone()).or_insert(None);
            }
            let triggers = members.into_iter().collect();
            let rolling = Rolling {
                change: change.clone(),
                fan_out,
                triggers,
                announced: None,
                halted: false,
                wave_opened: now,
            };
            self.rolling.insert(change.source, rolling);
        }
    }

    /// The instant of a wall-clock time recorded on a workload, on this process's clock.
    fn instant_of(&self, at: SystemTime, now: Instant) -> Instant {
        let wall_now = self.wall_at(now);
        let ago = wall_now.duration_since(at).unwrap_or_default();
        now.checked_sub(ago).unwrap_or(now)
    }

    fn wall_at(&self, now: Instant) -> SystemTime {
        match self.wall {
            Some((instant, wall)) => wall + now.saturating_duration_since(instant),
            None => SystemTime::now(),
        }
    }
}

impl Gate for Waves {
    fn admit(
        &mut self,
        workload: &WorkloadKey,
        trigger: &Trigger,
        change: Option<&SourceChange>,
        _now: Instant,
    ) -> Gating {
        let Some(change) = change else { return Gating::Pass };
        if self.all_at_once.contains(&change.source) {
            return Gating::Pass;
        }
        if let Some(rolling) = self.rolling.get(&change.source) {
            if rolling.change.id != change.id {
                // A newer change replaces the one rolling (halted or not): wave 1 again.
                info!(source = %change.source, change = %change.id, replaces = %rolling.change.id,
                    "a newer change of the source starts its waves again");
                self.rolling.remove(&change.source);
            } else if rolling.fan_out.is_member(workload) {
                // Due again within its change (a retry, a newer snapshot): once released, it
                // goes on; before, it waits for its wave.
                return match rolling.fan_out.wave_of(workload) {
                    Some(_) => Gating::Pass,
                    None => Gating::Hold { event: None },
                };
            } else {
                // Not part of the change as it arrived (held by another gate then): on its own.
                return Gating::Pass;
            }
        }
        let members = self.arriving.entry(change.clone()).or_default();
        if !members.iter().any(|(w, _)| w == workload) {
            members.push((workload.clone(), trigger.clone()));
        }
        Gating::Hold { event: None }
    }

    fn rolled(
        &mut self,
        workload: &WorkloadKey,
        _triggers: &BTreeSet<Trigger>,
        generation: Option<i64>,
        now: Instant,
    ) {
        let mut member = false;
        for rolling in self.rolling.values_mut() {
            if rolling.fan_out.wave_of(workload).is_some() {
                rolling.fan_out.patched(workload, now);
                member = true;
            }
        }
        // The generation of the snapshot the patch was made from, whatever the watch has
        // delivered since (it often delivers the patched object before the worker reports).
        if member {
            self.patched_from.insert(workload.clone(), generation);
        }
    }

    fn source_observed(&mut self, source: &Source, all_at_once: bool) {
        if all_at_once {
            self.all_at_once.insert(source.clone());
        } else {
            self.all_at_once.remove(source);
        }
    }

    fn observed(&mut self, workload: &WorkloadKey, facts: &RolloutFacts) {
        if facts.canary {
            self.canaries.insert(workload.clone());
        } else {
            self.canaries.remove(workload);
        }
        for key in self.records_of.remove(workload).unwrap_or_default() {
            if let Some(workloads) = self.recorded.get_mut(&key) {
                workloads.remove(workload);
                if workloads.is_empty() {
                    self.recorded.remove(&key);
                }
            }
        }
        let mut keys = Vec::new();
        for (source, entry) in facts.waves.entries() {
            let key = (source.to_owned(), entry.change.clone());
            let entry = (entry.wave, entry.at);
            self.recorded.entry(key.clone()).or_default().insert(workload.clone(), entry);
            keys.push(key);
        }
        let keep = !keys.is_empty() || self.is_member(workload);
        if !keys.is_empty() {
            self.records_of.insert(workload.clone(), keys);
        }
        if keep {
            let seen = Seen { generation: facts.generation, health: facts.health.clone() };
            self.seen.insert(workload.clone(), seen);
        } else {
            self.seen.remove(workload);
        }
    }

    fn release(&mut self, now: Instant) -> Vec<Released> {
        if self.wall.is_none() {
            self.wall = Some((now, SystemTime::now()));
        }
        self.form(now);
        let mut released = Vec::new();
        let mut done = Vec::new();
        let sources: Vec<Source> = self.rolling.keys().cloned().collect();
        for source in sources {
            let Some(mut rolling) = self.rolling.remove(&source) else { continue };
            let step = rolling.fan_out.step(|w| self.health(w), now, self.limits.timeout);
            if let Some(wave) = step.completed {
                info!(source = %source, change = %rolling.change.id, wave, "wave complete");
                let took = now.saturating_duration_since(rolling.wave_opened);
                self.outcomes.push(WaveOutcome { outcome: "completed", took });
            }
            if !step.release.is_empty() {
                rolling.wave_opened = now;
            }
            match &step.halt {
                Some(halt) => {
                    rolling.halted = true;
                    if rolling.announced.as_ref() != Some(&halt.failing) {
                        rolling.announced = Some(halt.failing.clone());
                        let outcome = match halt.cause {
                            HaltCause::Failed(_) => "failed",
                            HaltCause::Timeout => "timeout",
                        };
                        let took = now.saturating_duration_since(rolling.wave_opened);
                        self.outcomes.push(WaveOutcome { outcome, took });
                        self.events
                            .push((halt.failing.clone(), halted_event(&rolling.change, halt)));
                    }
                }
                None => {
                    rolling.halted = false;
                    rolling.announced = None;
                }
            }
            for (workload, wave) in step.release {
                info!(workload = %workload, source = %source, change = %rolling.change.id, wave,
                    "rolling in its wave");
                let trigger = rolling.triggers.get(&workload).cloned();
                // Restored members were rolled before: nothing to roll again.
                if let Some(trigger) = trigger {
                    released.push(Released { workload, trigger, event: None });
                }
            }
            if step.done {
                done.push(source.clone());
            }
            self.rolling.insert(source, rolling);
        }
        for source in done {
            if let Some(rolling) = self.rolling.remove(&source) {
                for workload in rolling.fan_out.members() {
                    self.patched_from.remove(workload);
                }
            }
        }
        released
    }

    fn next_release(&self) -> Option<Instant> {
        let timeouts =
            self.rolling.values().filter_map(|r| r.fan_out.next_timeout(self.limits.timeout));
        // Arriving changes are formed at once; health is re-judged as the watch delivers it.
        let now = (!self.arriving.is_empty()).then(Instant::now);
        timeouts.chain(now).min()
    }

    /// A workload waiting for its wave is stale; one waiting behind a halt is `halted`, as is
    /// the workload whose rollout halted the change.
    fn verdict(&self, workload: &WorkloadKey) -> Option<Verdict> {
        let halted = self.rolling.values().filter(|r| r.halted).any(|r| {
            let waiting = r.fan_out.is_member(workload) && r.fan_out.wave_of(workload).is_none();
            waiting || r.announced.as_ref() == Some(workload)
        });
        halted.then_some(Verdict::Halted)
    }

    fn marks(&self, workload: &WorkloadKey) -> Vec<WaveMark> {
        self.rolling
            .values()
            .filter_map(|r| {
                let wave = r.fan_out.wave_of(workload)?;
                r.triggers.contains_key(workload).then(|| WaveMark {
                    source: r.change.source.record_name(),
                    change: r.change.id.clone(),
                    wave,
                })
            })
            .collect()
    }

    fn events(&mut self) -> Vec<(WorkloadKey, Event)> {
        std::mem::take(&mut self.events)
    }

    fn take_wave_outcomes(&mut self) -> Vec<WaveOutcome> {
        std::mem::take(&mut self.outcomes)
    }

    fn halted_changes(&self) -> usize {
        self.rolling.values().filter(|r| r.halted).count()
    }

    fn forget(&mut self, workload: &WorkloadKey) {
        for members in self.arriving.values_mut() {
            members.retain(|(w, _)| w != workload);
        }
        for rolling in self.rolling.values_mut() {
            rolling.fan_out.leave(workload);
        }
        self.canaries.remove(workload);
        self.seen.remove(workload);
        self.patched_from.remove(workload);
        for key in self.records_of.remove(workload).unwrap_or_default() {
            if let Some(workloads) = self.recorded.get_mut(&key) {
                workloads.remove(workload);
            }
        }
    }
}

/// The `RolloutHalted` Event on the failing workload.
fn halted_event(change: &SourceChange, halt: &Halt) -> Event {
    let cause = match &halt.cause {
        HaltCause::Failed(reason) => format!("its rollout failed ({reason})"),
        HaltCause::Timeout => "its rollout did not complete within --wave-timeout".to_owned(),
    };
    warn!(workload = %halt.failing, source = %change.source, change = %change.id,
        waiting = halt.waiting, %cause, "rollout halted");
    let source = change.source.record_name();
    event::rollout_halted(&halt.failing, None, &source, &change.id, &cause, halt.waiting)
}
