//! [`Source`]: where explain's inputs come from, YAML streams or the cluster;
//! the command and the image resolution both read objects through it.

use std::sync::Arc;

use super::cluster::{Cluster, ReadObject};
use super::files::Inputs;
use crate::core::ObjectRef;

/// Where the inputs come from.
pub enum Source {
    Files(Inputs),
    Cluster(Cluster),
}

impl Source {
    /// `object` in `namespace`; `resume_key` is `<domain>/resume`.
    pub async fn object(
        &self,
        namespace: &str,
        object: &ObjectRef,
        resume_key: &str,
    ) -> Result<Option<ReadObject>, String> {
        match self {
            Source::Files(files) => Ok(files
                .objects
                .get(namespace, object)
                .map(|content| ReadObject { content: Arc::clone(content), resume: None })),
            Source::Cluster(cluster) => cluster.object(namespace, object, resume_key).await,
        }
    }
}
