//! The event loop's state, with no I/O and the caller's clock: which
//! namespaces are in scope, which workloads track which objects, what is
//! known of each object's content, and which workloads wait to be
//! reconciled. Messages are applied as they come ([`State::handle`]); what
//! must happen outside — reads to start, work for the worker, a round of
//! image polls — is handed out by [`State::tick`]. The watches' own relist
//! protocol is [`Watch`]'s; here are the indexes it applies to (`indexes.rs`).

mod indexes;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, info, warn};

use self::indexes::{Namespaces, Objects, Workloads};
use super::backoff;
use super::event;
use super::flap_guard::{Admission, FlapGuard, FlapLimits};
use super::images::{ImageIndex, LatestDigests, PolledImage, digest_of};
use super::index::{Change, ReferenceIndex};
use super::lease::Leadership;
use super::message::Message;
use super::metrics::ControllerMetrics;
use super::objects::{
    FreshDigests, Judged, ReadRequest, Reading, TrackedObjects, Tracker, to_roll,
};
use super::reconcile::{ReconcileResult, Reconciled};
use super::schedule::{Schedule, Work};
use super::tracked_workloads::{TemplateDigests, TrackedWorkloads, recorded, stale};
use super::trigger::Trigger;
use super::watch::Watch;
use super::workload::{Snapshot, Snapshots, WorkloadKey};
use crate::core::inputs::workload_template::template_digest;
use crate::core::verdict::Verdict;
use crate::core::workload::WorkloadKind;
use crate::core::{ObjectKey, ObjectKind, ObjectRef, Settings};
use crate::registry::Resolution;
use k8s_openapi::api::core::v1::Event;

/// Content reads in flight at once (they also share the lookup cap).
const READS_IN_FLIGHT: usize = 16;

pub struct Options {
    pub settings: Settings,
    /// configsum's own namespace: never in scope, whatever its label says.
    pub own_namespace: String,
    pub window: Duration,
    pub min_interval: Duration,
    /// `--image-poll-interval`.
    pub poll_interval: Duration,
    /// `--flap-limit` and `--flap-period`.
    pub flap: FlapLimits,
}

/// What the event loop shares with the reconciliations.
#[derive(Clone, Default)]
pub struct Shared {
    pub snapshots: Snapshots,
    pub fresh_digests: FreshDigests,
    pub latest_digests: LatestDigests,
    pub template_digests: TemplateDigests,
}

