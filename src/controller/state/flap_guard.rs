//! The flap guard: a tracked object, image or workload that rolls the same workload more than
//! `--flap-limit` times within `--flap-period` stops rolling it, until it has been quiet for
//! `--flap-period`; then one roll brings the workload to the state of that moment. Two
//! writers fighting over one Secret (cert-manager Certificates, an operator in a loop) would
//! otherwise roll a Deployment every window, forever. Pure: the caller passes the clock.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;
use tracing::{info, warn};

use super::gate::{Gate, Gating, Released};
use crate::controller::model::trigger::{SourceChange, Trigger};
use crate::controller::model::workload::WorkloadKey;
use crate::controller::model::{event, notice};
use crate::core::verdict::Verdict;
use crate::notify::{Notice, NoticeKind};

/// `--flap-limit` and `--flap-period`; a limit of 0 turns the guard off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlapLimits {
    pub limit: u32,
    pub period: Duration,
}

impl Default for FlapLimits {
    fn default() -> Self {
        FlapLimits { limit: 5, period: Duration::from_secs(600) }
    }
}

/// What to do with a trigger.
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    /// Roll as usual.
    Roll,
    /// Held; `announce` the first time and once a period after while it lasts, which is
    /// when the Event is recorded (Events expire; `configsum explain` reads holds from them).
    Hold { announce: bool },
}

#[derive(Debug)]
struct Held {
    /// The last trigger seen while held: the quiet period runs from it.
    last: Instant,
    /// When the hold's Event was last recorded.
    announced: Instant,
}

/// A workload and the source that rolls it.
type Pair = (WorkloadKey, String);

#[derive(Debug, Default)]
pub struct FlapGuard {
    limits: FlapLimits,
    /// When each source rolled each workload, within the last period.
    rolls: HashMap<Pair, VecDeque<Instant>>,
    /// Held pairs.
    held: HashMap<Pair, Held>,
    /// Notices of holds begun and released, for the next tick.
    notices: Vec<Notice>,
}

impl FlapGuard {
    pub fn new(limits: FlapLimits) -> Self {
        FlapGuard { limits, ..FlapGuard::default() }
    }

    /// `trigger` would make `workload` due at `now`.
    pub fn admit(&mut self, workload: &WorkloadKey, trigger: &Trigger, now: Instant) -> Admission {
        if self.limits.limit == 0 {
            return Admission::Roll;
        }
        let pair = (workload.clone(), trigger.source());
        if let Some(held) = self.held.get_mut(&pair) {
            held.last = now;
            let announce = now.saturating_duration_since(held.announced) >= self.limits.period;
            if announce {
                held.announced = now;
            }
            return Admission::Hold { announce };
        }
        let recent = self.rolls.get_mut(&pair).map_or(0, |rolls| {
            prune(rolls, now, self.limits.period);
            rolls.len()
        });
        if recent >= self.limits.limit as usize {
            self.held.insert(pair, Held { last: now, announced: now });
            return Admission::Hold { announce: true };
        }
        Admission::Roll
    }

