//! [`Source`]: where explain's inputs come from, YAML streams or the cluster;
//! the command and the image resolution both read objects through it.

use std::sync::Arc;

use super::cluster::Cluster;
use super::files::Inputs;
use crate::core::{ObjectContent, ObjectRef};

/// Where the inputs come from.
pub enum Source {
    Files(Inputs),
    Cluster(Cluster),
}

impl Source {
    pub async fn object(
        &self,
        namespace: &str,
        object: &ObjectRef,
    ) -> Result<Option<Arc<ObjectContent>>, String> {
        match self {
            Source::Files(files) => Ok(files.objects.get(namespace, object).cloned()),
            Source::Cluster(cluster) => cluster.object(namespace, object).await,
        }
    }
}
