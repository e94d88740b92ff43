//! One change's fan-out (docs/behaviour.md, "Rolling safely"): the workloads that one new
//! content of one source made due roll in waves. Wave 1 holds the canaries (workloads
//! annotated `configsum.dev/canary: "true"`), else one workload; each next wave is twice the
//! previous one, at most `--max-wave`. A wave starts only once every workload of the one
//! before has completed its rollout; a workload that fails, or is not complete within
//! `--wave-timeout` of its patch, halts the change, and nothing more of it rolls until that
//! workload completes after all or an operator resumes the change.
//!
//! Pure and small: which workloads are released, and when, from the health the caller
//! reports and the caller's clock. The caller persists what a new leader needs in the rolled
//! workloads themselves (the wave and the patch time ride in the roll's own patch) and hands
//! it back through [`FanOut::restore`], so that a fan-out continues where it stood.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;

use crate::controller::model::workload::WorkloadKey;
pub use crate::core::rollout_health::Health;

/// A workload one change made due.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub workload: WorkloadKey,
    /// Annotated `configsum.dev/canary: "true"`: it rolls in wave 1.
    pub canary: bool,
}

/// Why a change is halted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HaltCause {
    Failed(String),
    /// Not complete within `--wave-timeout` of its patch.
    Timeout,
}

/// A halted change: the workload that stopped it, why, and how many wait behind it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Halt {
    pub failing: WorkloadKey,
    pub cause: HaltCause,
    /// Members not yet released.
    pub waiting: usize,
}

/// What [`FanOut::step`] decided at one instant.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// Workloads to roll now, each with its wave (1-based).
    pub release: Vec<(WorkloadKey, u32)>,
    /// Set while the change is halted.
    pub halt: Option<Halt>,
    /// A wave just completed (every member complete): its number.
    pub completed: Option<u32>,
    /// Every member released and the last wave complete: the fan-out can be dropped.
    pub done: bool,
}

#[derive(Debug)]
pub struct FanOut {
    /// The rollout order: canaries, then the others by namespace, kind and name.
    order: Vec<WorkloadKey>,
    /// The same members, to answer membership without a walk (asked for every workload the
    /// watch delivers while the change rolls).
    members: HashSet<WorkloadKey>,
    /// The wave of each released member: `order[..waves.len()]` are released.
    waves: Vec<u32>,
    /// The size of wave 1.
    first: usize,
    max_wave: usize,
    /// The current wave (0 before the first) and where it ends in `order`.
    wave: u32,
    wave_end: usize,
    /// The last wave reported complete.
    completed: u32,
    /// When each released member was patched (absent: released, not patched yet).
    patched: HashMap<WorkloadKey, Instant>,
    /// Members that left the change (deleted, out of scope): they hold nothing.
    left: BTreeSet<WorkloadKey>,
    /// Members an operator excused (`configsum.dev/resume`): they hold nothing either.
    excused: BTreeSet<WorkloadKey>,
    /// When the current wave's earliest rollout still under way times out, as the last step
    /// saw it: a complete or halted member has none, so the caller never wakes for a past one.
    deadline: Option<Instant>,
}

impl FanOut {
    /// The fan-out of `members` (in any order; a workload listed twice counts once).
    pub fn new(members: Vec<Member>, max_wave: usize) -> FanOut {
        let canaries: BTreeSet<WorkloadKey> =
            members.iter().filter(|m| m.canary).map(|m| m.workload.clone()).collect();
        let others: BTreeSet<WorkloadKey> =
            members.into_iter().map(|m| m.workload).filter(|w| !canaries.contains(w)).collect();
        let first = canaries.len().max(1);
        let mut order: Vec<WorkloadKey> = canaries.into_iter().collect();
        order.sort_by(rollout_order);
        let mut others: Vec<WorkloadKey> = others.into_iter().collect();
        others.sort_by(rollout_order);
        order.extend(others);
        FanOut {
            members: order.iter().cloned().collect(),
            order,
            waves: Vec::new(),
            first,
            max_wave: max_wave.max(1),
            wave: 0,
            wave_end: 0,
            completed: 0,
            patched: HashMap::new(),
            left: BTreeSet::new(),
            excused: BTreeSet::new(),
            deadline: None,
        }
    }

