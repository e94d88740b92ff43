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

/// `kube::Resource` for a type the controller decodes from its own light wire form, with
/// its `ObjectMeta` in a `meta` field and its API resource known at run time; `metadata`
/// asks kube for `PartialObjectMetadata` (no data crosses the wire).
macro_rules! dynamic_resource {
    ($type:ty, metadata: $metadata:expr) => {
        impl kube::Resource for $type {
            type DynamicType = kube::api::ApiResource;
            type Scope = kube::core::DynamicResourceScope;

            fn metadata_api() -> bool {
                $metadata
            }
            fn kind(dt: &kube::api::ApiResource) -> std::borrow::Cow<'_, str> {
                dt.kind.as_str().into()
            }
            fn group(dt: &kube::api::ApiResource) -> std::borrow::Cow<'_, str> {
                dt.group.as_str().into()
            }
            fn version(dt: &kube::api::ApiResource) -> std::borrow::Cow<'_, str> {
                dt.version.as_str().into()
            }
            fn api_version(dt: &kube::api::ApiResource) -> std::borrow::Cow<'_, str> {
                dt.api_version.as_str().into()
            }
            fn plural(dt: &kube::api::ApiResource) -> std::borrow::Cow<'_, str> {
                dt.plural.as_str().into()
            }
            fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.meta
            }
            fn meta_mut(
                &mut self,
            ) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.meta
            }
        }
    };
}

pub mod api;
#[cfg(test)]
mod fake_api;
pub mod lease;
pub mod metrics;
pub mod model;
pub mod poller;
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
