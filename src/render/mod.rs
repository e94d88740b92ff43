//! `configsum render` (docs/render.md): the webhook's digests written into a
//! YAML stream at render time, for Helm post-renderers, kustomize and kpt
//! functions and GitOps pipelines. The same core decides as at admission of a
//! CREATE, against the ConfigMaps and Secrets of the stream and of
//! `--objects-from` files, so a rendered workload is admitted with no patch.
//!
//! - [`tree`]: the YAML tree that keeps what every reader reads;
//! - [`scalar`]: how a string is written so that every reader reads it back;
//! - [`stream`]: documents, `kind: List` items and KRM `ResourceList`s;
//! - [`error`]: [`RenderError`], why nothing was written;
//! - [`objects`]: the stream's ConfigMaps and Secrets, read from the tree.

pub mod command;
pub mod error;
pub mod objects;
pub mod scalar;
pub mod stream;
pub mod tree;

use std::path::PathBuf;

use json_patch::PatchOperation;

pub use self::error::RenderError;
use self::objects::is_object;
use self::stream::{Document, is_list, is_resource_list, list_items, parse_document};
use self::tree::Node;
use crate::core::model::kinds::WorkloadKind;
use crate::core::{Digester, ObjectRef, Settings};
use crate::core::{Request, review};
use crate::lookup::{FileSource, split_documents};

/// What a render needs besides the stream.
pub struct Options {
    pub settings: Settings,
    pub digester: Digester,
    /// Namespace of objects that name none (`--namespace`, else `default`).
    pub namespace: String,
    /// `--objects-from` files, in order: (path, text).
    pub objects_from: Vec<(PathBuf, String)>,
}

/// A finished render: the output, in pieces to write one after the other
/// (joining them would hold it twice), and the notes for stderr.
#[derive(Debug)]
pub struct Rendered {
    pub output: Vec<String>,
    pub notes: Vec<String>,
}

/// A document between reading and writing. Most are written as soon as they
/// are read, so at most one document's tree is held at a time, Lists aside.
enum Part {
    /// The document's final text, its `---` included, and its notes.
    Written { text: String, notes: Vec<String> },
    /// A workload that reads an object the stream had not defined before it:
    /// its input text, parsed again once every object is known (a tree takes
    /// several times the memory of its text).
    Workload { number: usize, first_line: usize, text: String },
    /// A List, or the stream's one ResourceList: its items are rendered in place.
    List { number: usize, node: Node },
}

/// Renders the stream `text`: the same documents in the same order, each
/// workload's pod template carrying the digests admission would write. A
/// `kind: List`'s items are handled like documents, and so are the `items` of
/// a stream that is one `ResourceList`. Takes the text to let it go once read.
pub fn render(text: String, options: &Options) -> Result<Rendered, RenderError> {
    let mut objects = FileSource::scoped(options.settings.object_scope());
    let mut parts = read(into_documents(text), &mut objects, options)?;
    for (path, text) in &options.objects_from {
        objects.add_first_wins(text, path, &options.namespace)?;
    }
    let mut notes = Vec::new();
    let mut output = Vec::with_capacity(parts.len());
    for part in parts.drain(..) {
        let text = match part {
            Part::Written { text, notes: mut own, .. } => {
                notes.append(&mut own);
                text
            }
            Part::Workload { number, first_line, text } => {
                let parsed = parse_document(number, first_line, &text)?;
                drop(text);
                let mut out = separator(number, parsed.is_none());
                if let Some(mut node) = parsed {
                    let mut document = Document { number, node: &mut node };
                    render_document(&mut document, &objects, options, &mut notes, true);
                    node.write_yaml(&mut out);
                }
                out
            }
            Part::List { number, mut node } => {
                for item in list_items(&mut node) {
                    let mut document = Document { number, node: item };
                    render_document(&mut document, &objects, options, &mut notes, true);
                }
                let mut out = separator(number, false);
                node.write_yaml(&mut out);
                out
            }
        };
        output.push(text);
    }
    Ok(Rendered { output, notes })
}

