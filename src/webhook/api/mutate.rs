//! `/mutate`: one AdmissionReview, answered in five steps: parse the review,
//! plan what to observe (the core), look the objects and images up, decide
//! the patch (the core), answer. A request that cannot be answered as a review
//! gets an [`AdmissionError`].

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{FromRequestParts, RawQuery, State};
use axum::http::header;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use tokio::runtime::RuntimeFlavor;
use tokio::time::Instant;
use tracing::{Instrument as _, Span, info, info_span};

use super::{AdmissionError, AppState, ReviewBody};
use crate::core::inputs::image::ImageObservation;
use crate::core::model::kinds::WorkloadKind;
use crate::core::model::operation::Operation;
use crate::core::{Decision, Mutation, Observation, Plan, Request};
use crate::lookup::provider_classes::observe_classes;
use crate::lookup::{
    Inputs, ObjectSource, lookup_budget, observe, observe_all, observe_workloads, resolve_all,
};
use crate::webhook::admission::{AdmissionRequest, encode_response, parse_review, plan};
use crate::webhook::log_field::LogField;

/// The warning on a review shed because [`super::MAX_REVIEWS_IN_FLIGHT`] are running.
pub const OVERLOADED: &str = "configsum is overloaded: allowed without new digests; existing ones stay and the controller catches up";

/// Bodies from this size on are parsed and decided off the async workers.
const LARGE_BODY_BYTES: usize = 256 * 1024;

pub async fn mutate<S: ObjectSource>(
    Received(received): Received,
    State(state): State<Arc<AppState<S>>>,
    RawQuery(query): RawQuery,
    body: Result<ReviewBody, AdmissionError>,
) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(e) => return reject(&state, e, received),
    };
    let budget = lookup_budget(api_server_timeout(query.as_deref()), state.lookup_timeout);
    let deadline = received + budget;
    let large = body.bytes.len() >= LARGE_BODY_BYTES;

    let mut request = match cpu_bound(large, || parse_review(&body.bytes)) {
        Ok(request) => request,
        Err(e) => return reject(&state, e.into(), received),
    };
    let read = request.take_read();
    let core_request = request.as_core();
    let logged = Logged::new(&request, &core_request);

    // Shed, not queued: an answer now keeps the API server's call short, and
    // the existing annotations stay (the controller catches up). The permit is
    // held until the answer is written.
    let deciding = state.in_flight.try_acquire();
    let (decision, outcome) = match &deciding {
        Ok(_) => {
            let planned =
                cpu_bound(large, || plan(&core_request, read, &body.bytes, &state.settings));
            if let Plan::Skip(skip) = &planned {
                tracing::debug!(uid = %LogField(logged.uid), object = %LogField(&logged.object),
                    reason = skip.as_str(), "skipped");
            }
            let span = logged.span_for(&planned);
            let review = Review { state: &state, large, arrived: received, deadline };
            review.decide(planned).instrument(span).await
        }
        Err(_) => (Decision::warn(OVERLOADED.to_owned()), "overloaded"),
    };

    let answer = cpu_bound(large, || encode_response(&request.uid, &decision));
    let took = received.elapsed();
    state.metrics.observe_admission(logged.kind, logged.operation, outcome, took);
    logged.answered(outcome, &decision, took);
    ([(header::CONTENT_TYPE, "application/json")], answer).into_response()
}

/// When the request arrived, before its body was read: the review's lookup
/// deadline and its duration count from here. Extracted first.
pub struct Received(Instant);

impl<T: Sync> FromRequestParts<T> for Received {
    type Rejection = Infallible;

    async fn from_request_parts(_: &mut Parts, _: &T) -> Result<Self, Self::Rejection> {
        Ok(Received(Instant::now()))
    }
}

/// One parsed review on its way to a decision.
struct Review<'a, S> {
    state: &'a AppState<S>,
    large: bool,
    /// When the request arrived ([`Received`]): every write the API server acknowledged
    /// before sending it was acknowledged before this, so a read begun since sees it.
    arrived: Instant,
    deadline: Instant,
}

impl<S: ObjectSource> Review<'_, S> {
    /// Look up and decide what `plan` says; with the `outcome` label of
    /// `configsum_admissions_total`.
    async fn decide(&self, plan: Plan) -> (Decision, &'static str) {
        let settings = &self.state.settings;
        match plan {
            Plan::Skip(_) => (Decision::default(), "skipped"),
            Plan::Unparsable(warning) => (Decision::warn(warning), "unparsable"),
            Plan::Mutate(mutation) => {
                let observed = observe(&mutation, self).await;
                let decision = cpu_bound(self.large, || mutation.decide(observed, settings));
                let outcome = match (&decision.denied, decision.patch.is_empty()) {
                    (Some(_), _) => "denied",
                    (None, true) => "unchanged",
                    (None, false) => "mutated",
                };
                (decision, outcome)
            }
        }
    }
}

