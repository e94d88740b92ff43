//! Which workloads track which objects, both ways. It holds names, never
//! ConfigMap or Secret data, and only workloads in opted-in namespaces.

use std::collections::HashMap;

use crate::controller::model::workload::WorkloadKey;
use crate::core::model::kinds::WorkloadKind;
use crate::core::{Mutation, ObjectKey, ObjectRef};

/// The objects the webhook's rules say a workload tracks, and may read (never another
/// namespace's outside `--namespaces`).
pub fn tracked_by(mutation: &Mutation) -> Vec<ObjectRef> {
    mutation.targets.iter().filter(|t| t.is_read()).map(|t| t.object.clone()).collect()
}

/// Both maps hold an entry per tracked workload or object, tens of thousands of them: each
/// list is allocated at its size (a `Vec`'s first push makes room for four).
#[derive(Debug, Default)]
pub struct ReferenceIndex {
    workloads: HashMap<WorkloadKey, Box<[ObjectRef]>>,
    /// Sorted; most objects have one workload, so a Vec rather than a set
    /// (a B-tree node per object was most of the controller's memory).
    by_object: HashMap<ObjectKey, Vec<WorkloadKey>>,
}

/// How an upsert or removal changed the set of tracked objects.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Change {
    /// Objects nobody tracked before.
    pub added: Vec<ObjectKey>,
    /// Objects nobody tracks any more.
    pub dropped: Vec<ObjectKey>,
}

impl ReferenceIndex {
    /// Records what `key` tracks now.
    pub fn upsert(&mut self, key: WorkloadKey, objects: Vec<ObjectRef>) -> Change {
        let mut change = self.remove(&key);
        for object in &objects {
            let object = object.clone().within(&*key.namespace);
            let workloads =
                self.by_object.entry(object.clone()).or_insert_with(|| Vec::with_capacity(1));
            if workloads.is_empty() {
                // Dropped and re-added in one upsert: neither.
                match change.dropped.iter().position(|s| *s == object) {
                    Some(i) => {
                        change.dropped.swap_remove(i);
                    }
                    None => change.added.push(object),
                }
            }
            if let Err(at) = workloads.binary_search(&key) {
                workloads.insert(at, key.clone());
            }
        }
        self.workloads.insert(key, objects.into_boxed_slice());
        change
    }

    pub fn remove(&mut self, key: &WorkloadKey) -> Change {
        let mut change = Change::default();
        let Some(old) = self.workloads.remove(key) else { return change };
        for object in old {
            let object = object.within(&*key.namespace);
            if let Some(workloads) = self.by_object.get_mut(&object) {
                if let Ok(at) = workloads.binary_search(key) {
                    workloads.remove(at);
                }
                if workloads.is_empty() {
                    self.by_object.remove(&object);
                    change.dropped.push(object);
                }
            }
        }
        change
    }

    /// The workloads tracking an object, in a stable order.
    pub fn tracking(&self, object: &ObjectKey) -> impl Iterator<Item = &WorkloadKey> {
        self.by_object.get(object).into_iter().flatten()
    }

    /// Every workload of `kind`.
    pub fn workloads_of(&self, kind: WorkloadKind) -> impl Iterator<Item = &WorkloadKey> {
        self.workloads.keys().filter(move |k| k.kind == kind)
    }

    /// Every workload in `namespace`.
    pub fn workloads_in<'a>(&'a self, namespace: &'a str) -> impl Iterator<Item = &'a WorkloadKey> {
        self.workloads.keys().filter(move |k| *k.namespace == *namespace)
    }

    pub fn len(&self) -> usize {
        self.workloads.len()
    }

    pub fn is_empty(&self) -> bool {
        self.workloads.is_empty()
    }

    /// Distinct objects tracked (the `watched_objects` metric).
    pub fn object_count(&self) -> usize {
        self.by_object.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> WorkloadKey {
        WorkloadKey { kind: WorkloadKind::Deployment, namespace: "ns".into(), name: name.into() }
    }

    fn slot(object: ObjectRef) -> ObjectKey {
        object.within("ns")
    }

    fn tracks(objects: &[ObjectRef]) -> Vec<ObjectRef> {
        objects.to_vec()
    }

    #[test]
    fn the_index_answers_who_tracks_what_and_what_came_and_went() {
        let (s, c) = (ObjectRef::secret("s"), ObjectRef::config_map("c"));
        let mut index = ReferenceIndex::default();
        let change = index.upsert(key("a"), tracks(&[s.clone(), c.clone()]));
        assert_eq!(change.added, vec![slot(s.clone()), slot(c.clone())]);
        assert!(index.upsert(key("b"), tracks(std::slice::from_ref(&s))) == Change::default());
        let tracking: Vec<_> = index.tracking(&slot(s.clone())).cloned().collect();
        assert_eq!(tracking, vec![key("a"), key("b")]);
        assert_eq!(index.tracking(&s.clone().within("other")).count(), 0);
        assert_eq!(index.object_count(), 2);
        // A workload that stops referencing an object drops it if nobody else tracks it.
        let change = index.upsert(key("a"), tracks(std::slice::from_ref(&s)));
        assert_eq!(change, Change { added: vec![], dropped: vec![slot(c.clone())] });
        assert_eq!(index.tracking(&slot(c)).count(), 0);
        assert_eq!(index.remove(&key("b")), Change::default());
        assert_eq!(index.remove(&key("a")).dropped, vec![slot(s)]);
        assert!(index.is_empty() && index.object_count() == 0);
    }

    #[test]
    fn workloads_are_found_by_kind_and_namespace() {
        let mut index = ReferenceIndex::default();
        index.upsert(key("a"), tracks(&[]));
        let other = WorkloadKey {
            kind: WorkloadKind::StatefulSet,
            namespace: "x".into(),
            name: "b".into(),
        };
        index.upsert(other.clone(), tracks(&[]));
        assert_eq!(index.workloads_of(WorkloadKind::StatefulSet).collect::<Vec<_>>(), vec![&other]);
        assert_eq!(index.workloads_in("ns").collect::<Vec<_>>(), vec![&key("a")]);
    }
}
