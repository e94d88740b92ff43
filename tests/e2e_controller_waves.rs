//! `configsum controller --fan-out waves`, the real binary, against the fake API server:
//! the workloads one change of a Secret makes due roll in health-gated waves (docs/
//! behaviour.md, "Rolling safely" → "Waves"). The test plays the Deployment controller: it
//! reports each rollout by writing the workload's `status` (the fake has no status
//! subresource), judged by the controller against the `metadata.generation` the fake moves on
//! with each patch, as the real API server does.

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
use fake_apiserver::FakeApiServer;
use serde_json::{Value, json};

const WAVES: &str = "configsum.dev/waves";
const CANARY: &str = "configsum.dev/canary";
/// Five Deployments sharing Secret `db`: waves of 1, 2 and 2, in this order.
const FIVE: [&str; 5] = ["w1", "w2", "w3", "w4", "w5"];
/// How long a test waits for what the controller should do next (a patch, an Event): the
/// 500 ms window, with room for a loaded machine.
const REACTION: Duration = Duration::from_secs(10);
const WAVES_ARGS: &[&str] = &["--fan-out", "waves"];

fn path(name: &str) -> String {
    FakeApiServer::deployment_path(NS, name)
}

/// A cluster with `names`, each reading Secret `db`, admitted with its current digests and
/// running them: its rollout complete at its first generation, so that only a status observed
/// at the generation a patch makes can tell the patch's rollout.
async fn cluster_of(label: &str, names: &[&str]) -> Cluster {
    let cluster = Cluster::new(label).await;
    for name in names {
        cluster.deployment(NS, name, &[], &["db"], true);
        complete(&cluster, name);
    }
    cluster
}

/// A controller leading, caught up with the cluster: it patched nothing at start.
async fn controller(
    cluster: &Cluster,
    identity: &str,
    extra: &[&str],
    names: &[&str],
) -> Controller {
    let controller = Controller::start(&cluster.api, &cluster.dir, identity, extra).await;
    controller.caught_up(&cluster.api, &[FakeApiServer::secret_path(NS, "db")]).await;
    for name in names {
        assert_eq!(cluster.patches(NS, name), 0, "{name}: current at start");
    }
    controller
}

/// PATCH requests per workload, in `names`' order, since the fake started.
fn patches(cluster: &Cluster, names: &[&str]) -> Vec<usize> {
    names.iter().map(|name| cluster.patches(NS, name)).collect()
}

/// Waits until each of `names` was patched `times` in all.
async fn patched(cluster: &Cluster, names: &[&str], times: usize) {
    let what = format!("{names:?} patched {times} time(s)");
    cluster
        .wait_for(&what, REACTION, |c| names.iter().all(|name| c.patches(NS, name) >= times))
        .await;
}

/// The workload's `configsum.dev/waves` entry for Secret `db`: (change id, wave).
fn wave_entry(cluster: &Cluster, name: &str) -> (String, u64) {
    let object = cluster.api.object(&path(name)).expect("workload");
    let text = object["metadata"]["annotations"][WAVES]
        .as_str()
        .unwrap_or_else(|| panic!("{name}: no {WAVES} on its metadata: {}", object["metadata"]));
    let record: Value = serde_json::from_str(text).expect("the record is JSON");
    let entry = &record["secret/db"];
    let change = entry["change"].as_str().expect("a change id").to_owned();
    assert!(change.len() == 12 && change.bytes().all(|b| b.is_ascii_hexdigit()), "{name}: {text}");
    let at = entry["at"].as_str().expect("a time");
    assert!(at.parse::<jiff::Timestamp>().is_ok(), "{name}: not RFC 3339: {text}");
    (change, entry["wave"].as_u64().expect("a wave"))
}

/// Reports the workload's rollout with `status`, observed at its current generation (as its
/// workload controller would, through the status subresource the fake does not have).
fn report(cluster: &Cluster, name: &str, mut status: Value) {
    let mut object = cluster.api.object(&path(name)).expect("workload");
    status["observedGeneration"] = object["metadata"]["generation"].clone();
    object["status"] = status;
    cluster.api.put(&path(name), object);
}

/// Its rollout complete: one replica (spec.replicas is unset), updated and available.
fn complete(cluster: &Cluster, name: &str) {
    report(cluster, name, json!({"replicas": 1, "updatedReplicas": 1, "availableReplicas": 1}));
}

/// Its rollout failed: the Deployment controller gave up on its progress deadline.
fn failed(cluster: &Cluster, name: &str) {
    let status = json!({"replicas": 2, "updatedReplicas": 1, "availableReplicas": 1,
        "conditions": [{"type": "Progressing", "status": "False",
            "reason": "ProgressDeadlineExceeded",
            "message": format!("ReplicaSet \"{name}-7c9b\" has timed out progressing.")}]});
    report(cluster, name, status);
}

