//! The real API server calls the webhook the chart configures, and applies its patch.

use std::time::Duration;

use serde_json::json;

use crate::install::{
    ConsumeAs, Installation, SYSTEM, config_map, deployment, deployment_with_image, installation,
    point_webhook_at, run, start_serve,
};

use crate::digests::config_map as config_map_digest;

#[test]
fn helm_installs_every_object_of_the_chart() {
    run(async {
        let install = installation().await;
        assert!(install.helm_output.contains("STATUS: deployed"), "{}", install.helm_output);
        // What the chart made, as the API server stored it.
        for (kind, name) in [
            ("deployment", "configsum-webhook"),
            ("deployment", "configsum-controller"),
            ("service", "configsum-webhook"),
            ("serviceaccount", "configsum-webhook"),
            ("serviceaccount", "configsum-controller"),
            ("poddisruptionbudget", "configsum-webhook"),
            ("job", "configsum-digest-key"),
        ] {
            install.cp.kubectl_ok(&["get", kind, name, "-n", SYSTEM]);
        }
        for (kind, name) in [
            ("mutatingwebhookconfiguration", "configsum"),
            ("clusterrole", "configsum-webhook"),
            ("clusterrole", "configsum-controller"),
            ("clusterrolebinding", "configsum-webhook"),
            ("clusterrolebinding", "configsum-controller"),
        ] {
            install.cp.kubectl_ok(&["get", kind, name]);
        }
    });
}

/// `kubectl apply -f dir/` writes the ConfigMap and the Deployment milliseconds apart: the
/// digest the webhook writes is the ConfigMap's new content, on create and on update. (Each
/// round changes the image too: client-side apply sends nothing for an unchanged Deployment,
/// the gap the controller closes.)
#[test]
fn one_apply_of_a_config_map_and_its_deployment_gets_the_fresh_digest() {
    run(async {
        let install = installation().await;
        let ns = "fresh";
        install.cp.namespace(ns, true);
        for version in ["one", "two", "three"] {
            let data = [("mode", version)];
            let image = format!("registry.example/app:{version}");
            let stream = format!(
                "{}\n---\n{}",
                config_map(ns, "app", &data),
                deployment_with_image(ns, "web", &image, &[("app", ConsumeAs::EnvFrom)])
            );
            install.cp.apply(&stream);
            assert_eq!(
                install.template_annotations(ns, "web"),
                json!({"configmap.configsum.dev/app": config_map_digest(ns, "app", &data)}),
                "after applying version {version}"
            );
        }
    });
}

#[test]
fn namespaces_without_the_label_and_configsums_own_are_never_sent() {
    run(async {
        let install = installation().await;
        let plain = "not-opted-in";
        install.cp.namespace(plain, false);
        // Labelled, but excluded by name in the webhook configuration.
        install.cp.kubectl_ok(&[
            "label",
            "namespace",
            SYSTEM,
            "configsum.dev/enabled=true",
            "--overwrite",
        ]);
        install.cp.kubectl_ok(&[
            "label",
            "namespace",
            "kube-system",
            "configsum.dev/enabled=true",
            "--overwrite",
        ]);
        for ns in [plain, SYSTEM, "kube-system"] {
            install.cp.apply(&format!(
                "{}\n---\n{}",
                config_map(ns, "app", &[("k", "v")]),
                deployment(ns, "untouched", &[("app", ConsumeAs::EnvFrom)])
            ));
        }
        // An opted-in namespace's review, applied last, is logged once the others would be.
        let witness = "opted-in-witness";
        install.cp.namespace(witness, true);
        install.cp.apply(&deployment(witness, "web", &[("app", ConsumeAs::EnvFrom)]));
        // Lines are written in order: once the witness's is, the others' would be.
        assert!(!install.reviews_logged_in(witness).await.is_empty(), "the witness was reviewed");
        for ns in [plain, SYSTEM, "kube-system"] {
            assert_eq!(install.template_annotations(ns, "untouched"), json!({}), "{ns}");
            assert_eq!(install.reviews_in(ns), Vec::<String>::new(), "{ns} was sent");
        }
        for ns in [SYSTEM, "kube-system"] {
            install.cp.kubectl_ok(&["label", "namespace", ns, "configsum.dev/enabled-"]);
        }
    });
}

/// A copy of the chart's webhook configuration named `name`, sent only for namespaces labelled
/// `configsum-test/<name>=true` and pointed at `addr`: a test changes where its own reviews go
/// without touching the shared configuration the other tests use.
pub fn scoped_copy(install: &Installation, name: &str, addr: &str) {
    let mut copy = install.cp.get_json(&["mutatingwebhookconfiguration", "configsum"]);
    copy["metadata"] = json!({"name": name});
    copy["webhooks"][0]["name"] = json!(format!("{name}.configsum.dev"));
    copy["webhooks"][0]["namespaceSelector"] =
        json!({"matchLabels": {format!("configsum-test/{name}"): "true"}});
    assert_eq!(copy["webhooks"][0]["failurePolicy"], "Ignore", "the chart's policy");
    install.cp.apply(&copy.to_string());
    point_webhook_at(install.cp, name, addr, &install.path("ca.crt"));
}

