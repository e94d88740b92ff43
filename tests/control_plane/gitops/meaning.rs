//! What the page's settings mean, by real jq and JSON pointers on the sample Deployment: the
//! `jqPathExpressions` select exactly configsum's annotations (configsum's own ownership rule,
//! [`AnnotationDomain::owns`]) or, for the pin snippet, exactly the tracked containers' images;
//! `managedFieldsManagers` is the controller's field manager; Flux's pointers resolve to
//! configsum's fields. Argo CD evaluates jq expressions with gojq, not jq; the expressions use
//! nothing on which the two differ.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::process::{Command, Stdio};

use configsum::controller::FIELD_MANAGER;
use configsum::core::{AnnotationDomain, ObjectKind, ObjectRef};
use serde_json::{Value, json};

use super::page::{Snippet, argocd_cm_override, snippet};
use super::{ARGOCD_CM_KEY, SAMPLE, sample};

/// A path into a JSON document; array indices as decimal strings.
pub type JsonPath = Vec<String>;

/// The paths that jq's `path(EXPR)` gives on `input`.
pub fn jq_paths(expression: &str, input: &Value) -> BTreeSet<JsonPath> {
    let out = jq(&format!("[path({expression})]"), input);
    let paths: Vec<Vec<Value>> =
        serde_json::from_value(out).unwrap_or_else(|e| panic!("jq paths of {expression}: {e}"));
    paths
        .into_iter()
        .map(|p| {
            p.into_iter()
                .map(|t| match t {
                    Value::String(s) => s,
                    Value::Number(n) => n.to_string(),
                    other => panic!("a path token {other}"),
                })
                .collect()
        })
        .collect()
}

/// `jq -c PROGRAM` on `input`: its one output.
fn jq(program: &str, input: &Value) -> Value {
    let mut child = Command::new("jq")
        .args(["-c", program])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running jq: {e} (scripts/install-test-deps.sh installs it)"));
    let input = serde_json::to_vec(input).expect("JSON");
    child.stdin.take().expect("stdin is piped").write_all(&input).expect("writing to jq");
    let out = child.wait_with_output().expect("waiting for jq");
    assert!(out.status.success(), "jq {program}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("jq {program}: output: {e}"))
}

/// Argo CD's normalization: `del(EXPR)` for each expression in order.
pub fn jq_delete_all(expressions: &[String], input: &Value) -> Value {
    expressions.iter().fold(input.clone(), |doc, e| jq(&format!("del({e})"), &doc))
}

pub fn strings(value: &Value, what: &str) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("{what} is a list"))
        .iter()
        .map(|v| v.as_str().unwrap_or_else(|| panic!("{what} holds strings")).to_owned())
        .collect()
}

fn path(parts: &[&str]) -> JsonPath {
    parts.iter().map(|p| p.to_string()).collect()
}

const TEMPLATE_ANNOTATIONS: [&str; 4] = ["spec", "template", "metadata", "annotations"];

fn template_annotations(object: &Value) -> &serde_json::Map<String, Value> {
    object["spec"]["template"]["metadata"]["annotations"].as_object().expect("template annotations")
}

/// The paths of the sample's pod-template annotations that configsum owns, by its own rule.
pub fn owned_annotation_paths(object: &Value) -> BTreeSet<JsonPath> {
    let domain = AnnotationDomain::default();
    template_annotations(object)
        .keys()
        .filter(|key| domain.owns(key))
        .map(|key| {
            let mut p = path(&TEMPLATE_ANNOTATIONS);
            p.push(key.clone());
            p
        })
        .collect()
}

/// The single ignoreDifferences entry of an Application snippet.
pub fn ignore_entry(snippet: &Snippet) -> &Value {
    let entries = snippet.value["spec"]["ignoreDifferences"].as_array().expect("ignoreDifferences");
    assert_eq!(entries.len(), 1, "{}: one ignoreDifferences entry", snippet.name);
    let entry = &entries[0];
    // Every kind: the expressions select nothing on objects without a pod template.
    assert_eq!((entry["group"].as_str(), entry["kind"].as_str()), (Some("*"), Some("*")));
    entry
}

