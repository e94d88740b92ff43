//! The notices (`--notify-config`) of the controller's moments, built from the same facts
//! as their Events (`event.rs`) and beside them: the workload, the sources as objects, the
//! new digest's first 12 hex digits, the Event's words as the reason.

use std::collections::{BTreeMap, BTreeSet};

use super::trigger::{Source, Trigger, id_of};
use super::workload::WorkloadKey;
use crate::core::model::annotations::PROVIDER_CLASS_WORD;
use crate::core::model::kinds::WorkloadKind;
use crate::core::model::provider_class_status::CLASS_KIND as PROVIDER_CLASS_KIND;
use crate::core::{ObjectKey, ObjectRef};
use crate::lookup::api_object::workload_resource;
use crate::notify::{Named, Notice, NoticeKind, NoticeWorkload};

/// The workload as a notice names it, with its resource as API paths write it.
pub fn workload(key: &WorkloadKey) -> NoticeWorkload {
    let resource = workload_resource(key.kind);
    NoticeWorkload {
        kind: resource.kind,
        resource: resource.plural,
        namespace: key.namespace.to_string(),
        name: key.name.to_string(),
    }
}

/// A roll of `key` (or, `kind` [`NoticeKind::WouldRoll`], a dry run's would-be roll) because
/// of `changed`; `digests` holds the new digest of each object read for it. The digest is
/// the first source's that has one: an object's, or a moved tag's new image digest.
pub fn roll(
    kind: NoticeKind,
    key: &WorkloadKey,
    changed: &BTreeSet<Trigger>,
    digests: &BTreeMap<ObjectRef, String>,
    reason: String,
) -> Notice {
    let mut notice = Notice::new(kind, workload(key), reason);
    for trigger in changed {
        let named = trigger_source(trigger, &key.namespace);
        if !notice.sources.contains(&named) {
            notice.sources.push(named);
        }
    }
    notice.digest = changed.iter().find_map(|trigger| match trigger {
        Trigger::Object(object) => digests.get(object).map(|d| id_of(d)),
        Trigger::Image { new, .. } => Some(id_of(new)),
        Trigger::Workload(_) | Trigger::ProviderClass(_) | Trigger::Quiet(_) => None,
    });
    notice
}

/// A gate's moment about `key` and the source `source` names (`secret/db`, `image r:t`,
/// `deployment/db`, as `Trigger::source` says it): held, released, waiting for a window.
pub fn about(kind: NoticeKind, key: &WorkloadKey, source: Option<&str>, reason: String) -> Notice {
    let mut notice = Notice::new(kind, workload(key), reason);
    notice.sources.extend(source.map(|s| named_source(s, &key.namespace)));
    notice
}

/// A halted change (or one an operator resumed): `failing` is the workload whose rollout
/// halted it, `id` the halt's id (the first 12 hex digits of the new digest).
pub fn of_change(
    kind: NoticeKind,
    failing: &WorkloadKey,
    source: &Source,
    id: &str,
    reason: String,
) -> Notice {
    let mut notice = Notice::new(kind, workload(failing), reason);
    notice.sources.push(match source {
        Source::Object(key) => object(key),
        Source::Image(reference) => image(reference),
        Source::Workload(key) => {
            let resource = workload_resource(key.kind);
            named(resource.kind, Some(&key.namespace), &key.name)
        }
        Source::ProviderClass { namespace, name } => {
            named(PROVIDER_CLASS_KIND.to_owned(), Some(namespace), name)
        }
    });
    notice.digest = Some(id.to_owned());
    notice
}

fn trigger_source(trigger: &Trigger, namespace: &str) -> Named {
    match trigger {
        Trigger::Object(object) => named(
            object.kind.as_str().to_owned(),
            Some(object.namespace_from(namespace)),
            &object.name,
        ),
        Trigger::Image { image: reference, .. } => image(reference),
        Trigger::Workload(source) | Trigger::ProviderClass(source) | Trigger::Quiet(source) => {
            named_source(source, namespace)
        }
    }
}

