//! Prometheus metrics (docs/flags.md), exposed on the metrics listener. Label values
//! come from fixed sets so that no request can create new series.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AdmissionLabels {
    kind: &'static str,
    operation: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

pub struct Metrics {
    registry: Registry,
    certificate_reloads: Family<OutcomeLabels, Counter>,
    certificate_expiry: Gauge,
    admissions: Family<AdmissionLabels, Counter>,
    admission_duration: Histogram,
    lookup_duration: Histogram,
    lookup_errors: Family<ReasonLabels, Counter>,
    connections: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("configsum");
        let admissions = Family::<AdmissionLabels, Counter>::default();
        registry.register("admissions", "Admission reviews answered", admissions.clone());
        // 0.5 ms to ~4 s: the pure path is sub-millisecond, lookups take longer.
        let admission_duration = Histogram::new(exponential_buckets(0.0005, 2.0, 14));
        registry.register(
            "admission_duration_seconds",
            "Time from request to answer",
            admission_duration.clone(),
        );
        let lookup_duration = Histogram::new(exponential_buckets(0.0005, 2.0, 14));
        registry.register(
            "lookup_duration_seconds",
            "Time to read one ConfigMap or Secret",
            lookup_duration.clone(),
        );
        let lookup_errors = Family::<ReasonLabels, Counter>::default();
        registry.register("lookup_errors", "Lookups that failed, by reason", lookup_errors.clone());
        let certificate_reloads = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "certificate_reloads",
            "Serving certificate changes seen on disk, by outcome (loaded or rejected)",
            certificate_reloads.clone(),
        );
        let certificate_expiry = Gauge::default();
        registry.register(
            "certificate_expiry_timestamp_seconds",
            "notAfter of the serving certificate in use, as a Unix timestamp",
            certificate_expiry.clone(),
        );
        let connections = Gauge::default();
        registry.register(
            "connections",
            "Connections open on the TLS listener (the cap is 1,024)",
            connections.clone(),
        );
        Metrics {
            registry,
            connections,
            certificate_reloads,
            certificate_expiry,
            admissions,
            admission_duration,
            lookup_duration,
            lookup_errors,
        }
    }

    /// Records one answered review. `kind` and `operation` must come from fixed sets.
    pub fn observe_admission(
        &self,
        kind: &'static str,
        operation: &'static str,
        outcome: &'static str,
        took: Duration,
    ) {
        self.admissions.get_or_create(&AdmissionLabels { kind, operation, outcome }).inc();
        self.admission_duration.observe(took.as_secs_f64());
    }

    /// Records one finished lookup, failed with `error` if set.
    pub fn observe_lookup(&self, took: Duration, error: Option<&'static str>) {
        self.lookup_duration.observe(took.as_secs_f64());
        if let Some(reason) = error {
            self.count_lookup_error(reason);
        }
    }

    /// Counts a failed lookup without a duration (one cut off by the deadline).
    pub fn count_lookup_error(&self, reason: &'static str) {
        self.lookup_errors.get_or_create(&ReasonLabels { reason }).inc();
    }

    pub fn connection_opened(&self) {
        self.connections.inc();
    }

    pub fn connection_closed(&self) {
        self.connections.dec();
    }

    pub fn count_certificate_reload(&self, loaded: bool) {
        let outcome = if loaded { "loaded" } else { "rejected" };
        self.certificate_reloads.get_or_create(&OutcomeLabels { outcome }).inc();
    }

    pub fn set_certificate_expiry(&self, unix_seconds: Option<i64>) {
        self.certificate_expiry.set(unix_seconds.unwrap_or(0));
    }

    /// For components that register their own metrics (the controller).
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// The registry in the Prometheus/OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposes_the_spec_names() {
        let metrics = Metrics::new();
        metrics.observe_admission("Deployment", "CREATE", "mutated", Duration::from_millis(1));
        metrics.observe_lookup(Duration::from_millis(2), Some("timeout"));
        let text = metrics.encode();
        for needle in [
            r#"configsum_admissions_total{kind="Deployment",operation="CREATE",outcome="mutated"} 1"#,
            "configsum_admission_duration_seconds_count 1",
            "configsum_lookup_duration_seconds_count 1",
            r#"configsum_lookup_errors_total{reason="timeout"} 1"#,
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
    }
}
