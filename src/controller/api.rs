//! What the controller asks of the API server besides its watches: reads of
//! tracked objects, patches of workloads and the Events on them. Behind
//! [`ControllerApi`] so that the reconciler is tested against scripted
//! answers (`fake_api.rs`: 409, 404, timeouts, failures); [`KubeApi`] is the
//! real one.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use kube::api::{DynamicObject, Patch};
use kube::{Api, Client};
use serde_json::Value;

use super::model::workload::WorkloadKey;
use crate::core::ObjectKind;
use crate::core::{ObjectContent, ObjectKey, ObjectRef};
use crate::lookup::api_object::{object_resource, workload_resource};
use crate::lookup::{KubeSource, LookupError, ObjectSource};

/// An object's content and the resourceVersion it was read at; `None`: it does not exist.
pub type ReadResult = Result<Option<(ObjectContent, Option<String>)>, LookupError>;

/// Why a patch was refused.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// The workload changed since the resourceVersion the patch was guarded by (409).
    #[error("conflict")]
    Conflict,
    /// The workload is gone (404).
    #[error("not found")]
    NotFound,
    /// Anything else, as the client describes it.
    #[error("{0}")]
    Failed(String),
}

pub trait ControllerApi: Send + Sync + 'static {
    /// Reads a tracked ConfigMap or Secret.
    fn read(&self, object: &ObjectKey) -> impl Future<Output = ReadResult> + Send;

    /// Patches a workload.
    fn patch(
        &self,
        workload: &WorkloadKey,
        patch: &Patch<Value>,
    ) -> impl Future<Output = Result<(), PatchError>> + Send;

    /// Records an Event, within `timeout`; a failure is logged, never retried
    /// (the patch it reports happened).
    fn record(&self, event: Event, timeout: Duration) -> impl Future<Output = ()> + Send;

    /// Reads the pod template of a workload another one tracks, when the watch has not
    /// delivered it since it became tracked; `None`: it does not exist.
    fn read_template(
        &self,
        workload: &WorkloadKey,
    ) -> impl Future<Output = Result<Option<Value>, LookupError>> + Send;
}

/// The API server, through kube.
pub struct KubeApi {
    pub client: Client,
    pub source: Arc<KubeSource>,
    /// Who records the Events: `reportingInstance`, and the labels each carries (a
    /// sharded controller's `<domain>/shard`).
    pub reporter: Reporter,
}

/// The replica behind each Event, so that `kubectl get events -l` tells shards apart.
#[derive(Clone, Debug, Default)]
pub struct Reporter {
    pub instance: String,
    pub labels: std::collections::BTreeMap<String, String>,
}

impl ControllerApi for KubeApi {
    async fn read(&self, object: &ObjectKey) -> ReadResult {
        self.source.read(&object.namespace, &object.object).await
    }

    async fn patch(&self, workload: &WorkloadKey, patch: &Patch<Value>) -> Result<(), PatchError> {
        let resource = workload_resource(workload.kind);
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &workload.namespace, &resource);
        match api.patch(&workload.name, &super::patch_params(), patch).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => Err(PatchError::Conflict),
            Err(kube::Error::Api(status)) if status.code == 404 => Err(PatchError::NotFound),
            Err(e) => Err(PatchError::Failed(e.to_string())),
        }
    }

    async fn record(&self, mut event: Event, timeout: Duration) {
        let namespace = event.involved_object.namespace.clone().unwrap_or_default();
        if event.involved_object.uid.is_none() {
            // An Event about a ConfigMap or Secret (a halted change's source): its uid is not
            // kept for each of them, and `kubectl describe` finds Events by it.
            event.involved_object.uid = self.object_uid(&event, &namespace, timeout).await;
        }
        event.reporting_instance = Some(self.reporter.instance.clone());
        if !self.reporter.labels.is_empty() {
            event.metadata.labels = Some(self.reporter.labels.clone());
        }
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        match tokio::time::timeout(timeout, api.create(&super::post_params(), &event)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot record an Event"),
            Err(_) => tracing::warn!("recording an Event timed out"),
        }
    }

    async fn read_template(&self, workload: &WorkloadKey) -> Result<Option<Value>, LookupError> {
        self.source.fetch_template(&workload.namespace, workload.kind, &workload.name).await
    }
}

impl KubeApi {
    /// The uid of the ConfigMap or Secret `event` is about, from its metadata; `None` for any
    /// other object, or when it cannot be read in time (the Event is recorded without it).
    async fn object_uid(
        &self,
        event: &Event,
        namespace: &str,
        timeout: Duration,
    ) -> Option<String> {
        let name = event.involved_object.name.as_deref()?;
        let kind = ObjectKind::from_api_kind(event.involved_object.kind.as_deref()?)?;
        let objects: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &object_resource(kind));
        let read = async { objects.get_metadata(name).await.ok()?.metadata.uid };
        tokio::time::timeout(timeout, read).await.ok().flatten()
    }
}

/// A [`ControllerApi`]'s reads as the lookup layer's [`ObjectSource`], for
/// the objects a reconciliation has no fresh digest of.
pub struct Reads<A>(pub Arc<A>);

impl<A: ControllerApi> ObjectSource for Reads<A> {
    async fn fetch(
        &self,
        namespace: &str,
        object: &ObjectRef,
    ) -> Result<Option<Arc<ObjectContent>>, LookupError> {
        let key = object.clone().within(namespace);
        Ok(self.0.read(&key).await?.map(|(content, _)| Arc::new(content)))
    }
}

#[cfg(test)]
mod tests {
    //! The URI of each write [`KubeApi`] sends, as the API server gets it.

    use k8s_openapi::api::core::v1::ObjectReference;

    use super::*;
    use crate::core::model::kinds::WorkloadKind;
    use crate::core::model::object_scope::ObjectScope;
    use crate::lookup::well_formed_query::recording;

    fn api() -> (KubeApi, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
        let (client, sent) = recording::client();
        let source = Arc::new(KubeSource::new(client.clone(), ObjectScope::default()));
        (KubeApi { client, source, reporter: Reporter::default() }, sent)
    }

    #[tokio::test]
    async fn a_workload_patch_names_the_field_manager_only() {
        let (api, sent) = api();
        let web = WorkloadKey {
            kind: WorkloadKind::Deployment,
            namespace: "shop".into(),
            name: "web".into(),
        };
        let _ = api.patch(&web, &Patch::Merge(serde_json::json!({}))).await;
        assert_eq!(
            recording::sent(&sent),
            ["PATCH /apis/apps/v1/namespaces/shop/deployments/web?fieldManager=configsum"]
        );
    }

    #[tokio::test]
    async fn an_event_is_created_with_the_field_manager_only() {
        let (api, sent) = api();
        let event = Event {
            involved_object: ObjectReference {
                kind: Some("Deployment".into()),
                namespace: Some("shop".into()),
                name: Some("web".into()),
                uid: Some("u-1".into()),
                ..ObjectReference::default()
            },
            ..Event::default()
        };
        api.record(event, Duration::from_secs(1)).await;
        assert_eq!(
            recording::sent(&sent),
            ["POST /api/v1/namespaces/shop/events?fieldManager=configsum"]
        );
    }
}