/// Waits for the `RolloutHalted` Event and returns it.
async fn halted_event(cluster: &Cluster, name: &str) -> Value {
    let events = format!("/api/v1/namespaces/{NS}/events");
    let halted = |c: &Cluster| {
        c.api
            .list(&events)
            .into_iter()
            .find(|e| e["reason"] == "RolloutHalted" && e["involvedObject"]["name"] == json!(name))
    };
    cluster.wait_for("the RolloutHalted Event", REACTION, |c| halted(c).is_some()).await;
    halted(cluster).expect("the Event")
}

/// Wave 1, then 2, then 3 of five Deployments without canaries, each wave once the one before
/// completed its rollout; each workload patched once, its roll recorded on its metadata.
#[tokio::test]
async fn a_change_rolls_in_waves_each_once_the_one_before_completed() {
    let mut cluster = cluster_of("waves-five", &FIVE).await;
    let controller = controller(&cluster, "a", WAVES_ARGS, &FIVE).await;
    cluster.secret("db", &[("password", "two")]);

    // Wave 1: the first by name, alone.
    patched(&cluster, &["w1"], 1).await;
    let (change, wave) = wave_entry(&cluster, "w1");
    assert_eq!(wave, 1);
    assert_eq!(cluster.annotations(NS, "w1"), cluster.webhook_digests(NS, "w1"));
    let w1 = cluster.api.object(&path("w1")).expect("w1");
    assert_eq!(w1["metadata"]["generation"], 2, "the patch changed its template");
    controller.idle().await;
    assert_eq!(patches(&cluster, &FIVE), [1, 0, 0, 0, 0], "the rest wait for w1's rollout");

    // Wave 2: the next two, once w1 completed.
    complete(&cluster, "w1");
    patched(&cluster, &["w2", "w3"], 1).await;
    controller.idle().await;
    assert_eq!(patches(&cluster, &FIVE), [1, 1, 1, 0, 0], "wave 3 waits for wave 2");
    for name in ["w2", "w3"] {
        assert_eq!(wave_entry(&cluster, name), (change.clone(), 2), "{name}");
    }

    // Wave 3: the last two.
    complete(&cluster, "w2");
    complete(&cluster, "w3");
    patched(&cluster, &["w4", "w5"], 1).await;
    for name in ["w4", "w5"] {
        assert_eq!(wave_entry(&cluster, name), (change.clone(), 3), "{name}");
        assert_eq!(cluster.annotations(NS, name), cluster.webhook_digests(NS, name), "{name}");
    }
    complete(&cluster, "w4");
    complete(&cluster, "w5");
    controller.idle().await;
    assert_eq!(patches(&cluster, &FIVE), [1, 1, 1, 1, 1], "each workload patched once");
    assert_eq!(controller.stop().await, Some(0));
}

/// A workload annotated `configsum.dev/canary: "true"` is wave 1, whatever its name.
#[tokio::test]
async fn a_canary_rolls_first_whatever_its_name() {
    let mut cluster = cluster_of("waves-canary", &FIVE).await;
    let mut w5 = cluster.api.object(&path("w5")).expect("w5");
    w5["metadata"]["annotations"][CANARY] = json!("true");
    cluster.api.put(&path("w5"), w5);
    let controller = controller(&cluster, "a", WAVES_ARGS, &FIVE).await;
    cluster.secret("db", &[("password", "two")]);

    patched(&cluster, &["w5"], 1).await;
    assert_eq!(wave_entry(&cluster, "w5").1, 1);
    controller.idle().await;
    assert_eq!(patches(&cluster, &FIVE), [0, 0, 0, 0, 1], "the canary alone");

    // Then the others by name: two in wave 2.
    complete(&cluster, "w5");
    patched(&cluster, &["w1", "w2"], 1).await;
    controller.idle().await;
    assert_eq!(patches(&cluster, &FIVE), [1, 1, 0, 0, 1]);
    assert_eq!(wave_entry(&cluster, "w1").1, 2);
    assert_eq!(controller.stop().await, Some(0));
}

