//! What made a workload due: a tracked object changed, or a tracked image's
//! tag moved. Named in the workload's Event, never with any content.

use std::fmt;

use crate::core::ObjectRef;
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
            Trigger::Workload(source) | Trigger::Quiet(source) => source.clone(),
        }
    }
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Trigger::Object(object) => write!(f, "{object}"),
            Trigger::Workload(workload) => f.write_str(workload),
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
