//! What each watch's objects do to the cluster view, as [`WatchIndex`]es:
//! the relist protocol that calls them is [`super::Watch`]'s, once for all.

use std::collections::HashSet;

use super::{ClusterView, Phase};
use crate::controller::images::tracked_images;
use crate::controller::index::tracked_by;
use crate::controller::message::ObjectVersion;
use crate::controller::tracked_workloads;
use crate::controller::watch::WatchIndex;
use crate::controller::workload::{Snapshot, WatchedWorkload, WorkloadKey};
use crate::core::workload::WorkloadKind;
use crate::core::{ObjectKey, ObjectKind, ObjectRef};
use tracing::debug;

/// The opted-in namespaces (but never configsum's own, nor kube-system).
pub struct Namespaces<'a>(pub &'a mut ClusterView);

impl WatchIndex<ObjectVersion> for Namespaces<'_> {
    type Key = String;

    fn key(&self, namespace: &ObjectVersion) -> Option<String> {
        let name = namespace.name.as_deref()?;
        (name != self.0.own_namespace && name != "kube-system").then(|| name.to_owned())
    }

    fn apply(&mut self, namespace: ObjectVersion) {
        let Some(name) = self.key(&namespace) else { return };
        if self.0.in_scope.insert(name.clone()) {
            debug!(namespace = %name, "namespace opted in");
            self.0.newly_in_scope = true;
        }
    }

    fn delete(&mut self, name: String) {
        self.0.opt_out(&name);
    }

    fn unlisted(&self, listed: &HashSet<String>) -> Vec<String> {
        self.0.in_scope.iter().filter(|n| !listed.contains(*n)).cloned().collect()
    }
}

/// The workloads of one kind, planned with the webhook's rules.
pub struct Workloads<'a> {
    pub kind: WorkloadKind,
    pub view: &'a mut ClusterView,
}

impl WatchIndex<WatchedWorkload> for Workloads<'_> {
    type Key = WorkloadKey;

    fn key(&self, workload: &WatchedWorkload) -> Option<WorkloadKey> {
        workload.key(self.kind)
    }

    fn apply(&mut self, workload: WatchedWorkload) {
        let (kind, view) = (self.kind, &mut *self.view);
        let Some(key) = workload.key(kind) else { return };
        if !view.in_scope(&key.namespace) {
            return;
        }
        let resource_version = workload.resource_version().map(str::to_owned);
        let uid = workload.uid().map(str::to_owned);
        let unchanged = view.shared.snapshots.lock().is_ok_and(|s| {
            s.get(&key).is_some_and(|s| {
                resource_version.is_some() && s.resource_version == resource_version
            })
        });
        if unchanged {
            return;
        }
        // Whether or not configsum rolls it, another workload may track it: its template is
        // digested when one does.
        if view.tracked_workloads.is_tracked(&key) {
            if let Some(digest) = workload.template_digest(kind, &view.workload_prefixes) {
                view.template_seen(&key, Some(digest));
            }
        }
        let mutation = match workload.plan_or_skip(kind, &view.settings) {
            Ok(mutation) => mutation,
            Err(verdict) => {
                view.forget_workload(&key);
                // Counted, for the workloads gauge: left alone, but a user may ask why.
                if let Some(verdict) = verdict {
                    view.skipped.insert(key, verdict);
                }
                return;
            }
        };
        view.skipped.remove(&key);
        let tracked = tracked_by(&mutation);
        view.images.upsert(&key, tracked_images(&key, &mutation));
        let (added, dropped) =
            view.tracked_workloads.upsert(&key, tracked_workloads::tracked_by(&mutation));
        view.tracking_changed(added, dropped);
        if let Ok(mut snapshots) = view.shared.snapshots.lock() {
            snapshots.insert(key.clone(), Snapshot { mutation, resource_version, uid });
        }
        view.workload_seen(&key);
        let change = view.index.upsert(key, tracked);
        view.tracked_objects_changed(change);
    }

    fn delete(&mut self, key: WorkloadKey) {
        if self.view.tracked_workloads.is_tracked(&key) {
            self.view.template_seen(&key, None);
        }
        self.view.forget_workload(&key);
    }

    /// The planned workloads and those only tracked (a relist must see their deletion too)
    /// that the relist did not list.
    fn unlisted(&self, listed: &HashSet<WorkloadKey>) -> Vec<WorkloadKey> {
        let gone = |k: &&WorkloadKey| k.kind == self.kind && !listed.contains(*k);
        let mut keys: Vec<WorkloadKey> =
            self.view.index.workloads_of(self.kind).filter(gone).cloned().collect();
        if let Ok(digests) = self.view.shared.template_digests.lock() {
            keys.extend(digests.keys().filter(gone).cloned());
        }
        keys.sort();
        keys.dedup();
        keys
    }
}

/// The tracked objects of one kind: a moved resourceVersion, a deletion, or
/// a deletion found by a relist asks for a read (once the first reads began).
pub struct Objects<'a> {
    pub kind: ObjectKind,
    pub view: &'a mut ClusterView,
}

impl WatchIndex<ObjectVersion> for Objects<'_> {
    type Key = ObjectKey;

    /// Only tracked objects are held: every other ConfigMap and Secret is ignored.
    fn key(&self, meta: &ObjectVersion) -> Option<ObjectKey> {
        let object = ObjectRef { kind: self.kind, name: meta.name.clone()? };
        let key = object.within(meta.namespace.clone()?);
        self.view.objects.is_tracked(&key).then_some(key)
    }

    fn apply(&mut self, meta: ObjectVersion) {
        let Some(key) = self.key(&meta) else { return };
        let view = &mut *self.view;
        // Before the first reads, those reads will see this version.
        if view.phase != Phase::Listing
            && !view.objects.is_current(&key, meta.resource_version.as_deref())
        {
            view.objects.request(key);
        }
    }

    /// Read, and found absent.
    fn delete(&mut self, key: ObjectKey) {
        if self.view.phase != Phase::Listing {
            self.view.objects.request(key);
        }
    }

    /// The tracked objects of this kind that exist as far as the controller knows and the
    /// relist did not list.
    fn unlisted(&self, listed: &HashSet<ObjectKey>) -> Vec<ObjectKey> {
        let gone = |key: &&ObjectKey| key.object.kind == self.kind && !listed.contains(*key);
        self.view.objects.existing().filter(gone).cloned().collect()
    }
}
