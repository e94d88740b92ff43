//! Health-gated waves (SPEC 16, docs/behaviour.md "Rolling safely") on the real node: eight
//! config-echo Deployments share one Secret. A good value rolls them in waves of 1, 2, 4 and 1,
//! each wave patched only once the one before has completed its rollout (its new pod Ready); a
//! bad value (`exit-code` 3: config-echo exits, the pod never turns Ready) fails the canary's
//! rollout at its progress deadline, the other seven are never rolled and a `RolloutHalted`
//! Event on the canary says so; a fixed value rolls the canary back to health, then the rest.
//!
//! The test polls the Deployments (one LIST each time, so one consistent snapshot) and
//! remembers, for each, the first snapshot with its new template and the first with that
//! template rolled out. A wave's patch seen in a snapshot whose previous wave is not rolled out
//! is a patch before health: the LIST that shows the patch shows everything the controller
//! saw before making it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::cluster::*;
use crate::control_plane::ControlPlane;

const NS: &str = "waves";
const SECRET: &str = "shared";
/// The template annotation the webhook writes for the Secret.
const DIGEST: &str = "secret.configsum.dev/shared";
/// Where each roll records its wave (the workload's own metadata).
const WAVES: &str = "configsum.dev/waves";
const SOURCE: &str = "secret/shared";
const CANARY: &str = "web-5";
/// Wave 1 the canary, then the rest by name, twice as many each wave (--max-wave 50).
const EXPECTED: [&[&str]; 4] =
    [&["web-5"], &["web-1", "web-2"], &["web-3", "web-4", "web-6", "web-7"], &["web-8"]];
/// The chart's --window (the controller's coalescing window).
const WINDOW: Duration = Duration::from_secs(2);
/// The Deployments' progressDeadlineSeconds.
const PROGRESS_DEADLINE: u64 = 15;

fn names() -> Vec<&'static str> {
    let mut names: Vec<&str> = EXPECTED.concat();
    names.sort_unstable();
    names
}

/// config-echo serving the Secret's `password` file, exiting with its `exit-code` when that is
/// not 0; one replica that stays up until its successor is Ready.
fn deployment(name: &str) -> Value {
    let mut annotations = json!({});
    if name == CANARY {
        annotations["configsum.dev/canary"] = json!("true");
    }
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": {"replicas": 1, "progressDeadlineSeconds": PROGRESS_DEADLINE,
            "strategy": {"type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{"name": "app", "image": app_image(),
                        "imagePullPolicy": "Never",
                        "env": [
                            {"name": "EXIT_CODE", "valueFrom": {"secretKeyRef":
                                {"name": SECRET, "key": "exit-code", "optional": true}}},
                            {"name": "VALUE_FILE", "value": "/etc/secret/password"}],
                        "ports": [{"name": "http", "containerPort": 8080}],
                        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"},
                            "periodSeconds": 1},
                        "volumeMounts": [{"name": "secret", "mountPath": "/etc/secret",
                            "readOnly": true}]}],
                    "volumes": [{"name": "secret", "secret": {"secretName": SECRET}}]}}}})
}

fn shared_secret(password: &str, exit_code: &str) -> String {
    secret(NS, SECRET, &[("password", password), ("exit-code", exit_code)])
}

/// One Deployment as a snapshot shows it.
#[derive(Clone, Debug)]
struct Seen {
    /// The template's digest of the Secret.
    digest: String,
    /// Its `configsum.dev/waves` entry for the Secret: (change, wave, at).
    wave: Option<(String, u64, String)>,
    /// Its rollout is complete: the controller's judgement (docs/behaviour.md, "When a rollout
    /// is complete") made from the status.
    complete: bool,
    /// Progressing False with ProgressDeadlineExceeded.
    deadline_exceeded: bool,
}

