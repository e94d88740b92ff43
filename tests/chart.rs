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
        (vec!["--set", "controller.fanOut=some"], "fanOut"),
        (vec!["--set", "controller.maxWave=0"], "maxWave"),
        (vec!["--set", "controller.shards=0"], "shards"),
        (vec!["--set", "controller.shards=257"], "shards"),
        (vec!["--set", "controller.maxWave=many"], "maxWave"),
        (vec!["--set", "controller.waveTimeout=forever"], "waveTimeout"),
        (vec!["--set", "controller.notify.secretName=Not_A_Name"], "secretName"),
        (vec!["--set", "controller.notify.key=a/b"], "key"),
        // A URL is no value of the chart: it belongs in the Secret.
        (vec!["--set", "controller.notify.url=https://hooks.example/x"], "url"),
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
    // One byte over the 1,024 the roll-window grammar allows.
    let too_long = format!("controller.rollWindow={}", "x".repeat(1025));
    let refused = refused.into_iter().chain([(vec!["--set", too_long.as_str()], "rollWindow")]);
    let refused: Vec<_> = refused.collect();
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

        // csi.enabled: the CSI driver's statuses in both ClusterRoles, and only then.
        let statuses = |objects: &Objects, role: &str| -> Vec<Value> {
            let key = ("ClusterRole".to_owned(), String::new(), role.to_owned());
            let rules = objects[&key]["rules"].as_array().cloned().unwrap_or_default();
            let csi = |r: &Value| r["resources"][0] == "secretproviderclasspodstatuses";
            rules.into_iter().filter(csi).map(|r| r["verbs"].clone()).collect()
        };
        let csi = by_identity(helm.render(NAMESPACE, &["--set", "csi.enabled=true"]));
        let default = by_identity(helm.render(NAMESPACE, &[]));
        assert_eq!(statuses(&csi, "configsum-webhook"), [serde_json::json!(["list"])]);
        assert_eq!(statuses(&csi, "configsum-controller"), [serde_json::json!(["list", "watch"])]);
        assert!(statuses(&default, "configsum-webhook").is_empty());
        assert!(statuses(&default, "configsum-controller").is_empty());

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

/// apf: the FlowSchema by default, at workload-low; a level of configsum's own on request,
/// the FlowSchema pointing at it; neither when off; a Reject level without queuing.
#[test]
fn apf_values_render_the_flow_schema_and_its_level() {
    let key = |kind: &str| (kind.to_owned(), String::new(), "configsum".to_owned());
    let level_of = |objects: &Objects| {
        objects[&key("FlowSchema")]["spec"]["priorityLevelConfiguration"]["name"].clone()
    };
    for helm in Helm::ALL {
        let default = by_identity(helm.render(NAMESPACE, &[]));
        assert_eq!(level_of(&default), "workload-low");
        assert!(!default.contains_key(&key("PriorityLevelConfiguration")));
        assert_eq!(default[&key("FlowSchema")]["spec"]["matchingPrecedence"], 1000);

        let own = by_identity(helm.render(
            NAMESPACE,
            &["--set", "apf.priorityLevel.create=true", "--set", "apf.matchingPrecedence=700"],
        ));
        assert_eq!(level_of(&own), "configsum");
        assert_eq!(own[&key("FlowSchema")]["spec"]["matchingPrecedence"], 700);
        let limited = &own[&key("PriorityLevelConfiguration")]["spec"]["limited"];
        assert_eq!(limited["nominalConcurrencyShares"], 20);
        assert_eq!(limited["lendablePercent"], 0);
        assert_eq!(
            limited["limitResponse"],
            serde_json::json!({"type": "Queue",
                "queuing": {"queues": 16, "handSize": 4, "queueLengthLimit": 50}})
        );

        let reject = by_identity(helm.render(
            NAMESPACE,
            &[
                "--set",
                "apf.priorityLevel.create=true",
                "--set",
                "apf.priorityLevel.limitResponse.type=Reject",
            ],
        ));
        assert_eq!(
            reject[&key("PriorityLevelConfiguration")]["spec"]["limited"]["limitResponse"],
            serde_json::json!({"type": "Reject"})
        );

        let high =
            by_identity(helm.render(NAMESPACE, &["--set", "apf.priorityLevel.name=workload-high"]));
        assert_eq!(level_of(&high), "workload-high");

        // Only the ServiceAccounts rendered are matched.
        let alone = by_identity(helm.render(
            NAMESPACE,
            &["--set", "controller.enabled=false", "--set", "digestKeyJob.enabled=false"],
        ));
        let subjects = &alone[&key("FlowSchema")]["spec"]["rules"][0]["subjects"];
        assert_eq!(
            subjects,
            &serde_json::json!([{"kind": "ServiceAccount",
                "serviceAccount": {"name": "configsum-webhook", "namespace": NAMESPACE}}])
        );

        let off = by_identity(helm.render(NAMESPACE, &["--set", "apf.enabled=false"]));
        assert!(!off.contains_key(&key("FlowSchema")));
        assert!(!off.contains_key(&key("PriorityLevelConfiguration")));
    }
}

