//! What made a workload due: a tracked object changed, or a tracked image's
//! tag moved. Named in the workload's Event, never with any content.

use std::fmt;

use crate::core::ObjectRef;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Trigger {
    Object(ObjectRef),
    /// The digest behind `container`'s tag is now `new`; the template records `old`.
    Image {
        container: String,
        old: String,
        new: String,
    },
}

impl From<ObjectRef> for Trigger {
    fn from(object: ObjectRef) -> Self {
        Trigger::Object(object)
    }
}

impl PartialEq<ObjectRef> for Trigger {
    fn eq(&self, other: &ObjectRef) -> bool {
        matches!(self, Trigger::Object(object) if object == other)
    }
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Trigger::Object(object) => write!(f, "{object}"),
            Trigger::Image { container, old, new } => {
                write!(f, "image/{container} from {old} to {new}")
            }
        }
    }
}
