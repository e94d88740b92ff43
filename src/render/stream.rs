//! The input of `configsum render`: a YAML stream of documents (a
//! `kind: List`'s items are handled like documents), or one KRM
//! `ResourceList` whose `items` are the documents and whose `functionConfig`
//! carries the options.

use super::RenderError;
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
    pub fn parse(text: &str) -> Result<Stream, RenderError> {
        let mut documents = Vec::new();
        for (index, chunk) in split_documents(text).into_iter().enumerate() {
            let node = tree::parse(chunk).map_err(|e| RenderError::Input {
                document: index + 1,
                reason: format!("not valid YAML: {}", crate::lookup::yaml_reason(&e)),
            })?;
            documents.push(match node {
                Node::Null => None,
                Node::Map(_) => Some(node),
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

    /// The documents as YAML texts, each with its number, for reading the
    /// ConfigMaps and Secrets they hold.
    pub fn object_texts(&self) -> Vec<(usize, String)> {
        let mut out = Vec::new();
        for (index, document) in self.documents.iter().enumerate() {
            let Some(node) = document else { continue };
            let items = match (self.resource_list, node.get("items")) {
                (true, Some(Node::List(items))) => items.iter().collect(),
                (true, _) => Vec::new(),
                (false, _) => vec![node],
            };
            out.extend(items.into_iter().map(|item| (index + 1, item.to_yaml())));
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

/// The texts of the stream's documents. A line starting `---` opens a new
/// document (a leading one opens the first); a line `...` closes one.
/// Comments and blank lines before the first marker are not a document.
fn split_documents(text: &str) -> Vec<&str> {
    let mut documents = Vec::new();
    let mut start = 0;
    let mut offset = 0;
    let mut seen_marker = false;
    for line in text.split_inclusive('\n') {
        let bare = line.trim_end_matches(['\n', '\r']);
        let is_marker = bare == "---" || bare.starts_with("--- ") || bare == "...";
        if is_marker {
            let chunk = &text[start..offset];
            if seen_marker || has_content(chunk) {
                documents.push(chunk);
            }
            seen_marker = bare != "...";
            // `--- {a: b}`: the content after the marker belongs to the new document.
            start = if bare.starts_with("--- ") { offset + 4 } else { offset + line.len() };
            if bare == "..." {
                seen_marker = false;
            }
        }
        offset += line.len();
    }
    let last = &text[start..];
    if seen_marker || has_content(last) {
        documents.push(last);
    }
    documents
}

fn has_content(text: &str) -> bool {
    text.lines().any(|l| {
        let l = l.trim();
        !l.is_empty() && !l.starts_with('#')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_streams_as_yaml_does() {
        assert_eq!(split_documents("a: 1\n---\nb: 2\n"), vec!["a: 1\n", "b: 2\n"]);
        assert_eq!(
            split_documents("---\n# Source: x\na: 1\n---\n---\nb: 2"),
            vec!["# Source: x\na: 1\n", "", "b: 2"]
        );
        assert_eq!(split_documents("# only a comment\n---\na: 1\n"), vec!["a: 1\n"]);
        assert_eq!(split_documents("--- {a: 1}\n"), vec!["{a: 1}\n"]);
        assert_eq!(split_documents("a: 1\n...\n"), vec!["a: 1\n"]);
        assert_eq!(split_documents("a: |\n  ---\n  x\n"), vec!["a: |\n  ---\n  x\n"]);
    }
}
