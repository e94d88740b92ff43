//! The input of `configsum render`: a YAML stream of documents (a
//! `kind: List`'s items are handled like documents), or one KRM
//! `ResourceList` whose `items` are the documents and whose `functionConfig`
//! carries the options.

use super::error::RenderError;
use super::tree::{self, Node};

/// The parsed input, written back in the same order.
pub struct Stream {
    /// Every document of the stream (`None`: an empty one), numbered from 1.
    documents: Vec<Option<Node>>,
    /// The stream is one `ResourceList`: its `items` are the documents.
    resource_list: bool,
}

/// A document (or a List's or ResourceList's item) to render.
pub struct Document<'a> {
    /// 1-based, counting every document of the stream.
    pub number: usize,
    pub node: &'a mut Node,
}

const RESOURCE_LIST_API_VERSION: &str = "config.kubernetes.io/v1";

impl Stream {
    /// Every document parsed and kept, for reading a whole stream as render
    /// reads it; [`super::render`] parses document by document instead.
    pub fn parse(text: &str) -> Result<Stream, RenderError> {
        let mut documents = Vec::new();
        for (index, (first_line, chunk)) in
            crate::lookup::split_documents(text).into_iter().enumerate()
        {
            documents.push(parse_document(index + 1, first_line, chunk)?);
        }
        let present: Vec<&Node> = documents.iter().flatten().collect();
        let resource_list = present.len() == 1 && is_resource_list(present[0]);
        Ok(Stream { documents, resource_list })
    }

    /// Every document to render, with `kind: List` items in their place.
    pub fn documents_mut(&mut self) -> Vec<Document<'_>> {
        let resource_list = self.resource_list;
        let mut out = Vec::new();
        for (index, document) in self.documents.iter_mut().enumerate() {
            let Some(node) = document else { continue };
            let number = index + 1;
            if !resource_list && !is_list(node) {
                out.push(Document { number, node });
                continue;
            }
            out.extend(list_items(node).map(|node| Document { number, node }));
        }
        out
    }
}

/// The `functionConfig` of the stream when it is one `ResourceList`: read
/// before the options are known, as it holds some. `None` also when the
/// stream does not parse ([`super::render`] says why, after the usage checks).
/// Parses no further than a second document that is not empty.
pub fn function_config(text: &str) -> Option<Node> {
    let mut list = None;
    for (index, (first_line, chunk)) in crate::lookup::each_document(text).enumerate() {
        match parse_document(index + 1, first_line, chunk) {
            Ok(None) => {}
            Ok(Some(_)) if list.is_some() => return None,
            Ok(Some(node)) => list = Some(node),
            Err(_) => return None,
        }
    }
    list.filter(is_resource_list)?.get("functionConfig").cloned()
}

/// One document of the stream (`number`, 1-based, starting on line
/// `first_line`): a mapping, or `None` for an empty one.
pub fn parse_document(
    number: usize,
    first_line: usize,
    chunk: &str,
) -> Result<Option<Node>, RenderError> {
    let node = tree::parse(chunk).map_err(|e| {
        // The object, from the document's lines before the error.
        let object = crate::lookup::describe_before(chunk, e.line);
        let object = if object.is_empty() { object } else { format!("{object}: ") };
        let (line, column) = (first_line + e.line - 1, e.column);
        let reason = if e.refused_tag {
            format!("{object}{} at line {line}, column {column}", e.reason)
        } else {
            format!("{object}not valid YAML at line {line}, column {column}: {}", e.reason)
        };
        RenderError::Input { document: number, reason }
    })?;
    match node {
        // An empty document (or one that is only a null) stays one.
        Node::Plain(s) if matches!(s.as_str(), "" | "~" | "null" | "Null" | "NULL") => Ok(None),
        node if is_mapping(&node) => Ok(Some(node)),
        _ => Err(RenderError::Input { document: number, reason: "not a mapping".to_owned() }),
    }
}

/// A `config.kubernetes.io/v1` `ResourceList`: when it is the whole stream,
/// its `items` are the documents.
pub fn is_resource_list(node: &Node) -> bool {
    node.get("kind").and_then(Node::as_str) == Some("ResourceList")
        && node.get("apiVersion").and_then(Node::as_str) == Some(RESOURCE_LIST_API_VERSION)
}

/// A `kind: List`: its items are handled like documents.
pub fn is_list(node: &Node) -> bool {
    node.get("kind").and_then(Node::as_str) == Some("List")
}

/// The items of a List or ResourceList (none unless `items` is a sequence).
pub fn list_items(node: &mut Node) -> impl Iterator<Item = &mut Node> {
    let items = match node.get_mut("items") {
        Some(Node::List(items)) => Some(items.iter_mut()),
        _ => None,
    };
    items.into_iter().flatten()
}

fn is_mapping(node: &Node) -> bool {
    match node {
        Node::Map(_) => true,
        Node::Tagged(tagged) => tagged.0 == "!!map" && matches!(tagged.1, Node::Map(_)),
        _ => false,
    }
}
