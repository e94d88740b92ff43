//! `configsum explain` reading a cluster, the real binary against the fake API server: a
//! namespace with a workload in each verdict; the installed digest key, and `unknown` for a
//! user who may not read it; a Deployment mid-rollout and a stale `OnDelete` StatefulSet;
//! the same answers offline from the same objects; a halted change (from its `RolloutHalted`
//! Event), a paused workload and a Namespace's window, and the halt resumed; and never a
//! request that is not a GET.

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

use controller::{Cluster, KEY, NS, workload_path};
use fake_apiserver::{FakeApiServer, Fault};
use registry::Registry;
use serde_json::{Value, json};

const KEY_SECRET: &str = "/api/v1/namespaces/configsum-system/secrets/configsum-digest-key";

/// configsum installed: its digest key Secret, as `ensure-digest-key` writes it.
fn install_key(cluster: &Cluster) {
    cluster.api.put_secret("configsum-system", "configsum-digest-key", &[("keys", KEY)]);
}

/// (name, verdict) of each tracker in an object's JSON answer.
fn verdicts(answer: &Value) -> Vec<(String, String)> {
    let workloads = answer["workloads"].as_array().cloned().unwrap_or_default();
    workloads
        .iter()
        .map(|w| {
            let name = w["name"].as_str().unwrap_or_default();
            (name.to_owned(), w["verdict"].as_str().unwrap_or_default().to_owned())
        })
        .collect()
}

/// Requests `user` made that are not GETs.
fn writes_by(api: &FakeApiServer, user: &str) -> Vec<String> {
    let log = api.log();
    let theirs: Vec<_> = log.iter().filter(|l| l.token == user).collect();
    assert!(!theirs.is_empty(), "{user} made no request at all");
    theirs
        .iter()
        .filter(|l| l.method != "GET")
        .map(|l| format!("{} {}", l.method, l.path))
        .collect()
}

/// An Event of configsum's controller on Deployment `name`, recorded now.
fn controller_event(api: &FakeApiServer, name: &str, reason: &str, message: String) {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let event = json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": format!("{name}.{reason}"), "namespace": NS},
        "involvedObject": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "namespace": NS},
        "reason": reason, "message": message, "type": "Warning",
        "source": {"component": "configsum-controller"}, "reportingComponent": "configsum-controller",
        "firstTimestamp": now, "lastTimestamp": now, "count": 1});
    api.put(&format!("/api/v1/namespaces/{NS}/events/{name}.{reason}"), event);
}

