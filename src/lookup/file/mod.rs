//! `--objects-from`: ConfigMaps and Secrets from a YAML stream, for demos and
//! tests with no cluster. Kept in memory: this source is not for production.
//!
//! Scalars are read the way `kubectl` does, except that a string field keeps its
//! text whatever YAML would make of it: `72e40602`, `0x1F`, `017`, `1.0` and `yes`
//! are those strings. A null value (`~`, `null`, nothing) in `data`, `binaryData`
//! or `stringData` is empty, as the API server stores it. Errors name the file,
//! the object and the field, never a value: the values may be Secret data.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;
use serde_saphyr::Spanned;

mod documents;
mod error;
pub(crate) mod object;
mod tags;
mod yaml;

pub(crate) use self::documents::{
    describe_before, each as each_document, split as split_documents,
};
pub use self::error::FileSourceError;
use self::object::Shape;
pub(crate) use self::tags::{RefusedTag, check as check_tag, of_event as tag_of_event};
pub(crate) use self::yaml::scan_reason;
use self::yaml::{Fields, Node, tag_error, yaml_error, yaml_options};
use super::{LookupError, ObjectSource};
use crate::core::model::kinds::WorkloadKind;
use crate::core::model::object_scope::ObjectScope;
use crate::core::{ObjectContent, ObjectKind, ObjectRef};
use crate::registry::{
    DOCKER_CFG_KEY, DOCKER_CONFIG_JSON_KEY, PullCredential, parse_docker_cfg,
    parse_docker_config_json,
};

#[derive(Debug, Default)]
pub struct FileSource {
    /// Which objects count: each is judged by it as it is read.
    scope: ObjectScope,
    objects: HashMap<(String, ObjectRef), Arc<ObjectContent>>,
    /// The pod templates of the file's workloads of trackable kinds (workloads that roll
    /// together), as written: no API server has filled in its defaults.
    templates: HashMap<(String, WorkloadKind, String), serde_json::Value>,
}

/// A document or item number as errors carry it (saturating; a file never has that many).
fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl FileSource {
    /// Reads every ConfigMap and Secret of the stream (also inside `kind: List`,
    /// as `kubectl get -o yaml` writes). Objects without a namespace are in
    /// `default`; other kinds are ignored. A later object replaces an earlier one
    /// of the same kind, namespace and name, as applying the stream would.
    /// Objects are judged by `scope` (the owner's `ignore`, `--object-selector`).
    pub fn load(path: &Path, scope: &ObjectScope) -> Result<Self, FileSourceError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| FileSourceError::Read { path: path.to_owned(), source })?;
        Self::parse(&text, path, scope)
    }

    /// As [`Self::load`], for text already read; `path` names the file in errors. The pod
    /// templates of its workloads of trackable kinds are kept too, for workloads that track them.
    pub fn parse(text: &str, path: &Path, scope: &ObjectScope) -> Result<Self, FileSourceError> {
        let mut source = Self::parse_with(text, path, false, "default", scope)?;
        source.templates = templates(text, "default");
        Ok(source)
    }

    /// No objects yet; those added later are judged by `scope`.
    pub fn scoped(scope: ObjectScope) -> Self {
        FileSource { scope, ..FileSource::default() }
    }

    fn parse_with(
        text: &str,
        path: &Path,
        first_wins: bool,
        namespace: &str,
        scope: &ObjectScope,
    ) -> Result<Self, FileSourceError> {
        // Before the reader, which would take a language tag for a string.
        if let Some(refused) = tags::scan(text) {
            return Err(tag_error(path, text, namespace, &refused));
        }
        let documents: Vec<Spanned<Node>> =
            serde_saphyr::from_multiple_with_options(text, yaml_options())
                .map_err(|error| yaml_error(path, text, namespace, &error))?;
        let block_at_end = yaml::block_scalar_at_end(text);
        let reader = Reader { text, path, first_wins, namespace, block_at_end, scope };
        let mut source = FileSource::scoped(scope.clone());
        for (index, document) in documents.iter().enumerate() {
            let place = Place { document: count(index + 1), item: None, object: String::new() };
            match &document.value {
                Node::Null => {}
                Node::Map(_) => reader.object(&place, document, &mut source)?,
                _ => {
                    return Err(FileSourceError::NotAnObject {
                        path: path.to_owned(),
                        document: place.document,
                        line: document.referenced.line(),
                        column: document.referenced.column(),
                    });
                }
            }
        }
        Ok(source)
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// Every object: its namespace, reference and content, in no order.
    pub fn objects(&self) -> impl Iterator<Item = (&str, &ObjectRef, &ObjectContent)> {
        self.objects
            .iter()
            .map(|((namespace, object), content)| (namespace.as_str(), object, &**content))
    }

    /// The object, if the file has it.
    pub fn get(&self, namespace: &str, object: &ObjectRef) -> Option<&Arc<ObjectContent>> {
        self.objects.get(&(namespace.to_owned(), object.clone()))
    }

    /// Adds the ConfigMap or Secret `document` of any YAML tree by the rules
    /// of [`Self::add_first_wins`] (other kinds are ignored): the first of a
    /// kind, namespace and name wins, and objects that name no namespace are
    /// in `namespace`.
    pub(crate) fn add_tree_first_wins<'n, T: object::Tree<'n>>(
        &mut self,
        document: T,
        namespace: &str,
    ) -> Result<(), object::FieldError<T>> {
        let kind = object::kind(document)?;
        if let Some(object_kind) = ObjectKind::from_api_kind(kind) {
            let object = object::read(document, object_kind, kind, namespace, &self.scope)?;
            self.insert(object, true);
        }
        Ok(())
    }

    /// Adds `object`; unless `first_wins`, it replaces one of the same kind,
    /// namespace and name.
    fn insert(&mut self, object: object::Object, first_wins: bool) {
        let key = (object.namespace, object.reference);
        let content = Arc::new(object.content);
        if first_wins {
            self.objects.entry(key).or_insert(content);
        } else {
            self.objects.insert(key, content);
        }
    }

    /// As [`Self::parse`], but the first object of a kind, namespace and name
    /// wins (`configsum render`'s rule), objects already in `self` stay, and
    /// objects that name no namespace are in `namespace`.
    pub fn add_first_wins(
        &mut self,
        text: &str,
        path: &Path,
        namespace: &str,
    ) -> Result<(), FileSourceError> {
        for (key, content) in Self::parse_with(text, path, true, namespace, &self.scope)?.objects {
            self.objects.entry(key).or_insert(content);
        }
        Ok(())
    }
}

