//! The cluster every test of this binary shares, and what the tests ask of it: config-echo
//! Deployments, their pods, and what each pod serves.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Output;
use std::sync::{OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub use crate::control_plane::{ControlPlane, config_map, secret};

pub const SYSTEM: &str = "configsum-system";

/// config-echo's image as `make node-images` tags it and the node imports it.
pub fn app_image() -> String {
    format!("config-echo:{}", env!("CARGO_PKG_VERSION"))
}

/// The cluster of this binary, started on first use (scripts/cluster.sh; about 30 s).
pub fn cluster() -> &'static ControlPlane {
    static CLUSTER: OnceLock<ControlPlane> = OnceLock::new();
    CLUSTER.get_or_init(ControlPlane::start_cluster)
}

static CONFIGSUM_PODS: RwLock<()> = RwLock::new(());

/// Held by a test that relies on configsum's pods serving: many at once.
pub fn sharing() -> RwLockReadGuard<'static, ()> {
    CONFIGSUM_PODS.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Held by a test that deletes configsum's pods: alone.
pub fn disrupting() -> RwLockWriteGuard<'static, ()> {
    CONFIGSUM_PODS.write().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A measurement for the run's output, written to stderr itself: the test harness captures
/// `println!`, and `make test` should show these (benchmark output, never asserted).
pub fn report(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Polls `check` every 200 ms until it holds; panics naming `what` after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A namespace opted in to configsum, with `objects` (YAML or JSON documents) applied in it.
pub fn namespace_with(cp: &ControlPlane, namespace: &str, objects: &[String]) {
    cp.namespace(namespace, true);
    for object in objects {
        cp.apply(object);
    }
}

/// The chart's helm (Helm 3) against the cluster, with its own homes under the cluster's
/// directory: `args` as given, run from the repository's root.
#[must_use = "helm's exit status says whether it did anything"]
pub fn helm(cp: &ControlPlane, args: &[&str]) -> Output {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    std::process::Command::new(root.join("target/tools/helm3/helm"))
        .current_dir(root)
        .args(args)
        .env("KUBECONFIG", &cp.kubeconfig)
        .env("HELM_CACHE_HOME", cp.dir.join("helm/cache"))
        .env("HELM_CONFIG_HOME", cp.dir.join("helm/config"))
        .env("HELM_DATA_HOME", cp.dir.join("helm/data"))
        .output()
        .expect("run helm")
}

/// An opted-in namespace with config-echo `api` reading `api-config` (value v1) and
/// `api-secret` (password p1), once every pod serves them.
pub fn api_serving_v1(cp: &ControlPlane, namespace: &str) {
    namespace_with(
        cp,
        namespace,
        &[
            config_map(namespace, "api-config", &[("value", "v1")]),
            secret(namespace, "api-secret", &[("password", "p1")]),
            app(namespace, "api", 1).to_string(),
        ],
    );
    served_by_every_pod(cp, namespace, "api");
}

/// A Deployment of config-echo, `app=<name>`: `VALUE` from key `value` of ConfigMap
/// `<name>-config` (env), the file `password` of Secret `<name>-secret` (a volume), and
/// `EXIT_CODE` from the ConfigMap's optional key `exit-code`. Ready when it serves.
pub fn app(namespace: &str, name: &str, replicas: u32) -> Value {
    let config = format!("{name}-config");
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{"name": "app", "image": app_image(),
                        "imagePullPolicy": "Never",
                        "env": [
                            {"name": "VALUE", "valueFrom":
                                {"configMapKeyRef": {"name": config, "key": "value"}}},
                            {"name": "EXIT_CODE", "valueFrom": {"configMapKeyRef":
                                {"name": config, "key": "exit-code", "optional": true}}},
                            {"name": "VALUE_FILE", "value": "/etc/secret/password"}],
                        "ports": [{"name": "http", "containerPort": 8080}],
                        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"},
                            "periodSeconds": 1},
                        "volumeMounts": [{"name": "secret", "mountPath": "/etc/secret",
                            "readOnly": true}]}],
                    "volumes": [{"name": "secret",
                        "secret": {"secretName": format!("{name}-secret")}}]}}}})
}

