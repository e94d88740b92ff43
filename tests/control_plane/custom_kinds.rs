//! Kinds declared in a file, on the real API server: two CRDs shaped as an OpenKruise CloneSet
//! and a Harbor operator HarborCluster (written here for the test; their real CRDs are not
//! served by any package registry these machines reach), the real `configsum serve` with
//! `--custom-kinds`, and a copy of the chart's webhook configuration with rules for both kinds,
//! as the chart's `customKinds` value renders them. `kubectl apply` of each custom resource comes
//! back with the digests the webhook wrote: on the CloneSet's pod template, and in the
//! HarborCluster's `spec.podAnnotations`, which the patch creates.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::controller::{Controller, one_controller_at_a_time, secret_digest, wait_until};
use crate::digests;
use crate::install::{Installation, KEY, SYSTEM, installation, run, secret, start_serve_with};
use crate::server::Server;
use crate::webhook::scoped_copy;

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
  annotations: spec.podAnnotations
"#;

/// A namespaced CRD whose spec keeps every field (the test needs the shape, not the schema).
fn crd(group: &str, version: &str, kind: &str, plural: &str) -> String {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase()},
            "versions": [{"name": version, "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}})
    .to_string()
}

/// The real `configsum serve` with `kinds` as its `--custom-kinds` file, and a copy of the
/// chart's webhook configuration named `name` with the rules the chart's `customKinds` value
/// adds for `resources` (group, version, plural), scoped to the namespace `name` it creates.
async fn serve_declared(
    install: &'static Installation,
    name: &str,
    kinds: &str,
    resources: &[(&str, &str, &str)],
) -> Server {
    let cp = install.cp;
    let file = install.path(&format!("{name}-kinds.yaml"));
    std::fs::write(&file, kinds).expect("kinds");
    let file = file.display().to_string();
    let serve =
        start_serve_with(cp, &install.dir, "configsum-webhook", &["--custom-kinds", &file]).await;
    scoped_copy(install, name, &serve.addr);
    let mut config = cp.get_json(&["mutatingwebhookconfiguration", name]);
    let rules = config["webhooks"][0]["rules"].as_array_mut().expect("rules");
    for (group, version, plural) in resources {
        rules.push(json!({"apiGroups": [group], "apiVersions": [version], "resources": [plural],
            "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"}));
    }
    cp.apply(&config.to_string());
    cp.apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n  labels: {{configsum-test/{name}: \"true\"}}\n"
    ));
    serve
}

#[test]
fn the_api_server_calls_the_webhook_for_declared_kinds() {
    run(async {
        let install = installation().await;
        let cp = install.cp;
        for (group, version, kind, plural) in [
            ("apps.kruise.io", "v1alpha1", "CloneSet", "clonesets"),
            ("goharbor.io", "v1beta1", "HarborCluster", "harborclusters"),
        ] {
            cp.apply(&crd(group, version, kind, plural));
            cp.wait_established(&[&format!("crd/{plural}.{group}")]);
        }
        let resources = [
            ("apps.kruise.io", "v1alpha1", "clonesets"),
            ("goharbor.io", "v1beta1", "harborclusters"),
        ];
        let serve = serve_declared(install, "custom", KINDS, &resources).await;
        let ns = "custom";
        let config_map = [("mode", "fast")];
        let s3 = [("accesskey", "AK"), ("secretkey", "SK"), ("region", "eu")];
        cp.apply(
            &json!({"apiVersion": "v1", "kind": "List", "items": [
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app", "namespace": ns},
                    "data": {"mode": "fast"}},
                {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3", "namespace": ns},
                    "stringData": {"accesskey": "AK", "secretkey": "SK", "region": "eu"}}]})
            .to_string(),
        );
        let clone_set = |image: &str| {
            json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
                "metadata": {"name": "web", "namespace": ns},
                "spec": {"replicas": 1, "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "app", "image": image,
                        "envFrom": [{"configMapRef": {"name": "app"}}]}]}}}})
            .to_string()
        };
        let harbor = |bucket: &str| {
            json!({"apiVersion": "goharbor.io/v1beta1", "kind": "HarborCluster",
                "metadata": {"name": "harbor", "namespace": ns},
                "spec": {"imageChartStorage": {"s3": {"secretRef": "s3", "bucket": bucket}}}})
            .to_string()
        };
        // The copied configuration reaches the API server through its watch: apply until the
        // webhook answered.
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut round = 0;
        let (web, harbor_cluster): (Value, Value) = loop {
            round += 1;
            cp.apply(&clone_set(&format!("web:{round}")));
            cp.apply(&harbor(&format!("charts-{round}")));
            let web = cp.get_json(&["clonesets.apps.kruise.io", "web", "-n", ns]);
            let harbor = cp.get_json(&["harborclusters.goharbor.io", "harbor", "-n", ns]);
            if !web["spec"]["template"]["metadata"]["annotations"].is_null() {
                break (web, harbor);
            }
            assert!(Instant::now() < deadline, "the API server never called the webhook");
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        assert_eq!(
            web["spec"]["template"]["metadata"]["annotations"],
            json!({"configmap.configsum.dev/app": digests::config_map(ns, "app", &config_map)})
        );
        assert_eq!(
            harbor_cluster["spec"]["podAnnotations"],
            json!({"secret.configsum.dev/s3":
                digests::secret_keys(KEY, ns, "s3", &s3, &["accesskey", "secretkey"])})
        );
        assert_eq!(harbor_cluster["metadata"]["annotations"].get("secret.configsum.dev/s3"), None);
        cp.kubectl_ok(&["delete", "mutatingwebhookconfiguration", "custom"]);
        drop(serve);
    });
}

