//! Reading the ConfigMaps and Secrets a review references: the seam between
//! the pure core and wherever the objects live, and the deadline around it.

mod api_client;
pub mod api_object;
mod coalesce;
mod file;
mod images;
mod kube;
mod metrics;
mod observe;
pub mod provider_classes;
pub mod well_formed_query;
mod workloads;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use tokio::time::Instant;

use crate::core::model::kinds::WorkloadKind;
use crate::core::model::provider_class_status::StatusPage;
use crate::core::{
    Digester, LookupKey, Mutation, ObjectContent, ObjectRef, Observation, Target, exists,
};
use crate::registry::PullCredential;

pub use api_client::{client_from, kube_client, kube_client_with};
pub use coalesce::{Coalescing, CoalescingMetrics, may_join};
pub use file::{
    FileSource, FileSourceError, WorkloadDocument, namespace_annotations, workload_documents,
};
pub(crate) use file::{
    RefusedTag, check_tag, describe_before, each_document, object, scan_reason, split_documents,
    tag_of_event,
};
pub use images::resolve_all;
pub use kube::{KubeSource, SERVER_WIDE_LOOKUPS};
pub use metrics::LookupMetrics;
pub use observe::{Inputs, observe};
pub use workloads::observe_workloads;

/// At most this many lookups of one review run at once (docs/behaviour.md, "Reading ConfigMaps and Secrets").
pub const LOOKUPS_PER_REVIEW: usize = 8;

/// Where ConfigMaps and Secrets come from. `Ok(None)` means the object does not exist.
pub trait ObjectSource: Send + Sync + 'static {
    fn fetch(
        &self,
        namespace: &str,
        object: &ObjectRef,
    ) -> impl Future<Output = Result<Option<Arc<ObjectContent>>, LookupError>> + Send;

    /// [`fetch`](Self::fetch), calling `sending` right before the request leaves, after any
    /// wait for a free slot: a read that [`Coalescing`] shares may be joined by every review
    /// that arrived before then. By default, at once.
    fn fetch_sending(
        &self,
        namespace: &str,
        object: &ObjectRef,
        sending: impl FnOnce() + Send,
    ) -> impl Future<Output = Result<Option<Arc<ObjectContent>>, LookupError>> + Send {
        sending();
        self.fetch(namespace, object)
    }

    /// [`fetch`](Self::fetch) for a review that arrived at `arrived`. A source may answer
    /// with a read it shares with other reviews, but only one that began at or after
    /// `arrived` ([`Coalescing`]): an older read may predate a write the review must see.
    fn fetch_for_review(
        &self,
        namespace: &str,
        object: &ObjectRef,
        arrived: Instant,
    ) -> impl Future<Output = Result<Option<Arc<ObjectContent>>, LookupError>> + Send {
        let _ = arrived;
        self.fetch(namespace, object)
    }

    /// The registry credentials of the pull secrets `secrets` names, then of
    /// the ServiceAccount `service_account`'s, read fresh. A missing Secret or
    /// ServiceAccount, or a Secret that is no pull secret, is skipped, as the
    /// kubelet skips it.
    fn pull_credentials(
        &self,
        namespace: &str,
        secrets: &[String],
        service_account: &str,
    ) -> impl Future<Output = Result<Vec<PullCredential>, LookupError>> + Send {
        let _ = (namespace, secrets, service_account);
        async { Ok(Vec::new()) }
    }

    /// The pod template of workload `name` of `kind` (its JSON as the API server returns it),
    /// for a workload that tracks it; `Ok(None)` when the workload does not exist.
    fn fetch_template(
        &self,
        namespace: &str,
        kind: WorkloadKind,
        name: &str,
    ) -> impl Future<Output = Result<Option<serde_json::Value>, LookupError>> + Send {
        let _ = (namespace, kind, name);
        async { Err(LookupError::Unsupported) }
    }

    /// One page (at most `limit`, from the `continue` token `next`) of `namespace`'s
    /// SecretProviderClassPodStatuses, read fresh (`lookup::provider_classes`).
    fn list_provider_class_statuses(
        &self,
        namespace: &str,
        limit: u32,
        next: Option<&str>,
    ) -> impl Future<Output = Result<StatusPage, LookupError>> + Send {
        let _ = (namespace, limit, next);
        async { Err(LookupError::Unsupported) }
    }

    /// Whether lookups can be served at all; readiness waits for `Ok`.
    fn check_ready(&self) -> impl Future<Output = Result<(), LookupError>> + Send {
        async { Ok(()) }
    }
}

