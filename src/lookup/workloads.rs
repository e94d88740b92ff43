//! Reading the workloads a review's workload tracks (workloads that roll together): each one's
//! pod template, fresh from the source, digested as it arrives, at most [`LOOKUPS_PER_REVIEW`]
//! at once and within the review's deadline, alongside the object lookups.

use futures_util::StreamExt as _;
use tokio::time::Instant;

use super::{LOOKUPS_PER_REVIEW, LookupError, ObjectSource};
use crate::core::{AnnotationDomain, Mutation, Observation};

/// One observation per tracked workload of `mutation`, in order.
pub async fn observe_workloads<S: ObjectSource>(
    source: &S,
    mutation: &Mutation,
    domain: &AnnotationDomain,
    deadline: Instant,
) -> Vec<Option<Observation>> {
    let targets = &mutation.workloads;
    if targets.is_empty() {
        return Vec::new();
    }
    let reads: Vec<_> = targets
        .iter()
        .enumerate()
        .map(|(index, target)| async move {
            let read = source.fetch_template(&mutation.namespace, target.kind, &target.name).await;
            let found = read.as_ref().map(Option::as_ref).map_err(ToString::to_string);
            (index, mutation.observe_workload(found, domain))
        })
        .collect();
    let mut observations: Vec<Option<Observation>> = vec![None; targets.len()];
    let mut running = futures_util::stream::iter(reads).buffer_unordered(LOOKUPS_PER_REVIEW);
    while let Ok(Some((index, observation))) =
        tokio::time::timeout_at(deadline, running.next()).await
    {
        observations[index] = Some(observation);
    }
    let timed_out = || Some(Observation::Unreadable(LookupError::Timeout.to_string()));
    observations.into_iter().map(|o| o.or_else(timed_out)).collect()
}