/// OpenKruise's Advanced DaemonSet: a workload CRD whose pod template is `spec.template`.
const ADVANCED_DAEMON_SET: &str = r#"apiVersion: configsum.dev/v1alpha1
kind: CustomKinds
kinds:
- apiVersion: apps.kruise.io/v1alpha1
  kind: DaemonSet
  resource: daemonsets
  template: spec.template
"#;

#[test]
fn the_controller_watches_a_workload_crd_installed_after_it_started() {
    run(async {
        let _one = one_controller_at_a_time().await;
        let install = installation().await;
        let cp = install.cp;
        // What the chart's customKinds value grants the controller for the kind.
        cp.apply(
            &json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "configsum-controller-kruise-daemonsets"},
                "rules": [{"apiGroups": ["apps.kruise.io"], "resources": ["daemonsets"],
                    "verbs": ["list", "watch", "patch"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "configsum-controller-kruise-daemonsets"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "configsum-controller-kruise-daemonsets"},
                "subjects": [{"kind": "ServiceAccount", "name": "configsum-controller",
                    "namespace": SYSTEM}]}]})
            .to_string(),
        );
        std::fs::write(install.path("kruise-daemonsets.yaml"), ADVANCED_DAEMON_SET).expect("kinds");
        let kinds = install.path("kruise-daemonsets.yaml").display().to_string();
        let extra = ["--custom-kinds", &kinds, "--discovery-interval", "1s"];
        let controller =
            Controller::start_as(cp, &install.dir, "configsum-controller", "crd-later", &extra)
                .await;

        // Installed after the controller started: no restart follows.
        cp.apply(&crd("apps.kruise.io", "v1alpha1", "DaemonSet", "daemonsets"));
        cp.wait_established(&["crd/daemonsets.apps.kruise.io"]);
        let ns = "crd-later";
        cp.namespace(ns, true);
        let data = |password: &'static str| [("password", password)];
        let recorded = secret_digest(ns, "db", &data("one"));
        cp.apply(&secret(ns, "db", &data("one")));
        cp.apply(
            &json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "DaemonSet",
                "metadata": {"name": "agent", "namespace": ns},
                "spec": {"template": {"metadata": {"labels": {"app": "agent"},
                        "annotations": {"secret.configsum.dev/db": recorded}},
                    "spec": {"containers": [{"name": "agent", "image": "agent:1",
                        "envFrom": [{"secretRef": {"name": "db"}}]}]}}}})
            .to_string(),
        );
        wait_until("the kind watched", Duration::from_secs(20), || {
            controller.logs().iter().any(|l| l.contains("its resource is served now"))
        })
        .await;
        let annotation = || {
            let agent = cp.get_json(&["daemonsets.apps.kruise.io", "agent", "-n", ns]);
            agent["spec"]["template"]["metadata"]["annotations"]["secret.configsum.dev/db"].clone()
        };
        // The watch lists the DaemonSet; then a Secret change rolls it. Changed until rolled, in
        // case the change came before the list.
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut last = "one";
        while annotation() == json!(recorded) {
            last = if last == "two" { "three" } else { "two" };
            cp.apply(&secret(ns, "db", &data(last)));
            assert!(Instant::now() < deadline, "never rolled: {:?}", controller.logs());
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let current = json!(secret_digest(ns, "db", &data(last)));
        wait_until("the digest of the Secret as it is", Duration::from_secs(15), || {
            annotation() == current
        })
        .await;
        assert!(controller.patches().await >= 1.0);
        controller.stop().await;
    });
}

