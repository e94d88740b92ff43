//! The watches, fanned into one channel of messages for the event loop:
//! opted-in namespaces (metadata), the workload kinds that roll (a light
//! view of each), and every tracked kind of object declared in `core::inputs`
//! (metadata only: their data is read on demand and never kept). kube-runtime's watcher lists, watches,
//! follows bookmarks and relists after a 410 Gone; the loop sees `Init`,
//! `InitApply` … `InitDone` for every (re)list.

use std::time::Duration;

use futures_util::{Stream, StreamExt as _};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ApiResource;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::warn;

use super::model::backoff::WatchBackoff;
use super::model::message::{Message, ObjectVersion};
use super::model::workload::WatchedWorkload;
use crate::controller::model::message::{Partition, partitions};
use crate::core::ObjectKind;
use crate::core::model::kinds::Controller;
use crate::core::model::kinds::WorkloadKind;
use crate::core::model::label_selector::LabelSelector;
use crate::lookup::api_object::object_resource;
use crate::lookup::api_object::workload_resource;
use crate::process::StartupError;

/// The API server ends each watch after this long; the watcher resumes it
/// from the last resourceVersion. Its idle timeout (this plus a margin)
/// catches a watch that hangs.
const WATCH_TIMEOUT_SECONDS: u32 = 50;

/// Items per LIST page of ConfigMaps and Secrets (kube-runtime's default is
/// 500). A page is held whole while its items are applied, and its response
/// body before that; nearly all of those objects are not tracked, so the
/// page is pure transient. Half the default took 1–2 MiB off the peak RSS of
/// the bench's realistic shape, for 400 rather than 200 requests per 100,000
/// Secrets.
const METADATA_PAGE_SIZE: u32 = 250;

/// Items per LIST page of workloads. Each is decoded whole (its spec's text, its status) and a
/// page is held while its items are applied: a page of 500 Deployments was over a megabyte
/// of the peak when every watch listed again at once. A cluster has a tenth as many workloads
/// as Secrets, so a fifth of the default costs few requests (100 per 10,000 workloads).
const WORKLOAD_PAGE_SIZE: u32 = 100;

pub struct Watches {
    client: Client,
    tx: mpsc::Sender<Message>,
    /// The workload kinds watched: served, and declared to roll.
    pub kinds: Vec<WorkloadKind>,
    /// Declared to roll where served, and not served at start-up.
    pub not_served: Vec<WorkloadKind>,
    workload_tasks: Vec<JoinHandle<()>>,
    /// Counts the (re)starts of the workload watches.
    pub epoch: u64,
    /// What each kind's watches list: every namespace, or each of `--namespaces`.
    partitions: Vec<Partition>,
}

/// `kind`'s API in `partition`: one namespace's, or every namespace's.
fn api_in<K>(client: &Client, partition: &Partition, resource: &ApiResource) -> Api<K>
where
    K: kube::Resource<DynamicType = ApiResource, Scope = kube::core::DynamicResourceScope>,
{
    match partition {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, resource),
        None => Api::all_with(client.clone(), resource),
    }
}

impl Watches {
    /// Starts the namespace and object watches; workload watches start with
    /// [`Watches::restart_workloads`], once the namespaces are known.
    /// `namespace_selector` (`--namespace-selector`) picks the namespaces in scope;
    /// `namespaces` (`--namespaces`, sorted), when not empty, confines every watch of objects
    /// and workloads to those, one watch per namespace (the namespace watch stays one).
    pub async fn start(
        client: Client,
        tx: mpsc::Sender<Message>,
        timeout: Duration,
        namespace_selector: &LabelSelector,
        namespaces: &[String],
    ) -> Result<Self, StartupError> {
        let partitions = partitions(namespaces);
        let config = || watcher::Config::default().timeout(WATCH_TIMEOUT_SECONDS);
        let selector = namespace_selector.to_string();
        let namespaces: Api<WatchedMeta> =
            Api::all_with(client.clone(), &ApiResource::erase::<Namespace>(&()));
        forward(watcher::watcher(namespaces, config().labels(&selector)), tx.clone(), |e| {
            Message::Namespace(meta_event(e))
        });
        for kind in ObjectKind::all() {
            for partition in &partitions {
                let objects: Api<WatchedMeta> = api_in(&client, partition, &object_resource(kind));
                let config = config().page_size(METADATA_PAGE_SIZE);
                let partition = partition.clone();
                forward(watcher::watcher(objects, config), tx.clone(), move |e| {
                    Message::Object(kind, partition.clone(), meta_event(e))
                });
            }
        }
        // The kinds the controller rolls, as declared; a CRD's (Argo
        // Rollouts, a declared custom kind) where it is served: looked up now,
        // and those not served yet again by `discover`.
        let (mut kinds, mut not_served) = (Vec::new(), Vec::new());
        for kind in WorkloadKind::all() {
            match kind.declaration().controller {
                Controller::Rolls => kinds.push(kind),
                Controller::RollsWhereServed => match served(&client, kind, timeout).await {
                    Served::Namespaced => kinds.push(kind),
                    Served::No => not_served.push(kind),
                    Served::ClusterScoped => return Err(cluster_scoped(kind)),
                },
                Controller::Never => {}
            }
        }
        let workload_tasks = Vec::new();
        Ok(Watches { client, tx, kinds, not_served, workload_tasks, epoch: 0, partitions })
    }