#[test]
fn the_sample_has_every_kind_of_configsum_annotation_and_others() {
    let sample = sample();
    let domain = AnnotationDomain::default();
    let keys: BTreeSet<&String> = template_annotations(&sample).keys().collect();
    for kind in ObjectKind::all() {
        let object = match kind {
            ObjectKind::ConfigMap => ObjectRef::config_map("app-config"),
            ObjectKind::Secret => ObjectRef::secret("db-credentials"),
        };
        let key = domain.key_for(&object);
        assert!(keys.contains(&key), "{SAMPLE} has no {key} (a tracked kind the jq must cover)");
    }
    assert!(keys.contains(&domain.image_key("app")), "{SAMPLE} has an image annotation");
    assert!(keys.iter().filter(|k| !domain.owns(k)).count() >= 2, "and annotations of others");
}

#[test]
fn ignore_differences_select_exactly_configsums_annotations() {
    let app = snippet("argocd-application-ignore-differences");
    let expressions = strings(&ignore_entry(&app)["jqPathExpressions"], "jqPathExpressions");
    let sample = sample();

    // Together they select configsum's annotations, nothing else, on the sample.
    let selected: BTreeSet<_> = expressions.iter().flat_map(|e| jq_paths(e, &sample)).collect();
    assert_eq!(selected, owned_annotation_paths(&sample));

    // Deleting them in order leaves everything else as it was.
    let mut expected = sample.clone();
    let domain = AnnotationDomain::default();
    expected["spec"]["template"]["metadata"]["annotations"]
        .as_object_mut()
        .expect("annotations")
        .retain(|key, _| !domain.owns(key));
    assert_eq!(jq_delete_all(&expressions, &sample), expected);

    // Only configsum's: the annotations map goes too, as if Git had none (the trap).
    let mut only_ours = sample.clone();
    only_ours["spec"]["template"]["metadata"]["annotations"]
        .as_object_mut()
        .expect("annotations")
        .retain(|key, _| domain.owns(key));
    let normalized = jq_delete_all(&expressions, &only_ours);
    assert!(
        normalized["spec"]["template"]["metadata"].get("annotations").is_none(),
        "{normalized}"
    );
    assert!(normalized["spec"]["template"]["metadata"].get("labels").is_some());

    // The page's empty-annotations example: its map is what the second expression deletes.
    let trap = snippet("deployment-empty-annotations").value;
    assert_eq!(template_annotations(&trap).len(), 0, "the example has an empty template map");
    let selected: BTreeSet<_> = expressions.iter().flat_map(|e| jq_paths(e, &trap)).collect();
    assert_eq!(selected, BTreeSet::from([path(&TEMPLATE_ANNOTATIONS)]));
    // ... and `annotations:` with nothing after it (null) is left to the first's guard.
    let mut null_map = trap.clone();
    null_map["spec"]["template"]["metadata"]["annotations"] = Value::Null;
    assert!(expressions.iter().all(|e| jq_paths(e, &null_map).is_empty()));

    // Objects without a pod template, or without its annotations: nothing, no error.
    for object in [
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"ports": []}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"template": {"metadata": {}}}}),
    ] {
        for e in &expressions {
            assert!(jq_paths(e, &object).is_empty(), "{e} on {object}");
        }
    }
}

#[test]
fn managed_fields_managers_name_the_controllers_field_manager() {
    let app = snippet("argocd-application-ignore-differences");
    assert_eq!(
        strings(&ignore_entry(&app)["managedFieldsManagers"], "managedFieldsManagers"),
        [FIELD_MANAGER]
    );
    let cm = snippet("argocd-cm-ignore-differences");
    let value = argocd_cm_override(&cm.value);
    assert_eq!(strings(&value["managedFieldsManagers"], "managedFieldsManagers"), [FIELD_MANAGER]);
}

#[test]
fn argocd_cm_has_the_applications_expressions() {
    let app = snippet("argocd-application-ignore-differences");
    let cm = snippet("argocd-cm-ignore-differences");
    assert_eq!(cm.value["metadata"]["name"], "argocd-cm");
    let data = cm.value["data"].as_object().expect("data");
    assert_eq!(data.keys().collect::<Vec<_>>(), [ARGOCD_CM_KEY], "one key, for all kinds");
    let value = argocd_cm_override(&cm.value);
    assert_eq!(value["jqPathExpressions"], ignore_entry(&app)["jqPathExpressions"]);
}