/// What the loop must do now.
#[derive(Debug, Default)]
pub struct Effects {
    pub reads: Vec<ReadRequest>,
    pub work: Vec<Work>,
    /// A round of every tracked image for the poller.
    pub poll: Option<Vec<PolledImage>>,
    /// Events to record (the flap guard's).
    pub events: Vec<Event>,
    /// Tracked workloads whose pod template must be read.
    pub template_reads: Vec<WorkloadKey>,
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

/// The handles of the watches; readiness is made of them.
#[derive(Debug, Default)]
struct WatchHandles {
    namespaces: Watch<String>,
    /// `None` until the workload watches start: their epoch, and one handle
    /// per kind watched in it.
    workloads: Option<(u64, HashMap<WorkloadKind, Watch<WorkloadKey>>)>,
    objects: HashMap<ObjectKind, Watch<ObjectKey>>,
}

impl WatchHandles {
    /// Every watch has listed everything once.
    fn synced(&self) -> bool {
        self.namespaces.synced()
            && self.workloads.as_ref().is_some_and(|(_, kinds)| kinds.values().all(Watch::synced))
            && ObjectKind::all().all(|kind| self.objects.get(&kind).is_some_and(Watch::synced))
    }
}

pub struct State {
    watches: WatchHandles,
    view: ClusterView,
}

/// Everything the watches and reads taught the controller, and its plans.
struct ClusterView {
    settings: Settings,
    own_namespace: String,
    metrics: ControllerMetrics,
    phase: Phase,
    in_scope: HashSet<String>,
    /// A namespace was opted in since the workload watches (re)started.
    newly_in_scope: bool,
    index: ReferenceIndex,
    shared: Shared,
    objects: TrackedObjects,
    /// Failed reads, retried at these times.
    read_retries: Vec<(Instant, ObjectKey)>,
    leadership: Leadership,
    schedule: Schedule,
    /// Kinds discovery serves now that were not served at start-up: to watch.
    kinds_served: Vec<WorkloadKind>,
    /// A declared kind discovery found cluster-scoped: the controller must stop.
    refused_kind: Option<WorkloadKind>,
    /// Work that came due outside `tick` (after a reconciliation), handed out by the next.
    work: Vec<Work>,
    images: ImageIndex,
    poll_interval: Duration,
    next_poll: Option<Instant>,
    /// Which workloads track which (workloads that roll together).
    tracked_workloads: TrackedWorkloads,
    /// `<word>.<domain>/`: what a template digest leaves out.
    workload_prefixes: Vec<String>,
    /// Tracked workloads whose template digest moved (or that were deleted) since the last
    /// message: their trackers may be due.
    moved_templates: Vec<WorkloadKey>,
    guard: FlapGuard,
    /// Watched workloads the webhook leaves alone, with why (for the workloads gauge).
    skipped: HashMap<WorkloadKey, Verdict>,
    /// Events to hand out at the next tick.
    events: Vec<Event>,
    /// Tracked workloads whose template must be read, and failed reads' retries.
    template_reads: Vec<WorkloadKey>,
    template_retries: Vec<(Instant, WorkloadKey)>,
    /// Workloads this replica patched from a resourceVersion that is still their snapshot's:
    /// until the watch delivers the patched version, what the snapshot records is outdated.
    unseen_patches: HashMap<WorkloadKey, Option<String>>,
}

impl State {
    pub fn new(options: Options, shared: Shared, metrics: ControllerMetrics) -> Self {
        let view = ClusterView {
            workload_prefixes: options.settings.domain.workload_prefixes(),
            settings: options.settings,
            own_namespace: options.own_namespace,
            metrics,
            phase: Phase::Listing,
            in_scope: HashSet::new(),
            newly_in_scope: false,
            index: ReferenceIndex::default(),
            shared,
            objects: TrackedObjects::default(),
            read_retries: Vec::new(),
            leadership: Leadership::default(),
            schedule: Schedule::new(options.window, options.min_interval),
            kinds_served: Vec::new(),
            refused_kind: None,
            work: Vec::new(),
            images: ImageIndex::default(),
            poll_interval: options.poll_interval,
            next_poll: None,
            tracked_workloads: TrackedWorkloads::default(),
            moved_templates: Vec::new(),
            guard: FlapGuard::new(options.flap),
            skipped: HashMap::new(),
            events: Vec::new(),
            template_reads: Vec::new(),
            template_retries: Vec::new(),
            unseen_patches: HashMap::new(),
        };
        State { watches: WatchHandles::default(), view }
    }

    pub fn metrics(&self) -> &ControllerMetrics {
        &self.view.metrics
    }

    /// The workload watches must (re)start: the opted-in namespaces are
    /// known and either none runs yet or a namespace was opted in since
    /// (every workload watch lists again, so its workloads are seen).
    pub fn wants_workload_watches(&self) -> bool {
        self.watches.namespaces.synced()
            && (self.watches.workloads.is_none() || self.view.newly_in_scope)
    }

    /// The workload watches of `kinds` started in `epoch`.
    pub fn workload_watches_started(&mut self, epoch: u64, kinds: &[WorkloadKind]) {
        let handles = kinds.iter().map(|kind| (*kind, Watch::default())).collect();
        self.watches.workloads = Some((epoch, handles));
        self.view.newly_in_scope = false;
    }

    /// Kinds served since start-up, for the loop to watch.
    pub fn take_kinds_served(&mut self) -> Vec<WorkloadKind> {
        std::mem::take(&mut self.view.kinds_served)
    }

    /// A declared kind served against its declaration (cluster-scoped), if one was found.
    pub fn refused_kind(&self) -> Option<WorkloadKind> {
        self.view.refused_kind
    }

    /// The watch of `kind` joined the workload watches of `epoch`: its handle
    /// starts unsynced, and its workloads are planned as they are listed.
    pub fn kind_watch_started(&mut self, epoch: u64, kind: WorkloadKind) {
        if let Some((current, handles)) = &mut self.watches.workloads {
            if *current == epoch {
                handles.entry(kind).or_default();
            }
        }
    }

