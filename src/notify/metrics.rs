//! `configsum_controller_notifications_total{target,outcome}`: each notice a target wanted,
//! once it is `sent`, `failed` (every attempt failed) or `dropped` (its queue was full).
//! `target` is the target's name from the notify file, never its URL.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::metrics_registry::MetricsRegistry;

/// How a notice's delivery to one target ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    Sent,
    Failed,
    Dropped,
}

impl Outcome {
    pub const ALL: [Outcome; 3] = [Outcome::Sent, Outcome::Failed, Outcome::Dropped];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Sent => "sent",
            Outcome::Failed => "failed",
            Outcome::Dropped => "dropped",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Labels {
    target: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Default)]
pub struct NotificationMetrics {
    notifications: Family<Labels, Counter>,
}

impl NotificationMetrics {
    pub fn register(registry: &mut MetricsRegistry) -> Self {
        let metrics = NotificationMetrics::default();
        registry.register(
            "controller_notifications",
            "Notices per notify target: sent, failed (every attempt failed) or dropped (its queue was full)",
            metrics.notifications.clone(),
        );
        metrics
    }

    pub fn count(&self, target: &str, outcome: Outcome) {
        self.counter(target, outcome).inc();
    }

    /// Every outcome of `target` at 0, so that its series exist before the first notice.
    pub fn declare(&self, target: &str) {
        for outcome in Outcome::ALL {
            self.counter(target, outcome);
        }
    }

    pub fn get(&self, target: &str, outcome: Outcome) -> u64 {
        self.counter(target, outcome).get()
    }

    fn counter(&self, target: &str, outcome: Outcome) -> Counter {
        let labels = Labels { target: target.to_owned(), outcome: outcome.as_str() };
        self.notifications.get_or_create(&labels).clone()
    }
}