    /// Every member, in rollout order.
    pub fn members(&self) -> &[WorkloadKey] {
        &self.order
    }

    pub fn is_member(&self, workload: &WorkloadKey) -> bool {
        self.members.contains(workload)
    }

    /// The wave `workload` rolls (or rolled) in, once released.
    pub fn wave_of(&self, workload: &WorkloadKey) -> Option<u32> {
        let at = self.order[..self.released()].iter().position(|w| w == workload)?;
        self.waves.get(at).copied()
    }

    /// The wave each member would roll in if every wave completed: what the dry run reports.
    pub fn plan(&self) -> Vec<(WorkloadKey, u32)> {
        let (mut wave, mut end) = (1, self.first);
        let mut out = Vec::with_capacity(self.order.len());
        for (at, workload) in self.order.iter().enumerate() {
            if at >= end {
                wave += 1;
                end = end.saturating_add(self.size_of(wave));
            }
            out.push((workload.clone(), wave));
        }
        out
    }

    /// `workload` became due for this change after the fan-out formed (an image tag resolved
    /// for another namespace's pull credentials, a workload created since): it joins the
    /// members not yet released, in rollout order, never the wave under way.
    pub fn join(&mut self, workload: WorkloadKey) {
        if !self.members.insert(workload.clone()) {
            return;
        }
        let from = self.released().max(self.wave_end).min(self.order.len());
        let at = self.order[from..]
            .iter()
            .position(|w| rollout_order(&workload, w).is_lt())
            .map_or(self.order.len(), |i| from + i);
        self.order.insert(at, workload);
    }

    /// Releases every member at once, each in the wave it would roll in: a dry run, which
    /// waits for no rollout.
    pub fn release_all(&mut self) -> Vec<(WorkloadKey, u32)> {
        let plan = self.plan();
        self.waves = plan.iter().map(|(_, wave)| *wave).collect();
        self.wave = self.waves.last().copied().unwrap_or(0);
        self.wave_end = self.order.len();
        plan
    }

    /// Adds `workload`, rolled in this change before this leader and not due any more, so
    /// that [`FanOut::restore`] can place it in its wave.
    pub fn add_rolled(&mut self, workload: WorkloadKey) {
        if self.members.insert(workload.clone()) {
            self.order.push(workload);
        }
    }

    /// A new leader's account of a member rolled before it: in `wave`, patched at `at`.
    /// Call before the first [`FanOut::step`]: members restored move to the front, by wave,
    /// and the fan-out goes on with the last wave they reached (the rest of it first).
    pub fn restore(&mut self, workload: &WorkloadKey, wave: u32, at: Instant) {
        let wave = wave.max(1);
        let Some(from) = self.order.iter().position(|w| w == workload) else { return };
        if from < self.released() {
            return;
        }
        let member = self.order.remove(from);
        let slot = self.waves.iter().position(|&w| w > wave).unwrap_or(self.waves.len());
        self.order.insert(slot, member.clone());
        self.waves.insert(slot, wave);
        self.patched.insert(member, at);
        self.wave = self.wave.max(wave);
        self.completed = self.wave - 1;
        let end = self.cumulative(self.wave).min(self.order.len());
        self.wave_end = end.max(self.released());
    }

    /// `workload` was patched at `now`: its wave's timeout counts from here.
    pub fn patched(&mut self, workload: &WorkloadKey, now: Instant) {
        if self.wave_of(workload).is_some() {
            self.patched.entry(workload.clone()).or_insert(now);
        }
    }

    /// Whether `workload`'s patch in this change was reported.
    pub fn was_patched(&self, workload: &WorkloadKey) -> bool {
        self.patched.contains_key(workload)
    }

    /// `workload` left the change (deleted, out of scope, or due no more): it holds nothing.
    pub fn leave(&mut self, workload: &WorkloadKey) {
        if self.is_member(workload) {
            self.left.insert(workload.clone());
        }
    }

