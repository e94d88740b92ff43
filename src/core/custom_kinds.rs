//! Kinds declared in a file (`--custom-kinds FILE`, docs/custom-kinds.md): workload CRDs whose
//! pod template sits at a path, and operators' custom resources that name ConfigMaps and
//! Secrets at paths of their spec. Each entry becomes a row of the same table as the built-in
//! kinds (`kinds.rs`); nothing downstream tells them apart.
//!
//! ```yaml
//! apiVersion: configsum.dev/v1alpha1
//! kind: CustomKinds
//! kinds:
//! - apiVersion: apps.kruise.io/v1alpha1
//!   kind: CloneSet
//!   resource: clonesets
//!   template: spec.template
//! - apiVersion: goharbor.io/v1beta1
//!   kind: HarborCluster
//!   resource: harborclusters
//!   references:
//!   - secret: spec.imageChartStorage.s3.secretRef
//!     keys: [accesskey, secretkey]
//!   annotations: spec.podAnnotations
//! ```
//!
//! The file is configuration, read once at start-up: any mistake is an error naming the entry
//! (exit 2), never a kind quietly left out. Strings are leaked into the table's `'static`
//! rows; a file holds a few kinds.

use serde::Deserialize;

use super::model::kinds::{Controller, KindDeclaration, ReferenceDeclaration, RolloutRule};
use super::model::object_ref::ObjectKind;
use super::model::operation::Operation;
use super::model::path_segment::Segment;

/// The file's own `apiVersion` and `kind`.
pub const API_VERSION: &str = "configsum.dev/v1alpha1";
pub const KIND: &str = "CustomKinds";

