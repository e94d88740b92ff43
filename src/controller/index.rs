//! Which workloads track which objects: the controller's only long-lived
//! state besides digests. It holds names, never ConfigMap or Secret data.

use std::collections::{BTreeSet, HashMap};

use crate::core::workload::WorkloadKind;
use crate::core::{Mutation, ObjectRef, Plan, Request, Settings, plan};

/// A workload the controller may roll.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkloadKey {
    pub kind: WorkloadKind,
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for WorkloadKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{}", self.kind.as_str(), self.namespace, self.name)
    }
}

/// What the webhook's rules say a workload tracks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tracking {
    pub objects: Vec<ObjectRef>,
    /// Whether its template carries digests already (then start-up catches it up).
    pub has_digests: bool,
}

/// What the controller keeps of a watched workload: the webhook's plan for
/// it (targets, consumed keys, current digests), small and free of data.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub mutation: Mutation,
    pub resource_version: Option<String>,
    pub uid: Option<String>,
}

/// Applies the webhook's own rules (kinds, owners, opt-out, track/ignore,
/// name checks, limits) to a workload object, as an UPDATE would be.
/// `None` when the webhook would leave it alone.
pub fn plan_workload(
    kind: WorkloadKind,
    namespace: &str,
    object: &str,
    settings: &Settings,
) -> Option<Mutation> {
    let (group, version, _) = kind.resource();
    let request = Request {
        group,
        version,
        kind: kind.as_str(),
        operation: "UPDATE",
        namespace: Some(namespace),
        object: Some(object),
        ..Request::default()
    };
    match plan(&request, settings) {
        Plan::Mutate(mutation) => Some(mutation),
        Plan::Skip(_) | Plan::Unparsable(_) => None,
    }
}

/// What a planned workload tracks.
pub fn tracking_of(mutation: &Mutation) -> Tracking {
    Tracking {
        has_digests: mutation.has_digests(),
        objects: mutation.targets.iter().map(|t| t.object.clone()).collect(),
    }
}

#[derive(Debug, Default)]
pub struct ReferenceIndex {
    workloads: HashMap<WorkloadKey, Tracking>,
    by_object: HashMap<(String, ObjectRef), BTreeSet<WorkloadKey>>,
}

impl ReferenceIndex {
    /// Records what `key` tracks now; returns the objects nobody tracked before.
    pub fn upsert(&mut self, key: WorkloadKey, tracking: Tracking) -> Vec<ObjectRef> {
        self.remove(&key);
        let mut new = Vec::new();
        for object in &tracking.objects {
            let workloads =
                self.by_object.entry((key.namespace.clone(), object.clone())).or_default();
            if workloads.is_empty() {
                new.push(object.clone());
            }
            workloads.insert(key.clone());
        }
        self.workloads.insert(key, tracking);
        new
    }

    pub fn remove(&mut self, key: &WorkloadKey) {
        let Some(old) = self.workloads.remove(key) else { return };
        for object in old.objects {
            let slot = (key.namespace.clone(), object);
            if let Some(workloads) = self.by_object.get_mut(&slot) {
                workloads.remove(key);
                if workloads.is_empty() {
                    self.by_object.remove(&slot);
                }
            }
        }
    }

    /// The workloads tracking `object` in `namespace`, in a stable order.
    pub fn tracking(&self, namespace: &str, object: &ObjectRef) -> Vec<WorkloadKey> {
        self.by_object
            .get(&(namespace.to_owned(), object.clone()))
            .map(|w| w.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub fn is_tracked(&self, namespace: &str, object: &ObjectRef) -> bool {
        self.by_object.contains_key(&(namespace.to_owned(), object.clone()))
    }

    /// Every tracked object.
    pub fn objects(&self) -> impl Iterator<Item = &(String, ObjectRef)> {
        self.by_object.keys()
    }

    /// Workloads whose templates carry digests: the ones caught up at start-up.
    pub fn with_digests(&self) -> Vec<WorkloadKey> {
        let mut keys: Vec<_> =
            self.workloads.iter().filter(|(_, t)| t.has_digests).map(|(k, _)| k.clone()).collect();
        keys.sort();
        keys
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
    use serde_json::json;

    fn tracking(
        kind: WorkloadKind,
        ns: &str,
        object: &str,
        settings: &Settings,
    ) -> Option<Tracking> {
        plan_workload(kind, ns, object, settings).as_ref().map(tracking_of)
    }

    fn key(name: &str) -> WorkloadKey {
        WorkloadKey { kind: WorkloadKind::Deployment, namespace: "ns".into(), name: name.into() }
    }

    fn deployment(
        env_from: serde_json::Value,
        annotations: serde_json::Value,
        template_annotations: serde_json::Value,
    ) -> String {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "annotations": annotations},
            "spec": {"template": {"metadata": {"annotations": template_annotations},
                "spec": {"containers": [{"name": "c", "envFrom": env_from}]}}}})
        .to_string()
    }

    #[test]
    fn tracking_follows_the_webhook_rules() {
        let settings = Settings::default();
        let refs = json!([{"configMapRef": {"name": "a"}}, {"secretRef": {"name": "s"}}]);
        let plain = deployment(refs.clone(), json!({}), json!({}));
        let t = tracking(WorkloadKind::Deployment, "ns", &plain, &settings).expect("tracked");
        assert_eq!(t.objects, vec![ObjectRef::config_map("a"), ObjectRef::secret("s")]);
        assert!(!t.has_digests);
        let ignored =
            deployment(refs.clone(), json!({"configsum.dev/ignore": "secret/s"}), json!({}));
        assert_eq!(
            tracking(WorkloadKind::Deployment, "ns", &ignored, &settings).map(|t| t.objects.len()),
            Some(1)
        );
        let disabled =
            deployment(refs.clone(), json!({"configsum.dev/enabled": "false"}), json!({}));
        assert_eq!(tracking(WorkloadKind::Deployment, "ns", &disabled, &settings), None);
        let digested =
            deployment(refs, json!({}), json!({"configmap.configsum.dev/a": "sha256:00"}));
        assert!(
            tracking(WorkloadKind::Deployment, "ns", &digested, &settings)
                .is_some_and(|t| t.has_digests)
        );
    }

    #[test]
    fn the_index_answers_who_tracks_what() {
        let mut index = ReferenceIndex::default();
        let both = Tracking {
            objects: vec![ObjectRef::secret("s"), ObjectRef::config_map("c")],
            has_digests: true,
        };
        assert_eq!(index.upsert(key("a"), both.clone()).len(), 2);
        assert!(
            index
                .upsert(
                    key("b"),
                    Tracking { objects: vec![ObjectRef::secret("s")], has_digests: false }
                )
                .is_empty()
        );
        assert_eq!(index.tracking("ns", &ObjectRef::secret("s")), vec![key("a"), key("b")]);
        assert!(index.tracking("other", &ObjectRef::secret("s")).is_empty());
        assert_eq!(index.with_digests(), vec![key("a")]);
        assert_eq!(index.object_count(), 2);
        // A workload that stops referencing an object leaves its entry.
        index.upsert(
            key("a"),
            Tracking { objects: vec![ObjectRef::secret("s")], has_digests: true },
        );
        assert!(!index.is_tracked("ns", &ObjectRef::config_map("c")));
        index.remove(&key("b"));
        assert_eq!(index.tracking("ns", &ObjectRef::secret("s")), vec![key("a")]);
        index.remove(&key("a"));
        assert!(index.is_empty() && index.object_count() == 0);
    }
}
