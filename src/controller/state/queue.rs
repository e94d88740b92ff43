//! The work queue: when each workload is reconciled — its coalescing window, the worker it
//! waits for, a newer snapshot it waits for (after a conflict, or while the watch has not
//! delivered this replica's own patch), retries with backoff after a failure, its minimum
//! interval between patches, and the leadership term the work belongs to. Pure: the caller
//! passes the clock and the jitter.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;

use super::pacing::{Coalescer, MinInterval};
use crate::controller::model::backoff;
use crate::controller::model::trigger::Trigger;
use crate::controller::model::work::{Due, ReconcileResult, Reconciled};
use crate::controller::model::workload::WorkloadKey;
#[cfg(test)]
use crate::core::ObjectRef;

/// How long work waits for the watch to deliver a newer snapshot than the one it would be
/// judged on, before it is judged on what there is.
pub const SNAPSHOT_WAIT: Duration = Duration::from_secs(2);

/// Work that waits for a newer snapshot of its workload than `older_than`.
#[derive(Debug)]
struct Held {
    due: Due,
    older_than: Option<String>,
    until: Instant,
}

#[derive(Debug)]
pub struct WorkQueue {
    /// The term this replica leads in; `None` while following.
    term: Option<u64>,
    coalescer: Coalescer<WorkloadKey>,
    /// What changed for each workload waiting for its window or the worker.
    triggers: HashMap<WorkloadKey, BTreeSet<Trigger>>,
    /// Work waiting for a retry or the end of its minimum interval.
    later: Vec<(Instant, Due)>,
    /// Handed out and not finished: with the worker, or held for a newer snapshot.
    in_flight: HashSet<WorkloadKey>,
    held: HashMap<WorkloadKey, Held>,
    /// Admitted after a reconciliation ended (it came due meanwhile): handed out next.
    ready: Vec<Due>,
    /// Came due while in flight: due again when that ends.
    after_worker: HashMap<WorkloadKey, Instant>,
    failures: HashMap<WorkloadKey, u32>,
    min_interval: MinInterval<WorkloadKey>,
}

impl WorkQueue {
    pub fn new(window: Duration, min_interval: Duration) -> Self {
        WorkQueue {
            term: None,
            coalescer: Coalescer::new(window),
            triggers: HashMap::new(),
            later: Vec::new(),
            in_flight: HashSet::new(),
            held: HashMap::new(),
            ready: Vec::new(),
            after_worker: HashMap::new(),
            failures: HashMap::new(),
            min_interval: MinInterval::new(min_interval),
        }
    }

    /// Holds handed-out work until the watch delivers a newer snapshot of its workload than
    /// `older_than`, or [`SNAPSHOT_WAIT`] passes.
    pub fn hold(&mut self, due: Due, older_than: Option<String>, now: Instant) {
        let until = now + SNAPSHOT_WAIT;
        self.held.insert(due.key.clone(), Held { due, older_than, until });
    }

    /// Held work to hand out again: its workload's snapshot (`version`: its resourceVersion,
    /// `None` if it is gone) moved on, or it waited long enough.
    pub fn take_released(
        &mut self,
        now: Instant,
        version: impl Fn(&WorkloadKey) -> Option<Option<String>>,
    ) -> Vec<Due> {
        let released: Vec<WorkloadKey> = self
            .held
            .iter()
            .filter(|(key, held)| {
                held.until <= now || version(key).is_none_or(|v| v != held.older_than)
            })
            .map(|(key, _)| key.clone())
            .collect();
        released.iter().filter_map(|key| self.held.remove(key)).map(|held| held.due).collect()
    }

    /// Leads in `term` (`None`: follows). Stepping down, or a new term, drops
    /// every waiting reconciliation: a follower patches nothing, and a new
    /// leader starts from what it reads.
    pub fn lead(&mut self, term: Option<u64>) {
        if term != self.term {
            self.coalescer.clear();
            self.triggers.clear();
            self.later.clear();
            self.after_worker.clear();
            let held = self.held.drain().map(|(key, _)| key);
            let ready = self.ready.drain(..).map(|due| due.key);
            for key in held.chain(ready) {
                self.in_flight.remove(&key);
            }
        }
        self.term = term;
    }

    /// The term this replica leads in, if it leads.
    pub fn term(&self) -> Option<u64> {
        self.term
    }

