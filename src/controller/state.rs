//! The event loop's state: which namespaces are in scope, which workloads
//! track which objects, what is known of each object's content, and which
//! workloads wait to be reconciled. Every message is handled without waiting
//! on the network: reads and reconciliations run elsewhere and report back.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::runtime::watcher::Event;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::backoff;
use super::images::{ImageIndex, ImageSlot, LatestDigests, digest_of, slots_of};
use super::index::{Change, ObjectSlot, ReferenceIndex, tracked_by};
use super::lease::Leadership;
use super::metrics::ControllerMetrics;
use super::objects::{Reading, TrackedObjects, Tracker, judge, to_roll};
use super::reconcile::CALL_TIMEOUT;
use super::relist::Relist;
use super::schedule::{Finished, Schedule};
use super::trigger::Trigger;
use super::watches::{Message, Version};
use super::worker::{Done, Work};
use super::workload::{Snapshot, Snapshots, WatchedWorkload, WorkloadKey};
use crate::core::workload::WorkloadKind;
use crate::core::{Digester, ObjectKind, ObjectRef, Settings};
use crate::lookup::KubeSource;
use crate::registry::Resolution;

/// Content reads in flight at once (they also share the lookup cap).
const READS_IN_FLIGHT: usize = 16;

/// What reads need: where from, and how to digest.
pub struct Reader {
    pub source: Arc<KubeSource>,
    pub digester: Digester,
    pub tx: mpsc::Sender<Message>,
}

pub struct State {
    settings: Settings,
    own_namespace: String,
    reader: Reader,
    work: mpsc::UnboundedSender<Work>,
    pub metrics: ControllerMetrics,

    enabled: HashSet<String>,
    namespace_relist: Relist<String>,
    namespaces_synced: bool,
    /// A namespace was opted in after the workload watches started.
    pub restart_workload_watches: bool,

    pub generation: u64,
    pub expected_kinds: usize,
    workload_relists: HashMap<WorkloadKind, Relist<WorkloadKey>>,
    workloads_synced: HashSet<WorkloadKind>,
    index: ReferenceIndex,
    snapshots: Snapshots,

    objects: TrackedObjects,
    object_relists: HashMap<ObjectKind, Relist<ObjectSlot>>,
    objects_synced: HashSet<ObjectKind>,
    /// The first reads of every tracked object were asked for.
    checked: bool,
    /// … and have all finished (or failed and wait for their retry).
    baselined: bool,

    /// Failed reads, retried at these times.
    read_retries: Vec<(Instant, ObjectSlot)>,

    leadership: Leadership,
    schedule: Schedule,

    images: ImageIndex,
    latest_digests: LatestDigests,
    /// Rounds of slots to the poller; `None` when images are not polled.
    poll_rounds: Option<mpsc::Sender<Vec<ImageSlot>>>,
    poll_interval: Duration,
    next_poll: Option<Instant>,
}

pub struct Options {
    pub settings: Settings,
    pub own_namespace: String,
    pub window: Duration,
    pub min_interval: Duration,
    /// `--image-poll-interval`.
    pub poll_interval: Duration,
}

impl State {
    pub fn new(
        options: Options,
        reader: Reader,
        work: mpsc::UnboundedSender<Work>,
        snapshots: Snapshots,
        metrics: ControllerMetrics,
    ) -> Self {
        State {
            settings: options.settings,
            own_namespace: options.own_namespace,
            reader,
            work,
            metrics,
            enabled: HashSet::new(),
            namespace_relist: Relist::default(),
            namespaces_synced: false,
            restart_workload_watches: false,
            generation: 0,
            expected_kinds: 0,
            workload_relists: HashMap::new(),
            workloads_synced: HashSet::new(),
            index: ReferenceIndex::default(),
            snapshots,
            objects: TrackedObjects::default(),
            object_relists: HashMap::new(),
            objects_synced: HashSet::new(),
            checked: false,
            baselined: false,
            read_retries: Vec::new(),
            leadership: Leadership::default(),
            schedule: Schedule::new(options.window, options.min_interval),
            images: ImageIndex::default(),
            latest_digests: LatestDigests::default(),
            poll_rounds: None,
            poll_interval: options.poll_interval,
            next_poll: None,
        }
    }

    /// Polls tracked images through `rounds`; reconciliations read the
    /// digests found from `latest`.
    pub fn poll_images(&mut self, rounds: mpsc::Sender<Vec<ImageSlot>>, latest: LatestDigests) {
        self.poll_rounds = Some(rounds);
        self.latest_digests = latest;
    }

    pub fn namespaces_synced(&self) -> bool {
        self.namespaces_synced
    }