/// A workload of a YAML stream: its kind, its namespace, its name if it has one, and the
/// object as parsed.
pub struct WorkloadDocument {
    pub kind: WorkloadKind,
    pub namespace: String,
    pub name: Option<String>,
    pub object: Value,
}

/// The workloads of `text`, of any kind the table knows, also inside `kind: List`, in order;
/// those naming no namespace are in `namespace`. `None` when the stream does not read as YAML
/// (the objects' reader says why).
pub fn workload_documents(text: &str, namespace: &str) -> Option<Vec<WorkloadDocument>> {
    let documents: Vec<Value> =
        serde_saphyr::from_multiple_with_options(text, yaml_options()).ok()?;
    let mut workloads = Vec::new();
    let mut add = |object: &Value| {
        let text_at = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
        let api_version = text_at("/apiVersion").unwrap_or_default();
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let Some(kind) = WorkloadKind::from_gvk(group, version, text_at("/kind").unwrap_or(""))
        else {
            return;
        };
        let ns = text_at("/metadata/namespace").filter(|n| !n.is_empty()).unwrap_or(namespace);
        let name = text_at("/metadata/name").filter(|n| !n.is_empty()).map(str::to_owned);
        let namespace = ns.to_owned();
        workloads.push(WorkloadDocument { kind, namespace, name, object: object.clone() });
    };
    for document in &documents {
        match document["items"].as_array().filter(|_| document["kind"] == "List") {
            Some(items) => items.iter().for_each(&mut add),
            None => add(document),
        }
    }
    Some(workloads)
}

