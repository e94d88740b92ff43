//! The event loop's inbox. The watches, the object reads, the worker and the
//! image poller each report here, and none of them imports another: this
//! file knows their outputs, they know only this file.

use kube::runtime::watcher::Event;

use super::polled_image::PolledImage;
use super::reading::Reading;
use super::work::{Due, ReconcileResult};
use super::workload::{WatchedWorkload, WorkloadKey};
use crate::core::model::kinds::WorkloadKind;
use crate::core::{ObjectKey, ObjectKind};
use crate::registry::Resolution;

/// What the loop needs of a Namespace, ConfigMap or Secret event: which one,
/// and its resourceVersion. The rest of the metadata is dropped at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectVersion {
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub resource_version: Option<String>,
}

/// Everything the event loop reacts to.
pub enum Message {
    /// From the watch of opted-in namespaces.
    Namespace(Event<ObjectVersion>),
    /// From the workload watches started in `epoch` (those of older epochs
    /// were stopped; what they sent late is ignored).
    Workload { kind: WorkloadKind, epoch: u64, event: Box<Event<WatchedWorkload>> },
    /// From the watch of a tracked kind of object (metadata only).
    Object(ObjectKind, Event<ObjectVersion>),
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
}
