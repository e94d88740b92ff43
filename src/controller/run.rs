//! The controller's event loop: watches feed the reference index and the
//! content fingerprints; a changed tracked object opens a coalescing window
//! for each workload tracking it; due workloads go to one worker that
//! reconciles them through the token bucket. Only the Lease holder patches.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::routing::get;
use futures_util::{Stream, StreamExt as _};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DynamicObject, PartialObjectMeta};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tokio::sync::{Mutex, mpsc, watch};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::index::{ReferenceIndex, Snapshot, WorkloadKey, plan_workload, tracking_of};
use super::lease::LeaderElector;
use super::metrics::ControllerMetrics;
use super::queue::{Coalescer, MinInterval, TokenBucket};
use super::reconcile::{Outcome, Reconciler, Snapshots, api_resource};
use crate::config::ControllerArgs;
use crate::core::annotations::NAMESPACE_LABEL;
use crate::core::digest::ObjectId;
use crate::core::refs::ConsumedKeys;
use crate::core::workload::WorkloadKind;
use crate::core::{Digester, LookupErrorPolicy, ObjectKind, ObjectRef, Settings};
use crate::lookup::{KubeSource, ObjectSource, kube_client};
use crate::metrics::Metrics;
use crate::server::{ShutdownSignals, StartupError, bind, digest_keys};

/// The kinds the controller rolls (Jobs and Pods never roll).
const ROLLING_KINDS: [WorkloadKind; 4] = [
    WorkloadKind::Deployment,
    WorkloadKind::StatefulSet,
    WorkloadKind::DaemonSet,
    WorkloadKind::ReplicaSet,
];

