//! Workloads that roll together: which workloads track which, and the pod-template digest
//! of every workload some workload tracks (only those: a cluster's other workloads cost
//! nothing). Pure: the event loop fills it from the workload watches, and from one read of a
//! workload whose template the watch delivered before anything tracked it; reconciliations
//! read the digests.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use super::workload::WorkloadKey;
use crate::core::digest::ABSENT;
use crate::core::selection::WorkloadTarget;
use crate::core::{Mutation, Observation};

/// The template digest of each tracked workload whose template is known (`None`: it does not
/// exist): written by the event loop, read by reconciliations. A tracked workload missing
/// here is not known yet; its trackers keep what they record.
pub type TemplateDigests = Arc<Mutex<HashMap<WorkloadKey, Option<String>>>>;

/// Which workloads track which.
#[derive(Debug, Default)]
pub struct TrackedWorkloads {
    /// Tracker → the workloads it tracks.
    tracks: HashMap<WorkloadKey, Vec<WorkloadKey>>,
    /// Tracked workload → its trackers.
    trackers: HashMap<WorkloadKey, BTreeSet<WorkloadKey>>,
}

impl TrackedWorkloads {
    /// Replaces what `tracker` tracks; returns the workloads no workload tracked before, and
    /// those no workload tracks any more.
    pub fn upsert(
        &mut self,
        tracker: &WorkloadKey,
        tracked: Vec<WorkloadKey>,
    ) -> (Vec<WorkloadKey>, Vec<WorkloadKey>) {
        let mut dropped = self.remove(tracker);
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
    pub fn remove(&mut self, tracker: &WorkloadKey) -> Vec<WorkloadKey> {
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
        namespace: mutation.namespace.clone(),
        name: target.name.clone(),
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
pub fn stale(
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
pub fn observations(mutation: &Mutation, digests: &TemplateDigests) -> Vec<Option<Observation>> {
    let Ok(digests) = digests.lock() else { return Vec::new() };
    mutation
        .workloads
        .iter()
        .map(|target| {
            mutation.existing_annotation(&target.key)?;
            let value = current(&key_of(mutation, target), &digests)?;
            Some(if value == ABSENT { Observation::Absent } else { Observation::Digest(value) })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::workload::WorkloadKind;

    fn key(name: &str) -> WorkloadKey {
        WorkloadKey { kind: WorkloadKind::Deployment, namespace: "ns".into(), name: name.into() }
    }

    #[test]
    fn the_index_follows_upserts_and_removals() {
        let mut index = TrackedWorkloads::default();
        assert_eq!(index.upsert(&key("keycloak"), vec![key("db")]), (vec![key("db")], vec![]));
        let (added, dropped) = index.upsert(&key("worker"), vec![key("db"), key("cache")]);
        assert_eq!((added, dropped), (vec![key("cache")], vec![]), "db was tracked already");
        let trackers: Vec<_> = index.trackers_of(&key("db")).cloned().collect();
        assert_eq!(trackers, [key("keycloak"), key("worker")]);
        let unchanged = index.upsert(&key("worker"), vec![key("db"), key("cache")]);
        assert_eq!(unchanged, (vec![], vec![]), "the same again adds and drops nothing");
        index.upsert(&key("worker"), vec![key("cache")]);
        assert_eq!(index.trackers_of(&key("db")).count(), 1, "worker no longer tracks db");
        assert_eq!(index.remove(&key("keycloak")), [key("db")], "no longer tracked by anyone");
        assert!(!index.is_tracked(&key("db")) && index.is_tracked(&key("cache")));
        assert_eq!(index.all().count(), 1);
        assert_eq!(index.upsert(&key("worker"), Vec::new()), (vec![], vec![key("cache")]));
        assert_eq!(index.all().count(), 0);
    }
}
