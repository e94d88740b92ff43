//! `configsum controller`: rolls workloads when only their ConfigMaps or
//! Secrets change (SPEC §9), with the webhook's own rules and digests.

pub mod index;
pub mod lease;
pub mod metrics;
pub mod queue;
pub mod reconcile;
mod run;

pub use run::{ControllerError, metrics_router, run};

/// What the controller asks of the API server cluster-wide, for its RBAC
/// (SPEC §9): (API group, resource, verbs).
pub const CLUSTER_PERMISSIONS: &[(&str, &str, &[&str])] = &[
    ("", "namespaces", &["list", "watch"]),
    ("apps", "deployments", &["list", "watch", "patch"]),
    ("apps", "statefulsets", &["list", "watch", "patch"]),
    ("apps", "daemonsets", &["list", "watch", "patch"]),
    ("apps", "replicasets", &["list", "watch", "patch"]),
    ("argoproj.io", "rollouts", &["list", "watch", "patch"]),
    ("", "configmaps", &["get", "list", "watch"]),
    ("", "secrets", &["get", "list", "watch"]),
    ("", "events", &["create"]),
];

/// On its own Lease, in its own namespace: `create`, then `get` and `update` by name.
pub const LEASE_VERBS: &[&str] = &["create", "get", "update"];