    /// Every watch has listed everything once, and every tracked object has
    /// been read once: from here on a change is a change seen while watching.
    pub fn ready(&self) -> bool {
        self.baselined
    }

    fn synced(&self) -> bool {
        self.namespaces_synced
            && self.generation > 0
            && self.workloads_synced.len() == self.expected_kinds
            && self.objects_synced.len() == ObjectKind::all().count()
    }

    pub fn handle(&mut self, message: Message) {
        match message {
            Message::Namespace(event) => self.namespace_event(event),
            Message::Workload { kind, generation, event } => {
                if generation == self.generation {
                    self.workload_event(kind, *event);
                }
            }
            Message::Object(kind, event) => self.object_event(kind, event),
            Message::Read { slot, result } => self.read_done(slot, result),
            Message::Done(done) => {
                let (work, result) = *done;
                self.work_done(work, result);
            }
            Message::Image { slot, resolution } => self.image_resolved(slot, &resolution),
        }
        if !self.checked && self.synced() {
            // The first read of every tracked object: the baseline of their
            // content, and the catch-up of workloads whose digests went stale
            // while no controller watched.
            self.checked = true;
            let all: Vec<ObjectSlot> = self.objects.all().cloned().collect();
            info!(
                workloads = self.index.len(),
                objects = all.len(),
                "watches synced; reading tracked objects"
            );
            for slot in all {
                self.objects.request(slot);
            }
            // And the first poll of every tracked image, likewise.
            self.next_poll = Some(Instant::now());
        }
        self.start_reads();
        if self.checked && !self.baselined && self.objects.pending() == 0 {
            self.baselined = true;
        }
    }

    fn in_scope(&self, namespace: &str) -> bool {
        self.enabled.contains(namespace)
    }

    fn namespace_event(&mut self, event: Event<Version>) {
        let excluded = |name: &str| name == self.own_namespace || name == "kube-system";
        match event {
            Event::Init => self.namespace_relist.begin(),
            Event::InitApply(ns) | Event::Apply(ns) => {
                let Some(name) = ns.name.filter(|n| !excluded(n)) else { return };
                self.namespace_relist.listed(name.clone());
                if self.enabled.insert(name.clone()) && self.generation > 0 {
                    info!(namespace = %name, "namespace opted in; listing its workloads");
                    self.restart_workload_watches = true;
                }
            }
            Event::Delete(ns) => {
                if let Some(name) = ns.name {
                    self.opt_out(&name);
                }
            }
            Event::InitDone => {
                for name in self.namespace_relist.end(self.enabled.iter()) {
                    self.opt_out(&name);
                }
                self.namespaces_synced = true;
            }
        }
    }

    fn opt_out(&mut self, namespace: &str) {
        if self.enabled.remove(namespace) {
            let keys: Vec<WorkloadKey> = self.index.workloads_in(namespace).cloned().collect();
            for key in keys {
                self.forget_workload(&key);
            }
        }
    }

    fn workload_event(&mut self, kind: WorkloadKind, event: Event<WatchedWorkload>) {
        match event {
            Event::Init => self.workload_relists.entry(kind).or_default().begin(),
            Event::InitApply(workload) => {
                if let Some(key) = workload.key(kind) {
                    self.workload_relists.entry(kind).or_default().listed(key);
                }
                self.apply_workload(kind, workload);
            }
            Event::Apply(workload) => self.apply_workload(kind, workload),
            Event::Delete(workload) => {
                if let Some(key) = workload.key(kind) {
                    self.forget_workload(&key);
                }
            }
            Event::InitDone => {
                let relist = self.workload_relists.entry(kind).or_default();
                for key in relist.end(self.index.workloads_of(kind)) {
                    self.forget_workload(&key);
                }
                self.workloads_synced.insert(kind);
            }
        }
    }

    fn apply_workload(&mut self, kind: WorkloadKind, workload: WatchedWorkload) {
        let Some(key) = workload.key(kind) else { return };
        if !self.in_scope(&key.namespace) {
            return;
        }
        let resource_version = workload.resource_version().map(str::to_owned);
        let uid = workload.uid().map(str::to_owned);
        let unchanged = self.snapshots.lock().is_ok_and(|s| {
            s.get(&key).is_some_and(|s| {
                resource_version.is_some() && s.resource_version == resource_version
            })
        });
        if unchanged {
            return;
        }
        let Some(mutation) = workload.plan(kind, &self.settings) else {
            self.forget_workload(&key);
            return;
        };
        let tracked = tracked_by(&mutation);
        self.images.upsert(&key, slots_of(&key, &mutation));
        if let Ok(mut snapshots) = self.snapshots.lock() {
            snapshots.insert(key.clone(), Snapshot { mutation, resource_version, uid });
        }
        let change = self.index.upsert(key, tracked);
        self.tracked_objects_changed(change);
    }

