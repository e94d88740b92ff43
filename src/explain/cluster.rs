//! explain's inputs from a cluster, read-only, as the user's kubeconfig allows (kubectl's
//! order: `KUBECONFIG`, `~/.kube/config`, then in-cluster): the workloads of the namespace
//! (a list per workload kind, paged), the ConfigMaps and Secrets asked about (a GET each,
//! decoded and digested as the webhook does), the installed digest key, and configsum's
//! Events. Only GET requests: a read that is refused is named in the answer, not retried.

use std::sync::Arc;

use kube::api::{GetParams, ListParams};
use kube::{Client, Resource as _};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::config::DIGEST_KEY_FILE_NAME;
use crate::core::diagnosis::ControllerEvent;
use crate::core::model::kinds::WorkloadKind;
use crate::core::model::object_scope::ObjectScope;
use crate::core::{DigestKeys, Digester, ObjectContent, ObjectRef};
use crate::lookup::api_object::{collection_path, decode, workload_resource};
use crate::lookup::{KubeSource, LookupError, client_from};
use crate::user_agent::Caller;

/// Items per page of a list.
const PAGE: u32 = 500;
/// The most pages read of one list: 50,000 workloads or Events of a namespace.
const MAX_PAGES: usize = 100;
/// The controller's name on its Events.
const CONTROLLER: &str = "configsum-controller";
/// The longest `<domain>/resume` kept: an id is 12 hex digits, and it is tenants' text.
const MAX_RESUME: usize = 64;

/// A ConfigMap or Secret as read: its content, and its `<domain>/resume` if it has one.
pub struct ReadObject {
    pub content: Arc<ObjectContent>,
    /// From the cluster only: files hold no halts to resume.
    pub resume: Option<String>,
}

pub struct Cluster {
    client: Client,
    objects: KubeSource,
    /// The kubeconfig context's namespace.
    pub default_namespace: String,
    scope: ObjectScope,
}

impl Cluster {
    /// Objects are judged by `scope`, as the webhook judges them.
    pub async fn connect(context: Option<&str>, scope: ObjectScope) -> Result<Cluster, String> {
        let options = kube::config::KubeConfigOptions {
            context: context.map(str::to_owned),
            ..Default::default()
        };
        let config = match kube::Config::from_kubeconfig(&options).await {
            Ok(config) => config,
            Err(kubeconfig) if context.is_none() => kube::Config::incluster()
                .map_err(|_| format!("cannot read a kubeconfig: {kubeconfig}"))?,
            Err(e) => return Err(format!("cannot read the kubeconfig: {e}")),
        };
        let default_namespace = config.default_namespace.clone();
        let client = client_from(config, Caller::Explain)
            .map_err(|e| format!("cannot build a client: {e}"))?;
        let objects = KubeSource::new(client.clone(), scope.clone());
        Ok(Cluster { objects, client, default_namespace, scope })
    }

    /// The workloads of `namespace`, every kind; a kind the API server does not serve (a CRD
    /// not installed) has none. A list that fails otherwise is named in `unread`.
    pub async fn workloads(
        &self,
        namespace: &str,
        unread: &mut Vec<String>,
    ) -> Vec<(WorkloadKind, String)> {
        let mut workloads = Vec::new();
        for kind in WorkloadKind::all() {
            let path =
                kube::core::DynamicObject::url_path(&workload_resource(kind), Some(namespace));
            match self.list(&path).await {
                // List items carry no apiVersion or kind; the webhook's plan wants them.
                Ok(items) => workloads.extend(items.iter().filter_map(|json| {
                    let mut object: serde_json::Value = serde_json::from_str(json).ok()?;
                    let fields = object.as_object_mut()?;
                    fields.insert("apiVersion".into(), kind.api_version().into());
                    fields.insert("kind".into(), kind.as_str().into());
                    Some((kind, object.to_string()))
                })),
                Err(ListError::NotServed) => {}
                Err(ListError::Failed(why)) => {
                    unread.push(format!("{}: {why}", kind.row().declaration.resource));
                }
            }
        }
        workloads
    }

    /// The webhook's reader of objects and pull secrets, over this user's client.
    pub fn source(&self) -> &KubeSource {
        &self.objects
    }