    /// Every watch has listed everything once, and every tracked object has
    /// been read once (or failed and waits for its retry).
    pub fn ready(&self) -> bool {
        self.view.phase == Phase::Watching
    }

    pub fn handle(&mut self, message: Message, now: Instant) {
        let view = &mut self.view;
        match message {
            Message::Namespace(event) => {
                self.watches.namespaces.handle(&mut Namespaces(view), event);
            }
            Message::Workload { kind, epoch, event } => {
                let Some((current, handles)) = &mut self.watches.workloads else { return };
                if let Some(watch) = handles.get_mut(&kind).filter(|_| *current == epoch) {
                    watch.handle(&mut Workloads { kind, view }, *event);
                }
            }
            Message::Object(kind, event) => {
                let watch = self.watches.objects.entry(kind).or_default();
                watch.handle(&mut Objects { kind, view }, event);
            }
            Message::Read(read) => {
                let (object, result) = *read;
                view.read_done(object, result, now);
            }
            Message::Reconciled(done) => {
                let (work, result) = *done;
                view.reconciled(work, result, now);
            }
            Message::KindClusterScoped(kind) => view.refused_kind = Some(kind),
            Message::KindServed(kind) => {
                info!(kind = kind.as_str(), "its resource is served now; watching it");
                view.kinds_served.push(kind);
            }
            Message::Image(resolved) => {
                let (image, resolution) = *resolved;
                view.image_resolved(image, &resolution, now);
            }
            Message::Template(read) => {
                let (workload, result) = *read;
                view.template_read(workload, result, now);
            }
        }
        self.advance(now);
        self.view.roll_trackers(now);
    }

    /// Moves on once every watch has listed, then once the baseline is read.
    fn advance(&mut self, now: Instant) {
        let view = &mut self.view;
        if view.phase == Phase::Listing && self.watches.synced() {
            view.phase = Phase::ReadingBaseline;
            let all: Vec<ObjectKey> = view.objects.all().cloned().collect();
            info!(
                workloads = view.index.len(),
                objects = all.len(),
                "watches synced; reading tracked objects"
            );
            for object in all {
                view.objects.request(object);
            }
            // And the first poll of every tracked image, likewise.
            view.next_poll = Some(now);
            view.catch_up_trackers(now);
            // Tracked workloads the listing delivered before anything tracked them: read once.
            if let Ok(digests) = view.shared.template_digests.lock() {
                let unknown =
                    view.tracked_workloads.tracked().filter(|w| !digests.contains_key(*w));
                view.template_reads.extend(unknown.cloned());
            }
        }
        if view.phase == Phase::ReadingBaseline && view.objects.pending() == 0 {
            view.phase = Phase::Watching;
        }
    }

    /// A new leadership state: a new term catches up (reads every tracked
    /// object again); leaving drops every queued reconciliation.
    pub fn lead(&mut self, leadership: Leadership, now: Instant) {
        let view = &mut self.view;
        let was = view.leadership;
        view.leadership = leadership;
        let term = leadership.is_leading(now).then_some(leadership.term);
        view.set_term(term);
        if term.is_some() && was.term != leadership.term && view.phase != Phase::Listing {
            info!(term = leadership.term, "leading: bringing workloads up to date");
            let all: Vec<ObjectKey> = view.objects.all().cloned().collect();
            for object in all {
                view.objects.request(object);
            }
            view.next_poll = Some(now);
            view.catch_up_trackers(now);
        }
    }

    /// When the loop must wake up next for due work.
    pub fn next_due(&self) -> Option<Instant> {
        let view = &self.view;
        let reads = view.read_retries.iter().map(|(at, _)| *at).min();
        let release = view.guard.next_release();
        let templates = view.template_retries.iter().map(|(at, _)| *at).min();
        [view.schedule.next_due(), reads, view.next_poll, release, templates]
            .into_iter()
            .flatten()
            .min()
    }