/// Parses every document in order (the first that cannot be read is the one
/// reported, before any object's error), reads the objects as they come, and
/// renders each workload whose objects came before it, as Helm and kustomize
/// order them: the first definition wins, so nothing later changes its digests.
fn read(
    documents: Vec<(usize, String)>,
    objects: &mut FileSource,
    options: &Options,
) -> Result<Vec<Part>, RenderError> {
    let mut parts = Vec::new();
    let mut present = 0;
    // The first document, kept as a list while it may be the stream's one ResourceList.
    let mut resource_list = None;
    let mut objects_error = None;
    let mut add = |objects: &mut FileSource, number, node: &Node| {
        if objects_error.is_none() {
            objects_error = add_object(objects, number, node, options).err();
        }
    };
    // Each document's text is let go once read, as the output grows.
    for (index, (first_line, chunk)) in documents.into_iter().enumerate() {
        let number = index + 1;
        let Some(mut node) = parse_document(number, first_line, &chunk)? else {
            let text = separator(number, true);
            parts.push(Part::Written { text, notes: Vec::new() });
            continue;
        };
        present += 1;
        if present == 1 && is_resource_list(&node) {
            resource_list = Some(parts.len());
            parts.push(Part::List { number, node });
        } else if is_list(&node) {
            for item in list_items(&mut node).filter(|item| is_object(item)) {
                add(objects, number, item);
            }
            parts.push(Part::List { number, node });
        } else if workload_type(&node).is_some() {
            let mut notes = Vec::new();
            let mut document = Document { number, node: &mut node };
            if render_document(&mut document, objects, options, &mut notes, false) {
                parts.push(written(number, &node, notes));
            } else {
                parts.push(Part::Workload { number, first_line, text: chunk });
            }
        } else {
            if is_object(&node) {
                add(objects, number, &node);
            }
            parts.push(written(number, &node, Vec::new()));
        }
    }
    match resource_list.and_then(|at| parts.get_mut(at).map(|part| (at, part))) {
        // Alone: its items are the documents.
        Some((_, Part::List { number, node })) if present == 1 => {
            for item in list_items(node).filter(|item| is_object(item)) {
                add(objects, *number, item);
            }
        }
        // Among other documents, a ResourceList is a document like any other.
        Some((at, Part::List { number, node })) => {
            parts[at] = written(*number, node, Vec::new());
        }
        _ => {}
    }
    match objects_error {
        Some(error) => Err(error),
        None => Ok(parts),
    }
}

/// The stream's documents as texts of their own, each with the line it
/// starts on. Copied out from the last to the first, the input shrinking
/// behind them, so that the input and its documents are never both held whole.
fn into_documents(mut text: String) -> Vec<(usize, String)> {
    let base = text.as_ptr() as usize;
    let spans: Vec<(usize, usize, usize)> = split_documents(&text)
        .into_iter()
        .map(|(line, chunk)| {
            let start = chunk.as_ptr() as usize - base;
            (line, start, start + chunk.len())
        })
        .collect();
    let mut documents = Vec::with_capacity(spans.len());
    let mut shrunk_at = text.len();
    for &(line, start, end) in spans.iter().rev() {
        documents.push((line, text[start..end].to_owned()));
        text.truncate(start);
        // The memory goes back a megabyte at a time, not a call per document.
        if shrunk_at - start >= 1 << 20 {
            text.shrink_to_fit();
            shrunk_at = start;
        }
    }
    documents.reverse();
    documents
}

/// A document that is neither a workload nor a List, as it is written.
fn written(number: usize, node: &Node, notes: Vec<String>) -> Part {
    let mut text = separator(number, false);
    node.write_yaml(&mut text);
    // Held until the end: not the spare capacity of its growth too.
    text.shrink_to_fit();
    Part::Written { text, notes }
}

const SEPARATOR: &str = "---\n";

/// What comes before a document's text: `---` before all but the first, and
/// alone for an empty document.
fn separator(number: usize, empty: bool) -> String {
    if number > 1 || empty { SEPARATOR.to_owned() } else { String::new() }
}

/// Adds the object `node` (of document `number`) to `objects`; the first
/// definition wins.
fn add_object(
    objects: &mut FileSource,
    number: usize,
    node: &Node,
    options: &Options,
) -> Result<(), RenderError> {
    objects::add(objects, node, &options.namespace).map_err(|e| match e {
        objects::Refused::Field(reason) => RenderError::Input { document: number, reason },
        objects::Refused::Objects(e) => RenderError::Objects(e),
    })
}

/// The `apiVersion` and `kind` of a document the core may mutate. The core's
/// first question, asked before the document is turned into JSON: most of a
/// stream (CRDs, Services, RBAC) is not a workload.
fn workload_type(node: &Node) -> Option<(String, String)> {
    let api_version = node.get("apiVersion").and_then(Node::as_str)?;
    let kind = node.get("kind").and_then(Node::as_str)?;
    let (group, version) = split_api_version(api_version);
    WorkloadKind::from_gvk(group, version, kind)?;
    Some((api_version.to_owned(), kind.to_owned()))
}

/// Renders one document. Unless `complete` (every object is known), a
/// workload that reads an object not (yet) known is left as it is: returns
/// false, with no note written.
fn render_document(
    document: &mut Document<'_>,
    objects: &FileSource,
    options: &Options,
    notes: &mut Vec<String>,
    complete: bool,
) -> bool {
    let node = &mut *document.node;
    let Some((api_version, kind)) = workload_type(node) else { return true };
    let (group, version) = split_api_version(&api_version);
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
    let missed = std::cell::Cell::new(false);
    let lookup = |ns: &str, object: &ObjectRef| match objects.get(ns, object) {
        Some(content) => Ok(Some(&**content)),
        None => {
            missed.set(true);
            // Short, so the object's name fits the 119-character note.
            Err("not in the input or --objects-from".to_owned())
        }
    };
    let decision = review(&request, &options.settings, &options.digester, lookup);
    if missed.get() && !complete {
        return false;
    }
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
    true
}

/// `apps/v1` to (`apps`, `v1`); `v1` to (``, `v1`).
fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.rsplit_once('/').unwrap_or(("", api_version))
}
