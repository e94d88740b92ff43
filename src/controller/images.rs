//! Tracked images in the controller: which workloads run which reference
//! with which credentials, the latest digest a registry gave for each, and
//! the poller that asks again every `--image-poll-interval`, through a token
//! bucket per registry. A moved tag makes each tracking workload due, once,
//! through the same window, rate limit and Events as a changed object; a
//! workload without the image's annotation gets none from the controller.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tracing::debug;

use super::queue::TokenBucket;
use super::watches::Message;
use super::workload::WorkloadKey;
use crate::core::Mutation;
use crate::core::inputs::image::ImageObservation;
use crate::lookup::{KubeSource, ObjectSource};
use crate::registry::{ImageRef, RegistryClient, Resolution};

/// One reference to resolve, with the credentials it is resolved with: the
/// workload's namespace, its pod's pull secrets and ServiceAccount.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ImageSlot {
    pub namespace: String,
    pub reference: String,
    pub secrets: Vec<String>,
    pub service_account: String,
}

/// A tracking workload's container, and its image annotation's key.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Tracking {
    pub workload: WorkloadKey,
    pub container: String,
    /// The image reference as the workload writes it, for its Event (two
    /// workloads may spell one slot's reference differently: `nginx`, `nginx:latest`).
    pub image: String,
    pub key: String,
}

/// The slots a workload's plan tracks, with the container of each.
pub fn slots_of(key: &WorkloadKey, mutation: &Mutation) -> Vec<(ImageSlot, Tracking)> {
    let (secrets, service_account) = mutation.images.credentials();
    mutation
        .images
        .targets()
        .iter()
        .map(|target| {
            let slot = ImageSlot {
                namespace: mutation.namespace.clone(),
                reference: target.reference.clone(),
                secrets: secrets.to_vec(),
                service_account: service_account.to_owned(),
            };
            let tracking = Tracking {
                workload: key.clone(),
                container: target.container.clone(),
                image: target.written.clone(),
                key: target.key.clone(),
            };
            (slot, tracking)
        })
        .collect()
}

/// Which workloads track which slot.
#[derive(Debug, Default)]
pub struct ImageIndex {
    by_workload: HashMap<WorkloadKey, Vec<ImageSlot>>,
    by_slot: HashMap<ImageSlot, BTreeSet<Tracking>>,
}

