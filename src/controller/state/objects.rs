//! The tracked ConfigMaps and Secrets: what the controller knows of their
//! content, and the reads that keep it current.
//!
//! The watches see metadata only. When a tracked object's resourceVersion
//! moves (or it is created, deleted, or newly tracked), it is read once and
//! digested at once for every workload tracking it; its data is dropped
//! right after. A workload whose digest annotation no longer matches is
//! stale; a workload without one rolls only if the object's content changed
//! while the controller watched (first observation). One read per object is
//! in flight at a time; a change during a read reads it again afterwards.
//! The digests a read computes for the workloads it makes due are kept for their
//! reconciliations ([`TrackedObjects::take_fresh`]), so one change is one read.

use std::collections::{HashMap, HashSet, VecDeque};

use tokio::time::Instant;

use super::relist::WatchIndex;
use crate::controller::model::message::ObjectVersion;
use crate::core::ObjectKind;

use crate::controller::model::reading::{Fresh, Judged, Reading, Verdict};
use crate::controller::model::workload::WorkloadKey;
use crate::core::model::object_scope::Standing;
use crate::core::refs::ConsumedKeys;
use crate::core::{Digester, ObjectContent, ObjectId, ObjectKey, ObjectRef, Observation, Reach};

/// A workload tracking the object being read: the keys it consumes and its
/// digest annotation for the object, if any.
#[derive(Clone, Debug)]
pub struct Tracker {
    pub workload: WorkloadKey,
    pub keys: ConsumedKeys,
    pub existing: Option<String>,
    pub reach: Reach,
}

/// A read to start: the object, and the workloads that track it with the
/// keys each consumes and its digest (the read is judged for each at once).
#[derive(Debug)]
pub struct ReadRequest {
    pub object: ObjectKey,
    pub trackers: Vec<Tracker>,
}

/// Digests what a read found for every tracker. Pure.
pub fn judge(
    object: &ObjectKey,
    content: Option<&ObjectContent>,
    resource_version: Option<String>,
    digester: &Digester,
    trackers: &[Tracker],
) -> Reading {
    let id = ObjectId { namespace: &object.namespace, object: &object.object };
    let standing = content.map(ObjectContent::standing);
    // Keyed as the workloads' digests are: a fan-out's change id is cut from it and written
    // on workloads, where a plain digest of a Secret would let a guess at its data be checked.
    // An object that leaves the object selector is as good as deleted; one its owner ignores
    // keeps its digest, so that ignoring it and back is no change of content.
    let content_digest = content
        .filter(|c| c.standing() != Standing::Unselected)
        .map(|c| digester.digest(id, c, &ConsumedKeys::All, None));
    let judged = trackers
        .iter()
        .map(|t| {
            let across = *object.namespace != *t.workload.namespace;
            let observation = match content {
                // Without its owner's consent, as good as absent (`Mutation::observe`).
                Some(c) if across && !c.readable_from(&t.workload.namespace) => Observation::Absent,
                Some(c) if c.standing() != Standing::Tracked => {
                    Observation::Untracked(c.standing())
                }
                Some(c) => {
                    Observation::Digest(digester.digest(id, c, &t.keys, t.existing.as_deref()))
                }
                None => Observation::Absent,
            };
            let fresh = Fresh { keys: t.keys.clone(), observation, reach: t.reach };
            let verdict = match &t.existing {
                _ if standing == Some(Standing::Ignored) => Verdict::Ignored,
                None if fresh.annotation().is_none() => Verdict::Current,
                None => Verdict::NoDigest,
                Some(existing) if Some(existing.as_str()) == fresh.annotation() => Verdict::Current,
                Some(_) => Verdict::Stale,
            };
            Judged { workload: t.workload.clone(), verdict, fresh }
        })
        .collect();
    Reading { resource_version, content_digest, judged }
}

