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

use std::collections::{HashMap, HashSet, VecDeque};

use super::index::ObjectSlot;
use super::workload::WorkloadKey;
use crate::core::digest::ABSENT;
use crate::core::refs::ConsumedKeys;
use crate::core::{Digester, ObjectContent, ObjectId};

/// A workload tracking the object being read: the keys it consumes and its
/// digest annotation for the object, if any.
#[derive(Clone, Debug)]
pub struct Tracker {
    pub workload: WorkloadKey,
    pub keys: ConsumedKeys,
    pub existing: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Its annotation matches the content.
    Current,
    /// Its annotation does not match: it must be brought up to date.
    Stale,
    /// It has no annotation for the object.
    NoDigest,
}

/// The outcome of one read, with the data already digested and dropped.
#[derive(Clone, Debug)]
pub struct Reading {
    pub resource_version: Option<String>,
    /// A digest of the whole content; `None` when the object does not exist.
    pub fingerprint: Option<String>,
    pub verdicts: Vec<(WorkloadKey, Verdict)>,
}

/// Digests what a read found for every tracker. Pure.
pub fn judge(
    slot: &ObjectSlot,
    content: Option<&ObjectContent>,
    resource_version: Option<String>,
    digester: &Digester,
    trackers: &[Tracker],
) -> Reading {
    let (namespace, object) = slot;
    let id = ObjectId { namespace, object };
    let fingerprint = content.map(|c| Digester::default().digest(id, c, &ConsumedKeys::All, None));
    let verdicts = trackers
        .iter()
        .map(|t| {
            let verdict = match &t.existing {
                None => Verdict::NoDigest,
                Some(existing) => {
                    let value = match content {
                        Some(c) => digester.digest(id, c, &t.keys, Some(existing)),
                        None => ABSENT.to_owned(),
                    };
                    if value == *existing { Verdict::Current } else { Verdict::Stale }
                }
            };
            (t.workload.clone(), verdict)
        })
        .collect();
    Reading { resource_version, fingerprint, verdicts }
}

/// What a finished read asks of the workloads tracking the object: stale
/// ones roll; ones without a digest roll only on a change seen while watching.
pub fn to_roll(reading: &Reading, content_changed: bool) -> Vec<WorkloadKey> {
    reading
        .verdicts
        .iter()
        .filter(|(_, v)| *v == Verdict::Stale || (*v == Verdict::NoDigest && content_changed))
        .map(|(w, _)| w.clone())
        .collect()
}

#[derive(Clone, Debug, Default)]
struct Fingerprint {
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
}

/// Fingerprints of the tracked objects and the reads waiting or running.
#[derive(Debug, Default)]
pub struct TrackedObjects {
    known: HashMap<ObjectSlot, Fingerprint>,
    /// Objects whose `queued` flag is set, in the order asked.
    waiting: VecDeque<ObjectSlot>,
    queued: usize,
    reading: HashSet<ObjectSlot>,
}

impl TrackedObjects {
    /// Starts tracking an object (no read yet).
    pub fn track(&mut self, slot: ObjectSlot) {
        self.known.entry(slot).or_default();
    }

    /// Stops tracking it; a read in flight is ignored when it returns.
    pub fn forget(&mut self, slot: &ObjectSlot) {
        if self.known.remove(slot).is_some_and(|f| f.queued) {
            self.queued -= 1;
        }
    }

    pub fn is_tracked(&self, slot: &ObjectSlot) -> bool {
        self.known.contains_key(slot)
    }

    /// Whether `resource_version` is the one last read (nothing to do).
    pub fn is_current(&self, slot: &ObjectSlot, resource_version: Option<&str>) -> bool {
        self.known.get(slot).is_some_and(|f| {
            f.digest.is_some()
                && resource_version.is_some()
                && f.resource_version.as_deref() == resource_version
        })
    }

    /// Tracked objects that exist as far as the controller knows (never
    /// read, or read and present).
    pub fn existing(&self) -> impl Iterator<Item = &ObjectSlot> {
        self.known.iter().filter(|(_, f)| !matches!(f.digest, Some(None))).map(|(s, _)| s)
    }

    pub fn all(&self) -> impl Iterator<Item = &ObjectSlot> {
        self.known.keys()
    }

    /// Asks for a read of a tracked object.
    pub fn request(&mut self, slot: ObjectSlot) {
        let reading = self.reading.contains(&slot);
        let Some(known) = self.known.get_mut(&slot) else { return };
        if reading {
            known.dirty = true;
        } else if !known.queued {
            known.queued = true;
            self.queued += 1;
            self.waiting.push_back(slot);
        }
    }

    /// The next read to start, if fewer than `limit` are running.
    pub fn start_next(&mut self, limit: usize) -> Option<ObjectSlot> {
        while self.reading.len() < limit {
            let slot = self.waiting.pop_front()?;
            // Forgotten (and perhaps tracked again) since it was queued: skip.
            let Some(known) = self.known.get_mut(&slot).filter(|k| k.queued) else { continue };
            known.queued = false;
            self.queued -= 1;
            self.reading.insert(slot.clone());
            return Some(slot);
        }
        None
    }

