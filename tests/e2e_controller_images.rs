//! `configsum controller` and images behind floating tags: the real binary
//! against the fake API server, resolving tags against a real distribution
//! registry (tests/support/registry.rs) and rolling workloads after a retag.

#[path = "support/controller.rs"]
mod controller;
#[path = "support/digests.rs"]
mod digests;
#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;
#[path = "support/fixtures.rs"]
mod fixtures;
#[path = "support/registry.rs"]
mod registry;
#[path = "support/server.rs"]
mod server;

use std::time::Duration;

use controller::{Cluster, Controller, NS, workload_path};
use registry::{Format, Registry};
use serde_json::{Value, json};

fn deployment(name: &str, annotations: Value, image: &str, recorded: Option<&str>) -> Value {
    let template_annotations = match recorded {
        Some(digest) => json!({"image.configsum.dev/app": digest}),
        None => json!({}),
    };
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": {"selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}, "annotations": template_annotations},
                "spec": {"containers": [{"name": "app", "image": image, "imagePullPolicy": "Always"}]}}}})
}

/// Image resolutions the controller has made at the registry, from its metrics.
async fn resolutions(controller: &Controller) -> u64 {
    let metrics = controller.metrics().await;
    metrics
        .lines()
        .filter(|l| l.starts_with("configsum_registry_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Waits until the controller, leading, has asked the registry twice more and is idle: the
/// first of those rounds started after whatever came before, and its answers were handed
/// on before the second began, so anything they would roll is rolled by then.
async fn two_more_polls(cluster: &Cluster, controller: &Controller) {
    controller.caught_up(&cluster.api, &[]).await;
    let before = resolutions(controller).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while resolutions(controller).await < before + 2 {
        assert!(std::time::Instant::now() < deadline, "no two polls within 20 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("resolutions: {before} -> {}", resolutions(controller).await);
    controller.idle().await;
}

fn image_of(cluster: &Cluster, name: &str) -> Value {
    let object = cluster.api.object(&workload_path("Deployment", NS, name)).expect("workload");
    object["spec"]["template"]["spec"]["containers"][0]["image"].clone()
}

#[tokio::test]
async fn a_moved_tag_rolls_each_tracking_workload_once_and_never_on_first_observation() {
    let registry = Registry::anonymous().await;
    let (first, _) = registry.push_multi_platform("team/app", "prod", "v1", Format::Docker).await;
    let app = registry.image("team/app", "prod");
    let cluster = Cluster::new("ctl-images").await;
    let put = |object: Value| {
        let name = object["metadata"]["name"].as_str().expect("name").to_owned();
        cluster.api.put(&workload_path("Deployment", NS, &name), object);
    };
    let track = json!({"configsum.dev/images": "*"});
    put(deployment("recorded", track.clone(), &app, Some(&first)));
    put(deployment("unrecorded", track, &app, None));
    let pin = json!({"configsum.dev/images": "app", "configsum.dev/image-policy": "pin"});
    put(deployment("pinned", pin, &format!("{app}@{first}"), Some(&first)));

    let host = registry.host();
    // Every tracking workload at once: resolution is the subject here, not waves.
    let extra = ["--insecure-registry", &host, "--image-poll-interval", "1s", "--fan-out", "all"];
    let controller = Controller::start(&cluster.api, &cluster.dir, "a", &extra).await;
    two_more_polls(&cluster, &controller).await;
    for name in ["recorded", "unrecorded", "pinned"] {
        assert_eq!(cluster.patches_of("Deployment", NS, name), 0, "{name}: the tag did not move");
    }

    let (moved, _) = registry.push_multi_platform("team/app", "prod", "v2", Format::Docker).await;
    assert_ne!(moved, first);
    cluster
        .wait_for("both recorded workloads patched", Duration::from_secs(6), |c| {
            c.patches_of("Deployment", NS, "recorded") == 1
                && c.patches_of("Deployment", NS, "pinned") == 1
        })
        .await;
    assert_eq!(
        cluster.annotations_of("Deployment", NS, "recorded"),
        json!({"image.configsum.dev/app": moved})
    );
    assert_eq!(image_of(&cluster, "recorded"), json!(app), "record leaves the image alone");
    assert_eq!(
        cluster.annotations_of("Deployment", NS, "pinned"),
        json!({"image.configsum.dev/app": moved})
    );
    assert_eq!(image_of(&cluster, "pinned"), json!(format!("{app}@{moved}")), "re-pinned");

    // Further polls see the recorded digest: nothing more, and never for the
    // workload whose first digest was never recorded.
    two_more_polls(&cluster, &controller).await;
    assert_eq!(cluster.patches_of("Deployment", NS, "recorded"), 1, "once");
    assert_eq!(cluster.patches_of("Deployment", NS, "pinned"), 1, "once");
    assert_eq!(cluster.patches_of("Deployment", NS, "unrecorded"), 0, "first observation");

    // Each Event, read back from the API, names the container, the image
    // reference as written (behind configsum's pin, the tag it follows) and
    // both digests.
    let events = cluster.api.list(&format!("/api/v1/namespaces/{NS}/events"));
    for name in ["recorded", "pinned"] {
        let event = events
            .iter()
            .find(|e| e["involvedObject"]["name"] == name)
            .unwrap_or_else(|| panic!("an Event for {name}: {events:?}"));
        assert_eq!(event["reason"], "ConfigurationChanged");
        assert_eq!(
            event["message"].as_str().unwrap_or_default(),
            format!(
                "configsum rolled the pod template: changed container app ({app}) from {first} to {moved}"
            ),
            "{name}"
        );
    }
    assert_eq!(events.len(), 2, "one Event per patch: {events:?}");
    let (patched, registry_requests) = (
        r#"configsum_controller_patches_total{outcome="patched"} 2"#,
        format!("configsum_registry_requests_total{{registry=\"{host}\",outcome=\"digest\"}}"),
    );
    let metrics = controller.metrics_with(&[patched], Duration::from_secs(2)).await;
    assert!(metrics.contains(patched), "{metrics}");
    assert!(metrics.contains(&registry_requests), "{metrics}");
    assert_eq!(controller.stop().await, Some(0));
}

/// Seed 002's jobs-manager, whose `api` container hands the ingestor's digest to the Jobs it
/// spawns through `INGESTOR_IMAGE_DIGEST`; `recorded` is that variable's value, if any.
fn jobs_manager(name: &str, annotations: Value, ingestor: &str, recorded: Option<&str>) -> Value {
    let mut annotations = annotations;
    annotations["configsum.dev/image-env"] = json!(format!("api/INGESTOR_IMAGE_DIGEST={ingestor}"));
    let mut env = vec![json!({"name": "LOG_LEVEL", "value": "info"})];
    env.extend(recorded.map(|digest| json!({"name": "INGESTOR_IMAGE_DIGEST", "value": digest})));
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": {"selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "api", "image": "jobs-manager:3", "env": env}]}}}})
}

