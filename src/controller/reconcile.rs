//! Bringing one workload's digests up to date: the webhook's own
//! plan/lookups/decision over the watched workload, and a merge patch of just
//! the configsum annotations guarded by the watched resourceVersion (a
//! conflict is retried on the fresh object). The patch passes through the
//! webhook, which computes the same values and adds nothing. Every call is
//! bounded in time, and nothing is patched outside this replica's leadership.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::SystemTime;

use json_patch::PatchOperation;
use kube::api::Patch;
use serde_json::{Map, Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use super::api::{ControllerApi, PatchError, Reads};
use super::model::leadership::Leadership;
use super::model::trigger::{Source, Trigger, WaveMark, id_of};
use super::model::wave_record::{Id, WaveEntry};
use super::model::work::{
    CALL_TIMEOUT, CONFLICT_RETRIES, ReconcileError, ReconcileResult, Reconciled, Work,
};
use super::model::workload::Snapshot;
use super::model::{event, notice};
use super::state::pacing::TokenBucket;
use crate::core::inputs::image::ImageObservation;
use crate::core::{Digester, Mutation, ObjectRef, Observation, Settings};
use crate::lookup::{Inputs, LookupMetrics, observe, observe_some};
use crate::notify::{NoticeKind, Notifier};

pub struct Reconciler<A> {
    pub api: Arc<A>,
    pub digester: Digester,
    pub settings: Settings,
    pub lookups: LookupMetrics,
    pub leadership: watch::Receiver<Leadership>,
    /// `--dry-run`: record what would roll, patch nothing.
    pub dry_run: bool,
    /// `--notify-config`'s targets, told of each roll (or would-be roll) beside its Event.
    pub notifier: Notifier,
}

impl<A: ControllerApi> Reconciler<A> {
    /// Patches the work's workload if its digests are not current; its triggers name what
    /// changed, for the Event. Works from the snapshot the work carries (the controller needs
    /// no `get` on workloads); a conflict is reported, and the loop hands the work out again
    /// on the newer snapshot the watch delivers. Patches only while leading in the work's
    /// term, through `bucket`.
    pub async fn reconcile(&self, work: &Work, bucket: &mut TokenBucket) -> ReconcileResult {
        let (key, changed, term) = (&work.due.key, &work.due.triggers, work.due.term);
        let Some(snapshot) = &work.snapshot else {
            return if work.due.conflicts > 0 {
                Err(ReconcileError::Conflict)
            } else {
                Ok(Reconciled::Gone)
            };
        };
        let mutation = &snapshot.mutation;
        let inputs =
            GivenInputs { reconciler: self, work, deadline: Instant::now() + CALL_TIMEOUT };
        let observed = observe(mutation, &inputs).await;
        let halt_ids = halt_ids(mutation, &observed.objects, &work.waves);
        let digests = if self.notifier.is_empty() {
            BTreeMap::new()
        } else {
            new_digests(mutation, &observed.objects)
        };
        let decision = mutation.clone().decide(observed, &self.settings);
        // Retried with backoff; named as the controller says it, not in
        // the webhook's denial, which names a flag the controller lacks.
        if !decision.unreadable.is_empty() {
            return Err(ReconcileError::Lookup(unreadable(&decision.unreadable)));
        }
        if decision.patch.is_empty() {
            return Ok(Reconciled::Unchanged);
        }
        // Only patches are paced; reconciliations that change nothing are free.
        while let Err(wait) = bucket.take(Instant::now()) {
            tokio::time::sleep(wait).await;
        }
        let Some(left) = self.leadership.borrow().remaining(term, Instant::now()) else {
            return Ok(Reconciled::NotLeading);
        };
        let mut named: BTreeSet<Trigger> = changed.clone();
        named.extend(decision.changed.into_iter().map(Trigger::Object));
        named.extend(decision.changed_workloads.into_iter().map(Trigger::Workload));
        named.extend(decision.changed_classes.into_iter().map(Trigger::ProviderClass));
        if self.dry_run {
            let event = event::would_roll(key, snapshot.uid.clone(), &named, &work.waves);
            let message = event.message.clone().unwrap_or_default();
            tracing::info!(workload = %key, %message, "dry run: would roll");
            let kind = NoticeKind::WouldRoll;
            self.notifier.notify(notice::roll(kind, key, &named, &digests, message));
            self.api.record(event, CALL_TIMEOUT).await;
            return Ok(Reconciled::DryRun);
        }
        let version = snapshot.resource_version.clone();
        // A pinned image or an image-env variable is in an element of a list, which a
        // merge patch could only replace whole: such a patch is a JSON Patch.
        let annotations = key.kind.annotations_path();
        let record = wave_record(snapshot, &work.waves, &halt_ids, SystemTime::now());
        let patch: Patch<Value> = if annotations_only(annotations, &decision.patch) {
            let mut patch = merge_patch(annotations, &decision.patch, version);
            if let Some(record) = record {
                patch["metadata"]["annotations"][self.settings.domain.waves()] = record.into();
            }
            Patch::Merge(patch)
        } else {
            let mut ops = decision.patch;
            if let Some(record) = record {
                ops.extend(record_ops(&self.settings.domain.waves(), record, snapshot));
            }
            Patch::Json(guarded_json_patch(ops, version))
        };
        match tokio::time::timeout(left.min(CALL_TIMEOUT), self.api.patch(key, &patch)).await {
            Err(_) => Err(ReconcileError::Timeout),
            Ok(Ok(())) => {
                let event = event::rolled(key, snapshot.uid.clone(), &named);
                let reason = event.message.clone().unwrap_or_default();
                let kind = NoticeKind::Rolled;
                self.notifier.notify(notice::roll(kind, key, &named, &digests, reason));
                self.api.record(event, CALL_TIMEOUT).await;
                let from = snapshot.resource_version.clone();
                Ok(Reconciled::Patched { from, generation: snapshot.rollout.generation })
            }
            // The last of a run of conflicts fails, and is retried with backoff.
            Ok(Err(PatchError::Conflict)) if work.due.conflicts + 1 >= CONFLICT_RETRIES => {
                Err(ReconcileError::Conflict)
            }
            Ok(Err(PatchError::Conflict)) => {
                Ok(Reconciled::Conflicted { from: snapshot.resource_version.clone() })
            }
            Ok(Err(PatchError::NotFound)) => Ok(Reconciled::Gone),
            Ok(Err(PatchError::Failed(e))) => Err(ReconcileError::Api(e)),
        }
    }
}

/// For each wave the workload rolls in, the id its halt would have where it is not the
/// change's: the first 12 hex digits of the workload's own new digest for a ConfigMap or
/// Secret (it may consume only some keys). An image's or a template's digest is the same for
/// every workload, and so is the change's id.
fn halt_ids(
    mutation: &Mutation,
    objects: &[Observation],
    marks: &[WaveMark],
) -> Vec<Option<String>> {
    marks
        .iter()
        .map(|mark| {
            let Source::Object(key) = &mark.change.source else { return None };
            let at = mutation.targets.iter().position(|t| t.object == key.object)?;
            let Some(Observation::Digest(digest)) = objects.get(at) else { return None };
            Some(id_of(digest)).filter(|id| *id != mark.change.id)
        })
        .collect()
}

/// The new digest of each object the reconciliation read, for its notice.
fn new_digests(mutation: &Mutation, objects: &[Observation]) -> BTreeMap<ObjectRef, String> {
    let observed = mutation.targets.iter().zip(objects);
    observed
        .filter_map(|(target, observation)| match observation {
            Observation::Digest(digest) => Some((target.object.clone(), digest.clone())),
            _ => None,
        })
        .collect()
}

/// The `<domain>/waves` value the roll writes: what the workload recorded, with the waves
/// it rolls in now (`halt_ids` as [`halt_ids`] gives them); `None` when it rolls in none.
fn wave_record(
    snapshot: &Snapshot,
    marks: &[WaveMark],
    halt_ids: &[Option<String>],
    now: SystemTime,
) -> Option<String> {
    if marks.is_empty() {
        return None;
    }
    // To the second, as the record keeps it.
    let seconds = now.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(seconds);
    let mut record = snapshot.rollout.waves.clone();
    for (at_mark, mark) in marks.iter().enumerate() {
        // Ids are 12 hex digits by construction; one that is not is not recorded.
        let Some(change) = Id::parse(&mark.change.id) else { continue };
        let digest = halt_ids.get(at_mark).and_then(|d| Id::parse(d.as_deref()?));
        let entry = WaveEntry { change, wave: mark.wave, at, digest };
        record.record(&mark.change.source.record_name(), entry);
    }
    Some(record.render())
}

/// JSON Patch operations that set the annotation `key` of the workload's own metadata,
/// creating the map if the snapshot has none (the patch is guarded by its resourceVersion).
fn record_ops(key: &str, value: String, snapshot: &Snapshot) -> Vec<PatchOperation> {
    let map = json_patch::jsonptr::PointerBuf::from_tokens(["metadata", "annotations"]);
    let mut ops = Vec::new();
    if !snapshot.rollout.annotated {
        ops.push(PatchOperation::Add(json_patch::AddOperation {
            path: map.clone(),
            value: json!({}),
        }));
    }
    let path = map.with_trailing_token(key);
    ops.push(PatchOperation::Add(json_patch::AddOperation { path, value: Value::String(value) }));
    ops
}

/// `could not read secret/db, configmap/app`.
fn unreadable(objects: &[ObjectRef]) -> String {
    let names: Vec<String> = objects.iter().map(ToString::to_string).collect();
    format!("could not read {}", names.join(", "))
}

/// A reconciliation's observations: the digests the event loop's reads computed for it
/// where they cover the keys it reads now, the other objects read fresh; its images and
/// tracked workloads from what the loop knew when it handed the work out.
struct GivenInputs<'a, A> {
    reconciler: &'a Reconciler<A>,
    work: &'a Work,
    deadline: Instant,
}

