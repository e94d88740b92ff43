//! `configsum render` (docs/render.md): the webhook's digests written into a
//! YAML stream at render time, for Helm post-renderers, kustomize and kpt
//! functions and GitOps pipelines. The same core decides as at admission of a
//! CREATE, against the ConfigMaps and Secrets of the stream and of
//! `--objects-from` files, so a rendered workload is admitted with no patch.
//!
//! - [`tree`]: the YAML tree that keeps what every reader reads;
//! - [`scalar`]: how a string is written so that every reader reads it back;
//! - [`stream`]: documents, `kind: List` items and KRM `ResourceList`s.

pub mod command;
pub mod scalar;
pub mod stream;
pub mod tree;

use std::path::{Path, PathBuf};

use json_patch::PatchOperation;

use self::stream::{Document, Stream};
use self::tree::Node;
use crate::core::{Digester, ObjectRef, Settings, WorkloadKind};
use crate::core::{Request, review};
use crate::lookup::{FileSource, FileSourceError};

/// What a render needs besides the stream.
pub struct Options {
    pub settings: Settings,
    pub digester: Digester,
    /// Namespace of objects that name none (`--namespace`, else `default`).
    pub namespace: String,
    /// `--objects-from` files, in order: (path, text).
    pub objects_from: Vec<(PathBuf, String)>,
}

/// A finished render: the whole output, and the notes for stderr.
#[derive(Debug)]
pub struct Rendered {
    pub output: String,
    pub notes: Vec<String>,
}

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

/// Renders `stream` (see [`Stream::parse`]): the same documents in the same
/// order, each workload's pod template carrying the digests admission would write.
pub fn render(mut stream: Stream, options: &Options) -> Result<Rendered, RenderError> {
    let mut objects = FileSource::default();
    for (number, text) in stream.object_texts() {
        // The text is render's own writing of one object: the stream's
        // document number says where it is, not a line of that text.
        objects.add_first_wins(&text, Path::new("-"), &options.namespace).map_err(|e| match e {
            FileSourceError::Object { object, field, problem, .. } => RenderError::Input {
                document: number,
                reason: format!("{object}: {field} {problem}"),
            },
            other => RenderError::Objects(other),
        })?;
    }
    for (path, text) in &options.objects_from {
        objects.add_first_wins(text, path, &options.namespace)?;
    }
    let mut notes = Vec::new();
    for mut document in stream.documents_mut() {
        render_document(&mut document, &objects, options, &mut notes);
    }
    Ok(Rendered { output: stream.to_yaml(), notes })
}

fn render_document(
    document: &mut Document<'_>,
    objects: &FileSource,
    options: &Options,
    notes: &mut Vec<String>,
) {
    let node = &mut *document.node;
    let Some(api_version) = node.get("apiVersion").and_then(Node::as_str).map(str::to_owned) else {
        return;
    };
    let (group, version) = split_api_version(&api_version);
    let Some(kind) = node.get("kind").and_then(Node::as_str).map(str::to_owned) else { return };
    // The core's first question, asked before the document is turned into
    // JSON: most of a stream (CRDs, Services, RBAC) is not a workload.
    if WorkloadKind::from_gvk(group, version, &kind).is_none() {
        return;
    }
    let metadata = node.get("metadata");
    let namespace = metadata
        .and_then(|m| m.get("namespace"))
        .and_then(Node::as_str)
        .filter(|ns| !ns.is_empty())
        .unwrap_or(&options.namespace)
        .to_owned();
    let name = metadata.and_then(|m| m.get("name")).and_then(Node::as_str).unwrap_or("").to_owned();
    let object = node.to_json().to_string();
    let request = Request {
        group,
        version,
        kind: &kind,
        operation: "CREATE",
        namespace: Some(&namespace),
        object: Some(&object),
        ..Request::default()
    };
    let lookup = |ns: &str, object: &ObjectRef| match objects.get(ns, object) {
        Some(content) => Ok(Some(&**content)),
        // Short, so the object's name fits the 119-character note.
        None => Err("not in the input or --objects-from".to_owned()),
    };
    let decision = review(&request, &options.settings, &options.digester, lookup);
    let label = format!("document {} ({kind} {namespace}/{name})", document.number);
    notes.extend(decision.warnings.iter().map(|w| format!("{label}: {w}")));
    // Their digests are of the template the API server returns, defaults and all.
    notes.extend(decision.unobserved_workloads.iter().map(|w| {
        format!("{label}: {w}: left to admission, which reads its pod template from the cluster")
    }));
    for op in &decision.patch {
        match op {
            PatchOperation::Add(add) => {
                let tokens: Vec<String> =
                    add.path.tokens().map(|t| t.decoded().into_owned()).collect();
                let value = match &add.value {
                    serde_json::Value::String(s) => Node::Str(s.clone()),
                    _ => Node::Map(Vec::new()),
                };
                node.set(&tokens, value);
            }
            PatchOperation::Remove(remove) => {
                let tokens: Vec<String> =
                    remove.path.tokens().map(|t| t.decoded().into_owned()).collect();
                node.remove(&tokens);
            }
            // Images are not resolved at render time: no other operation comes.
            _ => {}
        }
    }
}

/// `apps/v1` to (`apps`, `v1`); `v1` to (``, `v1`).
fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.rsplit_once('/').unwrap_or(("", api_version))
}
