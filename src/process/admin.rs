//! The plain-HTTP admin listener both commands run: `/metrics` (Prometheus
//! text format), `/healthz` (the process is alive) and `/readyz` (it can do
//! its job: the webhook's lookups answer, the controller's watches synced).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::warn;

use super::{MetricsRegistry, Readiness};

#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr}: {source}")]
pub struct BindError {
    pub addr: SocketAddr,
    pub source: std::io::Error,
}

pub async fn bind(addr: SocketAddr) -> Result<TcpListener, BindError> {
    TcpListener::bind(addr).await.map_err(|source| BindError { addr, source })
}

/// `/metrics`, `/healthz` and `/readyz`.
pub fn admin_router(metrics: Arc<MetricsRegistry>, readiness: Readiness) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|State((metrics, _)): State<(Arc<MetricsRegistry>, Readiness)>| async move {
                (
                    [(
                        header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    metrics.encode(),
                )
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|State((_, readiness)): State<(Arc<MetricsRegistry>, Readiness)>| async move {
                if readiness.is_ready() {
                    (StatusCode::OK, "ok")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "not ready")
                }
            }),
        )
        .with_state((metrics, readiness))
}

/// Serves `router` on `listener` until `stop` changes.
pub async fn serve_admin(listener: TcpListener, router: Router, mut stop: watch::Receiver<bool>) {
    let shutdown = async move {
        let _ = stop.changed().await;
    };
    if let Err(e) = axum::serve(listener, router).with_graceful_shutdown(shutdown).await {
        warn!(error = %e, "admin listener failed");
    }
}
