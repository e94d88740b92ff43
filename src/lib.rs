//! configsum: rolls Kubernetes workloads when the ConfigMaps and Secrets they
//! consume change, or the image behind a floating tag. `core` decides (pure);
//! `webhook` answers AdmissionReviews with it; `controller` patches workloads
//! whose objects or images changed with no write to the workload; `render`
//! writes the same digests into YAML at render time; `lookup` reads the
//! objects and `registry` the image digests; `process` holds what the
//! long-running commands share; `metrics_registry` is the registry their
//! series go in (each part registers the series it sets); `user_agent` is how every command
//! names itself to the servers it calls.

pub mod config;
pub mod controller;
pub mod core;
#[cfg(test)]
mod cpu_time;
pub mod digest_key;
pub mod explain;
pub mod lookup;
pub mod metrics_registry;
pub mod notify;
pub mod process;
pub mod registry;
pub mod render;
pub mod user_agent;
pub mod webhook;
