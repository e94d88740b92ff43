//! The watched workloads: the webhook's plan of each (its [`Snapshot`]), why the webhook
//! leaves the others alone, and the patches this replica made that the watch has not
//! delivered yet. What a workload tracks is the other indexes' business: this one reports
//! each change as a [`WorkloadChange`] and the router passes it on.

use std::collections::{HashMap, HashSet};

use super::relist::WatchIndex;
use super::rolling_together::RollingTogether;
use super::scope::NamespaceScope;
use crate::controller::model::workload::{Snapshot, WatchedWorkload, WorkloadKey};
use crate::core::Settings;
use crate::core::model::kinds::WorkloadKind;
use crate::core::verdict::Verdict;

/// What a watch event did to a workload, for the indexes that follow it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkloadChange {
    /// Planned anew: what it tracks may have changed.
    Planned(WorkloadKey),
    /// Deleted, out of scope, or left alone by the webhook: forgotten everywhere.
    Forgotten(WorkloadKey),
    /// The template digest of a workload another one tracks (`None`: deleted).
    Template(WorkloadKey, Option<String>),
}

#[derive(Debug)]
pub struct WorkloadIndex {
    settings: Settings,
    /// `<word>.<domain>/`: what a template digest leaves out.
    workload_prefixes: Vec<String>,
    snapshots: HashMap<WorkloadKey, Snapshot>,
    /// Watched workloads the webhook leaves alone, with why (for the workloads gauge).
    skipped: HashMap<WorkloadKey, Verdict>,
    /// Workloads this replica patched from a resourceVersion that is still their snapshot's:
    /// until the watch delivers the patched version, what the snapshot records is outdated.
    unseen_patches: HashMap<WorkloadKey, Option<String>>,
    changes: Vec<WorkloadChange>,
}

impl WorkloadIndex {
    pub fn new(settings: Settings) -> Self {
        WorkloadIndex {
            workload_prefixes: settings.domain.workload_prefixes(),
            settings,
            snapshots: HashMap::new(),
            skipped: HashMap::new(),
            unseen_patches: HashMap::new(),
            changes: Vec::new(),
        }
    }

    /// The watch of `kind`'s view of this index, with what it needs to know of the others.
    pub fn watch_of<'a>(
        &'a mut self,
        kind: WorkloadKind,
        scope: &'a NamespaceScope,
        together: &'a RollingTogether,
    ) -> WorkloadWatch<'a> {
        WorkloadWatch { kind, scope, together, index: self }
    }

    /// The annotation domain.
    pub fn domain(&self) -> &crate::core::AnnotationDomain {
        &self.settings.domain
    }

    /// `<word>.<domain>/`: what a template digest leaves out.
    pub fn workload_prefixes(&self) -> &[String] {
        &self.workload_prefixes
    }

    /// The changes since the last call, in order.
    pub fn take_changes(&mut self) -> Vec<WorkloadChange> {
        std::mem::take(&mut self.changes)
    }

    pub fn snapshot(&self, key: &WorkloadKey) -> Option<&Snapshot> {
        self.snapshots.get(key)
    }

    pub fn snapshots(&self) -> impl Iterator<Item = (&WorkloadKey, &Snapshot)> {
        self.snapshots.iter()
    }

    pub fn skipped(&self) -> impl Iterator<Item = &Verdict> {
        self.skipped.values()
    }

    /// Forgets every workload in `namespace` (it left the scope); returns the planned ones.
    pub fn forget_namespace(&mut self, namespace: &str) -> Vec<WorkloadKey> {
        self.skipped.retain(|key, _| *key.namespace != *namespace);
        let keys: Vec<WorkloadKey> =
            self.snapshots.keys().filter(|k| *k.namespace == *namespace).cloned().collect();
        for key in &keys {
            self.forget(key);
        }
        keys
    }

    /// This replica patched `key` from the snapshot at `from`: while that is still the
    /// snapshot, it is outdated.
    pub fn patched(&mut self, key: &WorkloadKey, from: &Option<String>) {
        if self.snapshots.get(key).is_some_and(|s| s.resource_version == *from) {
            self.unseen_patches.insert(key.clone(), from.clone());
        }
    }

    /// The resourceVersion this replica patched `key` from, while the watch has not
    /// delivered the patch.
    pub fn unseen_patch(&self, key: &WorkloadKey) -> Option<&Option<String>> {
        self.unseen_patches.get(key)
    }

    fn forget(&mut self, key: &WorkloadKey) {
        self.snapshots.remove(key);
        self.skipped.remove(key);
        self.unseen_patches.remove(key);
    }
}

