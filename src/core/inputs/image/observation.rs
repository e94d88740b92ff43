//! What resolving one image reference found. A leaf: the image pass's tracking (`record`,
//! `pin`) and image-env both apply it, and neither imports the other for it.

/// What a resolution found for one target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageObservation {
    /// `sha256:<64 hex>` from the registry.
    Digest(String),
    /// The registry does not know the repository or tag.
    Unknown,
    /// Any other failure; the reason is short and carries no credentials.
    Failed(String),
    /// Not resolved this time (the controller between polls): keep what is there.
    Keep,
}
