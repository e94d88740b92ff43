//! One ConfigMap or Secret read from a YAML tree, whichever parser built it:
//! the rules for its kind, name, namespace and data, and the words for what
//! is wrong, in one place. `--objects-from` reads serde-saphyr's tree
//! ([`super::yaml`]); `configsum render` reads its own, so that it parses
//! each object once.

use std::collections::BTreeMap;

use crate::core::inputs::Encoding;
use crate::core::model::object_scope::{ObjectScope, Standing};
use crate::core::{ObjectContent, ObjectKind, ObjectRef};

pub const NOT_A_STRING: &str = "is not a string";
pub const NOT_A_MAPPING: &str = "is not a mapping";
pub const MISSING: &str = "is missing";
pub const NOT_BASE64: &str = "is not valid base64";

/// What a node of the tree is, as an object's fields read it.
pub enum Shape<'n, E> {
    /// A null: `~`, `null`, `Null`, `NULL` or nothing, plain. No value.
    Null,
    /// A scalar's text as written, whatever YAML would make of it (`0x1F`,
    /// `yes` and `1.0` are those strings); or what keeps it from being read.
    Scalar(Result<&'n str, &'static str>),
    /// A mapping's entries, in order: key text and value.
    Map(E),
    List,
}

/// A node of a YAML tree that holds objects.
pub trait Tree<'n>: Copy {
    type Entries: Iterator<Item = (&'n str, Self)>;

    fn shape(self) -> Shape<'n, Self::Entries>;
}

/// What is wrong with a field of an object: `{object}: {field} {problem}`.
/// Never carries a value; `node` is where, for the tree's reader to place it.
pub struct FieldError<T> {
    /// `Kind namespace/name`, or `Kind` while the name is unknown, or empty.
    pub object: String,
    pub field: String,
    pub problem: &'static str,
    pub node: T,
}

/// An object read, before it joins a [`super::FileSource`].
pub struct Object {
    pub namespace: String,
    pub reference: ObjectRef,
    pub content: ObjectContent,
}

/// The document's `kind`, empty if it has none.
pub fn kind<'n, T: Tree<'n>>(document: T) -> Result<&'n str, FieldError<T>> {
    Ok(text_of("", document, "kind", "kind")?.unwrap_or_default())
}

/// The ConfigMap or Secret `document` (of kind `kind`, spelled `kind_text`), judged by
/// `scope`; one that names no namespace is in `namespace`.
pub fn read<'n, T: Tree<'n>>(
    document: T,
    kind: ObjectKind,
    kind_text: &str,
    namespace: &str,
    scope: &ObjectScope,
) -> Result<Object, FieldError<T>> {
    let metadata = mapping_of(kind_text, document, "metadata", "metadata")?;
    let name = match metadata {
        Some(metadata) => text_of(kind_text, metadata, "name", "metadata.name")?,
        None => None,
    };
    let Some(name) = name.filter(|name| !name.is_empty()) else {
        return Err(error(kind_text, "metadata.name", MISSING, document));
    };
    let own = match metadata {
        Some(metadata) => text_of(kind_text, metadata, "namespace", "metadata.namespace")?,
        None => None,
    };
    let namespace = own.filter(|own| !own.is_empty()).unwrap_or(namespace);
    let object = format!("{kind_text} {}/{}", namespace.escape_debug(), name.escape_debug());
    let mut entries = BTreeMap::new();
    // In the declared order: a Secret's `stringData` wins over `data`, as
    // the API server folds it in on write.
    for data in kind.input().data {
        add_entries(&object, document, data.field, data.encoding, &mut entries)?;
    }
    let (standing, readable_from) = match metadata {
        Some(metadata) => standing(&object, metadata, scope)?,
        None => (scope.standing(None, |_| None), None),
    };
    let content = ObjectContent::from_entries(entries).with_standing(standing);
    Ok(Object {
        namespace: namespace.to_owned(),
        reference: ObjectRef::new(kind, name),
        content: content.with_readable_from(readable_from),
    })
}

