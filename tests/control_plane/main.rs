//! configsum against a real Kubernetes control plane: kube-apiserver, etcd and
//! kube-controller-manager built from Go modules and started on loopback by
//! scripts/control-plane.sh (docs/testing.md). The chart is installed with the real Helm; the
//! real `configsum serve` and `configsum controller` run outside the cluster as the chart's
//! ServiceAccounts (tokens from the TokenRequest API), and the API server calls the webhook by
//! URL on loopback.
//!
//! One control plane and one installation serve every test of this binary; each test works in
//! namespaces of its own. Tests that restart kube-apiserver (relist, differential) start a
//! control plane of their own.

#[path = "../support/cert_manager.rs"]
mod cert_manager;
#[path = "../support/chart.rs"]
mod chart;
#[path = "../support/control_plane.rs"]
mod control_plane;
#[path = "../support/digests.rs"]
mod digests;
#[path = "../support/fake_apiserver.rs"]
mod fake_apiserver;
#[path = "../support/registry.rs"]
mod registry;
#[path = "../support/server.rs"]
mod server;

mod across_namespaces;
mod cert_manager_tls;
mod controller;
mod csi;
mod custom_kinds;
mod differential;
mod explain;
mod gitops;
mod install;
mod object_say;
mod relist;
mod render;
mod scoped_install;
mod seen_by_apiserver;
mod shards;
mod teardown;
mod undo;
mod webhook;
