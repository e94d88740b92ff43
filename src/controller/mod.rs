//! `configsum controller`: rolls workloads when only their ConfigMaps or
//! Secrets change (SPEC §9), with the webhook's own rules and digests.

pub mod index;
pub mod lease;
pub mod metrics;
pub mod queue;
pub mod reconcile;
mod run;

pub use run::{ControllerError, run};
