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
pub mod images;
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
pub mod trigger;
pub mod watches;
pub mod worker;
pub mod workload;

pub use run::run;

/// The field manager of every write the controller makes (its patches, Events and Lease), so
/// that `metadata.managedFields` names configsum and GitOps tools can ignore exactly its fields
/// (docs/gitops.md).
pub const FIELD_MANAGER: &str = "configsum";

/// `PatchParams` with configsum's field manager.
pub fn patch_params() -> kube::api::PatchParams {
    kube::api::PatchParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..Default::default() }
}

/// `PostParams` with configsum's field manager.
pub fn post_params() -> kube::api::PostParams {
    kube::api::PostParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..Default::default() }
}
