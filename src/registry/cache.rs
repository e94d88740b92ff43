//! Single-flight with short reuse: concurrent callers asking for one key share one fetch, and a
//! fetch's result that [`Reusable::reusable`] allows is handed out again until `reuse_for` has
//! passed since the fetch finished (the moment the registry answered).
//!
//! The fetch runs in its own task, so a caller that gives up (its admission deadline passed)
//! neither cancels it for the others nor loses its result for the next caller; a fetch that
//! panics gives every waiter [`Reusable::lost`] and is not kept.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::FutureExt as _;
use futures_util::future::{BoxFuture, Shared};
use tokio::time::Instant;

/// Values the cache holds.
pub(crate) trait Reusable: Clone + Send + Sync + 'static {
    /// Whether this value may be handed to later callers within the reuse window.
    fn reusable(&self) -> bool;
    /// What waiters get when the fetch panicked or its task was cancelled.
    fn lost() -> Self;
}

/// One key's fetch: running, or answered at `answered`.
enum Entry<V> {
    Pending(Shared<BoxFuture<'static, V>>),
    Ready { value: V, answered: Instant },
}

/// Every key's entry, swept of expired answers as it grows.
struct Entries<K, V> {
    map: HashMap<K, Entry<V>>,
    /// Size at which expired entries are next swept out.
    sweep_at: usize,
}

/// See the module docs.
pub(crate) struct SingleFlight<K, V> {
    entries: Arc<Mutex<Entries<K, V>>>,
    reuse_for: Duration,
}

const FIRST_SWEEP: usize = 256;

impl<K, V> SingleFlight<K, V>
where
    K: Eq + Hash + Clone + Send + 'static,
    V: Reusable,
{
    pub(crate) fn new(reuse_for: Duration) -> Self {
        SingleFlight {
            entries: Arc::new(Mutex::new(Entries { map: HashMap::new(), sweep_at: FIRST_SWEEP })),
            reuse_for,
        }
    }

    /// The value for `key`: a reusable one still fresh, the one being fetched, or a new fetch's.
    /// `fetch` is called only in the last case. Must be called within a Tokio runtime.
    pub(crate) async fn get_or_fetch<F, Fut>(&self, key: K, fetch: F) -> V
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = V> + Send + 'static,
    {
        let pending = {
            let mut entries = lock(&self.entries);
            match entries.map.get(&key) {
                Some(Entry::Ready { value, answered }) if answered.elapsed() < self.reuse_for => {
                    return value.clone();
                }
                Some(Entry::Pending(pending)) => pending.clone(),
                _ => {
                    entries.sweep(self.reuse_for);
                    let pending = self.start(key.clone(), fetch());
                    entries.map.insert(key, Entry::Pending(pending.clone()));
                    pending
                }
            }
        };
        pending.await
    }

    /// Spawns the fetch; its task files the result (or removes the entry) before waking waiters.
    fn start<Fut>(&self, key: K, fetch: Fut) -> Shared<BoxFuture<'static, V>>
    where
        Fut: Future<Output = V> + Send + 'static,
    {
        let entries = Arc::clone(&self.entries);
        let task = tokio::spawn(async move {
            let value = AssertUnwindSafe(fetch).catch_unwind().await.unwrap_or_else(|_| V::lost());
            let mut entries = lock(&entries);
            if value.reusable() {
                entries
                    .map
                    .insert(key, Entry::Ready { value: value.clone(), answered: Instant::now() });
            } else {
                entries.map.remove(&key);
            }
            value
        });
        // The task catches the fetch's panic; a JoinError here means the runtime is shutting down.
        task.map(|joined| joined.unwrap_or_else(|_| V::lost())).boxed().shared()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.entries).map.len()
    }
}

impl<K: Eq + Hash, V> Entries<K, V> {
    /// Drops expired results once the map has doubled since the last sweep, so a steady stream of
    /// distinct keys costs amortised O(1) per fetch.
    fn sweep(&mut self, reuse_for: Duration) {
        if self.map.len() < self.sweep_at {
            return;
        }
        self.map.retain(|_, entry| match entry {
            Entry::Pending(_) => true,
            Entry::Ready { answered, .. } => answered.elapsed() < reuse_for,
        });
        self.sweep_at = (self.map.len() * 2).max(FIRST_SWEEP);
    }
}