#[test]
fn sync_and_compare_options_are_the_ones_described() {
    let app = snippet("argocd-application-ignore-differences");
    assert_eq!(
        strings(&app.value["spec"]["syncPolicy"]["syncOptions"], "syncOptions"),
        ["RespectIgnoreDifferences=true"]
    );
    // The page says not to combine ignoring the image with RespectIgnoreDifferences.
    let pin = snippet("argocd-application-pin-ignore-image");
    assert!(!pin.text.contains("RespectIgnoreDifferences"), "{}", pin.name);

    let ssd = snippet("argocd-application-server-side-diff");
    let options = ssd.value["metadata"]["annotations"]["argocd.argoproj.io/compare-options"]
        .as_str()
        .expect("the compare-options annotation");
    let options: Vec<_> = options.split(',').map(str::trim).collect();
    assert!(options.contains(&"ServerSideDiff=true"), "{options:?}");
    // The option names Argo CD's controller reads (controller/state.go).
    for option in &options {
        assert!(
            ["ServerSideDiff=true", "IncludeMutationWebhook=true"].contains(option),
            "{option:?}"
        );
    }
}

/// Which containers `configsum.dev/images` names, by configsum's rule: comma
/// separated, trimmed, `*` for all (README, "Annotations").
fn tracked(object: &Value, container: &str) -> bool {
    let list = object["metadata"]["annotations"]["configsum.dev/images"].as_str().unwrap_or("");
    list.split(',').map(str::trim).any(|t| t == "*" || t == container)
}

fn pinned_policy(object: &Value) -> bool {
    object["metadata"]["annotations"]["configsum.dev/image-policy"].as_str().map(str::trim)
        == Some("pin")
}

/// The paths of the images of tracked containers of a pinned workload.
fn tracked_image_paths(object: &Value) -> BTreeSet<JsonPath> {
    let mut paths = BTreeSet::new();
    if !pinned_policy(object) {
        return paths;
    }
    for list in ["initContainers", "containers"] {
        for (i, c) in
            object["spec"]["template"]["spec"][list].as_array().into_iter().flatten().enumerate()
        {
            if tracked(object, c["name"].as_str().expect("a container name")) {
                let index = i.to_string();
                paths.insert(path(&["spec", "template", "spec", list, &index, "image"]));
            }
        }
    }
    paths
}

#[test]
fn the_pin_expression_selects_exactly_the_tracked_images() {
    let pin = snippet("argocd-application-pin-ignore-image");
    let expressions = strings(&ignore_entry(&pin)["jqPathExpressions"], "jqPathExpressions");
    assert_eq!(expressions.len(), 1);
    let expression = &expressions[0];
    let sample = sample();

    // The sample: app is tracked and pinned (its image carries its annotation's digest),
    // proxy is not tracked.
    let domain = AnnotationDomain::default();
    let app_digest =
        template_annotations(&sample)[&domain.image_key("app")].as_str().expect("digest");
    let app_image =
        sample["spec"]["template"]["spec"]["containers"][0]["image"].as_str().expect("image");
    assert!(app_image.ends_with(&format!("@{app_digest}")), "{app_image}");
    let expected = tracked_image_paths(&sample);
    assert_eq!(expected.len(), 1, "only app is tracked in {SAMPLE}");
    assert_eq!(jq_paths(expression, &sample), expected);

    // Variants: more containers, other lists, other annotations.
    let mut variant = sample.clone();
    variant["spec"]["template"]["spec"]["initContainers"] =
        json!([{"name": "migrate", "image": "registry.example.com/shop/migrate:prod@sha256:00"}]);
    for (images, policy) in [
        ("app", "pin"),
        ("*", "pin"),
        (" migrate , app ", " pin "),
        ("proxy,migrate", "pin"),
        ("*", "record"),
        ("app", "Pin"),
        ("", "pin"),
    ] {
        let mut object = variant.clone();
        let annotations = object["metadata"]["annotations"].as_object_mut().expect("annotations");
        annotations.insert("configsum.dev/images".into(), json!(images));
        annotations.insert("configsum.dev/image-policy".into(), json!(policy));
        assert_eq!(
            jq_paths(expression, &object),
            tracked_image_paths(&object),
            "images {images:?}, policy {policy:?}"
        );
    }
    // No annotations at all, or no pod template: nothing, no error.
    let mut bare = variant.clone();
    bare["metadata"].as_object_mut().expect("metadata").remove("annotations");
    assert!(jq_paths(expression, &bare).is_empty());
    let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}});
    assert!(jq_paths(expression, &service).is_empty());
}

