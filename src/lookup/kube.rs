//! ConfigMaps and Secrets (and the pod templates of tracked workloads) read from the
//! Kubernetes API server.
//!
//! Every lookup is a GET without `resourceVersion`: the API server answers it
//! from etcd with a quorum read, so a write it acknowledged before the review
//! was sent is always seen (docs/behaviour.md, "Reading ConfigMaps and Secrets"). A watch cache could lag; this cannot.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::{DynamicObject, GetParams};
use kube::{Api, Client};
use serde_json::Value;
use tokio::sync::Semaphore;
use tracing::warn;

use super::api_object::{collection_path, decode, workload_resource};
use super::{LookupError, ObjectSource};
use crate::core::field_path::read_at;
use crate::core::model::kinds::WorkloadKind;
use crate::core::model::object_scope::ObjectScope;
use crate::core::{ObjectContent, ObjectRef};
use crate::registry::{PullCredential, credentials_from_secret};

/// Most lookups in flight at once across all reviews of this replica, so a
/// burst of reviews cannot flood the API server. kube's client speaks HTTP/1.1,
/// so each lookup in flight holds a TLS connection of its own: 16 keeps the
/// webhook inside its memory budget, and still reads 320 objects a second from
/// an API server that takes 50 ms per GET (docs/performance.md, "The lookup cap").
pub const SERVER_WIDE_LOOKUPS: usize = 16;

pub struct KubeSource {
    client: Client,
    in_flight: Semaphore,
    /// Which objects count: each read is judged by it.
    scope: ObjectScope,
}

impl KubeSource {
    pub fn new(client: Client, scope: ObjectScope) -> Self {
        KubeSource { client, in_flight: Semaphore::new(SERVER_WIDE_LOOKUPS), scope }
    }
}

impl ObjectSource for KubeSource {
    /// Ready once the API server answers `GET /version`.
    async fn check_ready(&self) -> Result<(), LookupError> {
        self.client.apiserver_version().await.map(|_| ()).map_err(|e| classify(&e))
    }

    async fn fetch(
        &self,
        namespace: &str,
        object: &ObjectRef,
    ) -> Result<Option<Arc<ObjectContent>>, LookupError> {
        let found = self.read(namespace, object).await?;
        Ok(found.map(|(content, _)| Arc::new(content)))
    }

    async fn fetch_sending(
        &self,
        namespace: &str,
        object: &ObjectRef,
        sending: impl FnOnce() + Send,
    ) -> Result<Option<Arc<ObjectContent>>, LookupError> {
        let found = self.read_sending(namespace, object, sending).await?;
        Ok(found.map(|(content, _)| Arc::new(content)))
    }

    async fn pull_credentials(
        &self,
        namespace: &str,
        secrets: &[String],
        service_account: &str,
    ) -> Result<Vec<PullCredential>, LookupError> {
        self.read_pull_credentials(namespace, secrets, service_account).await
    }

    /// A quorum GET of the workload, as for objects; only its pod template is decoded.
    async fn fetch_template(
        &self,
        namespace: &str,
        kind: WorkloadKind,
        name: &str,
    ) -> Result<Option<Value>, LookupError> {
        let Some(template) = kind.declaration().template else { return Ok(None) };
        let _permit = self.in_flight.acquire().await.map_err(|_| LookupError::Connection)?;
        let path = {
            use kube::Resource as _;
            DynamicObject::url_path(&workload_resource(kind), Some(namespace))
        };
        let request = kube::core::Request::new(path)
            .get(name, &GetParams::default())
            .map_err(|_| LookupError::Decode)?;
        match self.client.request_text(request).await {
            Ok(json) => {
                let found: Option<Value> =
                    read_at(&json, template).map_err(|_| LookupError::Decode)?;
                // A workload without a template has an empty one, as far as a digest goes.
                Ok(Some(found.unwrap_or(Value::Null)))
            }
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
            Err(e) => Err(classify(&e)),
        }
    }

    /// A LIST without resourceVersion (a quorum read, as for objects), one page.
    async fn list_provider_class_statuses(
        &self,
        namespace: &str,
        limit: u32,
        next: Option<&str>,
    ) -> Result<crate::core::model::provider_class_status::StatusPage, LookupError> {
        let request = super::provider_classes::page_request(namespace, limit, next)?;
        let _permit = self.in_flight.acquire().await.map_err(|_| LookupError::Connection)?;
        let json = self.client.request_text(request).await.map_err(|e| classify(&e))?;
        serde_json::from_str(&json).map_err(|_| LookupError::Decode)
    }
}

