//! Kinds declared in a file (`--custom-kinds`, docs/custom-kinds.md), end to end with the real
//! binary: a workload CRD whose pod template sits at a path (an OpenKruise CloneSet) and an
//! operator's custom resource that names Secrets and ConfigMaps in its spec and takes its digests
//! in a map of its spec (a Harbor operator HarborCluster), through `configsum serve` over TLS and
//! through `configsum render`; `configsum controller` rolling both against the fake API server
//! serving their CRDs; and a bad file refused naming the entry, with exit 2.

#[path = "support/controller.rs"]
mod controller;
#[path = "support/digests.rs"]
mod digests;
#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;
#[path = "support/fixtures.rs"]
mod fixtures;
#[path = "support/server.rs"]
mod server;

use std::process::{Command, Stdio};

use serde_json::{Value, json};
use server::*;

const KEY: &str = "0123456789abcdef0123456789abcdef\n";

const KINDS: &str = r#"apiVersion: configsum.dev/v1alpha1
kind: CustomKinds
kinds:
- apiVersion: apps.kruise.io/v1alpha1
  kind: CloneSet
  resource: clonesets
  template: spec.template
- apiVersion: goharbor.io/v1beta1
  kind: HarborCluster
  resource: harborclusters
  references:
  - secret: spec.imageChartStorage.s3.secretRef
    keys: [accesskey, secretkey]
  - configMap: spec.components[].configRef
  annotations: spec.podAnnotations
"#;

const OBJECTS: &str = r#"apiVersion: v1
kind: ConfigMap
metadata: {name: app, namespace: team-a}
data: {mode: fast, level: "3"}
---
apiVersion: v1
kind: Secret
metadata: {name: s3, namespace: team-a}
stringData: {accesskey: AK, secretkey: SK, region: eu}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: core-config, namespace: team-a}
data: {core.yaml: "a: 1", other: x}
"#;

struct Setup {
    dir: TempDir,
}

impl Setup {
    fn new(label: &str) -> Setup {
        install_crypto_provider();
        let dir = TempDir::new(label);
        make_certs(&dir.0, "ec-sec1");
        std::fs::write(dir.path("kinds.yaml"), KINDS).expect("kinds");
        std::fs::write(dir.path("objects.yaml"), OBJECTS).expect("objects");
        std::fs::write(dir.path("digest.key"), KEY).expect("key");
        Setup { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path(name).display().to_string()
    }
}

fn clone_set() -> Value {
    json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
        "metadata": {"name": "web", "namespace": "team-a"},
        "spec": {"replicas": 2, "template": {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": "web:1",
                "envFrom": [{"configMapRef": {"name": "app"}}]}]}}}})
}

fn harbor_cluster() -> Value {
    json!({"apiVersion": "goharbor.io/v1beta1", "kind": "HarborCluster",
        "metadata": {"name": "harbor", "namespace": "team-a"},
        "spec": {"imageChartStorage": {"s3": {"secretRef": "s3", "bucket": "charts"}},
            "components": [{"name": "core", "configRef": {"name": "core-config", "key": "core.yaml"}},
                {"name": "portal"}]}})
}

fn review(object: &Value, group: &str, version: &str, kind: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "custom", "kind": {"group": group, "version": version, "kind": kind},
        "operation": "CREATE", "namespace": "team-a", "name": object["metadata"]["name"], "object": object}}))
    .expect("json")
}

fn expected_clone_set_digest() -> String {
    digests::config_map("team-a", "app", &[("mode", "fast"), ("level", "3")])
}

fn expected_harbor_digests() -> Value {
    let s3 = [("accesskey", "AK"), ("secretkey", "SK"), ("region", "eu")];
    json!({
        "secret.configsum.dev/s3": digests::secret_keys(KEY, "team-a", "s3", &s3, &["accesskey", "secretkey"]),
        "configmap.configsum.dev/core-config": digests::config_map_keys(
            "team-a", "core-config", &[("core.yaml", "a: 1"), ("other", "x")], &["core.yaml"]),
    })
}

