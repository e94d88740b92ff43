//! `configsum controller --shard I/N` on the real API server (issue 40 point 4): three shards
//! split the namespaces by the hash of their names, each rolling only its own and labelling
//! its metrics and Events; a shard's leader killed mid-work hands over to its standby with
//! every Deployment rolled exactly once; and a change of N from 2 to 3 hands every namespace
//! over once: the new count waits while any shard of the old count still holds its Lease, and
//! a change made while the namespace had no shard rolls when the new one begins.
//!
//! Each test's namespaces carry a label of their own, and its controllers select only those
//! (`--namespace-selector`), so that no other test's workloads are theirs to roll.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use configsum::controller::model::shard::shard_of;
use serde_json::Value;

use crate::controller::{
    Controller, generation, one_controller_at_a_time, secret_digest, wait_until,
};
use crate::install::{
    ConsumeAs, Installation, SYSTEM, deployment, deployment_with_image, installation, run, secret,
};

/// A namespace of the test, its shard's index, and the value its Secret holds now.
struct Tenant {
    namespace: String,
    owner: u32,
    value: String,
}

/// `per` namespaces owned by each shard of `count`, named `<prefix>-<n>`, each opted in,
/// labelled `<label>=true`, holding a Secret `db` and a Deployment `web` admitted with its
/// digest.
async fn tenants(
    install: &Installation,
    prefix: &str,
    label: &str,
    count: u32,
    per: usize,
) -> Vec<Tenant> {
    let mut owned = vec![0; count as usize];
    let mut tenants = Vec::new();
    for n in 0.. {
        if owned.iter().all(|&o| o == per) {
            break;
        }
        let namespace = format!("{prefix}-{n}");
        let owner = shard_of(&namespace, count);
        if owned[owner as usize] == per {
            continue;
        }
        owned[owner as usize] += 1;
        install.cp.namespace(&namespace, true);
        install.cp.kubectl_ok(&["label", "namespace", &namespace, &format!("{label}=true")]);
        let tenant = Tenant { namespace, owner, value: "one".into() };
        admit(install, &tenant).await;
        tenants.push(tenant);
    }
    tenants
}

const KEY_OF_DB: &str = "secret.configsum.dev/db";

fn digest_of(tenant: &Tenant) -> String {
    secret_digest(&tenant.namespace, "db", &[("k", tenant.value.as_str())])
}

/// `web` written (again, with a new image) until the API server has seen the namespace's
/// label and the webhook recorded the Secret's digest.
async fn admit(install: &Installation, tenant: &Tenant) {
    let ns = tenant.namespace.as_str();
    let consumes = [("db", ConsumeAs::SecretEnvFrom)];
    install.cp.apply(&format!(
        "{}\n---\n{}",
        secret(ns, "db", &[("k", tenant.value.as_str())]),
        deployment(ns, "web", &consumes)
    ));
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut writes = 1;
    while install.template_annotations(ns, "web")[KEY_OF_DB] != digest_of(tenant) {
        assert!(Instant::now() < deadline, "{ns}/web was never admitted with its digest");
        tokio::time::sleep(Duration::from_millis(200)).await;
        writes += 1;
        let image = format!("registry.example/app:{writes}");
        install.cp.apply(&deployment_with_image(ns, "web", &image, &consumes));
    }
}

fn change(install: &Installation, tenant: &mut Tenant, value: &str) {
    value.clone_into(&mut tenant.value);
    install.cp.apply(&secret(&tenant.namespace, "db", &[("k", value)]));
}

fn is_current(install: &Installation, tenant: &Tenant) -> bool {
    install.template_annotations(&tenant.namespace, "web")[KEY_OF_DB] == digest_of(tenant)
}

async fn all_current(install: &Installation, tenants: &[&Tenant], what: &str) {
    wait_until(what, Duration::from_secs(30), || tenants.iter().all(|t| is_current(install, t)))
        .await;
}

fn generations(install: &Installation, tenants: &[Tenant]) -> BTreeMap<String, i64> {
    tenants
        .iter()
        .map(|t| (t.namespace.clone(), generation(install, &t.namespace, "web")))
        .collect()
}

