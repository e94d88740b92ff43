//! The core's vocabulary: the types and tables every part of the decision names — which
//! objects and workload kinds exist, what a pod spec and an annotation look like, the
//! operations and path segments the kinds table is written in. The lowest floor of the core:
//! nothing here imports the tables of `inputs` or the readers beside this folder, so both
//! import it and never each other's leaves.

pub mod annotations;
pub mod digest_mode;
pub mod hex;
pub mod kinds;
pub mod label_selector;
pub mod object_content;
pub mod object_ref;
pub mod object_scope;
pub mod operation;
pub mod path_segment;
pub mod pod_spec;
pub mod provider_class_status;
pub mod rollout_rule;
pub mod warnings;