#[tokio::test]
async fn a_namespace_in_every_verdict_read_with_gets_only() {
    let mut cluster = Cluster::new("explain-verdicts").await;
    install_key(&cluster);
    // Admitted while the password was "one"; then it changed, and "current" was admitted.
    cluster.deployment(NS, "stale", &[], &["db"], true);
    cluster.deployment(NS, "flappy", &[], &["db"], true);
    cluster.secret("db", &[("password", "two")]);
    cluster.deployment(NS, "current", &[], &["db"], true);
    cluster.deployment(NS, "fresh", &[], &["db"], false);
    let mut opted_out = cluster.deployment(NS, "opted-out", &[], &["db"], false);
    opted_out["metadata"]["annotations"] = json!({"configsum.dev/enabled": "false"});
    cluster.api.put(&workload_path("Deployment", NS, "opted-out"), opted_out);
    let mut owned = cluster.deployment(NS, "owned", &[], &["db"], false);
    owned["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps.example.com/v1",
        "kind": "App", "name": "shop", "uid": "u-1", "controller": true}]);
    cluster.api.put(&workload_path("Deployment", NS, "owned"), owned);
    cluster.workload("Job", NS, "migrate", &[], &["db"], true);
    cluster.deployment(NS, "unrelated", &["app"], &[], true);
    // The flap guard holds flappy for secret/db (the controller's own Event, as it writes it).
    let hold =
        configsum::core::diagnosis::holds::hold_message("secret/db", 5, Duration::from_secs(600));
    controller_event(&cluster.api, "flappy", "FlapGuard", hold);

    let run = cluster.explain("oncall", &["secret/db", "-n", NS, "--output", "json"]).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let answer = run.json();
    assert_eq!(answer["digestKey"], true, "the installed key was read");
    assert_eq!(answer["unread"], json!([]));
    let expected = [
        ("current", "current"),
        ("flappy", "held"),
        ("fresh", "first-observation"),
        ("opted-out", "opted-out"),
        ("owned", "controller-owned"),
        ("stale", "stale"),
    ];
    let mut want: Vec<(String, String)> =
        expected.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect();
    want.push(("migrate".to_owned(), "not-rolling".to_owned()));
    assert_eq!(verdicts(&answer), want, "Deployments by name, then the Job");
    assert!(!run.stdout.contains("\"two\"") && !run.stdout.contains("dHdv"), "no Secret value");
    assert_eq!(writes_by(&cluster.api, "oncall"), Vec::<String>::new(), "GETs only");

    // A user who may not read configsum's key: Secrets' digests cannot be told.
    cluster.api.fault_for(Some("intern"), None, KEY_SECRET, Some(Fault::Status(403)));
    let run = cluster.explain("intern", &["secret/db", "-n", NS, "--output", "json"]).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let answer = run.json();
    assert_eq!(answer["digestKey"], false);
    let unread = answer["unread"].to_string();
    assert!(unread.contains("the installed digest key"), "{unread}");
    let of = |name: &str| verdicts(&answer).into_iter().find(|(n, _)| n == name).map(|(_, v)| v);
    assert_eq!(of("stale").as_deref(), Some("unknown"));
    assert_eq!(of("current").as_deref(), Some("unknown"));
    assert_eq!(of("fresh").as_deref(), Some("first-observation"), "nothing recorded, either way");
    // The table says why, for people.
    let run = cluster.explain("intern", &["secret/db", "-n", NS]).await;
    assert!(run.stdout.contains("no digest key"), "{}", run.stdout);
    assert_eq!(writes_by(&cluster.api, "intern"), Vec::<String>::new(), "GETs only");

    // configsum installed elsewhere: --digest-key-secret says where its key is.
    cluster.api.put_secret("ops", "configsum-key", &[("keys", KEY)]);
    let elsewhere = ["secret/db", "-n", NS, "--digest-key-secret", "ops/configsum-key"];
    let run = cluster.explain("intern", &[&elsewhere[..], &["--output", "json"]].concat()).await;
    assert_eq!(run.json()["digestKey"], true, "{}", run.stdout);
    let run = cluster.explain("intern", &["secret/db", "--digest-key-secret", "nope"]).await;
    assert_eq!(run.code, Some(2), "not NAMESPACE/NAME");

    // An object that does not exist: exit 1, with the answer; a cluster that cannot be read: 2.
    let run = cluster.explain("oncall", &["configmap/nope", "-n", NS]).await;
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    let run = cluster.explain("", &["secret/db", "-n", NS]).await;
    assert_eq!(run.code, Some(2), "anonymous may not list: {}", run.stdout);
}