/// Why the file cannot be used. Names the entry (its index and, when readable, its kind).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CustomKindsError {
    #[error("not a {KIND} file: {0}")]
    File(String),
    #[error("kinds[{index}] ({name}): {reason}")]
    Entry { index: usize, name: String, reason: String },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FileWire {
    api_version: String,
    kind: String,
    #[serde(default)]
    kinds: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct EntryWire {
    api_version: String,
    kind: String,
    resource: String,
    template: Option<String>,
    #[serde(default)]
    references: Vec<ReferenceWire>,
    annotations: Option<String>,
    operations: Option<Vec<String>>,
    rolls: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ReferenceWire {
    secret: Option<String>,
    config_map: Option<String>,
    keys: Option<Vec<String>>,
}

/// Reads the file's text into declarations (not yet checked against the built-in kinds or each
/// other: `kinds::declare` does that).
pub fn parse(text: &str) -> Result<Vec<KindDeclaration>, CustomKindsError> {
    let file: FileWire = serde_saphyr::from_str(text)
        // serde's message may quote the file; only its position and a short reason are kept.
        .map_err(|e| CustomKindsError::File(first_line(&e.to_string())))?;
    if file.api_version != API_VERSION || file.kind != KIND {
        return Err(CustomKindsError::File(format!(
            "apiVersion must be {API_VERSION} and kind {KIND}"
        )));
    }
    file.kinds.into_iter().enumerate().map(|(index, value)| entry(index, value)).collect()
}

fn first_line(message: &str) -> String {
    let line = message.lines().next().unwrap_or_default();
    line.chars().take(200).collect()
}

fn entry(index: usize, value: serde_json::Value) -> Result<KindDeclaration, CustomKindsError> {
    let name = match (value.get("apiVersion"), value.get("kind")) {
        (Some(serde_json::Value::String(v)), Some(serde_json::Value::String(k))) => {
            format!("{v} {k}")
        }
        _ => "unnamed".to_owned(),
    };
    let error = |reason: String| CustomKindsError::Entry { index, name: name.clone(), reason };
    let wire: EntryWire = serde_json::from_value(value).map_err(|e| error(e.to_string()))?;
    let (group, version) = match wire.api_version.split_once('/') {
        Some((group, version)) if !group.is_empty() && !version.is_empty() => (group, version),
        _ => return Err(error("apiVersion must be group/version (a custom resource)".into())),
    };
    if !is_name(&wire.kind) || !is_resource(&wire.resource) {
        return Err(error("kind and resource must be Kubernetes names".into()));
    }
    let template = match &wire.template {
        Some(path) => {
            let path = field_path(path).map_err(|why| error(format!("template: {why}")))?;
            if path.first().map(String::as_str) != Some("spec") {
                return Err(error("template: the path must start at spec".into()));
            }
            Some(path)
        }
        None => None,
    };
    let annotations = match &wire.annotations {
        Some(path) => {
            let path = field_path(path).map_err(|why| error(format!("annotations: {why}")))?;
            let metadata = path == ["metadata", "annotations"];
            if !metadata && (path.len() < 2 || path[0] != "spec") {
                return Err(error(
                    "annotations: metadata.annotations, or a map inside spec".into(),
                ));
            }
            Some(path)
        }
        None => None,
    };
    let mut references = Vec::new();
    for (at, reference) in wire.references.iter().enumerate() {
        let (kind, path) = match (&reference.secret, &reference.config_map) {
            (Some(path), None) => (ObjectKind::Secret, path),
            (None, Some(path)) => (ObjectKind::ConfigMap, path),
            _ => {
                return Err(error(format!(
                    "references[{at}]: name exactly one of secret and configMap"
                )));
            }
        };
        let path = segments(path).map_err(|why| error(format!("references[{at}]: {why}")))?;
        if path.first() != Some(&Segment::Field("spec")) {
            return Err(error(format!("references[{at}]: the path must start at spec")));
        }
        let keys = match &reference.keys {
            Some(keys)
                if keys.is_empty() || keys.iter().any(|k| k.is_empty() || k.contains('/')) =>
            {
                return Err(error(format!("references[{at}]: keys must be names without /")));
            }
            Some(keys) => Some(leak_all(keys)),
            None => None,
        };
        references.push(ReferenceDeclaration { kind, path: leak_segments(path), keys });
    }
    if template.is_none() && references.is_empty() {
        return Err(error("declare a template, references, or both".into()));
    }
    let operations = match &wire.operations {
        None => &[Operation::Create, Operation::Update][..],
        Some(words) => {
            let mut operations = Vec::new();
            for word in words {
                match Operation::parse(word) {
                    Some(op @ (Operation::Create | Operation::Update)) => operations.push(op),
                    _ => {
                        return Err(error(format!("operations: {word:?} is not CREATE or UPDATE")));
                    }
                }
            }
            Vec::leak(operations)
        }
    };
    Ok(KindDeclaration {
        group: leak(group),
        version: leak(version),
        name: leak(&wire.kind),
        resource: leak(&wire.resource),
        operations,
        template: template.map(|path| leak_all(&path)),
        template_elsewhere: None,
        annotations: annotations.map(|path| leak_all(&path)),
        references: Vec::leak(references),
        controller: if wire.rolls == Some(false) {
            Controller::Never
        } else {
            Controller::RollsWhereServed
        },
        // A declared kind's status is read as a Deployment's.
        rollout: RolloutRule::DEFAULT,
    })
}

/// `spec.template` as field names; no `[]` (one template, one annotations map).
fn field_path(text: &str) -> Result<Vec<String>, String> {
    segments(text)?
        .into_iter()
        .map(|segment| match segment {
            Segment::Field(name) => Ok(name.to_owned()),
            Segment::Each => Err("the path goes through a list ([])".to_owned()),
        })
        .collect()
}

/// `spec.components[].configRef` as segments: field names, and `[]` for every element.
fn segments(text: &str) -> Result<Vec<Segment<'static>>, String> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for part in text.split('.') {
        let (name, lists) = match part.find("[]") {
            Some(at) => (&part[..at], &part[at..]),
            None => (part, ""),
        };
        let lists_ok = lists.len() % 2 == 0 && lists.as_bytes().chunks(2).all(|c| c == b"[]");
        if !is_field(name) || !lists_ok {
            return Err(format!("{text:?} is not a dotted path of field names"));
        }
        out.push(Segment::Field(leak(name)));
        out.extend(std::iter::repeat_n(Segment::Each, lists.len() / 2));
    }
    if out.len() > 32 {
        return Err("the path is over 32 segments".to_owned());
    }
    Ok(out)
}

fn is_field(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn is_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 63 && name.bytes().all(|b| b.is_ascii_alphanumeric())
}

fn is_resource(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn leak(s: &str) -> &'static str {
    String::leak(s.to_owned())
}

fn leak_all(items: &[String]) -> &'static [&'static str] {
    Vec::leak(items.iter().map(|s| leak(s)).collect())
}