impl<A: ControllerApi> Inputs for GivenInputs<'_, A> {
    async fn objects(&self, mutation: &Mutation) -> Vec<Observation> {
        let r = self.reconciler;
        let fresh = &self.work.fresh;
        let mut observations: Vec<Option<Observation>> = mutation
            .targets
            .iter()
            .map(|target| {
                let found = fresh.get(&target.object)?;
                (found.keys == target.consumption.keys).then(|| found.observation.clone())
            })
            .collect();
        let missing: Vec<usize> =
            (0..observations.len()).filter(|&i| observations[i].is_none()).collect();
        if !missing.is_empty() {
            let reads = Reads(r.api.clone());
            // Reads for now: the controller shares none (`Reads` reads each fresh).
            let (now, deadline) = (tokio::time::Instant::now(), self.deadline);
            let read =
                observe_some(&reads, &r.digester, mutation, &missing, now, deadline, &r.lookups);
            for (index, observation) in read.await {
                observations[index] = Some(observation);
            }
        }
        // Every index was either fresh or read.
        let unread = || Observation::Unreadable("not read".into());
        observations.into_iter().map(|o| o.unwrap_or_else(unread)).collect()
    }

    async fn images(&self, _mutation: &Mutation) -> Vec<ImageObservation> {
        self.work.images.clone()
    }

    async fn workloads(&self, _mutation: &Mutation) -> Vec<Option<Observation>> {
        self.work.workloads.clone()
    }

    async fn classes(&self, _mutation: &Mutation) -> Vec<Option<Observation>> {
        self.work.classes.clone()
    }
}

