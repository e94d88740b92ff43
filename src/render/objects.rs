//! The stream's ConfigMaps and Secrets, read from render's own tree by the
//! `--objects-from` reader's rules (`crate::lookup::object`), so that each
//! is parsed once. That reader used to read render's writing of the object
//! again; what it would have made of the writing is what is read here, and
//! where the tree holds something whose reading cannot be told for certain
//! (see [`certain`]) the writing is read as before.

use std::path::Path;

use super::scalar::plain_is_safe;
use super::tree::Node;
use crate::core::ObjectKind;
use crate::lookup::object::{Shape, Tree};
use crate::lookup::{FileSource, FileSourceError};

/// Why an object cannot be read: `{object}: {field} {problem}` (render's
/// error for its document), or an error of the writing's reading.
#[derive(Debug)]
pub enum Refused {
    Field(String),
    Objects(FileSourceError),
}

/// A ConfigMap or a Secret: its data is read for the workloads.
pub fn is_object(node: &Node) -> bool {
    node.get("kind").and_then(Node::as_str).and_then(ObjectKind::from_api_kind).is_some()
}

/// Adds the ConfigMap or Secret `node` to `objects` (other kinds are
/// ignored); the first definition of a kind, namespace and name wins, and
/// objects that name no namespace are in `namespace`.
pub fn add(objects: &mut FileSource, node: &Node, namespace: &str) -> Result<(), Refused> {
    match add_from_tree(objects, node, namespace) {
        Some(result) => result,
        None => add_written(objects, node, namespace),
    }
}

/// [`add`] from the tree; `None`, adding nothing, when the tree is not [`certain`].
pub fn add_from_tree(
    objects: &mut FileSource,
    node: &Node,
    namespace: &str,
) -> Option<Result<(), Refused>> {
    if !certain(node) {
        return None;
    }
    let added = objects.add_tree_first_wins(node, namespace);
    Some(added.map_err(|e| Refused::Field(reason(&e.object, &e.field, e.problem))))
}

/// [`add`] by the `--objects-from` reader's reading of render's writing of `node`.
pub fn add_written(objects: &mut FileSource, node: &Node, namespace: &str) -> Result<(), Refused> {
    // The text is render's own writing of one object: the stream's
    // document number says where it is, not a line of that text.
    objects.add_first_wins(&node.to_yaml(), Path::new("-"), namespace).map_err(|e| match e {
        FileSourceError::Object { object, field, problem, .. } => {
            Refused::Field(reason(&object, &field, problem))
        }
        other => Refused::Objects(other),
    })
}

fn reason(object: &str, field: &str, problem: &str) -> String {
    format!("{object}: {field} {problem}")
}

/// Collections nested deeper than this, or more nodes or scalar bytes than
/// these, are read from the writing: well within what serde-saphyr, under
/// the `--objects-from` reader, takes by default (depth 64, 250,000 nodes,
/// 64 MiB of scalars), so that its refusals are met as they were. No
/// ConfigMap or Secret comes near them.
const MAX_DEPTH: usize = 32;
const MAX_NODES: usize = 100_000;
const MAX_SCALAR_BYTES: usize = 16 << 20;

/// Whether the `--objects-from` reader's reading of render's writing of
/// `node` is known, without reading it: no explicit tag anywhere (it may
/// change a value's type or make serde-saphyr refuse it), every key a string
/// that no reader reads otherwise (a key spelled `1` and one spelled `"1"` are
/// different keys to render and the same to serde-saphyr), and within
/// serde-saphyr's limits. Then every scalar reads back as written: a string
/// (quoted or a block) as itself, a plain scalar as its spelling or, for `~`,
/// `null`, `Null`, `NULL` and nothing, as null.
pub fn certain(node: &Node) -> bool {
    let mut budget = Budget { nodes: 0, bytes: 0 };
    budget.walk(node, 0)
}

struct Budget {
    nodes: usize,
    bytes: usize,
}

impl Budget {
    fn walk(&mut self, node: &Node, depth: usize) -> bool {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return false;
        }
        match node {
            Node::Plain(s) | Node::Str(s) => self.scalar(s),
            Node::Tagged(_) => false,
            Node::List(items) => {
                depth < MAX_DEPTH && items.iter().all(|item| self.walk(item, depth + 1))
            }
            Node::Map(entries) => {
                depth < MAX_DEPTH
                    && entries.iter().all(|(key, value)| {
                        let key = match key {
                            Node::Str(s) => s,
                            Node::Plain(s) if plain_is_safe(s) => s,
                            _ => return false,
                        };
                        self.nodes += 1;
                        self.scalar(key) && self.walk(value, depth + 1)
                    })
            }
        }
    }

    fn scalar(&mut self, text: &str) -> bool {
        self.bytes += text.len();
        self.bytes <= MAX_SCALAR_BYTES
    }
}

