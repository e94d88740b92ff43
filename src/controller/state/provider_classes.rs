//! SecretProviderClasses (the Secrets Store CSI driver): which workloads mount which class,
//! and per class of a namespace only what its digest needs — the latest version of each
//! object id (`core::inputs::secret_provider_class::ClassVersions`) and how many statuses
//! report it. A status object itself is not kept, only which class it reports (for its
//! deletion and the relists).
//!
//! A class whose digest moves while known is a rotation: its trackers are worth a look
//! ([`ProviderClasses::take_moved`]). The first statuses of a class, more statuses with the
//! same versions (a roll's new pods) and deleted statuses (its old pods) move nothing; once
//! no status reports a class, it is forgotten, and its next statuses are a first observation
//! again.

use std::collections::{BTreeSet, HashMap, HashSet};

use super::relist::WatchIndex;
use crate::controller::model::workload::WorkloadKey;
use crate::core::inputs::secret_provider_class::ClassVersions;
use crate::core::model::provider_class_status::ProviderClassStatus;
use crate::core::{Mutation, Observation};

/// A class of a namespace.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClassKey {
    pub namespace: String,
    pub name: String,
}

/// A status object: its namespace and name.
pub type StatusKey = (String, String);

#[derive(Debug, Default)]
struct Known {
    versions: ClassVersions,
    /// Statuses reporting the class now.
    statuses: usize,
}

#[derive(Debug, Default)]
pub struct ProviderClasses {
    /// Each status seen, and the class it reports.
    statuses: HashMap<StatusKey, String>,
    classes: HashMap<ClassKey, Known>,
    /// Tracker → the classes it mounts; class → its trackers.
    tracks: HashMap<WorkloadKey, Vec<ClassKey>>,
    trackers: HashMap<ClassKey, BTreeSet<WorkloadKey>>,
    /// Classes whose digest moved since the router last looked.
    moved: Vec<ClassKey>,
}

impl ProviderClasses {
    /// Replaces the classes `tracker` mounts.
    pub fn upsert(&mut self, tracker: &WorkloadKey, classes: Vec<ClassKey>) {
        self.remove(tracker);
        if classes.is_empty() {
            return;
        }
        for class in &classes {
            self.trackers.entry(class.clone()).or_default().insert(tracker.clone());
        }
        self.tracks.insert(tracker.clone(), classes);
    }

    /// Forgets what `tracker` mounts.
    pub fn remove(&mut self, tracker: &WorkloadKey) {
        for class in self.tracks.remove(tracker).into_iter().flatten() {
            if let Some(trackers) = self.trackers.get_mut(&class) {
                trackers.remove(tracker);
                if trackers.is_empty() {
                    self.trackers.remove(&class);
                }
            }
        }
    }

    /// The classes whose digest moved since the last call.
    pub fn take_moved(&mut self) -> Vec<ClassKey> {
        std::mem::take(&mut self.moved)
    }

    /// The workloads mounting `class`.
    pub fn trackers_of(&self, class: &ClassKey) -> impl Iterator<Item = &WorkloadKey> {
        self.trackers.get(class).into_iter().flatten()
    }

    /// Every tracker, with the classes it mounts.
    pub fn all(&self) -> impl Iterator<Item = (&WorkloadKey, &[ClassKey])> {
        self.tracks.iter().map(|(tracker, classes)| (tracker, classes.as_slice()))
    }

    /// The digest of `class` now; `None` while no status reports it.
    pub fn digest(&self, class: &ClassKey) -> Option<String> {
        self.classes.get(class)?.versions.digest()
    }

    /// What `mutation` records of `class`, if any.
    pub fn recorded<'a>(mutation: &'a Mutation, class: &ClassKey) -> Option<&'a str> {
        let target = mutation.classes().iter().find(|c| c.name == class.name)?;
        mutation.existing_annotation(&target.key)
    }

    /// Whether `mutation` records a digest of `class` that differs from the one known now.
    /// One that records none, or a class not known, cannot be told: never stale.
    pub fn is_stale(&self, mutation: &Mutation, class: &ClassKey) -> bool {
        match (Self::recorded(mutation, class), self.digest(class)) {
            (Some(recorded), Some(current)) => recorded != current,
            _ => false,
        }
    }

    /// What a reconciliation observes for `mutation`'s classes: the digest known now, or
    /// `None` (keep the annotation) for a class no status reports.
    pub fn observations(&self, mutation: &Mutation) -> Vec<Option<Observation>> {
        mutation
            .classes()
            .iter()
            .map(|target| {
                let class =
                    ClassKey { namespace: mutation.namespace.clone(), name: target.name.clone() };
                self.digest(&class).map(Observation::Digest)
            })
            .collect()
    }

    /// Statuses known (for tests and the memory account).
    pub fn statuses(&self) -> usize {
        self.statuses.len()
    }

    /// Classes known.
    pub fn known_classes(&self) -> usize {
        self.classes.len()
    }

    /// One status less reports `class`; the class is forgotten with its last status.
    fn unreport(&mut self, class: ClassKey) {
        if let Some(known) = self.classes.get_mut(&class) {
            known.statuses = known.statuses.saturating_sub(1);
            if known.statuses == 0 {
                self.classes.remove(&class);
            }
        }
    }
}

