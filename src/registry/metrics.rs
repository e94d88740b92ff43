//! The registry client's metrics: `configsum_registry_requests_total{registry,outcome}` and
//! `configsum_registry_duration_seconds`, one observation per resolution that went to a
//! registry (results reused from the cache are not counted).
//!
//! `registry` comes from workloads' images, so unlike this crate's other labels it is not from a
//! fixed set: the first [`MAX_REGISTRY_LABELS`] registries seen get their own series, later ones
//! share `other`, so no workload can create series without bound.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use crate::metrics_registry::MetricsRegistry;

/// Distinct `registry` label values before the rest are counted as `other`.
pub const MAX_REGISTRY_LABELS: usize = 32;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    registry: String,
    outcome: &'static str,
}

/// Where the client records; cheap to clone (the series are shared).
#[derive(Clone)]
pub struct RegistryMetrics {
    requests: Family<RequestLabels, Counter>,
    duration: Histogram,
    registries: Arc<Mutex<HashSet<String>>>,
}

impl Default for RegistryMetrics {
    /// Metrics that are recorded but not exposed (tests, or a caller without a metrics listener).
    fn default() -> Self {
        RegistryMetrics {
            requests: Family::default(),
            // 5 ms to ~10 s: a cached token and a near registry answer in milliseconds, a token
            // handshake with a distant one takes hundreds.
            duration: Histogram::new(exponential_buckets(0.005, 2.0, 12)),
            registries: Arc::default(),
        }
    }
}

impl RegistryMetrics {
    pub fn register(registry: &mut MetricsRegistry) -> Self {
        let this = RegistryMetrics::default();
        registry.register(
            "registry_requests",
            "Image resolutions sent to a registry, by registry and outcome",
            this.requests.clone(),
        );
        registry.register(
            "registry_duration_seconds",
            "Time to resolve one image reference at its registry, token handshake included",
            this.duration.clone(),
        );
        this
    }

    /// Records one resolution at `registry` (as in [`super::ImageRef::registry`]).
    pub fn observe(&self, registry: &str, outcome: &'static str, took: Duration) {
        let registry = self.label_for(registry);
        self.requests.get_or_create(&RequestLabels { registry, outcome }).inc();
        self.duration.observe(took.as_secs_f64());
    }

    fn label_for(&self, registry: &str) -> String {
        let mut seen = self.registries.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if seen.contains(registry) {
            registry.to_owned()
        } else if seen.len() < MAX_REGISTRY_LABELS {
            seen.insert(registry.to_owned());
            registry.to_owned()
        } else {
            "other".to_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposes_the_names_and_caps_the_registry_label() {
        let mut metrics = MetricsRegistry::new();
        let registry_metrics = RegistryMetrics::register(&mut metrics);
        registry_metrics.observe("docker.io", "digest", Duration::from_millis(40));
        registry_metrics.observe("docker.io", "digest", Duration::from_millis(40));
        registry_metrics.observe("ghcr.io", "unauthorized", Duration::from_millis(40));
        for i in 0..MAX_REGISTRY_LABELS {
            registry_metrics.observe(
                &format!("r{i}.example.com"),
                "unknown",
                Duration::from_millis(1),
            );
        }
        let text = metrics.encode();
        for needle in [
            r#"configsum_registry_requests_total{registry="docker.io",outcome="digest"} 2"#,
            r#"configsum_registry_requests_total{registry="ghcr.io",outcome="unauthorized"} 1"#,
            r#"configsum_registry_requests_total{registry="other",outcome="unknown"} 2"#,
            "configsum_registry_duration_seconds_count 35",
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
        assert!(!text.contains(&format!("r{}.example.com", MAX_REGISTRY_LABELS - 1)));
    }
}
