//! A tracked SecretProviderClass (the Secrets Store CSI driver): a pod template whose CSI
//! volume of driver [`DRIVER`] names a class in `volumeAttributes.secretProviderClass` tracks
//! that class's rotations. The driver reports, per pod and mount, a status
//! (`core::model::provider_class_status`) with the version of every object it fetched; the
//! annotation `secretproviderclass.<domain>/<class>` holds [`digest`] of the latest version
//! of each object id reported for the class in the namespace.
//!
//! "Latest" is one rule for the webhook's list and the controller's watch: of the statuses
//! reporting an id, the version of the one with the greatest `resourceVersion` (read as an
//! integer; on a tie, the one seen later). A watch delivers changes in that order, so the
//! controller keeps, per class, only the latest version per id ([`ClassVersions`]).

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest as _, Sha256};

use crate::core::model::hex::hex;
use crate::core::model::pod_spec::Volume;
use crate::core::model::provider_class_status::ProviderClassStatus;

/// The Secrets Store CSI driver's name, as a CSI volume's `driver` gives it.
pub const DRIVER: &str = "secrets-store.csi.k8s.io";
/// `<word>.<domain>/<class>`: the annotation's prefix word, and how Events name a class.
pub use crate::core::model::annotations::PROVIDER_CLASS_WORD as WORD;
/// Classes tracked per workload; the annotations of those beyond are kept as they are.
pub const MAX_CLASSES: usize = 16;
/// Object ids kept per class; ids reported beyond them are not digested.
pub const MAX_IDS: usize = 256;

/// The class a volume names, if it is a Secrets Store CSI volume that names one.
pub fn class_of<'a>(volume: &'a Volume<'_>) -> Option<&'a str> {
    let csi = volume.csi.as_ref()?;
    if csi.driver.as_ref().map(|driver| driver.as_str()) != Some(DRIVER) {
        return None;
    }
    csi.volume_attributes.as_ref()?.secret_provider_class.as_ref().map(|class| class.as_str())
}

/// `sha256:` (lowercase hex) of the lines `<id>@<version>\n`, sorted.
pub fn digest<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut lines: Vec<String> =
        pairs.into_iter().map(|(id, version)| format!("{id}@{version}\n")).collect();
    lines.sort_unstable();
    let mut hasher = Sha256::new();
    for line in &lines {
        hasher.update(line.as_bytes());
    }
    format!("sha256:{}", hex(&hasher.finalize()))
}

/// The latest version of each object id reported for one class, with the resourceVersion of
/// the status that reported it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClassVersions {
    ids: BTreeMap<String, (String, u64)>,
}

impl ClassVersions {
    /// Takes what `status` reports where it is at least as recent as what is known.
    pub fn report(&mut self, status: &ProviderClassStatus) {
        for (id, version) in &status.objects {
            let full = self.ids.len() >= MAX_IDS;
            match self.ids.get_mut(id) {
                Some(known) if known.1 > status.resource_version => {}
                Some(known) => *known = (version.clone(), status.resource_version),
                None if full => {}
                None => {
                    self.ids.insert(id.clone(), (version.clone(), status.resource_version));
                }
            }
        }
    }

