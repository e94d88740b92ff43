//! A tracked workload (workloads that roll together): a
//! Keycloak that must roll when its database Deployment is redeployed tracks that
//! Deployment, and its annotation holds the digest of the Deployment's pod template. This is
//! that digest, pure: `sha256:` of the template's canonical JSON (keys sorted, no whitespace,
//! strings as JSON writes them), without the workload-tracking annotations themselves, so two
//! workloads that track each other settle after one round.

use std::collections::BTreeMap;

use serde_json::Value;
use serde_json::value::RawValue;
use sha2::{Digest as _, Sha256};

use crate::core::model::hex::hex;

/// The digest of `template` (a pod template as the API server returns it). An annotation
/// whose key starts with one of `tracking_prefixes` (`deployment.<domain>/`, …) is left out;
/// an annotations map, and then a metadata map, left empty by that is left out too, so that
/// adding or removing the tracking annotations never changes the digest.
pub fn template_digest(template: &Value, tracking_prefixes: &[String]) -> String {
    let mut text = String::new();
    write_canonical(&without_tracking(template, tracking_prefixes), &mut text);
    format!("sha256:{}", hex(&Sha256::digest(text.as_bytes())))
}

/// As [`template_digest`], from the template's JSON text, without building its tree: each
/// level is read as a map of borrowed raw values, so only keys are allocated. The controller
/// digests every watched workload's template this way. `None` for text that is not JSON, or
/// nested deeper than [`MAX_RAW_DEPTH`] (the caller then builds the tree).
pub fn template_digest_of_json(template: &str, tracking_prefixes: &[String]) -> Option<String> {
    let mut text = String::with_capacity(template.len());
    let tracking = |key: &str| tracking_prefixes.iter().any(|prefix| key.starts_with(prefix));
    write_template(template, &tracking, &mut text).ok()?;
    Some(format!("sha256:{}", hex(&Sha256::digest(text.as_bytes()))))
}

/// Levels read map by map; deeper templates (never a built-in kind's) take the tree.
pub const MAX_RAW_DEPTH: usize = 64;

#[derive(Debug)]
struct TooDeep;

impl From<serde_json::Error> for TooDeep {
    fn from(_: serde_json::Error) -> Self {
        TooDeep
    }
}

type RawMap<'a> = BTreeMap<String, &'a RawValue>;

/// The template: its `metadata.annotations` without the tracking ones, and a map left empty
/// by that left out, as [`without_tracking`] does on the tree.
fn write_template(
    json: &str,
    tracking: &dyn Fn(&str) -> bool,
    out: &mut String,
) -> Result<(), TooDeep> {
    if !is_object(json) {
        return write_raw(json, out, 0);
    }
    let mut root: RawMap<'_> = serde_json::from_str(json)?;
    let mut metadata_text = None;
    if let Some(metadata) = root.get("metadata").filter(|m| is_object(m.get())) {
        let mut metadata: RawMap<'_> = serde_json::from_str(metadata.get())?;
        let mut annotations_text = None;
        if let Some(annotations) = metadata.get("annotations").filter(|a| is_object(a.get())) {
            let mut annotations: RawMap<'_> = serde_json::from_str(annotations.get())?;
            annotations.retain(|key, _| !tracking(key));
            if !annotations.is_empty() {
                let mut text = String::new();
                write_map(&annotations, &BTreeMap::new(), 1, &mut text)?;
                annotations_text = Some(text);
            }
            metadata.remove("annotations");
        }
        let mut written = BTreeMap::new();
        if let Some(text) = annotations_text {
            written.insert("annotations".to_owned(), text);
        }
        if !metadata.is_empty() || !written.is_empty() {
            let mut text = String::new();
            write_map(&metadata, &written, 1, &mut text)?;
            metadata_text = Some(text);
        }
        root.remove("metadata");
    }
    let mut written = BTreeMap::new();
    if let Some(text) = metadata_text {
        written.insert("metadata".to_owned(), text);
    }
    write_map(&root, &written, 0, out)
}

fn is_object(json: &str) -> bool {
    json.trim_start().starts_with('{')
}

