//! What `configsum serve` and `configsum controller` build alike before they
//! run, and why either may fail to start: the digest keys, the API server's
//! client, the registry client, the core's settings with configsum's own
//! namespace.

use std::time::Duration;

use kube::Client;

use super::admin::BindError;
use super::digest_keys::{KeyFileError, load_digest_keys};
use crate::config::{AnnotationArgs, DigestKeyArgs, NamespacesArgs};
use crate::core::{DEFAULT_OWN_NAMESPACE, Digester, LookupErrorPolicy, Settings};
use crate::lookup::kube_client_with;
use crate::registry::{ClientError, RegistryClient, RegistryConfig, RegistryMetrics};
use crate::user_agent::Caller;

/// Why a long-running command did not start, for the causes both commands
/// share. Never carries key material.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    DigestKeys(#[from] KeyFileError),
    #[error("cannot find the Kubernetes API (in-cluster, KUBECONFIG or ~/.kube/config): {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Bind(#[from] BindError),
    #[error(transparent)]
    Registry(#[from] ClientError),
    /// A declaration of `--custom-kinds` the API server contradicts (a cluster-scoped resource).
    #[error("--custom-kinds: {0}")]
    CustomKind(String),
    #[error(transparent)]
    Notify(#[from] crate::notify::NotifyConfigError),
}

impl StartupError {
    /// The process's exit code: 2 for a mistake in the configuration, as for a bad flag.
    pub fn exit_code(&self) -> u8 {
        match self {
            StartupError::CustomKind(_) | StartupError::Notify(_) => 2,
            _ => 1,
        }
    }
}

/// The digester of `--digest-key-file`, or of plain digests when the
/// operator accepted them: `serve` and `controller` must digest alike.
pub fn digester(keys: &DigestKeyArgs) -> Result<Digester, StartupError> {
    let keys = load_digest_keys(keys.digest_key_file.as_deref(), keys.allow_plain_secret_digests)?;
    Ok(Digester::new(keys))
}

/// The API server's client, found as docs/flags.md says, naming `caller` in its User-Agent;
/// with `read_timeout`, a call whose connection stays silent that long fails.
pub async fn api_client(
    caller: Caller,
    read_timeout: Option<Duration>,
) -> Result<Client, StartupError> {
    Ok(kube_client_with(caller, read_timeout).await?)
}

/// The registry client, recording into `metrics`.
pub fn registry_client(
    config: RegistryConfig,
    metrics: &RegistryMetrics,
) -> Result<RegistryClient, StartupError> {
    Ok(RegistryClient::new(config, metrics.clone())?)
}

/// configsum's own namespace: `POD_NAMESPACE`, else `configsum-system`.
pub fn own_namespace() -> String {
    std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| DEFAULT_OWN_NAMESPACE.to_owned())
}

/// The core's settings as both commands run it: the annotation domain, what
/// an unreadable object means, and [`own_namespace`], which neither command
/// mutates or reads from, whatever else it is told (the controller's
/// `--lease-namespace` says only where its Lease is).
pub fn settings(
    annotations: &AnnotationArgs,
    scope: &NamespacesArgs,
    on_lookup_error: LookupErrorPolicy,
) -> Settings {
    Settings {
        domain: annotations.annotation_domain.clone(),
        on_lookup_error,
        own_namespace: Some(own_namespace()),
        object_selector: annotations.object_selector.clone(),
        namespaces: scope.sorted(),
    }
}

/// Reads `--custom-kinds` and adds its kinds to the table, before anything reads a kind. Every
/// mistake is an error naming the file and the entry (docs/custom-kinds.md).
pub fn declare_custom_kinds(path: Option<&std::path::Path>) -> Result<(), String> {
    let Some(path) = path else { return Ok(()) };
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the custom kinds file {}: {e}", path.display()))?;
    let kinds =
        crate::core::custom_kinds::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    crate::core::model::kinds::declare(kinds).map_err(|e| format!("{}: {e}", path.display()))
}