/// A pod of an application, as its status says.
#[derive(Clone, Debug)]
pub struct Pod {
    pub name: String,
    pub ip: Option<String>,
    pub ready: bool,
    pub terminating: bool,
    /// Its ReplicaSet's `pod-template-hash`: which template it runs.
    pub template: String,
    pub json: Value,
}

impl Pod {
    /// A pod as the API server returns it.
    pub fn from_json(pod: &Value) -> Pod {
        Pod {
            name: pod["metadata"]["name"].as_str().unwrap_or_default().to_owned(),
            ip: pod["status"]["podIP"].as_str().map(str::to_owned),
            ready: pod["status"]["conditions"].as_array().is_some_and(|conditions| {
                conditions.iter().any(|c| c["type"] == "Ready" && c["status"] == "True")
            }),
            terminating: !pod["metadata"]["deletionTimestamp"].is_null(),
            template: pod["metadata"]["labels"]["pod-template-hash"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            json: pod.clone(),
        }
    }
}

/// The pods labelled `app=<app>` in `namespace`.
pub fn pods(cp: &ControlPlane, namespace: &str, app: &str) -> Vec<Pod> {
    let list = cp.get_json(&["pods", "-n", namespace, "-l", &format!("app={app}")]);
    list["items"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(Pod::from_json)
        .collect()
}

/// What config-echo at `ip` serves: the values its process read when it started.
pub fn served(ip: &str) -> Value {
    let address: SocketAddr = format!("{ip}:8080").parse().expect("a pod address");
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2))
        .unwrap_or_else(|e| panic!("connect to {address}: {e}"));
    stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: config-echo\r\nConnection: close\r\n\r\n")
        .expect("request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("response");
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// `kubectl rollout status deployment/<name>`, waiting up to `timeout`.
pub fn rollout_status(cp: &ControlPlane, namespace: &str, name: &str, timeout: &str) -> Output {
    cp.kubectl(&[
        "rollout",
        "status",
        &format!("deployment/{name}"),
        "-n",
        namespace,
        &format!("--timeout={timeout}"),
    ])
}

/// Waits for `kubectl rollout status` of a Deployment to complete.
pub fn rolled_out(cp: &ControlPlane, namespace: &str, name: &str) {
    let output = rollout_status(cp, namespace, name, "180s");
    assert!(
        output.status.success(),
        "rollout of {namespace}/{name}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Once the rollout of `app` is complete and every old pod is gone: what each pod serves.
pub fn served_by_every_pod(cp: &ControlPlane, namespace: &str, app: &str) -> Vec<Value> {
    rolled_out(cp, namespace, app);
    let mut current = Vec::new();
    wait_until(
        &format!("only ready pods of one template in {namespace}"),
        Duration::from_secs(60),
        || {
            current = pods(cp, namespace, app);
            let templates: std::collections::BTreeSet<&str> =
                current.iter().map(|p| p.template.as_str()).collect();
            templates.len() == 1 && current.iter().all(|p| p.ready && !p.terminating)
        },
    );
    current.iter().map(|pod| served(pod.ip.as_deref().expect("a ready pod's IP"))).collect()
}

/// The Deployment's pod-template annotations.
pub fn template_annotations(cp: &ControlPlane, namespace: &str, name: &str) -> Value {
    let deployment = cp.get_json(&["deployment", name, "-n", namespace]);
    deployment["spec"]["template"]["metadata"]["annotations"].clone()
}

/// `configsum explain <args> --output json` as the admin, from this machine.
pub fn explain(cp: &ControlPlane, args: &[&str]) -> Value {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_configsum"))
        .arg("explain")
        .args(args)
        .args(["--output", "json"])
        .env("KUBECONFIG", &cp.kubeconfig)
        .output()
        .expect("run configsum explain");
    assert!(
        output.status.code() == Some(0),
        "explain {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("explain's JSON")
}

/// The API server's count of calls to configsum's webhook that failed open.
pub fn failed_open(cp: &ControlPlane) -> f64 {
    cp.kubectl_ok(&["get", "--raw", "/metrics"])
        .lines()
        .filter(|l| l.starts_with("apiserver_admission_webhook_fail_open_count"))
        .filter(|l| l.contains("name=\"mutate.configsum.dev\""))
        .filter_map(|l| l.rsplit(' ').next().and_then(|n| n.parse::<f64>().ok()))
        .sum()
}
