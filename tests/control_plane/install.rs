//! The installation every test of this binary shares: the chart installed by Helm 3 into
//! configsum-system (`tls.mode=secret` with a test CA), and the real `configsum serve` running
//! on loopback as the chart's `configsum-webhook` ServiceAccount, the chart's
//! MutatingWebhookConfiguration pointed at it by URL.
//!
//! Tests are plain `#[test]` functions that run on one runtime ([`run`]), so that processes
//! started by one test (the webhook) outlive it and serve the next.

use std::future::Future;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use crate::chart::{CHART, Helm, RELEASE};
use crate::control_plane::{ControlPlane, shared};
pub use crate::control_plane::{config_map, secret};
use crate::server::{Server, TempDir, install_crypto_provider, make_certs};

pub const SYSTEM: &str = "configsum-system";
/// The digest key of every configsum process here.
pub const KEY: &str = "0123456789abcdef0123456789abcdef\n";

/// Runs `future` on the binary's one runtime.
pub fn run<F: Future>(future: F) -> F::Output {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a runtime")
        })
        .block_on(future)
}

pub struct Installation {
    pub cp: &'static ControlPlane,
    pub dir: TempDir,
    /// `configsum serve` as the chart's webhook ServiceAccount.
    pub webhook: Server,
    pub helm_output: String,
}

/// The shared installation, made on first use.
pub async fn installation() -> &'static Installation {
    static INSTALLATION: OnceCell<Installation> = OnceCell::const_new();
    INSTALLATION.get_or_init(install).await
}

