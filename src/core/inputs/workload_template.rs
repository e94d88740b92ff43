//! A tracked workload (workloads that roll together): a
//! Keycloak that must roll when its database Deployment is redeployed tracks that
//! Deployment, and its annotation holds the digest of the Deployment's pod template. This is
//! that digest, pure: `sha256:` of the template's canonical JSON (keys sorted, no whitespace,
//! strings as JSON writes them), without the workload-tracking annotations themselves, so two
//! workloads that track each other settle after one round.

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::core::digest::hex;

/// The digest of `template` (a pod template as the API server returns it). An annotation
/// whose key starts with one of `tracking_prefixes` (`deployment.<domain>/`, …) is left out;
/// an annotations map, and then a metadata map, left empty by that is left out too, so that
/// adding or removing the tracking annotations never changes the digest.
pub fn template_digest(template: &Value, tracking_prefixes: &[String]) -> String {
    let mut text = String::new();
    write_canonical(&without_tracking(template, tracking_prefixes), &mut text);
    format!("sha256:{}", hex(&Sha256::digest(text.as_bytes())))
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
