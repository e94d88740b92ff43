//! A watch that ends and resumes from a resourceVersion the API server no longer holds gets 410
//! Gone; the controller relists, and the relist reads no object whose resourceVersion did not
//! change. On a control plane of its own: restarting kube-apiserver would disturb the other
//! tests. Which requests the controller made is read from the API server's audit log.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::control_plane::ControlPlane;
use crate::controller::{Controller, secret_digest, wait_until};
use crate::install::{ConsumeAs, KEY, SYSTEM, deployment, run, secret};
use crate::server::TempDir;

/// The audit events of `user` after the first `skip` events.
fn requests_of(cp: &ControlPlane, user: &str, skip: usize) -> Vec<Value> {
    cp.audit_events().into_iter().skip(skip).filter(|e| e["user"]["username"] == user).collect()
}

#[test]
fn a_relist_after_410_reads_no_unchanged_object_again() {
    run(async {
        let cp = tokio::task::spawn_blocking(|| ControlPlane::start(&[])).await.expect("start");
        let dir = TempDir(cp.dir.join("relist"));
        std::fs::create_dir_all(&dir.0).expect("dir");
        std::fs::write(dir.path("digest.key"), KEY).expect("key");
        cp.namespace(SYSTEM, false);
        // The controller as a ServiceAccount of its own, so its requests are told apart.
        cp.kubectl_ok(&["create", "serviceaccount", "controller", "-n", SYSTEM]);
        cp.kubectl_ok(&[
            "create",
            "clusterrolebinding",
            "controller",
            "--clusterrole=cluster-admin",
            &format!("--serviceaccount={SYSTEM}:controller"),
        ]);
        let user = format!("system:serviceaccount:{SYSTEM}:controller");

        // Workloads whose digests are current (no webhook here: written as it would).
        let ns = "relist";
        cp.namespace(ns, true);
        let data = [("password", "one")];
        cp.apply(&secret(ns, "db", &data));
        let mut web: Value =
            serde_json::from_str(&deployment(ns, "web", &[("db", ConsumeAs::SecretEnvFrom)]))
                .expect("json");
        web["spec"]["template"]["metadata"]["annotations"] =
            json!({"secret.configsum.dev/db": secret_digest(ns, "db", &data)});
        cp.apply(&web.to_string());

        // A Lease that outlives the restart: a new leadership term brings every workload up to
        // date with fresh reads by design; this test is about the relist alone.
        let controller =
            Controller::start_as(&cp, &dir, "controller", "relist", &["--lease-duration", "60s"])
                .await;
        let secret_reads = || {
            requests_of(&cp, &user, 0)
                .into_iter()
                .filter(|e| e["verb"] == "get" && e["objectRef"]["resource"] == "secrets")
                .count()
        };
        // Read at start-up, and again if the Lease is won after that read (a new term brings
        // every workload up to date); then nothing more while nothing changes.
        wait_until("the start-up read", Duration::from_secs(15), || secret_reads() >= 1).await;
        let mut settled = secret_reads();
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = secret_reads();
            if now == settled {
                break;
            }
            settled = now;
        }
        assert!(settled <= 2, "{settled} reads of an unchanged Secret at start-up");

        // A write the controller does not watch moves etcd's revision past what it last saw;
        // a restarted API server's watch cache starts there, so the resumed watches get 410.
        cp.apply(&format!(
            "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {{name: unwatched, namespace: {SYSTEM}}}\n"
        ));
        let mark = cp.audit_events().len();
        let mut lists_before = Vec::new();
        for resource in ["secrets", "configmaps", "deployments"] {
            lists_before.push((resource, controller.lists_of(resource).await));
        }
        let restarted = Instant::now();
        cp.restart_apiserver();
        eprintln!("kube-apiserver stopped and ready again in {:?}", restarted.elapsed());
        wait_until("the relists", Duration::from_secs(30), || {
            let after = requests_of(&cp, &user, mark);
            ["secrets", "configmaps", "deployments"].iter().all(|resource| {
                after.iter().any(|e| e["verb"] == "list" && e["objectRef"]["resource"] == *resource)
            })
        })
        .await;
        let took = restarted.elapsed();
        eprintln!("relisted {took:?} after the restart began");
        wait_until("the resumed watches' 410 Expired logged", Duration::from_secs(5), || {
            controller.logs().iter().any(|l| l.contains("Expired"))
        })
        .await;
        // The positive signal before asserting that nothing was read: the controller applied
        // the second list of each resource (its metric counts a list once the loop applied it
        // and queued what it needs), and then nothing is queued or being read.
        for (resource, before) in lists_before {
            assert!(before >= 1.0, "{resource}: the first list is counted");
            let deadline = Instant::now() + Duration::from_secs(30);
            while controller.lists_of(resource).await <= before {
                assert!(Instant::now() < deadline, "{resource}: no relist applied");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        controller.idle().await;
        let after = requests_of(&cp, &user, mark);
        let watches_resumed = after.iter().filter(|e| e["verb"] == "watch").count();
        assert!(watches_resumed > 0, "the watches resumed: {after:?}");
        let reads: Vec<&Value> = after
            .iter()
            .filter(|e| e["verb"] == "get" && e["objectRef"]["resource"] != "leases")
            .collect();
        assert!(
            reads.is_empty(),
            "the relist read unchanged objects again: {reads:?}\n{}",
            controller.logs().join("\n")
        );
        assert_eq!(controller.patches().await, 0.0);

        // Still watching: a change after the relist rolls the workload.
        cp.apply(&secret(ns, "db", &[("password", "two")]));
        wait_until("the patch after the relist", Duration::from_secs(15), || {
            let web = cp.get_json(&["deployment", "web", "-n", ns]);
            web["spec"]["template"]["metadata"]["annotations"]["secret.configsum.dev/db"]
                == secret_digest(ns, "db", &[("password", "two")])
        })
        .await;
        controller.stop().await;
        cp.stop();
    });
}
