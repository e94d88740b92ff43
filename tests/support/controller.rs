//! The controller's test harness: the real `configsum controller` binary
//! against the fake API server, and the cluster as the test sees it.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use configsum::core::model::kinds::WorkloadKind;
use serde_json::{Value, json};
use tokio::process::Child;

use super::digests;
use super::fake_apiserver::FakeApiServer;
use super::fixtures::{self, Admit, Objects, apply};
use super::server::{self, TempDir};

pub const LEASE_PATH: &str =
    "/apis/coordination.k8s.io/v1/namespaces/configsum-system/leases/configsum-controller";

/// The API path of a workload of a declared kind.
pub fn workload_path(kind: &str, namespace: &str, name: &str) -> String {
    let (group, version) = fixtures::group_version(kind);
    let declared = WorkloadKind::from_gvk(group, version, kind)
        .unwrap_or_else(|| panic!("not a declared kind: {kind}"));
    let (group, _, plural) = declared.resource();
    let root = if group.is_empty() { "/api" } else { "/apis" };
    format!("{root}/{}/namespaces/{namespace}/{plural}/{name}", declared.api_version())
}

pub const NS: &str = "team-a";
pub const KEY: &str = "0123456789abcdef0123456789abcdef\n";
pub const SECRET_KEY: &str = "secret.configsum.dev/db";

pub struct Controller {
    pub child: Child,
    pub metrics_addr: String,
    pub logs: Arc<Mutex<Vec<String>>>,
    /// Its `--identity`, which is also its bearer token.
    pub identity: String,
}

impl Controller {
    pub async fn start(
        api: &FakeApiServer,
        dir: &TempDir,
        identity: &str,
        extra: &[&str],
    ) -> Controller {
        Controller::start_with_env(api, dir, identity, extra, &[]).await
    }

