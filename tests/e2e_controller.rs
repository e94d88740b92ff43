//! `configsum controller`, the real binary, against the fake API server:
//! content changes roll exactly the workloads that track them, with the
//! webhook's digests; metadata-only changes, first observations and restarts
//! roll nothing; bursts coalesce; patches are paced, guarded and led.

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

use std::time::{Duration, Instant};

use configsum::core::{ObjectKind, ObjectRef};
use controller::{Cluster, Controller, LEASE_PATH, NS, SECRET_KEY};
use fake_apiserver::FakeApiServer;
use serde_json::json;

const SECRET_WITNESS: &str = "secret.configsum.dev/witness-s";

fn secret_path(name: &str) -> String {
    FakeApiServer::secret_path(NS, name)
}

fn config_map_path(name: &str) -> String {
    FakeApiServer::config_map_path(NS, name)
}

/// How long a test waits for a patch. The goal (the window plus a second) is measured by
/// `make bench-controller`, which prints reaction times; a test only checks that the patch comes,
/// with room for a loaded machine.
const REACTION: Duration = Duration::from_secs(5);

#[tokio::test]
async fn a_secret_change_patches_exactly_its_workloads_with_the_webhooks_digests() {
    let mut cluster = Cluster::new("ctl-change").await;
    cluster.deployment(NS, "uses-secret", &["app"], &["db"], true);
    cluster.deployment(NS, "uses-config-only", &["app"], &[], true);
    let controller = Controller::start(&cluster.api, &cluster.dir, "a", &[]).await;
    controller.caught_up(&cluster.api, &[secret_path("db"), config_map_path("app")]).await;
    assert_eq!(
        cluster.patches(NS, "uses-secret") + cluster.patches(NS, "uses-config-only"),
        0,
        "all current at start"
    );

    let before = cluster.annotations(NS, "uses-secret");
    cluster.secret("db", &[("password", "two")]);
    let took = cluster
        .wait_for("the patch", REACTION, |c| c.annotations(NS, "uses-secret") != before)
        .await;
    eprintln!("reaction time with a 500 ms window: {took:?}");
    assert_eq!(
        cluster.annotations(NS, "uses-secret"),
        cluster.webhook_digests(NS, "uses-secret"),
        "same digests as the webhook"
    );
    // Both would have been scheduled by the same read of the Secret.
    controller.idle().await;
    assert_eq!(cluster.patches(NS, "uses-secret"), 1);
    assert_eq!(cluster.patches(NS, "uses-config-only"), 0, "only workloads tracking the Secret");
    let path = FakeApiServer::deployment_path(NS, "uses-secret");
    assert_eq!(
        cluster.api.calls("GET", &path),
        0,
        "workloads come from the watch: no `get` permission needed"
    );

    // The Event names the object, never its content.
    let events = cluster.api.list(&format!("/api/v1/namespaces/{NS}/events"));
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["involvedObject"]["name"], "uses-secret");
    let message = events[0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("secret/db") && !message.contains("two"), "{message}");
    let (patched, reacted) = (
        r#"configsum_controller_patches_total{outcome="patched"} 1"#,
        "configsum_controller_reaction_seconds_count 1",
    );
    let metrics = controller.metrics_with(&[patched, reacted], Duration::from_secs(2)).await;
    assert!(metrics.contains(patched), "{metrics}");
    assert!(metrics.contains(reacted), "{metrics}");
    assert!(metrics.contains("configsum_controller_watched_objects 2"), "{metrics}");
    assert_eq!(controller.stop().await, Some(0));
}

