//! A tracked object as the API server returns it, decoded by its kind's row
//! in `core::inputs`: the resourceVersion, the declared data fields, and how it stands by the
//! [`ObjectScope`] (from the one annotation and the labels the scope reads). Every other
//! field (managedFields, other labels and annotations, `type`) is skipped while decoding.

use std::collections::BTreeMap;
use std::fmt;

use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

use crate::core::ObjectContent;
use crate::core::inputs::ObjectInput;
use crate::core::model::kinds::WorkloadKind;
use crate::core::model::object_ref::ObjectKind;
use crate::core::model::object_scope::{ObjectScope, Standing};

/// The API resource of a tracked kind, for dynamic requests and watches.
pub fn object_resource(kind: ObjectKind) -> ApiResource {
    let input = kind.input();
    resource(input.group, input.version, input.api_kind, input.resource)
}

/// The API resource of a row (`core::inputs` or `core::model::kinds`): kube's own builder, which
/// writes `apiVersion` as the API server does (the version alone for the core group).
pub fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// The API resource of a workload kind, for dynamic requests and watches.
pub fn workload_resource(kind: WorkloadKind) -> ApiResource {
    let (group, version, plural) = kind.resource();
    resource(group, version, kind.as_str(), plural)
}

/// The path of the namespaced collection of `kind`, for a GET by name.
pub fn collection_path(kind: ObjectKind, namespace: &str) -> String {
    use kube::Resource as _;
    DynamicObject::url_path(&object_resource(kind), Some(namespace))
}

/// What a read keeps of an object: its content and the resourceVersion it was read at.
pub type Decoded = (ObjectContent, Option<String>);

/// An answer that is not an object of the expected kind. It keeps only the
/// position: serde's message can quote a value, and values may be Secret data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("undecodable object at line {line} column {column}")]
pub struct Undecodable {
    pub line: usize,
    pub column: usize,
}

/// Decodes one object of `kind` from the API server's JSON, judged by `scope`.
pub fn decode(kind: ObjectKind, json: &str, scope: &ObjectScope) -> Result<Decoded, Undecodable> {
    let mut deserializer = serde_json::Deserializer::from_str(json);
    let decoded = ObjectSeed { input: kind.input(), scope }
        .deserialize(&mut deserializer)
        .and_then(|decoded| deserializer.end().map(|()| decoded));
    decoded.map_err(|e| Undecodable { line: e.line(), column: e.column() })
}

struct ObjectSeed<'s> {
    input: &'static ObjectInput,
    scope: &'s ObjectScope,
}

/// What the metadata says: the resourceVersion, the scope's annotation and labels.
#[derive(Default)]
struct Metadata {
    resource_version: Option<String>,
    ignore: Option<String>,
    readable_from: Option<String>,
    labels: Vec<(String, String)>,
}

struct MetadataSeed<'s>(&'s ObjectScope);

