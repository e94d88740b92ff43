//! `configsum controller`: rolls workloads when only their ConfigMaps or
//! Secrets change, with the webhook's own rules and digests.
//!
//! The spine is one event loop over a sans-I/O `state`. Everything reports
//! to it through one inbox (`message`): the `watches` (each applied to an
//! index by a `watch` handle, which owns the relist protocol), the object
//! `reads`, the `worker` and the image `poller`. The state keeps the
//! reference `index`, the tracked `objects`, the `images` index, the
//! `tracked_workloads` (workloads that roll together) and the `schedule` (the window and minimum interval of `queue`, retries with
//! `backoff`, the leadership term); its `tick` hands out reads, work and poll
//! rounds. The worker `reconcile`s through the token bucket and records an
//! `event`, through the `api` seam; only the holder of the `lease` patches.
//! `run` wires it together.

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
pub mod backoff;
pub mod event;
#[cfg(test)]
mod fake_api;
pub mod flap_guard;
pub mod images;
pub mod index;
pub mod lease;
pub mod message;
pub mod metrics;
pub mod objects;
pub mod queue;
pub mod reads;
pub mod reconcile;
mod run;
pub mod schedule;
pub mod state;
pub mod tracked_workloads;
pub mod trigger;
pub mod watch;
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