/// Applies `yaml` until `done` holds for kubectl's stderr (a changed webhook configuration
/// reaches the API server through its own watch, within a second or so).
async fn apply_until(install: &Installation, yaml: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let applied = install.cp.kubectl_with_input(&["apply", "-f", "-"], Some(yaml));
        let stderr = String::from_utf8_lossy(&applied.stderr).into_owned();
        assert!(applied.status.success(), "{stderr}");
        if done(&stderr) {
            return stderr;
        }
        assert!(std::time::Instant::now() < deadline, "never: {stderr}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// With the webhook down, `failurePolicy: Ignore` admits the workload unchanged.
#[test]
fn a_webhook_that_is_down_admits_workloads_unchanged() {
    run(async {
        let install = installation().await;
        let ns = "webhook-down";
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port");
        scoped_copy(install, "down", &closed.to_string());
        install.cp.apply(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels: {{configsum-test/down: \"true\"}}\n"
        ));
        // The API server counts a webhook that failed open; wait until it has used this one.
        let failed_open = || {
            let metrics = install.cp.kubectl_ok(&["get", "--raw", "/metrics"]);
            metrics
                .lines()
                .filter(|l| l.starts_with("apiserver_admission_webhook_fail_open_count"))
                .filter(|l| l.contains("name=\"down.configsum.dev\""))
                .filter_map(|l| l.rsplit(' ').next().and_then(|n| n.parse::<f64>().ok()))
                .sum::<f64>()
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut round = 0;
        while failed_open() == 0.0 {
            assert!(std::time::Instant::now() < deadline, "the API server never called it");
            round += 1;
            let image = format!("registry.example/app:{round}");
            install.cp.apply(&deployment_with_image(
                ns,
                "web",
                &image,
                &[("app", ConsumeAs::EnvFrom)],
            ));
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        assert_eq!(install.template_annotations(ns, "web"), json!({}), "admitted unchanged");
        install.cp.kubectl_ok(&["delete", "mutatingwebhookconfiguration", "down"]);
    });
}

/// The webhook's ClusterRole is enough for its reads and no broader: as its ServiceAccount it
/// may get ConfigMaps, Secrets, ServiceAccounts and the workloads others may track, and nothing
/// else; a webhook whose reads are
/// forbidden keeps existing annotations and warns, as docs/behaviour.md ("Failure behaviour")
/// says.
#[test]
fn the_webhooks_rbac_is_sufficient_and_no_broader() {
    run(async {
        let install = installation().await;
        let who = format!("--as=system:serviceaccount:{SYSTEM}:configsum-webhook");
        let can = |verb: &str, resource: &str| {
            let output =
                install.cp.kubectl(&["auth", "can-i", verb, resource, "-n", "fresh", &who]);
            String::from_utf8_lossy(&output.stdout).trim() == "yes"
        };
        for resource in [
            "configmaps",
            "secrets",
            "serviceaccounts",
            "deployments.apps",
            "statefulsets.apps",
            "daemonsets.apps",
            "replicasets.apps",
        ] {
            assert!(can("get", resource), "get {resource}");
        }
        for (verb, resource) in [
            ("list", "secrets"),
            ("watch", "secrets"),
            ("list", "configmaps"),
            ("update", "configmaps"),
            ("create", "secrets"),
            ("list", "deployments.apps"),
            ("patch", "deployments.apps"),
            ("get", "pods"),
            ("get", "jobs.batch"),
        ] {
            assert!(!can(verb, resource), "{verb} {resource} must be forbidden");
        }

        // A webhook without those permissions (a ServiceAccount with none): every read is a
        // 403; the existing digest stays and the answer warns.
        let ns = "forbidden-reads";
        install.cp.namespace(ns, true);
        let data = [("k", "v")];
        install.cp.apply(&format!(
            "{}\n---\n{}",
            config_map(ns, "app", &data),
            deployment(ns, "web", &[("app", ConsumeAs::EnvFrom)])
        ));
        let recorded = install.template_annotations(ns, "web");
        assert_eq!(recorded["configmap.configsum.dev/app"], config_map_digest(ns, "app", &data));

        install.cp.kubectl_ok(&["create", "serviceaccount", "no-rights", "-n", SYSTEM]);
        let forbidden = start_serve(install.cp, &install.dir, "no-rights").await;
        scoped_copy(install, "forbidden", &forbidden.addr);
        install.cp.kubectl_ok(&[
            "label",
            "namespace",
            ns,
            "configsum.dev/enabled-",
            "configsum-test/forbidden=true",
        ]);
        install.cp.apply(&config_map(ns, "app", &[("k", "changed")]));
        let changed = deployment(ns, "web", &[("app", ConsumeAs::EnvFrom)])
            .replace("\"replicas\":1", "\"replicas\":2");
        let warning = apply_until(install, &changed, |e| e.contains("could not be read")).await;
        assert!(warning.contains("configmap/app"), "{warning}");
        assert_eq!(install.template_annotations(ns, "web"), recorded, "the digest was kept");
        install.cp.kubectl_ok(&["delete", "mutatingwebhookconfiguration", "forbidden"]);
        drop(forbidden);
    });
}