    fn forget_workload(&mut self, key: &WorkloadKey) {
        if let Ok(mut snapshots) = self.snapshots.lock() {
            snapshots.remove(key);
        }
        let change = self.index.remove(key);
        self.tracked_objects_changed(change);
        self.images.remove(key);
        self.schedule.forget(key);
    }

    fn tracked_objects_changed(&mut self, change: Change) {
        for slot in change.dropped {
            self.objects.forget(&slot);
        }
        for slot in change.added {
            self.objects.track(slot.clone());
            // Newly tracked after the first reads: read it now for its baseline.
            if self.checked {
                self.objects.request(slot);
            }
        }
    }

    fn object_event(&mut self, kind: ObjectKind, event: Event<Version>) {
        let slot_of = |meta: &Version| -> Option<ObjectSlot> {
            Some((meta.namespace.clone()?, ObjectRef { kind, name: meta.name.clone()? }))
        };
        match event {
            Event::Init => self.object_relists.entry(kind).or_default().begin(),
            Event::InitApply(meta) | Event::Apply(meta) => {
                let Some(slot) = slot_of(&meta) else { return };
                if !self.objects.is_tracked(&slot) {
                    return;
                }
                self.object_relists.entry(kind).or_default().listed(slot.clone());
                // Before the first reads, those reads will see this version.
                if self.checked && !self.objects.is_current(&slot, meta.resource_version.as_deref())
                {
                    self.objects.request(slot);
                }
            }
            Event::Delete(meta) => {
                if let Some(slot) = slot_of(&meta).filter(|s| self.objects.is_tracked(s)) {
                    if self.checked {
                        self.objects.request(slot);
                    }
                }
            }
            Event::InitDone => {
                let relist = self.object_relists.entry(kind).or_default();
                let known = self.objects.existing().filter(|(_, o)| o.kind == kind);
                // Deleted while the watch was down: read (and find absent).
                let gone = relist.end(known);
                if self.checked {
                    for slot in gone {
                        self.objects.request(slot);
                    }
                }
                self.objects_synced.insert(kind);
            }
        }
    }

    /// Starts reads while fewer than [`READS_IN_FLIGHT`] run.
    fn start_reads(&mut self) {
        while let Some(slot) = self.objects.start_next(READS_IN_FLIGHT) {
            let trackers = self.trackers(&slot);
            let source = self.reader.source.clone();
            let digester = self.reader.digester.clone();
            let tx = self.reader.tx.clone();
            tokio::spawn(async move {
                let (namespace, object) = &slot;
                let read = tokio::time::timeout(CALL_TIMEOUT, source.read(namespace, object));
                let result = match read.await {
                    Ok(Ok(found)) => {
                        let (content, version) = match found {
                            Some((content, version)) => (Some(content), version),
                            None => (None, None),
                        };
                        // The data is digested here and dropped with `content`.
                        Ok(judge(&slot, content.as_ref(), version, &digester, &trackers))
                    }
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err("timeout".to_owned()),
                };
                let _ = tx.send(Message::Read { slot, result }).await;
            });
        }
    }

    /// The workloads tracking `slot`, with the keys each consumes and its digest.
    fn trackers(&self, slot: &ObjectSlot) -> Vec<Tracker> {
        let Ok(snapshots) = self.snapshots.lock() else { return Vec::new() };
        self.index
            .tracking(slot)
            .filter_map(|workload| {
                let mutation = &snapshots.get(workload)?.mutation;
                let target = mutation.targets.iter().find(|t| t.object == slot.1)?;
                Some(Tracker {
                    workload: workload.clone(),
                    keys: target.consumption.keys.clone(),
                    existing: mutation.existing(target).map(str::to_owned),
                })
            })
            .collect()
    }

    fn read_done(&mut self, slot: ObjectSlot, result: Result<Reading, String>) {
        match result {
            Ok(reading) => {
                let Some(changed) = self.objects.finished(&slot, &reading) else { return };
                for workload in to_roll(&reading, changed) {
                    self.trigger(workload, &slot.1);
                }
            }
            Err(reason) => {
                let failures = self.objects.failed(&slot);
                let wait = backoff::delay(failures, backoff::random());
                let (namespace, object) = &slot;
                warn!(%object, %namespace, %reason, retry_in = ?wait, "cannot read a tracked object");
                self.read_retries.push((Instant::now() + wait, slot));
            }
        }
    }

