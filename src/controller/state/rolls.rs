//! What makes a workload due, across the indexes: a finished read, a resolved tag, a moved
//! template, a reconciliation's end — and the gates a trigger passes before the queue (the
//! leadership term, the flap guard). Also how a workload's change travels from the workload
//! index to the indexes that follow what it tracks.

use std::collections::BTreeSet;

use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::State;
use super::gate::{Gating, Involved, RecordedRoll};
use super::images::{digest_of, tracked_images};
use super::objects::Tracker;
use super::provider_classes::{self, ClassKey, ProviderClasses};
use super::references::{Change, tracked_by};
use super::rolling_together::{self, recorded};
use super::workloads::WorkloadChange;
use crate::controller::model::backoff;
use crate::controller::model::polled_image::PolledImage;
use crate::controller::model::reading::{Judged, Reading};
use crate::controller::model::trigger::{Source, SourceChange, Trigger};
use crate::controller::model::work::{Due, ReconcileResult, Reconciled};
use crate::controller::model::workload::WorkloadKey;
use crate::core::ObjectKey;
use crate::registry::Resolution;

impl State {
    /// Passes what the workload index reports on to the indexes that follow it.
    pub(super) fn workloads_changed(&mut self) {
        let reading = self.phase != super::Phase::Listing;
        for change in self.workloads.take_changes() {
            match change {
                WorkloadChange::Template(key, digest) => self.together.template_seen(&key, digest),
                WorkloadChange::Forgotten(key) => self.forget_elsewhere(&key),
                WorkloadChange::Planned(key) => {
                    let Some(snapshot) = self.workloads.snapshot(&key) else { continue };
                    for gate in &mut self.gates {
                        gate.observed(&key, &snapshot.rollout);
                    }
                    let mutation = &snapshot.mutation;
                    self.images.upsert(&key, tracked_images(&key, mutation));
                    let together = rolling_together::tracked_by(mutation);
                    let objects = tracked_by(mutation);
                    self.together.upsert(&key, together, reading);
                    self.classes.upsert(&key, provider_classes::mounted_by(mutation));
                    let change = self.references.upsert(key, objects);
                    self.tracked_objects_changed(change);
                }
            }
        }
    }

    /// `key` is gone from the workload index: every other index forgets it too.
    pub(super) fn forget_elsewhere(&mut self, key: &WorkloadKey) {
        self.objects.drop_fresh(Some(key));
        let change = self.references.remove(key);
        self.tracked_objects_changed(change);
        self.images.remove(key);
        self.together.remove(key);
        self.classes.remove(key);
        for gate in &mut self.gates {
            gate.forget(key);
        }
        self.queue.forget(key);
    }

    fn tracked_objects_changed(&mut self, change: Change) {
        for object in change.dropped {
            self.objects.forget(&object);
        }
        for object in change.added {
            self.objects.track(object.clone());
            // Newly tracked after the first reads: read it now for its baseline.
            if self.phase != super::Phase::Listing {
                self.objects.request(object);
            }
        }
    }

    /// `trigger` makes `workload` due, unless a gate holds it; `change`, the new content of
    /// a source it came with, gathers the workloads of one fan-out. A follower rolls nothing,
    /// so nothing counts.
    pub(super) fn trigger(
        &mut self,
        workload: WorkloadKey,
        trigger: Trigger,
        change: Option<&SourceChange>,
        now: Instant,
    ) {
        self.pass_gates(workload, trigger, change, now, None);
    }

    /// Passes `trigger` through every gate but `skip` (the one that released it), then to
    /// the queue.
    pub(super) fn pass_gates(
        &mut self,
        workload: WorkloadKey,
        trigger: Trigger,
        change: Option<&SourceChange>,
        now: Instant,
        skip: Option<usize>,
    ) {
        if self.queue.term().is_none() {
            return;
        }
        for (at, gate) in self.gates.iter_mut().enumerate() {
            if Some(at) == skip {
                continue;
            }
            if let Gating::Hold { event } = gate.admit(&workload, &trigger, change, now) {
                if let Some(event) = event {
                    self.record(*event, &workload);
                }
                return;
            }
        }
        self.queue.triggered(workload, trigger, now);
    }

    /// Records `event` on `workload`, with its uid.
    pub(super) fn record(
        &mut self,
        mut event: k8s_openapi::api::core::v1::Event,
        workload: &WorkloadKey,
    ) {
        event.involved_object.uid = self.uid(workload);
        self.events.push(event);
    }