fn snapshot(cp: &ControlPlane) -> BTreeMap<String, Seen> {
    let list = cp.get_json(&["deployments", "-n", NS]);
    let mut seen = BTreeMap::new();
    for d in list["items"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let name = d["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        let status = &d["status"];
        let replicas = d["spec"]["replicas"].as_i64().unwrap_or(1);
        let complete = status["observedGeneration"].as_i64()
            >= d["metadata"]["generation"].as_i64()
            && ["updatedReplicas", "availableReplicas", "readyReplicas", "replicas"]
                .iter()
                .all(|field| status[field].as_i64() == Some(replicas));
        let deadline_exceeded = status["conditions"].as_array().is_some_and(|conditions| {
            conditions.iter().any(|c| {
                c["type"] == "Progressing"
                    && c["status"] == "False"
                    && c["reason"] == "ProgressDeadlineExceeded"
            })
        });
        let wave = d["metadata"]["annotations"][WAVES]
            .as_str()
            .and_then(|text| serde_json::from_str::<Value>(text).ok())
            .and_then(|record| {
                let entry = &record[SOURCE];
                Some((
                    entry["change"].as_str()?.to_owned(),
                    entry["wave"].as_u64()?,
                    entry["at"].as_str()?.to_owned(),
                ))
            });
        let digest = d["spec"]["template"]["metadata"]["annotations"][DIGEST]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        seen.insert(name, Seen { digest, wave, complete, deadline_exceeded });
    }
    seen
}

/// The state for a failure message, one Deployment a line.
fn describe(seen: &BTreeMap<String, Seen>) -> String {
    seen.iter().map(|(name, s)| format!("  {name}: {s:?}")).collect::<Vec<_>>().join("\n")
}

/// What one change of the Secret did, in time since the write.
struct Rolled {
    /// Per Deployment: first seen with its new template, and that template rolled out.
    patched: BTreeMap<String, Duration>,
    ready: BTreeMap<String, Duration>,
    /// The change's id, the same on every Deployment it rolled.
    change: String,
}

/// Polls until every Deployment runs a template other than `before`'s and has rolled it out,
/// in the waves of EXPECTED. Fails as soon as a wave is patched before the previous one is
/// complete, or a Deployment is recorded in another wave than expected.
fn rolled_in_waves(
    cp: &ControlPlane,
    before: &BTreeMap<String, Seen>,
    written: Instant,
    timeout: Duration,
) -> Rolled {
    let wave_of = |name: &str| EXPECTED.iter().position(|w| w.contains(&name)).expect("a member");
    let mut patched = BTreeMap::new();
    let mut ready = BTreeMap::new();
    loop {
        let now = snapshot(cp);
        let at = written.elapsed();
        for (name, seen) in &now {
            let Some(old) = before.get(name) else { continue };
            if seen.digest == old.digest {
                continue;
            }
            if !patched.contains_key(name) {
                patched.insert(name.clone(), at);
                let wave = wave_of(name);
                // The previous wave, rolled out in the very snapshot that shows this patch.
                if wave > 0 {
                    let behind: Vec<&&str> = EXPECTED[wave - 1]
                        .iter()
                        .filter(|p| {
                            now.get(**p)
                                .is_none_or(|s| s.digest == before[**p].digest || !s.complete)
                        })
                        .collect();
                    assert!(
                        behind.is_empty(),
                        "{name} (wave {}) was patched before wave {} completed ({behind:?} not \
                         rolled out), {at:?} after the write:\n{}",
                        wave + 1,
                        wave,
                        describe(&now)
                    );
                }
            }
            if seen.complete && !ready.contains_key(name) {
                ready.insert(name.clone(), at);
            }
        }
        if ready.len() == before.len() {
            // Every roll recorded its wave, all of one change, new to this write.
            let mut changes = Vec::new();
            // The controller's own clock, to the second: (wave, at) in the order of the waves.
            let mut stamps = Vec::new();
            for (name, seen) in &now {
                let (change, wave, at) = seen.wave.clone().unwrap_or_else(|| {
                    panic!("{name}: no {WAVES} entry for {SOURCE}:\n{}", describe(&now))
                });
                assert_eq!(wave as usize, wave_of(name) + 1, "{name}'s wave:\n{}", describe(&now));
                assert!(at.len() == 20 && at.ends_with('Z'), "{name}: at {at:?}, RFC 3339 UTC");
                changes.push(change);
                stamps.push((wave, at));
            }
            stamps.sort_unstable();
            assert!(
                stamps.windows(2).all(|w| w[0].1 <= w[1].1),
                "each wave's patch time no earlier than the last: {stamps:?}"
            );
            changes.sort_unstable();
            changes.dedup();
            assert_eq!(changes.len(), 1, "one change: {changes:?}");
            let change = changes.remove(0);
            assert!(
                before.values().all(|s| s.wave.as_ref().is_none_or(|w| w.0 != change)),
                "the change {change} is new"
            );
            return Rolled { patched, ready, change };
        }
        assert!(
            at < timeout,
            "not rolled in waves within {timeout:?}: patched {patched:?}, ready {ready:?}\n{}",
            describe(&now)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Each wave's start (its first patch seen) and end (its last Deployment rolled out), printed
/// as seconds since the Secret's write; waves in order start after the previous one ended.
fn report_waves(what: &str, rolled: &Rolled) {
    let secs = |d: Duration| d.as_secs_f64();
    let mut previous_ready = Duration::ZERO;
    for (i, wave) in EXPECTED.iter().enumerate() {
        let start = wave.iter().map(|n| rolled.patched[*n]).min().unwrap_or_default();
        let end = wave.iter().map(|n| rolled.ready[*n]).max().unwrap_or_default();
        assert!(i == 0 || start >= previous_ready, "{what}: wave {} began before wave {i}", i + 1);
        let after = if i == 0 { "the write" } else { "the previous wave's rollout" };
        report(&format!(
            "node waves: {what}: wave {} ({} Deployment(s)): patched at {:.1} s, rolled out at \
             {:.1} s ({:.1} s after {after})",
            i + 1,
            wave.len(),
            secs(start),
            secs(end),
            secs(start.saturating_sub(previous_ready)),
        ));
        previous_ready = end;
    }
    report(&format!(
        "node waves: {what}: Secret write -> all eight rolled out: {:.1} s",
        secs(previous_ready)
    ));
}

/// Every Deployment's pod serves `password` (its rollout complete, old pods gone).
fn every_pod_serves(cp: &ControlPlane, names: &[&str], password: &str) {
    for name in names {
        for served in served_by_every_pod(cp, NS, name) {
            assert_eq!(served["fileValue"], password, "{name}: {served}");
        }
    }
}

/// The RolloutHalted Events on `name`.
fn halted_events(cp: &ControlPlane, name: &str) -> Vec<Value> {
    let selector = format!("involvedObject.name={name},reason=RolloutHalted");
    let events = cp.get_json(&["events", "-n", NS, "--field-selector", &selector]);
    events["items"].as_array().cloned().unwrap_or_default()
}

#[test]
fn a_secret_change_rolls_in_health_gated_waves_and_a_bad_value_halts_at_the_canary() {
    let _shared = sharing();
    let cp = cluster();
    let began = Instant::now();
    let names = names();
    let mut objects = vec![shared_secret("p1", "0")];
    objects.extend(names.iter().map(|n| deployment(n).to_string()));
    namespace_with(cp, NS, &objects);
    wait_until(
        "eight Deployments rolled out with the Secret's digest",
        Duration::from_secs(120),
        || {
            let now = snapshot(cp);
            now.len() == 8 && now.values().all(|s| s.complete && !s.digest.is_empty())
        },
    );
    every_pod_serves(cp, &names, "p1");
    report(&format!("node waves: eight Deployments up in {:.1} s", began.elapsed().as_secs_f64()));

    // A good value: waves of 1, 2, 4 and 1, each after the one before rolled out.
    let before = snapshot(cp);
    let written = Instant::now();
    cp.apply(&shared_secret("p2", "0"));
    let good = rolled_in_waves(cp, &before, written, Duration::from_secs(180));
    report_waves("good value", &good);
    every_pod_serves(cp, &names, "p2");

    // A bad value: the canary's new pod exits, its rollout fails at the progress deadline,
    // the change halts there and the seven others are never patched for it.
    let before = snapshot(cp);
    let written = Instant::now();
    cp.apply(&shared_secret("p-bad", "3"));
    let mut canary_patched = None;
    let mut deadline_seen = None;
    let unmoved = |now: &BTreeMap<String, Seen>| {
        let moved: Vec<&String> = now
            .iter()
            .filter(|(name, s)| name.as_str() != CANARY && s.digest != before[*name].digest)
            .map(|(name, _)| name)
            .collect();
        assert!(
            moved.is_empty(),
            "{moved:?} rolled for the bad value behind a failing canary, {:?} after the write:\n{}",
            written.elapsed(),
            describe(now)
        );
    };
    let event = loop {
        let now = snapshot(cp);
        unmoved(&now);
        let canary = &now[CANARY];
        if canary.digest != before[CANARY].digest && canary_patched.is_none() {
            canary_patched = Some(written.elapsed());
        }
        if canary.deadline_exceeded && canary_patched.is_some() && deadline_seen.is_none() {
            deadline_seen = Some(written.elapsed());
        }
        // The halt comes once the deadline is seen: one more kubectl call then, not before.
        let halted = if deadline_seen.is_some() { halted_events(cp, CANARY) } else { Vec::new() };
        if let Some(event) = halted.into_iter().next() {
            break event;
        }
        assert!(
            written.elapsed() < Duration::from_secs(PROGRESS_DEADLINE + 60),
            "no RolloutHalted Event on {CANARY} (patched {canary_patched:?}, deadline exceeded \
             {deadline_seen:?}):\n{}",
            describe(&now)
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let halted_at = written.elapsed();
    let canary = snapshot(cp).remove(CANARY).expect("the canary");
    let (change, wave, _) = canary.wave.clone().expect("the canary's wave entry");
    assert_eq!(wave, 1, "{canary:?}");
    assert!(before[CANARY].wave.as_ref().is_some_and(|w| w.0 != change), "a new change");
    let message = event["message"].as_str().unwrap_or_default();
    assert_eq!(event["type"], "Warning", "{event}");
    assert_eq!(event["involvedObject"]["kind"], "Deployment", "{event}");
    // The halt's id: the first 12 hex digits of the canary's new digest for the Secret.
    let id = canary.digest.rsplit(':').next().unwrap_or_default().get(..12).unwrap_or_default();
    assert!(
        message.starts_with(&format!("{SOURCE}: change {id} halted at Deployment {NS}/{CANARY}")),
        "the Event names the Secret, the halt's id and the canary: {message}"
    );
    assert!(message.contains("7 workload(s) wait"), "{message}");
    assert!(message.contains(&format!("configsum.dev/resume: \"{id}\"")), "{message}");
    // The same words on the Secret, found by its uid as `kubectl describe` finds them.
    let on_secret = halted_events(cp, SECRET);
    let secret_uid = cp.get_json(&["secret", SECRET, "-n", NS])["metadata"]["uid"].clone();
    assert!(
        on_secret.iter().any(|e| e["involvedObject"]["kind"] == "Secret"
            && e["involvedObject"]["uid"] == secret_uid
            && e["message"] == event["message"]),
        "RolloutHalted on the Secret: {on_secret:?}"
    );
    // explain says so: the seven wait behind the halt and the canary halted it, each naming
    // the canary, the halt's id and how many wait.
    let answer = explain(cp, &[&format!("secret/{SECRET}"), "-n", NS]);
    let trackers = answer["workloads"].as_array().cloned().unwrap_or_default();
    assert_eq!(trackers.len(), 8, "{answer}");
    for tracker in &trackers {
        assert_eq!(tracker["verdict"], "halted", "{tracker}");
        let halt = &tracker["halt"];
        assert_eq!(
            (&halt["failing"], &halt["change"], &halt["waiting"]),
            (&json!(format!("Deployment {NS}/{CANARY}")), &json!(id), &json!(7)),
            "{tracker}"
        );
    }
    // The halt is the positive signal; then twice the window and some: nothing else moves.
    let quiet = 2 * WINDOW + Duration::from_secs(3);
    let after_event = Instant::now();
    while after_event.elapsed() < quiet {
        let now = snapshot(cp);
        unmoved(&now);
        assert_eq!(now[CANARY].digest, canary.digest, "the canary stays at the bad value");
        std::thread::sleep(Duration::from_millis(200));
    }
    // The seven, and the canary's old pod (maxUnavailable 0), still serve the previous value.
    let rest: Vec<&str> = names.iter().copied().filter(|n| *n != CANARY).collect();
    every_pod_serves(cp, &rest, "p2");
    let canary_pods = pods(cp, NS, CANARY);
    let serving: Vec<&Pod> = canary_pods.iter().filter(|p| p.ready).collect();
    assert_eq!(serving.len(), 1, "the canary's old pod serves: {canary_pods:?}");
    assert_eq!(served(serving[0].ip.as_deref().expect("IP"))["fileValue"], "p2");
    assert!(canary_pods.iter().any(|p| !p.ready), "its new pod is not Ready: {canary_pods:?}");
    report(&format!(
        "node waves: bad value: canary patched at {:.1} s, ProgressDeadlineExceeded seen at \
         {:.1} s (progressDeadlineSeconds {PROGRESS_DEADLINE}), RolloutHalted seen at {:.1} s; \
         nothing else rolled in the {:.0} s after",
        canary_patched.unwrap_or_default().as_secs_f64(),
        deadline_seen.unwrap_or_default().as_secs_f64(),
        halted_at.as_secs_f64(),
        quiet.as_secs_f64(),
    ));

    // Fixed: a newer change replaces the halted one, from wave 1: the canary rolls back to
    // health, then the others in waves.
    let before = snapshot(cp);
    let written = Instant::now();
    cp.apply(&shared_secret("p3", "0"));
    let fixed = rolled_in_waves(cp, &before, written, Duration::from_secs(180));
    assert!(fixed.change != change && good.change != change, "three changes");
    report_waves("fixed value", &fixed);
    every_pod_serves(cp, &names, "p3");
    assert!(!snapshot(cp)[CANARY].deadline_exceeded, "the canary is healthy again");
    report(&format!("node waves: the whole test took {:.1} s", began.elapsed().as_secs_f64()));
}
