//! The HTTP application as a value: `router` builds the axum `Router` of the
//! TLS listener from its state, so tests can drive it in-process.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Extension, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::runtime::RuntimeFlavor;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tracing::{Instrument as _, info, info_span};

use super::admission::{WireError, encode_response, parse_review};
use super::body::{BODY_BYTES_IN_FLIGHT, BODY_TIMEOUT, BodyBudget, MAX_BODY_BYTES};
use super::log_field::LogField;
use crate::core::inputs::image::ImageObservation;
use crate::core::review::plan_review;
use crate::core::workload::{Operation, WorkloadKind};
use crate::core::{Decision, Digester, Mutation, Observation, Plan, Settings};
use crate::lookup::{Inputs, ObjectSource, lookup_budget, observe, observe_all, resolve_all};
use crate::metrics::Metrics;
use crate::process::Readiness;
use crate::registry::RegistryClient;

/// Reviews decided at once per replica; more are answered at once, unchanged.
pub const MAX_REVIEWS_IN_FLIGHT: usize = 256;

/// The warning on a review shed because [`MAX_REVIEWS_IN_FLIGHT`] are running.
pub const OVERLOADED: &str = "configsum is overloaded: allowed without new digests; existing ones stay and the controller catches up";

pub struct AppState<S> {
    pub source: S,
    pub digester: Digester,
    pub settings: Settings,
    pub lookup_timeout: Duration,
    pub metrics: Arc<Metrics>,
    /// False until serving is possible, and again once shutdown begins.
    pub ready: Readiness,
    /// One permit per review being decided ([`MAX_REVIEWS_IN_FLIGHT`]).
    pub in_flight: Semaphore,
    /// Bytes of bodies held at once ([`BODY_BYTES_IN_FLIGHT`]).
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
        metrics: Arc<Metrics>,
        ready: Readiness,
    ) -> Self {
        let in_flight = Semaphore::new(MAX_REVIEWS_IN_FLIGHT);
        AppState {
            source,
            digester,
            settings,
            lookup_timeout,
            metrics,
            ready,
            in_flight,
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

/// `/mutate`, `/healthz` and `/readyz` of the TLS listener.
pub fn router<S: ObjectSource>(state: Arc<AppState<S>>) -> Router {
    Router::new()
        .route("/mutate", post(mutate::<S>))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz::<S>))
        .with_state(state)
}

async fn readyz<S: ObjectSource>(State(state): State<Arc<AppState<S>>>) -> Response {
    if state.ready.is_ready() {
        (StatusCode::OK, "ok").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready").into_response()
    }
}

/// Why a `/mutate` body got no AdmissionReview answer.
#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    #[error("a client certificate signed by the configured CA is required")]
    Unauthenticated,
    #[error("request body is larger than {MAX_BODY_BYTES} bytes")]
    TooLarge,
    #[error("cannot read request body")]
    BodyRead,
    #[error("the request body did not arrive within {} s of its headers", BODY_TIMEOUT.as_secs())]
    BodyTimeout,
    #[error("configsum is overloaded: request bodies hold {BODY_BYTES_IN_FLIGHT} bytes already")]
    Overloaded,
    #[error(transparent)]
    Wire(#[from] WireError),
}

impl AdmissionError {
    pub fn status(&self) -> StatusCode {
        match self {
            AdmissionError::Unauthenticated => StatusCode::UNAUTHORIZED,
            AdmissionError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            AdmissionError::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            AdmissionError::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
            AdmissionError::BodyRead | AdmissionError::Wire(_) => StatusCode::BAD_REQUEST,
        }
    }

    /// The `outcome` label of `configsum_admissions_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            AdmissionError::Unauthenticated => "unauthenticated",
            AdmissionError::TooLarge => "too_large",
            AdmissionError::BodyTimeout => "body_timeout",
            AdmissionError::Overloaded => "over_body_budget",
            AdmissionError::BodyRead | AdmissionError::Wire(_) => "bad_request",
        }
    }
}

impl IntoResponse for AdmissionError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.to_string() });
        (self.status(), axum::Json(body)).into_response()
    }
}

/// The API server's `?timeout=10s` (a Go duration, whole seconds in practice).
fn api_server_timeout(query: Option<&str>) -> Option<Duration> {
    let value = query?.split('&').find_map(|pair| pair.strip_prefix("timeout="))?;
    humantime::parse_duration(value).ok()
}