impl KubeSource {
    /// The pull secrets named by a pod and by its ServiceAccount, as credentials.
    async fn read_pull_credentials(
        &self,
        namespace: &str,
        secrets: &[String],
        service_account: &str,
    ) -> Result<Vec<PullCredential>, LookupError> {
        let mut names: Vec<String> = secrets.to_vec();
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client.clone(), namespace);
        let account = {
            let _permit = self.in_flight.acquire().await.map_err(|_| LookupError::Connection)?;
            accounts.get_opt(service_account).await.map_err(|e| classify(&e))?
        };
        let from_account = account.and_then(|a| a.image_pull_secrets).into_iter().flatten();
        names.extend(from_account.map(|r| r.name).filter(|n| !n.is_empty()));
        let mut seen = std::collections::HashSet::new();
        names.retain(|name| seen.insert(name.clone()));

        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let mut credentials = Vec::new();
        for name in names {
            let secret = {
                let _permit =
                    self.in_flight.acquire().await.map_err(|_| LookupError::Connection)?;
                api.get_opt(&name).await.map_err(|e| classify(&e))?
            };
            match secret.map(|s| credentials_from_secret(&s)) {
                Some(Ok(found)) => credentials.extend(found),
                // The error names the type or key, never a value.
                Some(Err(e)) => {
                    warn!(secret = %name, error = %e, "not a usable pull secret; skipped")
                }
                None => {}
            }
        }
        Ok(credentials)
    }

    /// The object's content and the resourceVersion it was read at.
    pub async fn read(
        &self,
        namespace: &str,
        object: &ObjectRef,
    ) -> Result<Option<(ObjectContent, Option<String>)>, LookupError> {
        self.read_sending(namespace, object, || ()).await
    }

    /// [`read`](Self::read), calling `sending` once a slot is free, right before the GET.
    async fn read_sending(
        &self,
        namespace: &str,
        object: &ObjectRef,
        sending: impl FnOnce(),
    ) -> Result<Option<(ObjectContent, Option<String>)>, LookupError> {
        // Never closed, so acquiring cannot fail.
        let _permit = self.in_flight.acquire().await.map_err(|_| LookupError::Connection)?;
        sending();
        let path = collection_path(object.kind, namespace);
        let request = kube::core::Request::new(path)
            .get(&object.name, &GetParams::default())
            .map_err(|_| LookupError::Decode)?;
        match self.client.request_text(request).await {
            Ok(json) => {
                decode(object.kind, &json, &self.scope).map(Some).map_err(|_| LookupError::Decode)
            }
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
            Err(e) => Err(classify(&e)),
        }
    }
}

/// Maps a client error to a lookup error. Only the status code is kept: the
/// API server's message could echo request details.
fn classify(error: &kube::Error) -> LookupError {
    match error {
        kube::Error::Api(status) => LookupError::Status(status.code),
        kube::Error::SerdeError(_) | kube::Error::FromUtf8(_) => LookupError::Decode,
        _ => LookupError::Connection,
    }
}

#[cfg(test)]
mod tests {
    //! The URI of each request a [`KubeSource`] sends, as the API server gets it.

    use super::*;
    use crate::lookup::well_formed_query::recording::{self, NOT_FOUND};

    fn source() -> (KubeSource, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
        let (client, sent) = recording::client_answering(|_| (404, NOT_FOUND.to_owned()));
        (KubeSource::new(client, ObjectScope::default()), sent)
    }

    #[tokio::test]
    async fn an_object_is_a_get_with_no_query() {
        let (source, sent) = source();
        let _ = source.fetch("shop", &ObjectRef::config_map("db")).await;
        let _ = source.fetch("shop", &ObjectRef::secret("db")).await;
        assert_eq!(
            recording::sent(&sent),
            ["GET /api/v1/namespaces/shop/configmaps/db", "GET /api/v1/namespaces/shop/secrets/db",]
        );
    }

    #[tokio::test]
    async fn a_workload_template_is_a_get_with_no_query() {
        let (source, sent) = source();
        let _ = source.fetch_template("shop", WorkloadKind::Deployment, "web").await;
        assert_eq!(recording::sent(&sent), ["GET /apis/apps/v1/namespaces/shop/deployments/web"]);
    }

    #[tokio::test]
    async fn pull_credentials_are_gets_with_no_query() {
        let (source, sent) = source();
        let _ = source.pull_credentials("shop", &["regcred".to_owned()], "builder").await;
        let sent = recording::sent(&sent);
        assert!(sent.contains(&"GET /api/v1/namespaces/shop/serviceaccounts/builder".to_owned()));
        assert!(sent.contains(&"GET /api/v1/namespaces/shop/secrets/regcred".to_owned()));
    }

    #[tokio::test]
    async fn a_page_of_provider_class_statuses_joins_its_parameters_with_single_ampersands() {
        let (source, sent) = source();
        let _ = source.list_provider_class_statuses("shop", 100, None).await;
        let _ = source.list_provider_class_statuses("shop", 100, Some("next=1")).await;
        let path =
            "/apis/secrets-store.csi.x-k8s.io/v1/namespaces/shop/secretproviderclasspodstatuses";
        assert_eq!(
            recording::sent(&sent),
            [format!("GET {path}?limit=100"), format!("GET {path}?limit=100&continue=next%3D1")]
        );
    }
}