    /// `workload` rolled (or would have, in a dry run) at `now` because of `triggers`.
    pub fn rolled<'a>(
        &mut self,
        workload: &WorkloadKey,
        triggers: impl IntoIterator<Item = &'a Trigger>,
        now: Instant,
    ) {
        if self.limits.limit == 0 {
            return;
        }
        for trigger in triggers {
            let rolls = self.rolls.entry((workload.clone(), trigger.source())).or_default();
            prune(rolls, now, self.limits.period);
            rolls.push_back(now);
        }
    }

    /// The pairs quiet for a whole period by `now`, released: each workload is due once more,
    /// named by the source that was held.
    pub fn release(&mut self, now: Instant) -> Vec<(WorkloadKey, String)> {
        let period = self.limits.period;
        let quiet: Vec<Pair> = self
            .held
            .iter()
            .filter(|(_, held)| now.saturating_duration_since(held.last) >= period)
            .map(|(pair, _)| pair.clone())
            .collect();
        for pair in &quiet {
            self.held.remove(pair);
            self.rolls.remove(pair);
        }
        // Roll times older than a period count for nothing: drop them.
        self.rolls.retain(|_, rolls| {
            prune(rolls, now, period);
            !rolls.is_empty()
        });
        quiet
    }

    /// When the next held pair is released, if any is held.
    pub fn next_release(&self) -> Option<Instant> {
        self.held.values().map(|held| held.last + self.limits.period).min()
    }

    /// Whether some source is held for `workload`.
    pub fn is_held(&self, workload: &WorkloadKey) -> bool {
        self.held.keys().any(|(held, _)| held == workload)
    }

    /// The sources held for `workload`.
    #[cfg(test)]
    pub fn held_sources(&self, workload: &WorkloadKey) -> Vec<&str> {
        self.held.keys().filter(|(w, _)| w == workload).map(|(_, s)| s.as_str()).collect()
    }

    /// How many distinct workloads are held.
    #[cfg(test)]
    pub fn held_workloads(&self) -> usize {
        let mut workloads: Vec<&WorkloadKey> = self.held.keys().map(|(w, _)| w).collect();
        workloads.sort();
        workloads.dedup();
        workloads.len()
    }

    /// Forgets `workload` (deleted, or out of scope).
    pub fn forget(&mut self, workload: &WorkloadKey) {
        self.rolls.retain(|(w, _), _| w != workload);
        self.held.retain(|(w, _), _| w != workload);
    }
}

/// The flap guard as a gate: its hold is announced by a `FlapGuard` Event, its release by a
/// `FlapGuardReleased` one, and the released workload goes on as `Trigger::Quiet`.
impl Gate for FlapGuard {
    fn admit(
        &mut self,
        workload: &WorkloadKey,
        trigger: &Trigger,
        _change: Option<&SourceChange>,
        now: Instant,
    ) -> Gating {
        let source = trigger.source();
        // Its Event is said again each period while it holds; its notice once.
        let begins = !self.held.contains_key(&(workload.clone(), source.clone()));
        match FlapGuard::admit(self, workload, trigger, now) {
            Admission::Roll => Gating::Pass,
            Admission::Hold { announce: false } => Gating::Hold { event: None },
            Admission::Hold { announce: true } => {
                let FlapLimits { limit, period } = self.limits;
                warn!(workload = %workload, %source, limit, period = ?period,
                    "flap guard: stopped rolling it until the source is quiet");
                let event = event::flap_guard(workload, None, &source, limit, period);
                if begins {
                    let reason = event.message.clone().unwrap_or_default();
                    let said = notice::about(NoticeKind::Held, workload, Some(&source), reason);
                    self.notices.push(said);
                }
                Gating::Hold { event: Some(Box::new(event)) }
            }
        }
    }

    fn rolled(
        &mut self,
        workload: &WorkloadKey,
        triggers: &BTreeSet<Trigger>,
        _generation: Option<i64>,
        now: Instant,
    ) {
        FlapGuard::rolled(self, workload, triggers, now);
    }

    fn release(&mut self, now: Instant) -> Vec<Released> {
        let period = self.limits.period;
        let mut released = Vec::new();
        for (workload, source) in FlapGuard::release(self, now) {
            info!(workload = %workload, %source, "quiet for a flap period: rolling it again");
            let event = event::flap_guard_released(&workload, None, &source, period);
            let reason = event.message.clone().unwrap_or_default();
            let kind = NoticeKind::Released;
            self.notices.push(notice::about(kind, &workload, Some(&source), reason));
            released.push(Released {
                workload,
                trigger: Trigger::Quiet(source),
                event: Some(event),
            });
        }
        released
    }

    fn notices(&mut self) -> Vec<Notice> {
        std::mem::take(&mut self.notices)
    }

    fn next_release(&self) -> Option<Instant> {
        FlapGuard::next_release(self)
    }

    fn verdict(&self, workload: &WorkloadKey) -> Option<Verdict> {
        self.is_held(workload).then_some(Verdict::Held)
    }

    fn forget(&mut self, workload: &WorkloadKey) {
        FlapGuard::forget(self, workload);
    }
}