#[tokio::test]
async fn a_rollout_that_has_not_reached_the_pods_and_the_same_answer_offline() {
    let mut cluster = Cluster::new("explain-rollouts").await;
    install_key(&cluster);
    // web was admitted with password "one", the Secret changed, and the controller (or a
    // write) rolled web: its template is current but only 1 of 3 pods runs it yet.
    cluster.secret("db", &[("password", "two")]);
    let mut web = cluster.deployment(NS, "web", &["app"], &["db"], true);
    web["metadata"]["generation"] = json!(7);
    web["spec"]["replicas"] = json!(3);
    web["status"] = json!({"observedGeneration": 7, "replicas": 4, "updatedReplicas": 1,
        "availableReplicas": 3});
    cluster.api.put(&workload_path("Deployment", NS, "web"), web);
    // db, an OnDelete StatefulSet: rolled, yet no pod was deleted, so none runs the new one.
    let mut db = cluster.workload("StatefulSet", NS, "db", &[], &["db"], true);
    db["metadata"]["generation"] = json!(2);
    db["spec"]["replicas"] = json!(2);
    db["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
    db["status"] = json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 0,
        "readyReplicas": 2, "currentRevision": "db-5d4f", "updateRevision": "db-7c9b"});
    cluster.api.put(&workload_path("StatefulSet", NS, "db"), db);
    // Then the ConfigMap changes: web is stale as well.
    cluster.config_map("app", &[("level", "debug")]);

    let run = cluster.explain("oncall", &["deployment/web", "-n", NS, "--output", "json"]).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let web = run.json();
    assert_eq!(web["kind"], "WorkloadExplanation");
    assert_eq!(web["verdict"], "stale");
    let inputs: Vec<(Value, Value)> = web["inputs"]
        .as_array()
        .expect("inputs")
        .iter()
        .map(|i| (i["input"].clone(), i["verdict"].clone()))
        .collect();
    assert_eq!(
        inputs,
        [(json!("configmap/app"), json!("stale")), (json!("secret/db"), json!("current"))]
    );
    assert_eq!(web["rollout"]["state"], "progressing");
    assert_eq!(web["rollout"]["updatedReplicas"], 1);
    assert_eq!(web["rollout"]["readyReplicas"], 3);

    let run = cluster.explain("oncall", &["sts/db", "-n", NS]).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stdout.starts_with("statefulset/db in team-a: current, 1 input\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(
            "pods: 0 of 2 pods run the current template, 2 ready; the others are replaced only \
             when deleted (OnDelete)"
        ),
        "{}",
        run.stdout
    );
    assert_eq!(writes_by(&cluster.api, "oncall"), Vec::<String>::new(), "GETs only");

    // The same objects as a file: the same answers, offline.
    let paths = [
        workload_path("Deployment", NS, "web"),
        workload_path("StatefulSet", NS, "db"),
        FakeApiServer::secret_path(NS, "db"),
        FakeApiServer::config_map_path(NS, "app"),
    ];
    let stream: Vec<String> =
        paths.iter().map(|path| cluster.api.object(path).expect("stored").to_string()).collect();
    let file = cluster.dir.path("namespace.yaml");
    std::fs::write(&file, stream.join("\n---\n")).expect("stream");
    let key = cluster.dir.path("key");
    std::fs::write(&key, KEY).expect("key");
    let (file, key) = (file.display().to_string(), key.display().to_string());
    for subject in ["secret/db", "configmap/app", "deployment/web", "statefulset/db"] {
        let live = cluster.explain("oncall", &[subject, "-n", NS, "--output", "json"]).await;
        let offline = cluster
            .explain(
                "offline",
                &[subject, "-n", NS, "-f", &file, "--digest-key-file", &key, "--output", "json"],
            )
            .await;
        assert_eq!((live.code, offline.code), (Some(0), Some(0)), "{}", offline.stderr);
        assert_eq!(live.json(), offline.json(), "{subject}: the same answer offline");
    }
    let offline_requests = cluster.api.log().iter().filter(|l| l.token == "offline").count();
    assert_eq!(offline_requests, 0, "-f reads no cluster");
}