/// A review's observations: its objects from the source, its images from the registries, all
/// by the review's deadline.
impl<S: ObjectSource> Inputs for Review<'_, S> {
    async fn objects(&self, mutation: &Mutation) -> Vec<Observation> {
        let state = self.state;
        let lookups = &state.metrics.lookups;
        let (arrived, deadline) = (self.arrived, self.deadline);
        observe_all(&state.source, &state.digester, mutation, arrived, deadline, lookups).await
    }

    async fn images(&self, mutation: &Mutation) -> Vec<ImageObservation> {
        match &self.state.registry {
            Some(registry) => {
                resolve_all(&self.state.source, registry, mutation, self.deadline).await
            }
            None => Vec::new(),
        }
    }

    async fn workloads(&self, mutation: &Mutation) -> Vec<Option<Observation>> {
        let (source, domain) = (&self.state.source, &self.state.settings.domain);
        observe_workloads(source, mutation, domain, self.deadline).await
    }

    async fn classes(&self, mutation: &Mutation) -> Vec<Option<Observation>> {
        observe_classes(&self.state.source, mutation, self.deadline).await
    }
}

/// What the log lines and the metric say of a review. The caller controls
/// these fields, so each is written through [`LogField`].
struct Logged<'a> {
    /// Metric labels, from fixed sets.
    kind: &'static str,
    operation: &'static str,
    uid: &'a str,
    kind_written: &'a str,
    object: String,
    operation_written: &'a str,
}

impl<'a> Logged<'a> {
    fn new(request: &'a AdmissionRequest<'_>, core_request: &Request<'_>) -> Self {
        let kind =
            WorkloadKind::from_gvk(core_request.group, core_request.version, core_request.kind)
                .map_or("other", WorkloadKind::as_str);
        Logged {
            kind,
            operation: operation_label(&request.operation),
            uid: &request.uid,
            kind_written: &request.kind.kind,
            object: request.display_name(),
            operation_written: &request.operation,
        }
    }

    /// The span the decision's own log lines are written in. Only resolving images logs
    /// anything (a pull secret skipped, a registry's failure at debug level), so only a review
    /// that resolves images gets one: making one costs 12–15 % of a review's CPU (measured).
    fn span_for(&self, plan: &Plan) -> Span {
        match plan {
            Plan::Mutate(mutation) if !mutation.images.targets().is_empty() => info_span!(
                "admission",
                uid = %LogField(self.uid),
                kind = %LogField(self.kind_written),
                object = %LogField(&self.object),
                operation = %LogField(self.operation_written)
            ),
            _ => Span::none(),
        }
    }

    /// One line per answered review. Outside the span, so JSON logs carry
    /// these fields at the top level.
    fn answered(&self, outcome: &'static str, decision: &Decision, took: Duration) {
        info!(uid = %LogField(self.uid), kind = %LogField(self.kind_written),
            object = %LogField(&self.object), operation = %LogField(self.operation_written),
            outcome, patch_ops = decision.patch.len(), warnings = decision.warnings.len(),
            duration_ms = millis(took), "admission answered");
    }
}

/// Milliseconds to the microsecond: `6.715`, not the float noise of `6.7157420000000005`.
fn millis(took: Duration) -> f64 {
    took.as_micros() as f64 / 1000.0
}

/// The API server's `?timeout=10s` (a Go duration, whole seconds in practice).
fn api_server_timeout(query: Option<&str>) -> Option<Duration> {
    let value = query?.split('&').find_map(|pair| pair.strip_prefix("timeout="))?;
    humantime::parse_duration(value).ok()
}

/// Runs a large review's CPU-bound step with its worker thread handed over
/// to the other tasks, so that health probes and small reviews go on being
/// served while megabytes are parsed. Small reviews take microseconds and run
/// in place, as does everything on a single-threaded runtime (tests).
fn cpu_bound<T>(large: bool, work: impl FnOnce() -> T) -> T {
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|runtime| runtime.runtime_flavor() == RuntimeFlavor::MultiThread);
    if large && multi_thread { tokio::task::block_in_place(work) } else { work() }
}

fn reject<S>(state: &AppState<S>, error: AdmissionError, received: Instant) -> Response {
    state.metrics.observe_admission("unknown", "unknown", error.metric_label(), received.elapsed());
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
    fn durations_are_logged_in_milliseconds_to_the_microsecond() {
        assert_eq!(millis(Duration::from_nanos(6_715_742)).to_string(), "6.715");
        assert_eq!(millis(Duration::from_micros(300)).to_string(), "0.3");
        assert_eq!(millis(Duration::from_secs(2)).to_string(), "2000");
    }

    #[test]
    fn reads_the_api_server_timeout() {
        assert_eq!(api_server_timeout(Some("timeout=10s")), Some(Duration::from_secs(10)));
        assert_eq!(api_server_timeout(Some("a=b&timeout=3s")), Some(Duration::from_secs(3)));
        assert_eq!(api_server_timeout(Some("timeout=soon")), None);
        assert_eq!(api_server_timeout(None), None);
    }
}