#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error(transparent)]
    Startup(#[from] StartupError),
    #[error("cannot find the Kubernetes API (in-cluster, KUBECONFIG or ~/.kube/config): {0}")]
    Kube(#[from] kube::Error),
}

enum Message {
    Namespace(Event<Namespace>),
    Workload(WorkloadKind, Event<DynamicObject>),
    Object(ObjectKind, Event<ObjectMeta>),
}

/// Which watches have listed everything once.
#[derive(Default)]
struct WatchSync {
    namespaces: bool,
    workloads: HashSet<WorkloadKind>,
    objects: HashSet<ObjectKind>,
    expected_workloads: usize,
}

impl WatchSync {
    fn done(&self) -> bool {
        self.namespaces
            && self.workloads.len() == self.expected_workloads
            && self.objects.len() == 2
    }
}

/// What the controller knows of a tracked object: the resourceVersion it last
/// looked at and a digest of its whole content (`None`: it did not exist).
#[derive(Clone, Debug, Default)]
struct Fingerprint {
    resource_version: Option<String>,
    digest: Option<String>,
}

struct Controller {
    settings: Settings,
    own_namespace: String,
    /// Its `source` (and so the server-wide lookup cap) serves fingerprints too.
    reconciler: Arc<Reconciler>,
    enabled: HashSet<String>,
    namespace_listing: Option<HashSet<String>>,
    index: ReferenceIndex,
    fingerprints: HashMap<(String, ObjectRef), Fingerprint>,
    object_listing: HashMap<ObjectKind, HashSet<(String, String)>>,
    sync: WatchSync,
    baselined: bool,
    coalescer: Coalescer<WorkloadKey>,
    triggers: HashMap<WorkloadKey, BTreeSet<ObjectRef>>,
    snapshots: Snapshots,
    metrics: ControllerMetrics,
}

pub async fn run(args: ControllerArgs) -> Result<(), ControllerError> {
    let digester = Digester::new(digest_keys(
        args.digest_key_file.as_deref(),
        args.allow_plain_secret_digests,
    )?);
    let client = kube_client().await?;
    let own_namespace = args
        .lease_namespace
        .clone()
        .or_else(|| std::env::var("POD_NAMESPACE").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "configsum-system".to_owned());
    let identity = args
        .identity
        .clone()
        .or_else(|| std::env::var("POD_NAME").ok().filter(|s| !s.is_empty()))
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok().map(|h| h.trim().to_owned()))
        .unwrap_or_else(|| format!("configsum-controller-{}", std::process::id()));

    let mut metrics = Metrics::new();
    let controller_metrics = ControllerMetrics::register(&mut metrics);
    let metrics = Arc::new(metrics);
    let ready = Arc::new(AtomicBool::new(false));
    let signals = ShutdownSignals::register();
    let listener = bind(args.metrics_listen).await?;
    let local = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    tokio::spawn(serve_metrics(listener, metrics.clone(), ready.clone()));
    info!(identity = %identity, metrics_listen = %local, "configsum controller started");

    let (stop, stopped) = watch::channel(false);
    let (leading_tx, mut leading) = watch::channel(false);
    let elector = LeaderElector::new(
        client.clone(),
        &own_namespace,
        &args.lease_name,
        &identity,
        args.lease_duration,
    );
    let election = tokio::spawn(elector.run(leading_tx, stopped.clone()));

    let settings = Settings {
        domain: args.annotation_domain.clone(),
        on_lookup_error: LookupErrorPolicy::Deny,
    };
    let reconciler = Arc::new(Reconciler {
        client: client.clone(),
        source: KubeSource::new(client.clone()),
        digester,
        settings: settings.clone(),
        metrics: metrics.clone(),
    });
    let (work_tx, work_rx) = mpsc::channel::<Work>(100_000);
    let bucket =
        Arc::new(Mutex::new(TokenBucket::new(args.rate, args.burst, std::time::Instant::now())));
    let snapshots = Snapshots::default();
    let worker_context = WorkerContext {
        reconciler,
        snapshots: snapshots.clone(),
        bucket,
        min_interval: args.min_interval,
        metrics: controller_metrics.clone(),
    };
    let reconciler = worker_context.reconciler.clone();
    tokio::spawn(worker(worker_context, work_rx, work_tx.clone()));

    let (tx, mut messages) = mpsc::channel::<Message>(10_000);
    let expected_workloads = start_watches(&client, &tx).await;
    let mut controller = Controller {
        settings,
        own_namespace,
        reconciler,
        enabled: HashSet::new(),
        namespace_listing: None,
        index: ReferenceIndex::default(),
        fingerprints: HashMap::new(),
        object_listing: HashMap::new(),
        sync: WatchSync { expected_workloads, ..WatchSync::default() },
        baselined: false,
        coalescer: Coalescer::new(args.window),
        triggers: HashMap::new(),
        snapshots,
        metrics: controller_metrics,
    };

    let shutdown = signals.received();
    tokio::pin!(shutdown);
    let mut was_leading = false;
    loop {
        let next = controller
            .coalescer
            .next_due()
            .map(Instant::from_std)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(1));
        tokio::select! {
            message = messages.recv() => {
                let Some(message) = message else { break };
                controller.handle(message).await;
                if !controller.baselined && controller.sync.done() {
                    controller.baseline_all().await;
                    ready.store(true, Ordering::Relaxed);
                    info!(workloads = controller.index.len(), objects = controller.index.object_count(), "watches synced; ready");
                    was_leading = false;
                }
            }
            _ = tokio::time::sleep_until(next) => {}
            changed = leading.changed() => {
                if changed.is_err() { break }
            }
            _ = &mut shutdown => break,
        }
        let is_leading = *leading.borrow();
        if controller.baselined {
            if is_leading && !was_leading {
                controller.catch_up();
            }
            if is_leading {
                controller.dispatch(&work_tx).await;
            } else {
                controller.coalescer = Coalescer::new(args.window);
                controller.triggers.clear();
            }
            was_leading = is_leading;
        }
        let queued = work_tx.max_capacity() - work_tx.capacity();
        controller.metrics.queue_depth.set((controller.coalescer.len() + queued) as i64);
        controller.metrics.watched_objects.set(controller.index.object_count() as i64);
    }
    info!("shutting down: releasing the Lease");
    ready.store(false, Ordering::Relaxed);
    let _ = stop.send(true);
    let _ = election.await;
    Ok(())
}

