//! `configsum controller`, the real binary, against an API server that
//! behaves like the real one (list items without `apiVersion`/`kind`,
//! relists after 410 Gone) and fails like one (hung calls, errors, a Lease
//! that cannot be renewed, a watch that stays down).

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

use configsum::core::model::kinds;
use configsum::core::model::kinds::WorkloadKind;
use controller::{Cluster, Controller, LEASE_PATH, NS};
use fake_apiserver::{FakeApiServer, Fault};

/// GETs of one object's path made by the controller, in order.
fn reads(api: &FakeApiServer, path: &str) -> Vec<Instant> {
    api.log().into_iter().filter(|l| l.method == "GET" && l.path == path).map(|l| l.at).collect()
}

#[tokio::test]
async fn workloads_and_secrets_that_existed_before_start_roll_when_a_secret_changes() {
    // The real API server lists items without apiVersion/kind; a controller
    // that planned workloads from those fields ignored every one of these.
    // Every kind declared as rolled everywhere: a new one fails here until
    // the fixtures and the fake API server know it.
    let rolled: Vec<(&str, String)> = WorkloadKind::all()
        .filter(|kind| kind.declaration().controller == kinds::Controller::Rolls)
        .map(|kind| (kind.as_str(), format!("{}-1", kind.as_str().to_lowercase())))
        .collect();
    assert!(rolled.len() >= 4, "{rolled:?}");
    let mut cluster = Cluster::new("ctl-preexisting").await;
    cluster.secret("other", &[("token", "t")]);
    for (kind, name) in &rolled {
        cluster.workload(kind, NS, name, &["app"], &["db"], true);
    }
    cluster.workload("Deployment", NS, "unrelated", &["app"], &["other"], true);
    let listed = cluster.api.list(&format!("/apis/apps/v1/namespaces/{NS}/deployments"));
    assert_eq!(listed.len(), 2, "as listed, one Deployment tracks db and one does not");
    // Every pre-existing reader at once: the listing is the subject here, not waves.
    let controller =
        Controller::start(&cluster.api, &cluster.dir, "a", &["--fan-out", "all"]).await;
    let metrics = controller.metrics().await;
    assert!(metrics.contains("configsum_controller_watched_objects 3"), "{metrics}");

    cluster.secret("db", &[("password", "changed")]);
    cluster
        .wait_for("every tracking workload patched", Duration::from_secs(3), |c| {
            rolled.iter().all(|(kind, name)| c.patches_of(kind, NS, name) == 1)
        })
        .await;
    for (kind, name) in &rolled {
        assert_eq!(
            cluster.annotations_of(kind, NS, name),
            cluster.webhook_digests_of(kind, NS, name),
            "{kind} {name}: the webhook's digests"
        );
    }
    // The read of db that rolled them would have scheduled it too.
    controller.idle().await;
    assert_eq!(cluster.patches_of("Deployment", NS, "unrelated"), 0);
    assert!(rolled.iter().all(|(kind, name)| cluster.patches_of(kind, NS, name) == 1), "once each");
    assert_eq!(controller.stop().await, Some(0));
}

#[tokio::test]
async fn argo_rollouts_roll_where_their_crd_is_served_and_are_not_watched_elsewhere() {
    let mut cluster = Cluster::new("ctl-rollouts").await;
    cluster.api.serve_rollouts();
    cluster.workload("Rollout", NS, "canary", &[], &["db"], true);
    let controller = Controller::start(&cluster.api, &cluster.dir, "a", &[]).await;
    cluster.secret("db", &[("password", "rolled-out")]);
    cluster
        .wait_for("the Rollout patched", Duration::from_secs(3), |c| {
            c.patches_of("Rollout", NS, "canary") == 1
        })
        .await;
    assert_eq!(
        cluster.annotations_of("Rollout", NS, "canary"),
        cluster.webhook_digests_of("Rollout", NS, "canary")
    );
    assert_eq!(controller.stop().await, Some(0));

    // Without the CRD, the controller neither lists nor watches Rollouts.
    let plain = Cluster::new("ctl-no-rollouts").await;
    plain.api.clear_log();
    let controller = Controller::start(&plain.api, &plain.dir, "a", &[]).await;
    assert!(plain.api.log().iter().all(|l| !l.path.contains("/rollouts")));
    assert_eq!(controller.stop().await, Some(0));
}