    /// Records a gate's `event` on what it is about, with its uid.
    pub(super) fn record_on(
        &mut self,
        mut event: k8s_openapi::api::core::v1::Event,
        involved: Involved,
    ) {
        // A ConfigMap's or Secret's uid is not kept for each of them: the Event's recording
        // asks for it (`ControllerApi::record`), as seldom as such Events are.
        event.involved_object.uid = match &involved {
            Involved::Workload(workload) => self.uid(workload),
            Involved::Object(_) => None,
        };
        self.events.push(event);
    }

    pub(super) fn uid(&self, workload: &WorkloadKey) -> Option<String> {
        self.workloads.snapshot(workload)?.uid.clone()
    }

    /// The trackers of every moved template whose recorded digest it made stale are due.
    pub(super) fn roll_trackers(&mut self, now: Instant) {
        let moved = self.together.take_moved();
        if moved.is_empty() || self.phase == super::Phase::Listing || self.queue.term().is_none() {
            // Before the first full listing, and while following, the catch-up covers them.
            return;
        }
        let mut due = Vec::new();
        for tracked in &moved {
            for tracker in self.together.trackers_of(tracked) {
                let Some(snapshot) = self.workloads.snapshot(tracker) else { continue };
                let mutation = &snapshot.mutation;
                // A tracker whose snapshot may be outdated is judged by its reconciliation.
                let outdated =
                    self.snapshot_outdated(tracker) && recorded(mutation, tracked).is_some();
                if outdated || self.together.is_stale(mutation, tracked) {
                    due.push((tracker.clone(), tracked));
                }
            }
        }
        let due: Vec<_> = due
            .into_iter()
            .map(|(tracker, tracked)| {
                let trigger =
                    Trigger::Workload(format!("{}/{}", tracked.kind.word(), tracked.name));
                (tracker, trigger, self.template_change(tracked))
            })
            .collect();
        self.hand_template_records(due.iter().filter_map(|(_, _, change)| change.clone()));
        for (tracker, trigger, change) in due {
            self.trigger(tracker, trigger, change.as_ref(), now);
        }
    }

    /// Every tracker whose recorded digest of a workload it tracks is stale is due: at the
    /// first full listing (what changed while no controller watched) and in a new term.
    pub(super) fn catch_up_trackers(&mut self, now: Instant) {
        let mut due = Vec::new();
        for (tracker, tracked) in self.together.all() {
            let Some(snapshot) = self.workloads.snapshot(tracker) else { continue };
            for workload in tracked.iter().filter(|w| self.together.is_stale(&snapshot.mutation, w))
            {
                let word = workload.kind.word();
                let trigger = Trigger::Workload(format!("{word}/{}", workload.name));
                due.push((tracker.clone(), trigger, self.template_change(workload)));
            }
        }
        self.hand_template_records(due.iter().filter_map(|(_, _, change)| change.clone()));
        for (tracker, trigger, change) in due {
            self.trigger(tracker, trigger, change.as_ref(), now);
        }
    }

    /// The workloads mounting a rotated class are due: those recording another digest of it,
    /// and (as for a ConfigMap changed while watched) those recording none yet.
    pub(super) fn roll_class_trackers(&mut self, now: Instant) {
        let moved = self.classes.take_moved();
        if moved.is_empty() || self.phase == super::Phase::Listing || self.queue.term().is_none() {
            // Before the first full listing, and while following, the catch-up covers them.
            return;
        }
        let mut due = Vec::new();
        for class in moved {
            let Some(digest) = self.classes.digest(&class) else { continue };
            for tracker in self.classes.trackers_of(&class) {
                let Some(snapshot) = self.workloads.snapshot(tracker) else { continue };
                let recorded = ProviderClasses::recorded(&snapshot.mutation, &class);
                // A tracker whose snapshot may be outdated is judged by its reconciliation.
                if recorded != Some(digest.as_str()) || self.snapshot_outdated(tracker) {
                    due.push((tracker.clone(), class.clone(), digest.clone()));
                }
            }
        }
        self.trigger_classes(due, now);
    }

    /// Every workload recording a digest of a class it mounts that differs from the one known
    /// now is due: at the first full listing, when the statuses are first listed (their CRD
    /// served late), and in a new term.
    pub(super) fn catch_up_classes(&mut self, now: Instant) {
        if self.phase == super::Phase::Listing || self.queue.term().is_none() {
            return;
        }
        let mut due = Vec::new();
        for (tracker, classes) in self.classes.all() {
            let Some(snapshot) = self.workloads.snapshot(tracker) else { continue };
            for class in classes.iter().filter(|c| self.classes.is_stale(&snapshot.mutation, c)) {
                let Some(digest) = self.classes.digest(class) else { continue };
                due.push((tracker.clone(), class.clone(), digest));
            }
        }
        self.trigger_classes(due, now);
    }

