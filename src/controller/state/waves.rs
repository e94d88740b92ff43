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

use super::fan_out::{FanOut, Halt, HaltCause, Health, Member, Step};
use super::gate::{Gate, Gating, Involved, RecordedRoll, Released, SourceSays, WaveOutcome};
use crate::controller::model::trigger::WaveMark;
use crate::controller::model::trigger::{Source, SourceChange, Trigger};
use crate::controller::model::workload::{RolloutFacts, WorkloadKey};
use crate::controller::model::{event, notice};
use crate::core::diagnosis::halts;
use crate::core::model::annotations::AnnotationDomain;
use crate::core::verdict::Verdict;
use crate::notify::{Notice, NoticeKind};

/// `--max-wave`, `--wave-timeout` and `--dry-run`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaveLimits {
    pub max_wave: usize,
    pub timeout: Duration,
    /// Nothing is patched, so no rollout is waited for: every wave is released at once.
    pub dry_run: bool,
}

impl Default for WaveLimits {
    fn default() -> Self {
        WaveLimits { max_wave: 50, timeout: Duration::from_secs(600), dry_run: false }
    }
}

/// A halt's Events are recorded again this often while it lasts, so that they outlive the API
/// server's Event TTL (1 h by default) and `configsum explain` still finds them.
pub const HALT_REPEAT: Duration = Duration::from_secs(30 * 60);

/// One change being rolled.
#[derive(Debug)]
struct Rolling {
    change: SourceChange,
    fan_out: FanOut,
    /// The trigger each member came with, for its roll's Event.
    triggers: HashMap<WorkloadKey, Trigger>,
    /// The failing workload whose halt was announced, the halt's id, and when its Events were
    /// last recorded (again every [`HALT_REPEAT`] while it lasts).
    announced: Option<(WorkloadKey, String, Instant)>,
    /// The id a halt at each member would have, where its record says one (its own digest
    /// for the source); else the change's.
    halt_ids: HashMap<WorkloadKey, String>,
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
    /// `<domain>/resume`, named by the `RolloutHalted` Events.
    resume_key: String,
    /// Changes seen since the last release, with their members.
    arriving: BTreeMap<SourceChange, Vec<(WorkloadKey, Trigger)>>,
    rolling: HashMap<Source, Rolling>,
    canaries: HashSet<WorkloadKey>,
    /// What the workloads tracking an arriving change's source record of their rolls in it
    /// (a new leader's account), until the change's fan-out is formed.
    records: HashMap<SourceChange, Vec<RecordedRoll>>,
    /// The rollouts of the members of fan-outs, as the watch last delivered them.
    seen: HashMap<WorkloadKey, Seen>,
    /// The generation each member was patched from: its health counts from a newer one.
    patched_from: HashMap<WorkloadKey, Option<i64>>,
    /// The wall clock at the instant of the first release: records store wall-clock times.
    wall: Option<(Instant, SystemTime)>,
    /// Events to record.
    events: Vec<(Involved, Event)>,
    /// Notices of halts and resumes, for the next tick.
    notices: Vec<Notice>,
    /// How waves ended since the metrics last asked.
    outcomes: Vec<WaveOutcome>,
    /// Sources that say `<domain>/fan-out: "all"`: their changes skip waves.
    all_at_once: HashSet<Source>,
    /// What sources' `<domain>/resume` say: the id of a halted change to go on with.
    resumes: HashMap<Source, String>,
}

impl Waves {
    pub fn new(limits: WaveLimits, domain: &AnnotationDomain) -> Self {
        Waves { limits, resume_key: domain.resume(), ..Waves::default() }
    }

    fn is_member(&self, workload: &WorkloadKey) -> bool {
        self.rolling.values().any(|r| r.fan_out.is_member(workload))
            || self.arriving.values().any(|m| m.iter().any(|(w, _)| w == workload))
            || self.records.values().any(|r| r.iter().any(|r| r.workload == *workload))
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
            let mut halt_ids = HashMap::new();
            let records = self.records.remove(&change).unwrap_or_default();
            for recorded in records {
                let workload = &recorded.workload;
                if !change.source.concerns(workload) {
                    continue;
                }
                if !fan_out.is_member(workload) {
                    // Rolled before this leader: not due again, but still in its wave.
                    fan_out.add_rolled(workload.clone());
                }
                fan_out.restore(workload, recorded.wave, self.instant_of(recorded.at, now));
                self.patched_from.entry(workload.clone()).or_insert(None);
                let seen = Seen { generation: recorded.generation, health: recorded.health };
                self.seen.entry(workload.clone()).or_insert(seen);
                halt_ids.insert(workload.clone(), recorded.halt_id);
            }
            let triggers: HashMap<WorkloadKey, Trigger> = members.into_iter().collect();
            let rolling = Rolling {
                change: change.clone(),
                fan_out,
                triggers,
                halt_ids,
                announced: None,
                halted: false,
                wave_opened: now,
            };
            self.rolling.insert(change.source, rolling);
        }
        // Handed with a change none of whose workloads reached this gate (another held them):
        // nothing to restore.
        self.records.clear();
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