/// A failed rollout halts the change with a Warning Event on the failing workload; the change
/// goes on once that rollout completes after all.
#[tokio::test]
async fn a_failed_rollout_halts_the_change_until_it_completes() {
    let mut cluster = cluster_of("waves-halt", &FIVE).await;
    let controller = controller(&cluster, "a", WAVES_ARGS, &FIVE).await;
    cluster.secret("db", &[("password", "two")]);
    patched(&cluster, &["w1"], 1).await;
    controller.idle().await;

    failed(&cluster, "w1");
    let event = halted_event(&cluster, "w1").await;
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["involvedObject"]["kind"], "Deployment");
    let message = event["message"].as_str().unwrap_or_default();
    let (change, _) = wave_entry(&cluster, "w1");
    assert!(message.contains("secret/db") && message.contains(&change), "{message}");
    assert!(message.contains("ProgressDeadlineExceeded"), "{message}");
    assert!(!message.contains("two"), "the Event never quotes the Secret");
    controller.idle().await;
    assert_eq!(patches(&cluster, &FIVE), [1, 0, 0, 0, 0], "halted: nothing more rolls");

    complete(&cluster, "w1");
    patched(&cluster, &["w2", "w3"], 1).await;
    controller.idle().await;
    assert_eq!(patches(&cluster, &FIVE), [1, 1, 1, 0, 0], "going on in wave 2");
    assert_eq!(controller.stop().await, Some(0));
}

/// An operator resumes a halted change with `configsum.dev/resume` on the Secret, by the id
/// the `RolloutHalted` Events (on the failing workload and on the Secret) name: the next wave
/// rolls at its size, and the failing workload is not rolled again.
#[tokio::test]
async fn an_operator_resumes_a_halted_change_by_its_id() {
    let mut cluster = cluster_of("waves-resume", &FIVE).await;
    let controller = controller(&cluster, "a", WAVES_ARGS, &FIVE).await;
    cluster.secret("db", &[("password", "two")]);
    patched(&cluster, &["w1"], 1).await;
    failed(&cluster, "w1");
    halted_event(&cluster, "w1").await;
    let secret_path = FakeApiServer::secret_path(NS, "db");
    let on_secret = halted_event(&cluster, "db").await;
    let secret = cluster.api.object(&secret_path).expect("the Secret");
    assert_eq!(on_secret["involvedObject"]["kind"], "Secret");
    assert_eq!(
        on_secret["involvedObject"]["uid"], secret["metadata"]["uid"],
        "kubectl describe finds it"
    );
    let message = on_secret["message"].as_str().unwrap_or_default();
    assert!(message.contains(&format!("halted at Deployment {NS}/w1")), "{message}");
    // The id: the first 12 hex digits of w1's new digest for the Secret.
    let digest =
        cluster.annotations(NS, "w1")["secret.configsum.dev/db"].as_str().map(str::to_owned);
    let id: String =
        digest.unwrap_or_default().rsplit(':').next().unwrap_or_default()[..12].to_owned();
    assert!(message.contains(&format!("change {id} halted")), "{id}: {message}");

    let resume = |cluster: &Cluster, id: &str| {
        let mut secret = cluster.api.object(&secret_path).expect("the Secret");
        secret["metadata"]["annotations"] = json!({"configsum.dev/resume": id});
        cluster.api.put(&secret_path, secret);
    };
    resume(&cluster, "000000000000");
    controller.idle().await;
    assert_eq!(patches(&cluster, &FIVE), [1, 0, 0, 0, 0], "another id resumes nothing");
    resume(&cluster, &id);
    patched(&cluster, &["w2", "w3"], 1).await;
    controller.idle().await;
    assert_eq!(patches(&cluster, &FIVE), [1, 1, 1, 0, 0], "wave 2; w1 not again");
    assert_eq!(controller.stop().await, Some(0));
}

/// A newer change of the Secret replaces a halted one and starts at wave 1 again.
#[tokio::test]
async fn a_newer_change_replaces_a_halted_one_from_wave_one() {
    let mut cluster = cluster_of("waves-newer", &FIVE).await;
    let controller = controller(&cluster, "a", WAVES_ARGS, &FIVE).await;
    cluster.secret("db", &[("password", "two")]);
    patched(&cluster, &["w1"], 1).await;
    let (halted, _) = wave_entry(&cluster, "w1");
    failed(&cluster, "w1");
    halted_event(&cluster, "w1").await;

    let rolled = cluster.annotations(NS, "w1");
    cluster.secret("db", &[("password", "three")]);
    patched(&cluster, &["w1"], 2).await;
    let (newer, wave) = wave_entry(&cluster, "w1");
    assert_eq!(wave, 1, "wave 1 again");
    assert_ne!(newer, halted, "another change");
    assert_ne!(cluster.annotations(NS, "w1"), rolled);
    assert_eq!(
        cluster.annotations(NS, "w1"),
        cluster.webhook_digests(NS, "w1"),
        "the newer digest"
    );
    controller.idle().await;
    assert_eq!(patches(&cluster, &FIVE), [2, 0, 0, 0, 0], "the rest wait for the new wave 1");
    assert_eq!(controller.stop().await, Some(0));
}

