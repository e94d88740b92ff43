//! Which workloads run which image reference with which credentials, the digest a registry
//! last gave for each, and when the next round of polls is due. The poller's results come
//! in as messages; a reconciliation is handed its images' latest digests in its work.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use tokio::time::Instant;

use crate::controller::model::polled_image::PolledImage;
use crate::controller::model::workload::WorkloadKey;
use crate::core::Mutation;
use crate::core::inputs::image::ImageObservation;
use crate::registry::Resolution;

/// A tracking workload's container (or its variable, for `image-env`), and the key its
/// digest is recorded under.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Tracking {
    pub workload: WorkloadKey,
    pub container: String,
    /// The variable set to the digest, for `<domain>/image-env`; `None` for the container's
    /// own image.
    pub variable: Option<String>,
    /// The image reference as the workload writes it, for its Event (two
    /// workloads may spell one slot's reference differently: `nginx`, `nginx:latest`).
    pub image: String,
    pub key: String,
}

/// The slots a workload's plan tracks, with the container of each.
pub fn tracked_images(key: &WorkloadKey, mutation: &Mutation) -> Vec<(PolledImage, Tracking)> {
    let (secrets, service_account) = mutation.images.credentials();
    mutation
        .images
        .targets()
        .iter()
        .map(|target| {
            let slot = PolledImage {
                namespace: mutation.namespace.clone(),
                reference: target.reference.clone(),
                pull_secrets: secrets.to_vec(),
                service_account: service_account.to_owned(),
            };
            let tracking = Tracking {
                workload: key.clone(),
                container: target.container.clone(),
                variable: target.variable().map(str::to_owned),
                image: target.written.clone(),
                key: target.key.clone(),
            };
            (slot, tracking)
        })
        .collect()
}

/// Which workloads track which slot, and what each slot's tag last resolved to.
#[derive(Debug)]
pub struct ImageIndex {
    by_workload: HashMap<WorkloadKey, Vec<PolledImage>>,
    by_slot: HashMap<PolledImage, BTreeSet<Tracking>>,
    latest: HashMap<PolledImage, String>,
    /// `--image-poll-interval`.
    poll_interval: Duration,
    next_poll: Option<Instant>,
}

impl ImageIndex {
    pub fn new(poll_interval: Duration) -> Self {
        ImageIndex {
            by_workload: HashMap::new(),
            by_slot: HashMap::new(),
            latest: HashMap::new(),
            poll_interval,
            next_poll: None,
        }
    }

    /// Every tracked image is polled at the next tick (the first poll, or a new term's).
    pub fn poll_now(&mut self, now: Instant) {
        self.next_poll = Some(now);
    }

    pub fn next_poll(&self) -> Option<Instant> {
        self.next_poll
    }

    /// A round of every tracked image when one is due, while `leading`: followers patch
    /// nothing, so they ask registries nothing.
    pub fn poll_due(&mut self, now: Instant, leading: bool) -> Option<Vec<PolledImage>> {
        let at = self.next_poll?;
        if at > now {
            return None;
        }
        self.next_poll = Some(now + self.poll_interval);
        (leading && !self.is_empty()).then(|| self.polled())
    }

    /// A tag resolved to `digest`.
    pub fn resolved(&mut self, image: &PolledImage, digest: &str) {
        self.latest.insert(image.clone(), digest.to_owned());
    }

    /// What a reconciliation of `key` observes for `mutation`'s images: the latest digest of
    /// each, where its annotation exists; otherwise what is there is kept (the controller
    /// never records a first observation).
    pub fn observations(&self, key: &WorkloadKey, mutation: &Mutation) -> Vec<ImageObservation> {
        tracked_images(key, mutation)
            .into_iter()
            .map(|(slot, tracking)| match mutation.images.recorded(&tracking.key) {
                None => ImageObservation::Keep,
                Some(_) => self.latest.get(&slot).map_or(ImageObservation::Keep, |digest| {
                    ImageObservation::Digest(digest.clone())
                }),
            })
            .collect()
    }

