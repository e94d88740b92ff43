//! What `configsum serve` and `configsum controller` share as processes,
//! written once: what they build before they run (`startup`: digest keys, the
//! API server's client, the registry client, the core's settings and why
//! start-up fails), the running command (`running`: the plain-HTTP admin
//! listener with its readiness and the metrics registry it serves, the
//! shutdown signals and the stop), the log writer, and the open-file limit.

pub mod admin;
pub mod digest_keys;
pub mod log_writer;
pub mod open_files;
pub mod readiness;
pub mod running;
pub mod signals;
pub mod startup;

pub use admin::{BindError, admin_router, bind, serve_admin};
pub use digest_keys::{KeyFileError, load_digest_keys};
// The registry `Running` serves as /metrics; the commands build theirs from here.
pub use crate::metrics_registry::MetricsRegistry;
pub use open_files::raise_open_file_limit;
pub use readiness::Readiness;
pub use running::{Running, local_address};
pub use signals::ShutdownSignals;
pub use startup::{StartupError, api_client, digester, own_namespace, registry_client, settings};
