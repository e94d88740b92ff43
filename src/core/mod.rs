//! The pure core: from a workload and the objects its pod template references
//! to a patch. No I/O happens below this module. Every command takes the same
//! steps: [`plan_review`] (or the controller's watched plan) says which objects
//! and images to observe; the shell observes them (`crate::lookup::observe`, or
//! from memory in [`review`]); [`Mutation::decide`] turns the observations into
//! the patch.

pub mod custom_kinds;
pub mod diagnosis;
pub mod digest;
pub mod field_path;
pub mod inputs;
pub mod model;
pub mod mutate;
pub mod patch;
pub mod pod_spec_reader;
pub mod rbac;
pub mod refs;
pub mod review;
pub mod roll_window;
pub mod rollout_health;
pub mod selection;
pub mod verdict;
pub mod workload;

#[cfg(test)]
mod across_namespaces_tests;

pub use digest::{DigestKeys, Digester, ObjectId};
pub use model::annotations::AnnotationDomain;
pub use model::kinds::WorkloadKind;
pub use model::object_content::ObjectContent;
pub use model::object_ref::{ObjectKey, ObjectKind, ObjectRef};
pub use mutate::{
    ClassTarget, DEFAULT_OWN_NAMESPACE, Decision, Found, LookupErrorPolicy, LookupKey, Meaning,
    Mutation, Observation, Observed, Plan, Settings, Skip, exists, meaning, plan,
};
pub use review::{OldObject, Request, plan_read_review, plan_review, review};
pub use selection::{Reach, Target};
pub use workload::Workload;
