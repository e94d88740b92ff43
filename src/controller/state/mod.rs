//! The event loop's state, with no I/O and the caller's clock. It is a router over indexes
//! that each own one concern, kubert-style:
//!
//! - [`scope`]: the namespaces in scope;
//! - [`workloads`]: the watched workloads and the webhook's plan of each;
//! - [`references`]: which workloads track which ConfigMaps and Secrets;
//! - [`objects`]: what is known of each tracked object's content, and its reads;
//! - [`images`]: which workloads track which image tags, and what they resolved to;
//! - [`rolling_together`]: which workloads track which workloads, and their templates;
//! - [`provider_classes`]: which workloads mount which SecretProviderClasses, and the latest
//!   object versions the CSI driver reports for each;
//! - [`queue`]: when each due workload is reconciled (with [`pacing`]);
//! - the [`gate`]s a trigger passes before the queue: the [`flap_guard`] holds a source
//!   rolling too often.
//!
//! Messages are applied as they come ([`State::handle`]): each goes to the index that owns
//! it, and what that index reports changed goes on to the indexes that follow it (`rolls`).
//! What must happen outside — reads to start, work for the worker with everything it
//! needs, a round of image polls, Events — is handed out by [`State::tick`] (`dispatch`).
//! The watches' relist protocol is [`relist`]'s, once for every index.

mod dispatch;
pub mod fan_out;
pub mod flap_guard;
pub mod gate;
pub mod images;
pub mod objects;
pub mod pacing;
pub mod pause;
pub mod provider_classes;
pub mod queue;
pub mod references;
pub mod relist;
pub mod rolling_together;
mod rolls;
pub mod scope;
#[cfg(test)]
mod tests;
pub mod waves;
pub mod window;
pub mod workloads;

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use tokio::time::Instant;
use tracing::info;

pub use self::dispatch::Effects;
use self::gate::{Gate, SourceSays};
use self::images::ImageIndex;
use self::objects::TrackedObjects;
use self::provider_classes::{ProviderClasses, StatusKey};
use self::queue::WorkQueue;
use self::references::ReferenceIndex;
use self::relist::Watch;
use self::rolling_together::RollingTogether;
use self::scope::NamespaceScope;
use self::workloads::WorkloadIndex;
use crate::controller::model::leadership::Leadership;
use crate::controller::model::message::{Message, ObjectVersion, Partition, partitions};
use crate::controller::model::shard::Shard;
use crate::controller::model::trigger::Source;
use crate::controller::model::workload::WorkloadKey;
use crate::core::inputs::workload_template::template_digest;
use crate::core::model::kinds::WorkloadKind;
use crate::core::verdict::Verdict;
use crate::core::{ObjectKey, ObjectKind, ObjectRef, Settings};

pub struct Options {
    pub settings: Settings,
    /// configsum's own namespace: never in scope, whatever its label says.
    pub own_namespace: String,
    /// `--shard`: only the namespaces it owns are in scope.
    pub shard: Shard,
    pub window: Duration,
    pub min_interval: Duration,
    /// `--image-poll-interval`.
    pub poll_interval: Duration,
    /// The gates every trigger passes, in order (the flap guard's built from
    /// `--flap-limit` and `--flap-period`).
    pub gates: Vec<Box<dyn Gate>>,
}

/// How far the controller is from knowing the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Some watch has not listed everything once: nothing is read yet.
    Listing,
    /// Every tracked object is being read once: the baseline of its content,
    /// and the catch-up of workloads whose digests went stale while no
    /// controller watched.
    ReadingBaseline,
    /// From here on a change is a change seen while watching. Ready.
    Watching,
}

/// One handle per kind and partition of the workload watches.
type WorkloadHandles = HashMap<(WorkloadKind, Partition), Watch<WorkloadKey>>;

/// The handles of the watches; readiness is made of them.
#[derive(Debug, Default)]
struct WatchHandles {
    namespaces: Watch<String>,
    /// `None` until the workload watches start: their epoch, and one handle
    /// per kind (and namespace, under `--namespaces`) watched in it.
    workloads: Option<(u64, WorkloadHandles)>,
    objects: HashMap<(ObjectKind, Partition), Watch<ObjectKey>>,
    /// What each kind's watches list: every namespace (`[None]`), or each of `--namespaces`.
    partitions: Vec<Partition>,
    /// The CSI driver's statuses, one handle per partition: watched once their CRD is
    /// served, and no part of readiness (a cluster without the driver never serves it).
    provider_classes: HashMap<Partition, Watch<StatusKey>>,
}

