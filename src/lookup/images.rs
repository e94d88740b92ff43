//! Resolving a review's tracked images: the pull credentials of the pod and
//! its ServiceAccount, read fresh from the workload's namespace, then the
//! registry, at most [`LOOKUPS_PER_REVIEW`] at once and within the review's
//! deadline, alongside the object lookups.

use futures_util::StreamExt as _;
use tokio::time::Instant;

use super::{LOOKUPS_PER_REVIEW, LookupError, ObjectSource};
use crate::core::Mutation;
use crate::core::inputs::image::ImageObservation;
use crate::registry::{ImageRef, RegistryClient, Resolution};

/// One observation per target of `mutation.images`, in their order.
pub async fn resolve_all<S: ObjectSource>(
    source: &S,
    registry: &RegistryClient,
    mutation: &Mutation,
    deadline: Instant,
) -> Vec<ImageObservation> {
    let targets = mutation.images.targets();
    if targets.is_empty() {
        return Vec::new();
    }
    let timed_out = || ImageObservation::Failed(LookupError::Timeout.to_string());
    let (secrets, service_account) = mutation.images.credentials();
    let credentials = source.pull_credentials(&mutation.namespace, secrets, service_account);
    let credentials = match tokio::time::timeout_at(deadline, credentials).await {
        Ok(Ok(credentials)) => credentials,
        Ok(Err(e)) => {
            let failed = ImageObservation::Failed(format!("pull secrets unreadable: {e}"));
            return vec![failed; targets.len()];
        }
        Err(_) => return vec![timed_out(); targets.len()],
    };
    let credentials = &credentials;
    let resolutions: Vec<_> = targets
        .iter()
        .enumerate()
        .map(|(index, target)| async move {
            let observation = match ImageRef::parse(&target.reference) {
                Ok(image) => observation(registry.resolve(&image, credentials).await),
                Err(_) => ImageObservation::Failed("not a valid image reference".to_owned()),
            };
            (index, observation)
        })
        .collect();
    let mut observations: Vec<Option<ImageObservation>> = vec![None; targets.len()];
    let mut running = futures_util::stream::iter(resolutions).buffer_unordered(LOOKUPS_PER_REVIEW);
    while let Ok(Some((index, observation))) =
        tokio::time::timeout_at(deadline, running.next()).await
    {
        observations[index] = Some(observation);
    }
    observations.into_iter().map(|o| o.unwrap_or_else(timed_out)).collect()
}

/// What the core makes of a registry's answer.
fn observation(resolution: Resolution) -> ImageObservation {
    match resolution {
        Resolution::Digest(digest) => ImageObservation::Digest(digest.as_str().to_owned()),
        Resolution::Unknown => ImageObservation::Unknown,
        Resolution::Failed(failure) => ImageObservation::Failed(failure.to_string()),
        // Targets are always `<repository>:<tag>`; a pin is kept as it is.
        Resolution::Pinned(_) => ImageObservation::Keep,
    }
}