impl ImageIndex {
    /// Replaces what `key` tracks.
    pub fn upsert(&mut self, key: &WorkloadKey, tracked: Vec<(ImageSlot, Tracking)>) {
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
    pub fn slots(&self) -> Vec<ImageSlot> {
        let mut slots: Vec<ImageSlot> = self.by_slot.keys().cloned().collect();
        slots.sort();
        slots
    }

    pub fn tracking(&self, slot: &ImageSlot) -> impl Iterator<Item = &Tracking> {
        self.by_slot.get(slot).into_iter().flatten()
    }

    pub fn len(&self) -> usize {
        self.by_slot.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_slot.is_empty()
    }
}

/// The digest each slot's tag last resolved to: written by the event loop,
/// read by reconciliations.
pub type LatestDigests = Arc<Mutex<HashMap<ImageSlot, String>>>;

/// What a reconciliation observes for `mutation`'s images: the latest
/// digest of each, where its annotation exists; otherwise what is there is
/// kept (the controller never records a first observation).
pub fn observations(
    mutation: &Mutation,
    key: &WorkloadKey,
    latest: &LatestDigests,
) -> Vec<ImageObservation> {
    let Ok(latest) = latest.lock() else { return Vec::new() };
    slots_of(key, mutation)
        .into_iter()
        .map(|(slot, tracking)| match mutation.existing_annotation(&tracking.key) {
            None => ImageObservation::Keep,
            Some(_) => latest
                .get(&slot)
                .map_or(ImageObservation::Keep, |digest| ImageObservation::Digest(digest.clone())),
        })
        .collect()
}

/// The poller's settings (`--registry-rate`, `--registry-burst`).
#[derive(Clone, Copy, Debug)]
pub struct PollRate {
    pub rate: f64,
    pub burst: u32,
}

/// Resolves each round of slots it is sent and reports every resolution to
/// the event loop. Each registry's slots are resolved one at a time, paced
/// by that registry's own token bucket, and registries in parallel, so a
/// slow or strictly limited registry delays only its own images. A round
/// still running when the next is due delays that one.
pub async fn poll(
    rounds: mpsc::Receiver<Vec<ImageSlot>>,
    source: Arc<KubeSource>,
    registry: RegistryClient,
    rate: PollRate,
    timeout: Duration,
    tx: mpsc::Sender<Message>,
) {
    let resolve = |slot: ImageSlot| {
        let (source, registry) = (source.clone(), registry.clone());
        async move {
            let image = ImageRef::parse(&slot.reference).ok()?;
            let credentials =
                source.pull_credentials(&slot.namespace, &slot.secrets, &slot.service_account);
            match tokio::time::timeout(timeout, credentials).await {
                Ok(Ok(credentials)) => Some(registry.resolve(&image, &credentials).await),
                Ok(Err(e)) => {
                    debug!(namespace = %slot.namespace, error = %e, "pull secrets unreadable");
                    None
                }
                Err(_) => None,
            }
        }
    };
    poll_with(rounds, resolve, rate, |slot, resolution| {
        let tx = tx.clone();
        async move { tx.send(Message::Image { slot, resolution }).await.is_ok() }
    })
    .await;
}

/// [`poll`], with the resolution and the report as functions (tests drive it
/// with scripted answers and a paused clock).
pub async fn poll_with<R, RF, S, SF>(
    mut rounds: mpsc::Receiver<Vec<ImageSlot>>,
    resolve: R,
    rate: PollRate,
    report: S,
) where
    R: Fn(ImageSlot) -> RF,
    RF: Future<Output = Option<Resolution>>,
    S: Fn(ImageSlot, Resolution) -> SF,
    SF: Future<Output = bool>,
{
    let mut buckets: HashMap<String, TokenBucket> = HashMap::new();
    while let Some(round) = rounds.recv().await {
        let mut by_registry: HashMap<String, Vec<ImageSlot>> = HashMap::new();
        for slot in round {
            let registry = ImageRef::parse(&slot.reference).map(|i| i.registry().to_owned());
            if let Ok(registry) = registry {
                by_registry.entry(registry).or_default().push(slot);
            }
        }
        let registries = by_registry.into_iter().map(|(registry, slots)| {
            let mut bucket = buckets.remove(&registry).unwrap_or_else(|| {
                TokenBucket::new(rate.rate, rate.burst, std::time::Instant::now())
            });
            let (resolve, report) = (&resolve, &report);
            async move {
                let mut open = true;
                for slot in slots {
                    while let Err(wait) = bucket.take(std::time::Instant::now()) {
                        tokio::time::sleep(wait).await;
                    }
                    if let Some(resolution) = resolve(slot.clone()).await {
                        open = open && report(slot, resolution).await;
                    }
                }
                (registry, bucket, open)
            }
        });
        let mut open = true;
        for (registry, bucket, reported) in futures_util::future::join_all(registries).await {
            buckets.insert(registry, bucket);
            open &= reported;
        }
        if !open {
            return;
        }
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
    use crate::core::workload::WorkloadKind;

    fn key(name: &str) -> WorkloadKey {
        WorkloadKey { kind: WorkloadKind::Deployment, namespace: "ns".into(), name: name.into() }
    }

    fn slot(reference: &str) -> ImageSlot {
        ImageSlot {
            namespace: "ns".into(),
            reference: reference.into(),
            secrets: vec![],
            service_account: "default".into(),
        }
    }

    fn tracking(workload: &str, container: &str) -> Tracking {
        Tracking {
            workload: key(workload),
            container: container.into(),
            image: format!("{container}:1"),
            key: format!("image.configsum.dev/{container}"),
        }
    }

    #[tokio::test]
    async fn each_registry_is_paced_by_its_own_bucket_and_registries_run_side_by_side() {
        use crate::registry::ImageDigest;
        let calls: Arc<Mutex<Vec<(String, std::time::Instant)>>> = Arc::default();
        let (rounds_tx, rounds) = mpsc::channel(1);
        let mut round: Vec<ImageSlot> =
            (0..5).map(|i| slot(&format!("slow.example/app{i}:1"))).collect();
        round.push(slot("fast.example/app:1"));
        rounds_tx.send(round).await.expect("send");
        drop(rounds_tx);
        let digest = format!("sha256:{}", "a".repeat(64));
        let resolve = |slot: ImageSlot| {
            let (calls, digest) = (calls.clone(), digest.clone());
            async move {
                calls.lock().expect("calls").push((slot.reference, std::time::Instant::now()));
                Some(Resolution::Digest(ImageDigest::parse(&digest).expect("digest")))
            }
        };
        let reported: Arc<Mutex<usize>> = Arc::default();
        let report = |_: ImageSlot, _: Resolution| {
            let reported = reported.clone();
            async move {
                *reported.lock().expect("reported") += 1;
                true
            }
        };
        // 20 per second, one at once: 50 ms between two calls to one registry.
        poll_with(rounds, resolve, PollRate { rate: 20.0, burst: 1 }, report).await;
        assert_eq!(*reported.lock().expect("reported"), 6);
        let calls = calls.lock().expect("calls").clone();
        let slow: Vec<std::time::Instant> =
            calls.iter().filter(|(r, _)| r.starts_with("slow")).map(|(_, at)| *at).collect();
        for pair in slow.windows(2) {
            assert!(pair[1] - pair[0] >= Duration::from_millis(45), "paced: {calls:?}");
        }
        let fast = calls.iter().position(|(r, _)| r.starts_with("fast")).expect("fast called");
        let second_slow = calls.iter().filter(|(r, _)| r.starts_with("slow")).nth(1).expect("2nd");
        let second_slow = calls.iter().position(|c| c == second_slow).expect("position");
        assert!(fast < second_slow, "the fast registry waits for no other's bucket: {calls:?}");
    }

    #[test]
    fn the_index_follows_upserts_and_removals() {
        let mut index = ImageIndex::default();
        index.upsert(&key("a"), vec![(slot("app:1"), tracking("a", "app"))]);
        index.upsert(
            &key("b"),
            vec![(slot("app:1"), tracking("b", "app")), (slot("db:2"), tracking("b", "db"))],
        );
        assert_eq!(index.slots(), vec![slot("app:1"), slot("db:2")]);
        assert_eq!(index.tracking(&slot("app:1")).count(), 2);
        index.upsert(&key("b"), vec![(slot("db:2"), tracking("b", "db"))]);
        assert_eq!(index.tracking(&slot("app:1")).count(), 1, "b no longer runs app:1");
        index.remove(&key("a"));
        assert_eq!(index.slots(), vec![slot("db:2")]);
        index.remove(&key("b"));
        assert!(index.is_empty());
    }
}