    /// What is due at `now`: reads (due retries among them), reconciliations
    /// for the worker, and a poll round.
    pub fn tick(&mut self, now: Instant) -> Effects {
        let view = &mut self.view;
        let (due, later): (Vec<_>, Vec<_>) =
            std::mem::take(&mut view.read_retries).into_iter().partition(|(at, _)| *at <= now);
        view.read_retries = later;
        for (_, object) in due {
            view.objects.request(object);
        }
        // Leadership lapses by the clock, even before the elector says so.
        if !view.leadership.is_leading(now) {
            view.set_term(None);
        }
        for (workload, source) in view.guard.release(now) {
            info!(workload = %workload, %source, "quiet for a flap period: rolling it again");
            if view.schedule.term().is_some() {
                let uid =
                    view.shared.snapshots.lock().ok().and_then(|s| s.get(&workload)?.uid.clone());
                let period = view.guard.limits().period;
                view.events.push(event::flap_guard_released(&workload, uid, &source, period));
            }
            view.schedule.triggered(workload, Trigger::Quiet(source), now);
        }
        let mut work = std::mem::take(&mut view.work);
        work.extend(view.schedule.take_due(now));
        for work in &mut work {
            work.unseen_patch = view.unseen_patches.get(&work.key).cloned();
        }
        let poll = view.poll_due(now);
        let mut reads = Vec::new();
        while let Some(object) = view.objects.start_next(READS_IN_FLIGHT) {
            let trackers = view.trackers(&object);
            reads.push(ReadRequest { object, trackers });
        }
        let events = std::mem::take(&mut view.events);
        let (due, later): (Vec<_>, Vec<_>) =
            std::mem::take(&mut view.template_retries).into_iter().partition(|(at, _)| *at <= now);
        view.template_retries = later;
        view.template_reads.extend(due.into_iter().map(|(_, workload)| workload));
        let template_reads = std::mem::take(&mut view.template_reads);
        Effects { reads, work, poll, events, template_reads }
    }

    /// Workloads waiting for their window, a retry or the worker, and reads
    /// waiting or running.
    pub fn queue_depth(&self) -> usize {
        let view = &self.view;
        view.schedule.depth() + view.read_retries.len() + view.objects.pending()
    }

    pub fn watched_objects(&self) -> usize {
        self.view.index.object_count()
    }

    pub fn workloads(&self) -> usize {
        self.view.index.len()
    }

    /// Watched workloads by verdict, for the workloads gauge: held by the flap guard, stale
    /// (waiting to be rolled), recording no digest of some input yet, current; and those the
    /// webhook leaves alone, with why.
    pub fn verdicts(&self) -> Vec<(Verdict, usize)> {
        let view = &self.view;
        let mut counts: HashMap<Verdict, usize> = HashMap::new();
        for verdict in view.skipped.values() {
            *counts.entry(*verdict).or_default() += 1;
        }
        if let Ok(snapshots) = view.shared.snapshots.lock() {
            for (key, snapshot) in snapshots.iter() {
                let verdict = if view.guard.is_held(key) {
                    Verdict::Held
                } else if view.schedule.is_pending(key) {
                    Verdict::Stale
                } else if snapshot.mutation.records_every_input() {
                    Verdict::Current
                } else {
                    Verdict::FirstObservation
                };
                *counts.entry(verdict).or_default() += 1;
            }
        }
        let mut counts: Vec<(Verdict, usize)> = counts.into_iter().collect();
        counts.sort();
        counts
    }

    /// Workloads the flap guard holds.
    pub fn held_workloads(&self) -> usize {
        self.view.guard.held_workloads()
    }
}

impl ClusterView {
    fn in_scope(&self, namespace: &str) -> bool {
        self.in_scope.contains(namespace)
    }

    /// Leads in `term`, or follows (`None`): a follower keeps no work and no
    /// fresh digests, a new term starts from what it reads.
    fn set_term(&mut self, term: Option<u64>) {
        if term.is_none() && self.schedule.term().is_some() {
            if let Ok(mut fresh) = self.shared.fresh_digests.lock() {
                fresh.clear();
            }
        }
        self.schedule.lead(term);
    }

    fn opt_out(&mut self, namespace: &str) {
        if self.in_scope.remove(namespace) {
            let keys: Vec<WorkloadKey> = self.index.workloads_in(namespace).cloned().collect();
            for key in keys {
                self.forget_workload(&key);
            }
        }
    }

