//! Workloads that roll together: the pod-template digest of every watched workload another
//! may track, and which workloads track which. Pure: the event loop fills it from the
//! workload watches, reconciliations read the digests (the controller never reads a tracked
//! workload again: its watch already holds it).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use super::workload::WorkloadKey;
use crate::core::digest::ABSENT;
use crate::core::selection::WorkloadTarget;
use crate::core::{Mutation, Observation};

/// The template digest of each watched workload of a trackable kind: written by the event
/// loop, read by reconciliations.
pub type TemplateDigests = Arc<Mutex<HashMap<WorkloadKey, String>>>;

/// Which workloads track which.
#[derive(Debug, Default)]
pub struct TrackedWorkloads {
    /// Tracker → the workloads it tracks.
    tracks: HashMap<WorkloadKey, Vec<WorkloadKey>>,
    /// Tracked workload → its trackers.
    trackers: HashMap<WorkloadKey, BTreeSet<WorkloadKey>>,
}

impl TrackedWorkloads {
    /// Replaces what `tracker` tracks.
    pub fn upsert(&mut self, tracker: &WorkloadKey, tracked: Vec<WorkloadKey>) {
        self.remove(tracker);
        if tracked.is_empty() {
            return;
        }
        for workload in &tracked {
            self.trackers.entry(workload.clone()).or_default().insert(tracker.clone());
        }
        self.tracks.insert(tracker.clone(), tracked);
    }

    pub fn remove(&mut self, tracker: &WorkloadKey) {
        for workload in self.tracks.remove(tracker).into_iter().flatten() {
            if let Some(trackers) = self.trackers.get_mut(&workload) {
                trackers.remove(tracker);
                if trackers.is_empty() {
                    self.trackers.remove(&workload);
                }
            }
        }
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

/// The annotation value `tracked`'s template calls for now: its digest, or `absent`.
fn current(tracked: &WorkloadKey, digests: &HashMap<WorkloadKey, String>) -> String {
    digests.get(tracked).cloned().unwrap_or_else(|| ABSENT.to_owned())
}

/// Whether `mutation` records a digest of `tracked` that its template no longer has. One
/// that records none is a first observation: never stale.
pub fn stale(
    mutation: &Mutation,
    tracked: &WorkloadKey,
    digests: &HashMap<WorkloadKey, String>,
) -> bool {
    let target = mutation.workloads.iter().find(|t| key_of(mutation, t) == *tracked);
    let recorded = target.and_then(|t| mutation.existing_annotation(&t.key));
    recorded.is_some_and(|recorded| recorded != current(tracked, digests))
}

/// What a reconciliation observes for `mutation`'s tracked workloads: the digest the watches
/// last gave, where its annotation exists; otherwise nothing is written (the controller never
/// records a first observation).
pub fn observations(mutation: &Mutation, digests: &TemplateDigests) -> Vec<Option<Observation>> {
    let Ok(digests) = digests.lock() else { return Vec::new() };
    mutation
        .workloads
        .iter()
        .map(|target| {
            mutation.existing_annotation(&target.key)?;
            let value = current(&key_of(mutation, target), &digests);
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
        index.upsert(&key("keycloak"), vec![key("db")]);
        index.upsert(&key("worker"), vec![key("db"), key("cache")]);
        let trackers: Vec<_> = index.trackers_of(&key("db")).cloned().collect();
        assert_eq!(trackers, [key("keycloak"), key("worker")]);
        index.upsert(&key("worker"), vec![key("cache")]);
        assert_eq!(index.trackers_of(&key("db")).count(), 1, "worker no longer tracks db");
        index.remove(&key("keycloak"));
        assert_eq!(index.trackers_of(&key("db")).count(), 0);
        assert_eq!(index.all().count(), 1);
        index.upsert(&key("worker"), Vec::new());
        assert_eq!(index.all().count(), 0);
    }
}
