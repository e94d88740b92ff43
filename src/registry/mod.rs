//! Registry client for images behind floating tags: asks a container registry which manifest
//! digest a reference such as `ghcr.io/org/app:prod` names now.

pub mod credentials;
pub mod metrics;
pub mod outcome;
pub mod reference;

pub use credentials::{
    CredentialError, CredentialId, PullCredential, RegistryKey, Secret, credentials_from_secret,
    parse_docker_cfg, parse_docker_config_json, select_credentials,
};
pub use metrics::RegistryMetrics;
pub use outcome::{Failure, FailureKind, ImageDigest, Resolution};
pub use reference::{ImageRef, ReferenceError};