    /// `trigger` makes `workload` due, unless the flap guard holds that source for it. A
    /// follower rolls nothing, so nothing counts.
    fn trigger(&mut self, workload: WorkloadKey, trigger: Trigger, now: Instant) {
        if self.schedule.term().is_none() {
            return;
        }
        match self.guard.admit(&workload, &trigger, now) {
            Admission::Roll => self.schedule.triggered(workload, trigger, now),
            Admission::Hold { announce: false } => {}
            Admission::Hold { announce: true } => {
                let FlapLimits { limit, period } = self.guard.limits();
                let source = trigger.source();
                warn!(workload = %workload, %source, limit, period = ?period,
                    "flap guard: stopped rolling it until the source is quiet");
                let uid =
                    self.shared.snapshots.lock().ok().and_then(|s| s.get(&workload)?.uid.clone());
                self.events.push(event::flap_guard(&workload, uid, &source, limit, period));
            }
        }
    }

    /// A tracked workload's template digest as it is now (`None`: it does not exist). A change
    /// (or the first knowledge of it) makes its trackers' digests worth a look.
    fn template_seen(&mut self, key: &WorkloadKey, digest: Option<String>) {
        let Ok(mut digests) = self.shared.template_digests.lock() else { return };
        let before = digests.insert(key.clone(), digest.clone());
        if before != Some(digest) {
            self.moved_templates.push(key.clone());
        }
    }

    /// Which workloads are tracked changed: a workload no longer tracked drops its digest; one
    /// newly tracked whose template is not known is read once (after the first listing, which
    /// may still deliver it).
    fn tracking_changed(&mut self, added: Vec<WorkloadKey>, dropped: Vec<WorkloadKey>) {
        if let Ok(mut digests) = self.shared.template_digests.lock() {
            for workload in &dropped {
                digests.remove(workload);
            }
            if self.phase != Phase::Listing {
                let unknown = added.into_iter().filter(|w| !digests.contains_key(w));
                self.template_reads.extend(unknown);
            }
        }
    }

    /// A read of a tracked workload's template finished. A watch event that came meanwhile
    /// is newer, and wins.
    fn template_read(
        &mut self,
        workload: WorkloadKey,
        result: Result<Option<serde_json::Value>, String>,
        now: Instant,
    ) {
        let known = self.shared.template_digests.lock().is_ok_and(|d| d.contains_key(&workload));
        if known || !self.tracked_workloads.is_tracked(&workload) {
            return;
        }
        match result {
            Ok(template) => {
                let prefixes = &self.workload_prefixes;
                let digest = template.map(|template| template_digest(&template, prefixes));
                self.template_seen(&workload, digest);
            }
            Err(reason) => {
                let wait = backoff::delay(1, backoff::random());
                warn!(workload = %workload, %reason, retry_in = ?wait, "cannot read a tracked workload");
                self.template_retries.push((now + wait, workload));
            }
        }
    }

    /// The trackers of every moved template whose recorded digest it made stale are due.
    fn roll_trackers(&mut self, now: Instant) {
        if self.moved_templates.is_empty() {
            return;
        }
        let moved = std::mem::take(&mut self.moved_templates);
        if self.phase == Phase::Listing || self.schedule.term().is_none() {
            // Before the first full listing, and while following, the catch-up covers them.
            return;
        }
        let mut due = Vec::new();
        if let (Ok(snapshots), Ok(digests)) =
            (self.shared.snapshots.lock(), self.shared.template_digests.lock())
        {
            for tracked in &moved {
                for tracker in self.tracked_workloads.trackers_of(tracked) {
                    let Some(snapshot) = snapshots.get(tracker) else { continue };
                    let mutation = &snapshot.mutation;
                    // A tracker whose snapshot may be outdated is judged by its reconciliation.
                    let outdated =
                        self.snapshot_outdated(tracker) && recorded(mutation, tracked).is_some();
                    if outdated || stale(mutation, tracked, &digests) {
                        due.push((tracker.clone(), tracked));
                    }
                }
            }
        }
        for (tracker, tracked) in due {
            let trigger = Trigger::Workload(format!("{}/{}", tracked.kind.word(), tracked.name));
            self.trigger(tracker, trigger, now);
        }
    }

