//! configsum: rolls Kubernetes workloads when the ConfigMaps and Secrets they
//! consume change. `core` decides (pure); `webhook` answers AdmissionReviews
//! with it; `controller` patches workloads whose objects changed with no write
//! to the workload; `lookup` reads the objects; `process` holds what both
//! long-running commands share.

pub mod config;
pub mod controller;
pub mod core;
pub mod digest_key;
pub mod lookup;
pub mod metrics;
pub mod process;
pub mod registry;
pub mod webhook;
