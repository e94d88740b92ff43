//! Every kind of object configsum tracks, declared once, in [`DECLARED`]: a
//! ConfigMap ([`config_map`]) and a Secret ([`secret`]).
//!
//! A row says everything that differs between them: the words used in
//! `track`/`ignore` and annotation keys, the API resource the webhook reads
//! and the controller watches (hence their RBAC), which fields hold the data
//! and how they are encoded, whether the digest is keyed, and the places in a
//! pod spec that reference the object. The reference walk (`core::refs`), the
//! annotation names, the digest, both lookup sources and the controller's
//! watches read this table and never name a kind themselves.
//!
//! A new kind of object is a new [`ObjectKind`] variant, a module here with
//! its row, and the row in [`DECLARED`]; docs/extending.md walks through it.
//!
//! The third tracked input, the image behind a floating tag ([`image`]), is
//! keyed by container rather than by object and resolved from a registry; it
//! has a module of its own shape. The fourth, another workload's pod template
//! ([`workload_template`], workloads that roll together), is being built: its
//! digest is here.

mod config_map;
pub mod image;
mod secret;
pub mod workload_template;

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::{GeneralPurpose, GeneralPurposeConfig};

use super::digest::ObjectContent;
use super::object_ref::ObjectKind;
use super::pod_spec::{EnvFromSource, EnvVarSource, ItemKeys, KeySelector, NamedSource};
use super::pod_spec::{Volume, VolumeProjection};

/// What configsum needs to know about one kind of tracked object.
#[derive(Debug)]
pub struct ObjectInput {
    pub kind: ObjectKind,
    /// The Kubernetes kind, bound into the digest input.
    pub api_kind: &'static str,
    /// The lower-case word of `track`/`ignore` refs (`secret/db`) and of the
    /// annotation prefix (`secret.<domain>/db`).
    pub word: &'static str,
    /// API group (empty for the core group), version and resource (plural).
    pub group: &'static str,
    pub version: &'static str,
    pub resource: &'static str,
    /// The fields holding the object's data, in the order they are folded
    /// in: a key in a later field replaces the same key of an earlier one.
    pub data: &'static [DataField],
    pub digest: DigestMode,
    pub sites: ReferenceSites,
}

/// One field of an object's data: a map of key to encoded value.
#[derive(Debug)]
pub struct DataField {
    pub field: &'static str,
    pub encoding: Encoding,
}

/// How a data field encodes its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// UTF-8 text, taken as its bytes.
    Text,
    /// Base64, as the API server encodes `[]byte` fields.
    Base64,
}

/// Which digest an object's annotation carries (docs/behaviour.md, "Digest").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DigestMode {
    /// `sha256:` always.
    Plain,
    /// `hmac-sha256:` under `--digest-key-file` when one is given, else `sha256:`.
    Keyed,
}

/// The places in a pod spec that can reference an object of this kind. Each
/// returns the reference a list element makes, if it makes one.
#[derive(Debug)]
pub struct ReferenceSites {
    /// `env[].valueFrom`: one key.
    pub env: fn(&EnvVarSource) -> Option<Site<'_>>,
    /// `envFrom[]`: every key.
    pub env_from: fn(&EnvFromSource) -> Option<Site<'_>>,
    /// `volumes[]`: every key, or its `items`.
    pub volume: fn(&Volume) -> Option<Site<'_>>,
    /// `volumes[].projected.sources[]`: every key, or its `items`.
    pub projection: fn(&VolumeProjection) -> Option<Site<'_>>,
}

/// One reference, as written in the pod spec.
#[derive(Debug, PartialEq, Eq)]
pub struct Site<'a> {
    /// `None` when the spec leaves the name out; the selection refuses it.
    pub name: Option<&'a str>,
    pub keys: SiteKeys<'a>,
    pub optional: Option<bool>,
}

/// Which keys a reference reads.
#[derive(Debug, PartialEq, Eq)]
pub enum SiteKeys<'a> {
    /// Every key (`envFrom`).
    All,
    /// One key (`env[].valueFrom`); `None` is the empty key.
    One(Option<&'a str>),
    /// A volume's `items`; none, or none listed, is every key.
    Items(Option<&'a ItemKeys>),
}

impl<'a> Site<'a> {
    /// `configMapKeyRef` / `secretKeyRef`.
    pub fn key(selector: &'a KeySelector) -> Self {
        Site {
            name: selector.name.as_deref(),
            keys: SiteKeys::One(selector.key.as_deref()),
            optional: selector.optional,
        }
    }

    /// `envFrom[].configMapRef` / `.secretRef`.
    pub fn every_key(source: &'a NamedSource) -> Self {
        Site { name: source.name.as_deref(), keys: SiteKeys::All, optional: source.optional }
    }

    /// A volume or projected source with optional `items`.
    pub fn items(source: &'a NamedSource) -> Self {
        Site {
            name: source.name.as_deref(),
            keys: SiteKeys::Items(source.items.as_ref()),
            optional: source.optional,
        }
    }
}

/// Every kind of tracked object, in [`ObjectKind`] order.
pub const DECLARED: [ObjectInput; 2] = [config_map::CONFIG_MAP, secret::SECRET];

// The table is indexed by the variant: a row out of place fails the build.
const _: () = {
    let mut i = 0;
    while i < DECLARED.len() {
        assert!(DECLARED[i].kind as usize == i, "DECLARED is not in ObjectKind order");
        i += 1;
    }
};

impl ObjectKind {
    /// This kind's row of [`DECLARED`].
    pub fn input(self) -> &'static ObjectInput {
        &DECLARED[self as usize]
    }

    /// Every declared kind, in order.
    pub fn all() -> impl Iterator<Item = ObjectKind> {
        DECLARED.iter().map(|input| input.kind)
    }

    /// The kind whose Kubernetes kind is `api_kind` (`"Secret"`).
    pub fn from_api_kind(api_kind: &str) -> Option<ObjectKind> {
        DECLARED.iter().find(|input| input.api_kind == api_kind).map(|input| input.kind)
    }

    /// The kind whose word is `word` (`"secret"`).
    pub fn from_word(word: &str) -> Option<ObjectKind> {
        DECLARED.iter().find(|input| input.word == word).map(|input| input.kind)
    }
}