/// The annotations of Namespace `name` in `text` (also inside `kind: List`), the first
/// definition winning; `None` when the stream defines no such Namespace, or does not read as
/// YAML.
pub fn namespace_annotations(text: &str, name: &str) -> Option<BTreeMap<String, String>> {
    if !text.contains("Namespace") {
        return None;
    }
    let documents: Vec<Value> =
        serde_saphyr::from_multiple_with_options(text, yaml_options()).ok()?;
    let is_it = |object: &&Value| {
        object["apiVersion"] == "v1"
            && object["kind"] == "Namespace"
            && object.pointer("/metadata/name").and_then(Value::as_str) == Some(name)
    };
    let namespace = documents
        .iter()
        .flat_map(|document| match document["items"].as_array() {
            Some(items) if document["kind"] == "List" => items.iter().collect::<Vec<_>>(),
            _ => vec![document],
        })
        .find(|object| is_it(object))?;
    let annotations = namespace.pointer("/metadata/annotations").and_then(Value::as_object);
    let strings = annotations
        .into_iter()
        .flatten()
        .filter_map(|(key, value)| value.as_str().map(|value| (key.clone(), value.to_owned())));
    Some(strings.collect())
}

/// The pod templates of the trackable workloads of `text`, by namespace, kind and name; a
/// later one replaces an earlier one. Read only when the stream names a trackable kind at all.
fn templates(text: &str, namespace: &str) -> HashMap<(String, WorkloadKind, String), Value> {
    let mut templates = HashMap::new();
    let names_one = WorkloadKind::all()
        .filter(|kind| kind.trackable())
        .any(|kind| text.contains(kind.as_str()));
    if !names_one {
        return templates;
    }
    for workload in workload_documents(text, namespace).into_iter().flatten() {
        let Some(name) = workload.name.filter(|_| workload.kind.trackable()) else { continue };
        let path = workload.kind.declaration().template.unwrap_or_default();
        let template = path.iter().try_fold(&workload.object, |value, field| value.get(field));
        let key = (workload.namespace, workload.kind, name);
        templates.insert(key, template.cloned().unwrap_or_default());
    }
    templates
}

impl ObjectSource for FileSource {
    /// A tracked workload's template as the file writes it.
    async fn fetch_template(
        &self,
        namespace: &str,
        kind: WorkloadKind,
        name: &str,
    ) -> Result<Option<Value>, LookupError> {
        Ok(self.templates.get(&(namespace.to_owned(), kind, name.to_owned())).cloned())
    }

    async fn fetch(
        &self,
        namespace: &str,
        object: &ObjectRef,
    ) -> Result<Option<Arc<ObjectContent>>, LookupError> {
        Ok(self.get(namespace, object).cloned())
    }

    /// The file's Secrets that `secrets` names, read as pull secrets by their
    /// key (`.dockerconfigjson`, else `.dockercfg`). The file holds no
    /// ServiceAccounts, so `service_account` adds nothing.
    async fn pull_credentials(
        &self,
        namespace: &str,
        secrets: &[String],
        _service_account: &str,
    ) -> Result<Vec<PullCredential>, LookupError> {
        let mut credentials = Vec::new();
        for name in secrets {
            let Some(content) = self.get(namespace, &ObjectRef::secret(name.as_str())) else {
                continue;
            };
            let parsed = match (content.get(DOCKER_CONFIG_JSON_KEY), content.get(DOCKER_CFG_KEY)) {
                (Some(json), _) => parse_docker_config_json(json),
                (None, Some(cfg)) => parse_docker_cfg(cfg),
                (None, None) => continue,
            };
            match parsed {
                Ok(found) => credentials.extend(found),
                Err(e) => {
                    tracing::warn!(secret = %name, error = %e, "not a usable pull secret; skipped")
                }
            }
        }
        Ok(credentials)
    }
}

/// Which object an error is about: the document, the List item, and `Kind
/// namespace/name` as far as known.
struct Place {
    document: u32,
    item: Option<u32>,
    object: String,
}

impl Place {
    fn named(&self, object: String) -> Place {
        Place { object, ..*self }
    }
}

/// Reads the objects out of the parsed documents of `text`.
struct Reader<'a> {
    text: &'a str,
    path: &'a Path,
    first_wins: bool,
    /// Of objects that name none.
    namespace: &'a str,
    /// Where a block scalar that ends the text with no line break starts.
    block_at_end: Option<u64>,
    scope: &'a ObjectScope,
}

