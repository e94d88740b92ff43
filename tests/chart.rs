//! charts/configsum with real Helm 3 and Helm 4 (scripts/install-helm.sh): lint
//! clean, the same objects as the kustomize base by default, the schema
//! refusing bad values, and every value documented. tests/manifests.rs checks
//! the rendered objects against the code; scripts/validate-manifests.sh
//! validates them against the Kubernetes API schemas.

#[path = "support/chart.rs"]
mod render;

use std::collections::{BTreeMap, BTreeSet};

use render::{CHART, CUSTOM_VALUES, Helm, NAMESPACE, by_identity, kustomize};
use serde_json::Value;

type Objects = BTreeMap<(String, String, String), Value>;

/// Equal object by object, naming the first that differs.
fn assert_same_objects(chart: &Objects, kustomize: &Objects, what: &str) {
    let chart_keys: BTreeSet<_> = chart.keys().collect();
    let kustomize_keys: BTreeSet<_> = kustomize.keys().collect();
    assert_eq!(chart_keys, kustomize_keys, "{what}: the same objects");
    for (key, object) in chart {
        assert!(
            object == &kustomize[key],
            "{what}: {key:?} differs\nchart:\n{}\nkustomize:\n{}",
            serde_json::to_string_pretty(object).unwrap_or_default(),
            serde_json::to_string_pretty(&kustomize[key]).unwrap_or_default()
        );
    }
}

fn is_namespace(key: &(String, String, String)) -> bool {
    key.0 == "Namespace"
}

