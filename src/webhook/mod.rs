//! `configsum serve`: the mutating admission webhook. The wire format
//! (`admission`), the HTTP API on the TLS listener (`api`: router, state,
//! handlers, the body extractor and its errors), the listener, its connections
//! and its certificates (`server`, `connection`, `tls`). What a review asks of
//! the core is `core::review`.

pub mod admission;
pub mod api;
pub mod connection;
pub mod log_field;
pub mod metrics;
pub mod server;
pub mod tls;

pub use metrics::WebhookMetrics;
pub use server::{DRAIN_TIMEOUT, ServeError, serve};
