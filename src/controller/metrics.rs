//! The controller's metrics (docs/controller.md), beside the lookup metrics it shares
//! with the webhook.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use crate::metrics::Metrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone)]
pub struct ControllerMetrics {
    patches: Family<OutcomeLabels, Counter>,
    pub queue_depth: Gauge,
    reaction: Histogram,
    pub watched_objects: Gauge,
}

impl ControllerMetrics {
    pub fn register(metrics: &mut Metrics) -> Self {
        let registry = metrics.registry_mut();
        let patches = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "controller_patches",
            "Workload reconciliations: patched, unchanged, conflict (retries exhausted) or failed",
            patches.clone(),
        );
        let queue_depth = Gauge::default();
        registry.register(
            "controller_queue_depth",
            "Workloads waiting for their window, the rate limit or a patch",
            queue_depth.clone(),
        );
        // 0.1 s to ~100 s: the coalescing window dominates.
        let reaction = Histogram::new(exponential_buckets(0.1, 2.0, 11));
        registry.register(
            "controller_reaction_seconds",
            "From the first change of a burst to the workload's patch",
            reaction.clone(),
        );
        let watched_objects = Gauge::default();
        registry.register(
            "controller_watched_objects",
            "Distinct ConfigMaps and Secrets tracked by workloads",
            watched_objects.clone(),
        );
        ControllerMetrics { patches, queue_depth, reaction, watched_objects }
    }

    pub fn count(&self, outcome: &'static str) {
        self.patches.get_or_create(&OutcomeLabels { outcome }).inc();
    }

    pub fn reacted(&self, seconds: f64) {
        self.reaction.observe(seconds);
    }
}
