//! Registry client for images behind floating tags: asks a container registry which manifest
//! digest a reference such as `ghcr.io/org/app:prod` names now.

pub mod reference;

pub use reference::{ImageRef, ReferenceError};
