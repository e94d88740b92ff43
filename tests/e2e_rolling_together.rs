//! Workloads that roll together (seed 000: a Keycloak that must roll when its database is
//! redeployed), end to end: the real `configsum serve` reads the tracked Deployment's pod
//! template from the fake API server and records its digest; the real `configsum controller`
//! agrees with that digest, rolls the tracker once when the tracked workload's template
//! changes (`kubectl rollout restart`), lets a mutual pair settle, and leaves first
//! observations, opted-out and controller-owned workloads alone.

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

use std::time::Duration;

use controller::{Cluster, Controller, NS, workload_path};
use serde_json::{Value, json};
use server::*;

/// A Deployment running `image`, with `annotations` on itself and `recorded` on its template.
fn deployment(name: &str, image: &str, annotations: Value, recorded: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": {"selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}, "annotations": recorded},
                "spec": {"containers": [{"name": "main", "image": image}]}}}})
}

fn path(name: &str) -> String {
    workload_path("Deployment", NS, name)
}

/// What `kubectl rollout restart` does: a new annotation on the pod template.
fn rollout_restart(cluster: &Cluster, name: &str, at: &str) {
    let mut object = cluster.api.object(&path(name)).expect("workload");
    object["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"] =
        json!(at);
    cluster.api.put(&path(name), object);
}

fn review(operation: &str, object: &Value) -> Vec<u8> {
    serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "together", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "operation": operation, "namespace": NS, "name": object["metadata"]["name"],
            "object": object, "oldObject": null}}))
    .expect("json")
}

