//! The lookup metrics, which the webhook and the controller both set: how long
//! each ConfigMap or Secret read took, and why reads failed.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use crate::metrics_registry::MetricsRegistry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// Where lookups record; cheap to clone (the series are shared).
#[derive(Clone)]
pub struct LookupMetrics {
    duration: Histogram,
    errors: Family<ReasonLabels, Counter>,
}

impl Default for LookupMetrics {
    /// Metrics that are recorded but not exposed (tests).
    fn default() -> Self {
        LookupMetrics {
            // 0.5 ms to ~4 s.
            duration: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
            errors: Family::default(),
        }
    }
}

impl LookupMetrics {
    pub fn register(registry: &mut MetricsRegistry) -> Self {
        let this = LookupMetrics::default();
        registry.register(
            "lookup_duration_seconds",
            "Time to read one ConfigMap or Secret",
            this.duration.clone(),
        );
        registry.register("lookup_errors", "Lookups that failed, by reason", this.errors.clone());
        this
    }

    /// Records one finished lookup, failed with `error` if set.
    pub fn observe(&self, took: Duration, error: Option<&'static str>) {
        self.duration.observe(took.as_secs_f64());
        if let Some(reason) = error {
            self.count_error(reason);
        }
    }

    /// Counts a failed lookup without a duration (one cut off by the deadline).
    pub fn count_error(&self, reason: &'static str) {
        self.errors.get_or_create(&ReasonLabels { reason }).inc();
    }
}