/// A lookup that got neither the object nor a clear "not found".
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum LookupError {
    #[error("timeout")]
    Timeout,
    #[error("HTTP {0}")]
    Status(u16),
    #[error("connection error")]
    Connection,
    #[error("undecodable answer")]
    Decode,
    #[error("not available from this source")]
    Unsupported,
}

impl LookupError {
    /// The `reason` label of `configsum_lookup_errors_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            LookupError::Timeout => "timeout",
            LookupError::Status(429) => "throttled",
            LookupError::Status(401) => "unauthorized",
            LookupError::Status(403) => "forbidden",
            LookupError::Status(code) if *code >= 500 => "server_error",
            LookupError::Status(_) => "unexpected_status",
            LookupError::Connection => "connection",
            LookupError::Decode => "decode",
            LookupError::Unsupported => "unsupported",
        }
    }
}

/// The review's lookup budget (docs/behaviour.md, "Failure behaviour"): the API server gives up after its
/// `?timeout=`, so stop at min(max(timeout - 1s, timeout / 2), `--lookup-timeout`),
/// less a margin for digesting and answering.
pub fn lookup_budget(api_server_timeout: Option<Duration>, lookup_timeout: Duration) -> Duration {
    const MARGIN: Duration = Duration::from_millis(100);
    let budget = match api_server_timeout {
        Some(t) => t.saturating_sub(Duration::from_secs(1)).max(t / 2).min(lookup_timeout),
        None => lookup_timeout,
    };
    budget.saturating_sub(MARGIN)
}

/// Looks up every target of `mutation` (at most [`LOOKUPS_PER_REVIEW`] at once),
/// digests each as it arrives and drops its data. Every read reflects the writes
/// acknowledged before `arrived` ([`ObjectSource::fetch_for_review`]). Lookups still
/// running at `deadline` count as timed out.
pub async fn observe_all<S: ObjectSource>(
    source: &S,
    digester: &Digester,
    mutation: &Mutation,
    arrived: Instant,
    deadline: Instant,
    metrics: &LookupMetrics,
) -> Vec<Observation> {
    let all: Vec<usize> = (0..mutation.targets.len()).collect();
    let observed = observe_some(source, digester, mutation, &all, arrived, deadline, metrics).await;
    observed.into_iter().map(|(_, observation)| observation).collect()
}

/// [`observe_all`] for the targets at `indices` only: one `(index, observation)` each, in
/// the order of `indices`. Another namespace's object is read only once the workload's own
/// object it would stand in for is known absent (or was not among `indices`): a token
/// names one or the other, and a foreign namespace is not read for nothing.
pub async fn observe_some<S: ObjectSource>(
    source: &S,
    digester: &Digester,
    mutation: &Mutation,
    indices: &[usize],
    arrived: Instant,
    deadline: Instant,
    metrics: &LookupMetrics,
) -> Vec<(usize, Observation)> {
    let across = |i: &usize| mutation.targets.get(*i).is_some_and(|t| t.reach.is_across());
    let (later, first): (Vec<usize>, Vec<usize>) = indices.iter().partition(|i| across(i));
    let at = (arrived, deadline);
    let mut observed = observe_at_once(source, digester, mutation, &first, at, metrics).await;
    let own_exists = |index: usize| {
        let target = mutation.targets.get(index)?;
        let own = target.reach.decided_by(&target.object)?;
        let (_, seen) = observed.iter().find(|(i, _)| mutation.targets[*i].object == own)?;
        exists(seen)
    };
    // The workload's own object exists: the token is one of its keys, and this stands for
    // nothing (`core::meaning`).
    let (unread, later): (Vec<usize>, Vec<usize>) =
        later.into_iter().partition(|&i| own_exists(i) == Some(true));
    let read = observe_at_once(source, digester, mutation, &later, at, metrics).await;
    observed.extend(read);
    observed.extend(unread.into_iter().map(|i| (i, Observation::Absent)));
    let mut ordered: Vec<Option<Observation>> = vec![None; mutation.targets.len()];
    for (index, observation) in observed {
        ordered[index] = Some(observation);
    }
    let timeout = || Observation::Unreadable(LookupError::Timeout.to_string());
    let mut take = |i: usize| ordered.get_mut(i).and_then(Option::take);
    indices.iter().map(|&i| (i, take(i).unwrap_or_else(timeout))).collect()
}

