//! `configsum serve`: the mutating admission webhook. The wire format
//! (`admission`), the adapter from an AdmissionReview to the core's typed
//! workload (`review`), the router (`app`), the TLS listener and its
//! certificates (`server`, `tls`).

pub mod admission;
pub mod app;
pub mod log_field;
pub mod review;
pub mod server;
pub mod tls;

pub use server::{DRAIN_TIMEOUT, StartupError, serve};