#[tokio::test]
async fn a_rollouts_crd_installed_after_start_up_is_watched_without_a_restart() {
    let mut cluster = Cluster::new("ctl-rollouts-later").await;
    let extra = ["--discovery-interval", "1s"];
    let controller = Controller::start(&cluster.api, &cluster.dir, "a", &extra).await;
    // The CRD is installed, and a Rollout created through the webhook.
    cluster.api.serve_rollouts();
    cluster.workload("Rollout", NS, "canary", &[], &["db"], true);
    let listed = |c: &Cluster| {
        c.api.log().iter().any(|l| l.path.ends_with("/rollouts") && l.query.contains("watch=true"))
    };
    cluster.wait_for("the Rollouts watched", Duration::from_secs(5), listed).await;
    cluster.secret("db", &[("password", "rolled-out-later")]);
    cluster
        .wait_for("the Rollout patched", Duration::from_secs(5), |c| {
            c.patches_of("Rollout", NS, "canary") == 1
        })
        .await;
    assert_eq!(
        cluster.annotations_of("Rollout", NS, "canary"),
        cluster.webhook_digests_of("Rollout", NS, "canary")
    );
    let logs = controller.logged(|l| l.contains("its resource is served now")).await;
    assert!(logs.contains("its resource is served now"), "{logs}");
    assert_eq!(controller.stop().await, Some(0));
}

#[tokio::test]
async fn a_failed_read_is_retried_with_growing_backoff_until_it_succeeds() {
    let mut cluster = Cluster::new("ctl-read-errors").await;
    cluster.deployment(NS, "web", &["app"], &["db"], true);
    let controller = Controller::start(&cluster.api, &cluster.dir, "a", &[]).await;
    let path = FakeApiServer::secret_path(NS, "db");
    cluster.api.fault_for(None, Some("GET"), &path, Some(Fault::Status(500)));
    cluster.api.clear_log();
    cluster.secret("db", &[("password", "after-errors")]);
    cluster
        .wait_for("three failed reads", Duration::from_secs(10), |c| {
            reads(&c.api, &path).len() >= 3
        })
        .await;
    cluster.api.fault_for(None, Some("GET"), &path, None);
    cluster
        .wait_for("patched once the read succeeds", Duration::from_secs(10), |c| {
            c.patches(NS, "web") == 1
        })
        .await;
    assert_eq!(cluster.annotations(NS, "web"), cluster.webhook_digests(NS, "web"));
    let at = reads(&cluster.api, &path);
    let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
    eprintln!("gaps between reads of a failing Secret: {gaps:?}");
    // 1 s, then [1 s, 2 s), then [2 s, 4 s): exponential, with jitter.
    assert!(gaps[0] >= Duration::from_millis(900), "{gaps:?}");
    assert!(gaps[1] >= Duration::from_millis(900), "{gaps:?}");
    assert!(gaps[2] >= Duration::from_millis(1900), "{gaps:?}");
    assert_eq!(controller.stop().await, Some(0));
}

#[tokio::test]
async fn a_failed_patch_is_retried_with_growing_backoff_until_it_succeeds() {
    let mut cluster = Cluster::new("ctl-patch-errors").await;
    cluster.deployment(NS, "web", &["app"], &["db"], true);
    let controller = Controller::start(&cluster.api, &cluster.dir, "a", &[]).await;
    let path = FakeApiServer::deployment_path(NS, "web");
    cluster.api.fault_for(None, Some("PATCH"), &path, Some(Fault::Status(500)));
    cluster.secret("db", &[("password", "after-patch-errors")]);
    cluster
        .wait_for("three failed patches", Duration::from_secs(12), |c| c.patches(NS, "web") >= 3)
        .await;
    cluster.api.fault_for(None, Some("PATCH"), &path, None);
    cluster
        .wait_for("patched", Duration::from_secs(10), |c| {
            c.annotations(NS, "web") == c.webhook_digests(NS, "web")
        })
        .await;
    let at: Vec<Instant> = cluster.patch_log().into_iter().map(|(at, _, _)| at).collect();
    let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
    eprintln!("gaps between attempts to patch: {gaps:?}");
    assert!(gaps[0] >= Duration::from_millis(900), "{gaps:?}");
    assert!(gaps[1] >= Duration::from_millis(900), "{gaps:?}");
    assert!(gaps[2] >= Duration::from_millis(1900), "{gaps:?}");
    let (failed, patched) = (
        r#"configsum_controller_patches_total{outcome="failed"} 3"#,
        r#"configsum_controller_patches_total{outcome="patched"} 1"#,
    );
    let metrics = controller.metrics_with(&[failed, patched], Duration::from_secs(2)).await;
    assert!(metrics.contains(failed), "{metrics}");
    assert!(metrics.contains(patched), "{metrics}");
    assert_eq!(controller.stop().await, Some(0));
}