/// The controller's arguments in the rendered chart.
fn controller_args(helm: Helm, args: &[&str]) -> Vec<String> {
    let objects = by_identity(helm.render(NAMESPACE, args));
    let deployment = &objects
        [&("Deployment".to_owned(), NAMESPACE.to_owned(), "configsum-controller".to_owned())];
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("a string").to_owned())
        .collect()
}

#[test]
fn rolling_values_reach_the_controller() {
    let window = "Mon-Fri 22:00-06:00 Europe/Berlin";
    for helm in Helm::ALL {
        // The defaults: waves (the SPEC's default), 50 at most, 10m, and no window flag.
        let args = controller_args(helm, &[]);
        for flag in ["--fan-out=waves", "--max-wave=50", "--wave-timeout=10m"] {
            assert!(args.iter().any(|a| a == flag), "{helm:?}: {flag} in {args:?}");
        }
        assert!(!args.iter().any(|a| a.starts_with("--roll-window")), "{helm:?}: {args:?}");

        let set = format!("controller.rollWindow={window}");
        let args = controller_args(
            helm,
            &[
                "--set",
                "controller.fanOut=all",
                "--set",
                "controller.maxWave=7",
                "--set",
                "controller.waveTimeout=90s",
                "--set",
                &set,
            ],
        );
        for flag in ["--fan-out=all", "--max-wave=7", "--wave-timeout=90s"] {
            assert!(args.iter().any(|a| a == flag), "{helm:?}: {flag} in {args:?}");
        }
        // Spaces and all, one argument.
        let flag = format!("--roll-window={window}");
        assert!(args.contains(&flag), "{helm:?}: {flag} in {args:?}");
    }
}

/// `controller.shards=3`: three Deployments, each running one shard with its own selector
/// (the index only, so that a change of N keeps each Deployment's immutable selector) and
/// its own PodDisruptionBudget; every shard's pods are selected by their Deployment only.
#[test]
fn shards_render_one_deployment_per_shard() {
    for helm in Helm::ALL {
        let objects = by_identity(helm.render(NAMESPACE, &["--set", "controller.shards=3"]));
        let of = |kind: &str, name: &str| {
            objects.get(&(kind.to_owned(), NAMESPACE.to_owned(), name.to_owned()))
        };
        assert!(of("Deployment", "configsum-controller").is_none(), "{helm:?}");
        let deployments: Vec<&Value> = (0..3)
            .map(|i| of("Deployment", &format!("configsum-controller-{i}")).expect("a shard"))
            .collect();
        assert!(of("Deployment", "configsum-controller-3").is_none(), "{helm:?}");
        for (i, deployment) in deployments.iter().enumerate() {
            let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
            assert!(args.contains(&format!("\"--shard={i}/3\"")), "{helm:?}: {args}");
            assert!(args.contains("\"--lease-name=configsum-controller\""), "{args}");
            let pdb =
                of("PodDisruptionBudget", &format!("configsum-controller-{i}")).expect("a PDB");
            assert_eq!(pdb["spec"]["selector"], deployment["spec"]["selector"]);
            for (j, other) in deployments.iter().enumerate() {
                let labels: BTreeMap<&str, &str> = other["spec"]["template"]["metadata"]["labels"]
                    .as_object()
                    .expect("labels")
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str().expect("a string")))
                    .collect();
                let selected = structured_selects(&deployment["spec"]["selector"], &labels);
                assert_eq!(selected, i == j, "{helm:?}: Deployment {i} selects shard {j}'s pods");
            }
        }
        // One shard is the unsharded install, byte for byte the default.
        let one = by_identity(helm.render(NAMESPACE, &["--set", "controller.shards=1"]));
        assert_eq!(one, by_identity(helm.render(NAMESPACE, &[])), "{helm:?}");
        assert!(!controller_args(helm, &[]).iter().any(|a| a.starts_with("--shard")));
    }
}