impl<'r> Reader<'r> {
    /// Adds a ConfigMap or Secret, reads the items of a List, ignores other kinds.
    fn object(
        &'r self,
        place: &Place,
        node: &'r Spanned<Node>,
        into: &mut FileSource,
    ) -> Result<(), FileSourceError> {
        let document = At { reader: self, node };
        let kind = object::kind(document).map_err(|e| self.error(place, e))?;
        if kind == "List" {
            return self.items(&place.named("List".to_owned()), document, into);
        }
        let Some(object_kind) = ObjectKind::from_api_kind(kind) else { return Ok(()) };
        let object = object::read(document, object_kind, kind, self.namespace, self.scope)
            .map_err(|e| self.error(place, e))?;
        into.insert(object, self.first_wins);
        Ok(())
    }

    fn items(
        &'r self,
        list: &Place,
        document: At<'r>,
        into: &mut FileSource,
    ) -> Result<(), FileSourceError> {
        let Node::Map(fields) = &document.node.value else { return Ok(()) };
        let items = match get(fields, "items") {
            None => return Ok(()),
            Some(items) => match &items.value {
                Node::Null => return Ok(()),
                Node::List(items) => items,
                _ => return Err(self.error_at(list, "items", "is not a list", items)),
            },
        };
        for (index, item) in items.iter().enumerate() {
            match &item.value {
                Node::Null => {}
                Node::Map(_) => {
                    let place = Place { item: Some(count(index)), object: String::new(), ..*list };
                    self.object(&place, item, into)?;
                }
                _ => {
                    let field = format!("items[{index}]");
                    return Err(self.error_at(list, &field, object::NOT_A_MAPPING, item));
                }
            }
        }
        Ok(())
    }

    /// The source text where the node is defined (its anchor, for an alias).
    fn source_of(&self, node: &Spanned<Node>) -> Option<&'r str> {
        let span = node.defined.span();
        let start = usize::try_from(span.byte_offset()?).ok()?;
        let len = usize::try_from(span.byte_len()?).ok()?;
        self.text.get(start..start.checked_add(len)?)
    }

    /// A field's error, for the object at `place` (named as far as known).
    fn error(&self, place: &Place, error: object::FieldError<At<'_>>) -> FileSourceError {
        self.error_at(&place.named(error.object), &error.field, error.problem, error.node.node)
    }

    fn error_at(
        &self,
        object: &Place,
        field: &str,
        problem: &'static str,
        node: &Spanned<Node>,
    ) -> FileSourceError {
        FileSourceError::Object {
            path: self.path.to_owned(),
            document: object.document,
            item: object.item,
            object: object.object.clone(),
            field: field.to_owned(),
            problem,
            line: node.referenced.line(),
            column: node.referenced.column(),
        }
    }
}

/// A node of serde-saphyr's tree, with the reader that knows its source text.
#[derive(Clone, Copy)]
struct At<'r> {
    reader: &'r Reader<'r>,
    node: &'r Spanned<Node>,
}

impl<'r> object::Tree<'r> for At<'r> {
    type Entries = AtEntries<'r>;

    fn shape(self) -> Shape<'r, AtEntries<'r>> {
        let (reader, node) = (self.reader, self.node);
        match &node.value {
            Node::Null => Shape::Null,
            // The parser gives this block scalar a final line break the text
            // does not have; YAML, kubectl and the API server keep none.
            Node::Text(text)
                if reader.block_at_end.is_some()
                    && node.defined.span().byte_offset() == reader.block_at_end =>
            {
                Shape::Scalar(Ok(text.strip_suffix('\n').unwrap_or(text)))
            }
            Node::Text(text) => Shape::Scalar(Ok(text)),
            Node::Typed => {
                Shape::Scalar(reader.source_of(node).ok_or("cannot be found in the file"))
            }
            Node::List(_) => Shape::List,
            Node::Map(fields) => Shape::Map(AtEntries { reader, fields: fields.iter() }),
        }
    }
}

/// The entries of a mapping of serde-saphyr's tree.
struct AtEntries<'r> {
    reader: &'r Reader<'r>,
    fields: std::slice::Iter<'r, (String, Spanned<Node>)>,
}

impl<'r> Iterator for AtEntries<'r> {
    type Item = (&'r str, At<'r>);

    fn next(&mut self) -> Option<Self::Item> {
        let (name, node) = self.fields.next()?;
        Some((name.as_str(), At { reader: self.reader, node }))
    }
}