#[tokio::test]
async fn a_changed_secret_is_read_once_per_change_not_once_per_reader() {
    // The event loop's read digests the Secret for every workload tracking it and hands the
    // digests to their reconciliations, which read only what they were not handed.
    let mut cluster = Cluster::new("ctl-one-read").await;
    cluster.deployment(NS, "a", &[], &["db"], true);
    cluster.deployment(NS, "b", &[], &["db"], true);
    // Both at once: reads are the subject here, not waves (tests/e2e_controller_waves.rs).
    let controller =
        Controller::start(&cluster.api, &cluster.dir, "a", &["--fan-out", "all"]).await;
    let path = FakeApiServer::secret_path(NS, "db");
    // A replica whose state took up its term only after the watches synced catches up as any
    // new term does (a follower's reads roll nothing): it asks for every read again, which is
    // a second read unless the first had not started yet. On a busy machine it may. The
    // state's own lines say which: the lease's "became the leader" reaches it through a
    // channel, in no fixed order with the watches' events.
    controller.logged(|line| line.contains("leading: ")).await;
    let logs = controller.logged(|line| line.contains("watches synced")).await;
    let caught_up = logs.contains("leading: bringing workloads up to date");
    cluster.wait_for("the baseline read", REACTION, |c| c.api.calls("GET", &path) >= 1).await;
    // Any further read would be queued with that one.
    controller.idle().await;
    let baseline = cluster.api.calls("GET", &path);
    let most = if caught_up { 2 } else { 1 };
    assert!((1..=most).contains(&baseline), "{baseline} baseline reads of {most} at most\n{logs}");
    for (change, password) in ["two", "three"].into_iter().enumerate() {
        let before = (cluster.annotations(NS, "a"), cluster.annotations(NS, "b"));
        cluster.secret("db", &[("password", password)]);
        cluster
            .wait_for("both patches", REACTION, |c| {
                c.annotations(NS, "a") != before.0 && c.annotations(NS, "b") != before.1
            })
            .await;
        assert_eq!(cluster.api.calls("GET", &path), baseline + 1 + change, "one read per change");
    }
    assert_eq!(cluster.annotations(NS, "a"), cluster.webhook_digests(NS, "a"));
    assert_eq!(controller.stop().await, Some(0));
}

#[tokio::test]
async fn every_declared_kind_of_object_is_watched_read_and_digested_as_the_webhook_does() {
    // A kind declared in core::inputs but missing from the fixtures, the fake
    // API server, the controller's watches or its reads fails here.
    let mut cluster = Cluster::new("ctl-inputs").await;
    let objects: Vec<ObjectRef> = ObjectKind::all()
        .map(|kind| ObjectRef::new(kind, format!("{}-1", kind.prefix())))
        .collect();
    for object in &objects {
        cluster.object(object.kind, &object.name, &[("k", "one")]);
    }
    cluster.deployment_reading("web", &objects, true);
    let admitted = cluster.annotations(NS, "web");
    for object in &objects {
        let key = format!("{}.configsum.dev/{}", object.kind.prefix(), object.name);
        assert!(admitted.get(&key).is_some(), "{key} in {admitted}");
    }
    let controller = Controller::start(&cluster.api, &cluster.dir, "a", &[]).await;
    for (changed, object) in objects.iter().enumerate() {
        let before = cluster.annotations(NS, "web");
        cluster.object(object.kind, &object.name, &[("k", "two")]);
        cluster
            .wait_for(&format!("the patch for {object}"), Duration::from_secs(3), |c| {
                c.annotations(NS, "web") != before
            })
            .await;
        assert_eq!(cluster.annotations(NS, "web"), cluster.webhook_digests(NS, "web"));
        assert_eq!(cluster.patches(NS, "web"), changed + 1, "one patch per change");
    }
    assert_eq!(controller.stop().await, Some(0));
}

#[tokio::test]
async fn metadata_only_changes_patch_nothing() {
    let mut cluster = Cluster::new("ctl-labels").await;
    cluster.deployment(NS, "web", &["app"], &["db"], true);
    // A witness whose objects change after the labels: each watch delivers its events in
    // order, so once the witness is patched, the label changes were seen before.
    cluster.config_map("witness-c", &[("k", "1")]);
    cluster.secret("witness-s", &[("k", "1")]);
    cluster.deployment(NS, "witness", &["witness-c"], &["witness-s"], true);
    let controller = Controller::start(&cluster.api, &cluster.dir, "a", &[]).await;
    let objects = [secret_path("db"), config_map_path("app")];
    controller.caught_up(&cluster.api, &objects).await;
    cluster.api.set_labels(&objects[0], json!({"team": "payments"}));
    cluster.api.set_labels(&objects[1], json!({"team": "payments"}));
    let before = cluster.annotations(NS, "witness");
    cluster.config_map("witness-c", &[("k", "2")]);
    cluster.secret("witness-s", &[("k", "2")]);
    cluster
        .wait_for("the witness patched for both", REACTION, |c| {
            let now = c.annotations(NS, "witness");
            now["configmap.configsum.dev/witness-c"] != before["configmap.configsum.dev/witness-c"]
                && now[SECRET_WITNESS] != before[SECRET_WITNESS]
        })
        .await;
    controller.idle().await;
    assert_eq!(cluster.patches(NS, "web"), 0);
    assert_eq!(controller.stop().await, Some(0));
}

