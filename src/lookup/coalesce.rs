//! Concurrent lookups of one object sharing one read, without giving up freshness
//! (docs/behaviour.md, "Reading ConfigMaps and Secrets").
//!
//! A review may join only a read that began at or after the review arrived: such a read
//! is sent to the API server after every write acknowledged before the review was sent,
//! so it sees them all. A read begins when its GET leaves, after any wait for one of the
//! server-wide slots (`SERVER_WIDE_LOOKUPS`): a read still waiting may be joined by
//! anyone. A read that began earlier may predate such a write, so the review starts a
//! read of its own, which reviews arriving before it leaves may join in turn.
//!
//! Nothing is cached: a read leaves the map when it finishes, and a read no review waits
//! for any more is dropped (cancelled) with its last waiter. Each waiter keeps its own
//! deadline: one that stops waiting does not cancel the read for the others.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use futures_util::FutureExt as _;
use futures_util::future::{BoxFuture, Shared, WeakShared};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::time::Instant;

use super::{LookupError, ObjectSource};
use crate::core::model::kinds::WorkloadKind;
use crate::core::model::provider_class_status::StatusPage;
use crate::core::{ObjectContent, ObjectKey, ObjectRef};
use crate::metrics_registry::MetricsRegistry;
use crate::registry::PullCredential;

type Found = Result<Option<Arc<ObjectContent>>, LookupError>;
type Read = BoxFuture<'static, Found>;

/// An [`ObjectSource`] whose reviews share reads of the same object (`fetch_for_review`);
/// everything else goes to `source` as it is.
pub struct Coalescing<S> {
    source: Arc<S>,
    reads: Arc<Mutex<HashMap<ObjectKey, InFlight>>>,
    next_id: AtomicU64,
    metrics: CoalescingMetrics,
}

/// The newest read of an object in flight: the one most reviews may join, since the
/// rule only asks that a read began late enough.
struct InFlight {
    /// When its GET left; unset while it waits for a slot.
    began: Arc<OnceLock<Instant>>,
    /// Tells this read from a newer one of the same object when it leaves.
    id: u64,
    /// Weak, so that the read is dropped with its last waiter.
    read: WeakShared<Read>,
}

/// Whether a review that arrived at `arrived` may take the result of a read whose GET left
/// at `began` (`None`: not yet): only if the GET left after the review arrived (the API
/// server sends a review after acknowledging the writes it must see).
pub fn may_join(began: Option<Instant>, arrived: Instant) -> bool {
    began.is_none_or(|began| began >= arrived)
}

impl<S: ObjectSource> Coalescing<S> {
    pub fn new(source: S, metrics: CoalescingMetrics) -> Self {
        Coalescing {
            source: Arc::new(source),
            reads: Arc::default(),
            next_id: AtomicU64::new(0),
            metrics,
        }
    }

    /// Reads in flight (tests: none once every lookup is done).
    pub fn in_flight(&self) -> usize {
        lock(&self.reads).len()
    }

    /// The read a review that arrived at `arrived` waits for: the newest one in flight if
    /// [`may_join`] allows, else a new one.
    fn read_for(&self, key: ObjectKey, arrived: Instant) -> Shared<Read> {
        let mut reads = lock(&self.reads);
        let newest = reads.get(&key);
        let joinable = newest.map(|r| may_join(r.began.get().copied(), arrived));
        if let (Some(read), Some(true)) = (newest, joinable) {
            if let Some(read) = read.read.upgrade() {
                self.metrics.count(Outcome::Joined);
                return read;
            }
        }
        let outcome =
            if joinable == Some(false) { Outcome::StartedFresher } else { Outcome::Started };
        self.metrics.count(outcome);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let leaves = Leaves { reads: self.reads.clone(), key: key.clone(), id };
        let source = self.source.clone();
        let began = Arc::new(OnceLock::new());
        let sent = began.clone();
        let sending = move || {
            let _ = sent.set(Instant::now());
        };
        // `leaves` lives as long as the read does.
        let read = async move {
            let ObjectKey { namespace, object } = &leaves.key;
            source.fetch_sending(namespace, object, sending).await
        }
        .boxed()
        .shared();
        // A read not yet polled has not finished, so it can be downgraded.
        if let Some(weak) = read.downgrade() {
            reads.insert(key, InFlight { began, id, read: weak });
        }
        read
    }
}

/// Takes a read out of the map when it finishes or is dropped, unless a newer read of
/// the same object has taken its place.
struct Leaves {
    reads: Arc<Mutex<HashMap<ObjectKey, InFlight>>>,
    key: ObjectKey,
    id: u64,
}