/// A map's entries in key order: `raw` ones written canonically, `written` ones as given.
fn write_map(
    raw: &RawMap<'_>,
    written: &BTreeMap<String, String>,
    depth: usize,
    out: &mut String,
) -> Result<(), TooDeep> {
    let mut keys: Vec<&String> = raw.keys().chain(written.keys()).collect();
    keys.sort_unstable();
    out.push('{');
    for (i, key) in keys.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(key, out);
        out.push(':');
        match written.get(key) {
            Some(text) => out.push_str(text),
            None => {
                if let Some(value) = raw.get(key) {
                    write_raw(value.get(), out, depth + 1)?;
                }
            }
        }
    }
    out.push('}');
    Ok(())
}

/// Any JSON value, canonically: as [`write_canonical`] writes the tree it parses to.
fn write_raw(json: &str, out: &mut String, depth: usize) -> Result<(), TooDeep> {
    if depth > MAX_RAW_DEPTH {
        return Err(TooDeep);
    }
    match json.trim_start().as_bytes().first() {
        Some(b'{') => {
            let map: RawMap<'_> = serde_json::from_str(json)?;
            write_map(&map, &BTreeMap::new(), depth, out)
        }
        Some(b'[') => {
            let items: Vec<&RawValue> = serde_json::from_str(json)?;
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_raw(item.get(), out, depth + 1)?;
            }
            out.push(']');
            Ok(())
        }
        Some(b'"') => {
            let text: String = serde_json::from_str(json)?;
            write_string(&text, out);
            Ok(())
        }
        _ => {
            let scalar: Value = serde_json::from_str(json)?;
            out.push_str(&scalar.to_string());
            Ok(())
        }
    }
}

fn without_tracking(template: &Value, tracking_prefixes: &[String]) -> Value {
    let mut template = template.clone();
    let tracking = |key: &str| tracking_prefixes.iter().any(|prefix| key.starts_with(prefix));
    if let Some(metadata) = template.get_mut("metadata").and_then(Value::as_object_mut) {
        if let Some(annotations) = metadata.get_mut("annotations").and_then(Value::as_object_mut) {
            annotations.retain(|key, _| !tracking(key));
            if annotations.is_empty() {
                metadata.remove("annotations");
            }
        }
        if metadata.is_empty() {
            if let Some(object) = template.as_object_mut() {
                object.remove("metadata");
            }
        }
    }
    template
}

/// Keys sorted (by their UTF-8 bytes), no whitespace. Depth is bounded by the parser that
/// built `value` (serde_json stops at 128 levels).
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_canonical(value, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::String(text) => write_string(text, out),
        scalar => out.push_str(&scalar.to_string()),
    }
}

