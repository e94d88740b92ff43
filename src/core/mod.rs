//! The pure core: from a workload and the objects its pod template references
//! to a patch. No I/O happens below this module; the shells (the webhook's
//! AdmissionReview adapter, the controller's watches, `crate::lookup`) feed it
//! typed workloads and objects.

pub mod annotations;
pub mod digest;
pub mod inputs;
pub mod kinds;
pub mod mutate;
pub mod object_ref;
pub mod patch;
pub mod pod_spec;
pub mod refs;
pub mod selection;
pub mod warnings;
pub mod workload;

pub use annotations::AnnotationDomain;
pub use digest::{DigestKeys, Digester, ObjectContent, ObjectId};
pub use mutate::{
    DEFAULT_OWN_NAMESPACE, Decision, LookupErrorPolicy, Mutation, Observation, Plan, Settings,
    Skip, plan,
};
pub use object_ref::{ObjectKind, ObjectRef};
pub use selection::Target;
pub use workload::{Workload, WorkloadKind};

/// The outcome of looking up one object, before digesting.
pub type Found<'a> = Result<Option<&'a ObjectContent>, String>;

impl Mutation {
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
