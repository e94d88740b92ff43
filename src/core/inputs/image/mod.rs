//! The image behind a floating tag, a tracked input of its own shape: it is
//! keyed by container rather than by object, opted into per workload
//! (`<domain>/images`), resolved from a registry rather than read from the API
//! server, and its digest is the registry's. Its annotation is
//! `image.<domain>/<container>`.
//!
//! - [`reference`]: an image reference split by the distribution grammar;
//! - [`containers`]: what the image pass reads of a tracking workload's containers (the
//!   reading is `crate::core::pod_spec_reader`'s, the one reader of a pod spec);
//! - [`observation`]: what resolving one reference found;
//! - [`tracking`]: which containers are tracked, and what the resolutions make
//!   of the annotations and images (`record` or `pin`);
//! - [`env`]: `<domain>/image-env`, digests handed on through environment
//!   variables: its grammar, and what a resolution makes of a variable.
//!
//! Resolving is the shell's: `crate::registry` asks the registry, with the
//! credentials of the pod's `imagePullSecrets` and its ServiceAccount's.

pub mod containers;
pub mod env;
pub mod observation;
pub mod reference;
pub mod tracking;

pub use containers::{ContainerImage, PodImages};
pub use env::ImageEnv;
pub use observation::ImageObservation;
pub use reference::ImageName;
pub use tracking::{ImageOutcome, ImagePlan, ImagePolicy, ImageTarget, ImageTracking};