    /// `object` changed for `workload`: opens its window unless one is open.
    /// Ignored while following.
    #[cfg(test)]
    pub fn changed(&mut self, workload: WorkloadKey, object: &ObjectRef, now: Instant) {
        if self.term.is_none() {
            return;
        }
        self.triggered(workload, Trigger::Object(object.clone()), now);
    }

    /// `trigger` made `workload` due: opens its window unless one is open.
    /// Ignored while following.
    pub fn triggered(&mut self, workload: WorkloadKey, trigger: Trigger, now: Instant) {
        if self.term.is_none() {
            return;
        }
        self.triggers.entry(workload.clone()).or_default().insert(trigger);
        self.coalescer.changed(workload, now);
    }

    /// Whether `workload` waits for its window, the worker or a retry.
    pub fn is_pending(&self, workload: &WorkloadKey) -> bool {
        self.triggers.contains_key(workload)
            || self.in_flight.contains(workload)
            || self.later.iter().any(|(_, work)| work.key == *workload)
    }

    /// Whether `workload` is being reconciled now (or waits for a newer snapshot to be).
    pub fn in_flight(&self, workload: &WorkloadKey) -> bool {
        self.in_flight.contains(workload)
    }

    /// The workload is gone, or out of scope.
    pub fn forget(&mut self, workload: &WorkloadKey) {
        self.coalescer.remove(workload);
        self.triggers.remove(workload);
        self.later.retain(|(_, w)| w.key != *workload);
        self.after_worker.remove(workload);
        self.failures.remove(workload);
        if self.held.remove(workload).is_some() {
            self.in_flight.remove(workload);
        }
        if let Some(at) = self.ready.iter().position(|due| due.key == *workload) {
            self.ready.swap_remove(at);
            self.in_flight.remove(workload);
        }
    }

    /// When something next comes due.
    pub fn next_due(&self) -> Option<Instant> {
        let later = self.later.iter().map(|(at, _)| *at).min();
        let held = self.held.values().map(|held| held.until).min();
        [self.coalescer.next_due(), later, held].into_iter().flatten().min()
    }

