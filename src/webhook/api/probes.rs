//! The TLS listener's probes: `/healthz` (the process answers) and `/readyz`
//! (reviews can be decided: the object source answers and shutdown has not
//! begun). The admin listener serves the same paths (`crate::process::admin`).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;

use super::AppState;

pub async fn healthz() -> &'static str {
    "ok"
}

pub async fn readyz<S>(State(state): State<Arc<AppState<S>>>) -> (StatusCode, &'static str) {
    if state.ready.is_ready() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}
