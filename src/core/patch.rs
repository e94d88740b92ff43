//! The minimal JSON Patch (RFC 6902) that turns the current digest annotations
//! into the desired ones, touching no other annotation or field.

use std::collections::BTreeMap;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, RemoveOperation};
use serde_json::Value;

/// Where the annotations map sits in the object, and how much of that path exists yet.
#[derive(Clone, Copy, Debug)]
pub struct AnnotationsLocation {
    /// Path tokens of the annotations map.
    pub path: &'static [&'static str],
    /// How many leading tokens of `path` exist: the patch creates the others (as empty maps,
    /// outermost first) and never replaces these.
    pub present: usize,
}

/// `remove` for owned keys that are not desired, `add` for desired keys whose
/// value differs, and nothing for unchanged ones. `add` on an existing member
/// replaces it, so one verb serves new and changed keys.
pub fn annotations_patch(
    location: AnnotationsLocation,
    current: &BTreeMap<String, String>,
    desired: BTreeMap<String, String>,
    owned: impl Fn(&str) -> bool,
) -> Vec<PatchOperation> {
    let removed = || current.keys().filter(|k| owned(k) && !desired.contains_key(*k));
    let is_add = |(key, value): &(&String, &String)| current.get(*key) != Some(*value);
    let adds = desired.iter().filter(is_add).count();
    let missing = match adds {
        0 => 0..0,
        _ => location.present.min(location.path.len())..location.path.len(),
    };
    // Sized at once: the operations are counted before any is built.
    let mut ops = Vec::with_capacity(removed().count() + missing.len() + adds);
    let key_pointer = |key: &str| pointer(location.path.iter().copied().chain([key]));
    for key in removed() {
        ops.push(PatchOperation::Remove(RemoveOperation { path: key_pointer(key) }));
    }
    for missing in missing {
        ops.push(add(
            pointer(location.path[..=missing].iter().copied()),
            Value::Object(Default::default()),
        ));
    }
    // The values are moved into the patch, not copied.
    for (key, value) in desired.into_iter().filter(|(k, v)| current.get(k) != Some(v)) {
        ops.push(add(key_pointer(&key), Value::String(value)));
    }
    ops
}

/// The JSON Pointer (RFC 6901) of `tokens`, escaped and built in one allocation of the right
/// size: `PointerBuf::from_tokens` grows its string token by token and allocates for each
/// token it escapes, about six allocations for a digest's path.
pub fn pointer<'t>(tokens: impl Iterator<Item = &'t str> + Clone) -> PointerBuf {
    let escaped =
        |token: &str| token.len() + token.bytes().filter(|b| matches!(b, b'~' | b'/')).count();
    let mut text = String::with_capacity(tokens.clone().map(|t| 1 + escaped(t)).sum());
    for token in tokens.clone() {
        text.push('/');
        for (i, part) in token.split('~').enumerate() {
            if i > 0 {
                text.push_str("~0");
            }
            for (j, piece) in part.split('/').enumerate() {
                if j > 0 {
                    text.push_str("~1");
                }
                text.push_str(piece);
            }
        }
    }
    // Escaped as above, the text is a pointer; were it refused, the slower way builds it.
    PointerBuf::parse(text).unwrap_or_else(|_| PointerBuf::from_tokens(tokens))
}

fn add(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation { path, value })
}

