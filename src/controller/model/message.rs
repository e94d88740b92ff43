//! The event loop's inbox. The watches, the object reads, the worker and the
//! image poller each report here, and none of them imports another: this
//! file knows their outputs, they know only this file.

use kube::runtime::watcher::Event;

use super::polled_image::PolledImage;
use super::reading::Reading;
use super::work::{Due, ReconcileResult};
use super::workload::{WatchedWorkload, WorkloadKey};
use crate::core::model::kinds::WorkloadKind;
use crate::core::model::provider_class_status::{self, ProviderClassStatus};
use crate::core::{ObjectKey, ObjectKind};
use crate::registry::Resolution;

/// What the loop needs of a Namespace, ConfigMap or Secret event: which one,
/// and its resourceVersion. The rest of the metadata is dropped at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectVersion {
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub resource_version: Option<String>,
    /// The few annotations the controller reads of a Namespace, ConfigMap or Secret
    /// ([`OWN_ANNOTATIONS`] under any domain; the state checks the domain), bounded.
    pub annotations: Vec<(String, String)>,
}

/// The names, after `<domain>/`, of the annotations an [`ObjectVersion`] keeps.
pub const OWN_ANNOTATIONS: [&str; 3] = ["roll-window", "fan-out", "resume"];
/// A longer value is not kept (a roll-window's grammar allows 1,024 bytes).
const MAX_ANNOTATION_BYTES: usize = 1024;

impl ObjectVersion {
    /// Whether `key` names one of [`OWN_ANNOTATIONS`], under any domain.
    pub fn is_own(key: &str) -> bool {
        let name = key.rsplit_once('/').map(|(_, name)| name);
        name.is_some_and(|name| OWN_ANNOTATIONS.contains(&name))
    }

    /// The annotations of `all` an [`ObjectVersion`] keeps.
    pub fn own_annotations<'a>(
        all: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Vec<(String, String)> {
        all.into_iter()
            .filter(|(key, value)| Self::is_own(key) && value.len() <= MAX_ANNOTATION_BYTES)
            .take(OWN_ANNOTATIONS.len() * 2)
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect()
    }

    /// The value of the annotation `key`, if kept.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

/// The namespace one watch lists, where `--namespaces` confines the controller to some: one
/// watch per kind and namespace, each with its own lists. `None`: a watch of every namespace.
pub type Partition = Option<std::sync::Arc<str>>;

/// What each kind's watches list under `namespaces` (`--namespaces`): every namespace
/// (`[None]`), or each listed one.
pub fn partitions(namespaces: &[String]) -> Vec<Partition> {
    if namespaces.is_empty() {
        vec![None]
    } else {
        namespaces.iter().map(|ns| Some(std::sync::Arc::from(ns.as_str()))).collect()
    }
}

/// Everything the event loop reacts to.
pub enum Message {
    /// From the watch of opted-in namespaces.
    Namespace(Event<ObjectVersion>),
    /// From the workload watches started in `epoch` (those of older epochs
    /// were stopped; what they sent late is ignored).
    Workload {
        kind: WorkloadKind,
        partition: Partition,
        epoch: u64,
        event: Box<Event<WatchedWorkload>>,
    },
    /// From the watch of a tracked kind of object (metadata only).
    Object(ObjectKind, Partition, Event<ObjectVersion>),
    /// A read of a tracked object finished (its data digested and dropped).
    Read(Box<(ObjectKey, Result<Reading, String>)>),
    /// The worker finished a reconciliation.
    Reconciled(Box<(Due, ReconcileResult)>),
    /// Discovery serves a workload kind it did not serve at start-up.
    KindServed(WorkloadKind),
    /// … but cluster-scoped, against its declaration: the controller stops.
    KindClusterScoped(WorkloadKind),
    /// The poller resolved a tracked image.
    Image(Box<(PolledImage, Resolution)>),
    /// A read of a tracked workload's pod template finished (`None`: it does not exist).
    Template(Box<(WorkloadKey, Result<Option<serde_json::Value>, String>)>),
    /// From the watch of the Secrets Store CSI driver's statuses, once their CRD is served.
    ProviderClassStatus(Partition, Box<Event<ProviderClassStatus>>),
}

impl Message {
    /// The resource (plural) whose list this message completes: a watch's first list or a
    /// relist after its watch expired. The loop counts them once it has applied the list.
    pub fn completes_list(&self) -> Option<&'static str> {
        match self {
            Message::Namespace(Event::InitDone) => Some("namespaces"),
            Message::Workload { kind, event, .. } if matches!(**event, Event::InitDone) => {
                Some(kind.declaration().resource)
            }
            Message::Object(kind, _, Event::InitDone) => Some(kind.input().resource),
            Message::ProviderClassStatus(_, event) if matches!(**event, Event::InitDone) => {
                Some(provider_class_status::RESOURCE)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_completes_with_init_done_and_names_the_resource() {
        let object = |event| Message::Object(ObjectKind::Secret, None, event);
        assert_eq!(object(Event::InitDone).completes_list(), Some("secrets"));
        assert_eq!(object(Event::Init).completes_list(), None);
        assert_eq!(object(Event::Delete(version())).completes_list(), None);
        assert_eq!(Message::Namespace(Event::InitDone).completes_list(), Some("namespaces"));
        let workload = |event| Message::Workload {
            kind: WorkloadKind::StatefulSet,
            partition: None,
            epoch: 1,
            event: Box::new(event),
        };
        assert_eq!(workload(Event::InitDone).completes_list(), Some("statefulsets"));
        assert_eq!(workload(Event::Init).completes_list(), None);
        assert_eq!(Message::KindServed(WorkloadKind::Deployment).completes_list(), None);
    }

    #[test]
    fn an_object_keeps_only_the_annotations_the_controller_reads_and_bounded() {
        let all: std::collections::BTreeMap<String, String> = [
            ("configsum.dev/roll-window", "* 02:00-04:00 UTC".to_owned()),
            ("example.com/fan-out", "all".to_owned()),
            ("configsum.dev/resume", "x".repeat(2000)),
            ("configsum.dev/track", "secret/db".to_owned()),
            ("kubectl.kubernetes.io/last-applied-configuration", "{}".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let kept = ObjectVersion::own_annotations(&all);
        let keys: Vec<&str> = kept.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            ["configsum.dev/roll-window", "example.com/fan-out"],
            "the domain is checked later"
        );
        let version = ObjectVersion { annotations: kept, ..version() };
        assert_eq!(version.annotation("configsum.dev/roll-window"), Some("* 02:00-04:00 UTC"));
        assert_eq!(version.annotation("configsum.dev/resume"), None, "too long to keep");
    }

    fn version() -> ObjectVersion {
        let (namespace, name, resource_version) = (None, Some("db".into()), None);
        ObjectVersion { namespace, name, resource_version, annotations: Vec::new() }
    }
}