/// Knative Serving's Service, declared as docs/custom-kinds.md declares it.
const KNATIVE: &str = r#"apiVersion: configsum.dev/v1alpha1
kind: CustomKinds
kinds:
- apiVersion: serving.knative.dev/v1
  kind: Service
  resource: services
  template: spec.template
"#;

/// The real CRD of Knative Serving's Service (scripts/install-operator-crds.sh takes it from the
/// Go module knative.dev/serving v0.51.0): the declaration's template path is where its schema
/// keeps a pod template, and the annotations the webhook writes survive the API server's
/// pruning of fields the schema does not know.
#[test]
fn a_knative_service_gets_its_digests_under_the_real_crds_schema() {
    run(async {
        let install = installation().await;
        let cp = install.cp;
        let script = crate::gitops::root().join("scripts/install-operator-crds.sh");
        let output = std::process::Command::new(&script).output().expect("run the script");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let crd_file = crate::gitops::root().join("target/operator-crds/knative-service.yaml");
        let crd_file = crd_file.display().to_string();
        cp.kubectl_ok(&["apply", "--server-side", "-f", &crd_file]);
        cp.wait_established(&["crd/services.serving.knative.dev"]);
        let resources = [("serving.knative.dev", "v1", "services")];
        let serve = serve_declared(install, "knative", KNATIVE, &resources).await;
        let ns = "knative";
        let data = [("password", "one")];
        cp.apply(&secret(ns, "db", &data));
        let service = |image: &str| {
            json!({"apiVersion": "serving.knative.dev/v1", "kind": "Service",
                "metadata": {"name": "hello", "namespace": ns},
                "spec": {"template": {"spec": {"containers": [{"image": image,
                    "envFrom": [{"secretRef": {"name": "db"}}]}]}}}})
            .to_string()
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut round = 0;
        let hello = loop {
            round += 1;
            cp.apply(&service(&format!("hello:{round}")));
            let hello = cp.get_json(&["services.serving.knative.dev", "hello", "-n", ns]);
            if !hello["spec"]["template"]["metadata"]["annotations"].is_null() {
                break hello;
            }
            assert!(Instant::now() < deadline, "the API server never called the webhook");
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        assert_eq!(
            hello["spec"]["template"]["metadata"]["annotations"],
            json!({"secret.configsum.dev/db": secret_digest(ns, "db", &data)}),
            "kept by the real schema"
        );
        assert_eq!(
            hello["metadata"]["generation"],
            json!(round),
            "each template change is a new generation"
        );
        cp.kubectl_ok(&["delete", "mutatingwebhookconfiguration", "knative"]);
        drop(serve);
    });
}