    /// An operator resumed the change halted by `workload`: it holds nothing more.
    pub fn excuse(&mut self, workload: &WorkloadKey) {
        if self.is_member(workload) {
            self.excused.insert(workload.clone());
        }
    }

    /// What to do at `now`, with each patched member's health as `health` reports it: judged
    /// on the workload as it stands after its patch (a status read before the patch landed
    /// would call the old template's rollout complete), `Progressing` until the watch shows it.
    pub fn step(
        &mut self,
        health: impl Fn(&WorkloadKey) -> Health,
        now: Instant,
        timeout: Duration,
    ) -> Step {
        let mut step = Step::default();
        self.deadline = None;
        if self.wave == 0 {
            self.open_wave();
        }
        // The first wave, or the rest of one a new leader found partly rolled.
        if self.released() < self.wave_end {
            self.release_to_wave_end(&mut step);
            return step;
        }
        // Any failure halts, wherever it sits in the wave; else any rollout under way waits.
        let mut complete = true;
        let mut deadline = None;
        for (workload, _) in self.current_wave() {
            if self.left.contains(workload) || self.excused.contains(workload) {
                continue;
            }
            // Released, still waiting for its window or the worker.
            let Some(patched) = self.patched.get(workload) else {
                complete = false;
                continue;
            };
            let cause = match health(workload) {
                Health::Complete => continue,
                Health::Failed { reason } => Some(HaltCause::Failed(reason)),
                Health::Progressing => (now.saturating_duration_since(*patched) >= timeout)
                    .then_some(HaltCause::Timeout),
            };
            complete = false;
            if let Some(cause) = cause {
                let waiting = self.waiting();
                step.halt = Some(Halt { failing: workload.clone(), cause, waiting });
                return step;
            }
            let due = *patched + timeout;
            deadline = Some(deadline.map_or(due, |d: Instant| d.min(due)));
        }
        if !complete {
            self.deadline = deadline;
            return step;
        }
        if self.completed < self.wave {
            self.completed = self.wave;
            step.completed = Some(self.wave);
        }
        if self.released() == self.order.len() {
            step.done = true;
            return step;
        }
        self.open_wave();
        self.release_to_wave_end(&mut step);
        step
    }

    /// Members not yet released (those that left aside).
    pub fn waiting(&self) -> usize {
        self.order[self.released()..].iter().filter(|w| !self.left.contains(*w)).count()
    }

    /// The current wave: 0 before the first.
    pub fn wave(&self) -> u32 {
        self.wave
    }

    /// When a wave timeout falls due, so that the caller steps again then: the earliest patch
    /// plus `--wave-timeout` among the current wave's rollouts still under way at the last
    /// step (none while halted, or once they completed).
    pub fn next_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    fn released(&self) -> usize {
        self.waves.len()
    }

    fn current_wave(&self) -> impl Iterator<Item = (&WorkloadKey, u32)> {
        let wave = self.wave;
        self.order.iter().zip(self.waves.iter().copied()).filter(move |(_, w)| *w == wave)
    }

    fn open_wave(&mut self) {
        self.wave += 1;
        self.wave_end =
            self.released().saturating_add(self.size_of(self.wave)).min(self.order.len());
    }

    fn release_to_wave_end(&mut self, step: &mut Step) {
        while self.released() < self.wave_end {
            let workload = self.order[self.released()].clone();
            self.waves.push(self.wave);
            if !self.left.contains(&workload) {
                step.release.push((workload, self.wave));
            }
        }
    }

    /// The size of `wave` (1-based): all canaries (or one workload) first, then twice the
    /// previous wave, at most `--max-wave`.
    fn size_of(&self, wave: u32) -> usize {
        if wave <= 1 {
            return self.first;
        }
        let factor = 1usize.checked_shl(wave - 1).unwrap_or(usize::MAX);
        self.first.saturating_mul(factor).min(self.max_wave)
    }

