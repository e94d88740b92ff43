//! [`MetricsRegistry`]: the process's metrics registry, served as `/metrics` by
//! the admin listener (`process::admin`). A leaf: each part registers the
//! series it sets (`webhook::WebhookMetrics`,
//! `lookup::LookupMetrics`, `registry::RegistryMetrics`,
//! `controller::metrics::ControllerMetrics`), so a command's `/metrics`
//! carries exactly the series of the parts it runs.

use prometheus_client::encoding::text::encode;
use prometheus_client::registry::{Metric, Registry};

/// Every series of one process, named `configsum_*`.
pub struct MetricsRegistry(Registry);

impl Default for MetricsRegistry {
    fn default() -> Self {
        MetricsRegistry(Registry::with_prefix("configsum"))
    }
}

impl MetricsRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Every series carries `name="value"` too: the controller's `shard`, so that the
    /// series of N shards scraped together can be told apart.
    pub fn labelled(name: &'static str, value: String) -> Self {
        let label = std::iter::once((name.into(), value.into()));
        MetricsRegistry(Registry::with_prefix_and_labels("configsum", label))
    }

    /// Registers `metric` as `configsum_<name>`.
    pub fn register(&mut self, name: &str, help: &str, metric: impl Metric) {
        self.0.register(name, help, metric);
    }

    /// The registry in the Prometheus/OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.0);
        out
    }
}
