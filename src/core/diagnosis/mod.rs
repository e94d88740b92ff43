//! Diagnosis: the answers `configsum explain` (`crate::explain`, the command's shell) gives,
//! pure: the shell reads the workloads, the objects and the
//! controller's Events, from the cluster or from files; nothing here is I/O. Every answer is
//! the webhook's own plan (`track`, `ignore`, opt-out and ownership applied) held against what
//! the inputs are now.
//!
//! - [`object`]: which workloads roll when a ConfigMap or Secret changes;
//! - [`workload`]: every input of one workload, and whether its pods run its template;
//! - [`rollout`]: that last question, from the workload's own status;
//! - [`holds`]: which sources the controller's flap guard holds, from its Events;
//! - [`halts`]: which changes the controller's waves halted, from its Events;
//! - [`gates`]: why a stale input does not roll yet: a pause, a window, a halt;
//! - [`namespace`]: what every answer starts from, a namespace's workloads and each one's plan.

pub mod gates;
#[cfg(test)]
mod gates_tests;
pub mod halts;
pub mod holds;
pub mod namespace;
pub mod object;
pub mod rollout;
pub mod workload;

pub use gates::Why;
pub use halts::Halts;
pub use holds::{ControllerEvent, Holds};
pub use namespace::Gates;
pub use namespace::{NamespaceView, ReadWorkload};
pub use object::{Tracker, trackers};
pub use workload::{InputLine, WorkloadAnswer, explain_workload};