fn lease_holder(install: &Installation, name: &str) -> Option<String> {
    let output = install.cp.kubectl(&["get", "lease", name, "-n", SYSTEM, "-o", "json"]);
    let lease: Value = serde_json::from_slice(&output.stdout).ok()?;
    lease["spec"]["holderIdentity"].as_str().filter(|h| !h.is_empty()).map(str::to_owned)
}

async fn start_shard(
    install: &Installation,
    label: &str,
    shard: &str,
    identity: &str,
) -> Controller {
    let selector = format!("{label}=true");
    let extra = ["--shard", shard, "--namespace-selector", selector.as_str()];
    Controller::start_as(install.cp, &install.dir, "configsum-controller", identity, &extra).await
}

/// The Events of `namespace` about `web` that configsum's controller recorded, as
/// (reason, the `configsum.dev/shard` label, reportingInstance).
fn events_of(install: &Installation, namespace: &str) -> Vec<(String, String, String)> {
    let events = install.cp.get_json(&[
        "events",
        "-n",
        namespace,
        "--field-selector",
        "involvedObject.name=web",
    ]);
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let shard = &e["metadata"]["labels"]["configsum.dev/shard"];
            (text(&e["reason"]), text(shard), text(&e["reportingInstance"]))
        })
        .collect()
}

#[test]
fn three_shards_split_the_namespaces_and_a_killed_leader_hands_over_to_its_standby() {
    run(async {
        let _one = one_controller_at_a_time().await;
        let install = installation().await;
        let label = "configsum-test/shards-three";
        let mut tenants = tenants(install, "three", label, 3, 2).await;
        let s0 = start_shard(install, label, "0/3", "s0").await;
        let s1a = start_shard(install, label, "1/3", "s1a").await;
        let s1b = start_shard(install, label, "1/3", "s1b").await;
        let s2 = start_shard(install, label, "2/3", "s2").await;
        wait_until("each shard leads", Duration::from_secs(20), || {
            let holder = |i: u32| lease_holder(install, &format!("configsum-controller-{i}-of-3"));
            holder(0).as_deref() == Some("s0")
                && holder(1).is_some_and(|h| h == "s1a" || h == "s1b")
                && holder(2).as_deref() == Some("s2")
        })
        .await;
        let s1_leader = lease_holder(install, "configsum-controller-1-of-3");
        let (s1_leader, s1_standby) =
            if s1_leader.as_deref() == Some("s1a") { (s1a, s1b) } else { (s1b, s1a) };
        let before = generations(install, &tenants);

        // Every Secret changes: each Deployment is rolled once, by its own shard.
        for tenant in &mut tenants {
            change(install, tenant, "two");
        }
        all_current(install, &tenants.iter().collect::<Vec<_>>(), "every namespace rolled").await;
        for controller in [&s0, &s1_leader, &s2] {
            controller.idle().await;
        }
        for (shard, controller) in [(0, &s0), (1, &s1_leader), (2, &s2)] {
            assert_eq!(controller.patches().await, 2.0, "shard {shard}: {:?}", controller.logs());
            let metrics = controller.metrics().await;
            let series = format!("shard=\"{shard}/3\"");
            assert!(
                metrics
                    .lines()
                    .filter(|l| l.starts_with("configsum_"))
                    .all(|l| l.contains(&series)),
                "every series of shard {shard} carries {series}:\n{metrics}"
            );
        }
        assert_eq!(s1_standby.patches().await, 0.0, "a standby patches nothing");
        for tenant in &tenants {
            let events = events_of(install, &tenant.namespace);
            let rolled: Vec<_> =
                events.iter().filter(|(reason, _, _)| reason == "ConfigurationChanged").collect();
            assert_eq!(rolled.len(), 1, "{}: {events:?}", tenant.namespace);
            assert_eq!(rolled[0].1, format!("{}-of-3", tenant.owner), "{}", tenant.namespace);
            assert!(["s0", "s1a", "s1b", "s2"].contains(&rolled[0].2.as_str()), "{rolled:?}");
        }

        // Shard 1's leader is killed as its Secrets change: the standby takes the Lease over
        // once it expires, catches up, and each of shard 1's Deployments rolls exactly once.
        for tenant in tenants.iter_mut().filter(|t| t.owner == 1) {
            change(install, tenant, "three");
        }
        s1_leader.kill().await;
        let shard1: Vec<&Tenant> = tenants.iter().filter(|t| t.owner == 1).collect();
        all_current(install, &shard1, "shard 1's namespaces rolled after the kill").await;
        s1_standby.idle().await;
        let after = generations(install, &tenants);
        for tenant in &tenants {
            let rolls = if tenant.owner == 1 { 2 } else { 1 };
            assert_eq!(
                after[&tenant.namespace] - before[&tenant.namespace],
                rolls,
                "{}: one roll per change, never two: {:?}",
                tenant.namespace,
                s1_standby.logs()
            );
        }
        for controller in [s0, s1_standby, s2] {
            controller.stop().await;
        }
    });
}

