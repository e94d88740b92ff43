//! The one "observe" step between the core's plan and its decision, for the webhook and the
//! controller alike: the objects a plan tracks, the images behind its tags, the workloads it
//! rolls with and the SecretProviderClasses it mounts, observed side by side within one deadline. Each command says where observations come from by implementing
//! [`Inputs`]; render and the tests observe from memory with `core::review`.

use std::future::Future;

use crate::core::inputs::image::ImageObservation;
use crate::core::{Mutation, Observation, Observed};

/// Where a command's observations come from.
pub trait Inputs: Sync {
    /// One observation per target of `mutation`, in order (lookups and digests).
    fn objects(&self, mutation: &Mutation) -> impl Future<Output = Vec<Observation>> + Send;

    /// One observation per tracked image of `mutation`, in order; none where it tracks none.
    fn images(&self, mutation: &Mutation) -> impl Future<Output = Vec<ImageObservation>> + Send;

    /// One observation per tracked workload of `mutation`, in order; `None` keeps its
    /// annotation as it is.
    fn workloads(
        &self,
        mutation: &Mutation,
    ) -> impl Future<Output = Vec<Option<Observation>>> + Send;

    /// One observation per tracked SecretProviderClass of `mutation`, in order; `None`, or
    /// none at all, keeps its annotation as it is.
    fn classes(
        &self,
        mutation: &Mutation,
    ) -> impl Future<Output = Vec<Option<Observation>>> + Send {
        let _ = mutation;
        async { Vec::new() }
    }
}

/// Observes the objects, the images and the workloads of `mutation` concurrently.
pub async fn observe(mutation: &Mutation, inputs: &impl Inputs) -> Observed {
    let (objects, images, workloads, classes) = tokio::join!(
        inputs.objects(mutation),
        inputs.images(mutation),
        inputs.workloads(mutation),
        inputs.classes(mutation)
    );
    Observed { objects, images, workloads, classes }
}