fn get<'n>(fields: &'n Fields, key: &str) -> Option<&'n Spanned<Node>> {
    fields.iter().find(|(name, _)| name == key).map(|(_, node)| node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::digest::{Digester, ObjectId};
    use crate::core::refs::ConsumedKeys;

    #[test]
    fn tags_outside_the_core_schema_are_refused_naming_the_document_and_line() {
        let refused = |text: &str| {
            FileSource::parse(text, Path::new("objects.yaml"), &ObjectScope::default())
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        let tagged = "kind: ConfigMap\nmetadata: {name: a}\n---\nkind: Secret\n\
                      metadata: {name: s, namespace: x}\nstringData:\n  k: !!binary aGk=\n";
        assert_eq!(
            refused(tagged),
            Err(
                "objects.yaml: document 2 (Secret x/s): tag outside YAML's core schema at line 7, \
                 column 6"
                    .to_owned()
            )
        );
        // A directive that makes `!!str` another tag; one that keeps it the core schema's.
        let aliased = "%TAG !! tag:example.com,2000:\n---\nkind: ConfigMap\nmetadata: {name: a}\n\
                       data: {k: !!str v}\n";
        let expected = "objects.yaml: document 1 (ConfigMap default/a): tag outside YAML's core \
                        schema at line 5, column 11";
        assert_eq!(refused(aliased), Err(expected.to_owned()));
        let core = "%TAG !e! tag:yaml.org,2002:\n---\nkind: ConfigMap\nmetadata: {name: a}\n\
                    data: {k: !e!str 12, q: \"!custom\"}\n";
        assert_eq!(refused(core), Ok(()));
    }

    #[tokio::test]
    async fn the_templates_of_trackable_workloads_are_kept_for_their_trackers() {
        let text = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: db, namespace: auth}\n\
            spec: {template: {metadata: {labels: {app: db}}, spec: {containers: [{name: c, image: postgres:16}]}}}\n\
            ---\napiVersion: v1\nkind: List\nitems:\n- apiVersion: apps/v1\n  kind: StatefulSet\n  \
            metadata: {name: cache}\n  spec: {template: {spec: {containers: []}}}\n\
            ---\napiVersion: batch/v1\nkind: Job\nmetadata: {name: once}\nspec: {template: {spec: {}}}\n";
        let source = FileSource::parse(text, Path::new("objects.yaml"), &ObjectScope::default())
            .expect("parses");
        let template = source.fetch_template("auth", WorkloadKind::Deployment, "db").await;
        let template = template.expect("read").expect("found");
        assert_eq!(template["spec"]["containers"][0]["image"], "postgres:16");
        let cache = source.fetch_template("default", WorkloadKind::StatefulSet, "cache").await;
        assert_eq!(cache.expect("read"), Some(serde_json::json!({"spec": {"containers": []}})));
        let job = source.fetch_template("default", WorkloadKind::Job, "once").await;
        assert_eq!(job.expect("read"), None, "a Job is not trackable");
        let other = source.fetch_template("other", WorkloadKind::Deployment, "db").await;
        assert_eq!(other.expect("read"), None);
    }

    fn digest(source: &FileSource, namespace: &str, object: ObjectRef) -> Option<String> {
        let content = source.get(namespace, &object)?;
        let id = ObjectId { namespace, object: &object };
        Some(Digester::default().digest(id, content, &ConsumedKeys::All, None))
    }

    /// The digest of an object with exactly these entries.
    fn digest_of(namespace: &str, object: ObjectRef, entries: &[(&str, &str)]) -> Option<String> {
        let entries = entries.iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()));
        let content = ObjectContent::from_entries(entries.collect());
        let id = ObjectId { namespace, object: &object };
        Some(Digester::default().digest(id, &content, &ConsumedKeys::All, None))
    }

    fn error(yaml: &str) -> String {
        match FileSource::parse(yaml, Path::new("objects.yaml"), &ObjectScope::default()) {
            Ok(source) => panic!("parsed into {source:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn reads_a_stream_with_lists_and_default_namespaces() {
        let yaml = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: c}
data: {k: v}
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Secret
  metadata: {name: db, namespace: team-a}
  data: {password: aHVudGVyMg==, username: YWRtaW4=}
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: ignored}
---
"#;
        let source =
            FileSource::parse(yaml, Path::new("t.yaml"), &ObjectScope::default()).expect("parses");
        assert_eq!(source.len(), 2);
        assert_eq!(
            digest(&source, "default", ObjectRef::config_map("c")).as_deref(),
            Some("sha256:26168d429f573bf8c4dab0d9f8eafed2679ab5e988f5f3c90a9c0edac60bc2ba")
        );
        assert_eq!(
            digest(&source, "team-a", ObjectRef::secret("db")).as_deref(),
            Some("sha256:ce9453749df7a28f03dd7450a871546b6f0aa2dca98802812835eac969b0a5da")
        );
        assert!(source.get("team-b", &ObjectRef::secret("db")).is_none());
    }

    #[test]
    fn bad_files_get_clear_errors() {
        let err = FileSource::parse(
            "kind: Secret\nmetadata: {name: s}\ndata: {k: '!!notbase64'}\n",
            Path::new("f"),
            &ObjectScope::default(),
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(err.contains("(Secret default/s): data.k") && !err.contains("notbase64"), "{err}");
        assert!(
            FileSource::parse("a: [unclosed", Path::new("f"), &ObjectScope::default()).is_err()
        );
        assert!(
            FileSource::load(Path::new("/nonexistent/objects.yaml"), &ObjectScope::default())
                .is_err()
        );
    }

    /// A marker in every bad value: no error may show it.
    const MARKER: &str = "S3CR3T";

    #[test]
    fn string_fields_keep_plain_scalars_as_written() {
        let yaml = r#"
kind: ConfigMap
metadata: {name: 0x1F, namespace: 017}
data:
  hex: 0x1F
  octal: 0o17
  leading-zero: 017
  exponent: 1e3
  overflow: 72e40602
  huge: 1e999
  float: 1.0
  inf: .inf
  minus-inf: -.Inf
  nan: .NaN
  true: true
  yes: yes
  on: on
  signed: +1
  underscored: 1_000
  date: 2001-12-14
  anchored: &x 0b101
  alias: *x
  quoted: "0x1F"
  1.50: key
---
kind: Secret
metadata: {name: 123}
stringData: {port: 8080, debug: off, ratio: 0.50}
"#;
        let source =
            FileSource::parse(yaml, Path::new("t.yaml"), &ObjectScope::default()).expect("parses");
        let values = [
            ("hex", "0x1F"),
            ("octal", "0o17"),
            ("leading-zero", "017"),
            ("exponent", "1e3"),
            ("overflow", "72e40602"),
            ("huge", "1e999"),
            ("float", "1.0"),
            ("inf", ".inf"),
            ("minus-inf", "-.Inf"),
            ("nan", ".NaN"),
            ("true", "true"),
            ("yes", "yes"),
            ("on", "on"),
            ("signed", "+1"),
            ("underscored", "1_000"),
            ("date", "2001-12-14"),
            ("anchored", "0b101"),
            ("alias", "0b101"),
            ("quoted", "0x1F"),
            ("1.50", "key"),
        ];
        let config_map = ObjectRef::config_map("0x1F");
        assert_eq!(
            digest(&source, "017", config_map.clone()),
            digest_of("017", config_map, &values)
        );
        let secret = ObjectRef::secret("123");
        assert_eq!(
            digest(&source, "default", secret.clone()),
            digest_of("default", secret, &[("port", "8080"), ("debug", "off"), ("ratio", "0.50")])
        );
    }

    #[test]
    fn null_values_are_empty_as_the_api_server_stores_them() {
        let yaml = r#"
kind: ConfigMap
metadata: {name: c, namespace: ""}
data: {tilde: ~, spelled: null, nothing: , quoted: "~"}
binaryData: {bytes: ~}
---
kind: Secret
metadata: {name: s, namespace: ~}
data: {password: }
stringData: {user: null}
"#;
        let source =
            FileSource::parse(yaml, Path::new("t.yaml"), &ObjectScope::default()).expect("parses");
        let c = ObjectRef::config_map("c");
        let empty =
            [("tilde", ""), ("spelled", ""), ("nothing", ""), ("quoted", "~"), ("bytes", "")];
        assert_eq!(digest(&source, "default", c.clone()), digest_of("default", c, &empty));
        let s = ObjectRef::secret("s");
        let empty = [("password", ""), ("user", "")];
        assert_eq!(digest(&source, "default", s.clone()), digest_of("default", s, &empty));
    }

    #[test]
    fn base64_decodes_as_the_api_server_does() {
        // Line breaks are skipped; unused bits of the last character are ignored (`aGl=`).
        let yaml = "kind: Secret\nmetadata: {name: s}\ndata:\n  block: |\n    aHVu\n    dGVyMg==\n  \
                    loose: aGl=\n---\nkind: ConfigMap\nmetadata: {name: c}\nbinaryData: {b: AAE=}\n";
        let source =
            FileSource::parse(yaml, Path::new("t.yaml"), &ObjectScope::default()).expect("parses");
        let s = ObjectRef::secret("s");
        let expected = [("block", "hunter2"), ("loose", "hi")];
        assert_eq!(digest(&source, "default", s.clone()), digest_of("default", s, &expected));
        let c = ObjectRef::config_map("c");
        assert_eq!(
            digest(&source, "default", c.clone()),
            digest_of("default", c, &[("b", "\0\u{1}")])
        );
    }

    #[test]
    fn a_block_scalar_that_ends_the_file_gains_no_line_break() {
        for (block, value) in [("|", "foo"), ("|+", "foo"), (">", "foo bar"), ("|", "foo\n  ")] {
            let lines = if value == "foo bar" { "foo\n    bar" } else { value };
            let yaml =
                format!("kind: ConfigMap\nmetadata: {{name: c}}\ndata:\n  k: {block}\n    {lines}");
            let source = FileSource::parse(&yaml, Path::new("t.yaml"), &ObjectScope::default())
                .expect("parses");
            let expected = if value == "foo\n  " { "foo\n" } else { value };
            let c = ObjectRef::config_map("c");
            assert_eq!(
                digest(&source, "default", c.clone()),
                digest_of("default", c, &[("k", expected)]),
                "{yaml:?}"
            );
        }
    }

    #[test]
    fn a_later_object_replaces_an_earlier_one() {
        let yaml = "kind: ConfigMap\nmetadata: {name: c}\ndata: {k: first}\n---\n\
                    kind: List\nitems:\n- {kind: ConfigMap, metadata: {name: c}, data: {k: last}}\n";
        let source =
            FileSource::parse(yaml, Path::new("t.yaml"), &ObjectScope::default()).expect("parses");
        let c = ObjectRef::config_map("c");
        assert_eq!(
            digest(&source, "default", c.clone()),
            digest_of("default", c, &[("k", "last")])
        );
    }

    #[test]
    fn object_errors_name_the_object_and_field_never_a_value() {
        let cases = [
            (
                "kind: Secret\nmetadata: {name: db, namespace: team-a}\ndata:\n  password: S3CR3T!!\n",
                "objects.yaml: document 1 (Secret team-a/db): data.password is not valid base64 (line 4, column 13)",
            ),
            (
                "kind: ConfigMap\nmetadata: {name: c}\nbinaryData: {blob: 'S3CR3T'}\n",
                "objects.yaml: document 1 (ConfigMap default/c): binaryData.blob is not valid base64 (line 3, column 20)",
            ),
            (
                "kind: ConfigMap\nmetadata: {name: c}\ndata: {k: {nested: S3CR3T}}\n",
                "objects.yaml: document 1 (ConfigMap default/c): data.k is not a string (line 3, column 11)",
            ),
            (
                "kind: Secret\nmetadata: {name: s}\nstringData: {k: [S3CR3T]}\n",
                "objects.yaml: document 1 (Secret default/s): stringData.k is not a string (line 3, column 17)",
            ),
            (
                "kind: ConfigMap\nmetadata: {name: c}\ndata: [S3CR3T]\n",
                "objects.yaml: document 1 (ConfigMap default/c): data is not a mapping (line 3, column 7)",
            ),
            (
                "kind: Secret\nmetadata: S3CR3T\n",
                "objects.yaml: document 1 (Secret): metadata is not a mapping (line 2, column 11)",
            ),
            (
                "kind: Secret\nmetadata: {name: [S3CR3T]}\n",
                "objects.yaml: document 1 (Secret): metadata.name is not a string (line 2, column 18)",
            ),
            (
                "kind: Secret\nmetadata: {namespace: a}\ndata: {k: S3CR3T}\n",
                "objects.yaml: document 1 (Secret): metadata.name is missing (line 1, column 1)",
            ),
            (
                "kind: [S3CR3T]\n",
                "objects.yaml: document 1: kind is not a string (line 1, column 7)",
            ),
            (
                "kind: List\nitems: S3CR3T\n",
                "objects.yaml: document 1 (List): items is not a list (line 2, column 8)",
            ),
            (
                "---\nkind: List\nitems:\n- S3CR3T\n",
                "objects.yaml: document 1 (List): items[0] is not a mapping (line 4, column 3)",
            ),
            (
                "kind: List\nitems:\n- kind: ConfigMap\n  data: {k: S3CR3T}\n",
                "objects.yaml: document 1, items[0] (ConfigMap): metadata.name is missing (line 3, column 3)",
            ),
            (
                "kind: ConfigMap\nmetadata: {name: c}\n---\nS3CR3T\n",
                "objects.yaml: document 2: not a mapping (line 4, column 1)",
            ),
        ];
        for (yaml, expected) in cases {
            let err = error(yaml);
            assert_eq!(err, expected, "for {yaml:?}");
            assert!(!err.contains(MARKER), "{err}");
        }
    }

    #[test]
    fn yaml_errors_name_the_document_the_object_and_the_line_and_no_value() {
        let cases = [
            (
                "kind: Secret\nmetadata: {name: s}\nstringData: {password: 'S3CR3T\n",
                "objects.yaml: document 1 (Secret default/s): not valid YAML at line 3, column 24: \
                 unclosed quote",
            ),
            (
                "kind: Secret\nstringData: {a: b\n  password: S3CR3T\n",
                "objects.yaml: document 1 (Secret): not valid YAML at line 3, column 11: \
                 while parsing a flow mapping, did not find expected ',' or '}'",
            ),
            (
                "kind: Secret\nmetadata:\n  name: db\n  namespace: team-a\nstringData:\n  \
                 password: x\n  password: S3CR3T\n",
                "objects.yaml: document 1 (Secret team-a/db): not valid YAML at line 7, column 3: \
                 duplicate key \"password\"",
            ),
            (
                "kind: ConfigMap\nmetadata: {name: c}\n---\nkind: Secret\nmetadata:\n  name: db\n\
                 stringData:\n  password: `S3CR3T\n",
                "objects.yaml: document 2 (Secret default/db): not valid YAML at line 8, column 13: \
                 unexpected character",
            ),
            (
                "---\n# Source: x\n---\nkind: Secret\nstringData:\n  password: *S3CR3T\n",
                "objects.yaml: document 2 (Secret): not valid YAML at line 6, column 13: \
                 alias to an unknown anchor",
            ),
            (
                "a: [unclosed",
                "objects.yaml: document 1: not valid YAML at line 1, column 4: unclosed bracket '['",
            ),
        ];
        for (yaml, expected) in cases {
            let err = error(yaml);
            assert_eq!(err, expected, "for {yaml:?}");
            assert!(!err.contains(MARKER) && !err.contains('`'), "{err}");
        }
    }

    /// Every way a character can break the file, at every position: whatever
    /// the error, it quotes none of the values.
    #[test]
    fn no_error_quotes_a_value_wherever_the_file_breaks() {
        let yaml = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n  namespace: team-a\n  \
                    labels: {tier: S3CR3T-label}\n  annotations:\n    note: \"S3CR3T note\"\n\
                    stringData:\n  password: S3CR3T-password\n  script: |\n    echo S3CR3T\n\
                    data: {token: S3CR3Tbase64==}\n---\nkind: List\nitems:\n- kind: ConfigMap\n  \
                    metadata: {name: c}\n  data: {k: 'S3CR3T-value', n: [S3CR3T]}\n";
        let mut errors = 0;
        for (at, _) in yaml.char_indices() {
            for broken in ["`", "'", "\"", "[", "{", "]", "}", "\t", "*", "!", "&", "%", "@", "|"] {
                let text = format!("{}{broken}{}", &yaml[..at], &yaml[at..]);
                if let Err(e) =
                    FileSource::parse(&text, Path::new("objects.yaml"), &ObjectScope::default())
                {
                    let e = e.to_string();
                    assert!(!e.contains(MARKER), "{e}\nfor:\n{text}");
                    errors += 1;
                }
            }
        }
        assert!(errors > 1000, "only {errors} of the broken files were refused");
    }
}
