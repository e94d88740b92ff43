//! [`ReviewBody`] as the `/mutate` handler's extractor: the caller is checked
//! before a byte of the body is read, then the body is read within the
//! replica's budget ([`super::body`]).

use std::sync::Arc;

use axum::extract::{FromRequest, Request};

use super::body::ReviewBody;
use super::error::AdmissionError;
use super::state::{AppState, ClientCertificate};

/// Checks the caller before a byte of the body is read: with `--client-ca-file`, a caller
/// without a verified certificate costs no budget. Then reads within the bounds.
impl<S: Send + Sync> FromRequest<Arc<AppState<S>>> for ReviewBody {
    type Rejection = AdmissionError;

    async fn from_request(
        request: Request,
        state: &Arc<AppState<S>>,
    ) -> Result<Self, Self::Rejection> {
        let certificate = request.extensions().get::<ClientCertificate>().copied();
        if state.require_client_certificate && !certificate.unwrap_or_default().0 {
            return Err(AdmissionError::Unauthenticated);
        }
        let (parts, body) = request.into_parts();
        state.bodies.read(&parts.headers, body).await
    }
}
