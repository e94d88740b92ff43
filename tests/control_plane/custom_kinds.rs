//! Kinds declared in a file, on the real API server: two CRDs shaped as an OpenKruise CloneSet
//! and a Harbor operator HarborCluster (written here for the test; their real CRDs are not
//! served by any package registry these machines reach), the real `configsum serve` with
//! `--custom-kinds`, and a copy of the chart's webhook configuration with rules for both kinds,
//! as the chart's `customKinds` value renders them. `kubectl apply` of each custom resource comes
//! back with the digests the webhook wrote: on the CloneSet's pod template, and in the
//! HarborCluster's `spec.podAnnotations`, which the patch creates.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::digests;
use crate::install::{KEY, installation, run, start_serve_with};
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
            cp.kubectl_ok(&[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                &format!("crd/{plural}.{group}"),
            ]);
        }
        std::fs::write(install.path("custom-kinds.yaml"), KINDS).expect("kinds");
        let kinds = install.path("custom-kinds.yaml").display().to_string();
        let serve =
            start_serve_with(cp, &install.dir, "configsum-webhook", &["--custom-kinds", &kinds])
                .await;
        // The chart's configuration, with the rules its customKinds value adds.
        scoped_copy(install, "custom", &serve.addr);
        let mut config = cp.get_json(&["mutatingwebhookconfiguration", "custom"]);
        let rules = config["webhooks"][0]["rules"].as_array_mut().expect("rules");
        for (group, version, plural) in [
            ("apps.kruise.io", "v1alpha1", "clonesets"),
            ("goharbor.io", "v1beta1", "harborclusters"),
        ] {
            rules.push(
                json!({"apiGroups": [group], "apiVersions": [version], "resources": [plural],
                "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"}),
            );
        }
        cp.apply(&config.to_string());

        let ns = "custom-kinds";
        cp.apply(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels: {{configsum-test/custom: \"true\"}}\n"
        ));
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