/// Starts every watch; returns how many workload kinds are watched.
async fn start_watches(client: &Client, tx: &mpsc::Sender<Message>) -> usize {
    let selector = format!("{NAMESPACE_LABEL}=true");
    forward(
        watcher::watcher(
            Api::<Namespace>::all(client.clone()),
            watcher::Config::default().labels(&selector),
        ),
        tx.clone(),
        Message::Namespace,
    );
    let mut kinds = ROLLING_KINDS.to_vec();
    // Argo Rollouts only where the CRD is served.
    if client
        .list_api_group_resources("argoproj.io/v1alpha1")
        .await
        .is_ok_and(|r| r.resources.iter().any(|r| r.name == "rollouts"))
    {
        kinds.push(WorkloadKind::Rollout);
    }
    for kind in &kinds {
        let kind = *kind;
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &api_resource(kind));
        forward(watcher::watcher(api, watcher::Config::default()), tx.clone(), move |e| {
            Message::Workload(kind, e)
        });
    }
    // ConfigMaps and Secrets: metadata only; their data is read on demand, never kept.
    let config_maps: Api<PartialObjectMeta<ConfigMap>> = Api::all(client.clone());
    forward(watcher::watcher(config_maps, watcher::Config::default()), tx.clone(), |e| {
        Message::Object(ObjectKind::ConfigMap, meta_event(e))
    });
    let secrets: Api<PartialObjectMeta<Secret>> = Api::all(client.clone());
    forward(watcher::watcher(secrets, watcher::Config::default()), tx.clone(), |e| {
        Message::Object(ObjectKind::Secret, meta_event(e))
    });
    kinds.len()
}

fn forward<K, S>(
    stream: S,
    tx: mpsc::Sender<Message>,
    wrap: impl Fn(Event<K>) -> Message + Send + 'static,
) where
    K: Send + 'static,
    S: Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
{
    tokio::spawn(async move {
        let stream = stream.default_backoff();
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
    });
}

fn meta_event<K>(event: Event<PartialObjectMeta<K>>) -> Event<ObjectMeta> {
    match event {
        Event::Apply(o) => Event::Apply(o.metadata),
        Event::Delete(o) => Event::Delete(o.metadata),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(o.metadata),
        Event::InitDone => Event::InitDone,
    }
}

impl Controller {
    fn forget(&mut self, key: &WorkloadKey) {
        self.index.remove(key);
        if let Ok(mut snapshots) = self.snapshots.lock() {
            snapshots.remove(key);
        }
    }

    fn in_scope(&self, namespace: &str) -> bool {
        self.enabled.contains(namespace)
    }

    async fn handle(&mut self, message: Message) {
        match message {
            Message::Namespace(event) => self.namespace_event(event).await,
            Message::Workload(kind, event) => self.workload_event(kind, event).await,
            Message::Object(kind, event) => self.object_event(kind, event).await,
        }
    }

    async fn namespace_event(&mut self, event: Event<Namespace>) {
        let name = |ns: &Namespace| ns.metadata.name.clone().unwrap_or_default();
        match event {
            Event::Init => self.namespace_listing = Some(HashSet::new()),
            Event::InitApply(ns) | Event::Apply(ns) => {
                let name = name(&ns);
                if name == self.own_namespace || name == "kube-system" {
                    return;
                }
                if let Some(listing) = &mut self.namespace_listing {
                    listing.insert(name.clone());
                }
                if self.enabled.insert(name.clone()) && self.baselined {
                    // Newly opted in: first observation, so a baseline and no patch.
                    self.baseline(|ns, _| ns == name).await;
                }
            }
            Event::Delete(ns) => {
                self.enabled.remove(&name(&ns));
            }
            Event::InitDone => {
                if let Some(listing) = self.namespace_listing.take() {
                    self.enabled = listing;
                }
                self.sync.namespaces = true;
            }
        }
    }

    async fn workload_event(&mut self, kind: WorkloadKind, event: Event<DynamicObject>) {
        match event {
            Event::Apply(object) | Event::InitApply(object) => {
                let (Some(namespace), Some(name)) =
                    (object.metadata.namespace.clone(), object.metadata.name.clone())
                else {
                    return;
                };
                let key = WorkloadKey { kind, namespace: namespace.clone(), name };
                let Ok(json) = serde_json::to_string(&object) else { return };
                match plan_workload(kind, &namespace, &json, &self.settings) {
                    Some(mutation) => {
                        let new = self.index.upsert(key.clone(), tracking_of(&mutation));
                        let snapshot = Snapshot {
                            mutation,
                            resource_version: object.metadata.resource_version.clone(),
                            uid: object.metadata.uid.clone(),
                        };
                        if let Ok(mut snapshots) = self.snapshots.lock() {
                            snapshots.insert(key, snapshot);
                        }
                        if self.baselined && self.in_scope(&namespace) && !new.is_empty() {
                            let new: HashSet<ObjectRef> = new.into_iter().collect();
                            self.baseline(|ns, o| ns == namespace && new.contains(o)).await;
                        }
                    }
                    None => self.forget(&key),
                }
            }
            Event::Delete(object) => {
                if let (Some(namespace), Some(name)) =
                    (object.metadata.namespace, object.metadata.name)
                {
                    self.forget(&WorkloadKey { kind, namespace, name });
                }
            }
            Event::Init => {}
            Event::InitDone => {
                self.sync.workloads.insert(kind);
            }
        }
    }

