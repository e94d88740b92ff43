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

use super::model::kinds::{Controller, DECLARED_ROLLOUT, KindDeclaration, ReferenceDeclaration};
use super::model::object_ref::ObjectKind;
use super::model::operation::Operation;
use super::model::path_segment::Segment;
use super::model::rollout_rule::{
    Check, Desired, Failure, Observed, OldPods, RolloutRule, StatusRule,
};

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
    health: Option<HealthWire>,
}

/// `health: {path: status.phase, healthy: Running, failed: Failed}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HealthWire {
    path: String,
    healthy: String,
    failed: Option<String>,
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
    let rollout = match &wire.health {
        Some(health) => health_rule(health).map_err(|why| error(format!("health: {why}")))?,
        None => DECLARED_ROLLOUT,
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
        rollout,
    })
}

/// The longest `health.path` and value (characters): a status field, a word.
const HEALTH_PATH_LIMIT: usize = 256;
const HEALTH_VALUE_LIMIT: usize = 128;

/// A `health` entry as the rule the kind's rollout is judged by, for explain and for waves:
/// the text at `path` is `healthy` (complete) or `failed`; with the generation observed when
/// the status reports one, lest a wave read the phase of the spec before the patch.
fn health_rule(health: &HealthWire) -> Result<RolloutRule, String> {
    if health.path.len() > HEALTH_PATH_LIMIT {
        return Err(format!("path: over {HEALTH_PATH_LIMIT} characters"));
    }
    let path = field_path(&health.path).map_err(|why| format!("path: {why}"))?;
    let under_status = match path.split_first() {
        Some((first, rest)) if first == "status" && !rest.is_empty() => rest,
        _ => return Err("path: a field under status (status.phase)".into()),
    };
    let value = |name: &str, value: &str| {
        if value.is_empty() || value.chars().count() > HEALTH_VALUE_LIMIT {
            Err(format!("{name}: a value of 1 to {HEALTH_VALUE_LIMIT} characters"))
        } else {
            Ok(leak(value))
        }
    };
    let healthy = value("healthy", &health.healthy)?;
    let failed = match &health.failed {
        Some(failed) if *failed == health.healthy => {
            return Err("failed: the same value as healthy".into());
        }
        Some(failed) => Some(value("failed", failed)?),
        None => None,
    };
    let path = leak_all(under_status);
    Ok(RolloutRule::Status(StatusRule {
        observed: Observed::AtLeastIfReported,
        desired: Desired::SpecReplicas,
        complete: Vec::leak(vec![Check::TextIs(path, healthy)]),
        failure: failed.map(|failed| Failure::TextIs(path, failed)),
        old_pods: OldPods::Replaced,
        counts: None,
    }))
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

    #[test]
    fn a_health_entry_is_the_rule_of_the_kind() {
        use crate::core::rollout_health::{Health, SpecParts, read};
        let file = |health: &str| {
            format!(
                "apiVersion: configsum.dev/v1alpha1\nkind: CustomKinds\nkinds:\n- {{apiVersion: \
                 a.io/v1, kind: A, resource: as, template: spec.template{health}}}\n"
            )
        };
        let kinds =
            parse(&file(", health: {path: status.phase, healthy: Running, failed: Failed}"))
                .expect("a kind with health");
        let RolloutRule::Status(rule) = kinds[0].rollout else {
            panic!("health is the rule for explain and waves: {:?}", kinds[0].rollout);
        };
        assert_eq!(rule.complete, [Check::TextIs(&["phase"], "Running")]);
        assert_eq!(rule.failure, Some(Failure::TextIs(&["phase"], "Failed")));
        let judge = |status: serde_json::Value| read(&rule, SpecParts::default(), &status).health();
        assert_eq!(judge(serde_json::json!({"phase": "Running"})), Health::Complete);
        assert_eq!(judge(serde_json::json!({"phase": "Starting"})), Health::Progressing);
        assert!(matches!(judge(serde_json::json!({"phase": "Failed"})), Health::Failed { .. }));

        let kinds = parse(&file(", health: {path: status.health.state, healthy: ok}"))
            .expect("health without failed");
        let RolloutRule::Status(rule) = kinds[0].rollout else { panic!("a rule") };
        assert_eq!(rule.complete, [Check::TextIs(&["health", "state"], "ok")]);
        assert_eq!(rule.failure, None);

        // Without health: explain reads it as a Deployment, a wave counts it patched.
        let kinds = parse(&file("")).expect("no health");
        assert_eq!(kinds[0].rollout, DECLARED_ROLLOUT);
        assert!(matches!(kinds[0].rollout, RolloutRule::ExplainOnly(_)));

        let long = "x".repeat(300);
        for (health, expected) in [
            (
                ", health: {path: spec.phase, healthy: Running}",
                "health: path: a field under status",
            ),
            (", health: {path: status, healthy: Running}", "health: path: a field under status"),
            (", health: {path: \"status..phase\", healthy: Running}", "health: path:"),
            (", health: {path: \"status.conditions[].type\", healthy: Running}", "through a list"),
            (", health: {path: status.phase, healthy: \"\"}", "health: healthy: a value of 1 to"),
            (", health: {path: status.phase, healthy: Running, failed: \"\"}", "health: failed:"),
            (", health: {path: status.phase, healthy: Running, failed: Running}", "the same value"),
            (", health: {path: status.phase}", "health"),
            (", health: {path: status.phase, healthy: Running, colour: red}", "unknown field"),
        ]
        .into_iter()
        .map(|(h, e)| (h.to_owned(), e))
        .chain([
            (format!(", health: {{path: status.{long}, healthy: Running}}"), "over 256 characters"),
            (format!(", health: {{path: status.phase, healthy: {long}}}"), "healthy: a value"),
        ]) {
            let error = parse(&file(&health)).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(error.starts_with("kinds[0] (a.io/v1 A): "), "{health}: {error}");
            assert!(error.contains(expected), "{health}: {error}");
        }
    }
}
