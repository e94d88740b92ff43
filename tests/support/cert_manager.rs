//! A real cert-manager beside a control plane: its controller and CA injector as built by
//! scripts/cert-manager.sh (cached), its CRDs applied, both processes adopted by the control
//! plane so that stopping it stops them; and what the tests ask of cert-manager.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::control_plane::ControlPlane;

/// The cached build: bin/cert-manager and the CRDs of the same module version.
fn build() -> PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let output = Command::new(root.join("scripts/cert-manager.sh"))
        .arg("build")
        .stdin(Stdio::null())
        .output()
        .expect("run scripts/cert-manager.sh");
    assert!(
        output.status.success(),
        "scripts/cert-manager.sh build: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
}

/// Applies cert-manager's CRDs to `cp`, waits until they are served, and starts its controller
/// and CA injector with the control plane's admin kubeconfig; their logs go to
/// `<cp.dir>/logs/cert-manager-{controller,cainjector}.log`.
pub fn start(cp: &ControlPlane) {
    let dir = build();
    cp.kubectl_ok(&["apply", "--server-side", "-f", &dir.join("crds").display().to_string()]);
    cp.wait_established(&[
        "crd/certificates.cert-manager.io",
        "crd/certificaterequests.cert-manager.io",
        "crd/issuers.cert-manager.io",
        "crd/clusterissuers.cert-manager.io",
    ]);
    for component in ["controller", "cainjector"] {
        let log = std::fs::File::create(cp.dir.join(format!("logs/cert-manager-{component}.log")))
            .expect("a log file");
        let mut child = Command::new(dir.join("bin/cert-manager"))
            .arg(component)
            .arg("--kubeconfig")
            .arg(&cp.kubeconfig)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("the log file"))
            .stderr(log)
            .spawn()
            .expect("start cert-manager");
        cp.adopt(child.id(), &format!("cert-manager-{component}"));
        // Stopped with the control plane (`down` kills what it adopted); reaped here then.
        std::thread::spawn(move || child.wait());
    }
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
