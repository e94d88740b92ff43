//! The pure core: from a workload and the objects its pod template references
//! to a patch. No I/O happens below this module. Every command takes the same
//! steps: [`plan_review`] (or the controller's watched plan) says which objects
//! and images to observe; the shell observes them (`crate::lookup::observe`, or
//! from memory in [`review`]); [`Mutation::decide`] turns the observations into
//! the patch.

pub mod annotations;
pub mod custom_kinds;
pub mod diagnosis;
pub mod digest;
pub mod digest_mode;
pub mod field_path;
pub mod inputs;
pub mod kinds;
pub mod mutate;
pub mod object_content;
pub mod object_ref;
pub mod operation;
pub mod patch;
pub mod path_segment;
pub mod pod_spec;
pub mod pod_spec_reader;
pub mod rbac;
pub mod refs;
pub mod review;
pub mod selection;
pub mod verdict;
pub mod warnings;
pub mod workload;

pub use annotations::AnnotationDomain;
pub use digest::{DigestKeys, Digester, ObjectId};
pub use kinds::WorkloadKind;
pub use mutate::{
    DEFAULT_OWN_NAMESPACE, Decision, Found, LookupErrorPolicy, Mutation, Observation, Observed,
    Plan, Settings, Skip, plan,
};
pub use object_content::ObjectContent;
pub use object_ref::{ObjectKey, ObjectKind, ObjectRef};
pub use review::{OldObject, Request, plan_read_review, plan_review, review};
pub use selection::Target;
pub use workload::Workload;