    async fn object_event(&mut self, kind: ObjectKind, event: Event<ObjectMeta>) {
        let initial = !self.sync.objects.contains(&kind);
        match event {
            Event::Init => {
                self.object_listing.insert(kind, HashSet::new());
            }
            Event::InitApply(meta) => {
                if let (Some(ns), Some(name)) = (&meta.namespace, &meta.name) {
                    self.object_listing.entry(kind).or_default().insert((ns.clone(), name.clone()));
                }
                if !initial {
                    self.object_changed(kind, &meta).await;
                }
            }
            Event::Apply(meta) => self.object_changed(kind, &meta).await,
            Event::Delete(meta) => {
                if let (Some(ns), Some(name)) = (meta.namespace, meta.name) {
                    self.object_gone(ObjectRef { kind, name }, &ns);
                }
            }
            Event::InitDone => {
                let listed = self.object_listing.remove(&kind).unwrap_or_default();
                if !initial {
                    // Deleted while the watch was down: not listed again.
                    let gone: Vec<(String, ObjectRef)> = self
                        .fingerprints
                        .iter()
                        .filter(|((ns, o), f)| {
                            o.kind == kind
                                && f.digest.is_some()
                                && !listed.contains(&(ns.clone(), o.name.clone()))
                        })
                        .map(|(k, _)| k.clone())
                        .collect();
                    for (ns, object) in gone {
                        self.object_gone(object, &ns);
                    }
                }
                self.sync.objects.insert(kind);
            }
        }
    }

    /// A tracked object's metadata moved: compare its content with what we saw.
    async fn object_changed(&mut self, kind: ObjectKind, meta: &ObjectMeta) {
        let (Some(ns), Some(name)) = (&meta.namespace, &meta.name) else { return };
        let object = ObjectRef { kind, name: name.clone() };
        if !self.baselined || !self.in_scope(ns) || !self.index.is_tracked(ns, &object) {
            return;
        }
        let slot = (ns.clone(), object.clone());
        let known = self.fingerprints.get(&slot).cloned().unwrap_or_default();
        if known.resource_version.is_some() && known.resource_version == meta.resource_version {
            return;
        }
        let Some(digest) = self.fingerprint(ns, &object).await else { return };
        let changed = known.digest != digest;
        self.fingerprints
            .insert(slot, Fingerprint { resource_version: meta.resource_version.clone(), digest });
        if changed {
            self.trigger(ns, &object);
        } else {
            debug!(object = %object, namespace = %ns, "metadata-only change; nothing to roll");
        }
    }

    fn object_gone(&mut self, object: ObjectRef, ns: &str) {
        let in_scope = self.in_scope(ns);
        let slot = (ns.to_owned(), object.clone());
        let Some(known) = self.fingerprints.get_mut(&slot) else { return };
        known.resource_version = None;
        if known.digest.take().is_some() && in_scope {
            self.trigger(ns, &object);
        }
    }

    fn trigger(&mut self, ns: &str, object: &ObjectRef) {
        let now = std::time::Instant::now();
        for workload in self.index.tracking(ns, object) {
            self.triggers.entry(workload.clone()).or_default().insert(object.clone());
            self.coalescer.changed(workload, now);
        }
    }

    /// A digest of the object's whole content, or `None` when it does not
    /// exist; `None` from the outer Option when it could not be read.
    async fn fingerprint(&self, ns: &str, object: &ObjectRef) -> Option<Option<String>> {
        match self.reconciler.source.fetch(ns, object).await {
            Ok(Some(content)) => {
                let id = ObjectId { namespace: ns, object };
                Some(Some(Digester::default().digest(id, &content, &ConsumedKeys::All, None)))
            }
            Ok(None) => Some(None),
            Err(e) => {
                warn!(object = %object, namespace = %ns, error = %e, "cannot read a tracked object; will retry on its next change");
                None
            }
        }
    }