/// What a finished read asks of the workloads tracking the object: stale
/// ones roll; ones without a digest roll only on a change seen while watching;
/// a current one rolls when `outdated` says the digest it was judged against
/// may not be the one the workload records by now.
pub fn to_roll(
    reading: Reading,
    content_changed: bool,
    outdated: impl Fn(&Judged) -> bool,
) -> impl Iterator<Item = Judged> {
    reading.judged.into_iter().filter(move |j| match j.verdict {
        Verdict::Stale => true,
        Verdict::NoDigest => content_changed,
        Verdict::Current => outdated(j),
        Verdict::Ignored => false,
    })
}

/// What the controller knows of one tracked object's content.
#[derive(Clone, Debug, Default)]
struct Known {
    /// The resourceVersion of the content last read.
    resource_version: Option<String>,
    /// `Some(None)`: read, and absent. `None`: never read.
    digest: Option<Option<String>>,
    /// Waiting for a read.
    queued: bool,
    /// Changed again while being read.
    dirty: bool,
    /// Reads failed in a row.
    failures: u32,
    /// Listed by the relist of its kind under way (`WatchIndex::begin_marking`).
    listed: bool,
}

/// What is known of each tracked object, and the reads waiting, running or to retry.
#[derive(Debug, Default)]
pub struct TrackedObjects {
    known: HashMap<ObjectKey, Known>,
    /// Objects whose `queued` flag is set, in the order asked.
    waiting: VecDeque<ObjectKey>,
    queued: usize,
    reading: HashSet<ObjectKey>,
    /// Failed reads, retried at these times.
    retries: Vec<(Instant, ObjectKey)>,
    /// Digests reads computed for the workloads they made due, by workload and object: their
    /// reconciliations are handed these instead of reading the objects again. Taken when the
    /// work is handed out, so a retry reads afresh. Digests, never content.
    fresh: HashMap<WorkloadKey, HashMap<ObjectRef, Fresh>>,
}