/// configsum's own namespace is `POD_NAMESPACE`, in the controller as in the webhook:
/// `--lease-namespace` says only where the Lease is.
#[tokio::test]
async fn the_own_namespace_is_pod_namespace_whatever_the_lease_namespace() {
    let mut cluster = Cluster::new("ctl-own-ns").await;
    cluster.deployment(NS, "web", &["app"], &["db"], true);
    // A witness in another namespace, whose Secret changes after: Secrets are watched
    // cluster-wide, in order, so once it is patched the first change was seen.
    cluster.api.put_namespace("team-b", &[("configsum.dev/enabled", "true")]);
    cluster.api.put_secret("team-b", "db", &[("password", "one")]);
    cluster.objects.insert("team-b", ObjectRef::secret("db"), &[("password", "one")]);
    cluster.deployment("team-b", "witness", &[], &["db"], true);
    let env = [("POD_NAMESPACE", NS)];
    let controller = Controller::start_with_env(&cluster.api, &cluster.dir, "a", &[], &env).await;
    let holder = cluster.api.object(LEASE_PATH).map(|l| l["spec"]["holderIdentity"].clone());
    assert_eq!(holder, Some(json!("a")), "the Lease is in --lease-namespace");
    controller.caught_up(&cluster.api, &[FakeApiServer::secret_path("team-b", "db")]).await;
    cluster.secret("db", &[("password", "rotated")]);
    cluster.api.put_secret("team-b", "db", &[("password", "rotated")]);
    cluster
        .wait_for("the witness patched", REACTION, |c| c.patches("team-b", "witness") == 1)
        .await;
    controller.idle().await;
    assert_eq!(cluster.patches(NS, "web"), 0, "a workload in configsum's own namespace");
    assert_eq!(controller.stop().await, Some(0));
}

#[tokio::test]
async fn secrets_created_and_deleted_after_their_workload_move_the_digest() {
    let mut cluster = Cluster::new("ctl-create").await;
    cluster.deployment(NS, "web", &["app"], &["db", "later"], true);
    assert_eq!(cluster.annotations(NS, "web")["secret.configsum.dev/later"], "absent");
    let controller = Controller::start(&cluster.api, &cluster.dir, "a", &[]).await;
    cluster.secret("later", &[("token", "t")]);
    cluster
        .wait_for("created", REACTION, |c| {
            c.annotations(NS, "web")["secret.configsum.dev/later"]
                .as_str()
                .is_some_and(|v| v.starts_with("hmac-sha256:"))
        })
        .await;
    cluster.api.delete("secrets", NS, "later");
    cluster.objects.remove(NS, &configsum::core::ObjectRef::secret("later"));
    cluster
        .wait_for("deleted", REACTION, |c| {
            c.annotations(NS, "web")["secret.configsum.dev/later"] == "absent"
        })
        .await;
    assert_eq!(cluster.annotations(NS, "web"), cluster.webhook_digests(NS, "web"));
    assert_eq!(controller.stop().await, Some(0));
}