impl Drop for Leaves {
    fn drop(&mut self) {
        let mut reads = lock(&self.reads);
        if reads.get(&self.key).is_some_and(|r| r.id == self.id) {
            reads.remove(&self.key);
        }
    }
}

/// A panic elsewhere while holding the lock leaves the map consistent: every change to it
/// is a single insert or remove.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<S: ObjectSource> ObjectSource for Coalescing<S> {
    async fn fetch(&self, namespace: &str, object: &ObjectRef) -> Found {
        self.source.fetch(namespace, object).await
    }

    async fn fetch_for_review(
        &self,
        namespace: &str,
        object: &ObjectRef,
        arrived: Instant,
    ) -> Found {
        let key = object.clone().within(namespace);
        // Not held across an await: the map is locked only to find or start the read.
        let read = self.read_for(key, arrived);
        read.await
    }

    async fn pull_credentials(
        &self,
        namespace: &str,
        secrets: &[String],
        service_account: &str,
    ) -> Result<Vec<PullCredential>, LookupError> {
        self.source.pull_credentials(namespace, secrets, service_account).await
    }

    async fn fetch_template(
        &self,
        namespace: &str,
        kind: WorkloadKind,
        name: &str,
    ) -> Result<Option<serde_json::Value>, LookupError> {
        self.source.fetch_template(namespace, kind, name).await
    }

    async fn list_provider_class_statuses(
        &self,
        namespace: &str,
        limit: u32,
        next: Option<&str>,
    ) -> Result<StatusPage, LookupError> {
        self.source.list_provider_class_statuses(namespace, limit, next).await
    }

    async fn check_ready(&self) -> Result<(), LookupError> {
        self.source.check_ready().await
    }
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum Outcome {
    Joined,
    Started,
    StartedFresher,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReadLabels {
    read: &'static str,
}

/// `configsum_lookup_reads_total{read}`; cheap to clone (the series are shared).
#[derive(Clone, Default)]
pub struct CoalescingMetrics {
    reads: Family<ReadLabels, Counter>,
}

impl CoalescingMetrics {
    pub fn register(registry: &mut MetricsRegistry) -> Self {
        let this = CoalescingMetrics::default();
        registry.register(
            "lookup_reads",
            "Lookups of reviews by read: joined one in flight, started one, or started one because the read in flight began before the review arrived",
            this.reads.clone(),
        );
        this
    }

    fn count(&self, outcome: Outcome) {
        let read = match outcome {
            Outcome::Joined => "joined",
            Outcome::Started => "started",
            Outcome::StartedFresher => "started_fresher",
        };
        self.reads.get_or_create(&ReadLabels { read }).inc();
    }

    /// The count of lookups that ended `read` (tests).
    pub fn get(&self, read: &'static str) -> u64 {
        self.reads.get_or_create(&ReadLabels { read }).get()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use super::*;
    use crate::core::{Digester, Observation};
    use crate::lookup::{LookupMetrics, observe_all};

    /// A store of objects whose every object holds `written`, the count of writes so far,
    /// as of the moment its read is sent; each read waits for one of `slots`, takes `took`
    /// of (paused) time, and fails with `failing` if set.
    struct Store {
        written: AtomicU64,
        slots: tokio::sync::Semaphore,
        took: Duration,
        failing: Option<LookupError>,
        reads: AtomicUsize,
        /// Reads dropped before they answered.
        dropped: Arc<AtomicUsize>,
    }

    impl Store {
        fn new(took: Duration) -> Self {
            Store {
                written: AtomicU64::new(0),
                slots: tokio::sync::Semaphore::new(64),
                took,
                failing: None,
                reads: AtomicUsize::new(0),
                dropped: Arc::default(),
            }
        }

        fn write(&self) {
            self.written.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Counts a read dropped before it answered.
    struct Unanswered(Arc<AtomicUsize>, bool);

    impl Drop for Unanswered {
        fn drop(&mut self) {
            if !self.1 {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    impl ObjectSource for Store {
        async fn fetch(&self, namespace: &str, object: &ObjectRef) -> Found {
            self.fetch_sending(namespace, object, || ()).await
        }

        async fn fetch_sending(
            &self,
            _: &str,
            _: &ObjectRef,
            sending: impl FnOnce() + Send,
        ) -> Found {
            let _slot = self.slots.acquire().await.map_err(|_| LookupError::Connection)?;
            sending();
            self.reads.fetch_add(1, Ordering::SeqCst);
            // What the API server reads is what was written when the GET reached it.
            let seen = self.written.load(Ordering::SeqCst).to_string();
            let mut unanswered = Unanswered(self.dropped.clone(), false);
            tokio::time::sleep(self.took).await;
            unanswered.1 = true;
            if let Some(e) = &self.failing {
                return Err(e.clone());
            }
            let entries = [("written".to_owned(), seen.into_bytes())].into();
            Ok(Some(Arc::new(ObjectContent::from_entries(entries))))
        }
    }

    fn coalescing(store: Store) -> Coalescing<Store> {
        Coalescing::new(store, CoalescingMetrics::default())
    }

    /// What the object held when the read that answered was sent.
    fn written(found: &Found) -> String {
        let content = found.as_ref().ok().and_then(Option::as_ref).expect("an object");
        String::from_utf8_lossy(content.get("written").expect("the key")).into_owned()
    }

    fn cm(name: &str) -> ObjectRef {
        ObjectRef::config_map(name)
    }

    /// ConfigMap `name` of namespace `ns`, for a review that arrived at `arrived`.
    async fn look(source: &Coalescing<Store>, name: &str, arrived: Instant) -> Found {
        look_at(source, "ns", cm(name), arrived).await
    }

    async fn look_at(
        source: &Coalescing<Store>,
        namespace: &str,
        object: ObjectRef,
        arrived: Instant,
    ) -> Found {
        source.fetch_for_review(namespace, &object, arrived).await
    }

    const MS: Duration = Duration::from_millis(1);

    #[tokio::test(start_paused = true)]
    async fn lookups_that_arrived_before_a_read_began_share_it() {
        let source = coalescing(Store::new(10 * MS));
        let arrived = Instant::now();
        tokio::time::advance(MS).await;
        let lookups = (0..16).map(|_| look(&source, "a", arrived));
        let found = futures_util::future::join_all(lookups).await;
        assert_eq!(source.source.reads.load(Ordering::SeqCst), 1, "one read for sixteen");
        assert!(found.iter().all(|f| written(f) == "0"));
        assert_eq!(source.in_flight(), 0, "a finished read leaves");
        assert_eq!((source.metrics.get("started"), source.metrics.get("joined")), (1, 15));
    }

    #[tokio::test(start_paused = true)]
    async fn other_objects_and_namespaces_are_other_reads() {
        let source = coalescing(Store::new(10 * MS));
        let arrived = Instant::now();
        let (a, b, other_ns) = tokio::join!(
            look(&source, "a", arrived),
            look(&source, "b", arrived),
            look_at(&source, "other", cm("a"), arrived),
        );
        assert!(a.is_ok() && b.is_ok() && other_ns.is_ok());
        let secret = look_at(&source, "ns", ObjectRef::secret("a"), arrived);
        assert!(secret.await.is_ok());
        assert_eq!(source.source.reads.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_review_that_arrived_after_a_read_began_reads_again_and_sees_the_write() {
        let source = Arc::new(coalescing(Store::new(10 * MS)));
        let first_arrived = Instant::now();
        let first = tokio::spawn({
            let source = source.clone();
            async move { look(&source, "a", first_arrived).await }
        });
        tokio::time::advance(MS).await;
        assert_eq!(source.in_flight(), 1, "the first review's read is under way");
        // A write the API server acknowledges, then a review it sends: while the older
        // read is still in flight.
        source.source.write();
        tokio::time::advance(MS).await;
        let second_arrived = Instant::now();
        let second = look(&source, "a", second_arrived);
        // A review that arrived with the first but looks up only now may join the newer read.
        let late_first = look(&source, "a", first_arrived);
        let (second, late_first) = tokio::join!(second, late_first);
        let first = first.await.expect("the first review");
        assert_eq!(written(&first), "0", "the older read answered its own review");
        assert_eq!(written(&second), "1", "the newer review saw the write before it");
        assert_eq!(written(&late_first), "1");
        assert_eq!(source.source.reads.load(Ordering::SeqCst), 2);
        assert_eq!(source.metrics.get("started_fresher"), 1);
        assert_eq!(source.metrics.get("joined"), 1);
        assert_eq!(source.in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_waiting_for_a_slot_may_be_joined_by_later_arrivals() {
        let store = Store { slots: tokio::sync::Semaphore::new(1), ..Store::new(10 * MS) };
        let source = Arc::new(coalescing(store));
        let started = Instant::now();
        // `b` takes the one slot; `a` waits for it, its GET not yet sent.
        let (b, a) = {
            let (one, two) = (source.clone(), source.clone());
            let b = tokio::spawn(async move { look(&one, "b", started).await });
            tokio::task::yield_now().await;
            (b, tokio::spawn(async move { look(&two, "a", started).await }))
        };
        tokio::time::advance(MS).await;
        source.source.write();
        tokio::time::advance(MS).await;
        let later = look(&source, "a", Instant::now()).await;
        assert_eq!(written(&later), "1", "the GET left after the later arrival");
        assert_eq!(written(&a.await.expect("a")), "1");
        assert_eq!(written(&b.await.expect("b")), "0");
        assert_eq!(source.source.reads.load(Ordering::SeqCst), 2, "a was read once");
        assert_eq!(source.metrics.get("joined"), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_finished_read_is_never_reused() {
        let source = coalescing(Store::new(10 * MS));
        let arrived = Instant::now();
        let first = look(&source, "a", arrived).await;
        source.source.write();
        // Arrived before the first read began, so it could have joined it while in flight.
        let second = look(&source, "a", arrived).await;
        assert_eq!((written(&first), written(&second)), ("0".into(), "1".into()));
        assert_eq!(source.source.reads.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_joiner_past_its_deadline_stops_alone() {
        let source = coalescing(Store::new(100 * MS));
        let arrived = Instant::now();
        let patient = look(&source, "a", arrived);
        let hasty = tokio::time::timeout(10 * MS, look(&source, "a", arrived));
        let (patient, hasty) = tokio::join!(patient, hasty);
        assert!(hasty.is_err(), "the joiner timed out");
        assert_eq!(written(&patient), "0", "the read went on for the other");
        assert_eq!(Instant::now() - arrived, 100 * MS);
        assert_eq!(source.source.reads.load(Ordering::SeqCst), 1);
        assert_eq!(source.source.dropped.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_reader_past_its_deadline_leaves_the_read_to_its_joiners() {
        let source = coalescing(Store::new(100 * MS));
        let arrived = Instant::now();
        // The review that started the read gives up first; its joiner still gets the answer.
        let starter = tokio::time::timeout(10 * MS, look(&source, "a", arrived));
        let joiner = look(&source, "a", arrived);
        let (starter, joiner) = tokio::join!(starter, joiner);
        assert!(starter.is_err());
        assert_eq!(written(&joiner), "0");
        assert_eq!(source.source.reads.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn errors_are_shared() {
        let store = Store { failing: Some(LookupError::Status(503)), ..Store::new(10 * MS) };
        let source = coalescing(store);
        let arrived = Instant::now();
        let lookups = (0..3).map(|_| look(&source, "a", arrived));
        let found = futures_util::future::join_all(lookups).await;
        let errors: Vec<_> = found.into_iter().map(Result::err).collect();
        assert_eq!(errors, vec![Some(LookupError::Status(503)); 3]);
        assert_eq!(source.source.reads.load(Ordering::SeqCst), 1);
        assert_eq!(source.in_flight(), 0, "a failed read leaves too");
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_nobody_waits_for_is_dropped() {
        let source = coalescing(Store::new(100 * MS));
        let arrived = Instant::now();
        let lookups = (0..2).map(|_| look(&source, "a", arrived));
        let gave_up = tokio::time::timeout(10 * MS, futures_util::future::join_all(lookups)).await;
        assert!(gave_up.is_err());
        assert_eq!(source.source.dropped.load(Ordering::SeqCst), 1, "the read was cancelled");
        assert_eq!(source.in_flight(), 0, "and left the map");
        // Whoever comes next reads anew.
        let next = look(&source, "a", arrived).await;
        assert_eq!(written(&next), "0");
        assert_eq!(source.source.reads.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn sixteen_reviews_of_eight_shared_objects_read_each_once() {
        let source = coalescing(Store::new(10 * MS));
        let mutation = crate::lookup::tests::mutation_with(8);
        let arrived = Instant::now();
        let deadline = arrived + Duration::from_secs(1);
        let (digester, metrics) = (Digester::default(), LookupMetrics::default());
        let reviews = (0..16)
            .map(|_| observe_all(&source, &digester, &mutation, arrived, deadline, &metrics));
        let observed = futures_util::future::join_all(reviews).await;
        assert_eq!(source.source.reads.load(Ordering::SeqCst), 8);
        let first = &observed[0];
        assert!(first.iter().all(|o| matches!(o, Observation::Digest(_))), "{first:?}");
        assert!(observed.iter().all(|o| o == first));
        assert_eq!(source.in_flight(), 0);
    }

    #[test]
    fn a_read_may_be_joined_only_if_it_began_at_or_after_the_arrival() {
        let arrived = Instant::now();
        assert!(may_join(Some(arrived), arrived));
        assert!(may_join(Some(arrived + MS), arrived));
        assert!(!may_join(Some(arrived), arrived + MS));
        assert!(may_join(None, arrived + MS), "a read not yet sent leaves after any arrival");
    }
}