    /// The same, with `env` set for the process (as the Deployment sets `POD_NAMESPACE`).
    pub async fn start_with_env(
        api: &FakeApiServer,
        dir: &TempDir,
        identity: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Controller {
        // Each replica authenticates with its own token (its identity), so
        // faults and the request log can tell replicas apart.
        let kubeconfig = api.kubeconfig_for(&dir.0, identity).display().to_string();
        let key = dir.path("digest.key");
        std::fs::write(&key, KEY).expect("key");
        let key = key.display().to_string();
        let mut args = vec![
            "controller",
            "--digest-key-file",
            key.as_str(),
            "--metrics-listen",
            "127.0.0.1:0",
            "--window",
            "500ms",
            "--lease-namespace",
            "configsum-system",
            "--identity",
            identity,
            "--log-format",
            "json",
        ];
        // Short, so that take-overs are quick to test; a test may ask for longer.
        if !extra.contains(&"--lease-duration") {
            args.extend(["--lease-duration", "3s"]);
        }
        args.extend_from_slice(extra);
        let mut env = env.to_vec();
        env.push(("KUBECONFIG", &kubeconfig));
        let (child, logs, line) = server::spawn(&args, &env, "configsum controller started").await;
        let controller = Controller {
            child,
            metrics_addr: line["metrics_listen"].as_str().expect("addr").to_owned(),
            logs,
            identity: identity.to_owned(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while server::http_get(&controller.metrics_addr, "/readyz").await.0 != 200 {
            assert!(
                Instant::now() < deadline,
                "not ready: {:?}",
                controller.logs.lock().expect("logs")
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        controller
    }

    pub async fn metrics(&self) -> String {
        server::http_get(&self.metrics_addr, "/metrics").await.1
    }

    /// The metrics once they contain every one of `lines`: the controller
    /// counts a patch after the API server's answer, so a test that saw the
    /// patch land may read the metrics a moment before they show it.
    pub async fn metrics_with(&self, lines: &[&str], within: Duration) -> String {
        let started = Instant::now();
        loop {
            let metrics = self.metrics().await;
            if lines.iter().all(|line| metrics.contains(line)) || started.elapsed() > within {
                return metrics;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits (20 s at most) until nothing is queued: no workload waiting for its window, a
    /// retry or the worker, no read waiting or running. A test that saw what a change started
    /// (a read, a patch) then knows every reconciliation of it is done, patches sent.
    pub async fn idle(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let metrics = self.metrics().await;
            if metrics.contains("configsum_controller_queue_depth 0\n") {
                return;
            }
            assert!(Instant::now() < deadline, "still busy after 20 s:\n{metrics}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits (20 s at most) until this replica leads, has read each of `objects` (API paths)
    /// since it became the leader, and is [`idle`](Self::idle): a new term reads every tracked
    /// object and rolls what is stale, so whatever it would patch at start-up is patched by
    /// then. The positive signal before asserting that it patched nothing.
    pub async fn caught_up(&self, api: &FakeApiServer, objects: &[String]) {
        let leases = LEASE_PATH.rsplit_once('/').map_or(LEASE_PATH, |(collection, _)| collection);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let log = api.log();
            let mine = |l: &&super::fake_apiserver::Logged| l.token == self.identity;
            // Its first successful write of the Lease: a create, or a take-over.
            let led = log
                .iter()
                .filter(mine)
                .find(|l| {
                    l.method != "GET"
                        && l.path.starts_with(leases)
                        && (200..300).contains(&l.status)
                })
                .map(|l| l.at);
            let read = |path: &String| {
                log.iter().filter(mine).any(|l| {
                    l.method == "GET" && &l.path == path && led.is_some_and(|led| l.at > led)
                })
            };
            if led.is_some() && objects.iter().all(read) {
                return self.idle().await;
            }
            assert!(
                Instant::now() < deadline,
                "{}: not leading and read {objects:?} within 20 s",
                self.identity
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Every log line so far, joined, once one matching `wanted` is there (10 s at most):
    /// the controller writes its lines in batches, a moment after what they tell of.
    pub async fn logged(&self, wanted: impl Fn(&str) -> bool) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let logs = self.logs.lock().map(|l| l.clone()).unwrap_or_default();
            if logs.iter().any(|line| wanted(line)) || std::time::Instant::now() >= deadline {
                return logs.join("\n");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub async fn stop(mut self) -> Option<i32> {
        let pid = self.child.id().expect("pid").to_string();
        let _ = std::process::Command::new("kill").args(["-TERM", &pid]).status();
        tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .expect("exits")
            .expect("wait")
            .code()
    }
}

/// A stored object's `data` as (key, value) pairs, base64-decoded for a Secret.
fn pairs(data: &Value, base64: bool) -> Vec<(&str, String)> {
    use base64::Engine as _;
    let map = data.as_object().map(|m| m.iter()).into_iter().flatten();
    map.map(|(key, value)| {
        let text = value.as_str().expect("a string value");
        let value = if base64 {
            let bytes = base64::engine::general_purpose::STANDARD.decode(text).expect("base64");
            String::from_utf8(bytes).expect("UTF-8 test data")
        } else {
            text.to_owned()
        };
        (key.as_str(), value)
    })
    .collect()
}

fn borrowed<'a>(pairs: &'a [(&'a str, String)]) -> Vec<(&'a str, &'a str)> {
    pairs.iter().map(|(key, value)| (*key, value.as_str())).collect()
}

/// The cluster as the test sees it, mirrored into `Objects` for the webhook's pure path.
/// What `configsum explain` answered.
#[derive(Debug)]
pub struct Explained {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Explained {
    /// The JSON answer (`--output json`).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", self.stdout, self.stderr))
    }
}

pub struct Cluster {
    pub api: FakeApiServer,
    pub dir: TempDir,
    pub objects: Objects,
}

impl Cluster {
    pub async fn new(label: &str) -> Cluster {
        server::install_crypto_provider();
        let api = FakeApiServer::start().await;
        api.put_namespace("configsum-system", &[]);
        api.put_namespace(NS, &[("configsum.dev/enabled", "true")]);
        let mut cluster = Cluster { api, dir: TempDir::new(label), objects: Objects::default() };
        cluster.secret("db", &[("password", "one")]);
        cluster.config_map("app", &[("level", "info")]);
        cluster
    }

    pub fn secret(&mut self, name: &str, data: &[(&str, &str)]) {
        self.api.put_secret(NS, name, data);
        self.objects.insert(NS, configsum::core::ObjectRef::secret(name), data);
    }

    pub fn config_map(&mut self, name: &str, data: &[(&str, &str)]) {
        self.api.put_config_map(NS, name, data);
        self.objects.insert(NS, configsum::core::ObjectRef::config_map(name), data);
    }

    /// An object of `kind`, as declared in `core::inputs`. A new kind fails to
    /// build here until the fake API server can store it.
    pub fn object(&mut self, kind: configsum::core::ObjectKind, name: &str, data: &[(&str, &str)]) {
        use configsum::core::ObjectKind;
        match kind {
            ObjectKind::ConfigMap => self.config_map(name, data),
            ObjectKind::Secret => self.secret(name, data),
        }
    }

    /// A Deployment reading each of `objects` whole, through `envFrom`.
    pub fn deployment_reading(
        &self,
        name: &str,
        objects: &[configsum::core::ObjectRef],
        admitted: bool,
    ) -> Value {
        let mut object = fixtures::workload("Deployment", NS, fixtures::pod_spec_reading(objects));
        object["metadata"]["name"] = json!(name);
        if admitted {
            let decision = Admit::new("Deployment", "CREATE", &object).run(&self.objects);
            object = apply(&object, &decision);
        }
        self.api.put(&workload_path("Deployment", NS, name), object.clone());
        object
    }

    /// A Deployment reading `secrets` and `config_maps` whole; with digests as
    /// the webhook would have written them at its last write, if `admitted`.
    pub fn deployment(
        &self,
        namespace: &str,
        name: &str,
        config_maps: &[&str],
        secrets: &[&str],
        admitted: bool,
    ) -> Value {
        self.workload("Deployment", namespace, name, config_maps, secrets, admitted)
    }

    /// The same for any rolling kind (Deployment, StatefulSet, DaemonSet, ReplicaSet).
    pub fn workload(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        config_maps: &[&str],
        secrets: &[&str],
        admitted: bool,
    ) -> Value {
        let mut object =
            fixtures::workload(kind, namespace, fixtures::pod_spec_env_from(config_maps, secrets));
        object["metadata"]["name"] = json!(name);
        if admitted {
            let decision = Admit::new(kind, "CREATE", &object).run(&self.objects);
            object = apply(&object, &decision);
        }
        self.api.put(&workload_path(kind, namespace, name), object.clone());
        object
    }

    /// Template annotations of a workload of any kind.
    pub fn annotations_of(&self, kind: &str, namespace: &str, name: &str) -> Value {
        let object = self.api.object(&workload_path(kind, namespace, name)).expect("workload");
        object["spec"]["template"]["metadata"]["annotations"].clone()
    }

    /// The template annotations the webhook should write now for a stored workload of any kind
    /// (its own annotations, with a digest for each object it reads), worked out without the
    /// code under test: the objects as the fake API server holds them, digested by
    /// support/digests.rs from the published format. Its pod template may read objects only
    /// whole, through `envFrom` (as [`Cluster::workload`] writes them); anything else panics.
    pub fn webhook_digests_of(&self, kind: &str, namespace: &str, name: &str) -> Value {
        let object = self.api.object(&workload_path(kind, namespace, name)).expect("workload");
        let pointer = fixtures::annotations_pointer(kind);
        let spec_pointer = pointer.replace("/metadata/annotations", "/spec");
        let spec = object.pointer(&spec_pointer).expect("a pod template");
        assert!(spec.get("volumes").is_none(), "the oracle reads envFrom only: {spec}");
        let mut annotations = match object.pointer(pointer) {
            Some(Value::Object(map)) => map.clone(),
            _ => serde_json::Map::new(),
        };
        let containers = spec["containers"].as_array().expect("containers");
        for container in containers {
            assert!(container.get("env").is_none(), "the oracle reads envFrom only: {container}");
            for source in container["envFrom"].as_array().into_iter().flatten() {
                let (key, digest) = if let Some(name) = source["configMapRef"]["name"].as_str() {
                    let path = FakeApiServer::config_map_path(namespace, name);
                    let digest = self.api.object(&path).map(|stored| {
                        digests::config_map(
                            namespace,
                            name,
                            &borrowed(&pairs(&stored["data"], false)),
                        )
                    });
                    (format!("configmap.configsum.dev/{name}"), digest)
                } else if let Some(name) = source["secretRef"]["name"].as_str() {
                    let path = FakeApiServer::secret_path(namespace, name);
                    let digest = self.api.object(&path).map(|stored| {
                        digests::secret(
                            KEY,
                            namespace,
                            name,
                            &borrowed(&pairs(&stored["data"], true)),
                        )
                    });
                    (format!("secret.configsum.dev/{name}"), digest)
                } else {
                    panic!("the oracle reads configMapRef and secretRef only: {source}");
                };
                annotations.insert(key, json!(digest.unwrap_or_else(|| "absent".to_owned())));
            }
        }
        Value::Object(annotations)
    }

    pub fn patches_of(&self, kind: &str, namespace: &str, name: &str) -> usize {
        self.api.calls("PATCH", &workload_path(kind, namespace, name))
    }

    /// PATCHes of workloads, in order: (when, which replica's token, path).
    pub fn patch_log(&self) -> Vec<(Instant, String, String)> {
        self.api
            .log()
            .into_iter()
            .filter(|l| l.method == "PATCH" && l.path.starts_with("/apis/"))
            .map(|l| (l.at, l.token, l.path))
            .collect()
    }

    /// [`webhook_digests_of`](Self::webhook_digests_of) a Deployment.
    pub fn webhook_digests(&self, namespace: &str, name: &str) -> Value {
        self.webhook_digests_of("Deployment", namespace, name)
    }

    pub fn annotations(&self, namespace: &str, name: &str) -> Value {
        let object =
            self.api.object(&FakeApiServer::deployment_path(namespace, name)).expect("deployment");
        object["spec"]["template"]["metadata"]["annotations"].clone()
    }

    pub fn patches(&self, namespace: &str, name: &str) -> usize {
        self.api.calls("PATCH", &FakeApiServer::deployment_path(namespace, name))
    }

    /// `configsum explain` run by `user` (a bearer token) against this cluster.
    pub async fn explain(&self, user: &str, args: &[&str]) -> Explained {
        let kubeconfig = self.api.kubeconfig_for(&self.dir.0, user);
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_configsum"))
            .arg("explain")
            .args(args)
            .env("KUBECONFIG", &kubeconfig)
            .env_remove("CONFIGSUM_DIGEST_KEY_FILE")
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(30), out)
            .await
            .expect("explain answers within 30 s")
            .expect("run configsum explain");
        Explained {
            code: out.status.code(),
            stdout: String::from_utf8(out.stdout).expect("utf-8"),
            stderr: String::from_utf8(out.stderr).expect("utf-8"),
        }
    }

    pub async fn wait_for(
        &self,
        what: &str,
        within: Duration,
        check: impl Fn(&Cluster) -> bool,
    ) -> Duration {
        let started = Instant::now();
        while !check(self) {
            assert!(started.elapsed() < within, "{what}: not within {within:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        started.elapsed()
    }
}
