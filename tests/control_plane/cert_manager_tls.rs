//! The chart's default TLS path (`tls.mode: certManager`) against a real cert-manager
//! (tests/support/cert_manager.rs): the chart's Issuers and Certificates become Ready, the
//! serving certificate's Secret is issued, the CA injector fills the webhook configuration's
//! `caBundle` with the root, and `configsum serve`, given that Secret, presents a certificate
//! that the injected root verifies for the chart's Service name. When the root is renewed, the
//! injector keeps the old root beside the new one in the bundle, which so still verifies the
//! leaf the old root signed.
//!
//! Its own control plane: the shared one's installation uses `tls.mode=secret`.

use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::Value;

use crate::cert_manager::{ready, renew};
use crate::chart::{CHART, Helm, RELEASE};
use crate::control_plane::ControlPlane;
use crate::install::{KEY, SYSTEM, run, start_serve};
use crate::server::TempDir;

/// Polls `read` every 200 ms until it returns something; panics naming `what` after 90 s.
fn wait_for<T>(what: &str, mut read: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(found) = read() {
            return found;
        }
        assert!(Instant::now() < deadline, "{what}: not within 90 s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The DER bytes of each certificate of a PEM bundle.
fn certificates(pem: &[u8]) -> Vec<Vec<u8>> {
    use rustls::pki_types::pem::PemObject as _;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem)
        .map(|certificate| certificate.expect("a PEM certificate").to_vec())
        .collect()
}

/// A field of a Secret's data, decoded.
fn secret_field(secret: &Value, field: &str) -> Option<Vec<u8>> {
    let encoded = secret["data"][field].as_str()?;
    base64::engine::general_purpose::STANDARD.decode(encoded).ok()
}

#[test]
fn cert_manager_issues_the_serving_certificate_and_injects_its_root() {
    run(async {
        let cp = tokio::task::spawn_blocking(|| ControlPlane::start(&[])).await.expect("start");
        crate::cert_manager::start(&cp);

        // The chart as a user installs it: its TLS values left at their defaults.
        let output = Helm::V3
            .command()
            .env("KUBECONFIG", &cp.kubeconfig)
            .args(["install", RELEASE, CHART, "--namespace", SYSTEM, "--create-namespace"])
            .output()
            .expect("helm install");
        assert!(
            output.status.success(),
            "helm install: {}",
            String::from_utf8_lossy(&output.stderr)
        );

        let started = Instant::now();
        for certificate in ["configsum-root-ca", "configsum-webhook"] {
            wait_for(&format!("Certificate {certificate} Ready"), || {
                ready(&cp.get_json(&["certificate", certificate, "-n", SYSTEM])).then_some(())
            });
        }
        let issued = started.elapsed();
        let leaf = cp.get_json(&["secret", "configsum-webhook-tls", "-n", SYSTEM]);
        let root = cp.get_json(&["secret", "configsum-root-ca", "-n", SYSTEM]);
        let root_certificate = secret_field(&root, "tls.crt").expect("the root's certificate");
        assert_eq!(
            secret_field(&leaf, "ca.crt").as_ref(),
            Some(&root_certificate),
            "the leaf is signed by the chart's root CA"
        );

        // The injector fills the caBundle the chart leaves empty, with the root.
        let bundle = wait_for("the caBundle injected", || {
            let configuration = cp.get_json(&["mutatingwebhookconfiguration", "configsum"]);
            let bundle = configuration["webhooks"][0]["clientConfig"]["caBundle"].as_str()?;
            base64::engine::general_purpose::STANDARD.decode(bundle).ok()
        });
        assert_eq!(bundle, root_certificate, "the caBundle is the root, which outlives leaves");
        let injected = started.elapsed();
        eprintln!(
            "cert-manager: Certificates Ready in {:.1} s, caBundle injected in {:.1} s",
            issued.as_secs_f64(),
            injected.as_secs_f64()
        );

        // serve given the issued Secret, as the chart mounts it, and the injected bundle as
        // the API server would trust it.
        let dir = TempDir(cp.dir.join("cert-manager"));
        std::fs::create_dir_all(&dir.0).expect("dir");
        std::fs::write(dir.path("digest.key"), KEY).expect("key");
        for (field, file) in [("tls.crt", "tls.crt"), ("tls.key", "tls.key")] {
            std::fs::write(dir.path(file), secret_field(&leaf, field).expect(field)).expect(file);
        }
        std::fs::write(dir.path("ca.crt"), &bundle).expect("ca.crt");
        let webhook = start_serve(&cp, &dir, "configsum-webhook").await;
        let service = format!("configsum-webhook.{SYSTEM}.svc");
        webhook.handshake_as(&service).await.expect("the issued certificate, verified by the root");
        assert!(
            webhook.handshake_as("localhost").await.is_err(),
            "the certificate names the Service only"
        );

        // The root renewed (as cert-manager does 30 days before its 10 years end): the injector
        // puts the new root in the caBundle at once, while serve still presents the leaf the old
        // root signed, until that leaf's own renewal, up to 60 days later. The API server must
        // keep verifying it, or every review in between fails open.
        renew(&cp, SYSTEM, "configsum-root-ca");
        let renewed = wait_for("the renewed root injected", || {
            let configuration = cp.get_json(&["mutatingwebhookconfiguration", "configsum"]);
            let bundle = configuration["webhooks"][0]["clientConfig"]["caBundle"].as_str()?;
            let bundle = base64::engine::general_purpose::STANDARD.decode(bundle).ok()?;
            (bundle != root_certificate).then_some(bundle)
        });
        // cert-manager's injector merges: the old root stays in the bundle until it expires.
        let (old, now) = (certificates(&root_certificate), certificates(&renewed));
        assert_eq!(now.len(), 2, "the old root and the new");
        assert!(now.contains(&old[0]), "the old root kept");
        // serve's files are the old leaf's: the test wrote them and leaves them be.
        std::fs::write(dir.path("ca.crt"), &renewed).expect("ca.crt");
        webhook
            .handshake_as(&service)
            .await
            .expect("the renewed root verifies the leaf the old root signed");
        cp.stop();
    });
}
