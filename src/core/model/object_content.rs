//! The data of a ConfigMap or Secret once read: what the tracked kinds' table (`inputs`) builds
//! from an object's data fields and the digest folds. A leaf, so that the table and the digest
//! share it without importing each other.

use std::collections::BTreeMap;
use std::fmt;

use super::object_scope::{Standing, consents};

/// The data of a ConfigMap or Secret as digest entries: key to bytes, built
/// by `ObjectInput::content` from the fields its kind declares.
#[derive(Default)]
pub struct ObjectContent {
    entries: BTreeMap<String, Vec<u8>>,
    /// Whether the object counts at all (its owner's `ignore`, `--object-selector`).
    standing: Standing,
    /// Its owner's `<domain>/readable-from`: which other namespaces may track it.
    readable_from: Option<Box<str>>,
}

impl ObjectContent {
    pub fn from_entries(entries: BTreeMap<String, Vec<u8>>) -> Self {
        ObjectContent { entries, standing: Standing::Tracked, readable_from: None }
    }

    /// The same content, with its owner's `<domain>/readable-from` as its reader found it.
    pub fn with_readable_from(self, readable_from: Option<&str>) -> Self {
        ObjectContent { readable_from: readable_from.map(Box::from), ..self }
    }

    /// Whether its owner lets workloads of `namespace`, another namespace, track it.
    pub fn readable_from(&self, namespace: &str) -> bool {
        consents(self.readable_from.as_deref(), namespace)
    }

    /// The same content, standing as its reader judged it.
    pub fn with_standing(self, standing: Standing) -> Self {
        ObjectContent { standing, ..self }
    }

    pub fn standing(&self) -> Standing {
        self.standing
    }

    /// Every entry, in key order: the order the digest folds them in.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_slice()))
    }

    /// The bytes of one entry.
    pub fn get(&self, key: &str) -> Option<&[u8]> {
        self.entries.get(key).map(Vec::as_slice)
    }
}

impl fmt::Debug for ObjectContent {
    // Contents may be Secret data: show the keys only.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectContent")
            .field("keys", &self.entries.keys())
            .field("standing", &self.standing)
            .field("readable_from", &self.readable_from)
            .finish()
    }
}