impl TrackedObjects {
    /// The watch of `kind`'s view of this index. Until `reading` (the first reads began),
    /// changes ask for nothing: those reads will see them.
    pub fn watch_of(&mut self, kind: ObjectKind, reading: bool) -> ObjectWatch<'_> {
        ObjectWatch { kind, reading, objects: self }
    }

    /// Asks for a read of every tracked object (the first reads, or a new term's catch-up).
    pub fn request_all(&mut self) {
        let all: Vec<ObjectKey> = self.known.keys().cloned().collect();
        for object in all {
            self.request(object);
        }
    }

    /// A failed read of `key` is retried at `at`.
    pub fn retry_at(&mut self, key: ObjectKey, at: Instant) {
        self.retries.push((at, key));
    }

    /// Asks for the reads whose retry is due.
    pub fn request_due_retries(&mut self, now: Instant) {
        let (due, later): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.retries).into_iter().partition(|(at, _)| *at <= now);
        self.retries = later;
        for (_, object) in due {
            self.request(object);
        }
    }

    pub fn next_retry(&self) -> Option<Instant> {
        self.retries.iter().map(|(at, _)| *at).min()
    }

    /// Reads waiting or running, and retries (the queue-depth metric).
    pub fn depth(&self) -> usize {
        self.pending() + self.retries.len()
    }

    /// Keeps what a read found for `workload`, for its reconciliation.
    pub fn hand_on(&mut self, workload: &WorkloadKey, object: &ObjectRef, fresh: Fresh) {
        self.fresh.entry(workload.clone()).or_default().insert(object.clone(), fresh);
    }

    /// What reads found for `workload` since its last reconciliation.
    pub fn take_fresh(&mut self, workload: &WorkloadKey) -> HashMap<ObjectRef, Fresh> {
        self.fresh.remove(workload).unwrap_or_default()
    }

    /// What reads found for `workload`'s `object` and keep for its reconciliation.
    #[cfg(test)]
    pub fn fresh_of(&self, workload: &WorkloadKey, object: &ObjectRef) -> Option<&Fresh> {
        self.fresh.get(workload)?.get(object)
    }

    /// Drops what reads found for `workload` (it is gone), or for every workload (`None`:
    /// this replica stopped leading, and a new term starts from what it reads).
    pub fn drop_fresh(&mut self, workload: Option<&WorkloadKey>) {
        match workload {
            Some(workload) => {
                self.fresh.remove(workload);
            }
            None => self.fresh.clear(),
        }
    }

    /// Starts tracking an object (no read yet).
    pub fn track(&mut self, key: ObjectKey) {
        self.known.entry(key).or_default();
    }

    /// Stops tracking it; a read in flight is ignored when it returns.
    pub fn forget(&mut self, key: &ObjectKey) {
        if self.known.remove(key).is_some_and(|f| f.queued) {
            self.queued -= 1;
        }
    }

    pub fn is_tracked(&self, key: &ObjectKey) -> bool {
        self.known.contains_key(key)
    }

    /// Whether `resource_version` is the one last read (nothing to do).
    pub fn is_current(&self, key: &ObjectKey, resource_version: Option<&str>) -> bool {
        self.known.get(key).is_some_and(|f| {
            f.digest.is_some()
                && resource_version.is_some()
                && f.resource_version.as_deref() == resource_version
        })
    }

    /// Tracked objects that exist as far as the controller knows (never
    /// read, or read and present).
    pub fn existing(&self) -> impl Iterator<Item = &ObjectKey> {
        self.known.iter().filter(|(_, f)| !matches!(f.digest, Some(None))).map(|(s, _)| s)
    }

    pub fn all(&self) -> impl Iterator<Item = &ObjectKey> {
        self.known.keys()
    }

    /// Asks for a read of a tracked object.
    pub fn request(&mut self, key: ObjectKey) {
        let reading = self.reading.contains(&key);
        let Some(known) = self.known.get_mut(&key) else { return };
        if reading {
            known.dirty = true;
        } else if !known.queued {
            known.queued = true;
            self.queued += 1;
            self.waiting.push_back(key);
        }
    }

    /// The next read to start, if fewer than `limit` are running.
    pub fn start_next(&mut self, limit: usize) -> Option<ObjectKey> {
        while self.reading.len() < limit {
            let key = self.waiting.pop_front()?;
            // Forgotten (and perhaps tracked again) since it was queued: skip.
            let Some(known) = self.known.get_mut(&key).filter(|k| k.queued) else { continue };
            known.queued = false;
            self.queued -= 1;
            self.reading.insert(key.clone());
            return Some(key);
        }
        None
    }

    /// Records a finished read; returns whether the content changed since the
    /// last read (never on the first one), or `None` if no longer tracked.
    pub fn finished(&mut self, key: &ObjectKey, reading: &Reading) -> Option<bool> {
        self.reading.remove(key);
        let known = self.known.get_mut(key)?;
        let changed = known.digest.as_ref().is_some_and(|old| *old != reading.content_digest);
        known.digest = Some(reading.content_digest.clone());
        known.resource_version = reading.resource_version.clone();
        known.failures = 0;
        if std::mem::take(&mut known.dirty) {
            self.request(key.clone());
        }
        Some(changed)
    }

    /// Records a failed read; returns how many reads failed in a row.
    pub fn failed(&mut self, key: &ObjectKey) -> u32 {
        self.reading.remove(key);
        let Some(known) = self.known.get_mut(key) else { return 1 };
        // The retry reads the latest version anyway.
        known.dirty = false;
        known.failures += 1;
        known.failures
    }

    /// Reads waiting or running (the queue-depth metric).
    pub fn pending(&self) -> usize {
        self.queued + self.reading.len()
    }
}

/// One object kind's watch applied to the tracked objects: a moved resourceVersion, a
/// deletion, or a deletion found by a relist asks for a read (once the first reads began).
pub struct ObjectWatch<'a> {
    kind: ObjectKind,
    reading: bool,
    objects: &'a mut TrackedObjects,
}