#[tokio::test]
async fn first_observations_patch_nothing_until_a_tracked_object_changes() {
    let mut cluster = Cluster::new("ctl-first").await;
    cluster.deployment(NS, "no-digests", &["app"], &["db"], false);
    cluster.api.put_namespace("team-b", &[]);
    cluster.deployment("team-b", "later-labelled", &[], &["db"], false);
    let controller = Controller::start(&cluster.api, &cluster.dir, "a", &[]).await;
    controller.caught_up(&cluster.api, &[secret_path("db"), config_map_path("app")]).await;
    cluster.api.put_namespace("team-b", &[("configsum.dev/enabled", "true")]);
    // Both watched, both without digests: seen as first observations.
    let first = r#"configsum_controller_workloads{verdict="first-observation"} 2"#;
    let metrics = controller.metrics_with(&[first], Duration::from_secs(20)).await;
    assert!(metrics.contains(first), "{metrics}");
    controller.idle().await;
    assert_eq!(
        cluster.patches(NS, "no-digests") + cluster.patches("team-b", "later-labelled"),
        0,
        "first observations"
    );

    cluster.secret("db", &[("password", "rotated")]);
    cluster
        .wait_for("digests added", REACTION, |c| !c.annotations(NS, "no-digests").is_null())
        .await;
    assert_eq!(cluster.annotations(NS, "no-digests"), cluster.webhook_digests(NS, "no-digests"));
    // team-b's "db" is another Secret (namespaced), which did not change.
    assert_eq!(cluster.patches("team-b", "later-labelled"), 0);
    assert_eq!(controller.stop().await, Some(0));
}

#[tokio::test]
async fn restarts_patch_nothing_when_current_and_catch_up_otherwise() {
    let mut cluster = Cluster::new("ctl-restart").await;
    cluster.deployment(NS, "web", &["app"], &["db"], true);
    let objects = [secret_path("db"), config_map_path("app")];
    let first = Controller::start(&cluster.api, &cluster.dir, "a", &[]).await;
    first.caught_up(&cluster.api, &objects).await;
    assert_eq!(first.stop().await, Some(0));
    cluster.api.clear_log();
    let second = Controller::start(&cluster.api, &cluster.dir, "a", &[]).await;
    second.caught_up(&cluster.api, &objects).await;
    assert_eq!(cluster.patches(NS, "web"), 0, "everything current: zero patches");
    assert_eq!(second.stop().await, Some(0));

    // Changed while no controller ran: caught up at start.
    cluster.secret("db", &[("password", "while-down")]);
    let third = Controller::start(&cluster.api, &cluster.dir, "a", &[]).await;
    cluster.wait_for("caught up", Duration::from_secs(5), |c| c.patches(NS, "web") == 1).await;
    assert_eq!(cluster.annotations(NS, "web"), cluster.webhook_digests(NS, "web"));
    assert_eq!(third.stop().await, Some(0));
}

#[tokio::test]
async fn a_burst_is_one_patch_and_many_workloads_are_paced() {
    let mut cluster = Cluster::new("ctl-storm").await;
    for i in 0..200 {
        cluster.deployment(NS, &format!("w{i:03}"), &[], &["db"], true);
    }
    // Section 9's pacing alone: the fake completes no rollout, so waves would stop at one.
    let pacing = ["--rate", "50", "--burst", "20", "--fan-out", "all"];
    let controller = Controller::start(&cluster.api, &cluster.dir, "a", &pacing).await;
    // Let the start-up catch-up (one read of the Secret, nothing stale) finish first.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !controller.metrics().await.contains("configsum_controller_queue_depth 0") {
        assert!(Instant::now() < deadline, "catch-up did not finish");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let first_change = Instant::now();
    for i in 0..50 {
        cluster.secret("db", &[("password", &format!("v{i}"))]);
    }
    let patched =
        |c: &Cluster| (0..200).filter(|i| c.patches(NS, &format!("w{i:03}")) >= 1).count();
    cluster.wait_for("all patched", Duration::from_secs(15), |c| patched(c) == 200).await;
    // When the fake API server received them: never before they were sent, so a busy machine
    // can only make fewer arrive by 1.5 s, never more.
    let arrivals: Vec<Instant> = cluster.patch_log().into_iter().map(|(at, _, _)| at).collect();
    let after_1500 =
        arrivals.iter().filter(|at| **at <= first_change + Duration::from_millis(1500)).count();
    let took = arrivals.iter().max().map_or(Duration::ZERO, |last| *last - first_change);
    eprintln!(
        "200 workloads, burst 20, rate 50/s: {after_1500} patched 1.5 s after the first change, all after {took:?}"
    );
    // The window (0.5 s), then 20 at once and 50 per second: at most 70 by 1.5 s, all no sooner than 4.1 s.
    assert!(after_1500 <= 75, "the token bucket paces patches: {after_1500} after 1.5 s");
    assert!(took >= Duration::from_millis(3900), "{took:?}");
    // Any second patch would be queued or in flight until then.
    controller.idle().await;
    for i in 0..200 {
        let name = format!("w{i:03}");
        assert_eq!(cluster.patches(NS, &name), 1, "{name}: one patch for the whole burst");
    }
    assert_eq!(cluster.annotations(NS, "w000"), cluster.webhook_digests(NS, "w000"));
    let metrics = controller.metrics().await;
    assert!(metrics.contains("configsum_controller_queue_depth 0"), "{metrics}");
    assert_eq!(controller.stop().await, Some(0));
}