#[tokio::test]
async fn a_hung_read_times_out_and_is_retried() {
    let mut cluster = Cluster::new("ctl-hang").await;
    cluster.deployment(NS, "web", &["app"], &["db"], true);
    let controller = Controller::start(&cluster.api, &cluster.dir, "a", &[]).await;
    let path = FakeApiServer::secret_path(NS, "db");
    cluster.api.fault_for(None, Some("GET"), &path, Some(Fault::Hang));
    cluster.api.clear_log();
    cluster.secret("db", &[("password", "after-hang")]);
    cluster
        .wait_for("the read", Duration::from_secs(3), |c| !reads(&c.api, &path).is_empty())
        .await;
    cluster
        .wait_for("a second read after the timeout", Duration::from_secs(9), |c| {
            reads(&c.api, &path).len() >= 2
        })
        .await;
    let at = reads(&cluster.api, &path);
    eprintln!("a hung read was given up after {:?}", at[1] - at[0]);
    assert!(at[1] - at[0] >= Duration::from_secs(5), "not before the 5 s call timeout");
    cluster.api.fault_for(None, Some("GET"), &path, None);
    cluster.wait_for("patched", Duration::from_secs(10), |c| c.patches(NS, "web") == 1).await;
    assert_eq!(cluster.annotations(NS, "web"), cluster.webhook_digests(NS, "web"));
    assert_eq!(controller.stop().await, Some(0));
}

