//! The parts of a workload object configsum reads, as light serde views, and the field names
//! of a pod spec that its one reader (`core::pod_spec_reader`) matches by hand ([`field`]).
//!
//! Field names follow the Kubernetes API. Every other field is skipped
//! without being decoded, which makes reading a 20 KB Deployment several
//! times cheaper than decoding the full k8s-openapi type (env values, images,
//! probes and status are never allocated). The API server has decoded and
//! defaulted the object as its kind before calling the webhook; here only the
//! fields we read must have the right types.
//!
//! Memory follows what a pod spec references, not its size: the reader reads one list element
//! at a time into the objects it references (`core::refs::PodSpec`), its strings borrowed from
//! the text, and `items` keys are kept once each. Which elements reference something is the
//! tracked kinds' table's to say (`core::inputs`): the reader implements [`References`] from it,
//! so that the table can name these types without importing the reader.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

use super::annotations::MAX_ANNOTATIONS_BYTES;

/// The pod spec's field names the reader matches by hand (the types below name theirs through
/// serde). A new field read from a pod spec, a container or an `env` entry gets its name here.
pub mod field {
    pub const CONTAINERS: &str = "containers";
    pub const INIT_CONTAINERS: &str = "initContainers";
    pub const VOLUMES: &str = "volumes";
    pub const IMAGE_PULL_SECRETS: &str = "imagePullSecrets";
    pub const SERVICE_ACCOUNT_NAME: &str = "serviceAccountName";
    /// Of a container, and of an `env` entry.
    pub const NAME: &str = "name";
    pub const IMAGE: &str = "image";
    pub const IMAGE_PULL_POLICY: &str = "imagePullPolicy";
    pub const ENV: &str = "env";
    pub const ENV_FROM: &str = "envFrom";
    pub const VALUE: &str = "value";
    pub const VALUE_FROM: &str = "valueFrom";
}

/// `metadata` of the workload or of its pod template.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    /// Read leniently: anything but an integer is absent (the controller's rollout health).
    #[serde(default, deserialize_with = "lenient_integer")]
    pub generation: Option<i64>,
    #[serde(default, deserialize_with = "bounded_annotations")]
    pub annotations: Option<BTreeMap<String, String>>,
    pub owner_references: Option<Vec<OwnerReference>>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct OwnerReference {
    pub controller: Option<bool>,
}

/// A string of the pod spec, borrowed from the text when it holds no escape: the reader
/// copies only what it keeps (the name of an object the first time it is referenced).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct Borrowed<'a>(#[serde(borrow)] pub Cow<'a, str>);

impl Borrowed<'_> {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// `env[].valueFrom`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvVarSource<'a> {
    #[serde(borrow)]
    pub config_map_key_ref: Option<KeySelector<'a>>,
    #[serde(borrow)]
    pub secret_key_ref: Option<KeySelector<'a>>,
}

/// `configMapKeyRef` / `secretKeyRef`.
#[derive(Clone, Debug, Deserialize)]
pub struct KeySelector<'a> {
    #[serde(borrow)]
    pub name: Option<Borrowed<'a>>,
    #[serde(borrow)]
    pub key: Option<Borrowed<'a>>,
    pub optional: Option<bool>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvFromSource<'a> {
    #[serde(borrow)]
    pub config_map_ref: Option<NamedSource<'a>>,
    #[serde(borrow)]
    pub secret_ref: Option<NamedSource<'a>>,
}

/// `envFrom[].configMapRef` / `.secretRef`, and the projected sources.
#[derive(Clone, Debug, Deserialize)]
pub struct NamedSource<'a> {
    #[serde(borrow)]
    pub name: Option<Borrowed<'a>>,
    #[serde(default, deserialize_with = "item_keys")]
    pub items: Option<ItemKeys>,
    pub optional: Option<bool>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Volume<'a> {
    #[serde(borrow)]
    pub config_map: Option<NamedSource<'a>>,
    #[serde(borrow)]
    pub secret: Option<SecretVolumeSource<'a>>,
    #[serde(borrow)]
    pub projected: Option<ProjectedVolumeSource<'a>>,
    #[serde(borrow)]
    pub csi: Option<CsiVolumeSource<'a>>,
}

/// A CSI volume: its driver, and of its attributes only the Secrets Store CSI driver's
/// `secretProviderClass` (every other attribute is skipped unread).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CsiVolumeSource<'a> {
    #[serde(borrow)]
    pub driver: Option<Borrowed<'a>>,
    #[serde(borrow)]
    pub volume_attributes: Option<CsiVolumeAttributes<'a>>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CsiVolumeAttributes<'a> {
    #[serde(borrow)]
    pub secret_provider_class: Option<Borrowed<'a>>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretVolumeSource<'a> {
    #[serde(borrow)]
    pub secret_name: Option<Borrowed<'a>>,
    #[serde(default, deserialize_with = "item_keys")]
    pub items: Option<ItemKeys>,
    pub optional: Option<bool>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(bound(deserialize = "'de: 'a"))]
pub struct ProjectedVolumeSource<'a> {
    #[serde(default, deserialize_with = "sparse")]
    pub sources: Option<Vec<VolumeProjection<'a>>>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeProjection<'a> {
    #[serde(borrow)]
    pub config_map: Option<NamedSource<'a>>,
    #[serde(borrow)]
    pub secret: Option<NamedSource<'a>>,
}

/// An integer, or absent for any other JSON value.
fn lenient_integer<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    Ok(Option::<serde_json::Value>::deserialize(deserializer)?.and_then(|v| v.as_i64()))
}