#[tokio::test]
async fn a_crashed_leader_is_replaced_within_the_lease_duration() {
    let mut cluster = Cluster::new("ctl-crash").await;
    cluster.deployment(NS, "web", &["app"], &["db"], true);
    let mut a = Controller::start(&cluster.api, &cluster.dir, "a", &[]).await;
    let b = Controller::start(&cluster.api, &cluster.dir, "b", &[]).await;
    a.child.kill().await.expect("SIGKILL the leader");
    let killed = Instant::now();
    cluster.secret("db", &[("password", "after-crash")]);
    // Lease 3 s, retried every 0.6 s: the follower takes over within the duration plus one try.
    cluster
        .wait_for("takeover and patch", Duration::from_secs(5), |c| c.patches(NS, "web") == 1)
        .await;
    eprintln!("patched by the new leader {:?} after the old one was killed", killed.elapsed());
    assert_eq!(cluster.annotations(NS, "web"), cluster.webhook_digests(NS, "web"));
    assert_eq!(b.stop().await, Some(0));
}

#[tokio::test]
async fn memory_stays_small_with_ten_thousand_large_secrets() {
    let cluster = Cluster::new("ctl-memory").await;
    let blob =
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, vec![7u8; 100 * 1024]);
    for i in 0..10_000 {
        cluster.api.put_secret_encoded(NS, &format!("big-{i:05}"), "blob", &blob);
    }
    // 100 workloads each tracking two of them.
    for i in 0..100 {
        let (a, b) = (format!("big-{:05}", i * 2), format!("big-{:05}", i * 2 + 1));
        cluster.deployment(NS, &format!("w{i:03}"), &[], &[&a, &b], false);
    }
    // A Lease of 30 s: on a machine busy with other tests, the debug build's Lease calls
    // (600 ms each at the default 3 s) time out while 200 Secrets of 100 KB are read, and a
    // leader that keeps losing its term keeps reading them all again.
    let args = ["--rate", "100", "--burst", "100", "--lease-duration", "30s"];
    let controller = Controller::start(&cluster.api, &cluster.dir, "a", &args).await;
    let pid = controller.child.id().expect("pid");
    let rss = |field: &str| -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let line = status.lines().find(|l| l.starts_with(field)).unwrap_or_default().to_owned();
        line.split_whitespace().nth(1).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / 1024.0
    };
    let synced = rss("VmRSS:");
    let changed =
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, vec![9u8; 100 * 1024]);
    for i in 0..100 {
        cluster.api.put_secret_encoded(NS, &format!("big-{:05}", i * 2), "blob", &changed);
    }
    cluster
        .wait_for("all rolled", Duration::from_secs(60), |c| {
            (0..100).all(|i| c.patches(NS, &format!("w{i:03}")) == 1)
        })
        .await;
    let (after, peak) = (rss("VmRSS:"), rss("VmHWM:"));
    eprintln!(
        "controller RSS with 10,000 Secrets of 100 KB: {synced:.1} MiB synced, {after:.1} MiB after 100 rolls, {peak:.1} MiB peak"
    );
    assert!(peak < 64.0, "peak {peak:.1} MiB");
    assert!(after < synced + 16.0, "flat: {synced:.1} -> {after:.1} MiB");
    assert_eq!(controller.stop().await, Some(0));
}

