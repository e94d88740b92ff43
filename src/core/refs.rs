//! Reference discovery (README, "What it does"): which ConfigMaps and Secrets a pod spec
//! consumes, and which of their keys. The pod spec's one reader (`core::pod_spec_reader`)
//! adds every site a reference can sit at as it reads it; what each kind finds there is
//! declared in `core::inputs`.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};

use super::field_path::Named;
use super::inputs::DECLARED;
use super::inputs::row::{ReferenceSites, Site, SiteKeys};
use super::model::kinds::ReferenceDeclaration;
use super::model::object_ref::{ObjectKind, ObjectRef};
use super::model::pod_spec::ItemKeys;

/// A pod spec as configsum reads it (its `Deserialize` is the reader's): the objects it
/// consumes through env, envFrom, volumes and projected volumes of its containers and init
/// containers, at the sites each kind declares in `core::inputs`, and the SecretProviderClasses
/// its CSI volumes name (once each, in order; names as written). Image pull secrets and
/// volume-driver credentials are not consumed by the application and are left out on purpose.
#[derive(Clone, Debug, Default)]
pub struct PodSpec {
    pub references: References,
    pub classes: BTreeSet<String>,
}

/// The keys of one object that the pods read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConsumedKeys {
    /// Every key (`envFrom`, or a volume without `items`).
    All,
    /// Only these keys, whether or not the object has them.
    Keys(BTreeSet<String>),
}

impl ConsumedKeys {
    pub(crate) fn merge(&mut self, other: ConsumedKeys) {
        match (&mut *self, other) {
            (ConsumedKeys::All, _) => {}
            (this, ConsumedKeys::All) => *this = ConsumedKeys::All,
            (ConsumedKeys::Keys(mine), ConsumedKeys::Keys(theirs)) => mine.extend(theirs),
        }
    }

    fn from_items(items: Option<&ItemKeys>) -> Self {
        match items {
            Some(items) if !items.is_empty() => ConsumedKeys::Keys(items.clone()),
            _ => ConsumedKeys::All,
        }
    }

    /// The keys one site reads.
    fn of_site(keys: &SiteKeys<'_>) -> Self {
        match keys {
            SiteKeys::All => ConsumedKeys::All,
            SiteKeys::One(key) => {
                ConsumedKeys::Keys(BTreeSet::from([key.unwrap_or_default().to_owned()]))
            }
            SiteKeys::Items(items) => ConsumedKeys::from_items(*items),
        }
    }

    /// [`Self::merge`] of what one site reads, a key copied only when it is new: a pod spec
    /// names the same key of an object in each container that reads it.
    fn add_site(&mut self, keys: &SiteKeys<'_>) {
        match (&mut *self, keys) {
            (ConsumedKeys::All, _) => {}
            (ConsumedKeys::Keys(mine), SiteKeys::One(key)) => {
                let key = key.unwrap_or_default();
                if !mine.contains(key) {
                    mine.insert(key.to_owned());
                }
            }
            (this, keys) => this.merge(ConsumedKeys::of_site(keys)),
        }
    }
}

/// How a pod spec consumes one object, all its references merged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Consumption {
    pub keys: ConsumedKeys,
    /// True only if every reference to the object says `optional: true`.
    pub optional: bool,
}

/// Every object a pod spec references, in `ObjectRef` order (ConfigMaps first,
/// then by name). Names are as written; validity is checked by the selection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct References(BTreeMap<ObjectRef, Consumption>);

impl References {
    pub fn get(&self, object: &ObjectRef) -> Option<&Consumption> {
        self.0.get(object)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&ObjectRef, &Consumption)> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds what one list element references, for every declared kind.
    pub(crate) fn add_sites<'a>(&mut self, site_of: impl Fn(&ReferenceSites) -> Option<Site<'a>>) {
        for input in &DECLARED {
            if let Some(site) = site_of(&input.sites) {
                // A missing name is the empty name, which the selection rejects as invalid.
                let name = site.name.unwrap_or_default();
                let optional = site.optional.unwrap_or(false);
                // Found by the name as read: it is copied once, when the object is new.
                match self.0.get_mut(&(input.kind, name) as &dyn ObjectName) {
                    Some(existing) => {
                        existing.keys.add_site(&site.keys);
                        existing.optional &= optional;
                    }
                    None => {
                        let keys = ConsumedKeys::of_site(&site.keys);
                        self.0.insert(
                            ObjectRef::new(input.kind, name),
                            Consumption { keys, optional },
                        );
                    }
                }
            }
        }
    }

    fn add(&mut self, object: ObjectRef, keys: ConsumedKeys, optional: Option<bool>) {
        let optional = optional.unwrap_or(false);
        // One walk of the tree, whether the object is new or not.
        match self.0.entry(object) {
            Entry::Occupied(mut entry) => {
                let existing = entry.get_mut();
                existing.keys.merge(keys);
                existing.optional &= optional;
            }
            Entry::Vacant(entry) => {
                entry.insert(Consumption { keys, optional });
            }
        }
    }
}

