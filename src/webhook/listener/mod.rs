//! The TLS listener that serves the webhook's HTTP API (`super::api`):
//! start-up and the accept loop (`server`), one connection from accept to close
//! (`connection`), and the serving certificate with the client CAs (`tls`).

pub mod connection;
pub mod server;
pub mod tls;
