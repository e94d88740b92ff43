//! What each command asks of the API server, for its RBAC, derived from the tables beside this
//! file: the workload kinds (`kinds`) and the tracked kinds of object (`inputs`). The manifests'
//! and the chart's ClusterRoles are checked against these lists by tests/manifests.rs, and the
//! real control plane's tests run each command with exactly those grants. Both lists take the
//! table's kinds as arguments, so that a rendered installation's table is checked the same way.

use super::model::object_ref::ObjectKind;
use super::model::provider_class_status::{GROUP as CSI_GROUP, RESOURCE as CSI_RESOURCE};

/// One RBAC rule's worth: API group, resource, verbs.
pub type Permission = (&'static str, &'static str, &'static [&'static str]);

const GET: &[&str] = &["get"];

/// The verbs the controller needs on the kinds it rolls: it watches a light view of them and
/// patches their digests.
pub const ROLLED_KIND_VERBS: &[&str] = &["list", "watch", "patch"];

/// The verbs the controller needs on every tracked kind: it watches their metadata and reads
/// one object's data on a change.
pub const TRACKED_KIND_VERBS: &[&str] = &["get", "list", "watch"];

/// On Leases, in its own namespace only: `create`, `get` and `update` its own, and `list`
/// them all to see whether another count of shards still holds one (`--shard`). Not narrowed
/// to names: each count of shards names its Leases differently, and during a change of N the
/// old count must keep renewing its own until it stops.
pub const LEASE_VERBS: &[&str] = &["create", "get", "list", "update"];

/// The webhook's: `get` on every tracked kind of object, on ServiceAccounts for their image
/// pull secrets, and on every workload kind another workload may track (its pod template),
/// among `trackable` (`kinds::tracked_resources()`, or a rendered installation's table's).
/// `GET /version` needs no grant.
pub fn webhook_permissions_among(
    trackable: impl Iterator<Item = (&'static str, &'static str)>,
) -> Vec<Permission> {
    let objects = ObjectKind::all().map(|kind| (kind.input().group, kind.input().resource, GET));
    let mut permissions: Vec<Permission> = objects.collect();
    permissions.push(("", "serviceaccounts", GET));
    permissions.extend(trackable.map(|(group, resource)| (group, resource, GET)));
    permissions
}

/// The controller's, cluster-wide: the opted-in namespaces, the kinds it rolls, what they
/// consume, the ServiceAccounts of tracked images and the Events it records; and `get` on the
/// kinds another workload may track, to read a tracked workload's template the watch
/// delivered before anything tracked it. `rolled` and `trackable` come from a kinds table
/// (`kinds::rolled_resources()` and `tracked_resources()`, or a rendered installation's).
pub fn controller_permissions_among(
    rolled: impl Iterator<Item = (&'static str, &'static str)>,
    trackable: impl Iterator<Item = (&'static str, &'static str)>,
) -> Vec<Permission> {
    let mut permissions: Vec<Permission> = vec![("", "namespaces", &["list", "watch"])];
    permissions.extend(rolled.map(|(group, resource)| (group, resource, ROLLED_KIND_VERBS)));
    permissions.extend(trackable.map(|(group, resource)| (group, resource, GET)));
    permissions.extend(ObjectKind::all().map(|kind| {
        let input = kind.input();
        (input.group, input.resource, TRACKED_KIND_VERBS)
    }));
    permissions.push(("", "serviceaccounts", GET));
    permissions.push(("", "events", &["create"]));
    permissions
}

/// The webhook's optional grant (the chart's `csi.enabled`): `list` on the Secrets Store CSI
/// driver's statuses, one namespace's per review of a workload mounting a SecretProviderClass.
/// Without it those digests are left as they are.
pub fn csi_webhook_permissions() -> Vec<Permission> {
    vec![(CSI_GROUP, CSI_RESOURCE, &["list"])]
}

/// The controller's optional grant, likewise: it watches the statuses once they are served.
pub fn csi_controller_permissions() -> Vec<Permission> {
    vec![(CSI_GROUP, CSI_RESOURCE, &["list", "watch"])]
}