    /// Watches `kind` too, from now on: in the current epoch if the workload
    /// watches run (returning it), else from their first start.
    pub fn watch_kind(&mut self, kind: WorkloadKind) -> Option<u64> {
        if self.kinds.contains(&kind) {
            return None;
        }
        self.kinds.push(kind);
        (self.epoch > 0).then(|| {
            let tasks = self.start_workload_watches(kind, self.epoch);
            self.workload_tasks.extend(tasks);
            self.epoch
        })
    }

    /// What each kind's watches list: every namespace, or each of `--namespaces`.
    pub fn partitions(&self) -> Vec<Partition> {
        self.partitions.clone()
    }

    /// `kind`'s workload watches, one per partition.
    fn start_workload_watches(&self, kind: WorkloadKind, epoch: u64) -> Vec<JoinHandle<()>> {
        let resource = workload_resource(kind);
        let config = || {
            watcher::Config::default().timeout(WATCH_TIMEOUT_SECONDS).page_size(WORKLOAD_PAGE_SIZE)
        };
        let watch = |partition: &Partition| {
            let api: Api<WatchedWorkload> = api_in(&self.client, partition, &resource);
            let partition = partition.clone();
            forward(watcher::watcher(api, config()), self.tx.clone(), move |event| {
                let partition = partition.clone();
                Message::Workload { kind, partition, epoch, event: Box::new(event) }
            })
        };
        self.partitions.iter().map(watch).collect()
    }

    /// (Re)starts every workload watch: each lists everything again, so a
    /// newly opted-in namespace's workloads are seen. Returns the new epoch.
    pub fn restart_workloads(&mut self) -> u64 {
        for task in self.workload_tasks.drain(..) {
            task.abort();
        }
        self.epoch += 1;
        let epoch = self.epoch;
        for kind in self.kinds.clone() {
            let tasks = self.start_workload_watches(kind, epoch);
            self.workload_tasks.extend(tasks);
        }
        epoch
    }
}

/// A declared kind whose resource the API server serves cluster-scoped: the
/// declaration is wrong (custom kinds are namespaced), and is refused as a bad
/// file is, naming the entry.
pub fn cluster_scoped(kind: WorkloadKind) -> StartupError {
    let (_, _, resource) = kind.resource();
    StartupError::CustomKind(format!(
        "{} {}: the API server serves {resource} cluster-scoped; declared kinds must be namespaced",
        kind.api_version(),
        kind.as_str()
    ))
}

/// Asks discovery every `every` whether the kinds in `not_served` are served
/// now, and reports each that is (a CRD installed after start-up); ends when
/// all are. Runs beside the event loop, as every network call does.
pub async fn discover(
    client: Client,
    mut not_served: Vec<WorkloadKind>,
    every: Duration,
    timeout: Duration,
    tx: mpsc::Sender<Message>,
) {
    while !not_served.is_empty() {
        tokio::time::sleep(every).await;
        let mut still = Vec::new();
        for kind in not_served {
            let message = match served(&client, kind, timeout).await {
                Served::No => {
                    still.push(kind);
                    continue;
                }
                Served::Namespaced => Message::KindServed(kind),
                Served::ClusterScoped => Message::KindClusterScoped(kind),
            };
            if tx.send(message).await.is_err() {
                return;
            }
        }
        not_served = still;
    }
}

/// Whether and how discovery serves a kind's resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Served {
    No,
    Namespaced,
    ClusterScoped,
}