/// The decision's operations as a JSON Patch that first sets
/// `metadata.resourceVersion` to the watched one: the API server then
/// refuses it with 409 Conflict if the object changed since.
pub fn guarded_json_patch(
    mut ops: Vec<PatchOperation>,
    resource_version: Option<String>,
) -> json_patch::Patch {
    let path = json_patch::jsonptr::PointerBuf::from_tokens(["metadata", "resourceVersion"]);
    let guard = PatchOperation::Replace(json_patch::ReplaceOperation {
        path,
        value: resource_version.map_or(Value::Null, Value::String),
    });
    ops.insert(0, guard);
    json_patch::Patch(ops)
}

/// Whether every operation is on a key of the annotations map at `path`, or creates a map
/// on the way to it: what a merge patch of that map can say.
fn annotations_only(path: &[&str], ops: &[PatchOperation]) -> bool {
    ops.iter().all(|op| {
        let pointer = match op {
            PatchOperation::Add(add) => &add.path,
            PatchOperation::Remove(remove) => &remove.path,
            _ => return false,
        };
        let tokens: Vec<String> = pointer.tokens().map(|t| t.decoded().into_owned()).collect();
        let Some((_, parent)) = tokens.split_last() else { return false };
        parent.len() <= path.len() && parent.iter().zip(path).all(|(t, p)| t == p)
    })
}

