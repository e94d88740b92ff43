//! `configsum controller`: rolls workloads when only their ConfigMaps or
//! Secrets change, with the webhook's own rules and digests.
//!
//! Three floors, each importing only the ones below it:
//!
//! - `model`: the vocabulary — the inbox's message, a workload's key and snapshot, a read's
//!   result, a reconciliation's work and outcome, triggers, Events, leadership.
//! - `state`: the sans-I/O event-loop state — a router over indexes that each own one
//!   concern (namespaces in scope, workloads, what they track, tracked objects, images,
//!   workloads that roll together, the work queue, the flap guard), driven by the caller's
//!   clock.
//! - the shell, here: the `watches`, the object `reads`, the `worker` that `reconcile`s, the
//!   image `poller` and the `lease` elector each report to the one inbox; the `api` seam
//!   talks to the API server; `run` wires it together. Only the Lease holder patches.

pub mod api;
#[cfg(test)]
mod fake_api;
pub mod lease;
pub mod metrics;
pub mod model;
pub mod poller;
pub mod provider_class_watch;
pub mod reads;
pub mod reconcile;
mod run;
pub mod state;
pub mod watches;
pub mod worker;

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