/// The targets at `indices`, read at most [`LOOKUPS_PER_REVIEW`] at once, for a review
/// that arrived at the first instant, until the deadline, the second.
async fn observe_at_once<S: ObjectSource>(
    source: &S,
    digester: &Digester,
    mutation: &Mutation,
    indices: &[usize],
    (arrived, deadline): (Instant, Instant),
    metrics: &LookupMetrics,
) -> Vec<(usize, Observation)> {
    if indices.is_empty() {
        return Vec::new();
    }
    let mut observations: Vec<Option<Observation>> = vec![None; indices.len()];
    // Collected first: a lazy `map` closure here trips the `Send` check on the handler.
    let lookups: Vec<_> = indices
        .iter()
        .enumerate()
        .filter_map(|(slot, &index)| Some((slot, mutation.targets.get(index)?)))
        .map(|(slot, target)| {
            observe_one(source, digester, mutation, metrics, (slot, arrived), target)
        })
        .collect();
    let mut running = futures_util::stream::iter(lookups).buffer_unordered(LOOKUPS_PER_REVIEW);
    while let Ok(Some((slot, observation))) =
        tokio::time::timeout_at(deadline, running.next()).await
    {
        observations[slot] = Some(observation);
    }
    let timed_out = observations.iter().filter(|o| o.is_none()).count();
    for _ in 0..timed_out {
        metrics.count_error(LookupError::Timeout.metric_label());
    }
    let timeout = || Observation::Unreadable(LookupError::Timeout.to_string());
    indices.iter().zip(observations).map(|(&index, o)| (index, o.unwrap_or_else(timeout))).collect()
}