fn write_string(text: &str, out: &mut String) {
    // serde_json's escaping: quotes, backslashes and control characters; UTF-8 as is.
    out.push_str(&Value::String(text.to_owned()).to_string());
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn prefixes() -> Vec<String> {
        ["deployment", "statefulset"].map(|k| format!("{k}.configsum.dev/")).to_vec()
    }

    fn digest(template: &Value) -> String {
        template_digest(template, &prefixes())
    }

    #[test]
    fn the_digest_is_of_the_canonical_json() {
        // The same text and digest as Python's json.dumps(sort_keys=True, separators=(",", ":")).
        let template = json!({"spec": {"containers": [{"name": "db", "image": "postgres:16"}]},
            "metadata": {"labels": {"app": "db"}}});
        let mut text = String::new();
        write_canonical(&template, &mut text);
        assert_eq!(
            text,
            r#"{"metadata":{"labels":{"app":"db"}},"spec":{"containers":[{"image":"postgres:16","name":"db"}]}}"#
        );
        assert_eq!(
            digest(&template),
            "sha256:3ec2d6376522b6249e7059812da1f776a47e64b78e985ccd6deabb0c11dee19f"
        );
        let reordered: Value = serde_json::from_str(
            r#"{ "metadata" : { "labels": {"app":"db"} }, "spec": {"containers": [ {"image": "postgres:16", "name": "db"} ] } }"#,
        )
        .expect("json");
        assert_eq!(digest(&reordered), digest(&template), "order and whitespace do not count");
        let escaped = json!({"a": "quote \" backslash \\ newline \n é"});
        let mut text = String::new();
        write_canonical(&escaped, &mut text);
        assert_eq!(text, r#"{"a":"quote \" backslash \\ newline \n é"}"#);
    }

    #[test]
    fn what_rolls_the_tracked_workload_changes_the_digest() {
        let base = json!({"metadata": {"labels": {"app": "db"}},
            "spec": {"containers": [{"name": "db", "image": "postgres:16"}]}});
        let mut image = base.clone();
        image["spec"]["containers"][0]["image"] = json!("postgres:17");
        let mut restarted = base.clone();
        restarted["metadata"]["annotations"] =
            json!({"kubectl.kubernetes.io/restartedAt": "2026-11-27T09:00:00Z"});
        let mut own_digest = base.clone();
        own_digest["metadata"]["annotations"] =
            json!({"secret.configsum.dev/db": "hmac-sha256:ab"});
        let digests = [&base, &image, &restarted, &own_digest].map(digest);
        for (i, a) in digests.iter().enumerate() {
            for b in &digests[i + 1..] {
                assert_ne!(a, b, "a new image, a restart, a changed digest of its own");
            }
        }
    }

    /// The text path gives the digest of the tree the same text parses to (as the webhook
    /// parses the API server's answer), for whatever JSON a template holds.
    fn same_both_ways(template: &Value) {
        let text = serde_json::to_string(template).expect("json");
        let tree: Value = serde_json::from_str(&text).expect("json");
        assert_eq!(
            template_digest_of_json(&text, &prefixes()).as_deref(),
            Some(digest(&tree).as_str()),
            "{text}"
        );
    }

    #[test]
    fn the_text_path_digests_as_the_tree_does() {
        for template in [
            json!({"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "db"}]}}),
            json!({"metadata": {"annotations": {"deployment.configsum.dev/a": "x"}}, "spec": {}}),
            json!({"metadata": {"annotations": {"deployment.configsum.dev/a": "x", "b": "c"}}}),
            json!({"metadata": {"annotations": {}, "labels": {}}}),
            json!({"metadata": {}}),
            json!({"metadata": {"annotations": null}}),
            json!({"metadata": null, "spec": [1, 2.5, -3, true, null, "é\n\u{1}<&>"]}),
            json!(null),
            json!({"z": {"b": 1, "a": {"y": [], "x": {}}}, "a": "quote \" backslash \\"}),
        ] {
            same_both_ways(&template);
        }
        // Go escapes <, > and & as \u003c, \u003e, \u0026; the text path decodes them first.
        let go = r#"{"spec":{"command":["a\u003cb\u0026c"]}}"#;
        let tree: Value = serde_json::from_str(go).expect("json");
        assert_eq!(template_digest_of_json(go, &prefixes()), Some(digest(&tree)));
        // Too deep for the text path: the caller builds the tree.
        let deep = format!("{}1{}", "[".repeat(70), "]".repeat(70));
        assert_eq!(template_digest_of_json(&deep, &prefixes()), None);
    }

    proptest::proptest! {
        #[test]
        fn any_template_digests_the_same_both_ways(template in arbitrary_json()) {
            same_both_ways(&template);
        }
    }

    fn arbitrary_json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let key = prop_oneof![
            Just("metadata".to_owned()),
            Just("annotations".to_owned()),
            Just("deployment.configsum.dev/x".to_owned()),
            "[a-z\\\"é<]{0,6}",
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
            "[a-z\\\"\\n\u{1}é]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 40, 6, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(key.clone(), inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    #[test]
    fn workloads_tracking_each_other_settle() {
        let bare = json!({"spec": {"containers": [{"name": "kc", "image": "keycloak:26"}]}});
        let mut tracking = bare.clone();
        tracking["metadata"] = json!({"annotations": {
            "deployment.configsum.dev/db": "sha256:00", "statefulset.configsum.dev/cache": "absent"}});
        assert_eq!(digest(&tracking), digest(&bare), "its own tracking annotations do not count");
        let mut with_others = tracking.clone();
        with_others["metadata"]["annotations"]["secret.configsum.dev/s"] = json!("x");
        let mut only_others = bare.clone();
        only_others["metadata"] = json!({"annotations": {"secret.configsum.dev/s": "x"}});
        assert_eq!(digest(&with_others), digest(&only_others));
        assert_ne!(digest(&with_others), digest(&bare));
    }
}