    /// How many members waves 1 to `wave` hold together.
    fn cumulative(&self, wave: u32) -> usize {
        (1..=wave).fold(0usize, |sum, w| sum.saturating_add(self.size_of(w)))
    }
}

/// Namespace, kind (its Kind string), name.
fn rollout_order(a: &WorkloadKey, b: &WorkloadKey) -> std::cmp::Ordering {
    (&*a.namespace, a.kind.as_str(), &*a.name).cmp(&(&*b.namespace, b.kind.as_str(), &*b.name))
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use proptest::prelude::*;

    use super::*;
    use crate::core::WorkloadKind;

    const TIMEOUT: Duration = Duration::from_secs(600);

    fn key(namespace: &str, kind: WorkloadKind, name: &str) -> WorkloadKey {
        WorkloadKey { kind, namespace: namespace.into(), name: name.into() }
    }

    fn deployments(n: usize) -> Vec<Member> {
        let name = |i: usize| format!("app-{i:02}");
        let member =
            |i| Member { workload: key("ns", WorkloadKind::Deployment, &name(i)), canary: false };
        (0..n).map(member).collect()
    }

    /// Runs `fan_out` with every patched member complete at once; the waves' sizes.
    fn wave_sizes(fan_out: &mut FanOut) -> Vec<usize> {
        let now = Instant::now();
        let mut sizes = Vec::new();
        loop {
            let step = fan_out.step(|_| Health::Complete, now, TIMEOUT);
            if step.done {
                return sizes;
            }
            assert!(!step.release.is_empty(), "a complete wave releases the next");
            sizes.push(step.release.len());
            for (workload, _) in &step.release {
                fan_out.patched(workload, now);
            }
        }
    }

    #[test]
    fn eight_workloads_roll_in_waves_of_one_two_four_and_one() {
        assert_eq!(wave_sizes(&mut FanOut::new(deployments(8), 50)), [1, 2, 4, 1]);
        assert_eq!(wave_sizes(&mut FanOut::new(deployments(1), 50)), [1]);
        assert_eq!(wave_sizes(&mut FanOut::new(deployments(40), 50)), [1, 2, 4, 8, 16, 9]);
        assert_eq!(wave_sizes(&mut FanOut::new(deployments(20), 5)), [1, 2, 4, 5, 5, 3]);
        assert_eq!(wave_sizes(&mut FanOut::new(deployments(3), 1)), [1, 1, 1]);
    }

    #[test]
    fn canaries_make_the_first_wave_and_the_rest_goes_by_namespace_kind_and_name() {
        let mut members = vec![
            Member { workload: key("b", WorkloadKind::Deployment, "web"), canary: false },
            Member { workload: key("a", WorkloadKind::StatefulSet, "db"), canary: false },
            Member { workload: key("a", WorkloadKind::Deployment, "zed"), canary: false },
            Member { workload: key("c", WorkloadKind::Deployment, "edge"), canary: true },
            Member { workload: key("b", WorkloadKind::DaemonSet, "agent"), canary: true },
        ];
        members.push(members[0].clone());
        let fan_out = FanOut::new(members, 50);
        let plan: Vec<(String, u32)> =
            fan_out.plan().into_iter().map(|(w, wave)| (w.to_string(), wave)).collect();
        let expected = [
            ("DaemonSet b/agent", 1),
            ("Deployment c/edge", 1),
            ("Deployment a/zed", 2),
            ("StatefulSet a/db", 2),
            ("Deployment b/web", 2),
        ];
        let expected: Vec<(String, u32)> =
            expected.iter().map(|(w, wave)| (w.to_string(), *wave)).collect();
        assert_eq!(plan, expected, "two canaries, then twice as many; a duplicate counts once");
    }

    #[test]
    fn the_next_wave_waits_for_every_patch_and_every_rollout_of_the_current_one() {
        let members = deployments(4);
        let (a, b, c) = (&members[0].workload, &members[1].workload, &members[2].workload);
        let mut fan_out = FanOut::new(members.clone(), 50);
        let now = Instant::now();
        let step = fan_out.step(|_| Health::Complete, now, TIMEOUT);
        assert_eq!(step.release, [(a.clone(), 1)]);
        // Released but not patched yet (its window): the wave is not complete.
        assert_eq!(fan_out.step(|_| Health::Complete, now, TIMEOUT), Step::default());
        fan_out.patched(a, now);
        assert_eq!(fan_out.step(|_| Health::Progressing, now, TIMEOUT), Step::default());
        let step = fan_out.step(|_| Health::Complete, now, TIMEOUT);
        assert_eq!(step.completed, Some(1));
        assert_eq!(step.release, [(b.clone(), 2), (c.clone(), 2)]);
        fan_out.patched(b, now);
        fan_out.patched(c, now);
        let only_b = |w: &WorkloadKey| if w == b { Health::Complete } else { Health::Progressing };
        assert_eq!(fan_out.step(only_b, now, TIMEOUT), Step::default(), "c is still rolling");
        assert_eq!(fan_out.wave_of(c), Some(2));
        assert_eq!(fan_out.wave_of(&members[3].workload), None, "not released");
        assert_eq!(fan_out.waiting(), 1);
    }

    #[test]
    fn a_failure_halts_and_the_change_goes_on_when_the_workload_recovers() {
        let members = deployments(4);
        let (a, b) = (&members[0].workload, &members[1].workload);
        let mut fan_out = FanOut::new(members.clone(), 50);
        let now = Instant::now();
        fan_out.step(|_| Health::Complete, now, TIMEOUT);
        fan_out.patched(a, now);
        let failed = |_: &WorkloadKey| Health::Failed { reason: "ProgressDeadlineExceeded".into() };
        let step = fan_out.step(failed, now, TIMEOUT);
        let halt = Halt {
            failing: a.clone(),
            cause: HaltCause::Failed("ProgressDeadlineExceeded".into()),
            waiting: 3,
        };
        assert_eq!(step, Step { halt: Some(halt), ..Step::default() });
        // Fixed by other means: it completes after all, and the next wave goes.
        let step = fan_out.step(|_| Health::Complete, now, TIMEOUT);
        assert_eq!(step.release.first(), Some(&(b.clone(), 2)));
    }

    #[test]
    fn an_operator_resumes_a_halted_change_past_the_failing_workload() {
        let members = deployments(3);
        let a = &members[0].workload;
        let mut fan_out = FanOut::new(members.clone(), 50);
        let now = Instant::now();
        fan_out.step(|_| Health::Complete, now, TIMEOUT);
        fan_out.patched(a, now);
        let failed = |_: &WorkloadKey| Health::Failed { reason: "Degraded".into() };
        assert!(fan_out.step(failed, now, TIMEOUT).halt.is_some());
        fan_out.excuse(a);
        let step = fan_out.step(failed, now, TIMEOUT);
        assert_eq!(step.halt, None);
        assert_eq!(step.release.len(), 2, "wave 2, at its size");
        assert!(step.release.iter().all(|(w, wave)| w != a && *wave == 2), "never a again");
    }

    #[test]
    fn a_wave_past_its_timeout_halts_and_completing_late_resumes_it() {
        let members = deployments(2);
        let (a, b) = (&members[0].workload, &members[1].workload);
        let mut fan_out = FanOut::new(members.clone(), 50);
        let start = Instant::now();
        fan_out.step(|_| Health::Complete, start, TIMEOUT);
        let patched_at = start + Duration::from_secs(5);
        fan_out.patched(a, patched_at);
        let before = patched_at + TIMEOUT - Duration::from_millis(1);
        assert_eq!(fan_out.step(|_| Health::Progressing, before, TIMEOUT), Step::default());
        assert_eq!(fan_out.next_timeout(), Some(patched_at + TIMEOUT), "wake for the timeout");
        let step = fan_out.step(|_| Health::Progressing, patched_at + TIMEOUT, TIMEOUT);
        let halt = step.halt.expect("halted");
        assert_eq!((halt.failing, halt.cause, halt.waiting), (a.clone(), HaltCause::Timeout, 1));
        assert_eq!(fan_out.next_timeout(), None, "halted: no timeout to wake for, past or not");
        let later = patched_at + TIMEOUT * 2;
        assert_eq!(fan_out.step(|_| Health::Complete, later, TIMEOUT).release, [(b.clone(), 2)]);
    }

    #[test]
    fn a_complete_rollout_past_its_timeout_is_no_deadline_while_another_rolls() {
        let members = deployments(3);
        let (b, c) = (&members[1].workload, &members[2].workload);
        let mut fan_out = FanOut::new(members.clone(), 50);
        let start = Instant::now();
        fan_out.step(|_| Health::Complete, start, TIMEOUT);
        fan_out.patched(&members[0].workload, start);
        fan_out.step(|_| Health::Complete, start, TIMEOUT);
        // Wave 2: b patched at once and complete; c patched late (paced) and still rolling.
        let late = start + TIMEOUT / 2;
        fan_out.patched(b, start);
        fan_out.patched(c, late);
        let health = |w: &WorkloadKey| if w == c { Health::Progressing } else { Health::Complete };
        let after_b = start + TIMEOUT + Duration::from_secs(1);
        assert_eq!(fan_out.step(health, after_b, TIMEOUT), Step::default());
        assert_eq!(fan_out.next_timeout(), Some(late + TIMEOUT), "c's, never b's past one");
    }

    #[test]
    fn a_late_member_joins_a_later_wave_in_order() {
        let members = deployments(3);
        let mut fan_out = FanOut::new(members.clone(), 50);
        let now = Instant::now();
        let first = fan_out.step(|_| Health::Complete, now, TIMEOUT);
        assert_eq!(first.release.len(), 1);
        fan_out.patched(&members[0].workload, now);
        // Before the rest: another namespace's workload, due for the same change, arrives.
        let late = WorkloadKey { namespace: "aaa".into(), ..members[2].workload.clone() };
        fan_out.join(late.clone());
        fan_out.join(late.clone());
        assert_eq!(fan_out.waiting(), 3, "once");
        let second = fan_out.step(|_| Health::Complete, now, TIMEOUT);
        let released: Vec<&WorkloadKey> = second.release.iter().map(|(w, _)| w).collect();
        assert_eq!(released, [&late, &members[1].workload], "wave 2, in namespace order");
    }

    #[test]
    fn a_member_that_left_holds_nothing() {
        let members = deployments(3);
        let (a, b) = (&members[0].workload, &members[1].workload);
        let mut fan_out = FanOut::new(members.clone(), 50);
        let now = Instant::now();
        fan_out.step(|_| Health::Complete, now, TIMEOUT);
        // Deleted before its patch: the wave does not wait for it.
        fan_out.leave(a);
        let step = fan_out.step(|_| Health::Progressing, now, TIMEOUT);
        assert_eq!(step.release.len(), 2);
        fan_out.leave(b);
        assert_eq!(fan_out.waiting(), 0);
    }

    #[test]
    fn a_new_leader_goes_on_with_the_wave_it_finds_and_rolls_nobody_twice() {
        let members = deployments(8);
        let w = |i: usize| members[i].workload.clone();
        let now = Instant::now();
        // The old leader rolled app-00 in wave 1 and app-01 in wave 2, then stopped before
        // app-02, the rest of wave 2.
        let mut fan_out = FanOut::new(members.clone(), 50);
        fan_out.restore(&w(1), 2, now);
        fan_out.restore(&w(0), 1, now);
        fan_out.restore(&w(0), 1, now);
        fan_out.restore(&key("ns", WorkloadKind::Deployment, "stranger"), 1, now);
        let step = fan_out.step(|_| Health::Complete, now, TIMEOUT);
        assert_eq!(step.release, [(w(2), 2)], "the rest of wave 2, without its health gate");
        fan_out.patched(&w(2), now);
        let step = fan_out.step(|_| Health::Progressing, now, TIMEOUT);
        assert_eq!(step, Step::default(), "wave 2 is gated as a whole");
        let step = fan_out.step(|_| Health::Complete, now, TIMEOUT);
        assert_eq!(
            step.release.iter().map(|(w, _)| w.clone()).collect::<Vec<_>>(),
            [3, 4, 5, 6].map(w)
        );
        assert!(step.release.iter().all(|(_, wave)| *wave == 3));
    }

    #[test]
    fn a_new_leader_finds_a_halted_change_halted() {
        let members = deployments(8);
        let w = |i: usize| members[i].workload.clone();
        let now = Instant::now();
        let mut fan_out = FanOut::new(members.clone(), 50);
        for (i, wave) in [(0, 1), (1, 2), (2, 2)] {
            fan_out.restore(&w(i), wave, now);
        }
        let failing = |x: &WorkloadKey| {
            if *x == w(2) {
                Health::Failed { reason: "ProgressDeadlineExceeded".into() }
            } else {
                Health::Complete
            }
        };
        let step = fan_out.step(failing, now, TIMEOUT);
        assert!(step.release.is_empty());
        let halt = step.halt.expect("still halted");
        assert_eq!((halt.failing, halt.waiting), (w(2), 5));
    }

    /// Each member's rollout: complete, or failed.
    fn outcomes() -> impl Strategy<Value = (Vec<(bool, bool)>, usize)> {
        (prop::collection::vec((any::<bool>(), prop::bool::weighted(0.1)), 1..60), 1usize..12)
    }

    proptest! {
        /// Every member rolls exactly once unless the change halts; nothing of a wave after
        /// the failing one rolls; no wave starts before every member of the one before was
        /// patched and complete.
        #[test]
        fn waves_roll_everyone_once_in_order_and_stop_at_a_failure((members, max_wave) in outcomes()) {
            let keys: Vec<WorkloadKey> = (0..members.len())
                .map(|i| key(&format!("ns-{}", i % 3), WorkloadKind::Deployment, &format!("w-{i}")))
                .collect();
            let fails: HashSet<WorkloadKey> = keys.iter().zip(&members).filter(|(_, m)| m.1).map(|(k, _)| k.clone()).collect();
            let list = keys.iter().zip(&members).map(|(k, m)| Member { workload: k.clone(), canary: m.0 }).collect();
            let mut fan_out = FanOut::new(list, max_wave);
            let now = Instant::now();
            let mut rolled: Vec<(WorkloadKey, u32)> = Vec::new();
            let mut halted = None;
            for _ in 0..200 {
                let health = |w: &WorkloadKey| if fails.contains(w) { Health::Failed { reason: "x".into() } } else { Health::Complete };
                let step = fan_out.step(health, now, TIMEOUT);
                if let Some(halt) = step.halt {
                    prop_assert!(fails.contains(&halt.failing));
                    halted = Some(halt);
                    break;
                }
                if step.done { break }
                for (workload, wave) in &step.release {
                    prop_assert!(!rolled.iter().any(|(w, _)| w == workload), "rolled twice");
                    // Every member of the previous wave was patched and complete.
                    for (earlier, earlier_wave) in &rolled {
                        prop_assert!(*earlier_wave <= *wave);
                        if *earlier_wave + 1 == *wave {
                            prop_assert!(!fails.contains(earlier));
                        }
                    }
                    fan_out.patched(workload, now);
                }
                rolled.extend(step.release);
            }
            match halted {
                None => {
                    prop_assert!(fails.is_empty());
                    prop_assert_eq!(rolled.len(), keys.len(), "everyone, once");
                }
                Some(halt) => {
                    let failing_wave = fan_out.wave_of(&halt.failing).expect("released");
                    prop_assert!(rolled.iter().all(|(_, wave)| *wave <= failing_wave));
                    prop_assert_eq!(halt.waiting, keys.len() - rolled.len());
                }
            }
            // The plan agrees with the waves rolled.
            let plan: HashMap<WorkloadKey, u32> = fan_out.plan().into_iter().collect();
            for (workload, wave) in &rolled {
                prop_assert_eq!(plan.get(workload), Some(wave));
            }
        }
    }
}