/// How the API server serves `kind`'s resource (discovery, bounded by `timeout`;
/// no answer counts as not served, and is asked again).
async fn served(client: &Client, kind: WorkloadKind, timeout: Duration) -> Served {
    let (_, _, resource) = kind.resource();
    match resource_served(client, kind.api_version(), resource, timeout).await {
        None => Served::No,
        Some(true) => Served::Namespaced,
        Some(false) => Served::ClusterScoped,
    }
}

/// Whether discovery serves `resource` of `api_version` (`Some(namespaced)`), bounded by
/// `timeout`; no answer counts as not served. For any resource the controller watches only
/// where served (workload CRDs, the CSI driver's statuses).
pub(super) async fn resource_served(
    client: &Client,
    api_version: &str,
    resource: &str,
    timeout: Duration,
) -> Option<bool> {
    let resources = client.list_api_group_resources(api_version);
    let Ok(Ok(list)) = tokio::time::timeout(timeout, resources).await else { return None };
    list.resources.iter().find(|r| r.name == resource).map(|r| r.namespaced)
}

pub(super) fn forward<K, S>(
    stream: S,
    tx: mpsc::Sender<Message>,
    wrap: impl Fn(Event<K>) -> Message + Send + 'static,
) -> JoinHandle<()>
where
    K: Send + 'static,
    S: Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
{
    tokio::spawn(async move {
        let stream = stream.backoff(WatchBackoff::default());
        tokio::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) => {
                    if tx.send(wrap(event)).await.is_err() {
                        break;
                    }
                }
                Err(e) => warn!(error = %e, "watch failed; retrying with backoff"),
            }
        }
    })
}

/// A Namespace, ConfigMap or Secret as its metadata-only watch decodes it:
/// name, namespace, resourceVersion and uid, and configsum's own few annotations
/// ([`ObjectVersion::own_annotations`]), all the loop needs. The rest of a
/// `PartialObjectMetadata` (labels, other annotations, `managedFields`) is skipped
/// by the parser and never built: with Helm's metadata on every Secret,
/// building it made each list page (500 objects) megabytes of short-lived
/// maps.
#[derive(Clone, Debug, Deserialize)]
#[serde(from = "MetaWire")]
struct WatchedMeta {
    /// Only name, namespace, resourceVersion and uid are set: what kube's watcher reads,
    /// and what an Event about the object names.
    meta: ObjectMeta,
    annotations: Vec<(String, String)>,
}

#[derive(Deserialize)]
struct MetaWire {
    #[serde(default)]
    metadata: SparseMeta,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SparseMeta {
    name: Option<String>,
    namespace: Option<String>,
    resource_version: Option<String>,
    #[serde(default, deserialize_with = "own_annotations")]
    annotations: Vec<(String, String)>,
}

impl From<MetaWire> for WatchedMeta {
    fn from(wire: MetaWire) -> Self {
        let SparseMeta { name, namespace, resource_version, annotations } = wire.metadata;
        let meta = ObjectMeta { name, namespace, resource_version, ..ObjectMeta::default() };
        WatchedMeta { meta, annotations }
    }
}

/// Reads an annotations map keeping only the entries [`ObjectVersion::own_annotations`]
/// keeps; every other value is skipped unbuilt.
fn own_annotations<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<(String, String)>, D::Error> {
    struct Own;
    impl<'de> serde::de::Visitor<'de> for Own {
        type Value = Vec<(String, String)>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map of annotations, or null")
        }

        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }

        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }

        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut kept = Vec::new();
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if ObjectVersion::is_own(&key) {
                    let value: String = map.next_value()?;
                    kept.push((key.into_owned(), value));
                } else {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
            Ok(ObjectVersion::own_annotations(kept.iter().map(|(k, v)| (k, v))))
        }
    }
    deserializer.deserialize_option(Own)
}

// Lists, watches and gets ask for `PartialObjectMetadata`.
super::model::dynamic_resource!(WatchedMeta, metadata: true);