    /// Every tracker whose recorded digest of a workload it tracks is stale is due: at the
    /// first full listing (what changed while no controller watched) and in a new term.
    fn catch_up_trackers(&mut self, now: Instant) {
        let mut due = Vec::new();
        if let (Ok(snapshots), Ok(digests)) =
            (self.shared.snapshots.lock(), self.shared.template_digests.lock())
        {
            for (tracker, tracked) in self.tracked_workloads.all() {
                let Some(snapshot) = snapshots.get(tracker) else { continue };
                for workload in tracked.iter().filter(|w| stale(&snapshot.mutation, w, &digests)) {
                    let word = workload.kind.word();
                    due.push((
                        tracker.clone(),
                        Trigger::Workload(format!("{word}/{}", workload.name)),
                    ));
                }
            }
        }
        for (tracker, trigger) in due {
            self.trigger(tracker, trigger, now);
        }
    }

    /// A new snapshot of `key` was stored: it includes any patch of this replica's.
    fn workload_seen(&mut self, key: &WorkloadKey) {
        self.unseen_patches.remove(key);
    }

    fn forget_workload(&mut self, key: &WorkloadKey) {
        self.unseen_patches.remove(key);
        if let Ok(mut snapshots) = self.shared.snapshots.lock() {
            snapshots.remove(key);
        }
        if let Ok(mut fresh) = self.shared.fresh_digests.lock() {
            fresh.remove(key);
        }
        let change = self.index.remove(key);
        self.tracked_objects_changed(change);
        self.images.remove(key);
        let dropped = self.tracked_workloads.remove(key);
        self.tracking_changed(Vec::new(), dropped);
        self.skipped.remove(key);
        self.guard.forget(key);
        self.schedule.forget(key);
    }

    fn tracked_objects_changed(&mut self, change: Change) {
        for object in change.dropped {
            self.objects.forget(&object);
        }
        for object in change.added {
            self.objects.track(object.clone());
            // Newly tracked after the first reads: read it now for its baseline.
            if self.phase != Phase::Listing {
                self.objects.request(object);
            }
        }
    }

    /// The workloads tracking `object`, with the keys each consumes and its digest.
    fn trackers(&self, object: &ObjectKey) -> Vec<Tracker> {
        let Ok(snapshots) = self.shared.snapshots.lock() else { return Vec::new() };
        self.index
            .tracking(object)
            .filter_map(|workload| {
                let mutation = &snapshots.get(workload)?.mutation;
                let target = mutation.targets.iter().find(|t| t.object == object.object)?;
                Some(Tracker {
                    workload: workload.clone(),
                    keys: target.consumption.keys.clone(),
                    existing: mutation.existing(target).map(str::to_owned),
                })
            })
            .collect()
    }

    fn read_done(&mut self, object: ObjectKey, result: Result<Reading, String>, now: Instant) {
        match result {
            Ok(reading) => {
                let Some(changed) = self.objects.finished(&object, &reading) else { return };
                if self.schedule.term().is_none() {
                    // A follower rolls nothing; its next term reads everything again.
                    return;
                }
                let due: Vec<_> = {
                    let snapshots = self.shared.snapshots.lock().ok();
                    let outdated = |judged: &Judged| {
                        self.judged_on_outdated(&object.object, judged, snapshots.as_deref())
                    };
                    to_roll(reading, changed, outdated).collect()
                };
                // Handed to the reconciliations, so they need not read the object again.
                if let Ok(mut fresh) = self.shared.fresh_digests.lock() {
                    for judged in &due {
                        let of_workload = fresh.entry(judged.workload.clone()).or_default();
                        of_workload.insert(object.object.clone(), judged.fresh.clone());
                    }
                }
                for judged in due {
                    self.trigger(judged.workload, Trigger::Object(object.object.clone()), now);
                }
            }
            Err(reason) => {
                let failures = self.objects.failed(&object);
                let wait = backoff::delay(failures, backoff::random());
                let ObjectKey { namespace, object: reference } = &object;
                warn!(object = %reference, %namespace, %reason, retry_in = ?wait, "cannot read a tracked object");
                self.read_retries.push((now + wait, object));
            }
        }
    }

    /// Whether `workload`'s snapshot may be older than the workload: it is being reconciled,
    /// or this replica patched it and the watch has not delivered that yet.
    fn snapshot_outdated(&self, workload: &WorkloadKey) -> bool {
        self.schedule.in_worker(workload) || self.unseen_patches.contains_key(workload)
    }