#[tokio::test]
async fn the_webhook_digests_what_declared_kinds_consume() {
    let setup = Setup::new("custom-kinds-serve");
    let (cert, key, objects, digest, kinds) = (
        setup.path("tls.crt"),
        setup.path("tls.key"),
        setup.path("objects.yaml"),
        setup.path("digest.key"),
        setup.path("kinds.yaml"),
    );
    let args = [
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--objects-from",
        &objects,
        "--digest-key-file",
        &digest,
        "--custom-kinds",
        &kinds,
    ];
    let server = Server::start(&args, &[], &setup.dir.path("ca.crt")).await;

    // A workload CRD: digests on its pod template, as for a Deployment.
    let object = clone_set();
    let (status, body) =
        server.post("/mutate", review(&object, "apps.kruise.io", "v1alpha1", "CloneSet")).await;
    assert_eq!(status, 200);
    let (answer, patched) = apply_response(&object, &body);
    assert_eq!(
        patched["spec"]["template"]["metadata"]["annotations"],
        json!({"configmap.configsum.dev/app": expected_clone_set_digest()}),
        "{answer}"
    );

    // An operator's resource: the Secret and ConfigMap its spec names, with the keys declared
    // or selected, in spec.podAnnotations, which the patch creates.
    let object = harbor_cluster();
    let (status, body) =
        server.post("/mutate", review(&object, "goharbor.io", "v1beta1", "HarborCluster")).await;
    assert_eq!(status, 200);
    let (answer, patched) = apply_response(&object, &body);
    assert_eq!(patched["spec"]["podAnnotations"], expected_harbor_digests(), "{answer}");
    assert_eq!(patched["metadata"].get("annotations"), None, "nothing written elsewhere");
    // Applied again: nothing to do.
    let (_, body) =
        server.post("/mutate", review(&patched, "goharbor.io", "v1beta1", "HarborCluster")).await;
    let (answer, _) = apply_response(&patched, &body);
    assert!(answer["response"].get("patch").is_none(), "{answer}");
    assert_eq!(server.terminate().await, Some(0));
}

#[test]
fn render_writes_the_same_digests_into_a_stream_of_custom_resources() {
    let setup = Setup::new("custom-kinds-render");
    let stream = format!(
        "{OBJECTS}---\n{}\n---\n{}\n",
        serde_json::to_string(&clone_set()).expect("json"),
        serde_json::to_string(&harbor_cluster()).expect("json")
    );
    let output = Command::new(env!("CARGO_BIN_EXE_configsum"))
        .args(["render", "--digest-key-file", &setup.path("digest.key")])
        .args(["--custom-kinds", &setup.path("kinds.yaml")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write as _;
            child.stdin.take().expect("stdin").write_all(stream.as_bytes())?;
            child.wait_with_output()
        })
        .expect("render");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let documents: Vec<Value> =
        serde_saphyr::from_multiple(&String::from_utf8_lossy(&output.stdout)).expect("yaml");
    let of = |kind: &str| documents.iter().find(|d| d["kind"] == kind).expect(kind).clone();
    assert_eq!(
        of("CloneSet")["spec"]["template"]["metadata"]["annotations"]["configmap.configsum.dev/app"],
        expected_clone_set_digest()
    );
    assert_eq!(of("HarborCluster")["spec"]["podAnnotations"], expected_harbor_digests());
}

#[test]
fn a_bad_file_stops_every_command_naming_the_entry() {
    let setup = Setup::new("custom-kinds-bad");
    let bad = KINDS.replace("resource: harborclusters", "resource: harborclusters\n  colour: red");
    std::fs::write(setup.dir.path("bad.yaml"), bad).expect("bad");
    let built_in = "apiVersion: configsum.dev/v1alpha1\nkind: CustomKinds\nkinds:\n\
                    - {apiVersion: apps/v1, kind: Deployment, resource: deployments, template: spec.template}\n";
    std::fs::write(setup.dir.path("built-in.yaml"), built_in).expect("built-in");
    for (file, expected) in [
        ("bad.yaml", "kinds[1] (goharbor.io/v1beta1 HarborCluster): unknown field `colour`"),
        ("built-in.yaml", "Deployment apps is declared twice, or is a built-in kind"),
        ("missing.yaml", "cannot read the custom kinds file"),
    ] {
        let kinds = setup.path(file);
        let (cert, key, digest) =
            (setup.path("tls.crt"), setup.path("tls.key"), setup.path("digest.key"));
        for args in [
            vec!["serve", "--tls-cert", &cert, "--tls-key", &key, "--digest-key-file", &digest],
            vec!["controller", "--digest-key-file", &digest],
            vec!["render", "--digest-key-file", &digest, "-f", "/dev/null"],
        ] {
            let output = Command::new(env!("CARGO_BIN_EXE_configsum"))
                .args(&args)
                .args(["--custom-kinds", &kinds])
                .env("KUBECONFIG", "/nonexistent")
                .output()
                .expect("run");
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(2), "{args:?} {file}: {stderr}");
            assert!(stderr.contains(expected), "{args:?} {file}: {stderr}");
        }
    }
}

