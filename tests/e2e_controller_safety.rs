//! Keeping the controller safe, the real binary against the fake API server: `--dry-run`
//! sends no PATCH at all and records what would roll; the flap guard stops a Secret that a
//! writer flips every second from rolling its workload more than `--flap-limit` times, says
//! so (again once a period), and rolls it once more when the writer has been quiet for `--flap-period`; the
//! workloads gauge counts watched workloads by verdict; `configsum explain` reads the hold.

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

use controller::{Cluster, Controller, NS};
use serde_json::{Value, json};

fn events_with_reason(cluster: &Cluster, reason: &str) -> Vec<Value> {
    let events = cluster.api.list(&format!("/api/v1/namespaces/{NS}/events"));
    events.into_iter().filter(|e| e["reason"] == reason).collect()
}

fn patches(cluster: &Cluster) -> usize {
    cluster.api.log().iter().filter(|l| l.method == "PATCH").count()
}

#[tokio::test]
async fn a_dry_run_records_what_would_roll_and_patches_nothing() {
    let mut cluster = Cluster::new("ctl-dry-run").await;
    cluster.deployment(NS, "web", &["app"], &["db"], true);
    // Three more readers of db: with waves (the default), every wave is reported at once.
    for name in ["web-2", "web-3", "web-4"] {
        cluster.deployment(NS, name, &[], &["db"], true);
    }
    cluster.deployment(NS, "fresh", &["app"], &[], false);
    let mut opted_out = cluster.deployment(NS, "opted-out", &["app"], &[], true);
    opted_out["metadata"]["annotations"] = json!({"configsum.dev/enabled": "false"});
    cluster.api.put(&controller::workload_path("Deployment", NS, "opted-out"), opted_out);
    let controller = Controller::start(&cluster.api, &cluster.dir, "a", &["--dry-run"]).await;
    let gauge = [
        r#"configsum_controller_workloads{verdict="current"} 4"#,
        r#"configsum_controller_workloads{verdict="first-observation"} 1"#,
        r#"configsum_controller_workloads{verdict="opted-out"} 1"#,
    ];
    let metrics = controller.metrics_with(&gauge, Duration::from_secs(3)).await;
    for line in gauge {
        assert!(metrics.contains(line), "{line}\n{metrics}");
    }

    cluster.secret("db", &[("password", "two")]);
    // No status ever completes a rollout here: a dry run waits for none.
    cluster
        .wait_for("four WouldRoll Events", Duration::from_secs(5), |c| {
            events_with_reason(c, "WouldRoll").len() >= 4
        })
        .await;
    let events = events_with_reason(&cluster, "WouldRoll");
    let mut said: Vec<(String, String)> = events
        .iter()
        .map(|e| {
            let name = e["involvedObject"]["name"].as_str().unwrap_or_default().to_owned();
            (name, e["message"].as_str().unwrap_or_default().to_owned())
        })
        .collect();
    said.sort();
    let waves: Vec<(&str, &str)> = said
        .iter()
        .map(|(name, message)| {
            let wave = message
                .strip_prefix("dry run, nothing patched, in wave ")
                .and_then(|rest| rest.split_once(" of secret/db's change "))
                .map_or("?", |(wave, _)| wave);
            (name.as_str(), wave)
        })
        .collect();
    assert_eq!(waves, [("web", "1"), ("web-2", "2"), ("web-3", "2"), ("web-4", "3")], "{said:?}");
    assert!(
        said.iter()
            .all(|(_, m)| m.ends_with(": configsum rolled the pod template: changed secret/db")),
        "{said:?}"
    );
    let dry = r#"configsum_controller_patches_total{outcome="dry_run"} 4"#;
    let metrics = controller.metrics_with(&[dry], Duration::from_secs(2)).await;
    assert!(metrics.contains(dry), "{metrics}");
    assert!(!metrics.contains(r#"outcome="patched""#), "{metrics}");
    let logs = controller.logged(|l| l.contains("dry run: would roll")).await;
    assert!(logs.contains("dry run: would roll"), "{logs}");
    assert!(!logs.contains("two"), "no Secret content in the log");
    assert_eq!(patches(&cluster), 0, "no PATCH at all");
    assert_eq!(controller.stop().await, Some(0));
}

#[tokio::test]
async fn a_secret_flipped_every_second_is_held_and_rolls_once_when_quiet() {
    let mut cluster = Cluster::new("ctl-flap").await;
    cluster.deployment(NS, "web", &["app"], &["db"], true);
    // The harness's window is 500 ms: each flip rolls half a second later until held.
    let extra = ["--flap-limit", "3", "--flap-period", "4s"];
    let controller = Controller::start(&cluster.api, &cluster.dir, "a", &extra).await;

    // Two writers fighting over one Secret: a new value every second, for eight seconds.
    for i in 0..8 {
        cluster.secret("db", &[("password", if i % 2 == 0 { "left" } else { "right" })]);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(cluster.patches(NS, "web"), 3, "held after --flap-limit rolls");
    let held = events_with_reason(&cluster, "FlapGuard");
    // Said when held, and again once a period while the writer goes on (4 s of 8 here:
    // once or twice, as the clock falls).
    assert!((1..=2).contains(&held.len()), "said once a period: {held:?}");
    assert_eq!(held[0]["type"], "Warning");
    let message = held[0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("secret/db") && message.contains("3 rolls within 4s"), "{message}");
    let gauges = [
        "configsum_controller_held_workloads 1",
        r#"configsum_controller_workloads{verdict="held"} 1"#,
    ];
    let metrics = controller.metrics_with(&gauges, Duration::from_secs(2)).await;
    for line in gauges {
        assert!(metrics.contains(line), "{line}\n{metrics}");
    }
    // explain reads the hold from the controller's Event.
    let explained = |run: controller::Explained| {
        assert_eq!(run.code, Some(0), "{}", run.stderr);
        run.json()["workloads"][0]["verdict"].as_str().unwrap_or_default().to_owned()
    };
    let explain = ["secret/db", "-n", NS, "--output", "json"];
    assert_eq!(explained(cluster.explain("oncall", &explain).await), "held");

    // Quiet from now on: after a whole period, one roll to the value of the moment.
    cluster
        .wait_for("the roll after the quiet period", Duration::from_secs(8), |c| {
            c.patches(NS, "web") == 4
        })
        .await;
    assert_eq!(cluster.annotations(NS, "web"), cluster.webhook_digests(NS, "web"));
    // A second roll would be queued or in flight until then.
    controller.idle().await;
    assert_eq!(cluster.patches(NS, "web"), 4, "once");
    let released = "configsum_controller_held_workloads 0";
    let metrics = controller.metrics_with(&[released], Duration::from_secs(2)).await;
    assert!(metrics.contains(released), "{metrics}");
    assert_eq!(events_with_reason(&cluster, "FlapGuardReleased").len(), 1);
    cluster.api.put_secret(
        "configsum-system",
        "configsum-digest-key",
        &[("keys", controller::KEY)],
    );
    assert_eq!(explained(cluster.explain("oncall", &explain).await), "current", "released");
    assert_eq!(controller.stop().await, Some(0));
}
