//! The YAML side of `--objects-from`: a node tree that keeps where every
//! scalar was written, and parse errors that never quote a value (a
//! duplicate key is named).

use std::fmt;
use std::path::Path;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;
use serde_saphyr::granit_parser::{ErrorKind, Event, Parser, ScalarStyle, ScanError};

use super::documents;
use super::error::FileSourceError;
use super::tags::RefusedTag;

/// A YAML node as parsed, before we know which object it belongs to: the kind
/// may come after `data`, and only the kind says whether `data` holds strings.
pub enum Node {
    Null,
    /// A string scalar: quoted, a block, or plain text YAML reads as a string.
    Text(String),
    /// A plain scalar YAML reads as a boolean or a number (`yes`, `0x1F`, `1.0`).
    /// Its spelling is kept in the source only, at the node's span.
    Typed,
    List(Vec<Spanned<Node>>),
    Map(Vec<(String, Spanned<Node>)>),
}

/// The entries of a mapping, in file order.
pub type Fields = [(String, Spanned<Node>)];

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML node")
    }

    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Node, E> {
        Ok(Node::Typed)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Node, E> {
        Ok(Node::Typed)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Node, E> {
        Ok(Node::Typed)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Node, E> {
        Ok(Node::Typed)
    }

    fn visit_str<E>(self, text: &str) -> Result<Node, E> {
        Ok(Node::Text(text.to_owned()))
    }

    fn visit_string<E>(self, text: String) -> Result<Node, E> {
        Ok(Node::Text(text))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::List(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut fields = Vec::new();
        while let Some(field) = map.next_entry()? {
            fields.push(field);
        }
        Ok(Node::Map(fields))
    }
}

pub fn yaml_options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    // Errors are described by `yaml_reason`, never with the source around them.
    options.with_snippet = false;
    // `.inf` or `1e999` is a number like any other, not an error quoting it.
    options.non_finite_float_policy = serde_saphyr::NonFiniteFloatPolicy::PassThrough;
    options
}

/// A syntax error in `text`, with the document it is in and the object that
/// document describes (objects naming no namespace are in `namespace`).
pub fn yaml_error(
    path: &Path,
    text: &str,
    namespace: &str,
    error: &serde_saphyr::Error,
) -> FileSourceError {
    let (line, column) = error.location().map_or((0, 0), |at| (at.line(), at.column()));
    let (document, object) = locate(text, line, namespace);
    FileSourceError::Yaml {
        path: path.to_owned(),
        document,
        object,
        line,
        column,
        reason: yaml_reason(error),
    }
}

/// A tag outside YAML's core schema in `text`, with the document it is in and
/// the object that document describes, as for a syntax error.
pub fn tag_error(
    path: &Path,
    text: &str,
    namespace: &str,
    refused: &RefusedTag,
) -> FileSourceError {
    let (line, column) = (count(refused.line), count(refused.column));
    let (document, object) = locate(text, line, namespace);
    FileSourceError::Tag { path: path.to_owned(), document, object, line, column }
}

fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// The document (1-based; 0 when unknown) holding `line` of `text`, and the
/// object it describes as far as its lines before `line` tell; objects that
/// name no namespace are in `namespace`.
fn locate(text: &str, line: u64, namespace: &str) -> (u32, String) {
    let found = usize::try_from(line).ok().and_then(|line| documents::object_at(text, line));
    match found {
        Some((document, mut object)) => {
            if object.name.is_some() && object.namespace.is_none() {
                object.namespace = Some(namespace.to_owned());
            }
            (u32::try_from(document).unwrap_or(u32::MAX), object.describe())
        }
        None => (0, String::new()),
    }
}

/// What is wrong, in words that cannot quote the file: the parser's fixed
/// messages, or ours. Anything else the library says might carry a value.
pub fn yaml_reason(error: &serde_saphyr::Error) -> String {
    use serde_saphyr::{Error, ExternalMessageSource};
    match error {
        Error::ExternalMessage { source, .. } => match &**source {
            ExternalMessageSource::Parser(scan) => scan_reason(scan),
            _ => "invalid".into(),
        },
        Error::AliasError { error, .. } | Error::WithSnippet { error, .. } => yaml_reason(error),
        // A key names something; it is shown (escaped, cut short), values never are.
        Error::DuplicateMappingKey { key: Some(key), .. } => {
            let mut shown: String = key.chars().take(64).collect();
            if shown.len() < key.len() {
                shown.push('…');
            }
            format!("duplicate key \"{}\"", shown.escape_debug())
        }
        Error::DuplicateMappingKey { .. } => "duplicate key".into(),
        Error::UnknownAnchor { .. } => "alias to an unknown anchor".into(),
        Error::NullIntoString { .. } => "null where a string is needed".into(),
        Error::Unexpected { expected, .. } => format!("expected {expected}"),
        Error::InvalidScalar { ty, .. } => format!("invalid {ty}"),
        Error::Budget { .. }
        | Error::AliasReplayLimitExceeded { .. }
        | Error::AliasExpansionLimitExceeded { .. }
        | Error::AliasReplayStackDepthExceeded { .. } => {
            "too deeply nested, too large or too many aliases".into()
        }
        _ => "unsupported YAML".into(),
    }
}

/// The parser's fixed message for a syntax error; the few that would quote
/// the input are replaced.
pub fn scan_reason(scan: &ScanError) -> String {
    match scan.kind() {
        ErrorKind::UnexpectedCharacter { .. }
        | ErrorKind::Custom(_)
        | ErrorKind::InputDecoding { .. }
        | ErrorKind::InputIo { .. } => "unexpected character".into(),
        ErrorKind::RecursionLimitExceeded => "too deeply nested".into(),
        kind => kind.to_string(),
    }
}

/// Where a block scalar (`|`, `>`) that ends `text` on a line with content
/// and no line break starts (its byte offset), if one does. The parser gives
/// such a scalar a final line break; YAML (and PyYAML, ruamel, go-yaml) has
/// none to keep. Parses again only for a text that ends that way.
pub fn block_scalar_at_end(text: &str) -> Option<u64> {
    let last_line = text.rsplit(['\n', '\r']).next()?;
    if !last_line.chars().any(|c| c != ' ' && c != '\t') {
        return None;
    }
    let chars = text.chars().count();
    let mut found = None;
    let mut parser = Parser::new_from_str(text);
    while let Some(Ok((event, span))) = parser.next_event() {
        if matches!(event, Event::Scalar(_, ScalarStyle::Literal | ScalarStyle::Folded, ..))
            && span.end.index() == chars
        {
            found = span.start.byte_offset().and_then(|at| u64::try_from(at).ok());
        }
    }
    found
}