#[test]
fn changing_the_count_from_two_to_three_hands_every_namespace_over_once() {
    run(async {
        let _one = one_controller_at_a_time().await;
        let install = installation().await;
        let label = "configsum-test/shards-resized";
        // Two namespaces per shard of the new count; the old count owns them as it may.
        let mut tenants = tenants(install, "resized", label, 3, 2).await;
        let old0 = start_shard(install, label, "0/2", "old0").await;
        let old1 = start_shard(install, label, "1/2", "old1").await;
        wait_until("the old count leads", Duration::from_secs(20), || {
            lease_holder(install, "configsum-controller-0-of-2").is_some()
                && lease_holder(install, "configsum-controller-1-of-2").is_some()
        })
        .await;
        let start = generations(install, &tenants);

        // The new count starts beside the old: ready, but waiting, its Leases untaken.
        let new: Vec<Controller> = start_new_count(install, label).await;
        for controller in &new {
            controller
                .logged(|line| line.contains("another count of shards still holds its Lease"))
                .await;
        }
        change(install, &mut tenants[0], "two");
        all_current(install, &[&tenants[0]], "rolled by the old count").await;
        for controller in &new {
            assert_eq!(controller.patches().await, 0.0, "{:?}", controller.logs());
        }
        for i in 0..3 {
            assert_eq!(lease_holder(install, &format!("configsum-controller-{i}-of-3")), None);
        }

        // One old shard stops; the other still works, so the new count still waits, and the
        // stopped shard's namespaces have no shard for now.
        let orphan = tenants.iter().position(|t| shard_of(&t.namespace, 2) == 0).expect("one");
        old0.stop().await;
        change(install, &mut tenants[orphan], "three");
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(!is_current(install, &tenants[orphan]), "no shard owns it for now");
        for i in 0..3 {
            assert_eq!(lease_holder(install, &format!("configsum-controller-{i}-of-3")), None);
        }

        // The last old shard stops: the new count begins, and the change made in between rolls.
        old1.stop().await;
        all_current(install, &[&tenants[orphan]], "the change made in between rolled").await;
        for tenant in &mut tenants {
            change(install, tenant, "four");
        }
        all_current(install, &tenants.iter().collect::<Vec<_>>(), "every namespace rolled").await;
        for controller in &new {
            controller.idle().await;
        }
        let end = generations(install, &tenants);
        for (n, tenant) in tenants.iter().enumerate() {
            let changes = 1 + i64::from(n == 0) + i64::from(n == orphan);
            assert_eq!(
                end[&tenant.namespace] - start[&tenant.namespace],
                changes,
                "{}",
                tenant.namespace
            );
        }
        for (i, controller) in new.iter().enumerate() {
            let owned = tenants.iter().filter(|t| t.owner == i as u32).count();
            let caught_up = usize::from(tenants[orphan].owner == i as u32);
            let patches = controller.patches().await;
            assert_eq!(patches, (owned + caught_up) as f64, "shard {i}/3: {:?}", controller.logs());
        }
        for controller in new {
            controller.stop().await;
        }
    });
}

/// The three shards of the new count, started one after another.
async fn start_new_count(install: &Installation, label: &str) -> Vec<Controller> {
    let mut started = Vec::new();
    for i in 0..3 {
        started.push(start_shard(install, label, &format!("{i}/3"), &format!("new{i}")).await);
    }
    started
}
