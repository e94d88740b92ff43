//! `configsum serve`: the mutating admission webhook. The wire format
//! (`admission`), the HTTP API on the TLS listener (`api`: router, state,
//! handlers, the body extractor and its errors), the TLS listener that serves
//! it, its connections and its certificates (`listener`), and the metrics and
//! log fields they share. What a review asks of the core is `core::review`.

pub mod admission;
pub mod api;
pub mod listener;
pub mod log_field;
pub mod metrics;

pub use listener::connection::DRAIN_TIMEOUT;
pub use listener::server::{ServeError, serve};
pub use metrics::WebhookMetrics;