    /// Each `(workload, class, digest)` through the gates, one change per class and digest.
    fn trigger_classes(&mut self, due: Vec<(WorkloadKey, ClassKey, String)>, now: Instant) {
        let change_of = |class: &ClassKey, digest: &str| {
            let source = Source::ProviderClass {
                namespace: class.namespace.clone(),
                name: class.name.clone(),
            };
            SourceChange::new(source, digest)
        };
        let changes: BTreeSet<(ClassKey, String)> =
            due.iter().map(|(_, class, digest)| (class.clone(), digest.clone())).collect();
        for (class, digest) in changes {
            let trackers: Vec<WorkloadKey> = self.classes.trackers_of(&class).cloned().collect();
            self.hand_records(&change_of(&class, &digest), &trackers);
        }
        for (workload, class, digest) in due {
            let word = crate::core::model::annotations::PROVIDER_CLASS_WORD;
            let trigger = Trigger::ProviderClass(format!("{word}/{}", class.name));
            self.trigger(workload, trigger, Some(&change_of(&class, &digest)), now);
        }
    }

    /// Hands the gates what those of `trackers` that rolled in `change` before record of it
    /// (`<domain>/waves`): a new leader goes on with the fan-out from there.
    fn hand_records<'a>(
        &mut self,
        change: &SourceChange,
        trackers: impl IntoIterator<Item = &'a WorkloadKey>,
    ) {
        let name = change.source.record_name();
        let records: Vec<RecordedRoll> = trackers
            .into_iter()
            .filter_map(|workload| {
                let snapshot = self.workloads.snapshot(workload)?;
                let entry = snapshot.rollout.waves.get(&name)?;
                (entry.change.as_str() == change.id).then(|| RecordedRoll {
                    workload: workload.clone(),
                    wave: entry.wave,
                    at: entry.at,
                    halt_id: entry.halt_id().to_owned(),
                    generation: snapshot.rollout.generation,
                    health: snapshot.rollout.health.clone(),
                })
            })
            .collect();
        if !records.is_empty() {
            for gate in &mut self.gates {
                gate.recorded(change, &records);
            }
        }
    }

    /// Hands the gates the records of each distinct change of a tracked workload's template.
    fn hand_template_records(&mut self, changes: impl IntoIterator<Item = SourceChange>) {
        let changes: BTreeSet<SourceChange> = changes.into_iter().collect();
        for change in changes {
            let Source::Workload(tracked) = &change.source else { continue };
            let trackers: Vec<WorkloadKey> = self.together.trackers_of(tracked).cloned().collect();
            self.hand_records(&change, &trackers);
        }
    }

    /// The change of `tracked`'s template to what it is now, if known.
    fn template_change(&self, tracked: &WorkloadKey) -> Option<SourceChange> {
        let digest = self.together.template(tracked)?.as_deref()?;
        Some(SourceChange::new(Source::Workload(tracked.clone()), digest))
    }

    /// The workloads tracking `object`, with the keys each consumes and its digest.
    pub(super) fn trackers(&self, object: &ObjectKey) -> Vec<Tracker> {
        self.references
            .tracking(object)
            .filter_map(|workload| {
                let mutation = &self.workloads.snapshot(workload)?.mutation;
                let target = mutation
                    .targets
                    .iter()
                    .find(|t| t.object.names(object, &workload.namespace))?;
                Some(Tracker {
                    workload: workload.clone(),
                    keys: target.consumption.keys.clone(),
                    existing: mutation.existing(target).map(str::to_owned),
                    reach: target.reach,
                })
            })
            .collect()
    }

    pub(super) fn read_done(
        &mut self,
        object: ObjectKey,
        result: Result<Reading, String>,
        now: Instant,
    ) {
        match result {
            Ok(reading) => {
                let Some(changed) = self.objects.finished(&object, &reading) else { return };
                if self.queue.term().is_none() {
                    // A follower rolls nothing; its next term reads everything again.
                    return;
                }
                let change = reading.content_digest.as_deref().map_or(
                    SourceChange { source: Source::Object(object.clone()), id: "absent".into() },
                    |digest| SourceChange::new(Source::Object(object.clone()), digest),
                );
                let outdated = |judged: &Judged| self.judged_on_outdated(&object, judged);
                let due: Vec<Judged> =
                    super::objects::to_roll(reading, changed, outdated).collect();
                if !due.is_empty() {
                    let trackers: Vec<WorkloadKey> =
                        self.references.tracking(&object).cloned().collect();
                    self.hand_records(&change, &trackers);
                }
                for judged in due {
                    // Handed to the reconciliation, so it need not read the object again;
                    // named as the workload names it (another namespace's, with it).
                    let named = object.seen_from(&judged.workload.namespace);
                    self.objects.hand_on(&judged.workload, &named, judged.fresh);
                    let trigger = Trigger::Object(named);
                    self.trigger(judged.workload, trigger, Some(&change), now);
                }
            }
            Err(reason) => {
                let failures = self.objects.failed(&object);
                let wait = backoff::delay(failures, backoff::random());
                let ObjectKey { namespace, object: reference } = &object;
                warn!(object = %reference, %namespace, %reason, retry_in = ?wait, "cannot read a tracked object");
                self.objects.retry_at(object, now + wait);
            }
        }
    }

    /// Whether `workload`'s snapshot may be older than the workload: it is being reconciled,
    /// or this replica patched it and the watch has not delivered that yet.
    pub(super) fn snapshot_outdated(&self, workload: &WorkloadKey) -> bool {
        self.queue.in_flight(workload) || self.workloads.unseen_patch(workload).is_some()
    }

    /// Whether a read may have judged `judged` against a digest its workload no longer
    /// records: its snapshot moved during the read, or may be outdated. Otherwise content
    /// that went back to what the old snapshot recorded (a Secret created and deleted again)
    /// would look current and roll nothing, ever.
    fn judged_on_outdated(&self, object: &ObjectKey, judged: &Judged) -> bool {
        let workload = &judged.workload;
        if self.snapshot_outdated(workload) {
            return true;
        }
        let Some(mutation) = self.workloads.snapshot(workload).map(|s| &s.mutation) else {
            return false;
        };
        let recorded =
            mutation.targets.iter().find(|t| t.object.names(object, &workload.namespace));
        recorded.is_some_and(|target| mutation.existing(target) != judged.fresh.annotation())
    }

    /// A tag resolved: each tracking workload whose recorded digest differs
    /// is due. One without the annotation is a first observation: nothing.
    pub(super) fn image_resolved(
        &mut self,
        image: PolledImage,
        resolution: &Resolution,
        now: Instant,
    ) {
        let Some(digest) = digest_of(resolution) else {
            debug!(reference = %image.reference, outcome = resolution.outcome(), "image not resolved");
            return;
        };
        self.images.resolved(&image, digest);
        let mut due = Vec::new();
        for tracking in self.images.tracking(&image) {
            let Some(snapshot) = self.workloads.snapshot(&tracking.workload) else { continue };
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
        let change = SourceChange::new(Source::Image(image.reference.clone()), digest);
        if !due.is_empty() {
            let trackers: Vec<WorkloadKey> =
                self.images.tracking(&image).map(|t| t.workload.clone()).collect();
            self.hand_records(&change, &trackers);
        }
        for (workload, trigger) in due {
            self.trigger(workload, trigger, Some(&change), now);
        }
    }

    /// The worker finished `due`: the gates count a roll, an own patch is remembered
    /// until the watch delivers it, and the queue schedules what follows.
    pub(super) fn reconciled(&mut self, due: Due, result: ReconcileResult, now: Instant) {
        let key = due.key.clone();
        let rolled_from = match &result {
            Ok(Reconciled::Patched { generation, .. }) => Some(*generation),
            Ok(Reconciled::DryRun) => Some(None),
            _ => None,
        };
        if let Some(generation) = rolled_from {
            for gate in &mut self.gates {
                gate.rolled(&key, &due.triggers, generation, now);
            }
        }
        if let Ok(Reconciled::Unchanged) = &result {
            for gate in &mut self.gates {
                gate.found_current(&key);
            }
        }
        if let Ok(Reconciled::Patched { from, .. }) = &result {
            self.workloads.patched(&key, from);
        }
        let retry_in = self.queue.done(due, &result, now, backoff::random());
        match &result {
            Ok(Reconciled::Patched { .. }) => {
                info!(workload = %key, "patched the pod template's digests");
            }
            Ok(Reconciled::Conflicted { .. }) => {
                debug!(workload = %key, "conflict: waiting for the watch's newer version");
            }
            Ok(_) => {}
            Err(e) => {
                warn!(workload = %key, error = %e, retry_in = ?retry_in, "cannot bring the digests up to date");
            }
        }
    }
}