fn leak_segments(segments: Vec<Segment<'static>>) -> &'static [Segment<'static>] {
    Vec::leak(segments)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
apiVersion: configsum.dev/v1alpha1
kind: CustomKinds
kinds:
- apiVersion: apps.kruise.io/v1alpha1
  kind: CloneSet
  resource: clonesets
  template: spec.template
- apiVersion: goharbor.io/v1beta1
  kind: HarborCluster
  resource: harborclusters
  references:
  - secret: spec.imageChartStorage.s3.secretRef
    keys: [accesskey, secretkey]
  - configMap: spec.components[].configRef
  annotations: spec.podAnnotations
  rolls: false
"#;

    #[test]
    fn the_documented_example_reads() {
        let kinds = parse(EXAMPLE).expect("the example parses");
        assert_eq!(kinds.len(), 2);
        let clone_set = &kinds[0];
        assert_eq!(
            (clone_set.group, clone_set.version, clone_set.name),
            ("apps.kruise.io", "v1alpha1", "CloneSet")
        );
        assert_eq!(clone_set.template, Some(&["spec", "template"][..]));
        assert_eq!(clone_set.operations, [Operation::Create, Operation::Update]);
        assert_eq!(clone_set.controller, Controller::RollsWhereServed);
        let harbor = &kinds[1];
        assert_eq!(harbor.template, None);
        assert_eq!(harbor.annotations, Some(&["spec", "podAnnotations"][..]));
        assert_eq!(harbor.controller, Controller::Never);
        assert_eq!(harbor.references.len(), 2);
        assert_eq!(harbor.references[0].kind, ObjectKind::Secret);
        assert_eq!(harbor.references[0].keys, Some(&["accesskey", "secretkey"][..]));
        assert_eq!(
            harbor.references[1].path,
            [
                Segment::Field("spec"),
                Segment::Field("components"),
                Segment::Each,
                Segment::Field("configRef")
            ]
        );
    }

    #[test]
    fn mistakes_are_refused_naming_the_entry() {
        let entry = |yaml: &str| {
            format!("apiVersion: configsum.dev/v1alpha1\nkind: CustomKinds\nkinds:\n- {yaml}\n")
        };
        for (yaml, expected) in [
            (
                "{apiVersion: a.io/v1, kind: A, resource: as, template: spec.template, colour: red}",
                "kinds[0] (a.io/v1 A): unknown field",
            ),
            (
                "{apiVersion: a.io/v1, kind: A, resource: as, template: \"spec..x\"}",
                "kinds[0] (a.io/v1 A): template:",
            ),
            (
                "{apiVersion: a.io/v1, kind: A, resource: as, template: \"spec.t[]\"}",
                "through a list",
            ),
            (
                "{apiVersion: a.io/v1, kind: A, resource: as, template: spec.template, annotations: \"spec.x[].y\"}",
                "annotations: the path goes through a list",
            ),
            (
                "{apiVersion: a.io/v1, kind: A, resource: as}",
                "declare a template, references, or both",
            ),
            ("{apiVersion: v1, kind: A, resource: as, template: spec.template}", "group/version"),
            (
                "{apiVersion: a.io/v1, kind: A, resource: as, references: [{secret: spec.s, configMap: spec.c}]}",
                "references[0]: name exactly one",
            ),
            (
                "{apiVersion: a.io/v1, kind: A, resource: as, references: [{secret: spec.s, keys: [a/b]}]}",
                "keys must be names",
            ),
            (
                "{apiVersion: a.io/v1, kind: A, resource: as, template: spec.template, operations: [DELETE]}",
                "operations",
            ),
            ("{kind: A}", "kinds[0] (unnamed)"),
        ] {
            let error = parse(&entry(yaml)).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(error.contains(expected), "{yaml}: {error}");
        }
        assert!(matches!(
            parse("apiVersion: v1\nkind: ConfigMap\n"),
            Err(CustomKindsError::File(_))
        ));
        assert!(matches!(
            parse("apiVersion: configsum.dev/v1alpha1\nkind: CustomKinds\nextra: 1\n"),
            Err(CustomKindsError::File(_))
        ));
        assert!(matches!(parse("::: not yaml"), Err(CustomKindsError::File(_))));
    }

    #[test]
    fn paths_read_fields_and_lists() {
        assert_eq!(
            segments("a.b[][].c").ok(),
            Some(vec![
                Segment::Field("a"),
                Segment::Field("b"),
                Segment::Each,
                Segment::Each,
                Segment::Field("c")
            ])
        );
        for bad in ["a.", ".a", "a..b", "a[", "a[x]", "a]", "[]", "a b", "a.[]"] {
            assert!(segments(bad).is_err(), "{bad}");
        }
        assert!(segments(&vec!["a"; 40].join(".")).is_err());
    }
}
