//! The pure core: from an admission request and the objects it references to
//! a patch. No I/O happens below this module; the shell (`crate::lookup`,
//! `crate::server`) feeds it bytes and objects.

pub mod annotations;
pub mod digest;
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
    Decision, LookupErrorPolicy, Mutation, Observation, Plan, Request, Settings, Skip, plan,
};
pub use object_ref::{ObjectKind, ObjectRef};
pub use selection::Target;

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

/// The whole decision with objects from memory: plan, digest, decide. The
/// webhook does the same with concurrent lookups in between.
pub fn review<'a>(
    request: &Request<'_>,
    settings: &Settings,
    digester: &Digester,
    lookup: impl Fn(&str, &ObjectRef) -> Found<'a>,
) -> Decision {
    match plan(request, settings) {
        Plan::Skip(_) => Decision::default(),
        Plan::Unparsable(warning) => Decision::warn(warning),
        Plan::Mutate(mutation) => {
            let observations = mutation
                .targets
                .iter()
                .map(|t| mutation.observe(t, digester, lookup(&mutation.namespace, &t.object)))
                .collect();
            mutation.decide(observations, settings)
        }
    }
}