    /// The work to hand to the worker now, oldest window first.
    pub fn take_due(&mut self, now: Instant) -> Vec<Due> {
        let Some(term) = self.term else { return Vec::new() };
        let mut ready = std::mem::take(&mut self.ready);
        let (due, later): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.later).into_iter().partition(|(at, _)| *at <= now);
        self.later = later;
        let retries = due.into_iter().map(|(_, work)| work);
        let windows: Vec<Due> = self
            .coalescer
            .take_due(now)
            .into_iter()
            .map(|(key, opened)| {
                let triggers = self.triggers.remove(&key).unwrap_or_default();
                Due { key, triggers, opened, term, conflicts: 0 }
            })
            .collect();
        for work in retries.chain(windows) {
            if let Some(work) = self.admit(work, now) {
                ready.push(work);
            }
        }
        ready
    }

    /// Work goes to the worker unless that workload is there already (then
    /// it waits for it) or within its minimum interval (then it waits for that).
    fn admit(&mut self, work: Due, now: Instant) -> Option<Due> {
        if Some(work.term) != self.term {
            return None;
        }
        if self.in_flight.contains(&work.key) {
            let opened = self.after_worker.entry(work.key.clone()).or_insert(work.opened);
            *opened = (*opened).min(work.opened);
            self.triggers.entry(work.key).or_default().extend(work.triggers);
            return None;
        }
        let ready_at = self.min_interval.ready_at(&work.key, now);
        if ready_at > now {
            self.later.push((ready_at, work));
            return None;
        }
        self.in_flight.insert(work.key.clone());
        Some(work)
    }

    /// The worker finished `work`. Returns how long until its retry if it failed; the work
    /// that came due for the same workload meanwhile is due at the next [`Self::take_due`].
    /// A conflict is held for the next snapshot (the reconciler fails the last of
    /// [`CONFLICT_RETRIES`] in a row).
    pub fn done(
        &mut self,
        mut work: Due,
        result: &ReconcileResult,
        now: Instant,
        random: f64,
    ) -> Option<Duration> {
        if let Ok(Reconciled::Conflicted { from }) = result {
            if Some(work.term) == self.term {
                work.conflicts += 1;
                self.hold(work, from.clone(), now);
            } else {
                self.in_flight.remove(&work.key);
            }
            return None;
        }
        self.in_flight.remove(&work.key);
        let key = work.key.clone();
        let retry_in = match result {
            Ok(Reconciled::Patched { .. } | Reconciled::DryRun) => {
                self.min_interval.patched(key.clone(), now);
                self.failures.remove(&key);
                None
            }
            Ok(Reconciled::Unchanged | Reconciled::Gone) => {
                self.failures.remove(&key);
                None
            }
            Ok(Reconciled::NotLeading | Reconciled::Conflicted { .. }) => None,
            Err(_) => {
                let failures = self.failures.entry(key.clone()).or_default();
                *failures += 1;
                let wait = backoff::delay(*failures, random);
                if Some(work.term) == self.term {
                    work.conflicts = 0;
                    self.later.push((now + wait, work));
                }
                Some(wait)
            }
        };
        if let (Some(opened), Some(term)) = (self.after_worker.remove(&key), self.term) {
            let triggers = self.triggers.remove(&key).unwrap_or_default();
            let next = self.admit(Due { key, triggers, opened, term, conflicts: 0 }, now);
            self.ready.extend(next);
        }
        retry_in
    }

    /// Workloads waiting for their window, a retry, or the worker.
    pub fn depth(&self) -> usize {
        self.coalescer.len() + self.later.len() + self.in_flight.len() + self.after_worker.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::model::work::ReconcileError;
    use crate::core::model::kinds::WorkloadKind;

    const MS: Duration = Duration::from_millis(1);

    fn web() -> WorkloadKey {
        WorkloadKey { kind: WorkloadKind::Deployment, namespace: "ns".into(), name: "web".into() }
    }

    fn failed() -> ReconcileResult {
        Err(ReconcileError::Lookup("secret/db could not be read".into()))
    }

    #[test]
    fn changes_in_a_window_become_one_work_item_naming_every_object() {
        let t0 = Instant::now();
        let mut s = WorkQueue::new(500 * MS, Duration::ZERO);
        s.lead(Some(1));
        s.changed(web(), &ObjectRef::secret("db"), t0);
        s.changed(web(), &ObjectRef::config_map("app"), t0 + 100 * MS);
        assert!(s.take_due(t0 + 499 * MS).is_empty());
        assert_eq!(s.next_due(), Some(t0 + 500 * MS));
        let due = s.take_due(t0 + 500 * MS);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].opened, t0);
        assert_eq!(due[0].term, 1);
        assert_eq!(due[0].triggers.len(), 2);
        assert_eq!(s.depth(), 1, "in the worker");
    }

    #[test]
    fn a_follower_queues_nothing_and_stepping_down_drops_the_queue() {
        let t0 = Instant::now();
        let mut s = WorkQueue::new(10 * MS, Duration::ZERO);
        s.changed(web(), &ObjectRef::secret("db"), t0);
        assert_eq!(s.depth(), 0);
        s.lead(Some(1));
        s.changed(web(), &ObjectRef::secret("db"), t0);
        s.lead(None);
        assert!(s.take_due(t0 + 20 * MS).is_empty());
        assert_eq!(s.depth(), 0);
    }

    #[test]
    fn work_of_an_earlier_term_is_not_retried() {
        let t0 = Instant::now();
        let mut s = WorkQueue::new(Duration::ZERO, Duration::ZERO);
        s.lead(Some(1));
        s.changed(web(), &ObjectRef::secret("db"), t0);
        let work = s.take_due(t0).pop().expect("due");
        s.lead(Some(2));
        let retry_in = s.done(work, &failed(), t0, 0.0);
        assert_eq!(retry_in, Some(backoff::FIRST));
        assert!(s.take_due(t0 + Duration::from_secs(10)).is_empty(), "term 1's retry was dropped");
    }

    #[test]
    fn failures_retry_with_growing_backoff_and_success_resets_it() {
        let t0 = Instant::now();
        let mut s = WorkQueue::new(Duration::ZERO, Duration::ZERO);
        s.lead(Some(1));
        s.changed(web(), &ObjectRef::secret("db"), t0);
        let mut now = t0;
        let mut work = s.take_due(now).pop().expect("due");
        let mut waits = Vec::new();
        for _ in 0..4 {
            let retry_in = s.done(work, &failed(), now, 1.0);
            let wait = retry_in.expect("a failure is retried");
            waits.push(wait);
            assert!(s.take_due(now + wait - MS).is_empty(), "not before the backoff");
            now += wait;
            work = s.take_due(now).pop().expect("retried");
        }
        let secs: Vec<u64> = waits.iter().map(Duration::as_secs).collect();
        assert_eq!(secs, [1, 2, 4, 8]);
        let retry_in =
            s.done(work, &Ok(Reconciled::Patched { from: None, generation: None }), now, 1.0);
        assert_eq!(retry_in, None);
        s.changed(web(), &ObjectRef::secret("db"), now);
        let work = s.take_due(now).pop().expect("due");
        let retry_in = s.done(work, &failed(), now, 1.0);
        assert_eq!(retry_in, Some(backoff::FIRST), "reset by the success");
    }

    #[test]
    fn a_change_during_a_reconciliation_is_due_again_when_it_ends() {
        let t0 = Instant::now();
        let mut s = WorkQueue::new(Duration::ZERO, Duration::ZERO);
        s.lead(Some(1));
        s.changed(web(), &ObjectRef::secret("db"), t0);
        let first = s.take_due(t0).pop().expect("due");
        s.changed(web(), &ObjectRef::config_map("app"), t0 + MS);
        assert!(s.take_due(t0 + MS).is_empty(), "one reconciliation of a workload at a time");
        s.done(first, &Ok(Reconciled::Patched { from: None, generation: None }), t0 + 2 * MS, 0.0);
        let next = s.take_due(t0 + 2 * MS).pop().expect("due again");
        assert_eq!(next.opened, t0 + MS);
        assert!(next.triggers.contains(&Trigger::Object(ObjectRef::config_map("app"))));
    }

    #[test]
    fn the_minimum_interval_delays_a_second_patch() {
        let t0 = Instant::now();
        let mut s = WorkQueue::new(Duration::ZERO, Duration::from_secs(60));
        s.lead(Some(1));
        s.changed(web(), &ObjectRef::secret("db"), t0);
        let work = s.take_due(t0).pop().expect("due");
        s.done(work, &Ok(Reconciled::Patched { from: None, generation: None }), t0, 0.0);
        s.changed(web(), &ObjectRef::secret("db"), t0 + MS);
        assert!(s.take_due(t0 + MS).is_empty());
        assert_eq!(s.next_due(), Some(t0 + Duration::from_secs(60)));
        assert_eq!(s.take_due(t0 + Duration::from_secs(60)).len(), 1);
    }

    #[test]
    fn a_forgotten_workload_leaves_nothing_behind() {
        let t0 = Instant::now();
        let mut s = WorkQueue::new(10 * MS, Duration::ZERO);
        s.lead(Some(1));
        s.changed(web(), &ObjectRef::secret("db"), t0);
        s.forget(&web());
        assert!(s.take_due(t0 + 20 * MS).is_empty());
        assert_eq!(s.depth(), 0);
    }

    #[test]
    fn a_conflict_waits_for_the_next_snapshot_or_two_seconds() {
        let t0 = Instant::now();
        let mut s = WorkQueue::new(Duration::ZERO, Duration::ZERO);
        s.lead(Some(1));
        s.changed(web(), &ObjectRef::secret("db"), t0);
        let work = s.take_due(t0).pop().expect("due");
        let conflicted = Ok(Reconciled::Conflicted { from: Some("5".into()) });
        assert_eq!(s.done(work, &conflicted, t0, 0.0), None);
        assert!(s.in_flight(&web()), "held, not free to be handed out twice");
        let version = |v: &'static str| move |_: &WorkloadKey| Some(Some(v.to_owned()));
        assert!(s.take_released(t0 + MS, version("5")).is_empty(), "the same snapshot");
        let released = s.take_released(t0 + MS, version("6"));
        assert_eq!(released.iter().map(|d| d.conflicts).collect::<Vec<_>>(), [1]);
        let work = released.into_iter().next().expect("released");
        s.done(work, &conflicted, t0, 0.0);
        assert_eq!(s.next_due(), Some(t0 + SNAPSHOT_WAIT));
        assert!(s.take_released(t0 + SNAPSHOT_WAIT - MS, version("5")).is_empty());
        let released = s.take_released(t0 + SNAPSHOT_WAIT, version("5"));
        assert_eq!(released.len(), 1, "judged on what there is after the wait");
        // Stepping down drops held work.
        s.done(released.into_iter().next().expect("released"), &conflicted, t0, 0.0);
        s.lead(None);
        assert!(!s.in_flight(&web()) && s.depth() == 0);
    }
}
