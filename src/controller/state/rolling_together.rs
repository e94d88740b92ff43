//! Workloads that roll together: which workloads track which, and the pod-template digest
//! of every workload some workload tracks (only those: a cluster's other workloads cost
//! nothing). The workload watches deliver the templates; one whose template the watch
//! delivered before anything tracked it is read once ([`RollingTogether::take_reads`]).
//! A template that moved makes its trackers worth a look ([`RollingTogether::take_moved`]).

use std::collections::{BTreeSet, HashMap, HashSet};

use tokio::time::Instant;
use tracing::warn;

use crate::controller::model::backoff;
use crate::controller::model::workload::WorkloadKey;
use crate::core::model::annotations::ABSENT;
use crate::core::selection::WorkloadTarget;
use crate::core::{Mutation, Observation};

#[derive(Debug, Default)]
pub struct RollingTogether {
    /// Tracker → the workloads it tracks.
    tracks: HashMap<WorkloadKey, Vec<WorkloadKey>>,
    /// Tracked workload → its trackers.
    trackers: HashMap<WorkloadKey, BTreeSet<WorkloadKey>>,
    /// The template digest of each tracked workload whose template is known (`None`: it does
    /// not exist). A tracked workload missing here is not known yet; its trackers keep what
    /// they record.
    templates: HashMap<WorkloadKey, Option<String>>,
    /// Tracked workloads whose template digest moved (or that were deleted) since the router
    /// last looked: their trackers may be due.
    moved: Vec<WorkloadKey>,
    /// Tracked workloads whose template must be read, being read, and failed reads' retries.
    reads: Vec<WorkloadKey>,
    reading: HashSet<WorkloadKey>,
    retries: Vec<(Instant, WorkloadKey)>,
}

impl RollingTogether {
    /// Replaces what `tracker` tracks. A workload no longer tracked drops its digest; one
    /// newly tracked whose template is not known is read once when `reading` (after the
    /// first listing, which may still deliver it).
    pub fn upsert(&mut self, tracker: &WorkloadKey, tracked: Vec<WorkloadKey>, reading: bool) {
        let (added, dropped) = self.replace(tracker, tracked);
        self.tracking_changed(added, dropped, reading);
    }

    /// Forgets what `tracker` tracks.
    pub fn remove(&mut self, tracker: &WorkloadKey) {
        let dropped = self.untrack(tracker);
        self.tracking_changed(Vec::new(), dropped, false);
    }

    fn tracking_changed(
        &mut self,
        added: Vec<WorkloadKey>,
        dropped: Vec<WorkloadKey>,
        reading: bool,
    ) {
        for workload in &dropped {
            self.templates.remove(workload);
        }
        if reading {
            let unknown = added.into_iter().filter(|w| !self.templates.contains_key(w));
            self.reads.extend(unknown);
        }
    }

    /// A tracked workload's template digest as it is now (`None`: it does not exist). A change
    /// (or the first knowledge of it) makes its trackers' digests worth a look.
    pub fn template_seen(&mut self, key: &WorkloadKey, digest: Option<String>) {
        let before = self.templates.insert(key.clone(), digest.clone());
        if before != Some(digest) {
            self.moved.push(key.clone());
        }
    }

    /// A read of a tracked workload's template finished, as its digest. A watch event that
    /// came meanwhile is newer, and wins.
    pub fn template_read(
        &mut self,
        workload: WorkloadKey,
        result: Result<Option<String>, String>,
        now: Instant,
    ) {
        self.reading.remove(&workload);
        if self.templates.contains_key(&workload) || !self.is_tracked(&workload) {
            return;
        }
        match result {
            Ok(digest) => self.template_seen(&workload, digest),
            Err(reason) => {
                let wait = backoff::delay(1, backoff::random());
                warn!(workload = %workload, %reason, retry_in = ?wait, "cannot read a tracked workload");
                self.retries.push((now + wait, workload));
            }
        }
    }

    /// The first listing is complete: tracked workloads it delivered before anything tracked
    /// them are read once.
    pub fn read_unknown(&mut self) {
        let unknown = self.trackers.keys().filter(|w| !self.templates.contains_key(*w));
        self.reads.extend(unknown.cloned());
    }