/// Annotations, refused once their keys and values total more than the
/// 256 KiB Kubernetes allows: the API server would reject the object anyway,
/// and a map of a million tiny annotations costs many times its bytes.
pub fn bounded_annotations<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    Ok(Option::<BoundedAnnotations>::deserialize(deserializer)?.map(|a| a.0))
}

struct BoundedAnnotations(BTreeMap<String, String>);

impl<'de> Deserialize<'de> for BoundedAnnotations {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Bounded;
        impl<'de> Visitor<'de> for Bounded {
            type Value = BoundedAnnotations;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of strings")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut annotations = BTreeMap::new();
                let mut total = 0usize;
                while let Some((key, value)) = map.next_entry::<String, String>()? {
                    total += key.len() + value.len();
                    if total > MAX_ANNOTATIONS_BYTES {
                        return Err(de::Error::custom(format_args!(
                            "annotations total more than the {MAX_ANNOTATIONS_BYTES} bytes Kubernetes allows"
                        )));
                    }
                    annotations.insert(key, value);
                }
                Ok(BoundedAnnotations(annotations))
            }
        }
        deserializer.deserialize_map(Bounded)
    }
}

/// The keys named by a volume's `items`, once each; an item without a key
/// names the empty key, as an item of the Kubernetes API would.
pub type ItemKeys = BTreeSet<String>;

#[derive(Deserialize)]
struct KeyToPath {
    key: Option<String>,
}

pub(crate) fn item_keys<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<ItemKeys>, D::Error> {
    Ok(Option::<DistinctItemKeys>::deserialize(deserializer)?.map(|k| k.0))
}

struct DistinctItemKeys(ItemKeys);

impl<'de> Deserialize<'de> for DistinctItemKeys {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> Visitor<'de> for Keys {
            type Value = DistinctItemKeys;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of items")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut keys = ItemKeys::new();
                while let Some(item) = seq.next_element::<KeyToPath>()? {
                    keys.insert(item.key.unwrap_or_default());
                }
                Ok(DistinctItemKeys(keys))
            }
        }
        deserializer.deserialize_seq(Keys)
    }
}

/// A list element that can make a pod consume a ConfigMap or Secret. Implemented by the reader
/// (`core::pod_spec_reader`), from the sites of the tracked kinds' table.
pub(crate) trait References {
    fn references_anything(&self) -> bool;
}

/// A list keeping only the elements that reference something, read one at a
/// time: what the rest would have cost in memory is never allocated.
pub(crate) fn sparse<'de, D, T>(deserializer: D) -> Result<Option<Vec<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + References,
{
    Ok(Option::<SparseList<T>>::deserialize(deserializer)?.map(|l| l.0))
}

pub(crate) struct SparseList<T>(pub(crate) Vec<T>);

impl<'de, T: Deserialize<'de> + References> Deserialize<'de> for SparseList<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Sparse<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de> + References> Visitor<'de> for Sparse<T> {
            type Value = SparseList<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut kept = Vec::new();
                while let Some(element) = seq.next_element::<T>()? {
                    if element.references_anything() {
                        kept.push(element);
                    }
                }
                Ok(SparseList(kept))
            }
        }
        deserializer.deserialize_seq(Sparse(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotations_over_the_kubernetes_limit_do_not_parse() {
        let at_limit = format!(r#"{{"annotations": {{"a": "{}"}}}}"#, "x".repeat(256 * 1024 - 1));
        let metadata: Metadata = serde_json::from_str(&at_limit).expect("at the limit");
        assert_eq!(metadata.annotations.map(|a| a.len()), Some(1));
        let many: Vec<String> = (0..30_000).map(|i| format!(r#""k{i:05}": "vvvvv""#)).collect();
        let over = format!(r#"{{"annotations": {{{}}}}}"#, many.join(","));
        let error = serde_json::from_str::<Metadata>(&over).expect_err("over the limit");
        assert!(error.to_string().contains("Kubernetes allows"), "{error}");
        let null: Metadata = serde_json::from_str(r#"{"annotations": null}"#).expect("null");
        assert!(null.annotations.is_none());
    }

    #[test]
    fn item_keys_are_kept_once_and_a_missing_key_is_the_empty_one() {
        let volume: Volume = serde_json::from_str(
            r#"{"configMap": {"name": "c", "items": [{"key": "a"}, {"key": "a", "path": "x"}, {}]}}"#,
        )
        .expect("volume");
        let items = volume.config_map.and_then(|c| c.items).expect("items");
        assert_eq!(items, BTreeSet::from(["".to_owned(), "a".to_owned()]));
        let empty: NamedSource = serde_json::from_str(r#"{"name": "c", "items": []}"#).expect("ok");
        assert_eq!(empty.items, Some(BTreeSet::new()), "present and empty stays so");
        let null: NamedSource =
            serde_json::from_str(r#"{"name": "c", "items": null}"#).expect("ok");
        assert_eq!(null.items, None);
        assert!(serde_json::from_str::<NamedSource>(r#"{"items": "a"}"#).is_err());
    }
}