/// The decision's add/remove operations on annotation keys as one merge
/// patch of the annotations map at `path` (the kind's), guarded by `resourceVersion`. The
/// operations that create the `metadata`/`annotations` maps are implied by a merge patch.
pub fn merge_patch(
    path: &[&str],
    ops: &[PatchOperation],
    resource_version: Option<String>,
) -> Value {
    let mut annotations = Map::new();
    for op in ops {
        let (path, value) = match op {
            PatchOperation::Add(add) if add.value.is_string() => (&add.path, add.value.clone()),
            PatchOperation::Remove(remove) => (&remove.path, Value::Null),
            _ => continue,
        };
        if let Some(key) = path.last() {
            annotations.insert(key.decoded().into_owned(), value);
        }
    }
    let mut patch = Value::Object(annotations);
    for field in path.iter().rev() {
        patch = json!({ *field: patch });
    }
    if let Value::Object(fields) = &mut patch {
        let metadata = fields.entry("metadata").or_insert_with(|| json!({}));
        if let Value::Object(metadata) = metadata {
            metadata.insert("resourceVersion".to_owned(), json!(resource_version));
        }
    }
    patch
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use super::*;
    use crate::controller::fake_api::{Answer, Call, FakeApi};
    use crate::controller::model::reading::Fresh;
    use crate::controller::model::trigger::SourceChange;
    use crate::controller::model::wave_record::WaveRecord;
    use crate::controller::model::work::Due;
    use crate::controller::model::workload::{WatchedWorkload, WorkloadKey};
    use crate::core::model::kinds::WorkloadKind;
    use crate::core::refs::ConsumedKeys;
    use crate::core::{DigestKeys, ObjectContent, ObjectId};

    fn web() -> WorkloadKey {
        WorkloadKey { kind: WorkloadKind::Deployment, namespace: "ns".into(), name: "web".into() }
    }

    fn digester() -> Digester {
        Digester::new(DigestKeys::parse(b"0123456789abcdef0123456789abcdef").expect("key"))
    }

    fn digest_of(password: &str) -> String {
        let object = ObjectRef::secret("db");
        let id = ObjectId { namespace: "ns", object: &object };
        let entries = [("password".to_owned(), password.as_bytes().to_vec())].into();
        digester().digest(id, &ObjectContent::from_entries(entries), &ConsumedKeys::All, None)
    }

    /// A reconciler leading in term 1 for an hour; the Secret holds "two".
    fn reconciler() -> (Reconciler<FakeApi>, watch::Sender<Leadership>) {
        let api = FakeApi::default();
        api.put(ObjectRef::secret("db").within("ns"), &[("password", "two")]);
        let leading =
            Leadership { term: 1, until: Some(Instant::now() + Duration::from_secs(3600)) };
        let (leadership_tx, leadership) = watch::channel(leading);
        let reconciler = Reconciler {
            api: Arc::new(api),
            digester: digester(),
            settings: Settings::default(),
            lookups: LookupMetrics::default(),
            leadership,
            dry_run: false,
            notifier: Notifier::default(),
        };
        (reconciler, leadership_tx)
    }

    /// `web` at resourceVersion "5", whose template records the digest of "one".
    fn snapshot() -> Snapshot {
        let watched: WatchedWorkload = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "resourceVersion": "5", "uid": "u1"},
            "spec": {"template": {
                "metadata": {"annotations": {"secret.configsum.dev/db": digest_of("one")}},
                "spec": {"containers": [{"name": "c", "image": "app:1",
                    "envFrom": [{"secretRef": {"name": "db"}}]}]}}}}))
        .expect("a Deployment");
        let mutation = watched.plan(WorkloadKind::Deployment, &Settings::default()).expect("plan");
        Snapshot {
            mutation,
            resource_version: Some("5".into()),
            uid: Some("u1".into()),
            rollout: Default::default(),
        }
    }

    fn work() -> Work {
        let (triggers, opened) = (BTreeSet::new(), Instant::now());
        let due = Due { key: web(), triggers, opened, term: 1, conflicts: 0 };
        Work {
            due,
            snapshot: Some(snapshot()),
            fresh: HashMap::new(),
            images: Vec::new(),
            workloads: Vec::new(),
            classes: Vec::new(),
            waves: Vec::new(),
        }
    }

    /// Patched from the watched version, "5".
    fn patched() -> Reconciled {
        Reconciled::Patched { from: Some("5".into()), generation: None }
    }

    async fn reconcile_work(r: &Reconciler<FakeApi>, work: &Work) -> ReconcileResult {
        let mut bucket = TokenBucket::new(100.0, 10, Instant::now());
        r.reconcile(work, &mut bucket).await
    }

    async fn reconcile(r: &Reconciler<FakeApi>) -> ReconcileResult {
        reconcile_work(r, &work()).await
    }

    fn with_fresh(keys: ConsumedKeys, password: &str) -> Work {
        let fresh = Fresh {
            keys,
            observation: Observation::Digest(digest_of(password)),
            reach: crate::core::Reach::Own,
        };
        let mut work = work();
        work.fresh.insert(ObjectRef::secret("db"), fresh);
        work
    }

    #[tokio::test(start_paused = true)]
    async fn a_stale_digest_is_patched_with_the_watched_version_and_an_event() {
        let (r, _leading) = reconciler();
        assert_eq!(reconcile(&r).await.expect("reconciled"), patched());
        let calls = r.api.calls();
        assert!(
            matches!(&calls[0], Call::Read(object) if object.object == ObjectRef::secret("db"))
        );
        let Call::Patch(key, patch) = &calls[1] else { panic!("{calls:?}") };
        assert_eq!(key, &web());
        assert_eq!(patch["metadata"]["resourceVersion"], "5");
        let annotations = &patch["spec"]["template"]["metadata"]["annotations"];
        assert_eq!(annotations["secret.configsum.dev/db"], digest_of("two"));
        assert!(matches!(&calls[2], Call::Event(m) if m.contains("secret/db")), "{calls:?}");
        assert_eq!(calls.len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_roll_in_a_wave_records_its_wave_on_the_workload_in_the_same_patch() {
        let (r, _leading) = reconciler();
        let mut work = work();
        let db = Source::Object(ObjectRef::secret("db").within("ns"));
        let mark = |id: &str, wave| WaveMark {
            change: SourceChange { source: db.clone(), id: id.into() },
            wave,
        };
        // What the workload recorded before stays; the wave it rolls in now is added.
        if let Some(snapshot) = &mut work.snapshot {
            let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_881_600);
            let change = Id::parse("fedcba987654").expect("an id");
            let entry = WaveEntry { change, wave: 3, at, digest: None };
            snapshot.rollout.waves.record("configmap/app", entry);
        }
        work.waves = vec![mark("0123456789ab", 2)];
        assert_eq!(reconcile_work(&r, &work).await.expect("reconciled"), patched());
        let patches = r.api.patches();
        let record = patches[0]["metadata"]["annotations"]["configsum.dev/waves"]
            .as_str()
            .map(WaveRecord::parse)
            .expect("recorded in the merge patch");
        let entries: Vec<(&str, &str, u32)> =
            record.entries().map(|(s, e)| (s, e.change.as_str(), e.wave)).collect();
        assert_eq!(
            entries,
            [("configmap/app", "fedcba987654", 3), ("secret/db", "0123456789ab", 2)]
        );
        // A halt at this workload is named by its own new digest for the Secret.
        let halt_id = record.get("secret/db").map(|e| e.halt_id().to_owned());
        assert_eq!(halt_id, Some(id_of(&digest_of("two"))));
        assert_eq!(patches[0]["metadata"]["resourceVersion"], "5", "guarded as ever");

        // Where the workload's digest is the change's own, the record says no more.
        let (r, _leading) = reconciler();
        work.waves = vec![mark(&id_of(&digest_of("two")), 2)];
        reconcile_work(&r, &work).await.expect("reconciled");
        let record = r.api.patches()[0]["metadata"]["annotations"]["configsum.dev/waves"]
            .as_str()
            .map(WaveRecord::parse)
            .expect("recorded");
        assert_eq!(record.get("secret/db").and_then(|e| e.digest), None);

        // No wave: nothing recorded.
        let (r, _leading) = reconciler();
        reconcile(&r).await.expect("reconciled");
        assert!(r.api.patches()[0]["metadata"].get("annotations").is_none());
    }

    #[test]
    fn a_json_patch_creates_the_annotations_map_only_where_there_is_none() {
        let mut snapshot = snapshot();
        let path = |op: &PatchOperation| match op {
            PatchOperation::Add(add) => add.path.to_string(),
            _ => String::new(),
        };
        let ops = record_ops("configsum.dev/waves", "{}".into(), &snapshot);
        let paths: Vec<String> = ops.iter().map(path).collect();
        assert_eq!(paths, ["/metadata/annotations", "/metadata/annotations/configsum.dev~1waves"]);
        snapshot.rollout.annotated = true;
        let ops = record_ops("configsum.dev/waves", "{}".into(), &snapshot);
        assert_eq!(
            ops.iter().map(path).collect::<Vec<_>>(),
            ["/metadata/annotations/configsum.dev~1waves"]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_digest_handed_on_by_the_event_loops_read_is_not_read_again() {
        let (r, _leading) = reconciler();
        let work = with_fresh(ConsumedKeys::All, "two");
        assert_eq!(reconcile_work(&r, &work).await.expect("reconciled"), patched());
        assert_eq!(r.api.reads(), 0, "one change, one read: the event loop's");
        // Handed on for other keys than the workload reads now: read afresh.
        let (r, _leading) = reconciler();
        let work = with_fresh(ConsumedKeys::Keys(["user".to_owned()].into()), "two");
        assert_eq!(reconcile_work(&r, &work).await.expect("reconciled"), patched());
        assert_eq!(r.api.reads(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_workload_gone_before_its_turn_is_gone_unless_it_conflicted_first() {
        let (r, _leading) = reconciler();
        let mut work = work();
        work.snapshot = None;
        assert_eq!(reconcile_work(&r, &work).await.expect("reconciled"), Reconciled::Gone);
        work.due.conflicts = 1;
        let error = reconcile_work(&r, &work).await.expect_err("conflicted, then gone");
        assert_eq!(error.metric_label(), "conflict");
        assert!(r.api.calls().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_conflict_is_reported_for_the_next_snapshot_and_the_fifth_in_a_row_fails() {
        let (r, _leading) = reconciler();
        r.api.answer(&[Answer::Conflict]);
        let conflicted = Reconciled::Conflicted { from: Some("5".into()) };
        assert_eq!(reconcile(&r).await.expect("reconciled"), conflicted);
        assert_eq!(reconcile(&r).await.expect("reconciled"), patched(), "the next one patches");
        assert_eq!(r.api.patches().len(), 2);
        let (r, _leading) = reconciler();
        r.api.answer(&[Answer::Conflict]);
        let mut work = work();
        work.due.conflicts = CONFLICT_RETRIES - 1;
        let error = reconcile_work(&r, &work).await.expect_err("gives up");
        assert_eq!(error.metric_label(), "conflict");
    }

    #[tokio::test(start_paused = true)]
    async fn a_workload_deleted_meanwhile_is_gone_and_a_failure_is_an_error() {
        let (r, _leading) = reconciler();
        r.api.answer(&[Answer::NotFound]);
        assert_eq!(reconcile(&r).await.expect("reconciled"), Reconciled::Gone);
        let (r, _leading) = reconciler();
        r.api.answer(&[Answer::Fail]);
        let error = reconcile(&r).await.expect_err("failed");
        assert_eq!(
            (error.metric_label(), error.to_string().as_str()),
            ("failed", "API server: HTTP 500")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_patch_that_hangs_times_out() {
        let (r, _leading) = reconciler();
        r.api.answer(&[Answer::Hang]);
        let started = Instant::now();
        let error = reconcile(&r).await.expect_err("timed out");
        assert_eq!(error.metric_label(), "timeout");
        assert_eq!(started.elapsed(), CALL_TIMEOUT);
    }

    #[tokio::test(start_paused = true)]
    async fn leadership_lost_before_the_patch_patches_nothing() {
        let (r, leading) = reconciler();
        leading.send_replace(Leadership { term: 1, until: None });
        assert_eq!(reconcile(&r).await.expect("reconciled"), Reconciled::NotLeading);
        let (r, leading) = reconciler();
        leading.send_replace(Leadership { term: 2, until: Some(Instant::now() + CALL_TIMEOUT) });
        assert_eq!(
            reconcile(&r).await.expect("reconciled"),
            Reconciled::NotLeading,
            "term 1's work"
        );
        assert!(r.api.patches().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_current_workload_is_left_alone() {
        let (r, _leading) = reconciler();
        r.api.put(ObjectRef::secret("db").within("ns"), &[("password", "one")]);
        assert_eq!(reconcile(&r).await.expect("reconciled"), Reconciled::Unchanged);
        assert!(r.api.patches().is_empty());
    }

    #[test]
    fn a_pods_merge_patch_is_of_its_own_annotations() {
        let ops: Vec<PatchOperation> = serde_json::from_value(json!([
            {"op": "add", "path": "/metadata/annotations/secret.configsum.dev~1db", "value": "x"}
        ]))
        .expect("ops");
        assert_eq!(
            merge_patch(WorkloadKind::Pod.annotations_path(), &ops, Some("7".into())),
            json!({"metadata": {"resourceVersion": "7", "annotations": {"secret.configsum.dev/db": "x"}}})
        );
    }

    #[test]
    fn unreadable_objects_are_named_without_the_webhooks_flag() {
        let message = unreadable(&[ObjectRef::secret("db"), ObjectRef::config_map("app")]);
        assert_eq!(message, "could not read secret/db, configmap/app");
    }

    #[test]
    fn only_annotation_keys_and_the_maps_on_their_way_go_in_a_merge_patch() {
        let path = WorkloadKind::Deployment.annotations_path();
        let ops = |ops: Value| -> Vec<PatchOperation> { serde_json::from_value(ops).expect("ops") };
        let annotations = ops(json!([
            {"op": "add", "path": "/spec/template/metadata", "value": {}},
            {"op": "add", "path": "/spec/template/metadata/annotations/a.b~1c", "value": "x"},
            {"op": "remove", "path": "/spec/template/metadata/annotations/d"}]));
        assert!(annotations_only(path, &annotations));
        let env = ops(json!([
            {"op": "add", "path": "/spec/template/spec/containers/0/env/1/value", "value": "x"}]));
        assert!(!annotations_only(path, &env), "an env value is in a list element");
        let image = ops(json!([
            {"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "x"}]));
        assert!(!annotations_only(path, &image));
    }

    #[test]
    fn merge_patch_sets_and_removes_only_annotation_keys() {
        let ops: Vec<PatchOperation> = serde_json::from_value(json!([
            {"op": "add", "path": "/spec/template/metadata", "value": {}},
            {"op": "add", "path": "/spec/template/metadata/annotations", "value": {}},
            {"op": "remove", "path": "/spec/template/metadata/annotations/configmap.configsum.dev~1old"},
            {"op": "add", "path": "/spec/template/metadata/annotations/secret.configsum.dev~1db", "value": "hmac-sha256:ab"}
        ]))
        .expect("ops");
        assert_eq!(
            merge_patch(WorkloadKind::Deployment.annotations_path(), &ops, Some("42".into())),
            json!({"metadata": {"resourceVersion": "42"}, "spec": {"template": {"metadata": {"annotations": {
                "configmap.configsum.dev/old": null, "secret.configsum.dev/db": "hmac-sha256:ab"}}}}})
        );
    }
}
