//! [`AppState`]: what the TLS listener's handlers share for the life of the
//! process.

use std::time::Duration;

use tokio::sync::Semaphore;

use super::body::BodyBudget;
use crate::core::{Digester, Settings};
use crate::process::Readiness;
use crate::registry::RegistryClient;
use crate::webhook::WebhookMetrics;

/// Reviews decided at once per replica; more are answered at once, unchanged.
pub const MAX_REVIEWS_IN_FLIGHT: usize = 256;

pub struct AppState<S> {
    pub source: S,
    pub digester: Digester,
    pub settings: Settings,
    pub lookup_timeout: Duration,
    pub metrics: WebhookMetrics,
    /// False until serving is possible, and again once shutdown begins.
    pub ready: Readiness,
    /// One permit per review being decided ([`MAX_REVIEWS_IN_FLIGHT`]).
    pub in_flight: Semaphore,
    /// Bytes of bodies held at once ([`super::BODY_BYTES_IN_FLIGHT`]).
    pub bodies: BodyBudget,
    /// `--client-ca-file`: `/mutate` only for callers with a verified client certificate.
    pub require_client_certificate: bool,
    /// Resolves the digests behind tracked images' tags.
    pub registry: Option<RegistryClient>,
}

/// Whether the caller's TLS connection presented a client certificate (which
/// rustls verified against `--client-ca-file`); the listener adds it to every
/// request. A request without it has none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientCertificate(pub bool);

impl<S> AppState<S> {
    pub fn new(
        source: S,
        digester: Digester,
        settings: Settings,
        lookup_timeout: Duration,
        metrics: WebhookMetrics,
        ready: Readiness,
    ) -> Self {
        AppState {
            source,
            digester,
            settings,
            lookup_timeout,
            metrics,
            ready,
            in_flight: Semaphore::new(MAX_REVIEWS_IN_FLIGHT),
            bodies: BodyBudget::default(),
            require_client_certificate: false,
            registry: None,
        }
    }

    /// Resolves tracked images with `registry`; without one, their annotations are kept.
    pub fn with_registry(mut self, registry: RegistryClient) -> Self {
        self.registry = Some(registry);
        self
    }

    /// Refuses `/mutate` to callers without a verified client certificate.
    pub fn requiring_client_certificates(mut self) -> Self {
        self.require_client_certificate = true;
        self
    }
}