    /// Replaces what `key` tracks.
    pub fn upsert(&mut self, key: &WorkloadKey, tracked: Vec<(PolledImage, Tracking)>) {
        self.remove(key);
        if tracked.is_empty() {
            return;
        }
        let mut slots = Vec::with_capacity(tracked.len());
        for (slot, tracking) in tracked {
            self.by_slot.entry(slot.clone()).or_default().insert(tracking);
            slots.push(slot);
        }
        self.by_workload.insert(key.clone(), slots);
    }

    pub fn remove(&mut self, key: &WorkloadKey) {
        for slot in self.by_workload.remove(key).into_iter().flatten() {
            if let Some(trackers) = self.by_slot.get_mut(&slot) {
                trackers.retain(|t| t.workload != *key);
                if trackers.is_empty() {
                    self.by_slot.remove(&slot);
                }
            }
        }
    }

    /// Every distinct slot, in order.
    pub fn polled(&self) -> Vec<PolledImage> {
        let mut slots: Vec<PolledImage> = self.by_slot.keys().cloned().collect();
        slots.sort();
        slots
    }

    pub fn tracking(&self, slot: &PolledImage) -> impl Iterator<Item = &Tracking> {
        self.by_slot.get(slot).into_iter().flatten()
    }

    pub fn len(&self) -> usize {
        self.by_slot.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_slot.is_empty()
    }
}

/// The digest a resolution gives, if any: only a digest moves a workload.
pub fn digest_of(resolution: &Resolution) -> Option<&str> {
    match resolution {
        Resolution::Digest(digest) => Some(digest.as_str()),
        Resolution::Unknown | Resolution::Failed(_) | Resolution::Pinned(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::kinds::WorkloadKind;

    fn key(name: &str) -> WorkloadKey {
        WorkloadKey { kind: WorkloadKind::Deployment, namespace: "ns".into(), name: name.into() }
    }

    fn slot(reference: &str) -> PolledImage {
        PolledImage {
            namespace: "ns".into(),
            reference: reference.into(),
            pull_secrets: vec![],
            service_account: "default".into(),
        }
    }

    fn tracking(workload: &str, container: &str) -> Tracking {
        Tracking {
            workload: key(workload),
            container: container.into(),
            variable: None,
            image: format!("{container}:1"),
            key: format!("image.configsum.dev/{container}"),
        }
    }

    #[test]
    fn the_index_follows_upserts_and_removals() {
        let mut index = ImageIndex::new(Duration::from_secs(60));
        index.upsert(&key("a"), vec![(slot("app:1"), tracking("a", "app"))]);
        index.upsert(
            &key("b"),
            vec![(slot("app:1"), tracking("b", "app")), (slot("db:2"), tracking("b", "db"))],
        );
        assert_eq!(index.polled(), vec![slot("app:1"), slot("db:2")]);
        assert_eq!(index.tracking(&slot("app:1")).count(), 2);
        index.upsert(&key("b"), vec![(slot("db:2"), tracking("b", "db"))]);
        assert_eq!(index.tracking(&slot("app:1")).count(), 1, "b no longer runs app:1");
        index.remove(&key("a"));
        assert_eq!(index.polled(), vec![slot("db:2")]);
        index.remove(&key("b"));
        assert!(index.is_empty());
    }

    #[test]
    fn polls_come_round_every_interval_and_only_a_leader_asks_registries() {
        let t0 = Instant::now();
        let minute = Duration::from_secs(60);
        let mut index = ImageIndex::new(minute);
        assert_eq!(index.poll_due(t0, true), None, "nothing planned before the first listing");
        index.upsert(&key("a"), vec![(slot("app:1"), tracking("a", "app"))]);
        index.poll_now(t0);
        assert_eq!(index.poll_due(t0, true), Some(vec![slot("app:1")]));
        assert_eq!(index.next_poll(), Some(t0 + minute));
        assert_eq!(index.poll_due(t0 + minute / 2, true), None);
        assert_eq!(index.poll_due(t0 + minute, false), None, "a follower polls nothing");
        assert_eq!(index.next_poll(), Some(t0 + 2 * minute), "but keeps the rhythm");
    }
}
