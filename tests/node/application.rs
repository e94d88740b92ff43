//! What configsum is for, end to end: pods that read a ConfigMap and a Secret restart with the
//! new value when it changes, once; and a bad value stops at a rollout that fails visibly.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::cluster::*;

/// The demo application `make cluster` installs runs and serves its values.
#[test]
fn the_demo_application_serves_what_it_read() {
    let _shared = sharing();
    let cp = cluster();
    for served in served_by_every_pod(cp, "demo", "demo") {
        assert_eq!(
            (&served["value"], &served["fileValue"]),
            (&json!("hello"), &json!("v1")),
            "{served}"
        );
    }
}

/// A Secret read from a volume changes: configsum's controller pod rolls the Deployment,
/// `kubectl rollout status` completes, every new pod serves the new value and the old pods
/// are gone. Prints the time from the write to the last new pod Ready.
#[test]
fn a_changed_secret_restarts_every_pod_with_the_new_value() {
    let _shared = sharing();
    let cp = cluster();
    let ns = "secret-change";
    namespace_with(
        cp,
        ns,
        &[
            config_map(ns, "web-config", &[("value", "v1")]),
            secret(ns, "web-secret", &[("password", "p1")]),
            app(ns, "web", 2).to_string(),
        ],
    );
    let before = served_by_every_pod(cp, ns, "web");
    assert_eq!(before.len(), 2);
    for served in &before {
        assert_eq!((&served["value"], &served["fileValue"]), (&json!("v1"), &json!("p1")));
    }
    let annotations = template_annotations(cp, ns, "web");
    assert!(
        annotations["secret.configsum.dev/web-secret"].is_string()
            && annotations["configmap.configsum.dev/web-config"].is_string(),
        "the webhook, called through its Service, recorded both: {annotations}"
    );
    let old_pods: Vec<String> = pods(cp, ns, "web").into_iter().map(|p| p.name).collect();
    let generation =
        cp.get_json(&["deployment", "web", "-n", ns])["metadata"]["generation"].clone();

    let written = Instant::now();
    cp.apply(&secret(ns, "web-secret", &[("password", "p2")]));
    // The last new pod Ready, measured here every 100 ms.
    let ready_after = loop {
        let pods = pods(cp, ns, "web");
        let new: Vec<&Pod> = pods.iter().filter(|p| !old_pods.contains(&p.name)).collect();
        if new.len() == 2 && new.iter().all(|p| p.ready) {
            break written.elapsed();
        }
        assert!(written.elapsed() < Duration::from_secs(120), "no rollout: {pods:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    report(&format!(
        "node: Secret write -> every new pod Ready: {:.1} s (2 replicas, controller window 2 s)",
        ready_after.as_secs_f64()
    ));

    let after = served_by_every_pod(cp, ns, "web");
    assert_eq!(after.len(), 2);
    for served in &after {
        assert_eq!((&served["value"], &served["fileValue"]), (&json!("v1"), &json!("p2")));
        assert!(!old_pods.contains(&served["pod"].as_str().unwrap_or_default().to_owned()));
    }
    let remaining: Vec<String> = pods(cp, ns, "web").into_iter().map(|p| p.name).collect();
    assert!(
        remaining.iter().all(|name| !old_pods.contains(name)),
        "old pods remain: {remaining:?}"
    );
    let deployment = cp.get_json(&["deployment", "web", "-n", ns]);
    assert_eq!(
        deployment["metadata"]["generation"].as_i64(),
        generation.as_i64().map(|g| g + 1),
        "one patch, one rollout"
    );
    let events = cp.get_json(&["events", "-n", ns, "--field-selector", "involvedObject.name=web"]);
    assert!(
        events["items"].as_array().is_some_and(|events| events.iter().any(|e| {
            e["reportingComponent"] == "configsum-controller"
                && e["reason"] == "ConfigurationChanged"
                && e["message"].as_str().is_some_and(|m| m.contains("secret/web-secret"))
        })),
        "the controller's Event on the Deployment: {events}"
    );
}

