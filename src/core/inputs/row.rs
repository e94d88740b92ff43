//! What a row of the tracked kinds' table says about one kind of object: its names, its
//! resource, its data fields and their encoding, its digest, and its reference sites in a pod
//! spec. Imports only leaves (the pod spec's view types, the object's content, the digest
//! mode), so that the rows (`config_map.rs`, `secret.rs`) and every reader of the table import
//! it without a circle through the table's own module.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::{GeneralPurpose, GeneralPurposeConfig};

use crate::core::model::digest_mode::DigestMode;
use crate::core::model::object_content::ObjectContent;
use crate::core::model::object_ref::ObjectKind;
use crate::core::model::pod_spec::{
    Borrowed, EnvFromSource, EnvVarSource, ItemKeys, KeySelector, NamedSource,
};
use crate::core::model::pod_spec::{Volume, VolumeProjection};

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

/// The places in a pod spec that can reference an object of this kind. Each
/// returns the reference a list element makes, if it makes one.
#[derive(Debug)]
pub struct ReferenceSites {
    /// `env[].valueFrom`: one key.
    pub env: for<'a> fn(&'a EnvVarSource<'a>) -> Option<Site<'a>>,
    /// `envFrom[]`: every key.
    pub env_from: for<'a> fn(&'a EnvFromSource<'a>) -> Option<Site<'a>>,
    /// `volumes[]`: every key, or its `items`.
    pub volume: for<'a> fn(&'a Volume<'a>) -> Option<Site<'a>>,
    /// `volumes[].projected.sources[]`: every key, or its `items`.
    pub projection: for<'a> fn(&'a VolumeProjection<'a>) -> Option<Site<'a>>,
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
    pub fn key(selector: &'a KeySelector<'a>) -> Self {
        Site {
            name: selector.name.as_ref().map(Borrowed::as_str),
            keys: SiteKeys::One(selector.key.as_ref().map(Borrowed::as_str)),
            optional: selector.optional,
        }
    }

    /// `envFrom[].configMapRef` / `.secretRef`.
    pub fn every_key(source: &'a NamedSource<'a>) -> Self {
        let name = source.name.as_ref().map(Borrowed::as_str);
        Site { name, keys: SiteKeys::All, optional: source.optional }
    }

    /// A volume or projected source with optional `items`.
    pub fn items(source: &'a NamedSource<'a>) -> Self {
        Site {
            name: source.name.as_ref().map(Borrowed::as_str),
            keys: SiteKeys::Items(source.items.as_ref()),
            optional: source.optional,
        }
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
