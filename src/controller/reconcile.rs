//! Bringing one workload's digests up to date: the webhook's own
//! plan/lookups/decision over the watched workload, and a merge patch of just
//! the configsum annotations guarded by the watched resourceVersion (a
//! conflict is retried on the fresh object). The patch passes through the
//! webhook, which computes the same values and adds nothing. Every call is
//! bounded in time, and nothing is patched outside this replica's leadership.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use json_patch::PatchOperation;
use kube::api::{DynamicObject, Patch};
use kube::{Api, Client};
use serde_json::{Map, Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use super::event;
use super::images::{self, LatestDigests};
use super::lease::Leadership;
use super::queue::TokenBucket;
use super::trigger::Trigger;
use super::workload::{Snapshot, Snapshots, WorkloadKey, api_resource};
use crate::core::inputs::image::ImageObservation;
use crate::core::{Digester, Mutation, ObjectRef, Observation, Settings};
use crate::lookup::{Inputs, KubeSource, LookupMetrics, observe, observe_all};

/// Bound on each API call, and on one reconciliation's lookups together.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);
const CONFLICT_RETRIES: usize = 5;

/// The workload's snapshot; after a conflict on `stale`, waits (up to 2 s)
/// for the watch to deliver a newer one.
async fn fresh_snapshot(
    snapshots: &Snapshots,
    key: &WorkloadKey,
    stale: Option<&Option<String>>,
) -> Option<Snapshot> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let snapshot = snapshots.lock().ok()?.get(key).cloned()?;
        if stale.is_none_or(|stale| *stale != snapshot.resource_version)
            || Instant::now() >= deadline
        {
            return Some(snapshot);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How a reconciliation ended, short of an error.
#[derive(Debug, PartialEq, Eq)]
pub enum Reconciled {
    Patched,
    Unchanged,
    /// Deleted, or no longer one the webhook would mutate.
    Gone,
    /// This replica does not lead (any more) in the work's term: dropped.
    NotLeading,
}

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("API server: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Lookup(String),
    #[error("the workload kept changing under us ({CONFLICT_RETRIES} conflicts)")]
    Conflict,
    #[error("the patch timed out")]
    Timeout,
}

impl ReconcileError {
    /// The `outcome` label of `configsum_controller_patches_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ReconcileError::Conflict => "conflict",
            ReconcileError::Timeout => "timeout",
            ReconcileError::Kube(_) | ReconcileError::Lookup(_) => "failed",
        }
    }
}

pub struct Reconciler {
    pub client: Client,
    pub source: Arc<KubeSource>,
    pub digester: Digester,
    pub settings: Settings,
    pub lookups: LookupMetrics,
    pub snapshots: Snapshots,
    pub leadership: watch::Receiver<Leadership>,
    /// The digests the image poller found, by slot.
    pub latest_digests: LatestDigests,
}

impl Reconciler {
    /// Patches `key` if its digests are not current; `changed` names the
    /// objects that triggered it, for the Event. Works from the watched
    /// snapshot (the controller needs no `get` on workloads); after a
    /// conflict it waits for the watch to deliver the newer version. Patches
    /// only while leading in `term`, through `bucket`.
    pub async fn reconcile(
        &self,
        key: &WorkloadKey,
        changed: &BTreeSet<Trigger>,
        term: u64,
        bucket: &mut TokenBucket,
    ) -> Result<Reconciled, ReconcileError> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &key.namespace, &api_resource(key.kind));
        let mut conflicted: Option<Option<String>> = None;
        for _ in 0..CONFLICT_RETRIES {
            let Some(snapshot) = fresh_snapshot(&self.snapshots, key, conflicted.as_ref()).await
            else {
                return if conflicted.is_some() {
                    Err(ReconcileError::Conflict)
                } else {
                    Ok(Reconciled::Gone)
                };
            };
            let mutation = snapshot.mutation;
            let inputs =
                ReconcileInputs { reconciler: self, key, deadline: Instant::now() + CALL_TIMEOUT };
            let observed = observe(&mutation, &inputs).await;
            let decision = mutation.decide(observed, &self.settings);
            // Retried with backoff; named as the controller says it, not in
            // the webhook's denial, which names a flag the controller lacks.
            if !decision.unreadable.is_empty() {
                return Err(ReconcileError::Lookup(unreadable(&decision.unreadable)));
            }
            if decision.patch.is_empty() {
                return Ok(Reconciled::Unchanged);
            }
            // Only patches are paced; reconciliations that change nothing are free.
            while let Err(wait) = bucket.take(std::time::Instant::now()) {
                tokio::time::sleep(wait).await;
            }
            let Some(left) = self.leadership.borrow().remaining(term, Instant::now()) else {
                return Ok(Reconciled::NotLeading);
            };
            let version = snapshot.resource_version.clone();
            let params = super::patch_params();
            // A pinned image is an element of the containers list, which a
            // merge patch could only replace whole: that patch is a JSON Patch.
            let patch: Patch<Value> =
                if decision.patch.iter().any(|op| matches!(op, PatchOperation::Replace(_))) {
                    Patch::Json(guarded_json_patch(decision.patch.clone(), version))
                } else {
                    Patch::Merge(merge_patch(key.kind.annotations_path(), &decision.patch, version))
                };
            let call = api.patch(&key.name, &params, &patch);
            match tokio::time::timeout(left.min(CALL_TIMEOUT), call).await {
                Err(_) => return Err(ReconcileError::Timeout),
                Ok(Ok(_)) => {
                    let mut named: BTreeSet<Trigger> = changed.clone();
                    named.extend(decision.changed.into_iter().map(Trigger::Object));
                    let event = event::rolled(key, snapshot.uid, &named);
                    event::record(&self.client, event, CALL_TIMEOUT).await;
                    return Ok(Reconciled::Patched);
                }
                Ok(Err(kube::Error::Api(status))) if status.code == 409 => {
                    conflicted = Some(snapshot.resource_version)
                }
                Ok(Err(kube::Error::Api(status))) if status.code == 404 => {
                    return Ok(Reconciled::Gone);
                }
                Ok(Err(e)) => return Err(e.into()),
            }
        }
        Err(ReconcileError::Conflict)
    }
}

