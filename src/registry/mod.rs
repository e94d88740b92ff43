//! Registry client for images behind floating tags: asks a container registry which manifest
//! digest a reference such as `ghcr.io/org/app:prod` names now, so that the webhook can record it
//! and the controller can notice when it moves.
//!
//! # What oci-client provides
//!
//! The requests themselves are oci-client's (the OCI distribution client of the ORAS project,
//! used by sigstore-rs): the distribution grammar for references with Docker Hub's
//! normalisation (`oci_client::Reference`), `fetch_manifest_digest` (a `HEAD` of
//! `/v2/<name>/manifests/<tag>` accepting the OCI index and manifest and the Docker manifest list
//! and v2 types, the digest from `Docker-Content-Digest`, else a `GET` and the SHA-256 of the
//! body; no platform is picked, so a multi-arch image gives its index's digest), anonymous
//! access, the Bearer token handshake of a `WWW-Authenticate` challenge with or without Basic
//! credentials to the token realm, plain Basic, a token cache that honours the tokens' expiry,
//! plain HTTP for listed registries (`ClientProtocol::HttpsExcept`), extra trusted roots, and
//! connect and read timeouts. It runs on reqwest with rustls and the process's ring provider.
//!
//! # What this module adds
//!
//! - [`reference`](mod@reference): lower-cased registry hosts, "is this pinned", and Docker Hub reached at
//!   `registry-1.docker.io`.
//! - [`credentials`]: pull secrets (`kubernetes.io/dockerconfigjson` and `kubernetes.io/dockercfg`)
//!   parsed from bytes, their registry keys matched to images as the kubelet does, and types whose
//!   `Debug` never shows a secret.
//! - [`outcome`]: oci-client's errors sorted into a digest, unknown (404, `MANIFEST_UNKNOWN`,
//!   `NAME_UNKNOWN`) or a short failure that carries no URL, body or credential; digests checked
//!   to be `sha256:<64 hex>`.
//! - `cache`: concurrent resolutions of one reference with the same credentials share one
//!   request, and an answer is reused for at most 10 s after the registry gave it.
//! - [`client`]: [`RegistryClient::resolve`], bounded end to end by `--registry-timeout`, trying
//!   each applicable credential in turn, with one oci-client client per credential so that no
//!   namespace's credentials or tokens serve another's images.
//! - [`metrics`]: `configsum_registry_requests_total{registry,outcome}` and
//!   `configsum_registry_duration_seconds`.

mod cache;
pub mod client;
pub mod credentials;
pub mod metrics;
pub mod outcome;
pub mod reference;

pub use client::{ClientError, DEFAULT_TIMEOUT, MAX_REUSE, RegistryClient, RegistryConfig};
pub use credentials::{
    CredentialError, CredentialId, DOCKER_CFG_KEY, DOCKER_CONFIG_JSON_KEY, PullCredential,
    RegistryKey, Secret, credentials_from_secret, parse_docker_cfg, parse_docker_config_json,
    select_credentials,
};
pub use metrics::RegistryMetrics;
pub use outcome::{Failure, FailureKind, ImageDigest, Resolution};
pub use reference::{ImageRef, ReferenceError};

#[cfg(test)]
mod loopback_tests;
