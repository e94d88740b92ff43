//! What made a workload due: a tracked object changed, or a tracked image's
//! tag moved. Named in the workload's Event, never with any content.

use std::fmt;

pub use crate::core::diagnosis::halts::id_of;
use crate::core::{ObjectKey, ObjectRef};

use super::workload::WorkloadKey;
use crate::core::model::annotations::PROVIDER_CLASS_WORD;
use crate::core::model::warnings::shorten_middle;

/// An image reference is named whole up to this many characters (the
/// grammar allows 255 for the name and 128 for the tag), then shortened in
/// the middle, so that one trigger leaves room in its Event for others.
const MAX_REFERENCE_CHARS: usize = 200;
/// A `sha256:` digest has 71 characters; an existing annotation value is
/// whatever the workload's author wrote, so it is bounded too.
const MAX_DIGEST_CHARS: usize = 80;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Trigger {
    Object(ObjectRef),
    /// A tracked workload's pod template changed (`deployment/db`), or it was deleted.
    Workload(String),
    /// A tracked SecretProviderClass rotated: the driver reports a new version of one of its
    /// objects (`secretproviderclass/vault`).
    ProviderClass(String),
    /// The flap guard held this source (`secret/db`) and it has been quiet for a period:
    /// one roll to the state of the moment.
    Quiet(String),
    /// The digest behind `container`'s tag (or behind the image whose digest its `variable`
    /// holds) is now `new`; the template records `old`. `image` is the reference as the
    /// workload writes it.
    Image {
        container: String,
        variable: Option<String>,
        image: String,
        old: String,
        new: String,
    },
}

impl Trigger {
    /// What caused it, without the digests: the flap guard counts rolls per source.
    pub fn source(&self) -> String {
        match self {
            Trigger::Object(object) => object.to_string(),
            Trigger::Image { image, .. } => {
                format!("image {}", shorten_middle(image, MAX_REFERENCE_CHARS))
            }
            Trigger::Workload(source) | Trigger::ProviderClass(source) | Trigger::Quiet(source) => {
                source.clone()
            }
        }
    }
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Trigger::Object(object) => write!(f, "{object}"),
            Trigger::Workload(workload) => f.write_str(workload),
            Trigger::ProviderClass(class) => write!(f, "{class} (rotated)"),
            Trigger::Quiet(source) => write!(f, "{source} (quiet again after the flap guard)"),
            // Named as warnings name a container (docs/behaviour.md, "Warnings").
            Trigger::Image { container, variable, image, old, new } => {
                let image = shorten_middle(image, MAX_REFERENCE_CHARS);
                let (old, new) =
                    (shorten_middle(old, MAX_DIGEST_CHARS), shorten_middle(new, MAX_DIGEST_CHARS));
                write!(f, "container {container}")?;
                if let Some(variable) = variable {
                    write!(f, " env {variable}")?;
                }
                write!(f, " ({image}) from {old} to {new}")
            }
        }
    }
}

/// Where a change comes from: what a fan-out gathers the workloads of. An image tag's change
/// spans namespaces, so its source is the reference alone.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    Object(ObjectKey),
    Image(String),
    Workload(WorkloadKey),
    /// A SecretProviderClass of a namespace, whose objects the CSI driver reports.
    ProviderClass {
        namespace: String,
        name: String,
    },
}

impl Source {
    /// How a workload's `<domain>/waves` names it: as its Events do, without the namespace
    /// (a ConfigMap, Secret or workload is the workload's own namespace's).
    pub fn record_name(&self) -> String {
        match self {
            Source::Object(key) => key.object.to_string(),
            Source::Image(reference) => format!("image {reference}"),
            Source::Workload(key) => format!("{}/{}", key.kind.word(), key.name),
            Source::ProviderClass { name, .. } => format!("{PROVIDER_CLASS_WORD}/{name}"),
        }
    }

    /// Whether `workload` may be among those this source's change rolls.
    pub fn concerns(&self, workload: &WorkloadKey) -> bool {
        match self {
            Source::Object(key) => *key.namespace == *workload.namespace,
            Source::Workload(key) => key.namespace == workload.namespace,
            Source::ProviderClass { namespace, .. } => **namespace == *workload.namespace,
            Source::Image(_) => true,
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Object(key) => write!(f, "{} in {}", key.object, key.namespace),
            Source::Image(reference) => {
                write!(f, "image {}", shorten_middle(reference, MAX_REFERENCE_CHARS))
            }
            Source::Workload(key) => {
                write!(f, "{}/{} in {}", key.kind.word(), key.name, key.namespace)
            }
            Source::ProviderClass { namespace, name } => {
                write!(f, "{PROVIDER_CLASS_WORD}/{name} in {namespace}")
            }
        }
    }
}

/// One new content of one source (docs/behaviour.md, "Rolling safely"): the workloads it
/// makes due roll in waves. `id` is the first 12 hex digits of the new content's digest —
/// keyed for a Secret under `--digest-key-file`, so that it tells nothing of the data.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceChange {
    pub source: Source,
    pub id: String,
}

impl SourceChange {
    /// The change of `source` to the content `digest` names (`sha256:<hex>`,
    /// `hmac-sha256:<hex>`, or bare hex).
    pub fn new(source: Source, digest: &str) -> SourceChange {
        SourceChange { source, id: id_of(digest) }
    }
}

/// What a roll records on its workload (`<domain>/waves`): it rolls in `wave` of `change`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaveMark {
    pub change: SourceChange,
    pub wave: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_named_by_the_first_twelve_hex_digits_of_its_digest() {
        let source = Source::Image("ghcr.io/acme/web:1".into());
        let change = |digest| SourceChange::new(source.clone(), digest).id;
        assert_eq!(change("sha256:0123456789abcdef0123"), "0123456789ab");
        assert_eq!(change("hmac-sha256:fedcba9876543210"), "fedcba987654");
        assert_eq!(change("abc"), "abc");
        assert_eq!(change("sha256:<script>"), "c", "only hex digits, whatever was written");
    }

    #[test]
    fn a_rotation_is_named_by_its_class() {
        let trigger = Trigger::ProviderClass("secretproviderclass/vault".into());
        assert_eq!(trigger.to_string(), "secretproviderclass/vault (rotated)");
        assert_eq!(trigger.source(), "secretproviderclass/vault", "what the flap guard counts");
        let source = Source::ProviderClass { namespace: "shop".into(), name: "vault".into() };
        assert_eq!(source.record_name(), "secretproviderclass/vault");
        assert_eq!(source.to_string(), "secretproviderclass/vault in shop");
    }
}