#[test]
fn lint_is_clean_with_helm_3_and_4() {
    for helm in Helm::ALL {
        for args in [
            vec!["lint", CHART],
            vec!["lint", "--strict", CHART],
            vec!["lint", "--strict", CHART, "-f", CUSTOM_VALUES],
            vec!["lint", "--strict", CHART, "--set", "controller.enabled=false"],
        ] {
            let out = helm.run(&args);
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{helm:?} {args:?}: {stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            // Only [INFO] remarks (Chart.yaml has no icon): no [WARNING] or [ERROR].
            for line in stdout.lines().filter(|l| l.starts_with('[')) {
                assert!(line.starts_with("[INFO]"), "{helm:?} {args:?}: {line}");
            }
            assert!(stdout.contains("1 chart(s) linted, 0 chart(s) failed"), "{stdout}");
        }
    }
}

#[test]
fn defaults_render_the_kustomize_base() {
    let base = by_identity(kustomize("manifests"));
    assert!(base.keys().any(is_namespace), "the base has a Namespace");
    for helm in Helm::ALL {
        // namespace.create is off by default (helm install --create-namespace):
        // the base's objects but its Namespace.
        let chart = by_identity(helm.render(NAMESPACE, &[]));
        let without_namespace: Objects =
            base.clone().into_iter().filter(|(key, _)| !is_namespace(key)).collect();
        assert_same_objects(&chart, &without_namespace, &format!("{helm:?} defaults"));
        // With it, the Namespace too, restricted Pod Security label included.
        let chart = by_identity(helm.render(NAMESPACE, &["--set", "namespace.create=true"]));
        assert_same_objects(&chart, &base, &format!("{helm:?} namespace.create=true"));
    }
}

#[test]
fn network_policy_values_render_the_component() {
    // manifests/overlays/network-policy: the component with two API server addresses.
    let overlay: Objects = by_identity(kustomize("manifests/overlays/network-policy"))
        .into_iter()
        .filter(|(key, _)| !is_namespace(key))
        .collect();
    for helm in Helm::ALL {
        let chart = by_identity(helm.render(
            NAMESPACE,
            &[
                "--set",
                "networkPolicy.enabled=true",
                "--set",
                "networkPolicy.webhookCallerCIDRs={10.0.0.10/32,10.0.0.11/32}",
            ],
        ));
        assert_same_objects(&chart, &overlay, &format!("{helm:?} networkPolicy.enabled"));
    }
}

#[test]
fn helm_3_and_4_render_the_same_objects() {
    for args in [&[][..], &["-f", CUSTOM_VALUES][..]] {
        let v3 = by_identity(Helm::V3.render(NAMESPACE, args));
        let v4 = by_identity(Helm::V4.render(NAMESPACE, args));
        assert_same_objects(&v3, &v4, &format!("Helm 3 and 4 with {args:?}"));
    }
}

#[test]
fn the_schema_and_the_templates_refuse_bad_values() {
    let refused = [
        // (values, what the error must mention)
        (vec!["--set", "webhook.replicas=two"], "replicas"),
        (vec!["--set", "webhook.replicas=1"], "replicas"),
        (vec!["--set", "controller.rate=0"], "rate"),
        (vec!["--set", "controller.burst=0"], "burst"),
        (vec!["--set", "controller.window=soon"], "window"),
        (vec!["--set", "controller.registryRate=fast"], "registryRate"),
        (vec!["--set", "annotationDomain=Not_A_Domain"], "annotationDomain"),
        (vec!["--set", "logFormat=xml"], "logFormat"),
        (vec!["--set", "tls.mode=vault"], "mode"),
        (vec!["--set", "image.pullPolicy=Sometimes"], "pullPolicy"),
        (vec!["--set", "webhook.replica=3"], "replica"),
        (vec!["--set", "networkPolicy.webhookCallerCIDRs={api-server}"], "webhookCallerCIDRs"),
        // A user-supplied CA without the CA, a NetworkPolicy without callers.
        (vec!["--set", "tls.mode=secret"], "caBundle"),
        (vec!["--set", "networkPolicy.enabled=true"], "webhookCallerCIDRs"),
        // Both sources for the registry CA: the template refuses.
        (vec!["--set", "registry.ca.configMap=a", "--set", "registry.ca.secret=b"], "not both"),
    ];
    for helm in Helm::ALL {
        for (args, mention) in &refused {
            match helm.template(NAMESPACE, args) {
                Ok(_) => panic!("{helm:?} accepted {args:?}"),
                Err(e) => assert!(e.contains(mention), "{helm:?} {args:?}: {e}"),
            }
        }
    }
}

#[test]
fn optional_parts_come_and_go_with_their_values() {
    let kinds_named = |objects: &Objects, name: &str| -> Vec<String> {
        objects.keys().filter(|k| k.2.starts_with(name)).map(|k| k.0.clone()).collect()
    };
    for helm in Helm::ALL {
        let off = by_identity(helm.render(NAMESPACE, &["--set", "controller.enabled=false"]));
        assert_eq!(kinds_named(&off, "configsum-controller"), Vec::<String>::new());
        assert!(off.contains_key(&(
            "Deployment".into(),
            NAMESPACE.into(),
            "configsum-webhook".into()
        )));

        // One controller replica: no PodDisruptionBudget to block every drain.
        let one = by_identity(helm.render(NAMESPACE, &["--set", "controller.replicas=1"]));
        let pdb = (
            "PodDisruptionBudget".to_owned(),
            NAMESPACE.to_owned(),
            "configsum-controller".to_owned(),
        );
        assert!(!one.contains_key(&pdb));
        assert!(one.contains_key(&(
            "Deployment".into(),
            NAMESPACE.into(),
            "configsum-controller".into()
        )));

        let no_job = by_identity(helm.render(NAMESPACE, &["--set", "digestKeyJob.enabled=false"]));
        assert_eq!(kinds_named(&no_job, "configsum-digest-key"), Vec::<String>::new());

        // A Secret for the registry CA instead of a ConfigMap.
        let secret_ca =
            by_identity(helm.render(NAMESPACE, &["--set", "registry.ca.secret=registry-ca"]));
        for name in ["configsum-webhook", "configsum-controller"] {
            let pod = &secret_ca[&("Deployment".to_owned(), NAMESPACE.to_owned(), name.to_owned())]
                ["spec"]["template"]["spec"];
            let volumes = pod["volumes"].as_array().expect("volumes");
            assert!(
                volumes
                    .iter()
                    .any(|v| v["name"] == "registry-ca"
                        && v["secret"]["secretName"] == "registry-ca"),
                "{helm:?} {name}: {volumes:?}"
            );
            let args = pod["containers"][0]["args"].as_array().expect("args");
            assert!(
                args.iter().any(|a| a == "--registry-ca-file=/etc/configsum/registry-ca/ca.crt")
            );
        }
    }
}

#[test]
fn chart_version_follows_the_crate() {
    let text = std::fs::read_to_string(format!("{CHART}/Chart.yaml")).expect("Chart.yaml");
    let chart: Value = serde_saphyr::from_str(&text).expect("Chart.yaml YAML");
    assert_eq!(chart["apiVersion"], "v2");
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"), "the default image tag");
    assert_eq!(chart["version"], env!("CARGO_PKG_VERSION"));
}

/// Every value in values.yaml is in values.schema.json with a description or a
/// type, and in docs/helm.md's table as `path`; the schema has no value that
/// values.yaml lacks. Maps the user fills (resources, affinity, podAnnotations,
/// ...) are one value each.
#[test]
fn every_value_is_in_the_schema_and_the_docs() {
    let values: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(format!("{CHART}/values.yaml")).expect("values.yaml"),
    )
    .expect("values YAML");
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{CHART}/values.schema.json")).expect("schema"),
    )
    .expect("schema JSON");
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/helm.md"))
        .expect("docs/helm.md");

    fn leaves(values: &Value, schema: &Value, path: &str, out: &mut Vec<String>) {
        let properties = schema["properties"].as_object().expect("properties");
        let map = values.as_object().expect("a map of values");
        let in_values: BTreeSet<&String> = map.keys().collect();
        let in_schema: BTreeSet<&String> = properties.keys().collect();
        assert_eq!(in_values, in_schema, "values.yaml and values.schema.json at '{path}'");
        for (key, value) in map {
            let path = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
            let node = &properties[key];
            if value.is_object() && node["properties"].is_object() {
                leaves(value, node, &path, out);
            } else {
                assert!(
                    node["description"].is_string(),
                    "{path}: no description in values.schema.json"
                );
                out.push(path);
            }
        }
    }
    let mut paths = Vec::new();
    leaves(&values, &schema, "", &mut paths);
    assert!(paths.len() > 30, "{paths:?}");
    let undocumented: Vec<&String> =
        paths.iter().filter(|p| !docs.contains(&format!("| `{p}` |"))).collect();
    assert!(undocumented.is_empty(), "not in docs/helm.md's table: {undocumented:?}");
}
