//! The pure core: from a workload and the objects its pod template references
//! to a patch. No I/O happens below this module. Every command takes the same
//! steps: [`plan_review`] (or the controller's watched plan) says which objects
//! and images to observe; the shell observes them (`crate::lookup::observe`, or
//! from memory in [`review`]); [`Mutation::decide`] turns the observations into
//! the patch.

pub mod annotations;
pub mod custom_kinds;
pub mod digest;
pub mod explain;
pub mod field_path;
pub mod inputs;
pub mod kinds;
pub mod mutate;
pub mod object_ref;
pub mod patch;
pub mod pod_spec;
pub mod rbac;
pub mod refs;
pub mod review;
pub mod selection;
pub mod verdict;
pub mod warnings;
pub mod workload;

pub use annotations::AnnotationDomain;
pub use digest::{DigestKeys, Digester, ObjectContent, ObjectId};
pub use mutate::{
    DEFAULT_OWN_NAMESPACE, Decision, LookupErrorPolicy, Mutation, Observation, Observed, Plan,
    Settings, Skip, plan,
};
pub use object_ref::{ObjectKey, ObjectKind, ObjectRef};
pub use review::{OldObject, Request, plan_read_review, plan_review, review};
pub use selection::Target;
pub use workload::{Workload, WorkloadKind};

/// The outcome of looking up one object, before digesting.
pub type Found<'a> = Result<Option<&'a ObjectContent>, String>;

impl Mutation {
    /// Digests the pod template a lookup found for a tracked workload (the template's JSON,
    /// as the API server returns it).
    pub fn observe_workload(
        &self,
        found: Result<Option<&serde_json::Value>, String>,
        domain: &AnnotationDomain,
    ) -> Observation {
        match found {
            Ok(Some(template)) => Observation::Digest(inputs::workload_template::template_digest(
                template,
                &domain.workload_prefixes(),
            )),
            Ok(None) => Observation::Absent,
            Err(reason) => Observation::Unreadable(reason),
        }
    }

    /// Digests what a lookup found for `target`; the content can be dropped after.
    pub fn observe(&self, target: &Target, digester: &Digester, found: Found<'_>) -> Observation {
        match found {
            Ok(Some(content)) => {
                let id = ObjectId { namespace: &self.namespace, object: &target.object };
                Observation::Digest(digester.digest(
                    id,
                    content,
                    &target.consumption.keys,
                    self.existing(target),
                ))
            }
            Ok(None) => Observation::Absent,
            Err(reason) => Observation::Unreadable(reason),
        }
    }
}
