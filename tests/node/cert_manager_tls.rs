//! The chart's default TLS path on the node: scripts/cluster.sh runs cert-manager's controller
//! and CA injector beside the node (tests/support/cert_manager.rs) and installs the chart with
//! `tls.mode` at its default, `certManager`. cert-manager issued the webhook's certificate and
//! injected its root, and the API server calls the webhook through the chart's Service over that
//! TLS (every test of this binary relies on it). Here: the leaf renewed while workloads are
//! written 20 a second (dry runs, admitted in full); every write is admitted with its digest,
//! the API server counts no call failed open, and the webhook's pods serve the new certificate
//! without a restart. Then the root renewed under the same writes: the injector keeps the old
//! root beside the new, and still nothing fails open.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tokio_rustls::rustls;

use crate::cert_manager::{ready, renew};
use crate::cluster::*;
use crate::control_plane::ControlPlane;

const SERVICE: &str = "configsum-webhook.configsum-system.svc";
const RATE: u32 = 20;

fn decoded(value: &Value) -> Vec<u8> {
    let encoded = value.as_str().expect("base64 data");
    base64::engine::general_purpose::STANDARD.decode(encoded).expect("base64")
}

/// The first certificate of a PEM bundle, as DER.
fn first_der(pem: &[u8]) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject as _;
    let mut certificates = rustls::pki_types::CertificateDer::pem_slice_iter(pem);
    certificates.next().expect("a certificate").expect("PEM").to_vec()
}

fn serial(der: &[u8]) -> String {
    use x509_cert::der::Decode as _;
    let certificate = x509_cert::Certificate::from_der(der).expect("an X.509 certificate");
    let bytes = certificate.tbs_certificate.serial_number.as_bytes().to_vec();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn certificates_in(pem: &[u8]) -> usize {
    use rustls::pki_types::pem::PemObject as _;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem).count()
}

/// The webhook configuration's caBundle, PEM.
fn ca_bundle(cp: &ControlPlane) -> Vec<u8> {
    let configuration = cp.get_json(&["mutatingwebhookconfiguration", "configsum"]);
    decoded(&configuration["webhooks"][0]["clientConfig"]["caBundle"])
}

/// The leaf the Secret holds now, DER.
fn leaf_in_secret(cp: &ControlPlane) -> Vec<u8> {
    let secret = cp.get_json(&["secret", "configsum-webhook-tls", "-n", SYSTEM]);
    first_der(&decoded(&secret["data"]["tls.crt"]))
}

/// The certificate the webhook at `ip` presents, verified by `bundle` for the Service's name.
async fn served_by(ip: &str, bundle: &[u8]) -> Result<Vec<u8>, String> {
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    for certificate in rustls::pki_types::CertificateDer::pem_slice_iter(bundle) {
        roots.add(certificate.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp =
        tokio::net::TcpStream::connect(format!("{ip}:8443")).await.map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from(SERVICE).map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let (_, connection) = tls.get_ref();
    let chain = connection.peer_certificates().ok_or("no certificate")?;
    Ok(chain.first().ok_or("an empty chain")?.to_vec())
}

/// The webhook's pods: name and IP, and what says whether its process restarted.
fn webhook_pods(cp: &ControlPlane) -> Vec<(String, String, Value)> {
    let list =
        cp.get_json(&["pods", "-n", SYSTEM, "-l", "app.kubernetes.io/name=configsum-webhook"]);
    let pods = list["items"].as_array().cloned().unwrap_or_default();
    pods.iter()
        .map(|pod| {
            let status = &pod["status"]["containerStatuses"][0];
            let identity = json!({
                "uid": pod["metadata"]["uid"],
                "containerID": status["containerID"],
                "restartCount": status["restartCount"],
                "startedAt": status["state"]["running"]["startedAt"],
            });
            let name = pod["metadata"]["name"].as_str().unwrap_or_default().to_owned();
            (name, pod["status"]["podIP"].as_str().unwrap_or_default().to_owned(), identity)
        })
        .collect()
}

/// A Deployment of no replicas reading `renewal-config`: the webhook's work without pods.
fn workload(namespace: &str, name: &str) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{
                    "name": "app",
                    "image": app_image(),
                    "envFrom": [{"configMapRef": {"name": "renewal-config"}}],
                }]},
            },
        },
    }))
    .expect("a Deployment")
}

async fn client(cp: &ControlPlane) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(&cp.kubeconfig).expect("kubeconfig");
    let options = kube::config::KubeConfigOptions::default();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options).await.expect("config");
    kube::Client::try_from(config).expect("a client")
}