/// A new leader reads the waves the rolled workloads record and goes on where the old one
/// stood: wave 3, never wave 1 or 2 again.
#[tokio::test]
async fn a_new_leader_goes_on_with_the_wave_after_the_last_one_rolled() {
    let mut cluster = cluster_of("waves-leader", &FIVE).await;
    let lease = ["--fan-out", "waves", "--lease-duration", "2s"];
    let a = controller(&cluster, "a", &lease, &FIVE).await;
    cluster.secret("db", &[("password", "two")]);
    patched(&cluster, &["w1"], 1).await;
    complete(&cluster, "w1");
    patched(&cluster, &["w2", "w3"], 1).await;
    a.idle().await;
    assert_eq!(a.stop().await, Some(0));
    assert_eq!(patches(&cluster, &FIVE), [1, 1, 1, 0, 0]);

    // Wave 2 completes while no replica leads.
    complete(&cluster, "w2");
    complete(&cluster, "w3");
    let b = Controller::start(&cluster.api, &cluster.dir, "b", &lease).await;
    patched(&cluster, &["w4", "w5"], 1).await;
    b.caught_up(&cluster.api, &[FakeApiServer::secret_path(NS, "db")]).await;
    let (change, _) = wave_entry(&cluster, "w1");
    for name in ["w4", "w5"] {
        assert_eq!(wave_entry(&cluster, name), (change.clone(), 3), "{name}");
    }
    let by_b = |name: &str| {
        cluster.patch_log().iter().filter(|(_, token, p)| token == "b" && *p == path(name)).count()
    };
    assert_eq!(FIVE.map(by_b), [0, 0, 0, 1, 1], "b patched wave 3 only");
    assert_eq!(patches(&cluster, &FIVE), [1, 1, 1, 1, 1], "each workload patched once");
    assert_eq!(b.stop().await, Some(0));
}

/// `--fan-out all`, the default: the same five roll at once, with no wave to record.
#[tokio::test]
async fn fan_out_all_rolls_every_workload_at_once() {
    let mut cluster = cluster_of("waves-all", &FIVE).await;
    let controller = controller(&cluster, "a", &["--fan-out", "all"], &FIVE).await;
    cluster.secret("db", &[("password", "two")]);
    patched(&cluster, &FIVE, 1).await;
    controller.idle().await;
    assert_eq!(patches(&cluster, &FIVE), [1, 1, 1, 1, 1]);
    for name in FIVE {
        let object = cluster.api.object(&path(name)).expect("workload");
        assert_eq!(object["metadata"]["annotations"].get(WAVES), None, "{name}");
        assert_eq!(cluster.annotations(NS, name), cluster.webhook_digests(NS, name), "{name}");
    }
    assert_eq!(controller.stop().await, Some(0));
}

/// With waves on, a Secret that says `configsum.dev/fan-out: "all"` (a CA bundle that must
/// reach everyone now) rolls every workload at once; the annotation is read from the
/// metadata-only watch, as the API server sends it.
#[tokio::test]
async fn a_secret_that_says_fan_out_all_skips_waves() {
    let cluster = cluster_of("waves-all-annotated", &FIVE).await;
    let controller = controller(&cluster, "a", WAVES_ARGS, &FIVE).await;
    let secret_path = FakeApiServer::secret_path(NS, "db");
    let mut secret = cluster.api.object(&secret_path).expect("the Secret");
    secret["metadata"]["annotations"] = json!({"configsum.dev/fan-out": "all"});
    secret["data"] = json!({"password": "dHdv"});
    cluster.api.put(&secret_path, secret);
    patched(&cluster, &FIVE, 1).await;
    controller.idle().await;
    assert_eq!(patches(&cluster, &FIVE), [1, 1, 1, 1, 1], "no waves");
    assert_eq!(controller.stop().await, Some(0));
}

/// The events of the namespace with `reason`.
fn events_with_reason(cluster: &Cluster, reason: &str) -> Vec<Value> {
    let events = cluster.api.list(&format!("/api/v1/namespaces/{NS}/events"));
    events.into_iter().filter(|e| e["reason"] == reason).collect()
}

