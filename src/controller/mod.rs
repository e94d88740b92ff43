//! `configsum controller`: rolls workloads when only their ConfigMaps or
//! Secrets change (SPEC §9), with the webhook's own rules and digests.

pub mod index;
pub mod queue;