impl<'de> DeserializeSeed<'de> for MetadataSeed<'_> {
    type Value = Metadata;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Metadata, D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for MetadataSeed<'_> {
    type Value = Metadata;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object's metadata")
    }

    fn visit_none<E: de::Error>(self) -> Result<Metadata, E> {
        Ok(Metadata::default())
    }

    fn visit_unit<E: de::Error>(self) -> Result<Metadata, E> {
        Ok(Metadata::default())
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Metadata, D::Error> {
        deserializer.deserialize_map(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Metadata, A::Error> {
        let scope = self.0;
        let mut metadata = Metadata::default();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match &*key {
                "resourceVersion" => metadata.resource_version = map.next_value()?,
                "annotations" => {
                    let wanted =
                        |k: &str| k == scope.ignore_key() || k == scope.readable_from_key();
                    for (k, v) in map.next_value_seed(PickedStrings(&wanted))? {
                        match k == scope.ignore_key() {
                            true => metadata.ignore = Some(v),
                            false => metadata.readable_from = Some(v),
                        }
                    }
                }
                "labels" => {
                    let wanted = |k: &str| scope.reads_label(k);
                    metadata.labels = map.next_value_seed(PickedStrings(&wanted))?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(metadata)
    }
}

/// The entries of a string map whose keys `wanted` names; every other value is skipped
/// unbuilt (an annotation can be large, and can quote a Secret).
struct PickedStrings<'w>(&'w dyn Fn(&str) -> bool);

impl<'de> DeserializeSeed<'de> for PickedStrings<'_> {
    type Value = Vec<(String, String)>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for PickedStrings<'_> {
    type Value = Vec<(String, String)>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map of strings")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut kept = Vec::new();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if (self.0)(&key) {
                kept.push((key.into_owned(), map.next_value::<String>()?));
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(kept)
    }
}

impl<'de> DeserializeSeed<'de> for ObjectSeed<'_> {
    type Value = Decoded;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Decoded, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ObjectSeed<'_> {
    type Value = Decoded;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a {} object", self.input.api_kind)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Decoded, A::Error> {
        let input = self.input;
        let mut metadata = Metadata::default();
        let mut fields: Vec<(&'static str, BTreeMap<String, String>)> = Vec::new();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == "metadata" {
                metadata = map.next_value_seed(MetadataSeed(self.scope))?;
            } else if let Some(data) = input.data.iter().find(|d| d.field == key) {
                if let Some(values) = map.next_value::<Option<BTreeMap<String, String>>>()? {
                    fields.push((data.field, values));
                }
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        let mut take = |field: &str| {
            let at = fields.iter().position(|(name, _)| *name == field)?;
            Some(fields.swap_remove(at).1)
        };
        let content = input.content(&mut take).map_err(de::Error::custom)?;
        let Metadata { resource_version, ignore, readable_from, labels } = metadata;
        let label = |key: &str| labels.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        let standing: Standing = self.scope.standing(ignore.as_deref(), label);
        let content = content.with_standing(standing).with_readable_from(readable_from.as_deref());
        Ok((content, resource_version))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ObjectRef;
    use crate::core::digest::{Digester, ObjectId};
    use crate::core::refs::ConsumedKeys;

    fn digest(object: ObjectRef, content: &ObjectContent) -> String {
        let id = ObjectId { namespace: "ns", object: &object };
        Digester::default().digest(id, content, &ConsumedKeys::All, None)
    }

    fn entries(list: &[(&str, &[u8])]) -> ObjectContent {
        ObjectContent::from_entries(list.iter().map(|(k, v)| (k.to_string(), v.to_vec())).collect())
    }

    #[test]
    fn paths_follow_the_declared_resource() {
        assert_eq!(
            collection_path(ObjectKind::ConfigMap, "team-a"),
            "/api/v1/namespaces/team-a/configmaps"
        );
        assert_eq!(object_resource(ObjectKind::Secret).api_version, "v1");
        assert_eq!(object_resource(ObjectKind::Secret).kind, "Secret");
    }

    #[test]
    fn a_secret_as_the_api_returns_it() {
        let json = r#"{"kind":"Secret","apiVersion":"v1","type":"Opaque","immutable":true,
            "metadata":{"name":"db","namespace":"ns","resourceVersion":"42",
                "managedFields":[{"manager":"kubectl","fieldsV1":{"f:data":{}}}],
                "labels":{"a":"b"}},
            "data":{"user":"YWRtaW4=","password":"aHVudGVyMg=="}}"#;
        let (content, version) =
            decode(ObjectKind::Secret, json, &ObjectScope::default()).expect("decodes");
        assert_eq!(version.as_deref(), Some("42"));
        let expected = entries(&[("user", b"admin"), ("password", b"hunter2")]);
        let s = ObjectRef::secret("db");
        assert_eq!(digest(s.clone(), &content), digest(s, &expected));
    }

    #[test]
    fn a_config_map_with_binary_data_null_fields_and_no_version() {
        let json = r#"{"metadata":{"name":"c"},"data":{"a":"1"},"binaryData":{"b":"AAE="},
            "stringData":{"a":"not a ConfigMap field"}}"#;
        let (content, version) =
            decode(ObjectKind::ConfigMap, json, &ObjectScope::default()).expect("decodes");
        assert_eq!(version, None);
        let c = ObjectRef::config_map("c");
        let expected = entries(&[("a", b"1"), ("b", &[0, 1])]);
        assert_eq!(digest(c.clone(), &content), digest(c.clone(), &expected));
        let (empty, _) = decode(
            ObjectKind::ConfigMap,
            r#"{"metadata":null,"data":null}"#,
            &ObjectScope::default(),
        )
        .expect("null fields are absent");
        assert_eq!(digest(c.clone(), &empty), digest(c, &entries(&[])));
    }

    #[test]
    fn the_owner_says_which_namespaces_may_read_it() {
        let scope = ObjectScope::default();
        let readable_from = |annotations: &str, namespace: &str| {
            let json = format!(r#"{{"metadata":{{"annotations":{annotations}}},"data":{{}}}}"#);
            let (content, _) = decode(ObjectKind::Secret, &json, &scope).expect("decodes");
            content.readable_from(namespace)
        };
        let both = r#"{"configsum.dev/ignore":"false","configsum.dev/readable-from":"web, app"}"#;
        assert!(readable_from(both, "app"));
        assert!(!readable_from(both, "other"));
        assert!(!readable_from(r#"{"example.com/readable-from":"*"}"#, "app"), "another domain");
        assert!(!readable_from("null", "app"));
    }

    #[test]
    fn the_owner_and_the_selector_decide_whether_it_counts() {
        use crate::core::model::annotations::AnnotationDomain;
        use crate::core::model::label_selector::LabelSelector;
        let selector = LabelSelector::parse("reload=on").expect("valid");
        let domain = AnnotationDomain::new("example.com").expect("valid");
        let scope = ObjectScope::new(&domain, selector);
        let standing = |metadata: &str| {
            let json = format!(r#"{{"metadata":{metadata},"data":{{"a":"YQ=="}}}}"#);
            let (content, _) = decode(ObjectKind::Secret, &json, &scope).expect("decodes");
            content.standing()
        };
        let last_applied = r#""kubectl.kubernetes.io/last-applied-configuration":"{\"data\":{}}""#;
        assert_eq!(
            standing(&format!(
                r#"{{"labels":{{"reload":"on"}},"annotations":{{{last_applied}}}}}"#
            )),
            Standing::Tracked
        );
        assert_eq!(standing(r#"{"labels":{"reload":"off","x":"y"}}"#), Standing::Unselected);
        assert_eq!(standing(r#"{"labels":null}"#), Standing::Unselected);
        assert_eq!(
            standing(r#"{"labels":{"reload":"on"},"annotations":{"example.com/ignore":"true"}}"#),
            Standing::Ignored
        );
        let other_domain =
            r#"{"labels":{"reload":"on"},"annotations":{"configsum.dev/ignore":"true"}}"#;
        assert_eq!(standing(other_domain), Standing::Tracked, "only the scope's domain counts");
        let not_a_string = r#"{"labels":{"reload":"on"},"annotations":{"other":{"x":1}}}"#;
        assert_eq!(standing(not_a_string), Standing::Tracked, "unread values are skipped");
    }

    #[test]
    fn errors_never_quote_a_value() {
        for json in [
            r#"{"data":{"token":"s3cr3t!!"}}"#,
            r#"{"data":{"token":["s3cr3t"]}}"#,
            r#"{"data":"s3cr3t"}"#,
            r#"{"data":{"token":"s3cr3t"}} trailing"#,
        ] {
            let error = decode(ObjectKind::Secret, json, &ObjectScope::default())
                .expect_err(json)
                .to_string();
            assert!(!error.contains("s3cr3t"), "{error}");
        }
    }
}