async fn mutate<S: ObjectSource>(
    State(state): State<Arc<AppState<S>>>,
    RawQuery(query): RawQuery,
    certificate: Option<Extension<ClientCertificate>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    if state.require_client_certificate && certificate.is_none_or(|c| !c.0.0) {
        return reject(&state, AdmissionError::Unauthenticated, started);
    }
    let budget = lookup_budget(api_server_timeout(query.as_deref()), state.lookup_timeout);
    let body = match state.bodies.read(&headers, body).await {
        Ok(body) => body,
        Err(e) => return reject(&state, e, started),
    };
    let large = body.bytes.len() >= LARGE_BODY_BYTES;
    let request = match cpu_bound(large, || parse_review(&body.bytes)) {
        Ok(request) => request,
        Err(e) => return reject(&state, e.into(), started),
    };
    let core_request = request.as_core();
    let kind = WorkloadKind::from_gvk(core_request.group, core_request.version, core_request.kind)
        .map_or("other", WorkloadKind::as_str);
    let operation = operation_label(&request.operation);
    let display_name = request.display_name();
    let (uid, kind_field, object, operation_field) = (
        LogField(&request.uid),
        LogField(&request.kind.kind),
        LogField(&display_name),
        LogField(&request.operation),
    );
    let span = info_span!("admission", uid = %uid, kind = %kind_field,
        object = %object, operation = %operation_field);

    // Shed, not queued: an answer now keeps the API server's call short, and
    // the existing annotations stay (the controller catches up).
    let permit = state.in_flight.try_acquire();
    let (decision, outcome) = async {
        if permit.is_err() {
            return (Decision::warn(OVERLOADED.to_owned()), "overloaded");
        }
        match cpu_bound(large, || plan_review(&core_request, &state.settings)) {
            Plan::Skip(skip) => {
                tracing::debug!(reason = skip.as_str(), "skipped");
                (Decision::default(), "skipped")
            }
            Plan::Unparsable(warning) => (Decision::warn(warning), "unparsable"),
            Plan::Mutate(mutation) => {
                let inputs = ReviewInputs { state: &state, deadline: started + budget };
                let observed = observe(&mutation, &inputs).await;
                let decision = cpu_bound(large, || mutation.decide(observed, &state.settings));
                let outcome = match (&decision.denied, decision.patch.is_empty()) {
                    (Some(_), _) => "denied",
                    (None, true) => "unchanged",
                    (None, false) => "mutated",
                };
                (decision, outcome)
            }
        }
    }
    .instrument(span.clone())
    .await;

    let answer = cpu_bound(large, || encode_response(&request.uid, &decision));
    let took = started.elapsed();
    state.metrics.observe_admission(kind, operation, outcome, took);
    // Outside the span, so JSON logs carry these fields at the top level.
    info!(uid = %uid, kind = %kind_field, object = %object,
        operation = %operation_field, outcome, patch_ops = decision.patch.len(),
        warnings = decision.warnings.len(), duration_ms = took.as_secs_f64() * 1000.0, "admission answered");
    ([(header::CONTENT_TYPE, "application/json")], answer).into_response()
}

/// A review's observations: its objects from the source, its images from the registries, all
/// by the review's deadline.
struct ReviewInputs<'a, S> {
    state: &'a AppState<S>,
    deadline: Instant,
}

impl<S: ObjectSource> Inputs for ReviewInputs<'_, S> {
    async fn objects(&self, mutation: &Mutation) -> Vec<Observation> {
        let state = self.state;
        observe_all(&state.source, &state.digester, mutation, self.deadline, &state.metrics).await
    }

    async fn images(&self, mutation: &Mutation) -> Vec<ImageObservation> {
        match &self.state.registry {
            Some(registry) => {
                resolve_all(&self.state.source, registry, mutation, self.deadline).await
            }
            None => Vec::new(),
        }
    }
}

/// Bodies from this size on are parsed and decided off the async workers.
const LARGE_BODY_BYTES: usize = 256 * 1024;

/// Runs a large review's CPU-bound step with its worker thread handed over
/// to the other tasks, so that health probes and small reviews go on being
/// served while megabytes are parsed. Small reviews take microseconds and run
/// in place, as does everything on a single-threaded runtime (tests).
fn cpu_bound<T>(large: bool, work: impl FnOnce() -> T) -> T {
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|runtime| runtime.runtime_flavor() == RuntimeFlavor::MultiThread);
    if large && multi_thread { tokio::task::block_in_place(work) } else { work() }
}

fn reject<S>(state: &AppState<S>, error: AdmissionError, started: Instant) -> Response {
    state.metrics.observe_admission("unknown", "unknown", error.metric_label(), started.elapsed());
    info!(error = %error, "rejected a request");
    error.into_response()
}

fn operation_label(operation: &str) -> &'static str {
    match Operation::parse(operation) {
        Some(Operation::Create) => "CREATE",
        Some(Operation::Update) => "UPDATE",
        Some(Operation::Delete) => "DELETE",
        Some(Operation::Connect) => "CONNECT",
        None => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_api_server_timeout() {
        assert_eq!(api_server_timeout(Some("timeout=10s")), Some(Duration::from_secs(10)));
        assert_eq!(api_server_timeout(Some("a=b&timeout=3s")), Some(Duration::from_secs(3)));
        assert_eq!(api_server_timeout(Some("timeout=soon")), None);
        assert_eq!(api_server_timeout(None), None);
    }
}