/// The map stays consistent whatever panics (every update is a single insert or remove), so a
/// poisoned lock is taken over.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    enum Value {
        Answer(usize),
        NoAnswer(usize),
        Lost,
    }

    impl Reusable for Value {
        fn reusable(&self) -> bool {
            matches!(self, Value::Answer(_))
        }
        fn lost() -> Self {
            Value::Lost
        }
    }

    /// A fetch that counts its calls and answers after `delay`.
    fn counted(
        calls: &Arc<AtomicUsize>,
        delay: Duration,
        make: fn(usize) -> Value,
    ) -> impl FnOnce() -> BoxFuture<'static, Value> + use<> {
        let calls = Arc::clone(calls);
        move || {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                tokio::time::sleep(delay).await;
                make(n)
            }
            .boxed()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_callers_share_one_fetch() {
        let cache = Arc::new(SingleFlight::<&str, Value>::new(Duration::from_secs(10)));
        let calls = Arc::new(AtomicUsize::new(0));
        let waiters: Vec<_> = (0..20)
            .map(|_| {
                let cache = Arc::clone(&cache);
                let fetch = counted(&calls, Duration::from_millis(300), Value::Answer);
                tokio::spawn(async move { cache.get_or_fetch("nginx", fetch).await })
            })
            .collect();
        for waiter in waiters {
            assert_eq!(waiter.await.ok(), Some(Value::Answer(1)));
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn answers_are_reused_for_the_window_after_they_arrive() {
        let cache = SingleFlight::<&str, Value>::new(Duration::from_secs(10));
        let calls = Arc::new(AtomicUsize::new(0));
        let slow = Duration::from_secs(3);
        assert_eq!(
            cache.get_or_fetch("a", counted(&calls, slow, Value::Answer)).await,
            Value::Answer(1)
        );
        // The window starts when the answer arrived, not when it was asked for.
        tokio::time::advance(Duration::from_millis(9_900)).await;
        assert_eq!(
            cache.get_or_fetch("a", counted(&calls, slow, Value::Answer)).await,
            Value::Answer(1)
        );
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(
            cache.get_or_fetch("a", counted(&calls, slow, Value::Answer)).await,
            Value::Answer(2)
        );
        // Another key is another fetch.
        assert_eq!(
            cache.get_or_fetch("b", counted(&calls, slow, Value::Answer)).await,
            Value::Answer(3)
        );
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn non_answers_are_shared_while_pending_but_not_reused() {
        let cache = Arc::new(SingleFlight::<&str, Value>::new(Duration::from_secs(10)));
        let calls = Arc::new(AtomicUsize::new(0));
        let first = {
            let cache = Arc::clone(&cache);
            let fetch = counted(&calls, Duration::from_secs(1), Value::NoAnswer);
            tokio::spawn(async move { cache.get_or_fetch("a", fetch).await })
        };
        tokio::task::yield_now().await;
        let joined =
            cache.get_or_fetch("a", counted(&calls, Duration::from_secs(1), Value::NoAnswer)).await;
        assert_eq!(joined, Value::NoAnswer(1));
        assert_eq!(first.await.ok(), Some(Value::NoAnswer(1)));
        assert_eq!(cache.len(), 0, "a failure that was no answer is not kept");
        let again =
            cache.get_or_fetch("a", counted(&calls, Duration::from_secs(1), Value::NoAnswer)).await;
        assert_eq!(again, Value::NoAnswer(2));
    }

    #[tokio::test(start_paused = true)]
    async fn an_abandoned_fetch_still_finishes_and_is_reused() {
        let cache = SingleFlight::<&str, Value>::new(Duration::from_secs(10));
        let calls = Arc::new(AtomicUsize::new(0));
        let gave_up = tokio::time::timeout(
            Duration::from_millis(100),
            cache.get_or_fetch("a", counted(&calls, Duration::from_secs(1), Value::Answer)),
        )
        .await;
        assert!(gave_up.is_err());
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(
            cache.get_or_fetch("a", counted(&calls, Duration::ZERO, Value::Answer)).await,
            Value::Answer(1)
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_fetch_gives_lost_and_is_not_kept() {
        let cache = SingleFlight::<&str, Value>::new(Duration::from_secs(10));
        fn explode() -> Value {
            panic!("the registry client panicked")
        }
        let value = cache.get_or_fetch("a", || async { explode() }.boxed()).await;
        assert_eq!(value, Value::Lost);
        assert_eq!(cache.len(), 0);
        let calls = Arc::new(AtomicUsize::new(0));
        assert_eq!(
            cache.get_or_fetch("a", counted(&calls, Duration::ZERO, Value::Answer)).await,
            Value::Answer(1)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn expired_entries_are_swept() {
        let cache = SingleFlight::<usize, Value>::new(Duration::from_secs(10));
        let calls = Arc::new(AtomicUsize::new(0));
        for key in 0..FIRST_SWEEP {
            cache.get_or_fetch(key, counted(&calls, Duration::ZERO, Value::Answer)).await;
        }
        assert_eq!(cache.len(), FIRST_SWEEP);
        tokio::time::advance(Duration::from_secs(11)).await;
        cache.get_or_fetch(FIRST_SWEEP, counted(&calls, Duration::ZERO, Value::Answer)).await;
        assert_eq!(cache.len(), 1);
    }
}