fn prune(rolls: &mut VecDeque<Instant>, now: Instant, period: Duration) {
    while rolls.front().is_some_and(|at| now.saturating_duration_since(*at) >= period) {
        rolls.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ObjectRef;
    use crate::core::model::kinds::WorkloadKind;

    fn web() -> WorkloadKey {
        WorkloadKey { kind: WorkloadKind::Deployment, namespace: "ns".into(), name: "web".into() }
    }

    fn secret(name: &str) -> Trigger {
        Trigger::Object(ObjectRef::secret(name))
    }

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn a_source_that_rolls_a_workload_past_the_limit_is_held_until_quiet() {
        let limits = FlapLimits { limit: 3, period: 10 * MINUTE };
        let mut guard = FlapGuard::new(limits);
        let start = Instant::now();
        let (db, other) = (secret("db"), secret("other"));
        for i in 0..3 {
            let now = start + MINUTE * i;
            assert_eq!(guard.admit(&web(), &db, now), Admission::Roll, "roll {i}");
            guard.rolled(&web(), [&db], now);
        }
        let fourth = start + 3 * MINUTE;
        assert_eq!(guard.admit(&web(), &db, fourth), Admission::Hold { announce: true });
        assert_eq!(guard.admit(&web(), &db, fourth + MINUTE), Admission::Hold { announce: false });
        assert_eq!(guard.admit(&web(), &other, fourth), Admission::Roll, "per source");
        assert!(guard.is_held(&web()));
        assert_eq!(guard.held_workloads(), 1);
        assert_eq!(guard.held_sources(&web()), ["secret/db"]);

        // Quiet for a period from the last trigger seen while held: released, once.
        let last = fourth + MINUTE;
        assert_eq!(guard.next_release(), Some(last + 10 * MINUTE));
        assert!(guard.release(last + 10 * MINUTE - Duration::from_secs(1)).is_empty());
        let released = guard.release(last + 10 * MINUTE);
        assert_eq!(released, [(web(), "secret/db".to_owned())]);
        assert!(!guard.is_held(&web()));
        assert_eq!(guard.admit(&web(), &db, last + 10 * MINUTE), Admission::Roll, "history reset");
    }

    #[test]
    fn a_hold_that_lasts_is_announced_again_once_a_period() {
        let mut guard = FlapGuard::new(FlapLimits { limit: 1, period: 10 * MINUTE });
        let (start, db) = (Instant::now(), secret("db"));
        assert_eq!(guard.admit(&web(), &db, start), Admission::Roll);
        guard.rolled(&web(), [&db], start);
        let announced: Vec<bool> = (1..=25)
            .map(|minute| match guard.admit(&web(), &db, start + MINUTE * minute) {
                Admission::Hold { announce } => announce,
                Admission::Roll => panic!("still flapping at minute {minute}"),
            })
            .collect();
        let at: Vec<usize> =
            announced.iter().enumerate().filter(|(_, a)| **a).map(|(i, _)| i + 1).collect();
        assert_eq!(at, [1, 11, 21], "held at minute 1, then once every ten minutes");
    }

    #[test]
    fn rolls_older_than_the_period_do_not_count_and_zero_turns_it_off() {
        let mut guard = FlapGuard::new(FlapLimits { limit: 2, period: 10 * MINUTE });
        let start = Instant::now();
        let db = secret("db");
        // Two rolls every eleven minutes never reach two within ten.
        for i in 0..10 {
            let now = start + 11 * MINUTE * i;
            assert_eq!(guard.admit(&web(), &db, now), Admission::Roll, "roll {i}");
            guard.rolled(&web(), [&db], now);
        }
        let mut off = FlapGuard::new(FlapLimits { limit: 0, period: 10 * MINUTE });
        for i in 0..100 {
            assert_eq!(off.admit(&web(), &db, start + Duration::from_secs(i)), Admission::Roll);
            off.rolled(&web(), [&db], start + Duration::from_secs(i));
        }
        assert_eq!(off.held_workloads(), 0);
    }
}
