//! `configsum explain` on a cluster whose pods run: a rollout reads `progressing` while its new
//! pods are not ready yet, and `complete` once they are.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::cluster::*;

#[test]
fn explain_reads_a_rollout_as_progressing_during_it_and_complete_after() {
    let _shared = sharing();
    let cp = cluster();
    let ns = "explain-rollout";
    // Pods turn ready 4 s after they start: a rollout long enough to be seen going.
    let mut slow = app(ns, "slow", 1);
    slow["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["initialDelaySeconds"] =
        json!(4);
    namespace_with(
        cp,
        ns,
        &[
            config_map(ns, "slow-config", &[("value", "v1")]),
            secret(ns, "slow-secret", &[("password", "p1")]),
            slow.to_string(),
        ],
    );
    served_by_every_pod(cp, ns, "slow");
    let answer = explain(cp, &["deployment/slow", "-n", ns]);
    assert_eq!(
        (&answer["verdict"], &answer["rollout"]["state"]),
        (&json!("current"), &json!("complete")),
        "{answer}"
    );

    cp.apply(&secret(ns, "slow-secret", &[("password", "p2")]));
    let deadline = Instant::now() + Duration::from_secs(60);
    let during = loop {
        let answer = explain(cp, &["deployment/slow", "-n", ns]);
        if answer["rollout"]["state"] == "progressing" {
            break answer;
        }
        assert!(Instant::now() < deadline, "never seen progressing: {answer}");
        std::thread::sleep(Duration::from_millis(200));
    };
    // The template records the new Secret (the controller patched it); its new pod runs but is
    // not ready yet.
    assert_eq!(during["verdict"], "current", "{during}");
    assert!(
        during["rollout"]["message"].as_str().is_some_and(|m| m.starts_with("rolling out: ")),
        "{during}"
    );

    served_by_every_pod(cp, ns, "slow");
    let after = explain(cp, &["deployment/slow", "-n", ns]);
    assert_eq!(after["rollout"]["state"], "complete", "{after}");
    assert_eq!(
        (&after["rollout"]["updatedReplicas"], &after["rollout"]["readyReplicas"]),
        (&json!(1), &json!(1)),
        "{after}"
    );
}
