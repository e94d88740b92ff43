//! configsum's own pods, as the chart runs them: installed by `helm install` with only the
//! image and the fan-out (waves, its default) set, TLS by cert-manager as the chart defaults;
//! a leader that is deleted hands its Lease to the other replica; with every webhook pod
//! deleted, writes are still admitted and the controller catches up.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::cluster::*;
use crate::control_plane::ControlPlane;

fn helm_values(cp: &ControlPlane) -> Value {
    let output = helm(cp, &["get", "values", "configsum", "-n", SYSTEM, "-o", "json"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("helm's JSON")
}

/// The pods of one of configsum's Deployments.
fn configsum_pods(cp: &ControlPlane, name: &str) -> Vec<Value> {
    let list =
        cp.get_json(&["pods", "-n", SYSTEM, "-l", &format!("app.kubernetes.io/name={name}")]);
    list["items"].as_array().cloned().unwrap_or_default()
}

fn lease_holder(cp: &ControlPlane) -> String {
    let lease = cp.get_json(&["lease", "configsum-controller", "-n", SYSTEM]);
    lease["spec"]["holderIdentity"].as_str().unwrap_or_default().to_owned()
}

fn name_of(pod: &Value) -> String {
    pod["metadata"]["name"].as_str().unwrap_or_default().to_owned()
}

/// Both of configsum's Deployments back at two ready replicas, for the tests after.
fn back_to_full_strength(cp: &ControlPlane) {
    for name in ["configsum-webhook", "configsum-controller"] {
        let output = cp.kubectl(&[
            "rollout",
            "status",
            &format!("deployment/{name}"),
            "-n",
            SYSTEM,
            "--timeout=120s",
        ]);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        wait_until(
            &format!("{name}: two ready pods, none terminating"),
            Duration::from_secs(60),
            || {
                let pods = configsum_pods(cp, name);
                pods.len() == 2
                    && pods.iter().all(|p| {
                        p["metadata"]["deletionTimestamp"].is_null()
                            && p["status"]["conditions"].as_array().is_some_and(|c| {
                                c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True")
                            })
                    })
            },
        );
    }
}

#[test]
fn configsum_runs_as_pods_installed_by_its_chart() {
    let _shared = sharing();
    let cp = cluster();
    let values = helm_values(cp);
    assert_eq!(values["image"], json!({"repository": "configsum", "pullPolicy": "Never"}));
    // Waves, set explicitly for tests/node/waves.rs, though it is the chart's default.
    assert_eq!(values["controller"], json!({"fanOut": "waves"}));
    let set: Vec<&String> = values.as_object().expect("values").keys().collect();
    // TLS at the chart's default: cert-manager (scripts/cluster.sh).
    assert_eq!(set, ["controller", "image"], "nothing else set: {values}");

    let image = format!("configsum:{}", env!("CARGO_PKG_VERSION"));
    for (name, account) in [
        ("configsum-webhook", "configsum-webhook"),
        ("configsum-controller", "configsum-controller"),
    ] {
        let pods = configsum_pods(cp, name);
        assert_eq!(pods.len(), 2, "{name}: two replicas");
        for pod in &pods {
            assert_eq!(pod["spec"]["serviceAccountName"], account);
            assert_eq!(pod["spec"]["nodeName"], "configsum-node");
            let status = &pod["status"]["containerStatuses"][0];
            assert_eq!(status["ready"], true, "{name}: {status}");
            assert_eq!(status["image"], format!("docker.io/library/{image}"), "{status}");
            // Probes ran against the pod's own address.
            assert!(pod["spec"]["containers"][0]["readinessProbe"].is_object());
        }
    }
    // The digest-key Job ran as a pod and made the key (the Job deletes itself later).
    let key = cp.get_json(&["secret", "configsum-digest-key", "-n", SYSTEM]);
    assert!(key["data"]["keys"].as_str().is_some_and(|k| !k.is_empty()));
    // One controller pod leads.
    let leader = lease_holder(cp);
    let controllers: Vec<String> =
        configsum_pods(cp, "configsum-controller").iter().map(name_of).collect();
    assert!(controllers.contains(&leader), "{leader} leads one of {controllers:?}");
    // The PodDisruptionBudget sees both webhook pods.
    let pdb = cp.get_json(&["pdb", "configsum-webhook", "-n", SYSTEM]);
    assert_eq!(
        (&pdb["status"]["currentHealthy"], &pdb["status"]["disruptionsAllowed"]),
        (&json!(2), &json!(1))
    );
    // The API server reaches the webhook by the chart's Service, no URL.
    let webhook = cp.get_json(&["mutatingwebhookconfiguration", "configsum"]);
    assert_eq!(
        webhook["webhooks"][0]["clientConfig"]["service"]["name"], "configsum-webhook",
        "{webhook}"
    );
    assert!(webhook["webhooks"][0]["clientConfig"]["url"].is_null());
}

/// Deleting the leading controller pod: the stopping leader releases its Lease and another
/// replica takes it (the standby, which tries every `--lease-duration / 5`, or the pod that
/// replaces the deleted one, which tries as it starts: whichever comes first), and a
/// following Secret change still rolls.
#[test]
fn deleting_the_leading_controller_pod_hands_the_lease_over() {
    let _alone = disrupting();
    let cp = cluster();
    let ns = "lease-handover";
    api_serving_v1(cp, ns);
    back_to_full_strength(cp);
    let leader = lease_holder(cp);
    let standby: Vec<String> = configsum_pods(cp, "configsum-controller")
        .iter()
        .map(name_of)
        .filter(|name| *name != leader)
        .collect();
    assert_eq!(standby.len(), 1, "{standby:?}");

    let deleted = Instant::now();
    cp.kubectl_ok(&["delete", "pod", &leader, "-n", SYSTEM, "--wait=false"]);
    let mut holder = String::new();
    wait_until("another controller pod holds the Lease", Duration::from_secs(40), || {
        holder = lease_holder(cp);
        let live: Vec<String> = configsum_pods(cp, "configsum-controller")
            .iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .map(name_of)
            .collect();
        holder != leader && live.contains(&holder)
    });
    report(&format!(
        "node: leader pod deleted -> {} leads: {:.1} s",
        if holder == standby[0] { "the standby" } else { "its replacement" },
        deleted.elapsed().as_secs_f64()
    ));

    cp.apply(&secret(ns, "api-secret", &[("password", "p2")]));
    wait_until("the new leader rolled api", Duration::from_secs(60), || {
        let pods = pods(cp, ns, "api");
        pods.len() == 1
            && pods[0].ready
            && !pods[0].terminating
            && served(pods[0].ip.as_deref().unwrap_or("0.0.0.0"))["fileValue"] == "p2"
    });
    back_to_full_strength(cp);
}

/// Every webhook pod deleted: workloads written meanwhile are admitted unchanged
/// (`failurePolicy: Ignore`), and the controller gives them their digests when what they
/// consume changes (a first observation, SPEC 9), so their pods still get the new value.
#[test]
fn with_every_webhook_pod_deleted_writes_are_admitted_and_the_controller_catches_up() {
    let _alone = disrupting();
    let cp = cluster();
    let ns = "webhook-down";
    namespace_with(
        cp,
        ns,
        &[
            config_map(ns, "late-config", &[("value", "v1")]),
            secret(ns, "late-secret", &[("password", "p1")]),
        ],
    );
    back_to_full_strength(cp);
    let before = failed_open(cp);

    cp.kubectl_ok(&[
        "delete",
        "pod",
        "-n",
        SYSTEM,
        "-l",
        "app.kubernetes.io/name=configsum-webhook",
        "--wait=false",
    ]);
    // Write until a write lands while no webhook pod is ready (the old ones keep serving for
    // their preStop pause until their endpoints are gone; the new ones start in seconds).
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut attempt = 0;
    let admitted_unchanged = loop {
        attempt += 1;
        let name = format!("late-{attempt}");
        let mut workload = app(ns, "late", 1);
        workload["metadata"]["name"] = json!(name);
        for label in ["/spec/selector/matchLabels/app", "/spec/template/metadata/labels/app"] {
            *workload.pointer_mut(label).expect("app label") = json!(name);
        }
        let mut env = workload["spec"]["template"]["spec"]["containers"][0]["env"].clone();
        for var in env.as_array_mut().expect("env") {
            if let Some(reference) = var.pointer_mut("/valueFrom/configMapKeyRef/name") {
                *reference = json!("late-config");
            }
        }
        workload["spec"]["template"]["spec"]["containers"][0]["env"] = env;
        workload["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"] =
            json!("late-secret");
        cp.apply(&workload.to_string());
        if template_annotations(cp, ns, &name).is_null() {
            break name;
        }
        cp.kubectl_ok(&["delete", "deployment", &name, "-n", ns, "--wait=false"]);
        assert!(Instant::now() < deadline, "every write found a webhook pod ready");
    };
    report(&format!("node: webhook pods deleted -> write {attempt} admitted unchanged"));
    assert!(failed_open(cp) > before, "the API server called the webhook and failed open");
    back_to_full_strength(cp);

    // The controller catches up: the next change gives it its digests and restarts its pod.
    served_by_every_pod(cp, ns, &admitted_unchanged);
    cp.apply(&config_map(ns, "late-config", &[("value", "v2")]));
    wait_until(
        "the controller rolled the workload admitted unchanged",
        Duration::from_secs(60),
        || {
            template_annotations(cp, ns, &admitted_unchanged)["configmap.configsum.dev/late-config"]
                .is_string()
        },
    );
    for served in served_by_every_pod(cp, ns, &admitted_unchanged) {
        assert_eq!((&served["value"], &served["fileValue"]), (&json!("v2"), &json!("p1")));
    }
}