impl WatchHandles {
    fn new(namespaces: &[String]) -> Self {
        WatchHandles { partitions: partitions(namespaces), ..WatchHandles::default() }
    }

    /// Every watch has listed everything once.
    fn synced(&self) -> bool {
        let objects_synced = ObjectKind::all().all(|kind| {
            self.partitions.iter().all(|partition| {
                self.objects.get(&(kind, partition.clone())).is_some_and(Watch::synced)
            })
        });
        self.namespaces.synced()
            && self.workloads.as_ref().is_some_and(|(_, kinds)| kinds.values().all(Watch::synced))
            && objects_synced
    }

    /// Every partition of the CSI driver's statuses has listed once.
    fn provider_classes_synced(&self) -> bool {
        self.partitions.iter().all(|p| self.provider_classes.get(p).is_some_and(Watch::synced))
    }

    /// A handle for each partition of `kind`'s workload watch.
    fn workload_handles(
        &self,
        kind: WorkloadKind,
    ) -> impl Iterator<Item = ((WorkloadKind, Partition), Watch<WorkloadKey>)> + '_ {
        self.partitions.iter().map(move |p| ((kind, p.clone()), Watch::within(p.clone())))
    }
}

/// What discovery found since start-up.
#[derive(Debug, Default)]
struct Discovery {
    /// Kinds served now that were not served at start-up: to watch.
    served: Vec<WorkloadKind>,
    /// A declared kind found cluster-scoped: the controller must stop.
    refused: Option<WorkloadKind>,
}

pub struct State {
    phase: Phase,
    watches: WatchHandles,
    leadership: Leadership,
    discovery: Discovery,
    scope: NamespaceScope,
    workloads: WorkloadIndex,
    references: ReferenceIndex,
    objects: TrackedObjects,
    images: ImageIndex,
    together: RollingTogether,
    classes: ProviderClasses,
    queue: WorkQueue,
    /// Every trigger passes each, in order, before the queue.
    gates: Vec<Box<dyn Gate>>,
    /// Events to hand out at the next tick.
    events: Vec<Event>,
    /// Notices to hand out at the next tick.
    notices: Vec<crate::notify::Notice>,
}

impl State {
    pub fn new(options: Options) -> Self {
        State {
            phase: Phase::Listing,
            watches: WatchHandles::new(&options.settings.namespaces),
            leadership: Leadership::default(),
            discovery: Discovery::default(),
            scope: NamespaceScope::new(
                options.own_namespace,
                options.settings.domain.roll_window(),
            )
            .serving(options.settings.namespaces.clone())
            .sharded(options.shard),
            workloads: WorkloadIndex::new(options.settings),
            references: ReferenceIndex::default(),
            objects: TrackedObjects::default(),
            images: ImageIndex::new(options.poll_interval),
            together: RollingTogether::default(),
            classes: ProviderClasses::default(),
            queue: WorkQueue::new(options.window, options.min_interval),
            gates: options.gates,
            events: Vec::new(),
            notices: Vec::new(),
        }
    }

    /// The workload watches must (re)start: the opted-in namespaces are
    /// known and either none runs yet or a namespace was opted in since
    /// (every workload watch lists again, so its workloads are seen).
    pub fn wants_workload_watches(&self) -> bool {
        self.watches.namespaces.synced()
            && (self.watches.workloads.is_none() || self.scope.newly_in_scope())
    }

    /// The workload watches of `kinds` started in `epoch`.
    pub fn workload_watches_started(&mut self, epoch: u64, kinds: &[WorkloadKind]) {
        let handles = kinds.iter().flat_map(|kind| self.watches.workload_handles(*kind)).collect();
        self.watches.workloads = Some((epoch, handles));
        self.scope.workload_watches_started();
    }

    /// Kinds served since start-up, for the loop to watch.
    pub fn take_kinds_served(&mut self) -> Vec<WorkloadKind> {
        std::mem::take(&mut self.discovery.served)
    }

    /// A declared kind served against its declaration (cluster-scoped), if one was found.
    pub fn refused_kind(&self) -> Option<WorkloadKind> {
        self.discovery.refused
    }