/// Whether the API server's structured selector (matchLabels, matchExpressions) selects
/// `labels`: Kubernetes' rules, written out here independently of the code under test.
fn structured_selects(selector: &Value, labels: &BTreeMap<&str, &str>) -> bool {
    let match_labels = selector["matchLabels"].as_object().into_iter().flatten();
    let by_labels =
        match_labels.into_iter().all(|(k, v)| labels.get(k.as_str()) == v.as_str().as_ref());
    let expressions = selector["matchExpressions"].as_array().into_iter().flatten();
    by_labels
        && expressions.into_iter().all(|e| {
            let key = e["key"].as_str().expect("key");
            let values: Vec<&str> =
                e["values"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            let value = labels.get(key);
            match e["operator"].as_str().expect("operator") {
                "In" => value.is_some_and(|v| values.contains(v)),
                "NotIn" => value.is_none_or(|v| !values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                other => panic!("operator {other}"),
            }
        })
}

#[test]
fn one_namespace_selector_for_the_webhook_and_the_controller() {
    use configsum::core::model::label_selector::LabelSelector;
    let values = "namespaceSelector:\n  matchLabels: {team: payments}\n  matchExpressions:\n    \
        - {key: env, operator: NotIn, values: [dev, test]}\n    - {key: managed, operator: Exists}\n    \
        - {key: legacy, operator: DoesNotExist}\nobjectSelector: reload in (on, yes)\n";
    let dir = std::env::temp_dir().join(format!("configsum-chart-ns-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("values.yaml");
    std::fs::write(&file, values).expect("values");
    let file = file.display().to_string();
    for helm in Helm::ALL {
        let objects = by_identity(helm.render(NAMESPACE, &["-f", &file]));
        let webhook = &objects
            [&("MutatingWebhookConfiguration".to_owned(), String::new(), "configsum".to_owned())];
        let structured = &webhook["webhooks"][0]["namespaceSelector"];
        let args = controller_args(helm, &["-f", &file]);
        let flag = args
            .iter()
            .find_map(|a| a.strip_prefix("--namespace-selector="))
            .unwrap_or_else(|| panic!("{helm:?}: no --namespace-selector in {args:?}"));
        let parsed = LabelSelector::parse(flag).unwrap_or_else(|e| panic!("{flag}: {e}"));
        let namespaces: [&[(&str, &str)]; 6] = [
            &[("team", "payments"), ("managed", "yes")],
            &[("team", "payments"), ("managed", "yes"), ("env", "prod")],
            &[("team", "payments"), ("managed", "yes"), ("env", "dev")],
            &[("team", "payments")],
            &[("team", "search"), ("managed", "yes")],
            &[("team", "payments"), ("managed", "yes"), ("legacy", "1")],
        ];
        let mut selected = 0;
        for pairs in namespaces {
            let mut labels: BTreeMap<&str, &str> = pairs.iter().copied().collect();
            labels.insert("kubernetes.io/metadata.name", "app");
            let controller = parsed.matches(|k| labels.get(k).copied());
            assert_eq!(controller, structured_selects(structured, &labels), "{helm:?}: {pairs:?}");
            selected += usize::from(controller);
        }
        assert_eq!(selected, 2, "{helm:?}: {flag}");
        // The object selector, one argument, in both.
        let deployment = |name: &str| {
            let key = ("Deployment".to_owned(), NAMESPACE.to_owned(), name.to_owned());
            objects[&key]["spec"]["template"]["spec"]["containers"][0]["args"].clone()
        };
        for name in ["configsum-webhook", "configsum-controller"] {
            let args = deployment(name);
            let flag = Value::from("--object-selector=reload in (on, yes)");
            assert!(args.as_array().expect("args").contains(&flag), "{helm:?} {name}: {args}");
        }
        // configsum's own namespace is always left out of the webhook's.
        let mut own: BTreeMap<&str, &str> = namespaces[0].iter().copied().collect();
        own.insert("kubernetes.io/metadata.name", NAMESPACE);
        assert!(!structured_selects(structured, &own), "{helm:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_notify_secret_is_mounted_and_passed_to_the_controller() {
    for helm in Helm::ALL {
        let args = controller_args(helm, &[]);
        assert!(!args.iter().any(|a| a.starts_with("--notify-config")), "{helm:?}: {args:?}");

        let set = ["--set", "controller.notify.secretName=team-hooks"];
        let objects = by_identity(helm.render(NAMESPACE, &set));
        let deployment = &objects
            [&("Deployment".to_owned(), NAMESPACE.to_owned(), "configsum-controller".to_owned())];
        let pod = &deployment["spec"]["template"]["spec"];
        let args = controller_args(helm, &set);
        let flag = "--notify-config=/etc/configsum/notify/notify.yaml";
        assert!(args.iter().any(|a| a == flag), "{helm:?}: {args:?}");
        let volumes = pod["volumes"].as_array().expect("volumes");
        let volume = volumes.iter().find(|v| v["name"] == "notify").expect("the notify volume");
        assert_eq!(volume["secret"]["secretName"], "team-hooks");
        assert_eq!(volume["secret"]["items"][0]["key"], "notify.yaml");
        let mounts = pod["containers"][0]["volumeMounts"].as_array().expect("mounts");
        let mount = mounts.iter().find(|m| m["name"] == "notify").expect("the notify mount");
        assert_eq!(mount["mountPath"], "/etc/configsum/notify");
        assert_eq!(mount["readOnly"], true);
        // Nothing of the chart's own carries the file: no ConfigMap, no Secret it renders.
        for (kind, _, name) in objects.keys() {
            assert!(
                !(kind == "ConfigMap" || kind == "Secret") || !name.contains("notify"),
                "{name}"
            );
        }

        let key = [
            "--set",
            "controller.notify.secretName=hooks",
            "--set",
            "controller.notify.key=t.yaml",
        ];
        let args = controller_args(helm, &key);
        assert!(
            args.iter().any(|a| a == "--notify-config=/etc/configsum/notify/t.yaml"),
            "{args:?}"
        );
    }
}

#[test]
fn a_namespaced_install_grants_roles_in_the_listed_namespaces_only() {
    let set = ["--set", "rbac.scope=namespaced", "--set", "namespaces={team-a,team-b}"];
    for helm in Helm::ALL {
        let objects = by_identity(helm.render(NAMESPACE, &set));
        // No ClusterRole grants anything but namespaces.
        for ((kind, _, name), object) in &objects {
            if kind != "ClusterRole" || !name.starts_with("configsum") {
                continue;
            }
            let resources: BTreeSet<&str> = object["rules"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|rule| rule["resources"].as_array().into_iter().flatten())
                .filter_map(Value::as_str)
                .collect();
            assert!(
                resources.iter().all(|r| *r == "namespaces"),
                "{helm:?}: ClusterRole {name} grants {resources:?}"
            );
        }
        for ns in ["team-a", "team-b"] {
            for name in ["configsum-webhook", "configsum-controller"] {
                let role = &objects[&("Role".to_owned(), ns.to_owned(), name.to_owned())];
                let grants_secrets = role["rules"].as_array().into_iter().flatten().any(|rule| {
                    rule["resources"].as_array().into_iter().flatten().any(|r| r == "secrets")
                });
                assert!(grants_secrets, "{helm:?}: Role {ns}/{name}");
                let binding = &objects[&("RoleBinding".to_owned(), ns.to_owned(), name.to_owned())];
                assert_eq!(binding["subjects"][0]["namespace"], NAMESPACE, "{helm:?}");
            }
        }
        let deployment = |name: &str| {
            let key = ("Deployment".to_owned(), NAMESPACE.to_owned(), name.to_owned());
            objects[&key]["spec"]["template"]["spec"]["containers"][0]["args"].clone()
        };
        for name in ["configsum-webhook", "configsum-controller"] {
            let args = deployment(name);
            let flag = Value::from("--namespaces=team-a,team-b");
            assert!(args.as_array().expect("args").contains(&flag), "{helm:?} {name}: {args}");
        }
        let webhook = &objects
            [&("MutatingWebhookConfiguration".to_owned(), String::new(), "configsum".to_owned())];
        let expressions = &webhook["webhooks"][0]["namespaceSelector"]["matchExpressions"];
        let names = expressions
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["key"] == "kubernetes.io/metadata.name" && e["operator"] == "In")
            .unwrap_or_else(|| panic!("{helm:?}: no name In expression in {expressions}"));
        assert_eq!(names["values"], serde_json::json!(["team-a", "team-b"]));
        // Namespaced without namespaces is refused, naming what is missing.
        let refused = helm.template(NAMESPACE, &["--set", "rbac.scope=namespaced"]);
        let error = refused.expect_err("namespaced needs namespaces");
        assert!(error.contains("rbac.scope=namespaced needs namespaces"), "{helm:?}: {error}");
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

/// Every value of the chart, nested ones included (`webhook`, `webhook.resources`,
/// `webhook.resources.requests` and `webhook.resources.requests.cpu` alike), has
/// a comment of its own in values.yaml (the line above it, or on its line) and a
/// `description` in values.schema.json; every leaf is in docs/helm.md's table as
/// `path`, and the table names nothing else. The schema has no value of the
/// chart's own that values.yaml lacks. A value the schema types as a free-form
/// Kubernetes object (affinity, podAnnotations, nodeSelector) is one value: the
/// keys of its default are Kubernetes' fields, not the chart's.
#[test]
fn every_value_is_commented_described_and_in_the_docs() {
    let text = std::fs::read_to_string(format!("{CHART}/values.yaml")).expect("values.yaml");
    let values: Value = serde_saphyr::from_str(&text).expect("values YAML");
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{CHART}/values.schema.json")).expect("schema"),
    )
    .expect("schema JSON");
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/helm.md"))
        .expect("docs/helm.md");

    let mut walk = Walk { root: &schema, comments: commented_keys(&text), ..Walk::default() };
    walk.values(&values, &schema, "", false);
    assert!(
        walk.problems.is_empty(),
        "values.yaml and values.schema.json:\n{}",
        walk.problems.join("\n")
    );
    assert!(walk.leaves.len() > 40 && walk.intermediate.len() > 10, "{:?}", walk.leaves);

    // The table in "## Values": every leaf, and nothing that is not a value.
    let section = docs.split("\n## Values\n").nth(1).expect("a Values section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let rows: BTreeSet<&str> = section
        .lines()
        .filter_map(|line| line.strip_prefix("| `")?.split_once("` |").map(|(path, _)| path))
        .collect();
    let leaves: BTreeSet<&str> = walk.leaves.iter().map(String::as_str).collect();
    let missing: Vec<&&str> = leaves.difference(&rows).collect();
    assert!(missing.is_empty(), "not in docs/helm.md's table: {missing:?}");
    let unknown: Vec<&&str> = rows.difference(&leaves).collect();
    assert!(unknown.is_empty(), "in docs/helm.md's table but not a value: {unknown:?}");
}

/// Walks values.yaml beside the schema, collecting every value and what each lacks.
#[derive(Default)]
struct Walk<'a> {
    root: &'a Value,
    /// Every key of values.yaml outside lists, by path: whether it has a comment.
    comments: BTreeMap<String, bool>,
    leaves: Vec<String>,
    intermediate: Vec<String>,
    problems: Vec<String>,
}

impl<'a> Walk<'a> {
    /// `schema` is the node `values` is checked against; `via_ref` when it is
    /// a shared definition (a Kubernetes shape such as resources), whose
    /// optional properties a default need not set.
    fn values(&mut self, values: &Value, schema: &'a Value, path: &str, via_ref: bool) {
        let Some(map) = values.as_object() else { return };
        let properties = schema["properties"].as_object();
        if let (Some(properties), false) = (properties, via_ref) {
            for key in properties.keys().filter(|k| !map.contains_key(*k)) {
                self.problems.push(format!("{path}.{key}: in the schema, not in values.yaml"));
            }
        }
        for (key, value) in map {
            let path = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
            match self.comments.get(&path) {
                None => self.problems.push(format!("{path}: not found in values.yaml's text")),
                Some(false) => self.problems.push(format!("{path}: no comment in values.yaml")),
                Some(true) => {}
            }
            let declared = properties.and_then(|p| p.get(key));
            let node = match declared {
                Some(node) => node,
                None if schema["additionalProperties"].is_object() => {
                    &schema["additionalProperties"]
                }
                None => {
                    self.problems.push(format!("{path}: not in values.schema.json"));
                    continue;
                }
            };
            let (target, referenced) = self.resolve(node);
            if !node["description"].is_string() && !target["description"].is_string() {
                self.problems.push(format!("{path}: no description in values.schema.json"));
            }
            if value.as_object().is_some_and(|m| !m.is_empty()) && target["properties"].is_object()
            {
                self.intermediate.push(path.clone());
                self.values(value, target, &path, via_ref || referenced);
            } else {
                self.leaves.push(path);
            }
        }
    }

    /// The node a `$ref` points to (the node itself without one), and whether it was one.
    fn resolve(&self, node: &'a Value) -> (&'a Value, bool) {
        match node["$ref"].as_str().and_then(|r| r.strip_prefix("#/")) {
            Some(pointer) => {
                let target = self.root.pointer(&format!("/{pointer}")).unwrap_or(&Value::Null);
                (self.resolve(target).0, true)
            }
            None => (node, false),
        }
    }
}

/// Every key of a values file outside lists, as a dotted path, and whether a
/// comment documents it: the line directly above it, or one on its own line.
fn commented_keys(text: &str) -> BTreeMap<String, bool> {
    let lines: Vec<&str> = text.lines().collect();
    let mut keys = BTreeMap::new();
    // (indentation, key); "-" marks a list item, whose keys are its elements'.
    let mut open: Vec<(usize, String)> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let indent = line.len() - trimmed.len();
        while open.last().is_some_and(|(at, _)| *at >= indent) {
            open.pop();
        }
        if trimmed == "-" || trimmed.starts_with("- ") {
            open.push((indent, "-".into()));
            continue;
        }
        if open.iter().any(|(_, key)| key == "-") {
            continue;
        }
        let Some((key, rest)) = trimmed.split_once(':') else { continue };
        let path: Vec<&str> =
            open.iter().map(|(_, k)| k.as_str()).chain(std::iter::once(key)).collect();
        let above = i > 0 && lines[i - 1].trim_start().starts_with('#');
        keys.insert(path.join("."), above || rest.contains(" #"));
        open.push((indent, key.to_owned()));
    }
    keys
}
