//! `--objects-from`: ConfigMaps and Secrets from a YAML stream, for demos and
//! tests with no cluster. Kept in memory: this source is not for production.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use serde::Deserialize;
use serde_json::Value;

use super::{LookupError, ObjectSource};
use crate::core::{ObjectContent, ObjectRef};

#[derive(Debug, Default)]
pub struct FileSource {
    objects: HashMap<(String, ObjectRef), Arc<ObjectContent>>,
}

#[derive(Debug, thiserror::Error)]
pub enum FileSourceError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path} is not a YAML stream of Kubernetes objects: {message}")]
    Yaml { path: PathBuf, message: String },
    #[error("{path}: {kind} {name:?} does not parse: {message}")]
    Object { path: PathBuf, kind: String, name: String, message: String },
}

#[derive(Deserialize)]
struct Header {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: Meta,
    #[serde(default)]
    items: Vec<Value>,
}

#[derive(Deserialize, Default)]
struct Meta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
}

impl FileSource {
    /// Reads every ConfigMap and Secret of the stream (also inside `kind: List`,
    /// as `kubectl get -o yaml` writes). Objects without a namespace are in
    /// `default`; other kinds are ignored.
    pub fn load(path: &Path) -> Result<Self, FileSourceError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| FileSourceError::Read { path: path.to_owned(), source })?;
        Self::parse(&text, path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<Self, FileSourceError> {
        let documents: Vec<Value> = serde_saphyr::from_multiple(text)
            .map_err(|e| FileSourceError::Yaml { path: path.to_owned(), message: e.to_string() })?;
        let mut source = FileSource::default();
        let mut pending = documents;
        while let Some(document) = pending.pop() {
            if document.is_null() {
                continue;
            }
            let header: Header = serde_json::from_value(document.clone()).map_err(|e| {
                FileSourceError::Yaml { path: path.to_owned(), message: e.to_string() }
            })?;
            let object_error = |e: serde_json::Error| FileSourceError::Object {
                path: path.to_owned(),
                kind: header.kind.clone(),
                name: header.metadata.name.clone(),
                message: format!("line {}, column {}", e.line(), e.column()),
            };
            let (object, content) = match header.kind.as_str() {
                "List" => {
                    pending.extend(header.items);
                    continue;
                }
                "ConfigMap" => {
                    let cm: ConfigMap = serde_json::from_value(document).map_err(object_error)?;
                    (
                        ObjectRef::config_map(&header.metadata.name),
                        ObjectContent::from_config_map(cm),
                    )
                }
                "Secret" => {
                    let secret: Secret = serde_json::from_value(document).map_err(object_error)?;
                    (ObjectRef::secret(&header.metadata.name), ObjectContent::from_secret(secret))
                }
                _ => continue,
            };
            let namespace = header.metadata.namespace.unwrap_or_else(|| "default".to_owned());
            source.objects.insert((namespace, object), Arc::new(content));
        }
        Ok(source)
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// The object, if the file has it.
    pub fn get(&self, namespace: &str, object: &ObjectRef) -> Option<&Arc<ObjectContent>> {
        self.objects.get(&(namespace.to_owned(), object.clone()))
    }
}

impl ObjectSource for FileSource {
    async fn fetch(
        &self,
        namespace: &str,
        object: &ObjectRef,
    ) -> Result<Option<Arc<ObjectContent>>, LookupError> {
        Ok(self.get(namespace, object).cloned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::digest::{Digester, ObjectId};
    use crate::core::refs::ConsumedKeys;

    fn digest(source: &FileSource, namespace: &str, object: ObjectRef) -> Option<String> {
        let content = source.get(namespace, &object)?;
        let id = ObjectId { namespace, object: &object };
        Some(Digester::default().digest(id, content, &ConsumedKeys::All, None))
    }

    #[test]
    fn reads_a_stream_with_lists_and_default_namespaces() {
        let yaml = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: c}
data: {k: v}
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Secret
  metadata: {name: db, namespace: team-a}
  data: {password: aHVudGVyMg==, username: YWRtaW4=}
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: ignored}
---
"#;
        let source = FileSource::parse(yaml, Path::new("t.yaml")).expect("parses");
        assert_eq!(source.len(), 2);
        assert_eq!(
            digest(&source, "default", ObjectRef::config_map("c")).as_deref(),
            Some("sha256:26168d429f573bf8c4dab0d9f8eafed2679ab5e988f5f3c90a9c0edac60bc2ba")
        );
        assert_eq!(
            digest(&source, "team-a", ObjectRef::secret("db")).as_deref(),
            Some("sha256:ce9453749df7a28f03dd7450a871546b6f0aa2dca98802812835eac969b0a5da")
        );
        assert!(source.get("team-b", &ObjectRef::secret("db")).is_none());
    }

    #[test]
    fn bad_files_get_clear_errors() {
        let err = FileSource::parse(
            "kind: Secret\nmetadata: {name: s}\ndata: {k: '!!notbase64'}\n",
            Path::new("f"),
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(err.contains("Secret \"s\" does not parse") && !err.contains("notbase64"), "{err}");
        assert!(FileSource::parse("a: [unclosed", Path::new("f")).is_err());
        assert!(FileSource::load(Path::new("/nonexistent/objects.yaml")).is_err());
    }
}
