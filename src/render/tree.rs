//! A YAML document as `configsum render` reads and writes it: a tree that
//! keeps every scalar's string-ness. A string stays a string on the way out
//! (quoted where a plain scalar would read as something else: `"true"`,
//! `"0755"`, `"12:30:45"`, multi-line text), and a plain scalar that YAML
//! reads as a number or boolean is written back exactly as it was spelled.
//! Comments and styles do not survive; the data does.

use std::fmt::Write as _;

use serde_json::Value;
use serde_saphyr::Spanned;

use crate::lookup::YamlNode;

/// One node of a document.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    Null,
    /// A string: quoted, a block scalar, or plain text YAML reads as a string.
    Str(String),
    /// A plain scalar YAML reads as a number or boolean, as written.
    Plain(String),
    List(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

/// Parses one YAML document (the text between two `---`). Keys are strings,
/// as in every Kubernetes object.
pub fn parse(text: &str) -> Result<Node, serde_saphyr::Error> {
    let spanned: Spanned<YamlNode> =
        serde_saphyr::from_str_with_options(text, crate::lookup::yaml_options())?;
    Ok(from_yaml(spanned, text))
}

/// The `--objects-from` reader's tree, with typed scalars spelled from the source.
fn from_yaml(node: Spanned<YamlNode>, text: &str) -> Node {
    match node.value {
        YamlNode::Null => Node::Null,
        YamlNode::Text(s) => Node::Str(s),
        YamlNode::Typed => {
            let span = node.referenced.span();
            let spelled = span.byte_offset().zip(span.byte_len()).and_then(|(at, len)| {
                let (at, len) = (usize::try_from(at).ok()?, usize::try_from(len).ok()?);
                text.get(at..at.checked_add(len)?)
            });
            Node::Plain(spelled.unwrap_or("null").trim().to_owned())
        }
        YamlNode::List(items) => {
            Node::List(items.into_iter().map(|i| from_yaml(i, text)).collect())
        }
        YamlNode::Map(fields) => {
            Node::Map(fields.into_iter().map(|(k, v)| (Node::Str(k), from_yaml(v, text))).collect())
        }
    }
}

impl Node {
    /// The value of `key` in a mapping.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Map(entries) => {
                entries.iter().find(|(k, _)| k.as_str() == Some(key)).map(|e| &e.1)
            }
            _ => None,
        }
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut Node> {
        match self {
            Node::Map(entries) => {
                entries.iter_mut().find(|(k, _)| k.as_str() == Some(key)).map(|e| &mut e.1)
            }
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The node as JSON, for the core: typed scalars become the number or
    /// boolean YAML reads them as.
    pub fn to_json(&self) -> Value {
        match self {
            Node::Null => Value::Null,
            Node::Str(s) => Value::String(s.clone()),
            Node::Plain(text) => serde_saphyr::from_str::<Value>(text)
                .unwrap_or_else(|_| Value::String(text.clone())),
            Node::List(items) => Value::Array(items.iter().map(Node::to_json).collect()),
            Node::Map(entries) => {
                Value::Object(entries.iter().map(|(k, v)| (k.key_text(), v.to_json())).collect())
            }
        }
    }

    fn key_text(&self) -> String {
        match self {
            Node::Str(s) | Node::Plain(s) => s.clone(),
            Node::Null => "null".to_owned(),
            other => other.to_json().to_string(),
        }
    }

    /// Sets the string at the path `tokens` (a JSON Patch `add` of a string
    /// or an empty object), creating the mappings on the way.
    pub fn set(&mut self, tokens: &[String], value: Node) {
        let Some((last, parents)) = tokens.split_last() else { return };
        let mut node = self;
        for token in parents {
            if node.get(token).is_none() {
                if let Node::Map(entries) = node {
                    entries.push((Node::Str(token.clone()), Node::Map(Vec::new())));
                }
            }
            match node.get_mut(token) {
                Some(child) if matches!(child, Node::Map(_)) => node = child,
                Some(child) => {
                    *child = Node::Map(Vec::new());
                    node = child;
                }
                None => return,
            }
        }
        if let Node::Map(entries) = node {
            match entries.iter_mut().find(|(k, _)| k.as_str() == Some(last.as_str())) {
                // `add` of `{}` on an existing map (metadata, annotations) keeps it.
                Some((_, existing))
                    if matches!(value, Node::Map(_)) && matches!(existing, Node::Map(_)) => {}
                Some((_, existing)) => *existing = value,
                None => entries.push((Node::Str(last.clone()), value)),
            }
        }
    }

    /// Removes the entry at the path `tokens`, if it exists.
    pub fn remove(&mut self, tokens: &[String]) {
        let Some((last, parents)) = tokens.split_last() else { return };
        let mut node = self;
        for token in parents {
            match node.get_mut(token) {
                Some(child) => node = child,
                None => return,
            }
        }
        if let Node::Map(entries) = node {
            entries.retain(|(k, _)| k.as_str() != Some(last.as_str()));
        }
    }

    /// The document as block YAML.
    pub fn to_yaml(&self) -> String {
        let mut out = String::new();
        match self {
            Node::Map(entries) if !entries.is_empty() => write_map(&mut out, entries, 0),
            Node::List(items) if !items.is_empty() => write_list(&mut out, items, 0),
            scalar => {
                out.push_str(&inline(scalar));
                out.push('\n');
            }
        }
        out
    }
}

fn write_map(out: &mut String, entries: &[(Node, Node)], indent: usize) {
    for (key, value) in entries {
        let _ = write!(out, "{:indent$}{}:", "", scalar(key));
        write_value(out, value, indent);
    }
}

fn write_list(out: &mut String, items: &[Node], indent: usize) {
    for item in items {
        let _ = write!(out, "{:indent$}-", "");
        match item {
            Node::Map(entries) if !entries.is_empty() => {
                // The first entry on the dash's line, the rest under it.
                let (first, rest) = entries.split_at(1);
                let (key, value) = &first[0];
                let _ = write!(out, " {}:", scalar(key));
                write_value(out, value, indent + 2);
                write_map(out, rest, indent + 2);
            }
            Node::List(inner) if !inner.is_empty() => {
                out.push('\n');
                write_list(out, inner, indent + 2);
            }
            other => {
                let _ = writeln!(out, " {}", inline(other));
            }
        }
    }
}

/// What follows `key:` at `indent`.
fn write_value(out: &mut String, value: &Node, indent: usize) {
    match value {
        Node::Map(entries) if !entries.is_empty() => {
            out.push('\n');
            write_map(out, entries, indent + 2);
        }
        Node::List(items) if !items.is_empty() => {
            out.push('\n');
            write_list(out, items, indent);
        }
        other => {
            let _ = writeln!(out, " {}", inline(other));
        }
    }
}

/// A scalar, or an empty collection, on one line.
fn inline(node: &Node) -> String {
    match node {
        Node::Map(_) => "{}".to_owned(),
        Node::List(_) => "[]".to_owned(),
        other => scalar(other),
    }
}

fn scalar(node: &Node) -> String {
    match node {
        Node::Null => "null".to_owned(),
        Node::Plain(text) => text.clone(),
        Node::Str(s) if reads_back_as_itself(s) => s.clone(),
        // JSON's escapes are YAML's double-quoted escapes.
        Node::Str(s) => serde_json::Value::String(s.clone()).to_string(),
        other => other.to_json().to_string(),
    }
}

/// Whether `s` written plain reads back as the same string: simple
/// characters only, and YAML must not take it for a number, boolean or null.
fn reads_back_as_itself(s: &str) -> bool {
    let simple = |c: char| c.is_ascii_alphanumeric() || "-_./@+=".contains(c);
    let first_ok =
        s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '/');
    if !first_ok || !s.chars().all(simple) {
        return false;
    }
    matches!(parse(s), Ok(Node::Str(read)) if read == s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_keep_their_string_ness_through_a_round_trip() {
        let text = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: c, labels: {app: web}}
data:
  quoted-true: "true"
  mode: "0755"
  time: "12:30:45"
  looks-like-a-number: "72e40602"
  plain-hex: 0x1F
  count: 3
  flag: yes
  nothing: ~
  empty: ""
  script: |
    #!/bin/sh
    echo "hi: there"
  folded: >-
    one
    two
list: [a, "1", 2, {k: v}, [x]]
empty-map: {}
empty-list: []
"#;
        let node = parse(text).expect("parses");
        let written = node.to_yaml();
        let again = parse(&written).expect("reparses");
        assert_eq!(again, node, "written:\n{written}");
        let data = node.get("data").expect("data");
        assert_eq!(data.get("quoted-true"), Some(&Node::Str("true".into())));
        assert_eq!(data.get("mode"), Some(&Node::Str("0755".into())));
        assert_eq!(data.get("plain-hex"), Some(&Node::Plain("0x1F".into())));
        assert_eq!(data.get("flag"), Some(&Node::Plain("yes".into())));
        assert!(written.contains("quoted-true: \"true\"\n"), "{written}");
        assert!(written.contains("plain-hex: 0x1F\n"), "{written}");
        assert!(written.contains("kind: ConfigMap\n"), "plain where safe: {written}");
        let json = node.to_json();
        assert_eq!(json["data"]["count"], 3);
        assert_eq!(json["data"]["looks-like-a-number"], "72e40602");
        assert_eq!(json["data"]["script"], "#!/bin/sh\necho \"hi: there\"\n");
    }

    #[test]
    fn set_and_remove_follow_json_patch_paths() {
        let mut node = parse("spec: {template: {spec: {}}}").expect("parses");
        let path = |p: &str| p.split('/').skip(1).map(str::to_owned).collect::<Vec<_>>();
        node.set(&path("/spec/template/metadata"), Node::Map(Vec::new()));
        node.set(&path("/spec/template/metadata/annotations"), Node::Map(Vec::new()));
        node.set(&path("/spec/template/metadata/annotations/a.b~1c"), Node::Str("x".into()));
        node.set(&path("/spec/template/metadata/annotations/keep"), Node::Str("1".into()));
        node.remove(&path("/spec/template/metadata/annotations/keep"));
        let json = node.to_json();
        assert_eq!(
            json["spec"]["template"]["metadata"]["annotations"],
            serde_json::json!({"a.b~1c": "x"})
        );
    }
}