    /// Fingerprints every tracked object in scope that matches `select` and has none yet.
    async fn baseline(&mut self, select: impl Fn(&str, &ObjectRef) -> bool) {
        let todo: Vec<(String, ObjectRef)> = self
            .index
            .objects()
            .filter(|(ns, o)| self.in_scope(ns) && select(ns, o))
            .filter(|slot| !self.fingerprints.contains_key(*slot))
            .cloned()
            .collect();
        let this = &*self;
        let results: Vec<_> = futures_util::stream::iter(todo)
            .map(|(ns, object)| async move {
                let digest = this.fingerprint(&ns, &object).await;
                ((ns, object), digest)
            })
            .buffer_unordered(16)
            .collect()
            .await;
        for (slot, digest) in results {
            if let Some(digest) = digest {
                self.fingerprints.insert(slot, Fingerprint { resource_version: None, digest });
            }
        }
    }

    async fn baseline_all(&mut self) {
        self.baselined = true;
        self.baseline(|_, _| true).await;
    }

    /// On start-up or a new leader: workloads that carry digests are brought up to date.
    fn catch_up(&mut self) {
        let now = std::time::Instant::now();
        for key in self.index.with_digests() {
            if self.in_scope(&key.namespace) {
                self.coalescer.due_now(key, now);
            }
        }
    }

    async fn dispatch(&mut self, work: &mpsc::Sender<Work>) {
        for (key, opened) in self.coalescer.take_due(std::time::Instant::now()) {
            let triggers = self.triggers.remove(&key).unwrap_or_default();
            if work.send(Work { key, triggers, opened }).await.is_err() {
                return;
            }
        }
    }
}

struct Work {
    key: WorkloadKey,
    triggers: BTreeSet<ObjectRef>,
    opened: std::time::Instant,
}

struct WorkerContext {
    reconciler: Arc<Reconciler>,
    snapshots: Snapshots,
    bucket: Arc<Mutex<TokenBucket>>,
    min_interval: Duration,
    metrics: ControllerMetrics,
}

/// Reconciles due workloads one at a time; a workload inside its minimum
/// interval comes back when the interval ends.
async fn worker(
    context: WorkerContext,
    mut work: mpsc::Receiver<Work>,
    requeue: mpsc::Sender<Work>,
) {
    let WorkerContext { reconciler, snapshots, bucket, min_interval, metrics } = context;
    let mut intervals = MinInterval::new(min_interval);
    let mut queued: HashSet<WorkloadKey> = HashSet::new();
    while let Some(item) = work.recv().await {
        let now = std::time::Instant::now();
        let ready_at = intervals.ready_at(&item.key, now);
        if ready_at > now {
            if queued.insert(item.key.clone()) {
                let requeue = requeue.clone();
                tokio::spawn(async move {
                    tokio::time::sleep_until(Instant::from_std(ready_at)).await;
                    let _ = requeue.send(item).await;
                });
            }
            continue;
        }
        queued.remove(&item.key);
        match reconciler.reconcile(&item.key, &item.triggers, &snapshots, &bucket).await {
            Ok(Outcome::Patched) => {
                metrics.count("patched");
                metrics.reacted(item.opened.elapsed().as_secs_f64());
                intervals.patched(item.key.clone(), std::time::Instant::now());
                info!(workload = %item.key, "patched the pod template's digests");
            }
            Ok(Outcome::Unchanged | Outcome::Gone) => metrics.count("unchanged"),
            Err(e) => {
                metrics.count(e.metric_label());
                warn!(workload = %item.key, error = %e, "cannot bring the digests up to date; retrying in 5 s");
                let requeue = requeue.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    let _ = requeue.send(item).await;
                });
            }
        }
    }
}

async fn serve_metrics(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
) {
    if let Err(e) = axum::serve(listener, metrics_router(metrics, ready)).await {
        warn!(error = %e, "metrics listener failed");
    }
}

/// `/metrics`, `/healthz`, and `/readyz` (ready once every watch has synced,
/// on leader and follower alike).
pub fn metrics_router(metrics: Arc<Metrics>, ready: Arc<AtomicBool>) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|State((metrics, _)): State<(Arc<Metrics>, Arc<AtomicBool>)>| async move {
                (
                    [(
                        header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    metrics.encode(),
                )
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|State((_, ready)): State<(Arc<Metrics>, Arc<AtomicBool>)>| async move {
                if ready.load(Ordering::Relaxed) {
                    (StatusCode::OK, "ok")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "syncing")
                }
            }),
        )
        .with_state((metrics, ready))
}