fn env_of(cluster: &Cluster, name: &str) -> Value {
    let object = cluster.api.object(&workload_path("Deployment", NS, name)).expect("workload");
    object["spec"]["template"]["spec"]["containers"][0]["env"].clone()
}

/// What seed 002's CronJob did with `kubectl set env`, from the controller: a retag behind a
/// GHCR-like registry (HTTPS, a token realm on another port, anonymous tokens) patches the
/// variable once; a workload whose variable holds no digest yet, one opted out and one owned
/// by a controller are never patched.
#[tokio::test]
async fn a_moved_tag_sets_the_variable_once_through_a_guarded_json_patch() {
    let registry = Registry::ghcr_like().await;
    let first = registry.push_image("org/ingestor", "prod", "ingestor v1").await;
    let ingestor = registry.image("org/ingestor", "prod");
    let cluster = Cluster::new("ctl-image-env").await;
    let put = |object: Value| {
        let name = object["metadata"]["name"].as_str().expect("name").to_owned();
        cluster.api.put(&workload_path("Deployment", NS, &name), object);
    };
    put(jobs_manager("manager", json!({}), &ingestor, Some(&first)));
    put(jobs_manager("unrecorded", json!({}), &ingestor, None));
    put(jobs_manager(
        "opted-out",
        json!({"configsum.dev/enabled": "false"}),
        &ingestor,
        Some(&first),
    ));
    let mut owned = jobs_manager("owned", json!({}), &ingestor, Some(&first));
    owned["metadata"]["ownerReferences"] = json!([{"apiVersion": "example.com/v1", "kind": "App",
        "name": "app", "uid": "u-1", "controller": true}]);
    put(owned);

    let ca = registry.ca_file().expect("a TLS registry").display().to_string();
    let extra =
        ["--registry-allow", "127.0.0.1", "--registry-ca-file", &ca, "--image-poll-interval", "1s"];
    let controller = Controller::start(&cluster.api, &cluster.dir, "a", &extra).await;
    two_more_polls(&cluster, &controller).await;
    let names = ["manager", "unrecorded", "opted-out", "owned"];
    for name in names {
        assert_eq!(cluster.patches_of("Deployment", NS, name), 0, "{name}: the tag did not move");
    }

    let moved = registry.push_image("org/ingestor", "prod", "ingestor v2").await;
    assert_ne!(moved, first);
    cluster
        .wait_for("the manager patched", Duration::from_secs(6), |c| {
            c.patches_of("Deployment", NS, "manager") == 1
        })
        .await;
    assert_eq!(
        env_of(&cluster, "manager"),
        json!([{"name": "LOG_LEVEL", "value": "info"},
            {"name": "INGESTOR_IMAGE_DIGEST", "value": moved}])
    );
    assert_eq!(cluster.annotations_of("Deployment", NS, "manager"), Value::Null, "env only");
    let patch = cluster.api.log().into_iter().find(|l| l.method == "PATCH").expect("a PATCH");
    assert_eq!(patch.content_type, "application/json-patch+json", "a list element: JSON Patch");

    two_more_polls(&cluster, &controller).await;
    assert_eq!(cluster.patches_of("Deployment", NS, "manager"), 1, "once");
    for name in &names[1..] {
        assert_eq!(cluster.patches_of("Deployment", NS, name), 0, "{name}: never patched");
    }
    let events = cluster.api.list(&format!("/api/v1/namespaces/{NS}/events"));
    assert_eq!(events.len(), 1, "one Event for one patch: {events:?}");
    assert_eq!(events[0]["involvedObject"]["name"], "manager");
    assert_eq!(
        events[0]["message"].as_str().unwrap_or_default(),
        format!(
            "configsum rolled the pod template: changed container api env INGESTOR_IMAGE_DIGEST ({ingestor}) from {first} to {moved}"
        )
    );
    let issued = registry.token_service().expect("token service").tokens_issued();
    assert!(issued >= 1, "anonymous tokens from the realm");
    assert_eq!(controller.stop().await, Some(0));
}