/// One `kubectl apply` of a changed ConfigMap and of its Deployment (changed too, as a Helm
/// upgrade changes it): the webhook records the new content in that same write, so there is
/// one rollout, and the controller, seeing the ConfigMap change, finds nothing to do.
#[test]
fn one_apply_of_a_changed_config_map_and_its_deployment_rolls_once() {
    let _shared = sharing();
    let cp = cluster();
    let ns = "one-apply";
    let release = |n: &str, value: &str| -> String {
        let mut deployment = app(ns, "api", 2);
        deployment["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array_mut()
            .expect("env")
            .push(json!({"name": "RELEASE", "value": n}));
        // The ConfigMap first, as Helm and kubectl order a ConfigMap before a Deployment.
        [
            config_map(ns, "api-config", &[("value", value)]),
            secret(ns, "api-secret", &[("password", "p1")]),
            deployment.to_string(),
        ]
        .join("\n---\n")
    };
    cp.namespace(ns, true);
    cp.apply(&release("1", "v1"));
    for served in served_by_every_pod(cp, ns, "api") {
        assert_eq!(served["value"], "v1");
    }
    let generation = |cp: &crate::control_plane::ControlPlane| {
        cp.get_json(&["deployment", "api", "-n", ns])["metadata"]["generation"].as_i64()
    };
    let first = generation(cp).expect("a generation");

    cp.apply(&release("2", "v2"));
    for served in served_by_every_pod(cp, ns, "api") {
        assert_eq!(served["value"], "v2");
    }
    // The controller's window (2 s) and a second for it to act, had it anything to do.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(generation(cp), Some(first + 1), "one write of the Deployment, one rollout");
    let replica_sets = cp.get_json(&["replicasets", "-n", ns, "-l", "app=api"]);
    assert_eq!(
        replica_sets["items"].as_array().map(Vec::len),
        Some(2),
        "the first template and one new one: {replica_sets}"
    );
}

/// A value that makes the application exit: the controller rolls it, the new pod crashes, the
/// old pods keep serving, and the Deployment (progressDeadlineSeconds 10) reports
/// ProgressDeadlineExceeded, which `kubectl rollout status` and `configsum explain` report
/// too. The fixture that health-gated waves (SPEC 16) build on.
#[test]
fn a_bad_value_stalls_the_rollout_at_its_progress_deadline() {
    let _shared = sharing();
    let cp = cluster();
    let ns = "bad-value";
    let mut deployment = app(ns, "shop", 2);
    deployment["spec"]["progressDeadlineSeconds"] = json!(10);
    namespace_with(
        cp,
        ns,
        &[
            config_map(ns, "shop-config", &[("value", "v1"), ("exit-code", "0")]),
            secret(ns, "shop-secret", &[("password", "p1")]),
            deployment.to_string(),
        ],
    );
    assert_eq!(served_by_every_pod(cp, ns, "shop").len(), 2);
    let old_pods: Vec<String> = pods(cp, ns, "shop").into_iter().map(|p| p.name).collect();

    cp.apply(&config_map(ns, "shop-config", &[("value", "v2"), ("exit-code", "3")]));
    wait_until("ProgressDeadlineExceeded", Duration::from_secs(90), || {
        let deployment = cp.get_json(&["deployment", "shop", "-n", ns]);
        deployment["status"]["conditions"].as_array().is_some_and(|conditions| {
            conditions.iter().any(|c| {
                c["type"] == "Progressing"
                    && c["status"] == "False"
                    && c["reason"] == "ProgressDeadlineExceeded"
            })
        })
    });
    // The new pod ran and exited with the configured code; it never became ready.
    let now = pods(cp, ns, "shop");
    let new: Vec<&Pod> = now.iter().filter(|p| !old_pods.contains(&p.name)).collect();
    assert!(!new.is_empty() && new.iter().all(|p| !p.ready), "{now:?}");
    let exited = new.iter().any(|p| {
        let status = &p.json["status"]["containerStatuses"][0];
        status["lastState"]["terminated"]["exitCode"] == 3
            || status["state"]["terminated"]["exitCode"] == 3
    });
    assert!(
        exited,
        "config-echo exited 3: {:?}",
        new.iter().map(|p| &p.json["status"]).collect::<Vec<_>>()
    );
    // The old pods still serve the old value.
    for pod in now.iter().filter(|p| old_pods.contains(&p.name)) {
        assert!(pod.ready, "{pod:?}");
        let served = served(pod.ip.as_deref().expect("IP"));
        assert_eq!((&served["value"], &served["fileValue"]), (&json!("v1"), &json!("p1")));
    }
    let status = rollout_status(cp, ns, "shop", "5s");
    assert!(!status.status.success());
    assert!(
        String::from_utf8_lossy(&status.stderr).contains("exceeded its progress deadline"),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let answer = explain(cp, &["deployment/shop", "-n", ns]);
    assert_eq!(answer["rollout"]["state"], "failed", "{answer}");
    assert!(
        answer["rollout"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("ProgressDeadlineExceeded")),
        "{answer}"
    );
}
