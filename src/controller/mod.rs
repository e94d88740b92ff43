//! `configsum controller`: rolls workloads when only their ConfigMaps or
//! Secrets change, with the webhook's own rules and digests.
//!
//! `watches` feed the event loop's `state` (scope, the reference `index`,
//! tracked `objects` and their reads, `relist` bookkeeping); `schedule`
//! decides when each workload is due (the window and minimum interval of
//! `queue`, retries with `backoff`, the leadership term) and hands it to the
//! `worker`, which `reconcile`s it through the token bucket and records an
//! `event`; only the holder of the `lease` patches. `run` wires it together.

pub mod backoff;
pub mod event;
pub mod index;
pub mod lease;
pub mod metrics;
pub mod objects;
pub mod queue;
pub mod reconcile;
pub mod relist;
mod run;
pub mod schedule;
pub mod state;
pub mod watches;
pub mod worker;
pub mod workload;

pub use run::{ControllerError, run};

/// What the controller asks of the API server cluster-wide, for its RBAC
/// (API group, resource, verbs).
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