#[tokio::test]
async fn a_leader_that_cannot_renew_stops_patching_before_its_lease_expires() {
    let mut cluster = Cluster::new("ctl-renew").await;
    cluster.deployment(NS, "web", &["app"], &["db"], true);
    let a = Controller::start(&cluster.api, &cluster.dir, "a", &[]).await;
    let b = Controller::start(&cluster.api, &cluster.dir, "b", &[]).await;
    cluster.secret("db", &[("password", "v0")]);
    cluster.wait_for("patched", Duration::from_secs(2), |c| c.patches(NS, "web") == 1).await;
    assert!(
        cluster.patch_log().iter().all(|(_, token, _)| token == "a"),
        "the follower patches nothing"
    );

    // a has renewed its Lease once (the last renewal is measured from), however soon the
    // first patch came.
    let renewed = |c: &Cluster| {
        c.api
            .log()
            .iter()
            .any(|l| l.token == "a" && l.method == "PUT" && l.path == LEASE_PATH && l.status == 200)
    };
    cluster.wait_for("a renewed its Lease", Duration::from_secs(5), renewed).await;

    // From now on a's Lease calls hang; keep changing the Secret so that
    // there is always something to patch.
    cluster.api.fault_for(Some("a"), None, LEASE_PATH, Some(Fault::Hang));
    let hung = Instant::now();
    let mut i = 0;
    while !cluster.patch_log().iter().any(|(_, token, _)| token == "b") {
        assert!(hung.elapsed() < Duration::from_secs(10), "b never took over");
        i += 1;
        cluster.secret("db", &[("password", &format!("v{i}"))]);
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let renewals: Vec<Instant> = cluster
        .api
        .log()
        .into_iter()
        .filter(|l| l.token == "a" && l.method == "PUT" && l.path == LEASE_PATH && l.status == 200)
        .map(|l| l.at)
        .collect();
    let last_renewal = *renewals.last().expect("a renewed before");
    let patches = cluster.patch_log();
    let last_by_a = patches.iter().filter(|(_, t, _)| t == "a").map(|(at, _, _)| *at).max();
    let first_by_b = patches.iter().filter(|(_, t, _)| t == "b").map(|(at, _, _)| *at).min();
    let (last_by_a, first_by_b) = (last_by_a.expect("a patched"), first_by_b.expect("b patched"));
    eprintln!(
        "Lease 3 s: a's last patch {:?} after its last renewal, b's first {:?} after it",
        last_by_a.saturating_duration_since(last_renewal),
        first_by_b - last_renewal
    );
    assert!(last_by_a < last_renewal + Duration::from_secs(3), "a patched after its Lease expired");
    assert!(last_by_a < first_by_b, "no overlapping patches");
    cluster.api.clear_faults();
    assert_eq!(b.stop().await, Some(0));
    assert_eq!(a.stop().await, Some(0));
}

#[tokio::test]
async fn a_relist_after_410_rereads_nothing_unchanged_and_forgets_deleted_workloads() {
    let mut cluster = Cluster::new("ctl-relist").await;
    cluster.secret("kept", &[("k", "v")]);
    cluster.secret("gone", &[("k", "v")]);
    cluster.deployment(NS, "web", &["app"], &["db", "gone"], true);
    cluster.deployment(NS, "deleted", &[], &["kept"], true);
    let controller = Controller::start(&cluster.api, &cluster.dir, "a", &[]).await;
    let metrics = controller.metrics().await;
    assert!(metrics.contains("configsum_controller_watched_objects 4"), "{metrics}");

    // The watches go down and stay down while a workload and a Secret are deleted.
    for collection in ["/apis/apps/v1/deployments", "/api/v1/secrets"] {
        cluster.api.fault_for(None, Some("GET"), collection, Some(Fault::Status(500)));
    }
    cluster.api.expire_watches("deployments");
    cluster.api.expire_watches("secrets");
    cluster.api.delete("deployments", NS, "deleted");
    cluster.api.delete("secrets", NS, "gone");
    cluster.objects.remove(NS, &configsum::core::ObjectRef::secret("gone"));
    cluster.api.compact();
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.api.clear_log();
    cluster.api.clear_faults();

    cluster
        .wait_for("the deleted Secret's digest is absent", Duration::from_secs(10), |c| {
            c.annotations(NS, "web")["secret.configsum.dev/gone"] == "absent"
        })
        .await;
    let deadline = Instant::now() + Duration::from_secs(5);
    // web's app, db and gone; `kept` went with the deleted workload.
    while !controller.metrics().await.contains("configsum_controller_watched_objects 3") {
        assert!(Instant::now() < deadline, "the deleted workload is still tracked");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let secret_reads: Vec<String> = cluster
        .api
        .log()
        .into_iter()
        .filter(|l| l.method == "GET" && l.path.starts_with(&format!("/api/v1/namespaces/{NS}/")))
        .map(|l| l.path)
        .collect();
    // web's own lookups (app, db, gone) when it is reconciled, and the one
    // read of the deleted Secret; never the unchanged `kept` or `db` on their own.
    assert!(!secret_reads.iter().any(|p| p.ends_with("/secrets/kept")), "{secret_reads:?}");
    let gone_reads = secret_reads.iter().filter(|p| p.ends_with("/secrets/gone")).count();
    assert!(gone_reads >= 1, "{secret_reads:?}");
    assert_eq!(
        secret_reads.iter().filter(|p| p.ends_with("/secrets/db")).count(),
        1,
        "db read only by web's reconciliation: {secret_reads:?}"
    );
    assert_eq!(cluster.annotations(NS, "web"), cluster.webhook_digests(NS, "web"));
    assert_eq!(controller.stop().await, Some(0));
}

#[tokio::test]
async fn a_namespace_labelled_after_start_has_its_workloads_listed_and_rolled() {
    let cluster = Cluster::new("ctl-opt-in").await;
    cluster.api.put_namespace("team-b", &[]);
    cluster.api.put_secret("team-b", "db", &[("password", "b1")]);
    let mut objects = fixtures::Objects::default();
    objects.insert("team-b", configsum::core::ObjectRef::secret("db"), &[("password", "b1")]);
    let mut web =
        fixtures::workload("Deployment", "team-b", fixtures::pod_spec_env_from(&[], &["db"]));
    web["metadata"]["name"] = serde_json::json!("web");
    let decision = fixtures::Admit::new("Deployment", "CREATE", &web).run(&objects);
    let web = fixtures::apply(&web, &decision);
    let path = FakeApiServer::deployment_path("team-b", "web");
    cluster.api.put(&path, web);
    let controller = Controller::start(&cluster.api, &cluster.dir, "a", &[]).await;
    assert!(controller.metrics().await.contains("configsum_controller_watched_objects 0"));

    cluster.api.put_namespace("team-b", &[("configsum.dev/enabled", "true")]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !controller.metrics().await.contains("configsum_controller_watched_objects 1") {
        assert!(Instant::now() < deadline, "team-b's workload was never listed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(cluster.api.calls("PATCH", &path), 0, "first observation");
    cluster.api.put_secret("team-b", "db", &[("password", "b2")]);
    cluster.wait_for("patched", Duration::from_secs(3), |c| c.api.calls("PATCH", &path) == 1).await;
    assert_eq!(controller.stop().await, Some(0));
}

#[tokio::test]
async fn bad_flag_values_exit_2_with_a_clear_message() {
    for (flag, value) in [
        ("--rate", "0"),
        ("--rate", "NaN"),
        ("--rate", "-5"),
        ("--burst", "0"),
        ("--window", "soon"),
        ("--lease-duration", "0s"),
        ("--min-interval", "-1s"),
        ("--discovery-interval", "0s"),
        ("--discovery-interval", "2h"),
    ] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_configsum"))
            .args(["controller", "--allow-plain-secret-digests", &format!("{flag}={value}")])
            .output()
            .expect("run configsum");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{flag}={value}: {stderr}");
        assert!(
            stderr.contains(flag) && stderr.contains("invalid value"),
            "{flag}={value}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}
