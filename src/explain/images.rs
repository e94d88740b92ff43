//! What registries say of a workload's tracked tags now, asked as the webhook asks them: with
//! the pull secrets of the pod and its ServiceAccount (from the cluster; none offline), within
//! `--registry-timeout` each and [`BUDGET`] in all. A failure is named in the answer's
//! `unread`, never what a credential holds.

use std::time::Duration;

use super::source::Source;
use crate::config::ExplainArgs;
use crate::core::Mutation;
use crate::core::inputs::image::ImageObservation;
use crate::lookup::resolve_all;
use crate::registry::{RegistryClient, RegistryMetrics};
use crate::user_agent::Caller;

/// The most time spent on a workload's images.
const BUDGET: Duration = Duration::from_secs(10);

/// One observation per tracked image of `plan`, in order.
pub async fn resolve(
    args: &ExplainArgs,
    source: &Source,
    plan: &Mutation,
    unread: &mut Vec<String>,
) -> Result<Vec<ImageObservation>, String> {
    let targets = plan.images.targets();
    if targets.is_empty() {
        return Ok(Vec::new());
    }
    let registry =
        RegistryClient::new(args.registries.config(Caller::Explain), RegistryMetrics::default())
            .map_err(|e| format!("cannot build the registry client: {e}"))?;
    let deadline = tokio::time::Instant::now() + BUDGET;
    let observations = match source {
        Source::Files(files) => resolve_all(&files.objects, &registry, plan, deadline).await,
        Source::Cluster(cluster) => resolve_all(cluster.source(), &registry, plan, deadline).await,
    };
    for (target, observation) in targets.iter().zip(&observations) {
        let why = match observation {
            ImageObservation::Unknown => "the registry does not know this tag".to_owned(),
            ImageObservation::Failed(why) => why.clone(),
            ImageObservation::Digest(_) | ImageObservation::Keep => continue,
        };
        unread.push(format!("{} ({}): {why}", target.container, target.reference));
    }
    Ok(observations)
}
