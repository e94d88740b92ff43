//! The webhook's HTTP API on the TLS listener, as a value: [`router`] builds
//! the axum `Router` from its [`AppState`], so tests drive it in-process.
//!
//! - `state`: what every handler shares (the object source, the core's
//!   settings, the in-flight and body budgets, the metrics);
//! - `limits`: the bounds of a `/mutate` body (size, deadline, replica-wide
//!   bytes);
//! - `body`: [`ReviewBody`] and [`BodyBudget`], a body read within those
//!   bounds;
//! - `extract`: [`ReviewBody`] as an extractor, the caller checked first;
//! - `error`: [`AdmissionError`], why a body got no AdmissionReview answer,
//!   with its HTTP status and metric label;
//! - `mutate`: the `/mutate` handler: parse, plan, look up, decide, answer;
//! - `probes`: `/healthz` and `/readyz`.

mod body;
mod error;
mod extract;
mod limits;
mod mutate;
mod probes;
mod state;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};

pub use body::{BodyBudget, ReviewBody};
pub use error::AdmissionError;
pub use limits::{BODY_BYTES_IN_FLIGHT, BODY_TIMEOUT, MAX_BODY_BYTES};
pub use mutate::OVERLOADED;
pub use state::{AppState, ClientCertificate, MAX_REVIEWS_IN_FLIGHT};

use crate::lookup::ObjectSource;

/// `/mutate`, `/healthz` and `/readyz` of the TLS listener.
pub fn router<S: ObjectSource>(state: Arc<AppState<S>>) -> Router {
    Router::new()
        .route("/mutate", post(mutate::mutate::<S>))
        .route("/healthz", get(probes::healthz))
        .route("/readyz", get(probes::readyz::<S>))
        .with_state(state)
}
