//! [`FileSourceError`]: why `--objects-from` cannot be served, raised by the
//! source and by its YAML reader alike.

use std::path::PathBuf;

/// Why `--objects-from` cannot be served. No variant carries a value from the
/// file; each names the document (1-based, counting every document of the
/// stream) and, where it can be read, the object (`Kind namespace/name`).
#[derive(Debug, thiserror::Error)]
pub enum FileSourceError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    /// Not YAML. The object is read from the document's lines before the
    /// error (its kind, namespace and name, when shaped like ones), as a
    /// broken document cannot be parsed; a duplicate key is named.
    #[error("{path}: {}not valid YAML{}: {reason}", label(*document, None, object), at(*line, *column))]
    Yaml { path: PathBuf, document: u32, object: String, line: u64, column: u64, reason: String },
    /// A tag outside YAML's core schema (`!!python/…`, `!!binary`, `!custom`):
    /// no Kubernetes object carries one. Not named: a stray `!` makes a value a tag.
    #[error("{path}: {}tag outside YAML's core schema at line {line}, column {column}", label(*document, None, object))]
    Tag { path: PathBuf, document: u32, object: String, line: u64, column: u64 },
    #[error("{path}: {}not a mapping (line {line}, column {column})", label(*document, None, ""))]
    NotAnObject { path: PathBuf, document: u32, line: u64, column: u64 },
    /// `object` is `Kind namespace/name`, or `Kind` while the name is unknown,
    /// or empty; `item` is its index in a List; `field` is a path such as
    /// `data.password` or `items[2]`.
    #[error("{path}: {}{field} {problem} (line {line}, column {column})", label(*document, *item, object))]
    Object {
        path: PathBuf,
        document: u32,
        item: Option<u32>,
        object: String,
        field: String,
        problem: &'static str,
        line: u64,
        column: u64,
    },
}

/// `document 2, items[0] (ConfigMap team-a/c): `; nothing when the document is unknown (0).
fn label(document: u32, item: Option<u32>, object: &str) -> String {
    if document == 0 {
        return String::new();
    }
    let mut label = format!("document {document}");
    if let Some(item) = item {
        label.push_str(&format!(", items[{item}]"));
    }
    if !object.is_empty() {
        label.push_str(&format!(" ({object})"));
    }
    label.push_str(": ");
    label
}

/// Where a YAML error is; line 0 means the parser could not say.
fn at(line: u64, column: u64) -> String {
    if line == 0 { String::new() } else { format!(" at line {line}, column {column}") }
}