/// A data value that is not what its field's encoding says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}.{key} is not valid base64")]
pub struct InvalidData {
    pub field: &'static str,
    /// The key, never the value: the value may be Secret data.
    pub key: String,
}

impl ObjectInput {
    /// The object's content from its data fields; `field` gives a field's
    /// map of key to encoded value, if the object has it.
    pub fn content(
        &self,
        mut field: impl FnMut(&str) -> Option<BTreeMap<String, String>>,
    ) -> Result<ObjectContent, InvalidData> {
        let mut entries = BTreeMap::new();
        for data in self.data {
            for (key, value) in field(data.field).into_iter().flatten() {
                let bytes = match data.encoding.decode(value) {
                    Some(bytes) => bytes,
                    None => return Err(InvalidData { field: data.field, key }),
                };
                entries.insert(key, bytes);
            }
        }
        Ok(ObjectContent::from_entries(entries))
    }
}

/// Go's `base64.StdEncoding`, which the API server decodes `[]byte` fields with:
/// padded, and lenient about the unused bits of the last character.
const GO_BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
);

impl Encoding {
    /// The bytes `value` stands for; `None` if it is not valid in this encoding.
    pub fn decode(self, value: String) -> Option<Vec<u8>> {
        match self {
            Encoding::Text => Some(value.into_bytes()),
            Encoding::Base64 => GO_BASE64.decode(value).ok(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ObjectRef;
    use crate::core::digest::{Digester, ObjectId};
    use crate::core::refs::ConsumedKeys;

    fn digest_of(object: ObjectRef, content: &ObjectContent) -> String {
        let id = ObjectId { namespace: "ns", object: &object };
        Digester::default().digest(id, content, &ConsumedKeys::All, None)
    }

    fn map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn words_and_api_kinds_name_their_rows() {
        for kind in ObjectKind::all() {
            let input = kind.input();
            assert_eq!(ObjectKind::from_word(input.word), Some(kind));
            assert_eq!(ObjectKind::from_api_kind(input.api_kind), Some(kind));
            assert_eq!(input.word, input.api_kind.to_lowercase());
            assert_eq!(input.resource, format!("{}s", input.word));
        }
        assert_eq!(ObjectKind::from_word("ConfigMap"), None);
        assert_eq!(ObjectKind::from_api_kind("configmap"), None);
    }

    #[test]
    fn a_config_map_folds_binary_data_over_data() {
        let fields = BTreeMap::from([
            ("data", map(&[("a", "text"), ("b", "old")])),
            ("binaryData", map(&[("b", "bmV3"), ("c", "AAE=")])),
            ("stringData", map(&[("a", "ignored")])),
        ]);
        let content =
            ObjectKind::ConfigMap.input().content(|f| fields.get(f).cloned()).expect("valid");
        let expected = ObjectContent::from_entries(BTreeMap::from([
            ("a".to_owned(), b"text".to_vec()),
            ("b".to_owned(), b"new".to_vec()),
            ("c".to_owned(), vec![0, 1]),
        ]));
        let object = ObjectRef::config_map("c");
        assert_eq!(digest_of(object.clone(), &content), digest_of(object, &expected));
    }

    #[test]
    fn a_secret_decodes_data_and_folds_string_data_over_it() {
        let fields = BTreeMap::from([
            ("data", map(&[("user", "YWRtaW4="), ("pass", "b2xk")])),
            ("stringData", map(&[("pass", "new")])),
            ("binaryData", map(&[("x", "ignored")])),
        ]);
        let content =
            ObjectKind::Secret.input().content(|f| fields.get(f).cloned()).expect("valid");
        let expected = ObjectContent::from_entries(BTreeMap::from([
            ("user".to_owned(), b"admin".to_vec()),
            ("pass".to_owned(), b"new".to_vec()),
        ]));
        let object = ObjectRef::secret("s");
        assert_eq!(digest_of(object.clone(), &content), digest_of(object, &expected));
    }

    #[test]
    fn invalid_base64_names_the_key_and_never_the_value() {
        let fields = BTreeMap::from([("data", map(&[("token", "s3cr3t-not-base64!")]))]);
        let error = ObjectKind::Secret.input().content(|f| fields.get(f).cloned()).unwrap_err();
        assert_eq!(error, InvalidData { field: "data", key: "token".to_owned() });
        assert!(!error.to_string().contains("s3cr3t"), "{error}");
    }
}
