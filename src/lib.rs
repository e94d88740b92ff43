//! configsum: a mutating admission webhook that digests the ConfigMaps and
//! Secrets a pod template consumes into pod-template annotations, so that a
//! configuration change rolls the workload.

pub mod admission;
pub mod app;
pub mod config;
pub mod controller;
pub mod core;
pub mod digest_key;
pub mod lookup;
pub mod metrics;
pub mod server;
pub mod tls;
