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
use kube::api::{DynamicObject, PartialObjectMeta};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::warn;

use super::backoff::WatchBackoff;
use super::message::{Message, ObjectVersion};
use super::workload::{WatchedWorkload, api_resource};
use crate::core::ObjectKind;
use crate::core::annotations::NAMESPACE_LABEL;
use crate::core::kinds::Controller;
use crate::core::workload::WorkloadKind;
use crate::lookup::api_object::api_resource as object_api_resource;

/// The API server ends each watch after this long; the watcher resumes it
/// from the last resourceVersion. Its idle timeout (this plus a margin)
/// catches a watch that hangs.
const WATCH_TIMEOUT_SECONDS: u32 = 50;

pub struct Watches {
    client: Client,
    tx: mpsc::Sender<Message>,
    pub kinds: Vec<WorkloadKind>,
    workload_tasks: Vec<JoinHandle<()>>,
    /// Counts the (re)starts of the workload watches.
    pub epoch: u64,
}

impl Watches {
    /// Starts the namespace and object watches; workload watches start with
    /// [`Watches::restart_workloads`], once the namespaces are known.
    pub async fn start(client: Client, tx: mpsc::Sender<Message>, timeout: Duration) -> Self {
        let config = || watcher::Config::default().timeout(WATCH_TIMEOUT_SECONDS);
        let selector = format!("{NAMESPACE_LABEL}=true");
        let namespaces: Api<PartialObjectMeta<Namespace>> = Api::all(client.clone());
        forward(watcher::watcher(namespaces, config().labels(&selector)), tx.clone(), |e| {
            Message::Namespace(meta_event(e))
        });
        for kind in ObjectKind::all() {
            let objects: Api<PartialObjectMeta<DynamicObject>> =
                Api::all_with(client.clone(), &object_api_resource(kind));
            forward(watcher::watcher(objects, config()), tx.clone(), move |e| {
                Message::Object(kind, meta_event(e))
            });
        }
        // The kinds the controller rolls, as declared; a CRD's (Argo
        // Rollouts) only where it is served, looked at once, at start.
        let mut kinds = Vec::new();
        for kind in WorkloadKind::all() {
            let rolls = match kind.declaration().controller {
                Controller::Rolls => true,
                Controller::RollsWhereServed => served(&client, kind, timeout).await,
                Controller::Never => false,
            };
            if rolls {
                kinds.push(kind);
            }
        }
        Watches { client, tx, kinds, workload_tasks: Vec::new(), epoch: 0 }
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
            let api: Api<WatchedWorkload> = Api::all_with(self.client.clone(), &api_resource(kind));
            let config = watcher::Config::default().timeout(WATCH_TIMEOUT_SECONDS);
            self.workload_tasks.push(forward(
                watcher::watcher(api, config),
                self.tx.clone(),
                move |event| Message::Workload { kind, epoch, event: Box::new(event) },
            ));
        }
        epoch
    }
}

/// Whether the API server serves `kind`'s resource (discovery, bounded by `timeout`).
async fn served(client: &Client, kind: WorkloadKind, timeout: Duration) -> bool {
    let (_, _, resource) = kind.resource();
    let api_version = kind.api_version();
    let resources = client.list_api_group_resources(api_version);
    tokio::time::timeout(timeout, resources)
        .await
        .is_ok_and(|r| r.is_ok_and(|r| r.resources.iter().any(|r| r.name == resource)))
}

fn forward<K, S>(
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

fn meta_event<K>(event: Event<PartialObjectMeta<K>>) -> Event<ObjectVersion> {
    let version = |o: PartialObjectMeta<K>| {
        let ObjectMeta { namespace, name, resource_version, .. } = o.metadata;
        ObjectVersion { namespace, name, resource_version }
    };
    match event {
        Event::Apply(o) => Event::Apply(version(o)),
        Event::Delete(o) => Event::Delete(version(o)),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(version(o)),
        Event::InitDone => Event::InitDone,
    }
}