async fn install() -> Installation {
    install_crypto_provider();
    let cp = tokio::task::spawn_blocking(shared).await.expect("the control plane");
    // Inside the control plane's directory, which outlives this binary for a failure to be read.
    let dir = TempDir(cp.dir.join("install"));
    std::fs::create_dir_all(&dir.0).expect("install directory");
    make_certs(&dir.0, "ec-sec1");
    std::fs::write(dir.path("digest.key"), KEY).expect("key");

    let ca = dir.path("ca.crt").display().to_string();
    let mut helm = Helm::V3.command();
    helm.env("KUBECONFIG", &cp.kubeconfig).args([
        "install",
        RELEASE,
        CHART,
        "--namespace",
        SYSTEM,
        "--create-namespace",
        "--set",
        "tls.mode=secret",
        "--set-file",
        &format!("tls.caBundle={ca}"),
    ]);
    let output = helm.output().expect("helm install");
    assert!(
        output.status.success(),
        "helm install: every object must be accepted by the real API server:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let helm_output = String::from_utf8_lossy(&output.stdout).into_owned();

    let webhook = start_serve(cp, &dir, "configsum-webhook").await;
    point_webhook_at(cp, "configsum", &webhook.addr, &dir.path("ca.crt"));
    let installation = Installation { cp, dir, webhook, helm_output };
    installation.wait_until_the_webhook_is_called().await;
    installation
}

/// `configsum serve` on loopback, authenticated as `service_account` of configsum-system.
pub async fn start_serve(cp: &ControlPlane, dir: &TempDir, service_account: &str) -> Server {
    start_serve_with(cp, dir, service_account, &[]).await
}

/// The same with `extra` arguments (registry flags, say).
pub async fn start_serve_with(
    cp: &ControlPlane,
    dir: &TempDir,
    service_account: &str,
    extra: &[&str],
) -> Server {
    start_serve_in(cp, dir, SYSTEM, service_account, extra).await
}

/// The same as `service_account` of `namespace`, which is also its own (`POD_NAMESPACE`).
pub async fn start_serve_in(
    cp: &ControlPlane,
    dir: &TempDir,
    namespace: &str,
    service_account: &str,
    extra: &[&str],
) -> Server {
    let kubeconfig = cp.kubeconfig_as(namespace, service_account).display().to_string();
    let (cert, key, digest_key) = (
        dir.path("tls.crt").display().to_string(),
        dir.path("tls.key").display().to_string(),
        dir.path("digest.key").display().to_string(),
    );
    let mut args = vec!["--tls-cert", &cert, "--tls-key", &key, "--digest-key-file", &digest_key];
    args.extend_from_slice(extra);
    let env = [("KUBECONFIG", kubeconfig.as_str()), ("POD_NAMESPACE", namespace)];
    let server = Server::start(&args, &env, &dir.path("ca.crt")).await;
    cp.adopt(server.child.id().expect("running"), &format!("configsum-serve-{service_account}"));
    server
}

/// Replaces the service reference of webhook configuration `name` with the URL of a webhook on
/// loopback, keeping everything else the chart rendered.
pub fn point_webhook_at(cp: &ControlPlane, name: &str, addr: &str, ca: &std::path::Path) {
    let ca = std::fs::read(ca).expect("CA");
    let patch = json!([{"op": "replace", "path": "/webhooks/0/clientConfig", "value": {
        "url": format!("https://{addr}/mutate"),
        "caBundle": base64::engine::general_purpose::STANDARD.encode(ca),
    }}]);
    cp.kubectl_ok(&[
        "patch",
        "mutatingwebhookconfiguration",
        name,
        "--type=json",
        "-p",
        &patch.to_string(),
    ]);
}

impl Installation {
    /// The API server picks a changed webhook configuration up from its own watch: wait until
    /// a Deployment in an opted-in namespace gets digests.
    async fn wait_until_the_webhook_is_called(&self) {
        let namespace = "probe";
        self.cp.namespace(namespace, true);
        let deadline = Instant::now() + Duration::from_secs(30);
        for attempt in 0.. {
            let name = format!("probe-{attempt}");
            self.cp.apply(&deployment(namespace, &name, &[("probe-config", ConsumeAs::EnvFrom)]));
            let annotations = self.template_annotations(namespace, &name);
            if annotations.get("configmap.configsum.dev/probe-config").is_some() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the API server did not call the webhook: {:?}",
                self.webhook.logs()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The pod-template annotations of a Deployment.
    pub fn template_annotations(&self, namespace: &str, name: &str) -> Value {
        let deployment = self.cp.get_json(&["deployment", name, "-n", namespace]);
        let annotations = &deployment["spec"]["template"]["metadata"]["annotations"];
        if annotations.is_null() { json!({}) } else { annotations.clone() }
    }

    /// The webhook's "admission answered" lines for objects of `namespace`.
    pub fn reviews_in(&self, namespace: &str) -> Vec<String> {
        let needle = format!("\"object\":\"{namespace}/");
        self.webhook.logs().into_iter().filter(|line| line.contains(&needle)).collect()
    }

    /// As [`Self::reviews_in`], once there is one: the webhook writes its log lines in
    /// batches, a moment after it answers.
    pub async fn reviews_logged_in(&self, namespace: &str) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let reviews = self.reviews_in(namespace);
            if !reviews.is_empty() || Instant::now() >= deadline {
                return reviews;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path(name)
    }
}

/// How a Deployment consumes a ConfigMap or Secret.
#[derive(Clone, Copy)]
pub enum ConsumeAs {
    EnvFrom,
    SecretEnvFrom,
}

/// A Deployment with one container consuming `objects`.
pub fn deployment(namespace: &str, name: &str, objects: &[(&str, ConsumeAs)]) -> String {
    deployment_with_image(namespace, name, "registry.example/app:1", objects)
}

/// The same with another image, so that an apply writes the Deployment.
pub fn deployment_with_image(
    namespace: &str,
    name: &str,
    image: &str,
    objects: &[(&str, ConsumeAs)],
) -> String {
    let env_from: Vec<Value> = objects
        .iter()
        .map(|(object, how)| match how {
            ConsumeAs::EnvFrom => json!({"configMapRef": {"name": object}}),
            ConsumeAs::SecretEnvFrom => json!({"secretRef": {"name": object}}),
        })
        .collect();
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": image,
                    "envFrom": env_from}]}}}})
    .to_string()
}