#[tokio::test]
async fn a_moved_tag_reads_stale_from_the_registry_itself() {
    let cluster = Cluster::new("explain-images").await;
    let registry = Registry::anonymous().await;
    let recorded = registry.push_image("shop/api", "prod", "v1").await;
    let moved = registry.push_image("shop/api", "prod", "v2").await;
    // api recorded v1's digest when it was admitted; prod has moved to v2 since.
    let api = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "api", "namespace": NS, "annotations": {"configsum.dev/images": "*"}},
        "spec": {"selector": {"matchLabels": {"app": "api"}}, "template": {
            "metadata": {"labels": {"app": "api"}, "annotations": {"image.configsum.dev/api": recorded}},
            "spec": {"containers": [{"name": "api", "image": registry.image("shop/api", "prod")}]}}}});
    cluster.api.put(&workload_path("Deployment", NS, "api"), api);

    let host = registry.host();
    let ask = ["deployment/api", "-n", NS, "--insecure-registry", &host, "--output", "json"];
    let run = cluster.explain("oncall", &ask).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let answer = run.json();
    let image = &answer["inputs"][0];
    assert_eq!(image["input"], "image api");
    assert_eq!(image["reference"], registry.image("shop/api", "prod"));
    assert_eq!(
        (image["recorded"].clone(), image["current"].clone()),
        (json!(recorded), json!(moved))
    );
    assert_eq!(image["verdict"], "stale");
    assert_eq!(answer["verdict"], "stale");

    // --no-registry asks none: unknown. A tag the registry does not know is named as unread.
    let mut quiet = ask.to_vec();
    quiet.push("--no-registry");
    let answer = cluster.explain("oncall", &quiet).await.json();
    assert_eq!(answer["inputs"][0]["verdict"], "unknown");
    registry.delete_tag("shop/api", "prod");
    let answer = cluster.explain("oncall", &ask).await.json();
    assert_eq!(answer["inputs"][0]["verdict"], "unknown");
    let unread = answer["unread"].to_string();
    assert!(unread.contains("the registry does not know this tag"), "{unread}");
    assert_eq!(writes_by(&cluster.api, "oncall"), Vec::<String>::new(), "GETs only");
}