    /// A ConfigMap or Secret decoded as the webhook decodes it, and its `resume_key`
    /// annotation (`<domain>/resume`: an operator resumed a halt); `Err` names why it cannot
    /// be read, in the webhook's words.
    pub async fn object(
        &self,
        namespace: &str,
        object: &ObjectRef,
        resume_key: &str,
    ) -> Result<Option<ReadObject>, String> {
        let path = collection_path(object.kind, namespace);
        let request = kube::core::Request::new(path)
            .get(&object.name, &GetParams::default())
            .map_err(|_| LookupError::Decode.to_string())?;
        let json = match self.client.request_text(request).await {
            Ok(json) => json,
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(None),
            Err(kube::Error::Api(status)) => {
                return Err(LookupError::Status(status.code).to_string());
            }
            Err(_) => return Err(LookupError::Connection.to_string()),
        };
        let (content, _) =
            decode(object.kind, &json, &self.scope).map_err(|_| LookupError::Decode.to_string())?;
        let resume = annotation(&json, resume_key).filter(|id| id.len() <= MAX_RESUME);
        Ok(Some(ReadObject { content: Arc::new(content), resume }))
    }

    /// `<domain>/roll-window` of `namespace` (`window_key`), if it has one. Namespaces are
    /// cluster-scoped: a user bound only to Roles may not read it.
    pub async fn namespace_window(
        &self,
        namespace: &str,
        window_key: &str,
    ) -> Result<Option<String>, String> {
        let request = kube::core::Request::new("/api/v1/namespaces")
            .get(namespace, &GetParams::default())
            .map_err(|e| e.to_string())?;
        match self.client.request_text(request).await {
            Ok(json) => Ok(annotation(&json, window_key)),
            Err(kube::Error::Api(status)) => Err(status.reason),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The digest key configsum installed (`--digest-key-secret`), if this user may read it.
    pub async fn digest_key(
        &self,
        (namespace, name): &(String, String),
    ) -> Result<Digester, String> {
        let api: kube::Api<k8s_openapi::api::core::v1::Secret> =
            kube::Api::namespaced(self.client.clone(), namespace);
        let secret = api.get(name).await.map_err(|e| match e {
            kube::Error::Api(status) => status.reason,
            e => e.to_string(),
        })?;
        let keys = secret
            .data
            .and_then(|mut data| data.remove(DIGEST_KEY_FILE_NAME))
            .ok_or_else(|| format!("it has no {DIGEST_KEY_FILE_NAME:?}"))?;
        let keys = DigestKeys::parse(&keys.0).map_err(|e| e.to_string())?;
        Ok(Digester::new(keys))
    }

    /// configsum's controller's Events in `namespace`.
    pub async fn events(&self, namespace: &str) -> Result<Vec<ControllerEvent>, String> {
        let path = format!("/api/v1/namespaces/{namespace}/events");
        let items = self.list(&path).await.map_err(|e| match e {
            ListError::NotServed => "not served".to_owned(),
            ListError::Failed(why) => why,
        })?;
        Ok(items.iter().filter_map(|json| controller_event(json)).collect())
    }

    /// Every item of a collection, as JSON, page by page.
    async fn list(&self, path: &str) -> Result<Vec<String>, ListError> {
        #[derive(Deserialize)]
        struct Page<'a> {
            #[serde(borrow)]
            items: Vec<&'a RawValue>,
            #[serde(default)]
            metadata: ListMeta,
        }
        #[derive(Default, Deserialize)]
        struct ListMeta {
            #[serde(rename = "continue")]
            continue_token: Option<String>,
        }
        let mut items = Vec::new();
        let mut token: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let mut params = ListParams::default().limit(PAGE);
            params.continue_token = token.take();
            let request = kube::core::Request::new(path)
                .list(&params)
                .map_err(|e| ListError::Failed(e.to_string()))?;
            let text = match self.client.request_text(request).await {
                Ok(text) => text,
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    return Err(ListError::NotServed);
                }
                Err(kube::Error::Api(status)) => return Err(ListError::Failed(status.reason)),
                Err(e) => return Err(ListError::Failed(e.to_string())),
            };
            let page: Page<'_> = serde_json::from_str(&text)
                .map_err(|_| ListError::Failed("not a list".to_owned()))?;
            items.extend(page.items.iter().map(|item| item.get().to_owned()));
            match page.metadata.continue_token.filter(|t| !t.is_empty()) {
                Some(next) => token = Some(next),
                None => return Ok(items),
            }
        }
        Err(ListError::Failed(format!("more than {} items", MAX_PAGES * PAGE as usize)))
    }
}

