//! A real cert-manager beside a control plane (scripts/cert-manager.sh: its controller and CA
//! injector, built and cached, stopped with the control plane), and what the tests ask of it.
#![allow(dead_code)]

use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::control_plane::{ControlPlane, repository};

/// cert-manager on `cp`, as `make cluster` starts it (scripts/cert-manager.sh up): its CRDs
/// applied and served, its controller and CA injector running as the control plane's admin,
/// logging to `<cp.dir>/logs/cert-manager-{controller,cainjector}.log`, and stopped with it.
pub fn start(cp: &ControlPlane) {
    let output = Command::new(repository().join("scripts/cert-manager.sh"))
        .arg("up")
        .arg(&cp.dir)
        .stdin(Stdio::null())
        .output()
        .expect("run scripts/cert-manager.sh");
    assert!(
        output.status.success(),
        "scripts/cert-manager.sh up: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Whether a Certificate (as JSON) has the condition Ready=True.
pub fn ready(certificate: &Value) -> bool {
    certificate["status"]["conditions"].as_array().is_some_and(|conditions| {
        conditions.iter().any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// Asks cert-manager to issue Certificate `name` of `namespace` again now, as `cmctl renew`
/// does: the `Issuing` condition, set through the status subresource.
pub fn renew(cp: &ControlPlane, namespace: &str, name: &str) {
    let condition = json!({
        "type": "Issuing",
        "status": "True",
        "reason": "ManuallyTriggered",
        "message": "renewal asked for by the test",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    });
    let patch = json!([{"op": "add", "path": "/status/conditions/-", "value": condition}]);
    cp.kubectl_ok(&[
        "patch",
        "certificate",
        name,
        "-n",
        namespace,
        "--subresource=status",
        "--type=json",
        "-p",
        &patch.to_string(),
    ]);
}