impl IntoIterator for References {
    type Item = (ObjectRef, Consumption);
    type IntoIter = std::collections::btree_map::IntoIter<ObjectRef, Consumption>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// An object as [`References`] orders it, from borrowed parts: the map is searched by the name
/// as the reader read it, without copying it. Ordered as `ObjectRef`'s derived order.
trait ObjectName {
    fn parts(&self) -> (ObjectKind, Option<&str>, &str);
}

impl ObjectName for ObjectRef {
    fn parts(&self) -> (ObjectKind, Option<&str>, &str) {
        (self.kind, self.namespace.as_deref(), &self.name)
    }
}

/// An object of the workload's own namespace, by kind and name.
impl ObjectName for (ObjectKind, &str) {
    fn parts(&self) -> (ObjectKind, Option<&str>, &str) {
        (self.0, None, self.1)
    }
}

impl<'a> Borrow<dyn ObjectName + 'a> for ObjectRef {
    fn borrow(&self) -> &(dyn ObjectName + 'a) {
        self
    }
}

impl PartialEq for dyn ObjectName + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn ObjectName + '_ {}

impl PartialOrd for dyn ObjectName + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn ObjectName + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        self.parts().cmp(&other.parts())
    }
}

/// Adds the objects an operator's custom resource names at one of its kind's reference paths
/// (`reference`): a name, whose keys are the declaration's (all when it lists none), or a
/// selector (`name` with `key` or `items`), whose keys are its own.
pub fn add_named(refs: &mut References, reference: &ReferenceDeclaration, values: &[Named]) {
    let declared = || match reference.keys {
        Some(keys) => ConsumedKeys::Keys(keys.iter().map(|k| (*k).to_owned()).collect()),
        None => ConsumedKeys::All,
    };
    for value in values {
        let (name, keys, optional) = match value {
            Named::Name(name) => (name.clone(), declared(), None),
            Named::Selector(selector) => {
                let keys = match (&selector.key, &selector.items) {
                    (Some(key), _) => ConsumedKeys::Keys(BTreeSet::from([key.clone()])),
                    (None, Some(items)) if !items.is_empty() => ConsumedKeys::Keys(items.clone()),
                    _ => declared(),
                };
                (selector.name.clone().unwrap_or_default(), keys, selector.optional)
            }
            Named::Nothing => continue,
        };
        refs.add(ObjectRef::new(reference.kind, name), keys, optional);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refs_of(spec: serde_json::Value) -> References {
        // From the text, as the webhook reads it: names are borrowed where they can be.
        let spec: PodSpec = serde_json::from_str(&spec.to_string()).expect("test pod spec");
        spec.references
    }

    fn keys(list: &[&str]) -> ConsumedKeys {
        ConsumedKeys::Keys(list.iter().map(|k| k.to_string()).collect())
    }

    fn only(refs: &References) -> (&ObjectRef, &Consumption) {
        assert_eq!(refs.len(), 1, "{refs:?}");
        refs.iter().next().expect("one reference")
    }

    #[test]
    fn env_config_map_key_ref() {
        let refs = refs_of(json!({"containers": [{"name": "c", "env": [
            {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "a"}}}
        ]}]}));
        let (object, c) = only(&refs);
        assert_eq!(object, &ObjectRef::config_map("cm"));
        assert_eq!(c, &Consumption { keys: keys(&["a"]), optional: false });
    }

    #[test]
    fn env_secret_key_ref() {
        let refs = refs_of(json!({"containers": [{"name": "c", "env": [
            {"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw", "optional": true}}}
        ]}]}));
        let (object, c) = only(&refs);
        assert_eq!(object, &ObjectRef::secret("s"));
        assert_eq!(c, &Consumption { keys: keys(&["pw"]), optional: true });
    }

    #[test]
    fn env_from_consumes_all_keys() {
        let refs = refs_of(json!({"containers": [{"name": "c", "envFrom": [
            {"configMapRef": {"name": "cm"}}, {"secretRef": {"name": "s"}, "prefix": "S_"}
        ]}]}));
        assert_eq!(
            refs.get(&ObjectRef::config_map("cm")).map(|c| &c.keys),
            Some(&ConsumedKeys::All)
        );
        assert_eq!(refs.get(&ObjectRef::secret("s")).map(|c| &c.keys), Some(&ConsumedKeys::All));
    }

    #[test]
    fn volumes_with_and_without_items() {
        let refs = refs_of(json!({"containers": [{"name": "c"}], "volumes": [
            {"name": "a", "configMap": {"name": "cm"}},
            {"name": "b", "configMap": {"name": "cm-items", "items": [{"key": "k", "path": "p"}]}},
            {"name": "c", "configMap": {"name": "cm-empty-items", "items": []}},
            {"name": "d", "secret": {"secretName": "s"}},
            {"name": "e", "secret": {"secretName": "s-items", "items": [{"key": "x", "path": "x"}]}},
        ]}));
        let get = |r: ObjectRef| refs.get(&r).map(|c| c.keys.clone());
        assert_eq!(get(ObjectRef::config_map("cm")), Some(ConsumedKeys::All));
        assert_eq!(get(ObjectRef::config_map("cm-items")), Some(keys(&["k"])));
        assert_eq!(get(ObjectRef::config_map("cm-empty-items")), Some(ConsumedKeys::All));
        assert_eq!(get(ObjectRef::secret("s")), Some(ConsumedKeys::All));
        assert_eq!(get(ObjectRef::secret("s-items")), Some(keys(&["x"])));
    }

    #[test]
    fn projected_volume_sources() {
        let refs = refs_of(
            json!({"containers": [{"name": "c"}], "volumes": [{"name": "p", "projected": {"sources": [
                {"configMap": {"name": "cm", "items": [{"key": "a", "path": "a"}]}},
                {"secret": {"name": "s"}},
                {"serviceAccountToken": {"path": "token"}},
                {"downwardAPI": {"items": []}}
            ]}}]}),
        );
        assert_eq!(refs.len(), 2);
        assert_eq!(refs.get(&ObjectRef::config_map("cm")).map(|c| &c.keys), Some(&keys(&["a"])));
        assert_eq!(refs.get(&ObjectRef::secret("s")).map(|c| &c.keys), Some(&ConsumedKeys::All));
    }

    #[test]
    fn init_containers_count() {
        let refs = refs_of(json!({"containers": [{"name": "c"}], "initContainers": [
            {"name": "i", "envFrom": [{"secretRef": {"name": "init-secret"}}]}
        ]}));
        assert_eq!(only(&refs).0, &ObjectRef::secret("init-secret"));
    }

    #[test]
    fn credentials_and_pull_secrets_are_not_tracked() {
        let refs = refs_of(json!({
            "containers": [{"name": "c"}],
            "imagePullSecrets": [{"name": "registry"}],
            "volumes": [
                {"name": "csi", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "csi-creds"}}},
                {"name": "cephfs", "cephfs": {"monitors": ["m"], "secretRef": {"name": "ceph-creds"}}},
                {"name": "empty", "emptyDir": {}}
            ]
        }));
        assert!(refs.is_empty(), "{refs:?}");
    }

    #[test]
    fn merging_unions_keys_and_all_wins() {
        let refs = refs_of(json!({"containers": [
            {"name": "a", "env": [
                {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "a"}}},
                {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "b"}}},
                {"name": "C", "valueFrom": {"secretKeyRef": {"name": "s", "key": "c"}}}
            ]},
            {"name": "b", "env": [{"name": "D", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "d"}}}]}
        ], "volumes": [{"name": "v", "secret": {"secretName": "s"}}]}));
        assert_eq!(
            refs.get(&ObjectRef::config_map("cm")).map(|c| &c.keys),
            Some(&keys(&["a", "b", "d"]))
        );
        assert_eq!(refs.get(&ObjectRef::secret("s")).map(|c| &c.keys), Some(&ConsumedKeys::All));
    }

    #[test]
    fn optional_only_if_every_reference_says_so() {
        let refs = refs_of(json!({"containers": [{"name": "a", "envFrom": [
            {"configMapRef": {"name": "both", "optional": true}},
            {"configMapRef": {"name": "mixed", "optional": true}},
            {"secretRef": {"name": "unset"}}
        ], "env": [
            {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "both", "key": "k", "optional": true}}},
            {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "mixed", "key": "k", "optional": false}}}
        ]}]}));
        let optional = |r: ObjectRef| refs.get(&r).map(|c| c.optional);
        assert_eq!(optional(ObjectRef::config_map("both")), Some(true));
        assert_eq!(optional(ObjectRef::config_map("mixed")), Some(false));
        assert_eq!(optional(ObjectRef::secret("unset")), Some(false));
    }

    #[test]
    fn volumes_name_classes_of_the_secrets_store_driver_only() {
        let secrets_store = crate::core::inputs::secret_provider_class::DRIVER;
        let spec: PodSpec = serde_json::from_value(serde_json::json!({
            "containers": [{"name": "app"}],
            "volumes": [
                {"name": "a", "csi": {"driver": secrets_store, "readOnly": true,
                    "volumeAttributes": {"secretProviderClass": "vault", "other": "x"}}},
                {"name": "b", "csi": {"driver": secrets_store,
                    "volumeAttributes": {"secretProviderClass": "aws"}}},
                {"name": "c", "csi": {"driver": secrets_store, "volumeAttributes": {"secretProviderClass": "vault"}}},
                {"name": "d", "csi": {"driver": "ebs.csi.aws.com",
                    "volumeAttributes": {"secretProviderClass": "ebs"}}},
                {"name": "e", "csi": {"driver": secrets_store}},
                {"name": "f", "emptyDir": {}}
            ]
        }))
        .expect("pod spec");
        assert_eq!(spec.classes, BTreeSet::from(["aws".to_owned(), "vault".to_owned()]));
    }

    #[test]
    fn elements_that_reference_nothing_are_not_kept() {
        let empties = vec!["{}"; 100_000].join(",");
        let spec = format!(
            r#"{{"containers": [{empties}, {{"env": [{empties}, {{"valueFrom": {{"secretKeyRef": {{"name": "s"}}}}}}],
                "envFrom": [{empties}]}}],
              "volumes": [{empties}, {{"projected": {{"sources": [{empties}]}}}}, {{"configMap": {{"name": "c"}}}}]}}"#
        );
        let spec: PodSpec = serde_json::from_str(&spec).expect("pod spec");
        let objects: Vec<_> = spec.references.iter().map(|(object, _)| object.clone()).collect();
        assert_eq!(objects, [ObjectRef::config_map("c"), ObjectRef::secret("s")]);
    }

    #[test]
    fn names_and_keys_with_escapes_are_read_as_written() {
        let spec = r#"{"containers": [{"name": "a", "env": [
            {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "c\u006d", "key": "k\"1"}}},
            {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k\"1"}}}
        ]}]}"#;
        let refs = serde_json::from_str::<PodSpec>(spec).expect("pod spec").references;
        assert_eq!(only(&refs).0, &ObjectRef::config_map("cm"));
        assert_eq!(only(&refs).1.keys, keys(&["k\"1"]));
    }

    /// The map is searched through `dyn ObjectName`, so its order must be `ObjectRef`'s
    /// derived one exactly (`Borrow`'s contract): a field added to `ObjectRef`, or reordered,
    /// would otherwise lose lookups silently.
    #[test]
    fn objects_borrowed_by_name_order_as_object_refs_do() {
        let objects = [
            ObjectRef::secret("b"),
            ObjectRef::config_map("b"),
            ObjectRef::across(ObjectKind::ConfigMap, "ns", "a"),
            ObjectRef::config_map("a"),
            ObjectRef::across(ObjectKind::Secret, "a", "z"),
            ObjectRef::secret(""),
        ];
        for a in &objects {
            for b in &objects {
                let (by_name_a, by_name_b): (&dyn ObjectName, &dyn ObjectName) = (a, b);
                assert_eq!(by_name_a.cmp(by_name_b), a.cmp(b), "{a:?} against {b:?}");
            }
            let own = (a.kind, a.name.as_str());
            if a.namespace.is_none() {
                assert!((&own as &dyn ObjectName) == (a as &dyn ObjectName));
            }
        }
    }
}