#[tokio::test]
async fn the_controller_rolls_declared_kinds_and_an_operators_generation_moves() {
    let mut cluster = controller::Cluster::new("custom-kinds-controller").await;
    cluster.api.serve_crd("clonesets");
    cluster.api.serve_crd("harborclusters");
    cluster.config_map("app", &[("mode", "fast"), ("level", "3")]);
    cluster.secret("s3", &[("accesskey", "AK"), ("secretkey", "SK"), ("region", "eu")]);
    cluster.config_map("core-config", &[("core.yaml", "a: 1"), ("other", "x")]);
    // Both as the webhook admitted them: their digests current.
    let web = "/apis/apps.kruise.io/v1alpha1/namespaces/team-a/clonesets/web";
    let harbor = "/apis/goharbor.io/v1beta1/namespaces/team-a/harborclusters/harbor";
    let mut admitted = clone_set();
    admitted["spec"]["template"]["metadata"]["annotations"] =
        json!({"configmap.configsum.dev/app": expected_clone_set_digest()});
    cluster.api.put(web, admitted);
    let mut admitted = harbor_cluster();
    admitted["spec"]["podAnnotations"] = expected_harbor_digests();
    cluster.api.put(harbor, admitted);
    let generation = |c: &controller::Cluster, path: &str| {
        c.api.object(path).map(|o| o["metadata"]["generation"].clone()).unwrap_or_default()
    };
    assert_eq!((generation(&cluster, web), generation(&cluster, harbor)), (json!(1), json!(1)));

    let setup = Setup::new("custom-kinds-controller-files");
    let kinds = setup.path("kinds.yaml");
    let extra = ["--custom-kinds", kinds.as_str()];
    let running = controller::Controller::start(&cluster.api, &cluster.dir, "a", &extra).await;
    let s3 = fake_apiserver::FakeApiServer::secret_path("team-a", "s3");
    let config_maps =
        ["app", "core-config"].map(|n| fake_apiserver::FakeApiServer::config_map_path("team-a", n));
    running
        .caught_up(&cluster.api, &[s3.clone(), config_maps[0].clone(), config_maps[1].clone()])
        .await;
    assert_eq!(cluster.api.calls("PATCH", web) + cluster.api.calls("PATCH", harbor), 0, "current");

    // A key the HarborCluster does not read: nothing. One it reads: its spec's map, so the
    // operator, which reconciles on generation, sees the change.
    let reads = cluster.api.calls("GET", &s3);
    cluster.secret("s3", &[("accesskey", "AK"), ("secretkey", "SK"), ("region", "us")]);
    // Read again and digested, with nothing left to do.
    let read = |c: &controller::Cluster| c.api.calls("GET", &s3) > reads;
    cluster.wait_for("the changed Secret read", std::time::Duration::from_secs(5), read).await;
    running.idle().await;
    assert_eq!(cluster.api.calls("PATCH", harbor), 0, "region is not consumed");
    let rotated = [("accesskey", "AK2"), ("secretkey", "SK"), ("region", "us")];
    cluster.secret("s3", &rotated);
    let expected = digests::secret_keys(KEY, "team-a", "s3", &rotated, &["accesskey", "secretkey"]);
    let patched = |c: &controller::Cluster| {
        c.api
            .object(harbor)
            .is_some_and(|o| o["spec"]["podAnnotations"]["secret.configsum.dev/s3"] == expected)
    };
    cluster.wait_for("the HarborCluster patched", std::time::Duration::from_secs(5), patched).await;
    let object = cluster.api.object(harbor).expect("harbor");
    assert_eq!(object["metadata"]["generation"], 2, "a spec change: the operator reconciles");
    assert_eq!(object["metadata"]["annotations"].get("secret.configsum.dev/s3"), None);
    assert_eq!(cluster.api.calls("PATCH", harbor), 1);

    // The CloneSet's template: a new generation, so the workload controller rolls it.
    cluster.config_map("app", &[("mode", "slow"), ("level", "3")]);
    let expected = digests::config_map("team-a", "app", &[("mode", "slow"), ("level", "3")]);
    let rolled = |c: &controller::Cluster| {
        c.api.object(web).is_some_and(|o| {
            o["spec"]["template"]["metadata"]["annotations"]["configmap.configsum.dev/app"]
                == expected
        })
    };
    cluster.wait_for("the CloneSet patched", std::time::Duration::from_secs(5), rolled).await;
    assert_eq!(generation(&cluster, web), json!(2));
    let events = |c: &controller::Cluster| c.api.list("/api/v1/namespaces/team-a/events");
    let both = |c: &controller::Cluster| events(c).len() == 2;
    cluster.wait_for("both Events", std::time::Duration::from_secs(5), both).await;
    let messages: Vec<(String, String)> = events(&cluster)
        .iter()
        .map(|e| {
            let kind = e["involvedObject"]["kind"].as_str().unwrap_or_default().to_owned();
            (kind, e["message"].as_str().unwrap_or_default().to_owned())
        })
        .collect();
    let harbor_event = "configsum updated the digests in spec.podAnnotations: changed secret/s3";
    let clone_set_event = "configsum rolled the pod template: changed configmap/app";
    assert!(messages.contains(&("HarborCluster".into(), harbor_event.into())), "{messages:?}");
    assert!(messages.contains(&("CloneSet".into(), clone_set_event.into())), "{messages:?}");
    assert_eq!(running.stop().await, Some(0));
}

