//! Bringing one workload's digests up to date: the webhook's own
//! plan/lookups/decision over the watched workload, and a merge patch of just
//! the configsum annotations guarded by the watched resourceVersion (a
//! conflict is retried on the fresh object). The patch passes through the webhook, which computes the same
//! values and adds nothing.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use json_patch::PatchOperation;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::index::{Snapshot, WorkloadKey};
use super::queue::TokenBucket;
use crate::core::workload::WorkloadKind;
use crate::core::{Digester, ObjectRef, Settings};
use crate::lookup::{KubeSource, observe_all};
use crate::metrics::Metrics;

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

/// Bound on one reconciliation's lookups (there is no API server deadline here).
const LOOKUP_BUDGET: Duration = Duration::from_secs(10);
const CONFLICT_RETRIES: usize = 5;

#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Patched,
    Unchanged,
    /// Deleted, or no longer one the webhook would mutate.
    Gone,
}

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("API server: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Lookup(String),
    #[error("the workload kept changing under us ({CONFLICT_RETRIES} conflicts)")]
    Conflict,
}

impl ReconcileError {
    /// The `outcome` label of `configsum_controller_patches_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ReconcileError::Conflict => "conflict",
            ReconcileError::Kube(_) | ReconcileError::Lookup(_) => "failed",
        }
    }
}

pub struct Reconciler {
    pub client: Client,
    pub source: KubeSource,
    pub digester: Digester,
    pub settings: Settings,
    pub metrics: Arc<Metrics>,
}

pub fn api_resource(kind: WorkloadKind) -> ApiResource {
    let (group, version, plural) = kind.resource();
    let api_version =
        if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
    ApiResource {
        group: group.to_owned(),
        version: version.to_owned(),
        api_version,
        kind: kind.as_str().to_owned(),
        plural: plural.to_owned(),
    }
}

/// The latest watched state of each workload, shared by the event loop
/// (which writes it) and the worker (which reads it).
pub type Snapshots = Arc<std::sync::Mutex<HashMap<WorkloadKey, Snapshot>>>;

impl Reconciler {
    /// Patches `key` if its digests are not current; `changed` names the
    /// objects that triggered it, for the Event. Works from the watched
    /// snapshot (the controller needs no `get` on workloads); after a
    /// conflict it waits for the watch to deliver the newer version.
    pub async fn reconcile(
        &self,
        key: &WorkloadKey,
        changed: &BTreeSet<ObjectRef>,
        snapshots: &Snapshots,
        bucket: &tokio::sync::Mutex<TokenBucket>,
    ) -> Result<Outcome, ReconcileError> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &key.namespace, &api_resource(key.kind));
        let mut conflicted: Option<Option<String>> = None;
        for _ in 0..CONFLICT_RETRIES {
            let Some(snapshot) = fresh_snapshot(snapshots, key, conflicted.as_ref()).await else {
                return if conflicted.is_some() {
                    Err(ReconcileError::Conflict)
                } else {
                    Ok(Outcome::Gone)
                };
            };
            let mutation = snapshot.mutation;
            let deadline = Instant::now() + LOOKUP_BUDGET;
            let observations =
                observe_all(&self.source, &self.digester, &mutation, deadline, &self.metrics).await;
            let decision = mutation.decide(observations, &self.settings);
            if let Some(denied) = decision.denied {
                return Err(ReconcileError::Lookup(denied));
            }
            if decision.patch.is_empty() {
                return Ok(Outcome::Unchanged);
            }
            // Only patches are paced; reconciliations that change nothing are free.
            loop {
                let wait = bucket.lock().await.take(std::time::Instant::now());
                match wait {
                    Ok(()) => break,
                    Err(wait) => tokio::time::sleep(wait).await,
                }
            }
            let patch = merge_patch(&decision.patch, snapshot.resource_version.clone());
            match api.patch(&key.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => {
                    let mut named: BTreeSet<ObjectRef> = changed.clone();
                    named.extend(decision.changed);
                    self.record_event(key, snapshot.uid, &named).await;
                    return Ok(Outcome::Patched);
                }
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    conflicted = Some(snapshot.resource_version)
                }
                Err(kube::Error::Api(status)) if status.code == 404 => return Ok(Outcome::Gone),
                Err(e) => return Err(e.into()),
            }
        }
        Err(ReconcileError::Conflict)
    }

    /// A Normal Event on the workload naming the changed objects (never contents).
    async fn record_event(
        &self,
        key: &WorkloadKey,
        uid: Option<String>,
        changed: &BTreeSet<ObjectRef>,
    ) {
        let names: Vec<String> = changed.iter().map(ToString::to_string).collect();
        let message = if names.is_empty() {
            "configsum brought the pod template's configuration digests up to date".to_owned()
        } else {
            format!("configsum rolled the pod template: changed {}", names.join(", "))
        };
        let resource = api_resource(key.kind);
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let event = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{}.", key.name)),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version: Some(resource.api_version),
                kind: Some(resource.kind),
                name: Some(key.name.clone()),
                namespace: Some(key.namespace.clone()),
                uid,
                ..ObjectReference::default()
            },
            reason: Some("ConfigurationChanged".to_owned()),
            message: Some(message),
            type_: Some("Normal".to_owned()),
            source: Some(EventSource {
                component: Some("configsum-controller".to_owned()),
                ..EventSource::default()
            }),
            reporting_component: Some("configsum-controller".to_owned()),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            count: Some(1),
            ..Event::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &key.namespace);
        if let Err(e) = api.create(&PostParams::default(), &event).await {
            tracing::warn!(workload = %key, error = %e, "cannot record an Event");
        }
    }
}

/// The decision's add/remove operations on annotation keys as one merge
/// patch, guarded by `resourceVersion`. The operations that create the
/// `metadata`/`annotations` maps are implied by a merge patch.
pub fn merge_patch(ops: &[PatchOperation], resource_version: Option<String>) -> Value {
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
    json!({
        "metadata": {"resourceVersion": resource_version},
        "spec": {"template": {"metadata": {"annotations": annotations}}}
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
            merge_patch(&ops, Some("42".into())),
            json!({"metadata": {"resourceVersion": "42"}, "spec": {"template": {"metadata": {"annotations": {
                "configmap.configsum.dev/old": null, "secret.configsum.dev/db": "hmac-sha256:ab"}}}}})
        );
    }
}