/// A moved tag is one change for every workload tracking it, whatever its namespace: its waves
/// span namespaces, ordered by namespace, kind and name; each waits for the one before.
#[tokio::test]
async fn a_moved_tags_waves_span_namespaces() {
    let registry = Registry::anonymous().await;
    let (first, _) = registry.push_multi_platform("team/app", "prod", "v1", Format::Docker).await;
    let app = registry.image("team/app", "prod");
    let cluster = Cluster::new("ctl-image-waves").await;
    let other = "team-b";
    cluster.api.put_namespace(other, &[("configsum.dev/enabled", "true")]);
    let track = json!({"configsum.dev/images": "*"});
    let placed = [(NS, "a"), (other, "b"), (NS, "c")];
    for (namespace, name) in placed {
        let mut object = deployment(name, track.clone(), &app, Some(&first));
        object["metadata"]["namespace"] = json!(namespace);
        cluster.api.put(&workload_path("Deployment", namespace, name), object);
    }
    let complete = |namespace: &str, name: &str| {
        let path = workload_path("Deployment", namespace, name);
        let mut object = cluster.api.object(&path).expect("workload");
        object["status"] = json!({"observedGeneration": object["metadata"]["generation"].clone(),
            "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1});
        cluster.api.put(&path, object);
    };
    for (namespace, name) in placed {
        complete(namespace, name);
    }
    let host = registry.host();
    let extra = ["--insecure-registry", &host, "--image-poll-interval", "1s"];
    let controller = Controller::start(&cluster.api, &cluster.dir, "a", &extra).await;
    two_more_polls(&cluster, &controller).await;

    registry.push_multi_platform("team/app", "prod", "v2", Format::Docker).await;
    let patches = |c: &Cluster| placed.map(|(ns, name)| c.patches_of("Deployment", ns, name));
    cluster.wait_for("wave 1", Duration::from_secs(6), |c| patches(c) == [1, 0, 0]).await;
    two_more_polls(&cluster, &controller).await;
    assert_eq!(patches(&cluster), [1, 0, 0], "team-a/a alone until its rollout completes");
    complete(NS, "a");
    cluster
        .wait_for("wave 2, across namespaces", Duration::from_secs(6), |c| patches(c) == [1, 1, 1])
        .await;
    for (namespace, name) in [(other, "b"), (NS, "c")] {
        let object = cluster.api.object(&workload_path("Deployment", namespace, name)).expect("it");
        let record =
            object["metadata"]["annotations"]["configsum.dev/waves"].as_str().unwrap_or("{}");
        let record: Value = serde_json::from_str(record).expect("JSON");
        assert_eq!(record[format!("image {app}")]["wave"], 2, "{namespace}/{name}: {record}");
    }
    assert_eq!(controller.stop().await, Some(0));
}
