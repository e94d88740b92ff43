//! A `SecretProviderClassPodStatus` as configsum reads it: the Secrets Store CSI driver writes
//! one per pod and mount (group `secrets-store.csi.x-k8s.io`, version `v1`, namespaced), and
//! its `status` names the class mounted and the version of each object it fetched. Only those
//! fields are decoded; `podName`, `mounted` and `targetPath` are skipped unread.
//!
//! Anyone allowed to write these objects can write anything in them, so the view is bounded:
//! at most [`MAX_OBJECTS`] objects per status are kept (the rest skipped unbuilt), and an id
//! or version longer than [`MAX_TEXT`] bytes, or holding a control character, is kept as
//! `sha256:<hex>` of its bytes (a change still changes it; a newline never splits a line of
//! the digest's input).

use std::fmt;

use serde::Deserialize;
use serde::de::{IgnoredAny, SeqAccess, Visitor};
use sha2::{Digest as _, Sha256};

use super::hex::hex;

pub const GROUP: &str = "secrets-store.csi.x-k8s.io";
pub const VERSION: &str = "v1";
pub const KIND: &str = "SecretProviderClassPodStatus";
pub const RESOURCE: &str = "secretproviderclasspodstatuses";
/// The kind of the class a status names (how notices name a rotated class).
pub const CLASS_KIND: &str = "SecretProviderClass";

/// Objects kept of one status; the driver reports one per object its class names.
pub const MAX_OBJECTS: usize = 256;
/// Longest id or version kept as written.
pub const MAX_TEXT: usize = 253;

/// One status, as far as the digest needs it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(from = "Wire")]
pub struct ProviderClassStatus {
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// `metadata.resourceVersion`, as an integer (0 when it is not one): of two statuses
    /// reporting the same object id, the greater one's version is the latest.
    pub resource_version: u64,
    /// The raw `metadata.resourceVersion`, for the watcher.
    pub resource_version_text: Option<String>,
    /// `status.secretProviderClassName`.
    pub class: Option<String>,
    /// `status.objects`: `(id, version)`, bounded as the module says.
    pub objects: Vec<(String, String)>,
}

#[derive(Deserialize)]
struct Wire {
    #[serde(default)]
    metadata: WireMeta,
    #[serde(default)]
    status: Option<WireStatus>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    name: Option<String>,
    namespace: Option<String>,
    resource_version: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireStatus {
    secret_provider_class_name: Option<String>,
    #[serde(default)]
    objects: Option<BoundedObjects>,
}

#[derive(Deserialize)]
struct WireObject {
    id: Option<String>,
    version: Option<String>,
}

struct BoundedObjects(Vec<(String, String)>);

impl<'de> Deserialize<'de> for BoundedObjects {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Objects;
        impl<'de> Visitor<'de> for Objects {
            type Value = BoundedObjects;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of objects")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut kept = Vec::new();
                while kept.len() < MAX_OBJECTS {
                    let Some(object) = seq.next_element::<WireObject>()? else {
                        return Ok(BoundedObjects(kept));
                    };
                    let id = bounded_text(object.id.unwrap_or_default());
                    kept.push((id, bounded_text(object.version.unwrap_or_default())));
                }
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(BoundedObjects(kept))
            }
        }
        deserializer.deserialize_seq(Objects)
    }
}

impl From<Wire> for ProviderClassStatus {
    fn from(wire: Wire) -> Self {
        let WireMeta { name, namespace, resource_version } = wire.metadata;
        let (class, objects) = match wire.status {
            Some(status) => {
                (status.secret_provider_class_name, status.objects.map(|o| o.0).unwrap_or_default())
            }
            None => (None, Vec::new()),
        };
        ProviderClassStatus {
            namespace,
            name,
            resource_version: resource_version.as_deref().and_then(|v| v.parse().ok()).unwrap_or(0),
            resource_version_text: resource_version,
            class,
            objects,
        }
    }
}

/// One page of a namespace's statuses, and the token of the next page, if any.
#[derive(Debug, Default, Deserialize)]
pub struct StatusPage {
    #[serde(default)]
    pub items: Vec<ProviderClassStatus>,
    #[serde(default)]
    metadata: ListMeta,
}

#[derive(Debug, Default, Deserialize)]
struct ListMeta {
    #[serde(rename = "continue")]
    next: Option<String>,
}

impl StatusPage {
    /// The `continue` token of the next page, if there is one.
    pub fn next(&self) -> Option<&str> {
        self.metadata.next.as_deref().filter(|t| !t.is_empty())
    }

    pub fn new(items: Vec<ProviderClassStatus>, next: Option<String>) -> Self {
        StatusPage { items, metadata: ListMeta { next } }
    }
}

/// `text` as is, or `sha256:<hex>` of it when it is too long or holds a control character.
pub fn bounded_text(text: String) -> String {
    if text.len() <= MAX_TEXT && !text.chars().any(char::is_control) {
        return text;
    }
    format!("sha256:{}", hex(&Sha256::digest(text.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_status_keeps_its_identity_class_and_objects() {
        let status: ProviderClassStatus = serde_json::from_value(json!({
            "apiVersion": "secrets-store.csi.x-k8s.io/v1", "kind": KIND,
            "metadata": {"name": "web-1-shop-vault", "namespace": "shop", "resourceVersion": "42",
                "labels": {"internal.secrets-store.csi.k8s.io/node-name": "n1"}},
            "status": {"podName": "web-1", "secretProviderClassName": "vault", "mounted": true,
                "targetPath": "/var/lib/kubelet/x",
                "objects": [{"id": "secret/db", "version": "3"}, {"id": "secret/api"}]}
        }))
        .expect("decodes");
        assert_eq!(status.namespace.as_deref(), Some("shop"));
        assert_eq!(status.name.as_deref(), Some("web-1-shop-vault"));
        assert_eq!(status.resource_version, 42);
        assert_eq!(status.class.as_deref(), Some("vault"));
        assert_eq!(
            status.objects,
            [("secret/db".to_owned(), "3".to_owned()), ("secret/api".to_owned(), String::new())]
        );
        let bare: ProviderClassStatus = serde_json::from_value(json!({})).expect("decodes");
        assert_eq!(bare, ProviderClassStatus::default());
        let odd: ProviderClassStatus =
            serde_json::from_value(json!({"metadata": {"resourceVersion": "x"}, "status": {}}))
                .expect("decodes");
        assert_eq!((odd.resource_version, odd.class), (0, None));
    }

    #[test]
    fn hostile_ids_and_versions_are_bounded() {
        let long = "v".repeat(10_000);
        let objects: Vec<_> =
            (0..1_000).map(|i| json!({"id": format!("o{i}\nx@y"), "version": long})).collect();
        let status: ProviderClassStatus =
            serde_json::from_value(json!({"status": {"objects": objects}})).expect("decodes");
        assert_eq!(status.objects.len(), MAX_OBJECTS, "the rest is skipped");
        let (id, version) = &status.objects[0];
        assert_eq!(id, &format!("sha256:{}", hex(&Sha256::digest(b"o0\nx@y"))));
        assert_eq!(version, &format!("sha256:{}", hex(&Sha256::digest(long.as_bytes()))));
        assert!(status.objects.iter().all(|(i, v)| i.len() <= 71 && v.len() <= 71));
        assert_eq!(bounded_text("a".repeat(MAX_TEXT)), "a".repeat(MAX_TEXT), "at the limit: kept");
    }
}