#[test]
fn leaf_and_root_renewed_under_writes_fail_none_open_and_serve_needs_no_restart() {
    let _shared = sharing();
    let cp = cluster();
    for certificate in ["configsum-root-ca", "configsum-webhook"] {
        let found = cp.get_json(&["certificate", certificate, "-n", SYSTEM]);
        assert!(ready(&found), "{certificate} issued at install: {found}");
    }
    let bundle = ca_bundle(cp);
    let root = cp.get_json(&["secret", "configsum-root-ca", "-n", SYSTEM]);
    assert_eq!(
        first_der(&bundle),
        first_der(&decoded(&root["data"]["tls.crt"])),
        "the injected caBundle is the chart's root"
    );
    let old_leaf = leaf_in_secret(cp);
    let pods = webhook_pods(cp);
    assert_eq!(pods.len(), 2, "two webhook pods: {pods:?}");

    let namespace = "tls-renewal";
    namespace_with(cp, namespace, &[config_map(namespace, "renewal-config", &[("v", "1")])]);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        for (name, ip, _) in &pods {
            let served = served_by(ip, &bundle).await.expect("the webhook's TLS");
            assert_eq!(served, old_leaf, "{name} serves the Secret's leaf");
        }
        let failed_before = failed_open(cp);
        let deployments: Api<Deployment> = Api::namespaced(client(cp).await, namespace);

        // Writes at RATE a second, each in its own task so that a slow one delays no other.
        // Dry runs: the API server admits each in full, calling the webhook (`sideEffects:
        // None`) and counting a call that fails open, but stores nothing, so that a thousand
        // writes leave no Deployments for kube-controller-manager to work through while the
        // other tests roll theirs.
        let dry_run = PostParams { dry_run: true, ..PostParams::default() };
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let writer = tokio::spawn({
            let deployments = deployments.clone();
            async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1) / RATE);
                let mut writes = Vec::new();
                for n in 0.. {
                    tokio::select! {
                        _ = tick.tick() => {}
                        _ = stopped.changed() => break,
                    }
                    let (deployments, dry_run) = (deployments.clone(), dry_run.clone());
                    writes.push(tokio::spawn(async move {
                        let name = format!("renewal-{n}");
                        let created =
                            deployments.create(&dry_run, &workload(namespace, &name)).await;
                        let annotated = created.as_ref().is_ok_and(|d| {
                            let template =
                                d.spec.as_ref().and_then(|s| s.template.metadata.as_ref());
                            template.and_then(|m| m.annotations.as_ref()).is_some_and(|a| {
                                a.contains_key("configmap.configsum.dev/renewal-config")
                            })
                        });
                        (name, created.err().map(|e| e.to_string()), annotated)
                    }));
                }
                let mut results = Vec::new();
                for write in writes {
                    results.push(write.await.expect("a write"));
                }
                results
            }
        });

        tokio::time::sleep(Duration::from_secs(2)).await;
        let renewed_at = Instant::now();
        renew(cp, SYSTEM, "configsum-webhook");
        let mut secret_after = None;
        let new_leaf = loop {
            let leaf = leaf_in_secret(cp);
            if leaf != old_leaf {
                secret_after.get_or_insert(renewed_at.elapsed());
                let mut all = true;
                for (_, ip, _) in &pods {
                    all &= served_by(ip, &bundle).await.is_ok_and(|served| served == leaf);
                }
                if all {
                    break leaf;
                }
            }
            assert!(renewed_at.elapsed() < Duration::from_secs(240), "no pod serves a new leaf");
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let served_after = renewed_at.elapsed();
        // Writes go on a little after the switch, which is where a reload would drop them.
        tokio::time::sleep(Duration::from_secs(3)).await;

        // Then the root, with a new key: the injector merges the new root into the caBundle
        // beside the old one, which still verifies the leaf being served (the old root signed
        // it) until that leaf's own renewal. Writes go on throughout.
        let root_renewed_at = Instant::now();
        renew(cp, SYSTEM, "configsum-root-ca");
        let merged = loop {
            let bundle = ca_bundle(cp);
            if certificates_in(&bundle) == 2 {
                break bundle;
            }
            assert!(root_renewed_at.elapsed() < Duration::from_secs(60), "no new root injected");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let root_injected = root_renewed_at.elapsed();
        // The API server takes the changed configuration from its watch, within a second or so.
        tokio::time::sleep(Duration::from_secs(5)).await;
        for (name, ip, _) in &pods {
            let served = served_by(ip, &merged).await.expect("the old root's leaf, verified");
            assert_eq!(served, new_leaf, "{name} serves the leaf the old root signed");
        }
        stop.send(true).expect("the writer");
        let results = writer.await.expect("the writer");

        let failed: Vec<_> = results.iter().filter(|(_, error, _)| error.is_some()).collect();
        assert!(failed.is_empty(), "writes refused: {failed:?}");
        let bare: Vec<&String> = results
            .iter()
            .filter(|(_, _, annotated)| !annotated)
            .map(|(name, _, _)| name)
            .collect();
        assert!(bare.is_empty(), "admitted without their digest: {bare:?}");
        let failed_open_during = failed_open(cp) - failed_before;
        assert_eq!(failed_open_during, 0.0, "calls the API server failed open");
        let after = webhook_pods(cp);
        assert_eq!(after, pods, "the same pods and processes, no restart");
        report(&format!(
            "node: leaf then root renewed under {RATE} writes/s: {} writes, all with digests, {} \
             failed open; leaf: Secret updated after {:.1} s, every webhook pod served it after \
             {:.1} s (serial {} -> {}), no restart; root: merged into the caBundle after {:.1} s",
            results.len(),
            failed_open_during,
            secret_after.unwrap_or_default().as_secs_f64(),
            served_after.as_secs_f64(),
            serial(&old_leaf),
            serial(&new_leaf),
            root_injected.as_secs_f64(),
        ));
    });
}
