//! configsum on a real node: `make cluster`'s cluster (scripts/cluster.sh), where kube-apiserver,
//! kube-controller-manager and kube-scheduler run beside containerd and a kubelet
//! (scripts/node.sh), configsum is installed by `helm install` of its chart from the image
//! `make image` built, and its webhook and controller run as pods. The application is
//! config-echo (tools/node-images), which serves the values it read when it started: a pod
//! that serves the new value is a pod that restarted with it.
//!
//! One cluster serves every test of this binary; each test works in namespaces of its own.
//! Tests that disrupt configsum's own pods take [`cluster::disrupting`], the others
//! [`cluster::sharing`], so that no test writes a workload while the webhook is being deleted
//! under it. Needs root (namespaces, cgroups, the bridge), as docs/testing.md says.

#[path = "../support/cert_manager.rs"]
mod cert_manager;
#[path = "../support/control_plane.rs"]
mod control_plane;

mod application;
mod cert_manager_tls;
mod cluster;
mod configsum_pods;
mod explain;
mod shards;
mod waves;