/// The null spellings of a plain scalar, as YAML 1.2's core schema and serde-saphyr read them.
fn is_null(plain: &str) -> bool {
    matches!(plain, "" | "~" | "null" | "Null" | "NULL")
}

impl<'n> Tree<'n> for &'n Node {
    type Entries = Entries<'n>;

    fn shape(self) -> Shape<'n, Entries<'n>> {
        match self {
            Node::Plain(s) if is_null(s) => Shape::Null,
            Node::Plain(s) | Node::Str(s) => Shape::Scalar(Ok(s)),
            Node::List(_) => Shape::List,
            Node::Map(entries) => Shape::Map(Entries(entries.iter())),
            // Never met: a tree that has one is not [`certain`].
            Node::Tagged(_) => Shape::Scalar(Err("has an explicit tag")),
        }
    }
}

/// The entries of a mapping of render's tree, by their keys' text.
pub struct Entries<'n>(std::slice::Iter<'n, (Node, Node)>);

impl<'n> Iterator for Entries<'n> {
    type Item = (&'n str, &'n Node);

    fn next(&mut self) -> Option<Self::Item> {
        let (key, value) = self.0.next()?;
        let key = match key {
            Node::Plain(s) | Node::Str(s) => s.as_str(),
            // Never met: a tree that has one is not [`certain`].
            Node::Tagged(_) | Node::List(_) | Node::Map(_) => "",
        };
        Some((key, value))
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Field(reason) => f.write_str(reason),
            Refused::Objects(e) => e.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::core::digest::{Digester, ObjectId};
    use crate::core::refs::ConsumedKeys;
    use crate::lookup::split_documents;
    use crate::render::stream::{is_list, list_items, parse_document};

    /// The objects read, by namespace and `Kind/name`, as digests; or the first refusal.
    type Reading = Result<BTreeMap<(String, String), String>, String>;

    fn reading(objects: &FileSource, refused: Option<Refused>) -> Reading {
        if let Some(refused) = refused {
            return Err(refused.to_string());
        }
        Ok(objects
            .objects()
            .map(|(namespace, object, content)| {
                let id = ObjectId { namespace, object };
                let digest = Digester::default().digest(id, content, &ConsumedKeys::All, None);
                ((namespace.to_owned(), format!("{:?}/{}", object.kind, object.name)), digest)
            })
            .collect())
    }

    /// The stream's objects (a List's items too) read from render's tree where
    /// it is certain, and all read from render's writing of them, as render
    /// did before; and how many were read from the tree.
    fn both(stream: &str) -> (Reading, Reading, usize) {
        let (mut tree, mut written) = (FileSource::default(), FileSource::default());
        let (mut tree_refused, mut written_refused) = (None, None);
        let mut from_tree = 0;
        for (index, (first_line, chunk)) in split_documents(stream).into_iter().enumerate() {
            let parsed = parse_document(index + 1, first_line, chunk);
            let Some(mut node) = parsed.unwrap_or_else(|e| panic!("{e}: {stream}")) else {
                continue;
            };
            let nodes: Vec<&Node> = if is_list(&node) {
                list_items(&mut node).map(|item| &*item).filter(|item| is_object(item)).collect()
            } else {
                vec![&node].into_iter().filter(|node| is_object(node)).collect()
            };
            for node in nodes {
                if tree_refused.is_none() {
                    let added = add_from_tree(&mut tree, node, "ns").inspect(|_| from_tree += 1);
                    let added = added.unwrap_or_else(|| add_written(&mut tree, node, "ns"));
                    tree_refused = added.err();
                }
                if written_refused.is_none() {
                    written_refused = add_written(&mut written, node, "ns").err();
                }
            }
        }
        (reading(&tree, tree_refused), reading(&written, written_refused), from_tree)
    }

    /// Each stream, and whether its objects are read from the tree: all
    /// (`Some(true)`), none (`Some(false)`), or some.
    const CASES: &[(&str, Option<bool>)] = &[
        // Scalars of every style and type; nulls are empty.
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: team-a}\ndata:\n  \
             plain: web\n  quoted: \"0x1F\"\n  single: '1.0'\n  hex: 0x1F\n  octal: 017\n  \
             octal2: 0o17\n  float: 1.0\n  word: yes\n  bool: true\n  tilde: ~\n  spelled: null\n  \
             title: Null\n  upper: NULL\n  mixed: nULL\n  empty:\n  empty-string: \"\"\n  \
             quoted-tilde: \"~\"\n  date: 2001-12-14\n  time: 2001-12-14t21:59:43.10-05:00\n  \
             inf: .inf\n  minus-inf: -.Inf\n  nan: .NaN\n  huge: 1e999\n  \
             big: 123456789012345678901234567890\n  sexagesimal: 1:20\n  underscored: 1_000\n  \
             signed: +1\n  negative: -0x1F\n  spaces: a  b\n  folded-plain: one\n    two\n  \
             literal: |\n    line one\n      indented\n  folded: >-\n    one\n    two\n  \
             keep: |+\n    kept\n\n  strip: |-\n    stripped\n  indicator: |2\n      two more\n  \
             unicode: héllo wörld ✓ 😀\n  control: \"a\\x01b\\u2028c\\r\\nd\\te\"\n  \
             quotes: 'it''s \"here\"'\n",
            Some(true),
        ),
        // Keys: quoted ones of any text are strings; plain ones that YAML reads
        // otherwise, or that no reader is sure of, are read from the writing.
        (
            "kind: ConfigMap\nmetadata: {name: k}\ndata:\n  \"1\": one\n  \"1.5\": x\n  \"true\": t\n  \
             \"null\": n\n  \"\": empty\n  \"<<\": not a merge\n  \"é\": accent\n  \"a b\": space\n  \
             \"tab\\there\": t\n  \"line\\nbreak\": b\n  app.properties: p\n  -Xmx: j\n",
            Some(true),
        ),
        ("kind: ConfigMap\nmetadata: {name: n}\ndata:\n  1: one\n  \"2\": two\n", Some(false)),
        ("kind: ConfigMap\nmetadata: {name: n}\ndata:\n  1: one\n  \"1\": two\n", Some(false)),
        ("kind: ConfigMap\nmetadata: {name: n}\ndata: {1.5: a, true: b, yes: c}\n", Some(false)),
        ("kind: ConfigMap\nmetadata: {name: n}\ndata: {null: a, ~: b}\n", Some(false)),
        ("kind: ConfigMap\nmetadata: {name: n}\ndata: {ключ: значение}\n", Some(false)),
        ("kind: ConfigMap\nmetadata: {name: n}\ndata: {é: a, \"é\": b}\n", Some(false)),
        ("kind: ConfigMap\nmetadata: {name: n, labels: {1: a, \"1\": b}}\n", Some(false)),
        ("kind: ConfigMap\nmetadata: {name: n}\ndata: {[a]: b}\n", Some(false)),
        ("kind: ConfigMap\nmetadata: {name: n}\n? {a: b}\n: c\n", Some(false)),
        // Long keys are written as explicit keys (`? key`).
        (
            concat!(
                "kind: ConfigMap\nmetadata: {name: long}\ndata:\n  ? \"",
                "0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789",
                "0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789",
                "0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789",
                "0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789",
                "0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789",
                "0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789",
                "0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789",
                "0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789",
                "0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789",
                "0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789",
                "0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789",
                "0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789",
                "0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789",
                "\\x01\\x02\"\n  : v\n",
            ),
            Some(true),
        ),
        // Block scalars that end a document, and one that ends the stream with no line break.
        (
            "kind: ConfigMap\nmetadata: {name: b}\ndata:\n  k: |\n    foo\n---\n\
             kind: Secret\nmetadata: {name: s}\nstringData:\n  k: >\n    folded\n    text\n---\n\
             kind: ConfigMap\nmetadata: {name: e}\ndata:\n  keep: |+\n    x\n\n  k: |\n    bar",
            Some(true),
        ),
        ("kind: Secret\nmetadata: {name: s}\ndata:\n  k: |\n    aGVs\n    bG8=", Some(true)),
        // Explicit tags anywhere in an object: read from the writing.
        ("kind: ConfigMap\nmetadata: {name: t}\ndata: {k: !!str 12}\n", Some(false)),
        ("kind: ConfigMap\nmetadata: {name: t}\ndata: {k: !!int \"12\"}\n", Some(false)),
        ("kind: ConfigMap\nmetadata: {name: t}\ndata: {k: ! 12}\n", Some(false)),
        ("kind: ConfigMap\nmetadata: {name: t}\ndata: {k: !!float \"1.0\"}\n", Some(false)),
        ("kind: ConfigMap\nmetadata: {name: t}\ndata: {!!str k: v}\n", Some(false)),
        ("kind: ConfigMap\nmetadata: !!map {name: t}\n", Some(false)),
        ("kind: ConfigMap\nmetadata: {name: !!str 12}\n", Some(false)),
        ("kind: ConfigMap\nmetadata: {name: t, namespace: !!str 017}\n", Some(false)),
        ("kind: ConfigMap\nmetadata: {name: t, labels: {a: !!bool \"true\"}}\n", Some(false)),
        ("kind: Secret\nmetadata: {name: t}\ndata: !!map {k: aGk=}\n", Some(false)),
        ("kind: Secret\nmetadata: {name: t}\nstringData: {k: !!null ''}\n", Some(false)),
        ("kind: ConfigMap\nmetadata: {name: t}\nspec: !!seq [a]\n", Some(false)),
        // Anchors, aliases and merge keys, expanded by render's reader.
        (
            "kind: ConfigMap\nmetadata: &m {name: a, namespace: x}\ndata:\n  base: &b hello\n  \
             copy: *b\n  <<: {merged: from-merge, base: not-this}\n  <<: [{p: 1}, {p: 2, q: 0x2}]\n\
             binaryData: &bin {b: AAE=}\n---\n\
             kind: Secret\nmetadata: {name: s, <<: {namespace: merged-ns}}\nstringData: &d {k: v}\n\
             data: {other: &e aGk=, again: *e}\n",
            Some(true),
        ),
        // Empty and absent data.
        (
            "kind: ConfigMap\nmetadata: {name: e1}\ndata: {}\n---\nkind: ConfigMap\nmetadata: {name: e2}\n\
             data:\nbinaryData: ~\n---\nkind: Secret\nmetadata: {name: e3}\n---\n\
             kind: Secret\nmetadata: {name: e4}\ndata: {}\nstringData: null\n",
            Some(true),
        ),
        // Lists of objects, with other kinds and nulls among the items.
        (
            "apiVersion: v1\nkind: List\nitems:\n- kind: ConfigMap\n  metadata: {name: l1}\n  \
             data: {k: v}\n- apiVersion: apps/v1\n  kind: Deployment\n  metadata: {name: d}\n- ~\n\
             - kind: Secret\n  metadata: {name: l2, namespace: other}\n  data: {k: aGk=}\n",
            Some(true),
        ),
        (
            "kind: List\nitems:\n- {kind: ConfigMap, metadata: {name: l1}, data: {k: !!str v}}\n\
             - {kind: ConfigMap, metadata: {name: l2}, data: {k: v}}\n",
            None,
        ),
        // A Secret's stringData wins over its data; binaryData beside data.
        (
            "kind: Secret\nmetadata: {name: s}\ndata: {k: aGk=, only: b25seQ==}\n\
             stringData: {k: plain, s: 8080}\n---\n\
             kind: ConfigMap\nmetadata: {name: c}\ndata: {k: text}\n\
             binaryData: {b: AAE=, block: \"AA\\r\\nE=\\n\", loose: aGl=}\n",
            Some(true),
        ),
        // Refusals, each with its words, in the order they are checked.
        ("kind: Secret\nmetadata: {name: s}\ndata: {k: \"!!notbase64\"}\n", Some(true)),
        ("kind: Secret\nmetadata: {name: s}\ndata: {k: aGVs bG8=}\n", Some(true)),
        ("kind: ConfigMap\nmetadata: {name: c}\nbinaryData: {b: 'S3CR3T'}\n", Some(true)),
        ("kind: Secret\nmetadata: {namespace: a}\ndata: {k: S3CR3T}\n", Some(true)),
        ("kind: Secret\nmetadata: {name: \"\"}\n", Some(true)),
        ("kind: Secret\nmetadata: {name: ~}\n", Some(true)),
        ("kind: Secret\nmetadata: ~\n", Some(true)),
        ("kind: Secret\n", Some(true)),
        ("kind: Secret\nmetadata: S3CR3T\n", Some(true)),
        ("kind: Secret\nmetadata: [S3CR3T]\n", Some(true)),
        ("kind: Secret\nmetadata: {name: [S3CR3T]}\n", Some(true)),
        ("kind: Secret\nmetadata: {name: [a], namespace: [b]}\n", Some(true)),
        ("kind: Secret\nmetadata: {namespace: [b]}\n", Some(true)),
        ("kind: Secret\nmetadata: {name: s, namespace: {a: b}}\n", Some(true)),
        ("kind: ConfigMap\nmetadata: {name: c}\ndata: [S3CR3T]\n", Some(true)),
        ("kind: ConfigMap\nmetadata: {name: c}\ndata: S3CR3T\n", Some(true)),
        ("kind: ConfigMap\nmetadata: {name: c}\ndata: {k: {nested: S3CR3T}}\n", Some(true)),
        ("kind: Secret\nmetadata: {name: s}\nstringData: {k: [S3CR3T]}\n", Some(true)),
        ("kind: Secret\nmetadata: {name: s}\nstringData: [a]\ndata: {k: \"!\"}\n", Some(true)),
        ("kind: Secret\nmetadata: {name: s}\ndata: {k: \"!\"}\nstringData: [a]\n", Some(true)),
        (
            "kind: Secret\nmetadata: {name: \"a\\tb\", namespace: \"ü/\\\"\"}\ndata: {\"k\\n\": \"!\"}\n",
            Some(true),
        ),
        // The first refusal stops the reading.
        (
            "kind: ConfigMap\nmetadata: {name: ok}\n---\nkind: Secret\nmetadata: {name: bad}\n\
             data: {k: \"!\"}\n---\nkind: Secret\nmetadata: {name: later}\ndata: {k: [x]}\n",
            Some(true),
        ),
        // Typed and quoted names and namespaces keep their spelling.
        (
            "kind: ConfigMap\nmetadata: {name: 0x1F, namespace: 017}\n---\n\
             kind: Secret\nmetadata: {name: yes, namespace: \"\"}\n---\n\
             kind: \"ConfigMap\"\nmetadata: {name: '1.0', namespace: ~}\n",
            Some(true),
        ),
        // The first definition of a kind, namespace and name wins.
        (
            "kind: ConfigMap\nmetadata: {name: c}\ndata: {k: first}\n---\n\
             kind: ConfigMap\nmetadata: {name: c, namespace: ns}\ndata: {k: second}\n---\n\
             kind: ConfigMap\nmetadata: {name: c, namespace: other}\ndata: {k: third}\n---\n\
             kind: Secret\nmetadata: {name: c}\nstringData: {k: fourth}\n---\n\
             kind: List\nitems:\n- {kind: ConfigMap, metadata: {name: c}, data: {k: fifth}}\n",
            Some(true),
        ),
        // Other kinds are not objects.
        ("kind: Deployment\nmetadata: {name: d}\ndata: {1: x}\n", Some(false)),
    ];

    #[test]
    fn objects_read_from_the_tree_are_those_read_from_its_writing() {
        for (stream, fast) in CASES {
            let (tree, written, from_tree) = both(stream);
            assert_eq!(tree, written, "for:\n{stream}");
            match fast {
                Some(true) => assert!(from_tree > 0, "none read from the tree:\n{stream}"),
                Some(false) => assert_eq!(from_tree, 0, "read from the tree:\n{stream}"),
                None => {}
            }
            if let Err(e) = &tree {
                assert!(!e.contains("S3CR3T") && !e.contains("aGk"), "{e}");
            }
        }
    }

    #[test]
    fn deep_large_and_tagged_objects_are_read_from_the_writing() {
        let nested = format!("{}x{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        let items = vec!["x"; MAX_NODES].join(", ");
        let big = "x".repeat(MAX_SCALAR_BYTES + 1);
        for (text, certain_too) in [
            (format!("kind: ConfigMap\nmetadata: {{name: d}}\nspec: {nested}\n"), false),
            (format!("kind: ConfigMap\nmetadata: {{name: d}}\nspec: [{items}]\n"), false),
            (format!("kind: ConfigMap\nmetadata: {{name: d}}\ndata: {{k: {big}}}\n"), false),
            ("kind: ConfigMap\nmetadata: {name: d}\nspec: [[[x]]]\n".to_owned(), true),
        ] {
            let node = super::super::tree::parse(&text).expect("parses");
            assert_eq!(certain(&node), certain_too, "{}", &text[..60]);
            let (tree, written, _) = both(&text);
            assert_eq!(tree, written);
        }
    }

    #[test]
    fn every_object_of_the_benchmark_stream_is_read_from_the_tree() {
        let stream = "kind: ConfigMap\nmetadata:\n  name: svc-00001-config\n  namespace: team-1\n  \
            labels:\n    app.kubernetes.io/name: svc-00001\n    app.kubernetes.io/version: \"1.1.0\"\n    \
            helm.sh/chart: svc-00001-0.1.0\ndata:\n  LOG_LEVEL: info\n  FEATURE_FLAG: \"true\"\n  \
            app.conf: |\n    server.host = 1f2e\n---\nkind: Secret\nmetadata:\n  name: svc-00001-db\n  \
            namespace: team-1\ntype: Opaque\ndata:\n  password: c2VjcmV0\n  ca.crt: QUJDRA==\n";
        let (tree, written, from_tree) = both(stream);
        assert_eq!(tree, written);
        assert_eq!(from_tree, 2);
    }
}