    /// Template reads to start now: those asked for, and failed ones whose retry is due.
    pub fn take_reads(&mut self, now: Instant) -> Vec<WorkloadKey> {
        let (due, later): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.retries).into_iter().partition(|(at, _)| *at <= now);
        self.retries = later;
        self.reads.extend(due.into_iter().map(|(_, workload)| workload));
        let reads = std::mem::take(&mut self.reads);
        self.reading.extend(reads.iter().cloned());
        reads
    }

    /// Template reads waiting, running or to retry (part of the queue-depth metric).
    pub fn depth(&self) -> usize {
        self.reads.len() + self.reading.len() + self.retries.len()
    }

    pub fn next_retry(&self) -> Option<Instant> {
        self.retries.iter().map(|(at, _)| *at).min()
    }

    /// The tracked workloads whose template moved since the last call.
    pub fn take_moved(&mut self) -> Vec<WorkloadKey> {
        std::mem::take(&mut self.moved)
    }

    /// The template digest of `tracked`, if known (`Some(None)`: it does not exist).
    pub fn template(&self, tracked: &WorkloadKey) -> Option<&Option<String>> {
        self.templates.get(tracked)
    }

    /// Tracked workloads whose template is known.
    pub fn known_templates(&self) -> impl Iterator<Item = &WorkloadKey> {
        self.templates.keys()
    }

    /// Whether `mutation` records a digest of `tracked` that its template no longer has.
    pub fn is_stale(&self, mutation: &Mutation, tracked: &WorkloadKey) -> bool {
        stale(mutation, tracked, &self.templates)
    }

    /// What a reconciliation observes for `mutation`'s tracked workloads.
    pub fn observations(&self, mutation: &Mutation) -> Vec<Option<Observation>> {
        observations(mutation, &self.templates)
    }

    /// Replaces what `tracker` tracks; returns the workloads no workload tracked before, and
    /// those no workload tracks any more.
    fn replace(
        &mut self,
        tracker: &WorkloadKey,
        tracked: Vec<WorkloadKey>,
    ) -> (Vec<WorkloadKey>, Vec<WorkloadKey>) {
        let mut dropped = self.untrack(tracker);
        let mut added = Vec::new();
        if tracked.is_empty() {
            return (added, dropped);
        }
        for workload in &tracked {
            let trackers = self.trackers.entry(workload.clone()).or_default();
            if trackers.is_empty() {
                match dropped.iter().position(|d| d == workload) {
                    Some(i) => {
                        dropped.swap_remove(i);
                    }
                    None => added.push(workload.clone()),
                }
            }
            trackers.insert(tracker.clone());
        }
        self.tracks.insert(tracker.clone(), tracked);
        (added, dropped)
    }

    /// Forgets what `tracker` tracks; returns the workloads no workload tracks any more.
    fn untrack(&mut self, tracker: &WorkloadKey) -> Vec<WorkloadKey> {
        let mut dropped = Vec::new();
        for workload in self.tracks.remove(tracker).into_iter().flatten() {
            if let Some(trackers) = self.trackers.get_mut(&workload) {
                trackers.remove(tracker);
                if trackers.is_empty() {
                    self.trackers.remove(&workload);
                    dropped.push(workload);
                }
            }
        }
        dropped
    }

    /// Whether some workload tracks `workload`.
    pub fn is_tracked(&self, workload: &WorkloadKey) -> bool {
        self.trackers.contains_key(workload)
    }

    /// Every tracked workload.
    pub fn tracked(&self) -> impl Iterator<Item = &WorkloadKey> {
        self.trackers.keys()
    }

    /// The workloads tracking `tracked`, in order.
    pub fn trackers_of(&self, tracked: &WorkloadKey) -> impl Iterator<Item = &WorkloadKey> {
        self.trackers.get(tracked).into_iter().flatten()
    }

    /// Every tracker, with the workloads it tracks.
    pub fn all(&self) -> impl Iterator<Item = (&WorkloadKey, &[WorkloadKey])> {
        self.tracks.iter().map(|(tracker, tracked)| (tracker, tracked.as_slice()))
    }
}

/// The key of a workload `mutation` tracks, in its namespace.
pub fn key_of(mutation: &Mutation, target: &WorkloadTarget) -> WorkloadKey {
    WorkloadKey {
        kind: target.kind,
        namespace: mutation.namespace.as_str().into(),
        name: target.name.as_str().into(),
    }
}

/// The workloads `mutation` tracks.
pub fn tracked_by(mutation: &Mutation) -> Vec<WorkloadKey> {
    mutation.workloads.iter().map(|target| key_of(mutation, target)).collect()
}

/// The annotation value `tracked`'s template calls for now: its digest, or `absent`; `None`
/// while it is not known.
fn current(
    tracked: &WorkloadKey,
    digests: &HashMap<WorkloadKey, Option<String>>,
) -> Option<String> {
    let known = digests.get(tracked)?;
    Some(known.clone().unwrap_or_else(|| ABSENT.to_owned()))
}