/// One workload kind's watch applied to the index.
pub struct WorkloadWatch<'a> {
    kind: WorkloadKind,
    scope: &'a NamespaceScope,
    together: &'a RollingTogether,
    index: &'a mut WorkloadIndex,
}

impl WatchIndex<WatchedWorkload> for WorkloadWatch<'_> {
    type Key = WorkloadKey;

    /// The key the index already holds, if it does: its names are then shared by the relist's
    /// set of listed keys and by every index the change goes on to, not copied again.
    fn key(&self, workload: &WatchedWorkload) -> Option<WorkloadKey> {
        let key = workload.key(self.kind)?;
        Some(self.index.snapshots.get_key_value(&key).map_or(key, |(held, _)| held.clone()))
    }

    fn apply(&mut self, workload: WatchedWorkload) {
        let Some(key) = self.key(&workload) else { return };
        let (kind, index) = (self.kind, &mut *self.index);
        if !self.scope.contains(&key.namespace) {
            return;
        }
        let resource_version = workload.resource_version().map(str::to_owned);
        let unchanged = index
            .snapshots
            .get(&key)
            .is_some_and(|s| resource_version.is_some() && s.resource_version == resource_version);
        if unchanged {
            return;
        }
        let uid = workload.uid().map(str::to_owned);
        let rollout = workload.rollout_facts(kind, &index.settings.domain);
        // Whether or not configsum rolls it, another workload may track it: its template is
        // digested, before the plan drops the spec.
        if self.together.is_tracked(&key) {
            if let Some(digest) = workload.template_digest(kind, &index.workload_prefixes) {
                index.changes.push(WorkloadChange::Template(key.clone(), Some(digest)));
            }
        }
        match workload.plan_or_skip(kind, &index.settings) {
            Ok(mutation) => {
                index.skipped.remove(&key);
                // A new snapshot includes any patch of this replica's.
                index.unseen_patches.remove(&key);
                index
                    .snapshots
                    .insert(key.clone(), Snapshot { mutation, resource_version, uid, rollout });
                index.changes.push(WorkloadChange::Planned(key));
            }
            Err(verdict) => {
                index.forget(&key);
                index.changes.push(WorkloadChange::Forgotten(key.clone()));
                // Counted, for the workloads gauge: left alone, but a user may ask why.
                if let Some(verdict) = verdict {
                    index.skipped.insert(key, verdict);
                }
            }
        }
    }

    fn delete(&mut self, key: WorkloadKey) {
        if self.together.is_tracked(&key) {
            self.index.changes.push(WorkloadChange::Template(key.clone(), None));
        }
        self.index.forget(&key);
        self.index.changes.push(WorkloadChange::Forgotten(key));
    }

    /// The planned workloads and those only tracked (a relist must see their deletion too)
    /// that the relist did not list.
    fn unlisted(&self, listed: &HashSet<WorkloadKey>) -> Vec<WorkloadKey> {
        let gone = |k: &&WorkloadKey| k.kind == self.kind && !listed.contains(*k);
        let mut keys: Vec<WorkloadKey> =
            self.index.snapshots.keys().filter(gone).cloned().collect();
        keys.extend(self.together.known_templates().filter(gone).cloned());
        keys.sort();
        keys.dedup();
        keys
    }

    fn namespace_of(key: &WorkloadKey) -> Option<&str> {
        Some(&key.namespace)
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::watcher::Event;
    use serde_json::json;

    use super::*;
    use crate::controller::model::message::ObjectVersion;
    use crate::controller::state::relist::Watch;

    fn deployment(namespace: &str, name: &str, rv: &str, enabled: bool) -> WatchedWorkload {
        let annotations =
            if enabled { json!({}) } else { json!({"configsum.dev/enabled": "false"}) };
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": rv,
                "annotations": annotations},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "app:1",
                "envFrom": [{"secretRef": {"name": "db"}}]}]}}}}))
        .expect("a watched Deployment")
    }

    fn key(namespace: &str, name: &str) -> WorkloadKey {
        WorkloadKey {
            kind: WorkloadKind::Deployment,
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    fn scope(names: &[&str]) -> NamespaceScope {
        let mut scope = NamespaceScope::new("configsum".into(), "configsum.dev/roll-window".into());
        let mut watch = Watch::default();
        for name in names {
            let version = ObjectVersion {
                namespace: None,
                name: Some((*name).into()),
                resource_version: None,
                annotations: Vec::new(),
            };
            watch.handle(&mut scope, Event::Apply(version));
        }
        scope
    }

    #[test]
    fn workloads_in_scope_are_planned_once_per_version_and_changes_reported_in_order() {
        let (scope, together) = (scope(&["ns"]), RollingTogether::default());
        let mut index = WorkloadIndex::new(Settings::default());
        let mut watch = Watch::default();
        let mut handle = |index: &mut WorkloadIndex, event| {
            watch.handle(&mut index.watch_of(WorkloadKind::Deployment, &scope, &together), event)
        };
        handle(&mut index, Event::Init);
        handle(&mut index, Event::InitApply(deployment("ns", "web", "1", true)));
        handle(&mut index, Event::InitApply(deployment("other", "web", "1", true)));
        handle(&mut index, Event::InitApply(deployment("ns", "off", "1", false)));
        handle(&mut index, Event::InitDone);
        assert_eq!(
            index.take_changes(),
            [
                WorkloadChange::Planned(key("ns", "web")),
                WorkloadChange::Forgotten(key("ns", "off"))
            ]
        );
        assert_eq!(index.snapshots().count(), 1, "out of scope and opted out are not planned");
        assert_eq!(index.skipped().count(), 1, "the opted-out one is counted, for the gauge");
        handle(&mut index, Event::Apply(deployment("ns", "web", "1", true)));
        assert!(index.take_changes().is_empty(), "the same version is not planned again");

        // A patch of this replica's is unseen until the watch delivers a newer version.
        index.patched(&key("ns", "web"), &Some("1".into()));
        assert_eq!(index.unseen_patch(&key("ns", "web")), Some(&Some("1".into())));
        handle(&mut index, Event::Apply(deployment("ns", "web", "2", true)));
        assert_eq!(index.unseen_patch(&key("ns", "web")), None);

        // A relist without it deletes it.
        handle(&mut index, Event::Init);
        handle(&mut index, Event::InitDone);
        let changes = index.take_changes();
        assert_eq!(changes.last(), Some(&WorkloadChange::Forgotten(key("ns", "web"))));
        assert_eq!(index.snapshots().count(), 0);
    }

    #[test]
    fn a_namespace_that_leaves_the_scope_takes_its_workloads_along() {
        let (scope, together) = (scope(&["a", "b"]), RollingTogether::default());
        let mut index = WorkloadIndex::new(Settings::default());
        let mut watch = Watch::default();
        for (ns, name, enabled) in [("a", "x", true), ("a", "y", false), ("b", "z", true)] {
            let event = Event::Apply(deployment(ns, name, "1", enabled));
            watch.handle(&mut index.watch_of(WorkloadKind::Deployment, &scope, &together), event);
        }
        assert_eq!(index.forget_namespace("a"), [key("a", "x")]);
        assert_eq!((index.snapshots().count(), index.skipped().count()), (1, 0));
    }
}