impl WatchIndex<ObjectVersion> for ObjectWatch<'_> {
    type Key = ObjectKey;

    /// Only tracked objects are held: every other ConfigMap and Secret is ignored.
    fn key(&self, meta: &ObjectVersion) -> Option<ObjectKey> {
        let object = ObjectRef::new(self.kind, meta.name.clone()?);
        let key = object.within(meta.namespace.clone()?);
        self.objects.is_tracked(&key).then_some(key)
    }

    fn apply(&mut self, meta: ObjectVersion) {
        let Some(key) = self.key(&meta) else { return };
        // Before the first reads, those reads will see this version.
        if self.reading && !self.objects.is_current(&key, meta.resource_version.as_deref()) {
            self.objects.request(key);
        }
    }

    /// Read, and found absent.
    fn delete(&mut self, key: ObjectKey) {
        if self.reading {
            self.objects.request(key);
        }
    }

    /// The tracked objects of this kind that exist as far as the controller knows and the
    /// relist did not mark listed (`listed` is empty: see `begin_marking`).
    fn unlisted(&self, _listed: &HashSet<ObjectKey>) -> Vec<ObjectKey> {
        let known = &self.objects.known;
        let gone = |(key, known): &(&ObjectKey, &Known)| {
            key.object.kind == self.kind && !known.listed && !matches!(known.digest, Some(None))
        };
        known.iter().filter(gone).map(|(key, _)| key.clone()).collect()
    }

    fn namespace_of(key: &ObjectKey) -> Option<&str> {
        Some(&key.namespace)
    }

    /// Tens of thousands of objects may be tracked: a relist marks them rather than
    /// collecting a copy of every key it lists.
    fn begin_marking(&mut self, within: Option<&str>) -> bool {
        for (key, known) in &mut self.objects.known {
            if key.object.kind == self.kind && within.is_none_or(|ns| key.namespace == ns) {
                known.listed = false;
            }
        }
        true
    }

    fn mark_listed(&mut self, key: &ObjectKey) {
        if let Some(known) = self.objects.known.get_mut(key) {
            known.listed = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::DigestKeys;
    use crate::core::model::annotations::ABSENT;
    use crate::core::model::kinds::WorkloadKind;
    use std::time::Duration;

    fn db() -> ObjectKey {
        ObjectRef::secret("db").within("ns")
    }

    fn workload(name: &str) -> WorkloadKey {
        WorkloadKey { kind: WorkloadKind::Deployment, namespace: "ns".into(), name: name.into() }
    }

    fn content(password: &str) -> ObjectContent {
        ObjectContent::from_entries(
            [("password", password.as_bytes()), ("user", b"a")]
                .map(|(k, v)| (k.to_owned(), v.to_vec()))
                .into(),
        )
    }

    /// Workload `name` of `ns` tracking [`db`] as its own, with `keys` and `existing`.
    fn tracker(name: &str, keys: ConsumedKeys, existing: Option<String>) -> Tracker {
        Tracker { workload: workload(name), keys, existing, reach: Reach::Own }
    }

    fn digester() -> Digester {
        Digester::new(DigestKeys::parse(b"0123456789abcdef0123456789abcdef").expect("key"))
    }

    #[test]
    fn another_namespaces_object_is_judged_by_its_owners_consent_to_each_tracker() {
        let d = digester();
        let shared = ObjectRef::secret("db").within("shared");
        let from = |namespace: &str, existing: Option<&str>| Tracker {
            workload: WorkloadKey {
                kind: WorkloadKind::Deployment,
                namespace: namespace.into(),
                name: "web".into(),
            },
            keys: ConsumedKeys::All,
            existing: existing.map(str::to_owned),
            reach: Reach::Across { readable: true },
        };
        let earlier = "hmac-sha256:0000";
        let trackers = [from("app", None), from("other", Some(earlier)), from("gone", None)];
        let consenting = content("two").with_readable_from(Some("app, other-team"));
        let reading = judge(&shared, Some(&consenting), Some("3".into()), &d, &trackers);
        let id = ObjectId { namespace: "shared", object: &shared.object };
        let digest = d.digest(id, &consenting, &ConsumedKeys::All, None);
        let judged: Vec<(Verdict, Option<&str>)> =
            reading.judged.iter().map(|j| (j.verdict, j.fresh.annotation())).collect();
        assert_eq!(
            judged,
            [
                (Verdict::NoDigest, Some(digest.as_str())),
                // Consent withdrawn (or never given): its digest goes, as with a deletion.
                (Verdict::Stale, None),
                (Verdict::Current, None),
            ],
            "a workload of a namespace the owner does not list sees no digest"
        );
    }

    #[test]
    fn verdicts_compare_each_trackers_digest() {
        let d = digester();
        let id = ObjectId { namespace: "ns", object: &db().object };
        let old = content("one");
        let all = d.digest(id, &old, &ConsumedKeys::All, None);
        let user_only = ConsumedKeys::Keys(["user".to_owned()].into());
        let user = d.digest(id, &old, &user_only, None);
        let trackers = vec![
            tracker("all", ConsumedKeys::All, Some(all)),
            tracker("user", user_only, Some(user)),
            tracker("none", ConsumedKeys::All, None),
            tracker("absent", ConsumedKeys::All, Some(ABSENT.into())),
        ];
        let new = content("two");
        let reading = judge(&db(), Some(&new), Some("5".into()), &d, &trackers);
        let verdicts: Vec<Verdict> = reading.judged.iter().map(|j| j.verdict).collect();
        // Only the password changed: the workload reading just `user` is current.
        assert_eq!(verdicts, [Verdict::Stale, Verdict::Current, Verdict::NoDigest, Verdict::Stale]);
        let rolled = |changed, outdated: &str| -> Vec<WorkloadKey> {
            let outdated = |j: &Judged| j.workload == workload(outdated);
            to_roll(reading.clone(), changed, outdated).map(|j| j.workload).collect()
        };
        assert_eq!(rolled(false, ""), vec![workload("all"), workload("absent")]);
        assert_eq!(rolled(true, "").len(), 3, "a seen change rolls digest-less ones too");
        assert_eq!(
            rolled(false, "user"),
            vec![workload("all"), workload("user"), workload("absent")],
            "a current one judged against an outdated digest rolls too"
        );
        // Each rolled workload carries the digest of the keys it reads, for its reconciliation.
        let fresh = &reading.judged[1].fresh;
        let expected = d.digest(id, &new, &ConsumedKeys::Keys(["user".to_owned()].into()), None);
        assert_eq!(fresh.observation, Observation::Digest(expected));

        let gone = judge(&db(), None, None, &d, &trackers);
        assert_eq!(gone.content_digest, None);
        assert_eq!(gone.judged[3].verdict, Verdict::Current, "absent stays absent");
        assert_eq!(gone.judged[0].verdict, Verdict::Stale);
        assert_eq!(gone.judged[0].fresh.observation, Observation::Absent);
    }

    #[test]
    fn an_untracked_object_rolls_only_where_it_leaves_the_selector_and_had_a_digest() {
        let d = Digester::default();
        let id = ObjectId { namespace: "ns", object: &db().object };
        let old = content("one");
        let digest = d.digest(id, &old, &ConsumedKeys::All, None);
        let trackers = vec![
            tracker("had", ConsumedKeys::All, Some(digest)),
            tracker("none", ConsumedKeys::All, None),
        ];
        let judged = |standing: Standing| {
            let content = content("two").with_standing(standing);
            let reading = judge(&db(), Some(&content), Some("6".into()), &d, &trackers);
            let verdicts: Vec<Verdict> = reading.judged.iter().map(|j| j.verdict).collect();
            (reading, verdicts)
        };
        // Out of the selector: as good as deleted, but the digest goes rather than "absent".
        let (unselected, verdicts) = judged(Standing::Unselected);
        assert_eq!(verdicts, [Verdict::Stale, Verdict::Current]);
        assert_eq!(unselected.content_digest, None);
        assert_eq!(unselected.judged[0].fresh.annotation(), None);
        let rolled: Vec<_> = to_roll(unselected, true, |_| false).map(|j| j.workload).collect();
        assert_eq!(rolled, [workload("had")], "nothing to remove from the other");
        // Its owner ignores it: nothing rolls on its account, whatever changed.
        let (ignored, verdicts) = judged(Standing::Ignored);
        assert_eq!(verdicts, [Verdict::Ignored, Verdict::Ignored]);
        let tracked = judge(&db(), Some(&content("two")), None, &d, &trackers);
        assert_eq!(ignored.content_digest, tracked.content_digest, "ignoring is no content change");
        assert_eq!(to_roll(ignored, true, |_| true).count(), 0);
    }

    #[test]
    fn reads_are_deduplicated_and_rerun_after_a_change_during_a_read() {
        let mut objects = TrackedObjects::default();
        objects.request(db());
        assert_eq!(objects.start_next(4), None, "untracked objects are never read");
        objects.track(db());
        objects.request(db());
        objects.request(db());
        assert_eq!(objects.start_next(4), Some(db()));
        assert_eq!(objects.start_next(4), None, "one read per object");
        objects.request(db());
        let reading = Reading {
            resource_version: Some("1".into()),
            content_digest: Some("a".into()),
            judged: vec![],
        };
        assert_eq!(objects.finished(&db(), &reading), Some(false), "the first read is a baseline");
        assert!(objects.is_current(&db(), Some("1")));
        assert!(!objects.is_current(&db(), Some("2")));
        assert_eq!(objects.start_next(4), Some(db()), "changed during the read: read again");
        let changed = Reading {
            resource_version: Some("2".into()),
            content_digest: Some("b".into()),
            judged: vec![],
        };
        assert_eq!(objects.finished(&db(), &changed), Some(true));
        let metadata_only = Reading { resource_version: Some("3".into()), ..changed };
        objects.request(db());
        assert_eq!(objects.start_next(4), Some(db()));
        assert_eq!(objects.finished(&db(), &metadata_only), Some(false));
        objects.request(db());
        assert_eq!(objects.start_next(4), Some(db()));
        assert_eq!(objects.failed(&db()), 1);
        assert_eq!(objects.failed(&db()), 2);
        objects.forget(&db());
        assert_eq!(objects.finished(&db(), &metadata_only), None);
        assert!(!objects.is_tracked(&db()));
    }

    #[test]
    fn the_watch_asks_for_reads_once_reading_and_retries_and_fresh_digests_are_kept_apart() {
        use kube::runtime::watcher::Event;

        use crate::controller::state::relist::Watch;

        let t0 = Instant::now();
        let meta = |rv: &str| ObjectVersion {
            namespace: Some("ns".into()),
            name: Some("db".into()),
            resource_version: Some(rv.into()),
            annotations: Vec::new(),
        };
        let mut objects = TrackedObjects::default();
        objects.track(db());
        let mut watch = Watch::default();
        watch.handle(&mut objects.watch_of(ObjectKind::Secret, false), Event::Apply(meta("1")));
        assert_eq!(objects.pending(), 0, "before the first reads, those reads see it");
        watch.handle(&mut objects.watch_of(ObjectKind::ConfigMap, true), Event::Apply(meta("1")));
        assert_eq!(objects.pending(), 0, "a ConfigMap of that name is not tracked");
        watch.handle(&mut objects.watch_of(ObjectKind::Secret, true), Event::Apply(meta("2")));
        assert_eq!(objects.start_next(4), Some(db()));
        assert_eq!(objects.failed(&db()), 1);
        objects.retry_at(db(), t0 + Duration::from_secs(1));
        assert_eq!((objects.depth(), objects.next_retry()), (1, Some(t0 + Duration::from_secs(1))));
        objects.request_due_retries(t0);
        assert_eq!(objects.start_next(4), None, "not before its time");
        objects.request_due_retries(t0 + Duration::from_secs(1));
        assert_eq!(objects.start_next(4), Some(db()));

        let fresh =
            Fresh { keys: ConsumedKeys::All, observation: Observation::Absent, reach: Reach::Own };
        objects.hand_on(&workload("a"), &db().object, fresh.clone());
        objects.hand_on(&workload("b"), &db().object, fresh.clone());
        assert_eq!(objects.take_fresh(&workload("a")).len(), 1);
        assert!(objects.take_fresh(&workload("a")).is_empty(), "taken once");
        objects.drop_fresh(None);
        assert!(objects.take_fresh(&workload("b")).is_empty(), "a follower keeps none");
    }
}
