//! The input of `configsum render`: a YAML stream of documents (a
//! `kind: List`'s items are handled like documents), or one KRM
//! `ResourceList` whose `items` are the documents and whose `functionConfig`
//! carries the options.

use super::RenderError;
use super::tree::{self, Node};
use crate::core::ObjectKind;

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
    pub fn parse(text: &str) -> Result<Stream, RenderError> {
        let mut documents = Vec::new();
        for (index, (first_line, chunk)) in
            crate::lookup::split_documents(text).into_iter().enumerate()
        {
            let node = tree::parse(chunk).map_err(|e| {
                // The object, from the document's lines before the error.
                let object = crate::lookup::describe_before(chunk, e.line);
                let object = if object.is_empty() { object } else { format!("{object}: ") };
                RenderError::Input {
                    document: index + 1,
                    reason: format!(
                        "{object}not valid YAML at line {}, column {}: {}",
                        first_line + e.line - 1,
                        e.column,
                        e.reason
                    ),
                }
            })?;
            documents.push(match node {
                // An empty document (or one that is only a null) stays one.
                Node::Plain(s) if matches!(s.as_str(), "" | "~" | "null" | "Null" | "NULL") => None,
                node if is_mapping(&node) => Some(node),
                _ => {
                    return Err(RenderError::Input {
                        document: index + 1,
                        reason: "not a mapping".to_owned(),
                    });
                }
            });
        }
        let present: Vec<&Node> = documents.iter().flatten().collect();
        let resource_list = present.len() == 1
            && present[0].get("kind").and_then(Node::as_str) == Some("ResourceList")
            && present[0].get("apiVersion").and_then(Node::as_str)
                == Some(RESOURCE_LIST_API_VERSION);
        Ok(Stream { documents, resource_list })
    }

    /// The `functionConfig` of a `ResourceList`.
    pub fn function_config(&self) -> Option<&Node> {
        if !self.resource_list {
            return None;
        }
        self.documents.iter().flatten().next().and_then(|list| list.get("functionConfig"))
    }

    /// Every document to render, with `kind: List` items in their place.
    pub fn documents_mut(&mut self) -> Vec<Document<'_>> {
        let resource_list = self.resource_list;
        let mut out = Vec::new();
        for (index, document) in self.documents.iter_mut().enumerate() {
            let Some(node) = document else { continue };
            let number = index + 1;
            let is_list = node.get("kind").and_then(Node::as_str) == Some("List");
            if !resource_list && !is_list {
                out.push(Document { number, node });
                continue;
            }
            if let Some(Node::List(items)) = node.get_mut("items") {
                out.extend(items.iter_mut().map(|node| Document { number, node }));
            }
        }
        out
    }

    /// The ConfigMaps and Secrets of the stream (a List's or ResourceList's
    /// items included) as YAML texts, each with its document's number, for
    /// reading their data.
    pub fn object_texts(&self) -> Vec<(usize, String)> {
        let mut out = Vec::new();
        for (index, document) in self.documents.iter().enumerate() {
            let Some(node) = document else { continue };
            let is_list = node.get("kind").and_then(Node::as_str) == Some("List");
            let items: Vec<&Node> = match (self.resource_list || is_list, node.get("items")) {
                (true, Some(Node::List(items))) => items.iter().collect(),
                (true, _) => Vec::new(),
                (false, _) => vec![node],
            };
            let objects = items.into_iter().filter(|item| {
                item.get("kind")
                    .and_then(Node::as_str)
                    .and_then(ObjectKind::from_api_kind)
                    .is_some()
            });
            out.extend(objects.map(|item| (index + 1, item.to_yaml())));
        }
        out
    }

    /// The whole stream as YAML: documents separated by `---`, empty ones kept.
    pub fn to_yaml(&self) -> String {
        let mut out = String::new();
        for (index, document) in self.documents.iter().enumerate() {
            if index > 0 || document.is_none() {
                out.push_str("---\n");
            }
            if let Some(node) = document {
                out.push_str(&node.to_yaml());
            }
        }
        out
    }
}

fn is_mapping(node: &Node) -> bool {
    match node {
        Node::Map(_) => true,
        Node::Tagged(tagged) => tagged.0 == "!!map" && matches!(tagged.1, Node::Map(_)),
        _ => false,
    }
}