/// A rollout that does not complete within `--wave-timeout` halts the change, with a
/// `timeout` wave outcome; once it completes after all, the next wave goes.
#[tokio::test]
async fn a_rollout_past_the_wave_timeout_halts_the_change() {
    let mut cluster = cluster_of("waves-timeout", &FIVE).await;
    let controller = controller(&cluster, "a", &["--wave-timeout", "2s"], &FIVE).await;
    cluster.secret("db", &[("password", "two")]);
    patched(&cluster, &["w1"], 1).await;
    // w1's rollout never reports: no failure, just no completion.
    let event = halted_event(&cluster, "w1").await;
    let message = event["message"].as_str().unwrap_or_default();
    assert!(message.contains("did not complete within --wave-timeout"), "{message}");
    let outcome = r#"configsum_controller_waves_total{outcome="timeout"} 1"#;
    let metrics = controller.metrics_with(&[outcome], REACTION).await;
    assert!(metrics.contains(outcome), "{metrics}");
    assert!(metrics.contains("configsum_controller_halted_changes 1"), "{metrics}");
    controller.idle().await;
    assert_eq!(patches(&cluster, &FIVE), [1, 0, 0, 0, 0], "halted");

    complete(&cluster, "w1");
    patched(&cluster, &["w2", "w3"], 1).await;
    let metrics =
        controller.metrics_with(&["configsum_controller_halted_changes 0"], REACTION).await;
    assert!(metrics.contains("configsum_controller_halted_changes 0"), "{metrics}");
    assert_eq!(controller.stop().await, Some(0));
}

/// Maintenance windows and pauses, read by the binary off the workloads' metadata: a workload
/// outside its window waits (`RollWaiting`), one whose window does not parse never rolls
/// (`InvalidRollWindow`), a paused one waits until unpaused; the others roll. When each
/// window opens is the state harness's to test (src/controller/state/tests.rs), with a clock
/// it controls.
#[tokio::test]
async fn windows_and_pauses_hold_their_workloads_and_the_rest_roll() {
    let mut cluster = cluster_of("waves-windows", &FIVE).await;
    let hour = jiff::Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC).hour();
    let closed = format!("* {:02}:00-{:02}:00 UTC", (hour + 2) % 24, (hour + 3) % 24);
    let say = |cluster: &Cluster, name: &str, annotations: Value| {
        let mut object = cluster.api.object(&path(name)).expect("workload");
        object["metadata"]["annotations"] = annotations;
        cluster.api.put(&path(name), object);
        complete(cluster, name);
    };
    say(&cluster, "w1", json!({"configsum.dev/roll-window": closed}));
    say(&cluster, "w2", json!({"configsum.dev/roll-window": "Mon-Fri 25:00-26:00 UTC"}));
    say(&cluster, "w3", json!({"configsum.dev/paused": "true"}));
    // At once: the held ones are no members of waves anyway; the rest need no rollouts here.
    let controller = controller(&cluster, "a", &["--fan-out", "all"], &FIVE).await;
    let gauge = [r#"configsum_controller_workloads{verdict="paused"} 1"#];
    let metrics = controller.metrics_with(&gauge, REACTION).await;
    assert!(metrics.contains(gauge[0]), "{metrics}");

    cluster.secret("db", &[("password", "two")]);
    patched(&cluster, &["w4", "w5"], 1).await;
    cluster
        .wait_for("RollWaiting and InvalidRollWindow", REACTION, |c| {
            !events_with_reason(c, "RollWaiting").is_empty()
                && !events_with_reason(c, "InvalidRollWindow").is_empty()
        })
        .await;
    let waiting = events_with_reason(&cluster, "RollWaiting");
    assert_eq!(waiting[0]["involvedObject"]["name"], "w1");
    let invalid = events_with_reason(&cluster, "InvalidRollWindow");
    assert_eq!(invalid[0]["involvedObject"]["name"], "w2");
    assert_eq!(invalid[0]["type"], "Warning");
    let gauge = [
        r#"configsum_controller_workloads{verdict="waiting-window"} 2"#,
        r#"configsum_controller_workloads{verdict="paused"} 1"#,
    ];
    let metrics = controller.metrics_with(&gauge, REACTION).await;
    for line in gauge {
        assert!(metrics.contains(line), "{line}\n{metrics}");
    }
    controller.idle().await;
    assert_eq!(patches(&cluster, &FIVE), [0, 0, 0, 1, 1], "only those free to roll");

    // Unpaused: one roll, to the state of the moment.
    say(&cluster, "w3", json!({}));
    patched(&cluster, &["w3"], 1).await;
    controller.idle().await;
    assert_eq!(patches(&cluster, &FIVE), [0, 0, 1, 1, 1]);
    assert_eq!(cluster.annotations(NS, "w3"), cluster.webhook_digests(NS, "w3"));
    assert_eq!(controller.stop().await, Some(0));
}