    /// The watch of `kind` joined the workload watches of `epoch`: its handle
    /// starts unsynced, and its workloads are planned as they are listed.
    pub fn kind_watch_started(&mut self, epoch: u64, kind: WorkloadKind) {
        let new: Vec<_> = self.watches.workload_handles(kind).collect();
        if let Some((current, handles)) = &mut self.watches.workloads {
            if *current == epoch {
                for (key, watch) in new {
                    handles.entry(key).or_insert(watch);
                }
            }
        }
    }

    /// Every watch has listed everything once, and every tracked object has
    /// been read once (or failed and waits for its retry).
    pub fn ready(&self) -> bool {
        self.phase == Phase::Watching
    }

    /// Routes `message` to the index that owns it, and what that changed to the others.
    pub fn handle(&mut self, message: Message, now: Instant) {
        let reading = self.phase != Phase::Listing;
        match message {
            Message::Namespace(event) => {
                self.watches.namespaces.handle(&mut self.scope, event);
                for (namespace, window) in self.scope.take_window_changes() {
                    for gate in &mut self.gates {
                        gate.namespace_observed(&namespace, window.as_deref());
                    }
                }
                for namespace in self.scope.take_opted_out() {
                    for key in self.workloads.forget_namespace(&namespace) {
                        self.forget_elsewhere(&key);
                    }
                }
            }
            Message::Workload { kind, partition, epoch, event } => {
                let Some((current, handles)) = &mut self.watches.workloads else { return };
                let handle = handles.get_mut(&(kind, partition));
                if let Some(watch) = handle.filter(|_| *current == epoch) {
                    let mut index = self.workloads.watch_of(kind, &self.scope, &self.together);
                    watch.handle(&mut index, *event);
                }
                self.workloads_changed();
            }
            Message::Object(kind, partition, event) => {
                use kube::runtime::watcher::Event as Watched;
                if let Watched::Apply(version) | Watched::InitApply(version) = &event {
                    self.source_observed(kind, version);
                }
                let watch = self
                    .watches
                    .objects
                    .entry((kind, partition.clone()))
                    .or_insert_with(|| Watch::within(partition));
                watch.handle(&mut self.objects.watch_of(kind, reading), event);
            }
            Message::Read(read) => {
                let (object, result) = *read;
                self.read_done(object, result, now);
            }
            Message::Reconciled(done) => {
                let (due, result) = *done;
                self.reconciled(due, result, now);
            }
            Message::KindClusterScoped(kind) => self.discovery.refused = Some(kind),
            Message::KindServed(kind) => {
                info!(kind = kind.as_str(), "its resource is served now; watching it");
                self.discovery.served.push(kind);
            }
            Message::Image(resolved) => {
                let (image, resolution) = *resolved;
                self.image_resolved(image, &resolution, now);
            }
            Message::Template(read) => {
                let (workload, result) = *read;
                let prefixes = self.workloads.workload_prefixes();
                let digest = result.map(|t| t.map(|t| template_digest(&t, prefixes)));
                self.together.template_read(workload, digest, now);
            }
            Message::ProviderClassStatus(partition, event) => {
                let first_list = !self.watches.provider_classes_synced();
                let watch = self
                    .watches
                    .provider_classes
                    .entry(partition.clone())
                    .or_insert_with(|| Watch::within(partition));
                watch.handle(&mut self.classes, *event);
                if first_list && self.watches.provider_classes_synced() {
                    // Served after the other watches synced: what rotated meanwhile.
                    self.catch_up_classes(now);
                }
            }
        }
        self.advance(now);
        self.roll_trackers(now);
        self.roll_class_trackers(now);
    }

    /// Moves on once every watch has listed, then once the baseline is read.
    fn advance(&mut self, now: Instant) {
        if self.phase == Phase::Listing && self.watches.synced() {
            self.phase = Phase::ReadingBaseline;
            info!(
                workloads = self.references.len(),
                objects = self.references.object_count(),
                "watches synced; reading tracked objects"
            );
            self.objects.request_all();
            // And the first poll of every tracked image, likewise.
            self.images.poll_now(now);
            self.catch_up_trackers(now);
            self.catch_up_classes(now);
            // Tracked workloads the listing delivered before anything tracked them: read once.
            self.together.read_unknown();
        }
        if self.phase == Phase::ReadingBaseline && self.objects.pending() == 0 {
            self.phase = Phase::Watching;
        }
    }