/// Whether `mutation` records a digest of `tracked` that its template no longer has. One
/// that records none is a first observation, and one whose template is not known yet cannot
/// be told: never stale.
fn stale(
    mutation: &Mutation,
    tracked: &WorkloadKey,
    digests: &HashMap<WorkloadKey, Option<String>>,
) -> bool {
    match (recorded(mutation, tracked), current(tracked, digests)) {
        (Some(recorded), Some(current)) => recorded != current,
        _ => false,
    }
}

/// The digest of `tracked` that `mutation` records, if any.
pub fn recorded<'a>(mutation: &'a Mutation, tracked: &WorkloadKey) -> Option<&'a str> {
    let target = mutation.workloads.iter().find(|t| key_of(mutation, t) == *tracked)?;
    mutation.existing_annotation(&target.key)
}

/// What a reconciliation observes for `mutation`'s tracked workloads: the digest the watches
/// last gave, where its annotation exists and the template is known; otherwise what is there
/// is kept (the controller never records a first observation).
fn observations(
    mutation: &Mutation,
    digests: &HashMap<WorkloadKey, Option<String>>,
) -> Vec<Option<Observation>> {
    mutation
        .workloads
        .iter()
        .map(|target| {
            mutation.existing_annotation(&target.key)?;
            let value = current(&key_of(mutation, target), digests)?;
            Some(if value == ABSENT { Observation::Absent } else { Observation::Digest(value) })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::kinds::WorkloadKind;

    fn key(name: &str) -> WorkloadKey {
        WorkloadKey { kind: WorkloadKind::Deployment, namespace: "ns".into(), name: name.into() }
    }

    #[test]
    fn the_index_follows_upserts_and_removals() {
        let mut index = RollingTogether::default();
        assert_eq!(index.replace(&key("keycloak"), vec![key("db")]), (vec![key("db")], vec![]));
        let (added, dropped) = index.replace(&key("worker"), vec![key("db"), key("cache")]);
        assert_eq!((added, dropped), (vec![key("cache")], vec![]), "db was tracked already");
        let trackers: Vec<_> = index.trackers_of(&key("db")).cloned().collect();
        assert_eq!(trackers, [key("keycloak"), key("worker")]);
        let unchanged = index.replace(&key("worker"), vec![key("db"), key("cache")]);
        assert_eq!(unchanged, (vec![], vec![]), "the same again adds and drops nothing");
        index.replace(&key("worker"), vec![key("cache")]);
        assert_eq!(index.trackers_of(&key("db")).count(), 1, "worker no longer tracks db");
        assert_eq!(index.untrack(&key("keycloak")), [key("db")], "no longer tracked by anyone");
        assert!(!index.is_tracked(&key("db")) && index.is_tracked(&key("cache")));
        assert_eq!(index.all().count(), 1);
        assert_eq!(index.replace(&key("worker"), Vec::new()), (vec![], vec![key("cache")]));
        assert_eq!(index.all().count(), 0);
    }

    #[test]
    fn templates_are_kept_for_tracked_workloads_read_once_when_unknown_and_retried() {
        let t0 = Instant::now();
        let mut index = RollingTogether::default();
        index.upsert(&key("keycloak"), vec![key("db")], false);
        assert!(index.take_reads(t0).is_empty(), "not read while listing");
        index.read_unknown();
        assert_eq!(index.depth(), 1);
        assert_eq!(index.take_reads(t0), [key("db")]);
        assert_eq!(index.depth(), 1, "being read");
        index.template_read(key("db"), Err("HTTP 500".into()), t0);
        assert_eq!(index.depth(), 1, "to retry");
        assert!(index.take_reads(t0).is_empty());
        let retry = index.next_retry().expect("a retry");
        assert_eq!(index.take_reads(retry), [key("db")], "retried after its backoff");
        index.template_read(key("db"), Ok(Some("sha256:1".into())), retry);
        assert_eq!(index.depth(), 0);
        assert_eq!(index.take_moved(), [key("db")], "known at last: its trackers are looked at");
        index.template_read(key("db"), Ok(Some("sha256:0".into())), retry);
        assert!(index.take_moved().is_empty(), "the watch's newer digest wins over a late read");
        index.template_seen(&key("db"), Some("sha256:1".into()));
        assert!(index.take_moved().is_empty(), "unchanged");
        index.template_seen(&key("db"), None);
        assert_eq!(index.take_moved(), [key("db")], "deleted");
        assert_eq!(index.known_templates().count(), 1);
        index.remove(&key("keycloak"));
        assert_eq!(index.known_templates().count(), 0, "no longer tracked: its digest is dropped");
        index.upsert(&key("keycloak"), vec![key("db")], true);
        assert_eq!(index.take_reads(retry), [key("db")], "newly tracked after the listing: read");
    }
}