fn meta_event(event: Event<WatchedMeta>) -> Event<ObjectVersion> {
    let version = |o: WatchedMeta| {
        let ObjectMeta { namespace, name, resource_version, .. } = o.meta;
        ObjectVersion { namespace, name, resource_version, annotations: o.annotations }
    };
    match event {
        Event::Apply(o) => Event::Apply(version(o)),
        Event::Delete(o) => Event::Delete(version(o)),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(version(o)),
        Event::InitDone => Event::InitDone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource as _;

    /// The watches' requests as the API server gets them: each LIST and WATCH with its
    /// parameters joined by single `&`s.
    #[tokio::test]
    async fn the_watches_send_well_formed_lists_and_watches() {
        use crate::lookup::well_formed_query::recording;
        let (client, sent) = recording::client();
        let (tx, mut rx) = mpsc::channel(64);
        let selector = LabelSelector::equals("team", "a");
        let namespaces = ["shop".to_owned()];
        let watches = Watches::start(client, tx, Duration::from_secs(1), &selector, &namespaces)
            .await
            .map_err(|e| e.to_string());
        let mut watches = watches.expect("watches start");
        watches.restart_workloads();
        // Each watch lists, then watches from the list's resourceVersion (7, the recorder's).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while recording::sent(&sent).iter().filter(|r| r.contains("watch=true")).count() < 4
            && tokio::time::Instant::now() < deadline
        {
            let _ = tokio::time::timeout(Duration::from_millis(50), rx.recv()).await;
        }
        let sent = recording::sent(&sent);
        let watch = "watch=true&timeoutSeconds=50";
        for expected in [
            "GET /api/v1/namespaces?labelSelector=team%3Da&limit=500".to_owned(),
            "GET /api/v1/namespaces/shop/configmaps?limit=250".to_owned(),
            "GET /api/v1/namespaces/shop/secrets?limit=250".to_owned(),
            "GET /apis/apps/v1/namespaces/shop/deployments?limit=100".to_owned(),
            format!(
                "GET /api/v1/namespaces?{watch}&labelSelector=team%3Da&allowWatchBookmarks=true&resourceVersion=7"
            ),
            format!(
                "GET /api/v1/namespaces/shop/secrets?{watch}&allowWatchBookmarks=true&resourceVersion=7"
            ),
            format!(
                "GET /apis/apps/v1/namespaces/shop/deployments?{watch}&allowWatchBookmarks=true&resourceVersion=7"
            ),
        ] {
            assert!(sent.contains(&expected), "{expected} not in {sent:#?}");
        }
        for request in &sent {
            assert!(
                !request.contains("?&") && !request.ends_with('?') && !request.ends_with('&'),
                "{request}"
            );
        }
    }

    #[test]
    fn a_metadata_only_item_keeps_its_identity_and_configsums_own_annotations_only() {
        // A list item as the API server sends it: no kind, Helm's metadata.
        let text = r#"{"metadata": {
            "name": "db", "namespace": "shop", "resourceVersion": "42", "uid": "u-1",
            "labels": {"app.kubernetes.io/managed-by": "Helm"},
            "annotations": {"meta.helm.sh/release-name": "shop",
                "configsum.dev/resume": "0123456789ab", "example.com/fan-out": "all",
                "configsum.dev/digest": "x", "kubectl.kubernetes.io/last-applied-configuration": "{\"big\": 1}"},
            "managedFields": [{"manager": "helm", "operation": "Update",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {".": {}}}}]}}"#;
        let watched: WatchedMeta = serde_json::from_str(text).expect("decodes");
        let expected = ObjectMeta {
            name: Some("db".into()),
            namespace: Some("shop".into()),
            resource_version: Some("42".into()),
            ..ObjectMeta::default()
        };
        assert_eq!(watched.meta, expected);
        let kept: Vec<(&str, &str)> =
            watched.annotations.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            kept,
            [("configsum.dev/resume", "0123456789ab"), ("example.com/fan-out", "all")],
            "the domain is the state's to check"
        );
        let version = meta_event(Event::Apply(watched));
        let Event::Apply(version) = version else { panic!("an Apply") };
        assert_eq!(version.annotation("configsum.dev/resume"), Some("0123456789ab"));
        for annotations in ["null", "{}", r#"{"a": "b"}"#] {
            let text = format!(r#"{{"metadata": {{"name": "x", "annotations": {annotations}}}}}"#);
            let watched: WatchedMeta = serde_json::from_str(&text).expect("decodes");
            assert!(watched.annotations.is_empty(), "{annotations}");
        }
        // A Namespace has no namespace; an item without metadata decodes to nothing.
        let bare: WatchedMeta = serde_json::from_value(serde_json::json!({})).expect("decodes");
        assert_eq!(bare.meta, ObjectMeta::default());
        assert!(WatchedMeta::metadata_api());
    }
}