    /// The id of a halt of `rolling`'s change at `failing`: the first 12 hex digits of the
    /// failing workload's new digest for the source, as its roll recorded it, else the
    /// change's.
    fn halt_id(rolling: &Rolling, failing: &WorkloadKey) -> String {
        rolling.halt_ids.get(failing).cloned().unwrap_or_else(|| rolling.change.id.clone())
    }

    /// One step of `rolling`'s fan-out; a halt an operator resumed (`<domain>/resume` on the
    /// source names its id) excuses the failing workload and steps again — here too when a
    /// new leader finds the resume already written — with a `resumed` notice.
    fn step(&mut self, rolling: &mut Rolling, now: Instant) -> (Step, Option<String>) {
        loop {
            let step = rolling.fan_out.step(|w| self.health(w), now, self.limits.timeout);
            let Some(halt) = &step.halt else { return (step, None) };
            let id = Self::halt_id(rolling, &halt.failing);
            if self.resumes.get(&rolling.change.source) != Some(&id) {
                return (step, Some(id));
            }
            let source = &rolling.change.source;
            info!(workload = %halt.failing, source = %source, change = %id,
                "an operator resumed the halted change");
            let reason = format!(
                "{} names the halted change {id} of {}: its waves go on",
                self.resume_key,
                source.record_name()
            );
            let kind = NoticeKind::Resumed;
            self.notices.push(notice::of_change(kind, &halt.failing, source, &id, reason));
            rolling.fan_out.excuse(&halt.failing);
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
                // Due for the change after its fan-out formed (a tag resolved for another
                // namespace's credentials, a workload created since): a later wave.
                let rolling = self.rolling.get_mut(&change.source);
                if let Some(rolling) = rolling {
                    rolling.fan_out.join(workload.clone());
                    rolling.triggers.insert(workload.clone(), trigger.clone());
                }
                return Gating::Hold { event: None };
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

    /// A released member with nothing to patch holds its wave no more: there is no rollout of
    /// its to wait for.
    fn found_current(&mut self, workload: &WorkloadKey) {
        for rolling in self.rolling.values_mut() {
            if rolling.fan_out.wave_of(workload).is_some() && !rolling.fan_out.was_patched(workload)
            {
                rolling.fan_out.leave(workload);
            }
        }
    }

    fn source_observed(&mut self, source: &Source, says: &SourceSays) {
        if says.all_at_once {
            self.all_at_once.insert(source.clone());
        } else {
            self.all_at_once.remove(source);
        }
        match &says.resume {
            Some(id) => {
                self.resumes.insert(source.clone(), id.clone());
            }
            None => {
                self.resumes.remove(source);
            }
        }
    }

    fn recorded(&mut self, change: &SourceChange, records: &[RecordedRoll]) {
        if self.limits.dry_run || self.all_at_once.contains(&change.source) {
            return;
        }
        // The newest account wins; one for a change already rolling restores nothing new.
        if self.rolling.get(&change.source).is_none_or(|r| r.change != *change) {
            self.records.insert(change.clone(), records.to_vec());
        }
    }

    fn observed(&mut self, workload: &WorkloadKey, facts: &RolloutFacts) {
        if facts.canary {
            self.canaries.insert(workload.clone());
        } else {
            self.canaries.remove(workload);
        }
        if !self.is_member(workload) {
            self.seen.remove(workload);
            return;
        }
        let seen = Seen { generation: facts.generation, health: facts.health.clone() };
        self.seen.insert(workload.clone(), seen);
        // The id a halt at it would have, from the record its roll in this change wrote.
        for rolling in self.rolling.values_mut().filter(|r| r.fan_out.is_member(workload)) {
            let entry = facts.waves.get(&rolling.change.source.record_name());
            if let Some(entry) = entry.filter(|e| e.change.as_str() == rolling.change.id) {
                rolling.halt_ids.insert(workload.clone(), entry.halt_id().to_owned());
            }
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
            if self.limits.dry_run {
                released.extend(dry_run_release(&mut rolling));
                self.rolling.insert(source, rolling);
                continue;
            }
            let (step, halt_id) = self.step(&mut rolling, now);
            if let Some(wave) = step.completed {
                info!(source = %source, change = %rolling.change.id, wave, "wave complete");
                let took = now.saturating_duration_since(rolling.wave_opened);
                self.outcomes.push(WaveOutcome { outcome: "completed", took });
            }
            if !step.release.is_empty() {
                rolling.wave_opened = now;
            }
            match (&step.halt, halt_id) {
                (Some(halt), Some(id)) => {
                    rolling.halted = true;
                    let last = rolling
                        .announced
                        .as_ref()
                        .filter(|(failing, said, _)| *failing == halt.failing && *said == id);
                    match last.map(|(_, _, at)| *at) {
                        None => {
                            let outcome = match halt.cause {
                                HaltCause::Failed(_) => "failed",
                                HaltCause::Timeout => "timeout",
                            };
                            let took = now.saturating_duration_since(rolling.wave_opened);
                            self.outcomes.push(WaveOutcome { outcome, took });
                            self.announce(&rolling.change, halt, &id, true);
                            rolling.announced = Some((halt.failing.clone(), id, now));
                        }
                        Some(at) if now.saturating_duration_since(at) >= HALT_REPEAT => {
                            self.announce(&rolling.change, halt, &id, false);
                            rolling.announced = Some((halt.failing.clone(), id, now));
                        }
                        Some(_) => {}
                    }
                }
                _ => {
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
        let timeouts = self.rolling.values().filter_map(|r| r.fan_out.next_timeout());
        let repeats = self
            .rolling
            .values()
            .filter(|r| r.halted)
            .filter_map(|r| r.announced.as_ref().map(|(_, _, at)| *at + HALT_REPEAT));
        // Arriving changes are formed at once; health is re-judged as the watch delivers it.
        let now = (!self.arriving.is_empty()).then(Instant::now);
        timeouts.chain(repeats).chain(now).min()
    }

    /// A workload waiting for its wave is stale; one waiting behind a halt is `halted`, as is
    /// the workload whose rollout halted the change.
    fn verdict(&self, workload: &WorkloadKey) -> Option<Verdict> {
        let halted = self.rolling.values().filter(|r| r.halted).any(|r| {
            let waiting = r.fan_out.is_member(workload) && r.fan_out.wave_of(workload).is_none();
            waiting || r.announced.as_ref().is_some_and(|(failing, _, _)| failing == workload)
        });
        halted.then_some(Verdict::Halted)
    }

    fn marks(&self, workload: &WorkloadKey) -> Vec<WaveMark> {
        self.rolling
            .values()
            .filter_map(|r| {
                let wave = r.fan_out.wave_of(workload)?;
                r.triggers
                    .contains_key(workload)
                    .then(|| WaveMark { change: r.change.clone(), wave })
            })
            .collect()
    }

    fn events(&mut self) -> Vec<(Involved, Event)> {
        std::mem::take(&mut self.events)
    }

    fn notices(&mut self) -> Vec<Notice> {
        std::mem::take(&mut self.notices)
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
        for records in self.records.values_mut() {
            records.retain(|r| r.workload != *workload);
        }
    }
}

impl Waves {
    /// The `RolloutHalted` Events: on the failing workload, and on the source where it is an
    /// object (a ConfigMap, a Secret, a tracked workload; an image tag has none); the first
    /// time (`first`), its `halted` notice too.
    fn announce(&mut self, change: &SourceChange, halt: &Halt, id: &str, first: bool) {
        let cause = match &halt.cause {
            HaltCause::Failed(reason) => {
                let reason = crate::core::model::warnings::shorten_middle(reason, 128);
                format!("its rollout failed ({reason})")
            }
            HaltCause::Timeout => "its rollout did not complete within --wave-timeout".to_owned(),
        };
        warn!(workload = %halt.failing, source = %change.source, change = %id,
            waiting = halt.waiting, %cause, "rollout halted");
        let said = halts::Halt {
            source: change.source.record_name(),
            change: id.to_owned(),
            failing: halt.failing.to_string(),
            waiting: halt.waiting,
        };
        let mut on = vec![Involved::Workload(halt.failing.clone())];
        // Only a ConfigMap or Secret is read for `<domain>/resume` (an image tag is no object;
        // a tracked workload's own annotations are its author's).
        let mut resume_key = None;
        match &change.source {
            Source::Object(key) => {
                on.push(Involved::Object(key.clone()));
                resume_key = Some(self.resume_key.as_str());
            }
            Source::Workload(key) => on.push(Involved::Workload(key.clone())),
            Source::Image(_) | Source::ProviderClass { .. } => {}
        }
        if first {
            let reason = said.message(&cause, resume_key);
            let kind = NoticeKind::Halted;
            self.notices.push(notice::of_change(kind, &halt.failing, &change.source, id, reason));
        }
        for involved in on {
            let event = event::rollout_halted(&involved, &said, &cause, resume_key);
            self.events.push((involved, event));
        }
    }
}

/// A dry run's fan-out releases every member at once, in the wave it would roll in (nothing
/// waits for a rollout that never comes); once released, nothing more.
fn dry_run_release(rolling: &mut Rolling) -> Vec<Released> {
    if rolling.fan_out.wave() > 0 || rolling.fan_out.members().is_empty() {
        return Vec::new();
    }
    rolling
        .fan_out
        .release_all()
        .into_iter()
        .filter_map(|(workload, _)| {
            let trigger = rolling.triggers.get(&workload)?.clone();
            Some(Released { workload, trigger, event: None })
        })
        .collect()
}
