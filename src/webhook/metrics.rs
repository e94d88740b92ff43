//! The webhook's metrics (docs/metrics.md): reviews answered and how long
//! they took, the serving certificate, open connections, and the lookups and
//! image resolutions the reviews made. Label values come from fixed sets so
//! that no request can create new series (`registry` is capped instead).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use crate::lookup::{CoalescingMetrics, LookupMetrics};
use crate::metrics_registry::MetricsRegistry;
use crate::registry::RegistryMetrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AdmissionLabels {
    kind: &'static str,
    operation: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// Where `configsum serve` records; cheap to clone (the series are shared).
#[derive(Clone)]
pub struct WebhookMetrics {
    certificate_reloads: Family<OutcomeLabels, Counter>,
    certificate_expiry: Gauge,
    admissions: Family<AdmissionLabels, Counter>,
    admission_duration: Histogram,
    connections: Gauge,
    /// The reviews' ConfigMap and Secret reads.
    pub lookups: LookupMetrics,
    /// How the reviews' lookups shared reads.
    pub reads: CoalescingMetrics,
    /// The reviews' image resolutions, handed to the registry client.
    pub registries: RegistryMetrics,
}

impl Default for WebhookMetrics {
    /// Metrics that are recorded but not exposed (tests).
    fn default() -> Self {
        WebhookMetrics {
            certificate_reloads: Family::default(),
            certificate_expiry: Gauge::default(),
            admissions: Family::default(),
            // 0.5 ms to ~4 s: the pure path is sub-millisecond, lookups take longer.
            admission_duration: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
            connections: Gauge::default(),
            lookups: LookupMetrics::default(),
            reads: CoalescingMetrics::default(),
            registries: RegistryMetrics::default(),
        }
    }
}

impl WebhookMetrics {
    pub fn register(registry: &mut MetricsRegistry) -> Self {
        let mut this = WebhookMetrics::default();
        registry.register("admissions", "Admission reviews answered", this.admissions.clone());
        registry.register(
            "admission_duration_seconds",
            "Time from request to answer",
            this.admission_duration.clone(),
        );
        this.lookups = LookupMetrics::register(registry);
        this.reads = CoalescingMetrics::register(registry);
        registry.register(
            "certificate_reloads",
            "Serving certificate changes seen on disk, by outcome (loaded or rejected)",
            this.certificate_reloads.clone(),
        );
        registry.register(
            "certificate_expiry_timestamp_seconds",
            "notAfter of the serving certificate in use, as a Unix timestamp",
            this.certificate_expiry.clone(),
        );
        registry.register(
            "connections",
            "Connections open on the TLS listener (the cap is 1,024)",
            this.connections.clone(),
        );
        this.registries = RegistryMetrics::register(registry);
        this
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposes_the_spec_names() {
        let mut registry = MetricsRegistry::new();
        let metrics = WebhookMetrics::register(&mut registry);
        metrics.observe_admission("Deployment", "CREATE", "mutated", Duration::from_millis(1));
        metrics.lookups.observe(Duration::from_millis(2), Some("timeout"));
        let text = registry.encode();
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