    /// Whether a read may have judged `judged` against a digest its workload no longer
    /// records: its snapshot moved during the read, or may be outdated. Otherwise content
    /// that went back to what the old snapshot recorded (a Secret created and deleted again)
    /// would look current and roll nothing, ever.
    fn judged_on_outdated(
        &self,
        object: &ObjectRef,
        judged: &Judged,
        snapshots: Option<&HashMap<WorkloadKey, Snapshot>>,
    ) -> bool {
        let workload = &judged.workload;
        if self.snapshot_outdated(workload) {
            return true;
        }
        let Some(mutation) = snapshots.and_then(|s| s.get(workload)).map(|s| &s.mutation) else {
            return false;
        };
        let recorded = mutation.targets.iter().find(|t| t.object == *object);
        recorded.is_some_and(|target| mutation.existing(target) != Some(judged.fresh.annotation()))
    }

    /// A tag resolved: each tracking workload whose recorded digest differs
    /// is due. One without the annotation is a first observation: nothing.
    fn image_resolved(&mut self, image: PolledImage, resolution: &Resolution, now: Instant) {
        let Some(digest) = digest_of(resolution) else {
            debug!(reference = %image.reference, outcome = resolution.outcome(), "image not resolved");
            return;
        };
        if let Ok(mut latest) = self.shared.latest_digests.lock() {
            latest.insert(image.clone(), digest.to_owned());
        }
        let Ok(snapshots) = self.shared.snapshots.lock() else { return };
        let mut due = Vec::new();
        for tracking in self.images.tracking(&image) {
            let Some(snapshot) = snapshots.get(&tracking.workload) else { continue };
            let Some(old) = snapshot.mutation.images.recorded(&tracking.key) else { continue };
            if old != digest {
                let trigger = Trigger::Image {
                    container: tracking.container.clone(),
                    variable: tracking.variable.clone(),
                    image: tracking.image.clone(),
                    old: old.to_owned(),
                    new: digest.to_owned(),
                };
                due.push((tracking.workload.clone(), trigger));
            }
        }
        drop(snapshots);
        for (workload, trigger) in due {
            self.trigger(workload, trigger, now);
        }
    }

    /// Sends the poller a round of every tracked image when one is due,
    /// while leading: followers patch nothing, so they ask registries nothing.
    fn poll_due(&mut self, now: Instant) -> Option<Vec<PolledImage>> {
        let at = self.next_poll?;
        if at > now {
            return None;
        }
        self.next_poll = Some(now + self.poll_interval);
        let leading = self.leadership.is_leading(now);
        (leading && !self.images.is_empty()).then(|| self.images.polled())
    }

    fn reconciled(&mut self, work: Work, result: ReconcileResult, now: Instant) {
        let key = work.key.clone();
        let opened = work.opened;
        if matches!(result, Ok(Reconciled::Patched { .. } | Reconciled::DryRun)) {
            self.guard.rolled(&key, &work.triggers, now);
        }
        if let Ok(Reconciled::Patched { from }) = &result {
            let unseen = self.shared.snapshots.lock().is_ok_and(|s| {
                s.get(&key).is_some_and(|snapshot| snapshot.resource_version == *from)
            });
            if unseen {
                self.unseen_patches.insert(key.clone(), from.clone());
            }
        }
        let (retry_in, next) = self.schedule.done(work, &result, now, backoff::random());
        match &result {
            Ok(Reconciled::DryRun) => self.metrics.count("dry_run"),
            Ok(Reconciled::Patched { .. }) => {
                self.metrics.count("patched");
                self.metrics.reacted(now.saturating_duration_since(opened).as_secs_f64());
                info!(workload = %key, "patched the pod template's digests");
            }
            Ok(Reconciled::Unchanged | Reconciled::Gone) => self.metrics.count("unchanged"),
            Ok(Reconciled::NotLeading) => {}
            Err(e) => {
                self.metrics.count(e.metric_label());
                warn!(workload = %key, error = %e, retry_in = ?retry_in, "cannot bring the digests up to date");
            }
        }
        self.work.extend(next);
    }
}