#[tokio::test]
async fn a_halted_change_a_paused_workload_and_a_namespace_window_read_from_the_cluster() {
    let mut cluster = Cluster::new("explain-gates").await;
    install_key(&cluster);
    let always = json!({"configsum.dev/roll-window": "* 00:00-12:00 UTC; * 12:00-00:00 UTC"});
    let annotated = |name: &str, annotations: Value| {
        let mut object = cluster.deployment(NS, name, &[], &["db"], true);
        object["metadata"]["annotations"] = annotations;
        cluster.api.put(&workload_path("Deployment", NS, name), object);
    };
    // Admitted while the password was "one"; then it changed.
    annotated("api", always.clone());
    annotated("paused", json!({"configsum.dev/paused": "true"}));
    annotated("windowed", json!({}));
    cluster.secret("db", &[("password", "two")]);
    // The controller rolled web first, and web's rollout failed: the change halted there.
    let mut web = cluster.deployment(NS, "web", &[], &["db"], true);
    web["metadata"]["annotations"] = always;
    web["metadata"]["generation"] = json!(2);
    web["spec"]["replicas"] = json!(1);
    web["status"] = json!({"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1,
        "conditions": [{"type": "Progressing", "status": "False",
            "reason": "ProgressDeadlineExceeded", "message": "too slow"}]});
    cluster.api.put(&workload_path("Deployment", NS, "web"), web);
    let digest = cluster.annotations_of("Deployment", NS, "web")["secret.configsum.dev/db"]
        .as_str()
        .expect("web's digest")
        .to_owned();
    let id = configsum::core::diagnosis::halts::id_of(&digest);
    let halt = configsum::core::diagnosis::halts::Halt {
        source: "secret/db".into(),
        change: id.clone(),
        failing: format!("Deployment {NS}/web"),
        waiting: 3,
    };
    let message =
        halt.message("its rollout failed (ProgressDeadlineExceeded)", Some("configsum.dev/resume"));
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    // On the Secret, as the controller records it (and on web, which says the same).
    cluster.api.put(
        &format!("/api/v1/namespaces/{NS}/events/db.halted"),
        json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "db.halted", "namespace": NS},
            "involvedObject": {"apiVersion": "v1", "kind": "Secret", "name": "db", "namespace": NS},
            "reason": "RolloutHalted", "message": message, "type": "Warning",
            "source": {"component": "configsum-controller"},
            "reportingComponent": "configsum-controller",
            "firstTimestamp": now, "lastTimestamp": now, "count": 1}),
    );
    // The namespace's window does not parse: its workloads without their own never roll.
    let namespace_path = format!("/api/v1/namespaces/{NS}");
    let mut namespace = cluster.api.object(&namespace_path).expect("namespace");
    namespace["metadata"]["annotations"] = json!({"configsum.dev/roll-window": "weekends"});
    cluster.api.put(&namespace_path, namespace);

    let run = cluster.explain("oncall", &["secret/db", "-n", NS, "--output", "json"]).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let answer = run.json();
    assert_eq!(answer["unread"], json!([]));
    let want = [
        ("api", "halted"),
        ("paused", "paused"),
        ("web", "halted"),
        ("windowed", "waiting-window"),
    ];
    let want: Vec<(String, String)> =
        want.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect();
    assert_eq!(verdicts(&answer), want);
    let api = &answer["workloads"][0];
    assert_eq!(
        api["halt"],
        json!({"source": "secret/db", "change": id, "failing": format!("Deployment {NS}/web"), "waiting": 3})
    );
    let windowed = &answer["workloads"][3];
    assert_eq!(windowed["window"]["from"], "namespace");
    assert!(
        windowed["window"]["invalid"].as_str().unwrap_or("").contains("found 1 fields"),
        "{windowed}"
    );

    // For people: who failed, the id, how many wait, and how to go on.
    let run = cluster.explain("oncall", &["secret/db", "-n", NS]).await;
    let resume = format!("kubectl annotate secret/db configsum.dev/resume={id} -n {NS}");
    assert!(
        run.stdout.contains(&format!(
            "Deployment/api: halted: secret/db's change {id} halted at Deployment {NS}/web (3 \
             workload(s) wait): it goes on when that rollout completes, or with: {resume}"
        )),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("Deployment/paused: paused: "), "{}", run.stdout);
    let run = cluster.explain("oncall", &["deployment/web", "-n", NS]).await;
    assert!(
        run.stdout.starts_with(&format!("deployment/web in {NS}: halted, 1 input\n")),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains(&format!("secret/db: halted: its rollout halted secret/db's change {id}")),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("pods: the rollout failed"), "{}", run.stdout);

    // Who may not read the Namespace is told so; only the workloads' own windows count then,
    // and windowed, unknown to be outside one, waits behind the halt.
    cluster.api.fault_for(Some("intern"), None, &namespace_path, Some(Fault::Status(403)));
    let run =
        cluster.explain("intern", &["deployment/windowed", "-n", NS, "--output", "json"]).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let answer = run.json();
    assert_eq!(answer["verdict"], "halted");
    let unread = answer["unread"].to_string();
    assert!(unread.contains(&format!("namespace {NS} (for its roll-window)")), "{unread}");

    // An operator resumes the halt by its id, on the Secret: the change goes on.
    let secret_path = FakeApiServer::secret_path(NS, "db");
    let mut secret = cluster.api.object(&secret_path).expect("secret");
    secret["metadata"]["annotations"] = json!({"configsum.dev/resume": id});
    cluster.api.put(&secret_path, secret);
    let answer =
        cluster.explain("oncall", &["secret/db", "-n", NS, "--output", "json"]).await.json();
    let of = |name: &str| verdicts(&answer).into_iter().find(|(n, _)| n == name).map(|(_, v)| v);
    assert_eq!(of("api").as_deref(), Some("stale"));
    assert_eq!(of("web").as_deref(), Some("current"));
    assert_eq!(writes_by(&cluster.api, "oncall"), Vec::<String>::new(), "GETs only");
}