#[tokio::test]
async fn a_conflict_is_retried_on_the_fresh_object() {
    let mut cluster = Cluster::new("ctl-conflict").await;
    cluster.deployment(NS, "web", &["app"], &["db"], true);
    let controller = Controller::start(&cluster.api, &cluster.dir, "a", &[]).await;
    let path = FakeApiServer::deployment_path(NS, "web");
    cluster.api.interleave_write(
        &path,
        json!({"spec": {"template": {"metadata": {"annotations": {"team.example/rev": "7"}}}}}),
    );
    cluster.secret("db", &[("password", "raced")]);
    cluster
        .wait_for("patched", Duration::from_secs(3), |c| {
            c.annotations(NS, "web")[SECRET_KEY] == c.webhook_digests(NS, "web")[SECRET_KEY]
        })
        .await;
    assert_eq!(cluster.patches(NS, "web"), 2, "one conflict, one retry");
    assert_eq!(
        cluster.annotations(NS, "web")["team.example/rev"],
        "7",
        "the concurrent write is kept"
    );
    assert_eq!(controller.stop().await, Some(0));
}

#[tokio::test]
async fn only_the_leader_patches_and_the_other_takes_over() {
    let mut cluster = Cluster::new("ctl-leader").await;
    cluster.deployment(NS, "web", &["app"], &["db"], true);
    let a = Controller::start(&cluster.api, &cluster.dir, "a", &[]).await;
    let b = Controller::start(&cluster.api, &cluster.dir, "b", &[]).await;
    let lease_path =
        "/apis/coordination.k8s.io/v1/namespaces/configsum-system/leases/configsum-controller";
    let holder = |c: &Cluster| {
        c.api
            .object(lease_path)
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_owned))
    };
    assert_eq!(holder(&cluster).as_deref(), Some("a"));
    let changed = Instant::now();
    cluster.secret("db", &[("password", "led")]);
    cluster.wait_for("patched once", REACTION, |c| c.patches(NS, "web") == 1).await;
    // The follower has seen the change too: it reads it, and rolls nothing.
    let path = FakeApiServer::secret_path(NS, "db");
    cluster
        .wait_for("the follower's read", REACTION, |c| {
            c.api.log().iter().any(|l| l.token == "b" && l.path == path && l.at >= changed)
        })
        .await;
    a.idle().await;
    b.idle().await;
    assert_eq!(cluster.patches(NS, "web"), 1, "the follower did not patch too");

    let stopped = Instant::now();
    assert_eq!(a.stop().await, Some(0));
    cluster
        .wait_for("takeover", Duration::from_secs(3), |c| holder(c).as_deref() == Some("b"))
        .await;
    eprintln!("takeover after the leader stopped: {:?}", stopped.elapsed());
    cluster.secret("db", &[("password", "after-takeover")]);
    cluster.wait_for("the new leader patches", REACTION, |c| c.patches(NS, "web") == 2).await;
    assert_eq!(cluster.annotations(NS, "web"), cluster.webhook_digests(NS, "web"));
    assert_eq!(b.stop().await, Some(0));
}

#[tokio::test]
async fn a_410_gone_watch_relists_and_keeps_working() {
    let mut cluster = Cluster::new("ctl-gone").await;
    cluster.deployment(NS, "web", &["app"], &["db"], true);
    let controller = Controller::start(&cluster.api, &cluster.dir, "a", &[]).await;
    cluster.api.expire_watches("secrets");
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.secret("db", &[("password", "after-410")]);
    cluster
        .wait_for("patched after the re-list", Duration::from_secs(3), |c| {
            c.patches(NS, "web") == 1
        })
        .await;
    assert_eq!(cluster.annotations(NS, "web"), cluster.webhook_digests(NS, "web"));
    assert_eq!(controller.stop().await, Some(0));
}
