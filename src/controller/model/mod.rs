//! The controller's vocabulary: the values that travel between the shell (watches, reads,
//! worker, poller) and the pure state — the inbox's [`message::Message`], a workload's key
//! and snapshot, a read's result, a reconciliation's [`work::Work`], what triggered it, the
//! leadership it belongs to, the Events it records. Nothing here imports the state or the
//! shell, so both can import it.

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

/// For the shell's watches, which decode their own light types too.
pub(crate) use dynamic_resource;

pub mod backoff;
pub mod event;
pub mod leadership;
pub mod message;
pub mod notice;
pub mod polled_image;
pub mod reading;
pub mod shard;
pub mod trigger;
pub mod wave_record;
pub mod work;
pub mod workload;