/// The classes `mutation` mounts, in its namespace.
pub fn mounted_by(mutation: &Mutation) -> Vec<ClassKey> {
    let class = |name: &str| ClassKey { namespace: mutation.namespace.clone(), name: name.into() };
    mutation.classes().iter().map(|target| class(&target.name)).collect()
}

impl WatchIndex<ProviderClassStatus> for ProviderClasses {
    type Key = StatusKey;

    fn key(&self, status: &ProviderClassStatus) -> Option<StatusKey> {
        Some((status.namespace.clone()?, status.name.clone()?))
    }

    fn apply(&mut self, status: ProviderClassStatus) {
        let Some(key) = self.key(&status) else { return };
        let namespace = key.0.clone();
        let before = match status.class.clone() {
            Some(class) => self.statuses.insert(key, class),
            None => self.statuses.remove(&key),
        };
        if let Some(left) = before.clone().filter(|b| Some(b) != status.class.as_ref()) {
            self.unreport(ClassKey { namespace: namespace.clone(), name: left });
        }
        let Some(name) = status.class.clone() else { return };
        let class = ClassKey { namespace, name };
        let known = self.classes.entry(class.clone()).or_default();
        if before.as_ref() != Some(&class.name) {
            known.statuses += 1;
        }
        let was = known.versions.digest();
        known.versions.report(&status);
        // From nothing known to a first digest is a first observation, not a rotation.
        if was.is_some() && known.versions.digest() != was {
            self.moved.push(class);
        }
    }

    fn delete(&mut self, key: StatusKey) {
        let namespace = key.0.clone();
        if let Some(name) = self.statuses.remove(&key) {
            self.unreport(ClassKey { namespace, name });
        }
    }

    fn unlisted(&self, listed: &HashSet<StatusKey>) -> Vec<StatusKey> {
        self.statuses.keys().filter(|key| !listed.contains(*key)).cloned().collect()
    }

    fn namespace_of(key: &StatusKey) -> Option<&str> {
        Some(&key.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::inputs::secret_provider_class::digest;

    fn status(pod: &str, rv: u64, version: &str) -> ProviderClassStatus {
        ProviderClassStatus {
            namespace: Some("shop".into()),
            name: Some(format!("{pod}-shop-vault")),
            resource_version: rv,
            resource_version_text: Some(rv.to_string()),
            class: Some("vault".into()),
            objects: vec![("secret/db".into(), version.into())],
        }
    }

    fn vault() -> ClassKey {
        ClassKey { namespace: "shop".into(), name: "vault".into() }
    }

    #[test]
    fn a_rotation_moves_the_class_once_and_a_roll_moves_nothing() {
        let mut index = ProviderClasses::default();
        index.apply(status("a", 10, "1"));
        index.apply(status("b", 11, "1"));
        assert!(index.take_moved().is_empty(), "first statuses are a baseline");
        assert_eq!(index.digest(&vault()), Some(digest([("secret/db", "1")])));
        index.apply(status("a", 12, "2"));
        assert_eq!(index.take_moved(), [vault()], "a new version: a rotation");
        index.apply(status("b", 13, "2"));
        index.apply(status("c", 14, "2"));
        index.delete(("shop".into(), "a-shop-vault".into()));
        index.delete(("shop".into(), "b-shop-vault".into()));
        assert!(index.take_moved().is_empty(), "its roll's new pods and deleted old ones");
        assert_eq!(index.digest(&vault()), Some(digest([("secret/db", "2")])));
        // An older report arriving late (a relist's list order) does not win.
        index.apply(status("d", 9, "1"));
        assert!(index.take_moved().is_empty());
        assert_eq!((index.statuses(), index.known_classes()), (2, 1));
    }

    #[test]
    fn a_class_no_status_reports_is_forgotten_and_seen_afresh() {
        let mut index = ProviderClasses::default();
        index.apply(status("a", 10, "1"));
        index.delete(("shop".into(), "a-shop-vault".into()));
        assert_eq!((index.statuses(), index.known_classes()), (0, 0));
        assert_eq!(index.digest(&vault()), None);
        index.apply(status("b", 20, "2"));
        assert!(index.take_moved().is_empty(), "its pods came back: a first observation");
        // A status that moves to another class leaves the first.
        let mut moved = status("b", 21, "2");
        moved.class = Some("aws".into());
        index.apply(moved);
        assert_eq!(index.digest(&vault()), None);
        assert_eq!(index.known_classes(), 1);
    }

    #[test]
    fn trackers_follow_upserts_and_removals() {
        let mut index = ProviderClasses::default();
        let web = WorkloadKey {
            kind: crate::core::WorkloadKind::Deployment,
            namespace: "shop".into(),
            name: "web".into(),
        };
        index.upsert(&web, vec![vault()]);
        assert_eq!(index.trackers_of(&vault()).count(), 1);
        index.upsert(&web, Vec::new());
        assert_eq!(index.trackers_of(&vault()).count(), 0);
        assert_eq!(index.all().count(), 0);
    }
}
