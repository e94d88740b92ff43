//! The image behind a floating tag, a tracked input of its own shape: it is
//! keyed by container rather than by object, opted into per workload
//! (`<domain>/images`), resolved from a registry rather than read from the API
//! server, and its digest is the registry's. Its annotation is
//! `image.<domain>/<container>`.
//!
//! - [`reference`]: an image reference split by the distribution grammar;
//! - [`containers`]: the image pass, which reads a tracking workload's containers;
//! - [`in_pass`]: the same reading, made in the pass that reads a review's object;
//! - [`tracking`]: which containers are tracked, and what the resolutions make
//!   of the annotations and images (`record` or `pin`);
//! - [`env`]: `<domain>/image-env`, digests handed on through environment
//!   variables: its grammar, and what a resolution makes of a variable.
//!
//! Resolving is the shell's: `crate::registry` asks the registry, with the
//! credentials of the pod's `imagePullSecrets` and its ServiceAccount's.

pub mod containers;
pub mod env;
pub mod in_pass;
pub mod reference;
pub mod tracking;

pub use containers::{ContainerImage, PodImages};
pub use env::ImageEnv;
pub use in_pass::{ImageHint, ImagesInPass};
pub use reference::ImageName;
pub use tracking::{
    ImageObservation, ImageOutcome, ImagePlan, ImagePolicy, ImageTarget, ImageTracking,
};