/// A source as `Trigger::source` writes it, as an object: `secret/db`, `deployment/db`,
/// `image <reference>`.
fn named_source(source: &str, namespace: &str) -> Named {
    if let Some(reference) = source.strip_prefix("image ") {
        return image(reference);
    }
    if let Some(object) = ObjectRef::parse(source) {
        return named(object.kind.as_str().to_owned(), Some(namespace), &object.name);
    }
    match source.split_once('/') {
        Some((PROVIDER_CLASS_WORD, name)) => {
            named(PROVIDER_CLASS_KIND.to_owned(), Some(namespace), name)
        }
        Some((word, name)) => {
            let kind = WorkloadKind::trackable_from_word(word)
                .map_or_else(|| word.to_owned(), |kind| workload_resource(kind).kind);
            named(kind, Some(namespace), name)
        }
        None => named("Unknown".to_owned(), Some(namespace), source),
    }
}

fn object(key: &ObjectKey) -> Named {
    named(key.object.kind.as_str().to_owned(), Some(&key.namespace), &key.object.name)
}

fn image(reference: &str) -> Named {
    Named { kind: "Image".to_owned(), namespace: None, name: reference.to_owned() }
}

fn named(kind: String, namespace: Option<&str>, name: &str) -> Named {
    Named { kind, namespace: namespace.map(str::to_owned), name: name.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn web() -> WorkloadKey {
        WorkloadKey { kind: WorkloadKind::Deployment, namespace: "ns".into(), name: "web".into() }
    }

    #[test]
    fn a_roll_names_its_sources_and_the_first_new_digest() {
        let changed = BTreeSet::from([
            Trigger::Object(ObjectRef::secret("db")),
            Trigger::Workload("statefulset/cache".into()),
            Trigger::Image {
                container: "app".into(),
                variable: None,
                image: "ghcr.io/a/b:1".into(),
                old: "sha256:1111".into(),
                new: format!("sha256:{}", "2".repeat(64)),
            },
        ]);
        let digests =
            BTreeMap::from([(ObjectRef::secret("db"), format!("hmac-sha256:{}", "ab".repeat(32)))]);
        let notice = roll(NoticeKind::Rolled, &web(), &changed, &digests, "why".into());
        assert_eq!(notice.workload.resource, "deployments");
        assert_eq!(notice.workload.kind, "Deployment");
        let kinds: Vec<(&str, Option<&str>, &str)> = notice
            .sources
            .iter()
            .map(|s| (s.kind.as_str(), s.namespace.as_deref(), s.name.as_str()))
            .collect();
        assert_eq!(
            kinds,
            [
                ("Secret", Some("ns"), "db"),
                ("StatefulSet", Some("ns"), "cache"),
                ("Image", None, "ghcr.io/a/b:1")
            ]
        );
        assert_eq!(notice.digest.as_deref(), Some("abababababab"));
        // Without the object's digest, the image's.
        let notice = roll(NoticeKind::WouldRoll, &web(), &changed, &BTreeMap::new(), "".into());
        assert_eq!(notice.digest.as_deref(), Some("222222222222"));
    }

    #[test]
    fn a_gate_names_the_source_it_holds() {
        let held = about(NoticeKind::Held, &web(), Some("configmap/app"), "held".into());
        assert_eq!(held.sources[0].kind, "ConfigMap");
        let image = about(NoticeKind::Released, &web(), Some("image r.example/a:1"), "".into());
        assert_eq!(
            (image.sources[0].kind.as_str(), image.sources[0].name.as_str()),
            ("Image", "r.example/a:1")
        );
        assert!(about(NoticeKind::WaitingWindow, &web(), None, "".into()).sources.is_empty());
        let source = Source::Object(ObjectRef::secret("db").within("ns"));
        let halted = of_change(NoticeKind::Halted, &web(), &source, "0123456789ab", "".into());
        assert_eq!(halted.digest.as_deref(), Some("0123456789ab"));
        assert_eq!(halted.sources[0].kind, "Secret");
    }
}
