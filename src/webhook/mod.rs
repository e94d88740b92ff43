//! `configsum serve`: the mutating admission webhook. The wire format
//! (`admission`), the adapter from an AdmissionReview to the core's typed
//! workload (`review`), the router (`app`), the body reader (`body`), the TLS listener, its connections
//! and its certificates (`server`, `connection`, `tls`).

pub mod admission;
pub mod app;
pub mod body;
pub mod connection;
pub mod log_field;
pub mod review;
pub mod server;
pub mod tls;

pub use server::{DRAIN_TIMEOUT, StartupError, serve};
