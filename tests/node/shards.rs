//! The chart's `controller.shards` on the real node: `helm upgrade --set controller.shards=2`
//! replaces the controller's Deployment with one per shard, whose pods run `--shard I/2` and
//! lead with their shard's Lease once the unsharded pods have stopped; a Secret change in a
//! namespace of each shard restarts that namespace's pods with the new value. `helm
//! rollback` then restores the install the other tests expect.

use std::time::Duration;

use configsum::controller::model::shard::shard_of;
use serde_json::Value;

use crate::cluster::*;

/// `helm <args> -n configsum-system --wait`, which must succeed.
fn helm_ok(cp: &ControlPlane, args: &[&str]) {
    let args = [args, &["-n", SYSTEM, "--wait", "--timeout", "3m"]].concat();
    let output = helm(cp, &args);
    assert!(output.status.success(), "helm {args:?}: {}", String::from_utf8_lossy(&output.stderr));
}

/// The controller pods (any shard), not terminating: (name, their `--shard` argument).
fn controller_pods(cp: &ControlPlane) -> Vec<(String, Option<String>)> {
    let list =
        cp.get_json(&["pods", "-n", SYSTEM, "-l", "app.kubernetes.io/name=configsum-controller"]);
    let items = list["items"].as_array().cloned().unwrap_or_default();
    items
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| {
            let args = p["spec"]["containers"][0]["args"].as_array().cloned().unwrap_or_default();
            let shard = args
                .iter()
                .filter_map(Value::as_str)
                .find_map(|a| a.strip_prefix("--shard=").map(str::to_owned));
            (p["metadata"]["name"].as_str().unwrap_or_default().to_owned(), shard)
        })
        .collect()
}

fn lease_holder(cp: &ControlPlane, name: &str) -> Option<String> {
    let output = cp.kubectl(&["get", "lease", name, "-n", SYSTEM, "-o", "json"]);
    let lease: Value = serde_json::from_slice(&output.stdout).ok()?;
    lease["spec"]["holderIdentity"].as_str().filter(|h| !h.is_empty()).map(str::to_owned)
}

#[test]
fn two_shards_installed_by_the_chart_each_roll_their_own_namespaces() {
    let _alone = disrupting();
    let cp = cluster();
    // One namespace per shard of 2, each with config-echo reading a ConfigMap and a Secret.
    let mut namespaces = [None, None];
    for n in 0.. {
        let namespace = format!("sharded-{n}");
        let slot = &mut namespaces[shard_of(&namespace, 2) as usize];
        if slot.is_none() {
            *slot = Some(namespace);
        }
        if namespaces.iter().all(Option::is_some) {
            break;
        }
    }
    let namespaces: Vec<String> = namespaces.into_iter().flatten().collect();
    for ns in &namespaces {
        api_serving_v1(cp, ns);
    }

    helm_ok(
        cp,
        &[
            "upgrade",
            "configsum",
            "charts/configsum",
            "--reuse-values",
            "--set",
            "controller.shards=2",
        ],
    );
    for i in 0..2 {
        rolled_out(cp, SYSTEM, &format!("configsum-controller-{i}"));
    }
    wait_until("only the shards' pods run, two of each", Duration::from_secs(90), || {
        let pods = controller_pods(cp);
        let of = |shard: &str| pods.iter().filter(|(_, s)| s.as_deref() == Some(shard)).count();
        pods.len() == 4 && of("0/2") == 2 && of("1/2") == 2
    });
    wait_until("each shard leads with its own Lease", Duration::from_secs(60), || {
        let pods = controller_pods(cp);
        (0..2).all(|i| {
            let holder = lease_holder(cp, &format!("configsum-controller-{i}-of-2"));
            let shard = format!("{i}/2");
            pods.iter().any(|(name, s)| {
                Some(name) == holder.as_ref() && s.as_deref() == Some(shard.as_str())
            })
        })
    });

    let key = "secret.configsum.dev/api-secret";
    let before: Vec<Value> =
        namespaces.iter().map(|ns| template_annotations(cp, ns, "api")[key].clone()).collect();
    for ns in &namespaces {
        cp.apply(&secret(ns, "api-secret", &[("password", "p2")]));
    }
    for (ns, before) in namespaces.iter().zip(&before) {
        wait_until(&format!("{ns}: its shard rolled api"), Duration::from_secs(60), || {
            let now = &template_annotations(cp, ns, "api")[key];
            now.is_string() && now != before
        });
        for served in served_by_every_pod(cp, ns, "api") {
            assert_eq!(served["fileValue"], "p2", "{ns}: {served}");
        }
    }
    report("node: controller.shards=2 by helm upgrade; each shard rolled its namespace");

    helm_ok(cp, &["rollback", "configsum", "1"]);
    rolled_out(cp, SYSTEM, "configsum-controller");
    // Left as the other tests expect it: unsharded pods only, one of them leading.
    wait_until("the unsharded controller leads again", Duration::from_secs(90), || {
        let pods = controller_pods(cp);
        let holder = lease_holder(cp, "configsum-controller");
        pods.iter().all(|(_, shard)| shard.is_none())
            && pods.iter().any(|(name, _)| Some(name) == holder.as_ref())
    });
}
