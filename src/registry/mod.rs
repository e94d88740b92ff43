//! Registry client for images behind floating tags: asks a container registry which manifest
//! digest a reference such as `ghcr.io/org/app:prod` names now, so that the webhook can record it
//! and the controller can notice when it moves.
//!
//! # How
//!
//! The distribution API is spoken here, over hyper-util's pooled client with rustls, rather than
//! through a registry client library: image references, token realms and redirects are tenant
//! input, and only a client that owns every request can decide where each goes and how much of
//! each answer it reads (docs/security.md, "Registries").
//!
//! - [`reference`](mod@reference): references built from the core's parse of the distribution
//!   grammar (`core::inputs::image::reference`), with Docker Hub's normalisation, lower-cased
//!   registry hosts, "is this pinned", and Docker Hub reached at `registry-1.docker.io`.
//! - [`policy`]: where requests may go: plain HTTP only to `--insecure-registry`, no loopback,
//!   link-local or unspecified address unless listed, `--registry-allow`.
//! - `connect`: the connector that applies the policy to resolved addresses, and TLS with
//!   Mozilla's roots compiled in plus `--registry-ca-file`.
//! - `distribution`: `HEAD` of the manifest with the four media types, the digest from
//!   `Docker-Content-Digest` or the SHA-256 of a `GET` (at most 4 MiB), the Bearer handshake and
//!   Basic, redirects followed by hand (credentials only to the origin they are for).
//! - `challenge` and `token`: the `WWW-Authenticate` header, token answers (at most 1 MiB), and
//!   the bounded token cache keyed by registry, repository and credential identity.
//! - [`credentials`]: pull secrets (`kubernetes.io/dockerconfigjson` and `kubernetes.io/dockercfg`)
//!   parsed from bytes, their registry keys matched to images as the kubelet does (in bounded
//!   time), and types whose `Debug` never shows a secret.
//! - [`outcome`]: answers sorted into a digest, unknown (404, `MANIFEST_UNKNOWN`, `NAME_UNKNOWN`)
//!   or a short failure that carries no URL, body or credential; digests checked to be
//!   `sha256:<64 hex>`.
//! - `cache`: concurrent resolutions of one reference with the same credentials share one
//!   request, and an answer is reused for at most 10 s after the registry gave it.
//! - [`client`]: [`RegistryClient::resolve`], bounded end to end by `--registry-timeout`, trying
//!   each applicable credential in turn; `digest_source`, the seam between it and
//!   `distribution` that its tests replace.
//! - [`metrics`]: `configsum_registry_requests_total{registry,outcome}` and
//!   `configsum_registry_duration_seconds`.
//!
//! No registry body is ever logged, at any level.

mod cache;
mod challenge;
pub mod client;
mod connect;
pub mod credentials;
mod digest_source;
mod distribution;
pub mod metrics;
pub mod outcome;
pub mod policy;
pub mod reference;
mod token;

pub use client::{ClientError, DEFAULT_TIMEOUT, MAX_REUSE, RegistryClient, RegistryConfig};
pub use connect::tls_config;
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