#[tokio::test]
async fn a_declared_kind_served_cluster_scoped_stops_the_controller_with_exit_2() {
    const WIDGETS: &str = "apiVersion: configsum.dev/v1alpha1\nkind: CustomKinds\nkinds:\n\
        - apiVersion: example.com/v1\n  kind: Widget\n  resource: widgets\n  template: spec.template\n";
    let setup = Setup::new("custom-kinds-cluster-scoped");
    std::fs::write(setup.dir.path("widgets.yaml"), WIDGETS).expect("kinds");
    let kinds = setup.path("widgets.yaml");
    let named = |stderr: &str| {
        stderr.contains("--custom-kinds: example.com/v1 Widget")
            && stderr.contains("serves widgets cluster-scoped")
    };

    // Served so at start-up: refused before anything is watched.
    let cluster = controller::Cluster::new("custom-kinds-widgets-now").await;
    cluster.api.serve_crd("widgets");
    let kubeconfig = cluster.api.kubeconfig_for(&cluster.dir.0, "a");
    let key = setup.path("digest.key");
    let args = ["controller", "--digest-key-file", &key, "--custom-kinds", &kinds];
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_configsum"))
        .args(args)
        .args(["--metrics-listen", "127.0.0.1:0", "--lease-namespace", "configsum-system"])
        .env("KUBECONFIG", &kubeconfig)
        .output();
    let output = tokio::time::timeout(std::time::Duration::from_secs(20), run)
        .await
        .expect("exits")
        .expect("runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(named(&stderr), "{stderr}");

    // Installed so after start-up: found by discovery, and refused the same way.
    let cluster = controller::Cluster::new("custom-kinds-widgets-later").await;
    let extra = ["--custom-kinds", kinds.as_str(), "--discovery-interval", "1s"];
    let running = controller::Controller::start(&cluster.api, &cluster.dir, "a", &extra).await;
    cluster.api.serve_crd("widgets");
    let logs = running.logs.clone();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !logs.lock().expect("logs").iter().any(|l| named(l)) {
        assert!(std::time::Instant::now() < deadline, "{:?}", logs.lock().expect("logs"));
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(running.stop().await, Some(2));
}

/// A declared kind's `health` entry is what explain tells of its rollout, read from the file's
/// status; without the entry, its status is read as a Deployment's.
#[test]
fn explain_tells_a_declared_kinds_rollout_by_its_health_entry() {
    let setup = Setup::new("custom-kinds-health");
    let kinds = KINDS.replace(
        "  template: spec.template\n",
        "  template: spec.template\n  health: {path: status.phase, healthy: Running, failed: Failed}\n",
    );
    std::fs::write(setup.path("health.yaml"), kinds).expect("kinds");
    let explain = |kinds: &str, phase: &str| {
        let mut web = clone_set();
        web["metadata"]["generation"] = json!(2);
        web["status"] = json!({"observedGeneration": 2, "phase": phase, "message": "quota"});
        let file = format!("{OBJECTS}---\n{}\n", serde_json::to_string(&web).expect("json"));
        std::fs::write(setup.path("web.yaml"), file).expect("objects");
        let output = Command::new(env!("CARGO_BIN_EXE_configsum"))
            .args(["explain", "cloneset/web", "-n", "team-a", "--output", "json"])
            .args(["-f", &setup.path("web.yaml"), "--custom-kinds", &setup.path(kinds)])
            .output()
            .expect("explain");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let answer: Value = serde_json::from_slice(&output.stdout).expect("json");
        (answer["rollout"]["state"].clone(), answer["rollout"]["message"].clone())
    };
    assert_eq!(
        explain("health.yaml", "Running"),
        (json!("complete"), json!("status.phase is Running"))
    );
    assert_eq!(
        explain("health.yaml", "Pending"),
        (json!("progressing"), json!("rolling out: status.phase is Pending"))
    );
    assert_eq!(
        explain("health.yaml", "Failed"),
        (json!("failed"), json!("the rollout failed: Failed (quota); status.phase is Failed"))
    );
    // No health entry: a Deployment's counts, which this status does not have.
    assert_eq!(
        explain("kinds.yaml", "Running"),
        (json!("progressing"), json!("rolling out: 0 of 2 pods run the current template, 0 ready"))
    );
}
