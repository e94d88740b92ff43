//! `configsum controller` against the real API server and kube-controller-manager: a Secret
//! change rolls the Deployment and the Deployment controller makes a new ReplicaSet; first
//! observations roll nothing; changes made while it was down are caught up; two replicas elect
//! one leader through a real Lease; Events and managedFields are what `kubectl` shows.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::control_plane::ControlPlane;
use crate::install::{
    ConsumeAs, Installation, KEY, SYSTEM, deployment, deployment_with_image, installation, run,
    secret,
};
use crate::server::{TempDir, http_get, spawn};

/// The digest of a Secret consuming every key, keyed with [`KEY`].
pub fn secret_digest(namespace: &str, name: &str, data: &[(&str, &str)]) -> String {
    crate::digests::secret(KEY, namespace, name, data)
}

/// Held by a test while its `configsum controller` runs: the controllers of two tests would share
/// the Lease (and the workloads), and one test's controller would do the other's work.
pub async fn one_controller_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

/// A running `configsum controller`, as the chart's ServiceAccount.
pub struct Controller {
    child: tokio::process::Child,
    metrics: String,
    logs: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Controller {
    pub async fn start(install: &Installation, identity: &str) -> Controller {
        Controller::start_as(install.cp, &install.dir, "configsum-controller", identity, &[]).await
    }

    /// As `service_account` of configsum-system, with the digest key in `dir`.
    pub async fn start_as(
        cp: &ControlPlane,
        dir: &TempDir,
        service_account: &str,
        identity: &str,
        extra: &[&str],
    ) -> Controller {
        Controller::start_in(cp, dir, SYSTEM, service_account, identity, extra).await
    }

    /// As `service_account` of `namespace`, which is also its own and its Lease's.
    pub async fn start_in(
        cp: &ControlPlane,
        dir: &TempDir,
        namespace: &str,
        service_account: &str,
        identity: &str,
        extra: &[&str],
    ) -> Controller {
        let kubeconfig = cp.kubeconfig_as(namespace, service_account);
        let kubeconfig = kubeconfig.display().to_string();
        let key = dir.path("digest.key").display().to_string();
        let mut args = vec![
            "controller",
            "--digest-key-file",
            &key,
            "--metrics-listen",
            "127.0.0.1:0",
            "--window",
            "500ms",
            "--lease-namespace",
            namespace,
            "--identity",
            identity,
            "--log-format",
            "json",
        ];
        if !extra.contains(&"--lease-duration") {
            args.extend(["--lease-duration", "3s"]);
        }
        args.extend_from_slice(extra);
        let env = [("KUBECONFIG", kubeconfig.as_str()), ("POD_NAMESPACE", namespace)];
        let (child, logs, line) = spawn(&args, &env, "configsum controller started").await;
        cp.adopt(child.id().expect("running"), &format!("configsum-controller-{identity}"));
        let metrics = line["metrics_listen"].as_str().expect("metrics_listen").to_owned();
        let deadline = Instant::now() + Duration::from_secs(30);
        while http_get(&metrics, "/readyz").await.0 != 200 {
            assert!(Instant::now() < deadline, "not ready: {:?}", logs.lock().map(|l| l.clone()));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Controller { child, metrics, logs }
    }

    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().map(|l| l.clone()).unwrap_or_default()
    }

    pub async fn metrics(&self) -> String {
        http_get(&self.metrics, "/metrics").await.1
    }

    /// Waits (20 s at most) for a log line `wanted` accepts.
    pub async fn logged(&self, wanted: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(line) = self.logs().into_iter().find(|l| wanted(l)) {
                return line;
            }
            assert!(Instant::now() < deadline, "not logged within 20 s: {:?}", self.logs());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The `patched` reconciliations, whatever other labels (a shard's) the series carries.
    pub async fn patches(&self) -> f64 {
        sum_of(&self.metrics().await, "configsum_controller_patches_total{", "outcome=\"patched\"")
    }

    /// How many complete lists of `resource` the controller has applied (its first, then one
    /// per relist).
    pub async fn lists_of(&self, resource: &str) -> f64 {
        let text = http_get(&self.metrics, "/metrics").await.1;
        let series = format!("configsum_controller_watch_lists_total{{resource=\"{resource}\"}} ");
        text.lines()
            .filter_map(|l| l.strip_prefix(series.as_str()))
            .filter_map(|n| n.parse::<f64>().ok())
            .sum()
    }

    /// Waits (30 s at most) until nothing is queued: no workload waiting for its window, a retry
    /// or the worker, no read waiting or running.
    pub async fn idle(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let metrics = self.metrics().await;
            let depth = metrics.lines().find(|l| {
                l.strip_prefix("configsum_controller_queue_depth")
                    .is_some_and(|rest| rest.starts_with([' ', '{']))
            });
            if depth.is_some_and(|l| l.ends_with(" 0")) {
                return;
            }
            assert!(Instant::now() < deadline, "still busy after 30 s:\n{metrics}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGKILL: no release of the Lease, no goodbye; the standby waits for it to expire.
    pub async fn kill(mut self) {
        self.child.start_kill().expect("SIGKILL");
        let _ = self.child.wait().await;
    }

    /// Sends SIGTERM and asserts a clean exit: a controller that crashes or hangs on the way
    /// out fails the test rather than being killed quietly.
    pub async fn stop(mut self) {
        let pid = self.child.id().expect("the controller is still running").to_string();
        let kill = std::process::Command::new("kill").args(["-TERM", &pid]).status();
        assert!(kill.is_ok_and(|status| status.success()), "kill -TERM {pid}");
        let exit = tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("no exit within 20 s of SIGTERM: {:?}", self.logs()))
            .expect("wait");
        assert_eq!(exit.code(), Some(0), "exit after SIGTERM: {:?}", self.logs());
    }
}

/// The sum of the series of `metric` (its name and `{`) whose labels include `label`.
fn sum_of(metrics: &str, metric: &str, label: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(metric) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next().and_then(|n| n.parse::<f64>().ok()))
        .sum()
}

/// A change after the ones under test that `controller` must act on: a Deployment `name` in
/// `namespace` reading its own Secret, admitted, then the Secret changed. Returns once the
/// controller has rolled it and is idle: the positive signal before asserting that it patched
/// nothing else. Only the leader patches, and it read every tracked object when it began
/// leading, before this change; an object watch delivers its events in order.
pub async fn witness_rolled(
    install: &Installation,
    controller: &Controller,
    namespace: &str,
    name: &str,
) {
    let data = |value: &'static str| [("k", value)];
    install.cp.apply(&format!(
        "{}\n---\n{}",
        secret(namespace, name, &data("before")),
        deployment(namespace, name, &[(name, ConsumeAs::SecretEnvFrom)])
    ));
    let key = format!("secret.configsum.dev/{name}");
    // The API server may not see a namespace's new label at once: written again (through the
    // webhook) until it records its digest.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut writes = 1;
    while install.template_annotations(namespace, name)[&key]
        != secret_digest(namespace, name, &data("before"))
    {
        assert!(Instant::now() < deadline, "the witness was never admitted with its digest");
        tokio::time::sleep(Duration::from_millis(200)).await;
        writes += 1;
        let image = format!("registry.example/app:{writes}");
        let consumes = [(name, ConsumeAs::SecretEnvFrom)];
        install.cp.apply(&deployment_with_image(namespace, name, &image, &consumes));
    }
    install.cp.apply(&secret(namespace, name, &data("after")));
    wait_until("the witness rolled", Duration::from_secs(15), || {
        install.template_annotations(namespace, name)[&key]
            == secret_digest(namespace, name, &data("after"))
    })
    .await;
    controller.idle().await;
}

/// Waits (15 s at most) until the controller's `patched` count is `count`: it counts a patch
/// once the API server has answered, a moment after the patch can be seen.
async fn patched(controller: &Controller, count: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let patches = controller.patches().await;
        if patches == count || Instant::now() >= deadline {
            return patches;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn wait_until(what: &str, within: Duration, check: impl Fn() -> bool) {
    let deadline = Instant::now() + within;
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn replica_sets_of(install: &Installation, namespace: &str, app: &str) -> usize {
    let list = install.cp.get_json(&["replicasets", "-n", namespace, "-l", &format!("app={app}")]);
    list["items"].as_array().map_or(0, Vec::len)
}

fn lease_holder(install: &Installation) -> Option<String> {
    let output =
        install.cp.kubectl(&["get", "lease", "configsum-controller", "-n", SYSTEM, "-o", "json"]);
    let lease: Value = serde_json::from_slice(&output.stdout).ok()?;
    lease["spec"]["holderIdentity"].as_str().map(str::to_owned)
}

pub fn generation(install: &Installation, namespace: &str, name: &str) -> i64 {
    let deployment = install.cp.get_json(&["deployment", name, "-n", namespace]);
    deployment["metadata"]["generation"].as_i64().unwrap_or_default()
}

#[test]
fn the_controller_rolls_deployments_on_a_real_api_server() {
    run(async {
        let _one = one_controller_at_a_time().await;
        let install = installation().await;
        let cp = install.cp;
        let ns = "rolls";
        cp.namespace(ns, true);
        let data = |password: &'static str| [("password", password)];
        cp.apply(&format!(
            "{}\n---\n{}",
            secret(ns, "db", &data("one")),
            deployment(ns, "web", &[("db", ConsumeAs::SecretEnvFrom)])
        ));
        let key = "secret.configsum.dev/db";
        assert_eq!(
            install.template_annotations(ns, "web")[key],
            secret_digest(ns, "db", &data("one"))
        );
        wait_until("the first ReplicaSet", Duration::from_secs(30), || {
            replica_sets_of(install, ns, "web") == 1
        })
        .await;

        // A workload that exists before its namespace is opted in has no digests: seen for the
        // first time, it is left alone.
        let late = "labelled-late";
        cp.namespace(late, false);
        cp.apply(&format!(
            "{}\n---\n{}",
            secret(late, "db", &data("one")),
            deployment(late, "web", &[("db", ConsumeAs::SecretEnvFrom)])
        ));
        let a = Controller::start(install, "a").await;
        cp.kubectl_ok(&["label", "namespace", late, "configsum.dev/enabled=true"]);
        // Rolled in the newly opted-in namespace: the label was seen, and start-up is over.
        witness_rolled(install, &a, late, "witness-late").await;
        assert_eq!(
            patched(&a, 1.0).await,
            1.0,
            "nothing is current-but-stale: no patch at start-up, only the witness's"
        );

        // A Secret change rolls the Deployment: the controller patches the template, the
        // Deployment controller makes a second ReplicaSet.
        cp.apply(&secret(ns, "db", &data("two")));
        wait_until("the patch", Duration::from_secs(15), || {
            install.template_annotations(ns, "web")[key] == secret_digest(ns, "db", &data("two"))
        })
        .await;
        wait_until("the new ReplicaSet", Duration::from_secs(30), || {
            replica_sets_of(install, ns, "web") == 2
        })
        .await;
        assert_eq!(
            install.template_annotations(late, "web"),
            serde_json::json!({}),
            "first observation"
        );
        assert_eq!(generation(install, late, "web"), 1);

        // The Event, as kubectl lists it, names the Secret and never its content.
        let events =
            cp.get_json(&["events", "-n", ns, "--field-selector", "involvedObject.name=web"]);
        let ours: Vec<&Value> = events["items"]
            .as_array()
            .map(|items| items.iter().filter(|e| e["reason"] == "ConfigurationChanged").collect())
            .unwrap_or_default();
        assert_eq!(ours.len(), 1, "{events}");
        let message = ours[0]["message"].as_str().unwrap_or_default();
        assert!(message.contains("secret/db") && !message.contains("two"), "{message}");
        let listed = cp.kubectl_ok(&["get", "events", "-n", ns]);
        assert!(listed.contains("ConfigurationChanged"), "{listed}");

        // managedFields name configsum as the manager of the digest it wrote.
        let web = cp.get_json(&["deployment", "web", "-n", ns, "--show-managed-fields"]);
        let managers = web["metadata"]["managedFields"].as_array().cloned().unwrap_or_default();
        let configsum = managers
            .iter()
            .find(|m| m["manager"] == "configsum")
            .unwrap_or_else(|| panic!("no managedFields entry for configsum: {managers:?}"));
        assert_eq!(configsum["operation"], "Update");
        let owned = &configsum["fieldsV1"]["f:spec"]["f:template"]["f:metadata"]["f:annotations"];
        assert!(owned.get(format!("f:{key}")).is_some(), "{configsum}");

        // Changes made while no controller runs are caught up at start-up.
        a.stop().await;
        cp.apply(&secret(ns, "db", &data("three")));
        let a = Controller::start(install, "a").await;
        wait_until("the catch-up", Duration::from_secs(15), || {
            install.template_annotations(ns, "web")[key] == secret_digest(ns, "db", &data("three"))
        })
        .await;
        let rolled = generation(install, ns, "web");

        // A restart when everything is current patches nothing.
        a.stop().await;
        let a = Controller::start(install, "a").await;
        witness_rolled(install, &a, ns, "witness-restart").await;
        assert_eq!(patched(&a, 1.0).await, 1.0, "only the witness");
        assert_eq!(generation(install, ns, "web"), rolled);

        // Two replicas: one leads through the Lease; the other takes over when it stops.
        let b = Controller::start(install, "b").await;
        wait_until("a leads", Duration::from_secs(10), || {
            lease_holder(install).as_deref() == Some("a")
        })
        .await;
        a.stop().await;
        let stopped = Instant::now();
        wait_until("b takes over", Duration::from_secs(15), || {
            lease_holder(install).as_deref() == Some("b")
        })
        .await;
        eprintln!("takeover after the leader stopped: {:?}", stopped.elapsed());
        cp.apply(&secret(ns, "db", &data("four")));
        wait_until("b patches", Duration::from_secs(15), || {
            install.template_annotations(ns, "web")[key] == secret_digest(ns, "db", &data("four"))
        })
        .await;
        b.stop().await;
    });
}

/// Workloads that roll together on the real control plane: the webhook records the digest of
/// the database's pod template on Keycloak's, the controller agrees with it (no patch at
/// start-up, though the real API server fills in the template's defaults), and
/// `kubectl rollout restart` of the database rolls Keycloak once, through the webhook.
#[test]
fn a_rollout_restart_of_a_tracked_deployment_rolls_its_tracker_once() {
    run(async {
        let _one = one_controller_at_a_time().await;
        let install = installation().await;
        let cp = install.cp;
        let ns = "together";
        cp.namespace(ns, true);
        cp.apply(&deployment(ns, "keycloak-db", &[]));
        let mut keycloak: Value =
            serde_json::from_str(&deployment(ns, "keycloak", &[])).expect("json");
        keycloak["metadata"]["annotations"] =
            serde_json::json!({"configsum.dev/track": "deployment/keycloak-db"});
        cp.apply(&keycloak.to_string());
        let key = "deployment.configsum.dev/keycloak-db";
        let first = install.template_annotations(ns, "keycloak")[key].clone();
        assert!(first.as_str().is_some_and(|d| d.starts_with("sha256:")), "{first}");
        wait_until("keycloak's first ReplicaSet", Duration::from_secs(30), || {
            replica_sets_of(install, ns, "keycloak") == 1
        })
        .await;

        let a = Controller::start(install, "a").await;
        witness_rolled(install, &a, ns, "witness").await;
        assert_eq!(
            patched(&a, 1.0).await,
            1.0,
            "only the witness: the controller's digest is the webhook's"
        );

        cp.kubectl_ok(&["rollout", "restart", "deployment/keycloak-db", "-n", ns]);
        wait_until("keycloak rolled", Duration::from_secs(15), || {
            install.template_annotations(ns, "keycloak")[key] != first
        })
        .await;
        wait_until("keycloak's new ReplicaSet", Duration::from_secs(30), || {
            replica_sets_of(install, ns, "keycloak") == 2
        })
        .await;
        assert_eq!(patched(&a, 2.0).await, 2.0, "keycloak rolled, by the controller");
        // A second roll would be queued or in flight until then.
        a.idle().await;
        assert_eq!(a.patches().await, 2.0, "once");
        let events =
            cp.get_json(&["events", "-n", ns, "--field-selector", "involvedObject.name=keycloak"]);
        let ours: Vec<&Value> = events["items"]
            .as_array()
            .map(|items| items.iter().filter(|e| e["reason"] == "ConfigurationChanged").collect())
            .unwrap_or_default();
        assert_eq!(ours.len(), 1, "{events}");
        assert_eq!(
            ours[0]["message"],
            "configsum rolled the pod template: changed deployment/keycloak-db"
        );
        a.stop().await;
    });
}
