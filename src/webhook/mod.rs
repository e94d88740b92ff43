//! `configsum serve`: the mutating admission webhook. The wire format
//! (`admission`), the router (`app`), the body reader (`body`), the TLS listener, its connections
//! and its certificates (`server`, `connection`, `tls`). What a review asks of the core is
//! `core::review`.

pub mod admission;
pub mod app;
pub mod body;
pub mod connection;
pub mod log_field;
pub mod server;
pub mod tls;

pub use server::{DRAIN_TIMEOUT, StartupError, serve};