/// Total size the API server counts for an annotations map: keys plus values.
pub fn annotations_size<'a>(
    annotations: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> usize {
    annotations.into_iter().map(|(k, v)| k.len() + v.len()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TEMPLATE: &[&str] = &["spec", "template", "metadata", "annotations"];

    fn map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn owned(key: &str) -> bool {
        key.starts_with("configmap.configsum.dev/") || key.starts_with("secret.configsum.dev/")
    }

    fn ops(
        location: AnnotationsLocation,
        current: &[(&str, &str)],
        desired: &[(&str, &str)],
    ) -> Value {
        serde_json::to_value(annotations_patch(location, &map(current), map(desired), owned))
            .expect("json")
    }

    const PRESENT: AnnotationsLocation = AnnotationsLocation { path: TEMPLATE, present: 4 };

    #[test]
    fn pointers_are_escaped_as_json_patch_escapes_them() {
        for tokens in [
            &["spec", "template"][..],
            &["a/b", "~", "~1/~0", "", "x~/y", "é/ü"],
            &[],
            &["metadata", "annotations", "configmap.configsum.dev/app-config"],
        ] {
            let expected = PointerBuf::from_tokens(tokens.iter().copied());
            assert_eq!(pointer(tokens.iter().copied()), expected, "{tokens:?}");
        }
    }

    #[test]
    fn adds_changes_removes_and_leaves_the_rest() {
        let got = ops(
            PRESENT,
            &[
                ("other", "x"),
                ("configmap.configsum.dev/same", "1"),
                ("configmap.configsum.dev/old", "2"),
                ("secret.configsum.dev/changed", "3"),
            ],
            &[
                ("configmap.configsum.dev/same", "1"),
                ("secret.configsum.dev/changed", "4"),
                ("secret.configsum.dev/new", "5"),
            ],
        );
        assert_eq!(
            got,
            json!([
                {"op": "remove", "path": "/spec/template/metadata/annotations/configmap.configsum.dev~1old"},
                {"op": "add", "path": "/spec/template/metadata/annotations/secret.configsum.dev~1changed", "value": "4"},
                {"op": "add", "path": "/spec/template/metadata/annotations/secret.configsum.dev~1new", "value": "5"},
            ])
        );
    }

    #[test]
    fn creates_missing_metadata_and_annotations_first() {
        let location = AnnotationsLocation { path: TEMPLATE, present: 2 };
        let got = ops(location, &[], &[("configmap.configsum.dev/a", "v")]);
        assert_eq!(
            got,
            json!([
                {"op": "add", "path": "/spec/template/metadata", "value": {}},
                {"op": "add", "path": "/spec/template/metadata/annotations", "value": {}},
                {"op": "add", "path": "/spec/template/metadata/annotations/configmap.configsum.dev~1a", "value": "v"},
            ])
        );
        let pod = AnnotationsLocation { path: &["metadata", "annotations"], present: 1 };
        assert_eq!(
            ops(pod, &[], &[("secret.configsum.dev/s", "v")]),
            json!([
                {"op": "add", "path": "/metadata/annotations", "value": {}},
                {"op": "add", "path": "/metadata/annotations/secret.configsum.dev~1s", "value": "v"},
            ])
        );
    }

    #[test]
    fn a_map_deep_in_a_spec_is_made_level_by_level() {
        let location =
            AnnotationsLocation { path: &["spec", "operator", "podAnnotations"], present: 1 };
        assert_eq!(
            ops(location, &[], &[("secret.configsum.dev/s", "v")]),
            json!([
                {"op": "add", "path": "/spec/operator", "value": {}},
                {"op": "add", "path": "/spec/operator/podAnnotations", "value": {}},
                {"op": "add", "path": "/spec/operator/podAnnotations/secret.configsum.dev~1s", "value": "v"},
            ])
        );
    }

    #[test]
    fn nothing_to_do_is_an_empty_patch() {
        let location = AnnotationsLocation { path: TEMPLATE, present: 2 };
        assert_eq!(ops(location, &[], &[]), json!([]));
        assert_eq!(
            ops(
                PRESENT,
                &[("configmap.configsum.dev/a", "v")],
                &[("configmap.configsum.dev/a", "v")]
            ),
            json!([])
        );
    }

    #[test]
    fn escapes_tilde_and_slash() {
        let got = ops(PRESENT, &[], &[("configmap.configsum.dev/a~b", "v")]);
        assert_eq!(
            got[0]["path"],
            "/spec/template/metadata/annotations/configmap.configsum.dev~1a~0b"
        );
    }

    #[test]
    fn size_counts_keys_and_values() {
        assert_eq!(annotations_size(&map(&[("ab", "cde"), ("f", "")])), 6);
    }
}
