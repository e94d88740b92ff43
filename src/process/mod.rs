//! What `configsum serve` and `configsum controller` share as processes:
//! shutdown signals, the plain-HTTP admin listener with its readiness and
//! metrics registry,
//! loading the Secret-digest keys and the open-file limit.

pub mod admin;
pub mod digest_keys;
pub mod metrics;
pub mod open_files;
pub mod readiness;
pub mod signals;

pub use admin::{BindError, admin_router, bind, serve_admin};
pub use digest_keys::{KeyFileError, load_digest_keys};
pub use metrics::MetricsRegistry;
pub use open_files::raise_open_file_limit;
pub use readiness::Readiness;
pub use signals::ShutdownSignals;

/// configsum's own namespace: `POD_NAMESPACE`, else `configsum-system`.
pub fn own_namespace() -> String {
    std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| crate::core::DEFAULT_OWN_NAMESPACE.to_owned())
}