/// How the object stands by `scope`: its `<domain>/ignore` annotation and the labels the
/// object selector reads (only those are read, so only their shape is checked); and its
/// `<domain>/readable-from`.
fn standing<'n, T: Tree<'n>>(
    object: &str,
    metadata: T,
    scope: &ObjectScope,
) -> Result<(Standing, Option<&'n str>), FieldError<T>> {
    let (mut ignore, mut readable_from) = (None, None);
    if let Some(annotations) = mapping_of(object, metadata, "annotations", "metadata.annotations")?
    {
        let field = |key: &str| format!("metadata.annotations.{key}");
        let key = scope.ignore_key();
        ignore = text_of(object, annotations, key, &field(key))?;
        let key = scope.readable_from_key();
        readable_from = text_of(object, annotations, key, &field(key))?;
    }
    let mut labels = Vec::new();
    if let Some(map) = mapping_of(object, metadata, "labels", "metadata.labels")?
        && let Shape::Map(entries) = map.shape()
    {
        for (key, value) in entries.filter(|(key, _)| scope.reads_label(key)) {
            let field = || format!("metadata.labels.{}", key.escape_debug());
            labels.push((key, text(object, value, field)?.unwrap_or_default()));
        }
    }
    let label = |key: &str| labels.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
    Ok((scope.standing(ignore, label), readable_from))
}

/// Adds every value of the string map `document[key]` (`data`, `binaryData`, `stringData`).
fn add_entries<'n, T: Tree<'n>>(
    object: &str,
    document: T,
    key: &str,
    encoding: Encoding,
    entries: &mut BTreeMap<String, Vec<u8>>,
) -> Result<(), FieldError<T>> {
    let Some(map) = mapping_of(object, document, key, key)? else { return Ok(()) };
    let Shape::Map(fields) = map.shape() else { return Ok(()) };
    for (name, value) in fields {
        let field = || format!("{key}.{}", name.escape_debug());
        // A null value is empty, as the API server stores it.
        let text = text(object, value, field)?.unwrap_or_default();
        // Go's decoder skips line breaks, so base64 in a block scalar (`|`) decodes too.
        let text = match encoding {
            Encoding::Base64 if text.contains(['\r', '\n']) => {
                text.chars().filter(|c| !matches!(c, '\r' | '\n')).collect()
            }
            // Most values have no line break: copied whole, not a character at a time.
            _ => text.to_owned(),
        };
        let bytes =
            encoding.decode(text).ok_or_else(|| error(object, &field(), NOT_BASE64, value))?;
        entries.insert(name.to_owned(), bytes);
    }
    Ok(())
}

/// The first value of `key` in the mapping `node`.
fn get<'n, T: Tree<'n>>(node: T, key: &str) -> Option<T> {
    match node.shape() {
        Shape::Map(mut fields) => fields.find(|(name, _)| *name == key).map(|(_, value)| value),
        _ => None,
    }
}

/// The mapping `node[key]`; `None` if it is absent or null.
fn mapping_of<'n, T: Tree<'n>>(
    object: &str,
    node: T,
    key: &str,
    field: &str,
) -> Result<Option<T>, FieldError<T>> {
    let Some(value) = get(node, key) else { return Ok(None) };
    match value.shape() {
        Shape::Null => Ok(None),
        Shape::Map(_) => Ok(Some(value)),
        _ => Err(error(object, field, NOT_A_MAPPING, value)),
    }
}

/// The text of the scalar `node[key]`; `None` if it is absent or null.
fn text_of<'n, T: Tree<'n>>(
    object: &str,
    node: T,
    key: &str,
    field: &str,
) -> Result<Option<&'n str>, FieldError<T>> {
    get(node, key).map_or(Ok(None), |value| text(object, value, || field.to_owned()))
}

/// The text of a scalar; `None` for null. `field` names it, built only for an error.
fn text<'n, T: Tree<'n>>(
    object: &str,
    node: T,
    field: impl Fn() -> String,
) -> Result<Option<&'n str>, FieldError<T>> {
    match node.shape() {
        Shape::Null => Ok(None),
        Shape::Scalar(Ok(text)) => Ok(Some(text)),
        Shape::Scalar(Err(problem)) => Err(error(object, &field(), problem, node)),
        Shape::Map(_) | Shape::List => Err(error(object, &field(), NOT_A_STRING, node)),
    }
}

fn error<T>(object: &str, field: &str, problem: &'static str, node: T) -> FieldError<T> {
    FieldError { object: object.to_owned(), field: field.to_owned(), problem, node }
}