// ---------------------------------------------------------------------------
// Flux

/// Whether a Flux ignore rule's target names the sample; the page's targets are
/// plain names (no regular expression characters), so equality is a regex match.
fn targets_sample(target: &Value, sample: &Value) -> bool {
    let plain = |s: &str| s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    let kind = target["kind"].as_str().expect("target.kind");
    let name = target["name"].as_str().expect("target.name");
    assert!(plain(kind) && plain(name), "{target}");
    kind == sample["kind"] && name == sample["metadata"]["name"]
}

/// RFC 6901: a pointer's tokens, `~1` and `~0` unescaped.
fn pointer_tokens(pointer: &str) -> Vec<String> {
    assert!(pointer.starts_with('/'), "{pointer}");
    pointer[1..].split('/').map(|t| t.replace("~1", "/").replace("~0", "~")).collect()
}

/// The sample's configsum fields that a Flux snippet's ignore paths name: every path
/// must resolve on the sample; returns them as paths.
fn flux_ignored(snippet: &Snippet, rules: &Value, sample: &Value) -> BTreeSet<JsonPath> {
    let rules = rules.as_array().unwrap_or_else(|| panic!("{}: ignore rules", snippet.name));
    let mut seen = BTreeSet::new();
    for rule in rules {
        assert!(targets_sample(&rule["target"], sample), "{}: {rule}", snippet.name);
        for pointer in strings(&rule["paths"], "paths") {
            assert!(
                sample.pointer(&pointer).is_some(),
                "{}: {pointer} resolves to nothing on {SAMPLE}",
                snippet.name
            );
            seen.insert(pointer_tokens(&pointer));
        }
    }
    seen
}

#[test]
fn flux_pointers_resolve_to_configsums_fields() {
    let sample = sample();
    let annotations = owned_annotation_paths(&sample);
    let images = tracked_image_paths(&sample);
    assert!(!images.is_empty(), "{SAMPLE} pins an image");

    // HelmRelease drift detection: every configsum annotation and pinned image of the
    // sample, nothing else.
    let helm = snippet("flux-helmrelease-drift-detection");
    let detection = &helm.value["spec"]["driftDetection"];
    assert_eq!(detection["mode"], "enabled");
    let ignored = flux_ignored(&helm, &detection["ignore"], &sample);
    let expected: BTreeSet<_> = annotations.union(&images).cloned().collect();
    assert_eq!(ignored, expected, "{}", helm.name);

    // Kustomization: configsum's annotations only, never an image (the page says why).
    let kustomization = snippet("flux-kustomization-ignore");
    let ignored = flux_ignored(&kustomization, &kustomization.value["spec"]["ignore"], &sample);
    assert!(ignored.iter().all(|p| annotations.contains(p)), "{ignored:?}");
    assert!(
        ignored.iter().all(|p| !p.iter().any(|t| t == "image")),
        "{}: no image path",
        kustomization.name
    );
    assert_eq!(kustomization.value["spec"]["force"], false);
}

#[test]
fn pointer_escaping_is_rfc_6901() {
    assert_eq!(
        pointer_tokens("/spec/template/metadata/annotations/configmap.configsum.dev~1app-config"),
        ["spec", "template", "metadata", "annotations", "configmap.configsum.dev/app-config"]
    );
    assert_eq!(pointer_tokens("/a~01/b~10"), ["a~1", "b/0"]);
    // serde_json's pointer unescapes the same way.
    let v = json!({"a/b": {"c~d": 1}});
    assert_eq!(v.pointer("/a~1b/c~0d"), Some(&json!(1)));
    assert_eq!(v.pointer("/a/b/c~d"), None);
}
