//! The controller's metrics (docs/controller.md): its own, and the lookup and
//! registry metrics it sets as the webhook does. Nothing else is registered,
//! so its `/metrics` carries only series it sets.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use tokio::time::Instant;

use super::model::work::{Due, ReconcileResult, Reconciled};
use crate::core::verdict::Verdict;
use crate::lookup::LookupMetrics;
use crate::notify::NotificationMetrics;
use crate::process::MetricsRegistry;
use crate::registry::RegistryMetrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabels {
    verdict: &'static str,
}

#[derive(Clone)]
pub struct ControllerMetrics {
    patches: Family<OutcomeLabels, Counter>,
    workloads: Family<VerdictLabels, Gauge>,
    /// Workloads the flap guard holds.
    pub held_workloads: Gauge,
    pub queue_depth: Gauge,
    /// Changes halted by a failed rollout.
    pub halted_changes: Gauge,
    waves: Family<OutcomeLabels, Counter>,
    wave_seconds: Histogram,
    lists: Family<ResourceLabels, Counter>,
    reaction: Histogram,
    pub watched_objects: Gauge,
    /// The reconciliations' ConfigMap and Secret reads.
    pub lookups: LookupMetrics,
    /// The image poller's resolutions, handed to its registry client.
    pub registries: RegistryMetrics,
    /// Notices per `--notify-config` target and outcome.
    pub notifications: NotificationMetrics,
}

impl ControllerMetrics {
    pub fn register(registry: &mut MetricsRegistry) -> Self {
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
        let halted_changes = Gauge::default();
        registry.register(
            "controller_halted_changes",
            "Changes halted by a failed rollout: the workloads behind them wait",
            halted_changes.clone(),
        );
        let waves = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "controller_waves",
            "Waves of a change's fan-out that ended: completed, failed (a rollout failed) or timeout",
            waves.clone(),
        );
        // 1 s to ~4.5 h: a wave waits for rollouts, up to --wave-timeout.
        let wave_seconds = Histogram::new(exponential_buckets(1.0, 2.0, 15));
        registry.register(
            "controller_wave_seconds",
            "From a wave's release to its end (completed, failed or timeout)",
            wave_seconds.clone(),
        );
        let lists = Family::<ResourceLabels, Counter>::default();
        registry.register(
            "controller_watch_lists",
            "Complete lists applied per watched resource: each watch's first, then one per relist after its watch expired",
            lists.clone(),
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
        let workloads = Family::<VerdictLabels, Gauge>::default();
        registry.register(
            "controller_workloads",
            "Watched workloads by verdict: current, stale, first-observation, opted-out, controller-owned, not-rolling, held, unknown",
            workloads.clone(),
        );
        let held_workloads = Gauge::default();
        registry.register(
            "controller_held_workloads",
            "Workloads the flap guard stopped rolling for an object or image that rolled them too often",
            held_workloads.clone(),
        );
        ControllerMetrics {
            patches,
            workloads,
            held_workloads,
            queue_depth,
            halted_changes,
            waves,
            wave_seconds,
            lists,
            reaction,
            watched_objects,
            lookups: LookupMetrics::register(registry),
            registries: RegistryMetrics::register(registry),
            notifications: NotificationMetrics::register(registry),
        }
    }

    /// A wave ended.
    pub fn wave(&self, outcome: &'static str, took: std::time::Duration) {
        self.waves.get_or_create(&OutcomeLabels { outcome }).inc();
        self.wave_seconds.observe(took.as_secs_f64());
    }

    pub fn listed(&self, resource: &'static str) {
        self.lists.get_or_create(&ResourceLabels { resource }).inc();
    }

    pub fn count(&self, outcome: &'static str) {
        self.patches.get_or_create(&OutcomeLabels { outcome }).inc();
    }

    /// Sets the workloads gauge: every verdict, those not counted at 0; and the held
    /// workloads gauge, which is the `held` count.
    pub fn set_verdicts(&self, counts: &[(Verdict, usize)]) {
        for verdict in Verdict::ALL {
            let count = counts.iter().find(|(v, _)| *v == verdict).map_or(0, |(_, n)| *n);
            let count = i64::try_from(count).unwrap_or(i64::MAX);
            let labels = VerdictLabels { verdict: verdict.as_str() };
            self.workloads.get_or_create(&labels).set(count);
            if verdict == Verdict::Held {
                self.held_workloads.set(count);
            }
        }
    }

    pub fn reacted(&self, seconds: f64) {
        self.reaction.observe(seconds);
    }

    /// Counts a reconciliation's outcome, and for a patch the time since its window opened.
    pub fn reconciled(&self, due: &Due, result: &ReconcileResult, now: Instant) {
        match result {
            Ok(Reconciled::DryRun) => self.count("dry_run"),
            Ok(Reconciled::Patched { .. }) => {
                self.count("patched");
                self.reacted(now.saturating_duration_since(due.opened).as_secs_f64());
            }
            Ok(Reconciled::Unchanged | Reconciled::Gone) => self.count("unchanged"),
            // Not an outcome yet: reconciled again on the newer snapshot.
            Ok(Reconciled::NotLeading | Reconciled::Conflicted { .. }) => {}
            Err(e) => self.count(e.metric_label()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_series_the_controller_sets_are_exposed() {
        let mut registry = MetricsRegistry::new();
        let metrics = ControllerMetrics::register(&mut registry);
        metrics.count("patched");
        metrics.set_verdicts(&[(Verdict::Stale, 2)]);
        metrics.listed("secrets");
        metrics.wave("completed", std::time::Duration::from_secs(3));
        let took = std::time::Duration::from_millis(2);
        metrics.lookups.observe(took, Some("timeout"));
        metrics.registries.observe("ghcr.io", "digest", took);
        metrics.notifications.count("chat", crate::notify::metrics::Outcome::Dropped);
        let text = registry.encode();
        for needle in [
            r#"configsum_controller_patches_total{outcome="patched"} 1"#,
            "configsum_controller_queue_depth ",
            r#"configsum_controller_watch_lists_total{resource="secrets"} 1"#,
            "configsum_controller_reaction_seconds_count 0",
            "configsum_controller_watched_objects ",
            r#"configsum_controller_workloads{verdict="stale"} 2"#,
            r#"configsum_controller_workloads{verdict="held"} 0"#,
            "configsum_controller_held_workloads 0",
            "configsum_controller_halted_changes 0",
            r#"configsum_controller_waves_total{outcome="completed"} 1"#,
            "configsum_controller_wave_seconds_count 1",
            r#"configsum_controller_workloads{verdict="halted"} 0"#,
            "configsum_lookup_duration_seconds_count 1",
            r#"configsum_lookup_errors_total{reason="timeout"} 1"#,
            r#"configsum_registry_requests_total{registry="ghcr.io",outcome="digest"} 1"#,
            "configsum_registry_duration_seconds_count 1",
            r#"configsum_controller_notifications_total{target="chat",outcome="dropped"} 1"#,
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
        for webhook_only in ["admission", "certificate", "connections"] {
            assert!(
                !text.contains(&format!("configsum_{webhook_only}")),
                "{webhook_only}:\n{text}"
            );
        }
    }
}