    /// Records a finished read; returns whether the content changed since the
    /// last read (never on the first one), or `None` if no longer tracked.
    pub fn finished(&mut self, slot: &ObjectSlot, reading: &Reading) -> Option<bool> {
        self.reading.remove(slot);
        let known = self.known.get_mut(slot)?;
        let changed = known.digest.as_ref().is_some_and(|old| *old != reading.fingerprint);
        known.digest = Some(reading.fingerprint.clone());
        known.resource_version = reading.resource_version.clone();
        known.failures = 0;
        if std::mem::take(&mut known.dirty) {
            self.request(slot.clone());
        }
        Some(changed)
    }

    /// Records a failed read; returns how many reads failed in a row.
    pub fn failed(&mut self, slot: &ObjectSlot) -> u32 {
        self.reading.remove(slot);
        let Some(known) = self.known.get_mut(slot) else { return 1 };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::workload::WorkloadKind;
    use crate::core::{DigestKeys, ObjectRef};

    fn slot() -> ObjectSlot {
        ("ns".into(), ObjectRef::secret("db"))
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

    fn digester() -> Digester {
        Digester::new(DigestKeys::parse(b"0123456789abcdef0123456789abcdef").expect("key"))
    }

    #[test]
    fn verdicts_compare_each_trackers_digest() {
        let d = digester();
        let id = ObjectId { namespace: "ns", object: &slot().1 };
        let old = content("one");
        let all = d.digest(id, &old, &ConsumedKeys::All, None);
        let user_only = ConsumedKeys::Keys(["user".to_owned()].into());
        let user = d.digest(id, &old, &user_only, None);
        let trackers = vec![
            Tracker { workload: workload("all"), keys: ConsumedKeys::All, existing: Some(all) },
            Tracker { workload: workload("user"), keys: user_only, existing: Some(user) },
            Tracker { workload: workload("none"), keys: ConsumedKeys::All, existing: None },
            Tracker {
                workload: workload("absent"),
                keys: ConsumedKeys::All,
                existing: Some(ABSENT.into()),
            },
        ];
        let new = content("two");
        let reading = judge(&slot(), Some(&new), Some("5".into()), &d, &trackers);
        let verdicts: Vec<Verdict> = reading.verdicts.iter().map(|(_, v)| *v).collect();
        // Only the password changed: the workload reading just `user` is current.
        assert_eq!(verdicts, [Verdict::Stale, Verdict::Current, Verdict::NoDigest, Verdict::Stale]);
        assert_eq!(to_roll(&reading, false), vec![workload("all"), workload("absent")]);
        assert_eq!(to_roll(&reading, true).len(), 3, "a seen change rolls digest-less ones too");

        let gone = judge(&slot(), None, None, &d, &trackers);
        assert_eq!(gone.fingerprint, None);
        assert_eq!(gone.verdicts[3].1, Verdict::Current, "absent stays absent");
        assert_eq!(gone.verdicts[0].1, Verdict::Stale);
    }

    #[test]
    fn reads_are_deduplicated_and_rerun_after_a_change_during_a_read() {
        let mut objects = TrackedObjects::default();
        objects.request(slot());
        assert_eq!(objects.start_next(4), None, "untracked objects are never read");
        objects.track(slot());
        objects.request(slot());
        objects.request(slot());
        assert_eq!(objects.start_next(4), Some(slot()));
        assert_eq!(objects.start_next(4), None, "one read per object");
        objects.request(slot());
        let reading = Reading {
            resource_version: Some("1".into()),
            fingerprint: Some("a".into()),
            verdicts: vec![],
        };
        assert_eq!(
            objects.finished(&slot(), &reading),
            Some(false),
            "the first read is a baseline"
        );
        assert!(objects.is_current(&slot(), Some("1")));
        assert!(!objects.is_current(&slot(), Some("2")));
        assert_eq!(objects.start_next(4), Some(slot()), "changed during the read: read again");
        let changed = Reading {
            resource_version: Some("2".into()),
            fingerprint: Some("b".into()),
            verdicts: vec![],
        };
        assert_eq!(objects.finished(&slot(), &changed), Some(true));
        let metadata_only = Reading { resource_version: Some("3".into()), ..changed };
        objects.request(slot());
        assert_eq!(objects.start_next(4), Some(slot()));
        assert_eq!(objects.finished(&slot(), &metadata_only), Some(false));
        objects.request(slot());
        assert_eq!(objects.start_next(4), Some(slot()));
        assert_eq!(objects.failed(&slot()), 1);
        assert_eq!(objects.failed(&slot()), 2);
        objects.forget(&slot());
        assert_eq!(objects.finished(&slot(), &metadata_only), None);
        assert!(!objects.is_tracked(&slot()));
    }
}