enum ListError {
    NotServed,
    Failed(String),
}

/// One annotation of an object's own metadata, from its JSON.
fn annotation(json: &str, key: &str) -> Option<String> {
    let annotations: Option<std::collections::HashMap<String, String>> =
        crate::core::field_path::read_at(json, &["metadata", "annotations"]).ok().flatten();
    annotations?.remove(key)
}

/// An Event of configsum's controller, as explain reads it; `None` for anyone else's.
fn controller_event(json: &str) -> Option<ControllerEvent> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Wire {
        #[serde(default)]
        involved_object: Involved,
        reason: Option<String>,
        message: Option<String>,
        reporting_component: Option<String>,
        last_timestamp: Option<String>,
        event_time: Option<String>,
        #[serde(default)]
        metadata: Meta,
    }
    #[derive(Default, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Involved {
        api_version: Option<String>,
        kind: Option<String>,
        name: Option<String>,
    }
    #[derive(Default, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        creation_timestamp: Option<String>,
    }
    let wire: Wire = serde_json::from_str(json).ok()?;
    if wire.reporting_component.as_deref() != Some(CONTROLLER) {
        return None;
    }
    let at = [wire.last_timestamp, wire.event_time, wire.metadata.creation_timestamp]
        .into_iter()
        .flatten()
        .find_map(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())?;
    Some(ControllerEvent {
        api_version: wire.involved_object.api_version?,
        kind: wire.involved_object.kind?,
        name: wire.involved_object.name?,
        reason: wire.reason?,
        message: wire.message.unwrap_or_default(),
        at: at.as_second(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// explain's reads as the API server gets them: GETs with no query, and LIST pages with
    /// `limit` and `continue` joined by a single `&`.
    #[tokio::test]
    async fn explains_reads_are_well_formed() {
        use crate::lookup::well_formed_query::recording::{self, EMPTY_LIST};
        let first_page =
            r#"{"apiVersion":"v1","kind":"List","metadata":{"continue":"p2"},"items":[]}"#;
        let (client, sent) = recording::client_answering(move |request| {
            let query = request.uri().query().unwrap_or_default();
            let body = if query == "limit=500" { first_page } else { EMPTY_LIST };
            (200, body.to_owned())
        });
        let scope = ObjectScope::default();
        let objects = KubeSource::new(client.clone(), scope.clone());
        let cluster = Cluster { client, objects, default_namespace: "shop".into(), scope };
        let _ = cluster.events("shop").await;
        let _ = cluster.object("shop", &ObjectRef::config_map("db"), "configsum.dev/resume").await;
        let _ = cluster.namespace_window("shop", "configsum.dev/roll-window").await;
        assert_eq!(
            recording::sent(&sent),
            [
                "GET /api/v1/namespaces/shop/events?limit=500",
                "GET /api/v1/namespaces/shop/events?limit=500&continue=p2",
                "GET /api/v1/namespaces/shop/configmaps/db",
                "GET /api/v1/namespaces/shop",
            ]
        );
    }

    #[test]
    fn only_the_controllers_events_are_read() {
        let event = |component: &str| {
            serde_json::json!({"metadata": {"name": "web.1", "creationTimestamp": "2026-11-27T10:00:00Z"},
                "involvedObject": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "reason": "FlapGuard", "message": "m", "reportingComponent": component,
                "lastTimestamp": "2026-11-27T10:00:05Z"})
            .to_string()
        };
        let read = controller_event(&event(CONTROLLER)).expect("configsum's");
        assert_eq!((read.kind.as_str(), read.name.as_str()), ("Deployment", "web"));
        assert_eq!(read.at, 1_795_773_605);
        assert_eq!(controller_event(&event("kubelet")), None);
        assert_eq!(controller_event("not json"), None);
    }
}
