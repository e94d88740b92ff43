//! The image poller: resolves every tracked image each `--image-poll-interval`,
//! through a token bucket per registry, and reports each resolution to the
//! event loop. A moved tag makes each tracking workload due, once, through the
//! same window, rate limit and Events as a changed object.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::debug;

use super::model::message::Message;
use super::model::polled_image::PolledImage;
use super::state::pacing::TokenBucket;
use crate::lookup::{KubeSource, ObjectSource};
use crate::registry::{ImageRef, RegistryClient, Resolution};

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
    rounds: mpsc::Receiver<Vec<PolledImage>>,
    source: Arc<KubeSource>,
    registry: RegistryClient,
    rate: PollRate,
    timeout: Duration,
    tx: mpsc::Sender<Message>,
) {
    let resolve = |slot: PolledImage| {
        let (source, registry) = (source.clone(), registry.clone());
        async move {
            let image = ImageRef::parse(&slot.reference).ok()?;
            let credentials =
                source.pull_credentials(&slot.namespace, &slot.pull_secrets, &slot.service_account);
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
        async move { tx.send(Message::Image(Box::new((slot, resolution)))).await.is_ok() }
    })
    .await;
}

/// [`poll`], with the resolution and the report as functions (tests drive it
/// with scripted answers and a paused clock).
pub async fn poll_with<R, RF, S, SF>(
    mut rounds: mpsc::Receiver<Vec<PolledImage>>,
    resolve: R,
    rate: PollRate,
    report: S,
) where
    R: Fn(PolledImage) -> RF,
    RF: Future<Output = Option<Resolution>>,
    S: Fn(PolledImage, Resolution) -> SF,
    SF: Future<Output = bool>,
{
    let mut buckets: HashMap<String, TokenBucket> = HashMap::new();
    while let Some(round) = rounds.recv().await {
        let mut by_registry: HashMap<String, Vec<PolledImage>> = HashMap::new();
        for slot in round {
            let registry = ImageRef::parse(&slot.reference).map(|i| i.registry().to_owned());
            if let Ok(registry) = registry {
                by_registry.entry(registry).or_default().push(slot);
            }
        }
        let registries = by_registry.into_iter().map(|(registry, slots)| {
            let mut bucket = buckets
                .remove(&registry)
                .unwrap_or_else(|| TokenBucket::new(rate.rate, rate.burst, Instant::now()));
            let (resolve, report) = (&resolve, &report);
            async move {
                let mut open = true;
                for slot in slots {
                    while let Err(wait) = bucket.take(Instant::now()) {
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    fn slot(reference: &str) -> PolledImage {
        PolledImage {
            namespace: "ns".into(),
            reference: reference.into(),
            pull_secrets: vec![],
            service_account: "default".into(),
        }
    }

    #[tokio::test]
    async fn each_registry_is_paced_by_its_own_bucket_and_registries_run_side_by_side() {
        use crate::registry::ImageDigest;
        let calls: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
        let (rounds_tx, rounds) = mpsc::channel(1);
        let mut round: Vec<PolledImage> =
            (0..5).map(|i| slot(&format!("slow.example/app{i}:1"))).collect();
        round.push(slot("fast.example/app:1"));
        rounds_tx.send(round).await.expect("send");
        drop(rounds_tx);
        let digest = format!("sha256:{}", "a".repeat(64));
        let resolve = |slot: PolledImage| {
            let (calls, digest) = (calls.clone(), digest.clone());
            async move {
                calls.lock().expect("calls").push((slot.reference, Instant::now()));
                Some(Resolution::Digest(ImageDigest::parse(&digest).expect("digest")))
            }
        };
        let reported: Arc<Mutex<usize>> = Arc::default();
        let report = |_: PolledImage, _: Resolution| {
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
        let slow: Vec<Instant> =
            calls.iter().filter(|(r, _)| r.starts_with("slow")).map(|(_, at)| *at).collect();
        for pair in slow.windows(2) {
            assert!(pair[1] - pair[0] >= Duration::from_millis(45), "paced: {calls:?}");
        }
        let fast = calls.iter().position(|(r, _)| r.starts_with("fast")).expect("fast called");
        let second_slow = calls.iter().filter(|(r, _)| r.starts_with("slow")).nth(1).expect("2nd");
        let second_slow = calls.iter().position(|c| c == second_slow).expect("position");
        assert!(fast < second_slow, "the fast registry waits for no other's bucket: {calls:?}");
    }
}