async fn observe_one<S: ObjectSource>(
    source: &S,
    digester: &Digester,
    mutation: &Mutation,
    metrics: &LookupMetrics,
    (index, arrived): (usize, Instant),
    target: &Target,
) -> (usize, Observation) {
    let Some(LookupKey { namespace, object }) = mutation.lookup_key(target) else {
        return (index, mutation.observe(target, digester, Ok(None)));
    };
    let started = Instant::now();
    let found = source.fetch_for_review(namespace, &object, arrived).await;
    metrics.observe(started.elapsed(), found.as_ref().err().map(LookupError::metric_label));
    let found = match &found {
        Ok(content) => Ok(content.as_deref()),
        Err(e) => Err(e.to_string()),
    };
    (index, mutation.observe(target, digester, found))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::kinds::WorkloadKind;
    use crate::core::{Plan, Settings, plan};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Records how many fetches run at once; each takes 10 ms of (paused) time.
    #[derive(Default)]
    struct Counting {
        running: AtomicUsize,
        most: AtomicUsize,
        calls: AtomicUsize,
    }

    impl ObjectSource for Counting {
        async fn fetch(
            &self,
            _: &str,
            _: &ObjectRef,
        ) -> Result<Option<Arc<ObjectContent>>, LookupError> {
            let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            self.calls.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(10)).await;
            self.running.fetch_sub(1, Ordering::SeqCst);
            Ok(None)
        }
    }

    pub(super) fn mutation_with(config_maps: usize) -> Mutation {
        let env_from: Vec<_> = (0..config_maps)
            .map(|i| serde_json::json!({"configMapRef": {"name": format!("cm-{i}")}}))
            .collect();
        let object =
            serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "envFrom": env_from}]}})
            .to_string();
        let mut workload = WorkloadKind::Pod.parse(&object).expect("a Pod");
        workload.namespace = Some("ns".into());
        match plan(workload, &Default::default(), &Settings::default()) {
            Plan::Mutate(mutation) => mutation,
            other => panic!("expected a mutation, got {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn at_most_eight_lookups_at_once_each_object_once() {
        let source = Counting::default();
        let mutation = mutation_with(20);
        let deadline = Instant::now() + Duration::from_secs(1);
        let observations = observe_all(
            &source,
            &Digester::default(),
            &mutation,
            Instant::now(),
            deadline,
            &LookupMetrics::default(),
        )
        .await;
        assert_eq!(observations, vec![Observation::Absent; 20]);
        assert_eq!(source.most.load(Ordering::SeqCst), LOOKUPS_PER_REVIEW);
        assert_eq!(source.calls.load(Ordering::SeqCst), 20);
    }

    #[tokio::test(start_paused = true)]
    async fn lookups_past_the_deadline_are_timeouts() {
        let source = Counting::default();
        let mutation = mutation_with(9);
        // Eight finish at 10 ms; the ninth would finish at 20 ms.
        let deadline = Instant::now() + Duration::from_millis(15);
        let observations = observe_all(
            &source,
            &Digester::default(),
            &mutation,
            Instant::now(),
            deadline,
            &LookupMetrics::default(),
        )
        .await;
        assert_eq!(observations.iter().filter(|o| **o == Observation::Absent).count(), 8);
        assert_eq!(observations[8], Observation::Unreadable("timeout".into()));
    }

    /// Records what is read; has Secret `shared` of namespace `ns` when `own` says so, and
    /// `shared/ca` with consent.
    #[derive(Default)]
    struct Recording {
        own: bool,
        read: std::sync::Mutex<Vec<String>>,
    }

    impl ObjectSource for Recording {
        async fn fetch(
            &self,
            namespace: &str,
            object: &ObjectRef,
        ) -> Result<Option<Arc<ObjectContent>>, LookupError> {
            if let Ok(mut read) = self.read.lock() {
                read.push(format!("{namespace}/{object}"));
            }
            let content = ObjectContent::from_entries([("ca".into(), b"x".to_vec())].into());
            Ok(match (namespace, object.name.as_str()) {
                ("ns", "shared") if self.own => Some(Arc::new(content)),
                ("shared", "ca") => Some(Arc::new(content.with_readable_from(Some("*")))),
                _ => None,
            })
        }
    }

    #[tokio::test]
    async fn another_namespace_is_read_only_where_the_workloads_own_object_is_absent() {
        let object =
            serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p",
            "annotations": {"configsum.dev/track": "secret/shared/ca"}},
            "spec": {"containers": [{"name": "c"}]}})
            .to_string();
        let mut workload = WorkloadKind::Pod.parse(&object).expect("a Pod");
        workload.namespace = Some("ns".into());
        let Plan::Mutate(mutation) = plan(workload, &Default::default(), &Settings::default())
        else {
            panic!("mutated")
        };
        let now = Instant::now();
        let deadline = now + Duration::from_secs(5);
        for own in [true, false] {
            let source = Recording { own, ..Recording::default() };
            let metrics = LookupMetrics::default();
            let observations =
                observe_all(&source, &Digester::default(), &mutation, now, deadline, &metrics)
                    .await;
            let read = source.read.lock().map(|r| r.clone()).unwrap_or_default();
            let digested = observations.iter().map(|o| matches!(o, Observation::Digest(_)));
            if own {
                assert_eq!(read, ["ns/secret/shared"], "the key form: nothing foreign read");
                assert_eq!(digested.collect::<Vec<_>>(), [true, false]);
            } else {
                assert_eq!(read, ["ns/secret/shared", "shared/secret/ca"]);
                assert_eq!(digested.collect::<Vec<_>>(), [false, true]);
            }
        }
    }

    #[test]
    fn budget_follows_the_api_server_timeout() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        assert_eq!(lookup_budget(None, s(2)), ms(1900));
        assert_eq!(lookup_budget(Some(s(10)), s(2)), ms(1900), "--lookup-timeout is the cap");
        assert_eq!(lookup_budget(Some(s(2)), s(5)), ms(900), "timeout - 1s");
        assert_eq!(lookup_budget(Some(s(1)), s(5)), ms(400), "timeout / 2 when larger");
        assert_eq!(lookup_budget(Some(Duration::ZERO), s(2)), Duration::ZERO);
    }

    #[test]
    fn error_labels_are_bounded() {
        assert_eq!(LookupError::Status(503).metric_label(), "server_error");
        assert_eq!(LookupError::Status(429).metric_label(), "throttled");
        assert_eq!(LookupError::Status(418).metric_label(), "unexpected_status");
    }
}