/// `configsum serve` reading from `cluster`'s fake API server.
async fn serve(cluster: &Cluster) -> Server {
    make_certs(&cluster.dir.0, "ec-sec1");
    let kubeconfig = cluster.api.kubeconfig(&cluster.dir.0).display().to_string();
    let (cert, key) = (
        cluster.dir.path("tls.crt").display().to_string(),
        cluster.dir.path("tls.key").display().to_string(),
    );
    let args = ["--tls-cert", &cert, "--tls-key", &key, "--allow-plain-secret-digests"];
    let server =
        Server::start(&args, &[("KUBECONFIG", &kubeconfig)], &cluster.dir.path("ca.crt")).await;
    let ready = std::time::Instant::now() + Duration::from_secs(20);
    while server.get("/readyz").await.0 != 200 {
        assert!(std::time::Instant::now() < ready, "not ready within 20 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server
}

/// Admits `object` as a CREATE and stores what the webhook made of it.
async fn admit_and_store(server: &Server, cluster: &Cluster, object: Value) -> Value {
    let (status, body) = server.post("/mutate?timeout=10s", review("CREATE", &object)).await;
    assert_eq!(status, 200);
    let (answer, patched) = apply_response(&object, &body);
    let name = object["metadata"]["name"].as_str().expect("name");
    cluster.api.put(&path(name), patched.clone());
    assert!(answer["response"]["allowed"].as_bool().unwrap_or(false), "{answer}");
    patched
}

fn recorded(cluster: &Cluster, tracker: &str, tracked: &str) -> Value {
    cluster.annotations_of("Deployment", NS, tracker)[format!("deployment.configsum.dev/{tracked}")]
        .clone()
}

#[tokio::test]
async fn a_restart_of_the_tracked_workload_rolls_its_trackers_once() {
    let cluster = Cluster::new("rolling-together").await;
    let server = serve(&cluster).await;
    cluster
        .api
        .put(&path("keycloak-db"), deployment("keycloak-db", "postgres:16", json!({}), json!({})));

    // The webhook reads the database's template and records its digest on Keycloak's.
    let track = json!({"configsum.dev/track": "deployment/keycloak-db"});
    let keycloak = deployment("keycloak", "keycloak:26", track.clone(), json!({}));
    let admitted = admit_and_store(&server, &cluster, keycloak).await;
    let first = admitted["spec"]["template"]["metadata"]["annotations"]
        ["deployment.configsum.dev/keycloak-db"]
        .clone();
    assert!(first.as_str().is_some_and(|d| d.starts_with("sha256:")), "{admitted}");
    assert_eq!(cluster.api.calls("GET", &path("keycloak-db")), 1, "one read of the tracked");

    // Another tracker of a database that does not exist yet: `absent`, with a warning.
    let missing = json!({"configsum.dev/track": "deployment/not-yet"});
    let (_, body) = server
        .post(
            "/mutate?timeout=10s",
            review("CREATE", &deployment("early", "app:1", missing, json!({}))),
        )
        .await;
    let answer: Value = serde_json::from_slice(&body).expect("review");
    assert_eq!(
        answer["response"]["warnings"],
        json!([r#"deployment/not-yet: not found; its digest is "absent""#])
    );
    assert_eq!(server.terminate().await, Some(0));

    // Trackers the controller must leave alone: one recording no digest (a first observation),
    // one opted out, one owned by a controller.
    cluster.api.put(&path("fresh"), deployment("fresh", "app:1", track.clone(), json!({})));
    let recorded_db = json!({"deployment.configsum.dev/keycloak-db": first});
    let mut opted_out = track.clone();
    opted_out["configsum.dev/enabled"] = json!("false");
    cluster
        .api
        .put(&path("opted-out"), deployment("opted-out", "app:1", opted_out, recorded_db.clone()));
    let mut owned = deployment("owned", "app:1", track.clone(), recorded_db);
    owned["metadata"]["ownerReferences"] = json!([{"apiVersion": "example.com/v1",
        "kind": "App", "name": "app", "uid": "u-1", "controller": true}]);
    cluster.api.put(&path("owned"), owned);

    let controller = Controller::start(&cluster.api, &cluster.dir, "a", &[]).await;
    // Leading and idle. A template it reads at start-up is not in the queue depth: a start-up
    // patch coming later still fails the counts after the restart's roll below.
    controller.caught_up(&cluster.api, &[]).await;
    let names = ["keycloak", "fresh", "opted-out", "owned", "keycloak-db"];
    for name in names {
        assert_eq!(
            cluster.patches_of("Deployment", NS, name),
            0,
            "{name}: the controller's digest is the webhook's"
        );
    }

    rollout_restart(&cluster, "keycloak-db", "2026-11-27T12:00:00Z");
    cluster
        .wait_for("keycloak rolled", Duration::from_secs(6), |c| {
            c.patches_of("Deployment", NS, "keycloak") == 1
        })
        .await;
    let rolled = recorded(&cluster, "keycloak", "keycloak-db");
    assert!(rolled.as_str().is_some_and(|d| d.starts_with("sha256:")) && rolled != first);
    // The Event is created after the PATCH returns: wait for it.
    let events_path = format!("/api/v1/namespaces/{NS}/events");
    cluster
        .wait_for("the Event", Duration::from_secs(5), |c| !c.api.list(&events_path).is_empty())
        .await;
    let events = cluster.api.list(&events_path);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        events[0]["message"],
        "configsum rolled the pod template: changed deployment/keycloak-db"
    );

    // A second roll would be queued or in flight until then.
    controller.idle().await;
    assert_eq!(cluster.patches_of("Deployment", NS, "keycloak"), 1, "once");
    for name in &names[1..] {
        assert_eq!(cluster.patches_of("Deployment", NS, name), 0, "{name}: never patched");
    }
    assert_eq!(controller.stop().await, Some(0));
}

#[tokio::test]
async fn two_workloads_tracking_each_other_settle_after_one_round() {
    let cluster = Cluster::new("rolling-together-mutual").await;
    let server = serve(&cluster).await;
    // Both exist before either tracks the other, as when two releases are installed.
    cluster.api.put(&path("a"), deployment("a", "a:1", json!({}), json!({})));
    cluster.api.put(&path("b"), deployment("b", "b:1", json!({}), json!({})));
    let a = deployment("a", "a:1", json!({"configsum.dev/track": "deployment/b"}), json!({}));
    admit_and_store(&server, &cluster, a).await;
    let b = deployment("b", "b:1", json!({"configsum.dev/track": "deployment/a"}), json!({}));
    admit_and_store(&server, &cluster, b).await;
    assert_eq!(server.terminate().await, Some(0));

    let controller = Controller::start(&cluster.api, &cluster.dir, "a", &[]).await;
    let reads = |c: &Cluster| c.api.calls("GET", &path("a")) + c.api.calls("GET", &path("b"));
    cluster.wait_for("the read at start-up", Duration::from_secs(10), |c| reads(c) >= 3).await;
    controller.caught_up(&cluster.api, &[]).await;
    assert_eq!(cluster.patches_of("Deployment", NS, "a"), 0, "a records b's digest as it is");
    assert_eq!(cluster.patches_of("Deployment", NS, "b"), 0, "b records a's digest as it is");
    // The webhook read each once; the controller read only the one the listing delivered
    // before anything tracked it (its other template came from the watch).
    assert_eq!(reads(&cluster), 3, "two admissions and one read at start-up");

    // A new image for a: b rolls with it; b's patch changes only its tracking annotation, which
    // a's digest of b leaves out, so a does not roll in turn.
    let mut upgraded = cluster.api.object(&path("a")).expect("a");
    upgraded["spec"]["template"]["spec"]["containers"][0]["image"] = json!("a:2");
    let before = recorded(&cluster, "b", "a");
    cluster.api.put(&path("a"), upgraded);
    cluster
        .wait_for("b rolled", Duration::from_secs(6), |c| c.patches_of("Deployment", NS, "b") == 1)
        .await;
    assert_ne!(recorded(&cluster, "b", "a"), before);
    // A later change of a, after b's patch in the same watch: once b has rolled for it too, the
    // controller had seen its own patch of b, and anything that rolled a is queued or done.
    let mut upgraded = cluster.api.object(&path("a")).expect("a");
    upgraded["spec"]["template"]["spec"]["containers"][0]["image"] = json!("a:3");
    cluster.api.put(&path("a"), upgraded);
    cluster
        .wait_for("b rolled again", Duration::from_secs(6), |c| {
            c.patches_of("Deployment", NS, "b") == 2
        })
        .await;
    controller.idle().await;
    assert_eq!(cluster.patches_of("Deployment", NS, "a"), 0, "settled");
    assert_eq!(cluster.patches_of("Deployment", NS, "b"), 2, "once per change of a");
    assert_eq!(controller.stop().await, Some(0));
}