    /// A new leadership state: a new term catches up (reads every tracked
    /// object again); leaving drops every queued reconciliation.
    pub fn lead(&mut self, leadership: Leadership, now: Instant) {
        let was = self.leadership;
        self.leadership = leadership;
        let term = leadership.is_leading(now).then_some(leadership.term);
        self.set_term(term);
        if term.is_none() || was.term == leadership.term {
            return;
        }
        if self.phase == Phase::Listing {
            // The baseline reads, once every watch has listed, are this term's catch-up.
            info!(term = leadership.term, "leading: the first reads bring workloads up to date");
            return;
        }
        info!(term = leadership.term, "leading: bringing workloads up to date");
        self.objects.request_all();
        self.images.poll_now(now);
        self.catch_up_trackers(now);
        self.catch_up_classes(now);
    }

    /// Leads in `term`, or follows (`None`): a follower keeps no work and no
    /// fresh digests, a new term starts from what it reads.
    fn set_term(&mut self, term: Option<u64>) {
        if term.is_none() && self.queue.term().is_some() {
            self.objects.drop_fresh(None);
        }
        self.queue.lead(term);
    }

    /// Workloads waiting for their window, a retry or the worker, and reads of objects and
    /// of tracked templates waiting, running or to retry: 0 when nothing is under way.
    pub fn queue_depth(&self) -> usize {
        self.queue.depth() + self.objects.depth() + self.together.depth()
    }

    /// Hands what a ConfigMap's or Secret's own annotations say of its changes to the gates.
    fn source_observed(&mut self, kind: ObjectKind, version: &ObjectVersion) {
        let (Some(namespace), Some(name)) = (&version.namespace, &version.name) else { return };
        let domain = self.workloads.domain();
        // Most objects have none of these annotations: no key is formatted for them.
        let says = if version.annotations.is_empty() {
            SourceSays::default()
        } else {
            SourceSays {
                all_at_once: version.annotation(&domain.fan_out()) == Some("all"),
                resume: version.annotation(&domain.resume()).map(str::to_owned),
            }
        };
        let object = ObjectRef::new(kind, name.clone()).within(namespace.clone());
        let source = Source::Object(object);
        for gate in &mut self.gates {
            gate.source_observed(&source, &says);
        }
    }

    /// Changes halted by a failed rollout (the halted gauge).
    pub fn halted_changes(&self) -> usize {
        self.gates.iter().map(|gate| gate.halted_changes()).sum()
    }

    pub fn watched_objects(&self) -> usize {
        self.references.object_count()
    }

    pub fn workloads(&self) -> usize {
        self.references.len()
    }

    /// Watched workloads by verdict, for the workloads gauge: held by a gate, stale
    /// (waiting to be rolled), recording no digest of some input yet, current; and those the
    /// webhook leaves alone, with why.
    pub fn verdicts(&self) -> Vec<(Verdict, usize)> {
        let mut counts: HashMap<Verdict, usize> = HashMap::new();
        for verdict in self.workloads.skipped() {
            *counts.entry(*verdict).or_default() += 1;
        }
        for (key, snapshot) in self.workloads.snapshots() {
            let verdict = if let Some(verdict) = self.gate_verdict(key) {
                verdict
            } else if self.queue.is_pending(key) {
                Verdict::Stale
            } else if snapshot.mutation.records_every_input() {
                Verdict::Current
            } else {
                Verdict::FirstObservation
            };
            *counts.entry(verdict).or_default() += 1;
        }
        let mut counts: Vec<(Verdict, usize)> = counts.into_iter().collect();
        counts.sort();
        counts
    }

    /// Workloads a gate holds.
    #[cfg(test)]
    pub fn held_workloads(&self) -> usize {
        let held = self.verdicts().into_iter().find(|(v, _)| *v == Verdict::Held);
        held.map_or(0, |(_, count)| count)
    }

    /// The first gate's word on `workload`, if one holds it.
    fn gate_verdict(&self, workload: &WorkloadKey) -> Option<Verdict> {
        self.gates.iter().find_map(|gate| gate.verdict(workload))
    }
}