    /// The annotation value; `None` while no object is known.
    pub fn digest(&self) -> Option<String> {
        if self.ids.is_empty() {
            return None;
        }
        Some(digest(self.ids.iter().map(|(id, (version, _))| (id.as_str(), version.as_str()))))
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// What one list of `namespace`'s statuses says of each class of `wanted`: its latest
/// versions. Statuses of other classes and other namespaces are left out; a class no status
/// reports is missing.
pub fn fold<'a>(
    statuses: impl IntoIterator<Item = &'a ProviderClassStatus>,
    namespace: &str,
    wanted: &BTreeSet<&str>,
) -> BTreeMap<String, ClassVersions> {
    let mut classes = BTreeMap::new();
    fold_into(&mut classes, statuses, namespace, wanted);
    classes
}

/// [`fold`], into what earlier pages of the same list folded.
pub fn fold_into<'a>(
    classes: &mut BTreeMap<String, ClassVersions>,
    statuses: impl IntoIterator<Item = &'a ProviderClassStatus>,
    namespace: &str,
    wanted: &BTreeSet<&str>,
) {
    for status in statuses {
        if status.namespace.as_deref().is_some_and(|ns| ns != namespace) {
            continue;
        }
        let Some(class) = status.class.as_deref().filter(|c| wanted.contains(c)) else { continue };
        classes.entry(class.to_owned()).or_default().report(status);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::provider_class_status::bounded_text;

    fn status(ns: &str, class: &str, rv: u64, objects: &[(&str, &str)]) -> ProviderClassStatus {
        ProviderClassStatus {
            namespace: Some(ns.into()),
            name: Some(format!("pod-{rv}")),
            resource_version: rv,
            resource_version_text: Some(rv.to_string()),
            class: Some(class.into()),
            objects: objects.iter().map(|(i, v)| ((*i).to_owned(), (*v).to_owned())).collect(),
        }
    }

    fn digest_of(statuses: &[ProviderClassStatus], class: &str) -> Option<String> {
        let wanted = BTreeSet::from([class]);
        fold(statuses, "shop", &wanted).get(class).and_then(ClassVersions::digest)
    }

    #[test]
    fn the_digest_is_sha256_of_the_sorted_lines() {
        // Computed apart: printf 'secret/api@7\nsecret/db@3\n' | sha256sum
        let expected = "sha256:8747f051950a2af1c491c4223d4b244096fdd499ef8de4deefd06e284d5271b9";
        let by_hand = format!("sha256:{}", hex(&Sha256::digest(b"secret/api@7\nsecret/db@3\n")));
        assert_eq!(by_hand, expected);
        assert_eq!(digest([("secret/db", "3"), ("secret/api", "7")]), expected);
        assert_eq!(digest([("secret/api", "7"), ("secret/db", "3")]), expected, "order is moot");
        let statuses = [status("shop", "vault", 10, &[("secret/db", "3"), ("secret/api", "7")])];
        assert_eq!(digest_of(&statuses, "vault").as_deref(), Some(expected));
    }

    #[test]
    fn the_latest_report_of_an_id_wins() {
        let old = status("shop", "vault", 10, &[("secret/db", "1")]);
        let new = status("shop", "vault", 12, &[("secret/db", "2")]);
        let expected = Some(digest([("secret/db", "2")]));
        assert_eq!(digest_of(&[old.clone(), new.clone()], "vault"), expected);
        assert_eq!(digest_of(&[new.clone(), old.clone()], "vault"), expected, "in any list order");
        // The same versions from more pods change nothing.
        let more = status("shop", "vault", 20, &[("secret/db", "2")]);
        assert_eq!(digest_of(&[old, new, more], "vault"), expected);
        // resourceVersion read as an integer, not as text: 9 is older than 10.
        let nine = status("shop", "vault", 9, &[("secret/db", "9")]);
        let ten = status("shop", "vault", 10, &[("secret/db", "10")]);
        assert_eq!(digest_of(&[ten, nine], "vault"), Some(digest([("secret/db", "10")])));
    }

    #[test]
    fn other_classes_and_other_namespaces_are_left_out() {
        let ours = status("shop", "vault", 10, &[("secret/db", "1")]);
        let other_class = status("shop", "aws", 11, &[("secret/db", "5")]);
        let other_namespace = status("test", "vault", 12, &[("secret/db", "6")]);
        let all = [ours.clone(), other_class, other_namespace];
        assert_eq!(digest_of(&all, "vault"), digest_of(&[ours], "vault"));
        assert_eq!(digest_of(&all, "gcp"), None, "no status: no digest");
        assert_eq!(ClassVersions::default().digest(), None);
    }

    #[test]
    fn ids_beyond_the_limit_are_not_digested() {
        let objects: Vec<(String, String)> =
            (0..MAX_IDS + 5).map(|i| (format!("id{i:04}"), "1".to_owned())).collect();
        let mut versions = ClassVersions::default();
        versions.report(&ProviderClassStatus { objects, ..ProviderClassStatus::default() });
        assert_eq!(versions.ids.len(), MAX_IDS);
    }

    #[test]
    fn hostile_ids_cannot_forge_lines() {
        // An id with a newline is kept hashed (bounded_text): never two lines of the input.
        let forged = bounded_text("a@1\nb".to_owned());
        let pair = digest([(forged.as_str(), "2")]);
        assert_ne!(pair, digest([("a", "1"), ("b", "2")]));
        assert!(forged.starts_with("sha256:") && !forged.contains('\n'));
    }
}
