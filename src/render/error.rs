//! [`RenderError`]: why `configsum render` wrote nothing, named by the stream's
//! reader and by the render alike.

/// Why nothing was written. Never quotes a value of the input.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// Exit code 1.
    #[error("document {document}: {reason}")]
    Input { document: usize, reason: String },
    /// Exit code 1.
    #[error(transparent)]
    Objects(#[from] crate::lookup::FileSourceError),
}