/// `could not read secret/db, configmap/app`.
fn unreadable(objects: &[ObjectRef]) -> String {
    let names: Vec<String> = objects.iter().map(ToString::to_string).collect();
    format!("could not read {}", names.join(", "))
}

/// A reconciliation's observations: its objects read fresh from the API server, its images
/// from what the poller last found.
struct ReconcileInputs<'a> {
    reconciler: &'a Reconciler,
    key: &'a WorkloadKey,
    deadline: Instant,
}

impl Inputs for ReconcileInputs<'_> {
    async fn objects(&self, mutation: &Mutation) -> Vec<Observation> {
        let r = self.reconciler;
        observe_all(&*r.source, &r.digester, mutation, self.deadline, &r.lookups).await
    }

    async fn images(&self, mutation: &Mutation) -> Vec<ImageObservation> {
        images::observations(mutation, self.key, &self.reconciler.latest_digests)
    }
}

/// The decision's operations as a JSON Patch that first sets
/// `metadata.resourceVersion` to the watched one: the API server then
/// refuses it with 409 Conflict if the object changed since.
pub fn guarded_json_patch(
    mut ops: Vec<PatchOperation>,
    resource_version: Option<String>,
) -> json_patch::Patch {
    let path = json_patch::jsonptr::PointerBuf::from_tokens(["metadata", "resourceVersion"]);
    let guard = PatchOperation::Replace(json_patch::ReplaceOperation {
        path,
        value: resource_version.map_or(Value::Null, Value::String),
    });
    ops.insert(0, guard);
    json_patch::Patch(ops)
}

/// The decision's add/remove operations on annotation keys as one merge
/// patch of the annotations map at `path` (the kind's), guarded by `resourceVersion`. The
/// operations that create the `metadata`/`annotations` maps are implied by a merge patch.
pub fn merge_patch(
    path: &[&str],
    ops: &[PatchOperation],
    resource_version: Option<String>,
) -> Value {
    let mut annotations = Map::new();
    for op in ops {
        let (path, value) = match op {
            PatchOperation::Add(add) if add.value.is_string() => (&add.path, add.value.clone()),
            PatchOperation::Remove(remove) => (&remove.path, Value::Null),
            _ => continue,
        };
        if let Some(key) = path.last() {
            annotations.insert(key.decoded().into_owned(), value);
        }
    }
    let mut patch = Value::Object(annotations);
    for field in path.iter().rev() {
        patch = json!({ *field: patch });
    }
    if let Value::Object(fields) = &mut patch {
        let metadata = fields.entry("metadata").or_insert_with(|| json!({}));
        if let Value::Object(metadata) = metadata {
            metadata.insert("resourceVersion".to_owned(), json!(resource_version));
        }
    }
    patch
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::WorkloadKind;

    #[test]
    fn a_pods_merge_patch_is_of_its_own_annotations() {
        let ops: Vec<PatchOperation> = serde_json::from_value(json!([
            {"op": "add", "path": "/metadata/annotations/secret.configsum.dev~1db", "value": "x"}
        ]))
        .expect("ops");
        assert_eq!(
            merge_patch(WorkloadKind::Pod.annotations_path(), &ops, Some("7".into())),
            json!({"metadata": {"resourceVersion": "7", "annotations": {"secret.configsum.dev/db": "x"}}})
        );
    }

    #[test]
    fn unreadable_objects_are_named_without_the_webhooks_flag() {
        let message = unreadable(&[ObjectRef::secret("db"), ObjectRef::config_map("app")]);
        assert_eq!(message, "could not read secret/db, configmap/app");
    }

    #[test]
    fn merge_patch_sets_and_removes_only_annotation_keys() {
        let ops: Vec<PatchOperation> = serde_json::from_value(json!([
            {"op": "add", "path": "/spec/template/metadata", "value": {}},
            {"op": "add", "path": "/spec/template/metadata/annotations", "value": {}},
            {"op": "remove", "path": "/spec/template/metadata/annotations/configmap.configsum.dev~1old"},
            {"op": "add", "path": "/spec/template/metadata/annotations/secret.configsum.dev~1db", "value": "hmac-sha256:ab"}
        ]))
        .expect("ops");
        assert_eq!(
            merge_patch(WorkloadKind::Deployment.annotations_path(), &ops, Some("42".into())),
            json!({"metadata": {"resourceVersion": "42"}, "spec": {"template": {"metadata": {"annotations": {
                "configmap.configsum.dev/old": null, "secret.configsum.dev/db": "hmac-sha256:ab"}}}}})
        );
    }
}