    /// A tag resolved: each tracking workload whose recorded digest differs
    /// is due. One without the annotation is a first observation: nothing.
    fn image_resolved(&mut self, slot: ImageSlot, resolution: &Resolution) {
        let Some(digest) = digest_of(resolution) else {
            debug!(reference = %slot.reference, outcome = resolution.outcome(), "image not resolved");
            return;
        };
        if let Ok(mut latest) = self.latest_digests.lock() {
            latest.insert(slot.clone(), digest.to_owned());
        }
        let Ok(snapshots) = self.snapshots.lock() else { return };
        let mut due = Vec::new();
        for tracking in self.images.tracking(&slot) {
            let Some(snapshot) = snapshots.get(&tracking.workload) else { continue };
            let Some(old) = snapshot.mutation.existing_annotation(&tracking.key) else { continue };
            if old != digest {
                let trigger = Trigger::Image {
                    container: tracking.container.clone(),
                    image: tracking.image.clone(),
                    old: old.to_owned(),
                    new: digest.to_owned(),
                };
                due.push((tracking.workload.clone(), trigger));
            }
        }
        drop(snapshots);
        for (workload, trigger) in due {
            self.schedule.triggered(workload, trigger, Instant::now());
        }
    }

    fn trigger(&mut self, workload: WorkloadKey, object: &ObjectRef) {
        self.schedule.changed(workload, object, Instant::now());
    }

    /// A new leadership state: a new term catches up (reads every tracked
    /// object again); leaving drops every queued reconciliation.
    pub fn lead(&mut self, leadership: Leadership) {
        let now = tokio::time::Instant::now();
        let was = self.leadership;
        self.leadership = leadership;
        let term = leadership.is_leading(now).then_some(leadership.term);
        self.schedule.lead(term);
        if term.is_some() && was.term != leadership.term && self.checked {
            info!(term = leadership.term, "leading: bringing workloads up to date");
            let all: Vec<ObjectSlot> = self.objects.all().cloned().collect();
            for slot in all {
                self.objects.request(slot);
            }
            self.start_reads();
            self.next_poll = Some(Instant::now());
        }
    }

    /// When the loop must wake up next for due work.
    pub fn next_due(&self) -> Option<Instant> {
        let reads = self.read_retries.iter().map(|(at, _)| *at).min();
        [self.schedule.next_due(), reads, self.next_poll].into_iter().flatten().min()
    }

    /// Restarts due reads and hands due reconciliations to the worker.
    pub fn dispatch(&mut self) {
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.read_retries).into_iter().partition(|(at, _)| *at <= now);
        self.read_retries = later;
        for (_, slot) in due {
            self.objects.request(slot);
        }
        self.start_reads();
        // Leadership lapses by the clock, even before the elector says so.
        if !self.leadership.is_leading(tokio::time::Instant::now()) {
            self.schedule.lead(None);
        }
        for work in self.schedule.take_due(now) {
            let _ = self.work.send(work);
        }
        self.poll_due(now);
    }

    /// Sends the poller a round of every tracked image when one is due,
    /// while leading: followers patch nothing, so they ask registries nothing.
    fn poll_due(&mut self, now: Instant) {
        let (Some(rounds), Some(at)) = (&self.poll_rounds, self.next_poll) else { return };
        if at > now {
            return;
        }
        self.next_poll = Some(now + self.poll_interval);
        let leading = self.leadership.is_leading(tokio::time::Instant::now());
        if leading && !self.images.is_empty() {
            // A round still running keeps this one from queueing behind it.
            let _ = rounds.try_send(self.images.slots());
        }
    }

    fn work_done(&mut self, work: Work, result: Done) {
        let key = work.key.clone();
        let opened = work.opened;
        let (finished, next) = self.schedule.done(work, &result, Instant::now(), backoff::random());
        match (&finished, &result) {
            (Finished::Patched, _) => {
                self.metrics.count("patched");
                self.metrics.reacted(opened.elapsed().as_secs_f64());
                info!(workload = %key, "patched the pod template's digests");
            }
            (Finished::Unchanged, _) => self.metrics.count("unchanged"),
            (Finished::NotLeading, _) => {}
            (Finished::RetryIn(wait), Err(e)) => {
                self.metrics.count(e.metric_label());
                warn!(workload = %key, error = %e, retry_in = ?wait, "cannot bring the digests up to date");
            }
            (Finished::RetryIn(_), Ok(_)) => {}
        }
        if let Some(next) = next {
            let _ = self.work.send(next);
        }
    }

    /// Workloads waiting for their window, a retry or the worker, and reads
    /// waiting or running.
    pub fn queue_depth(&self) -> usize {
        self.schedule.depth() + self.read_retries.len() + self.objects.pending()
    }

    pub fn watched_objects(&self) -> usize {
        self.index.object_count()
    }

    pub fn workloads(&self) -> usize {
        self.index.len()
    }
}
