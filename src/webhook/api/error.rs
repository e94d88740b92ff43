//! [`AdmissionError`]: why a `/mutate` request got no AdmissionReview answer,
//! with the HTTP status it is answered with and its metric label.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::limits::{BODY_BYTES_IN_FLIGHT, BODY_TIMEOUT, MAX_BODY_BYTES};
use crate::webhook::admission::WireError;

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

/// A JSON `{"error": …}` under the error's status (docs/behaviour.md, "Failure behaviour").
impl IntoResponse for AdmissionError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.to_string() });
        (self.status(), axum::Json(body)).into_response()
    }
}
