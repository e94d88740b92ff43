//! Whether a workload's rollout is complete, still going, or failed: its kind's
//! [`RolloutRule`] (a row of the kinds table) held against the workload's status. The one
//! judgement the controller's health-gated waves and `configsum explain`
//! (`core::diagnosis::rollout`, which says more) share; docs/behaviour.md ("When a rollout is
//! complete") states it per kind.
//!
//! Besides the status it reads three numbers of the object, [`SpecParts`], so a caller that
//! keeps little per workload (the controller) judges from those and the `status` alone —
//! [`HealthView`] reads just them from an object's JSON, skipping its pod template — and gets
//! the answer [`health`] gives on the whole object.

use serde::Deserialize;
use serde_json::Value;

use crate::core::model::kinds::WorkloadKind;
use crate::core::model::rollout_rule::{
    Check, Desired, Failure, Observed, OldPods, RolloutRule, StatusRule,
};
use crate::core::model::warnings::shorten_middle;

/// Where a workload's rollout stands, for a wave. Unknown is progressing: never complete
/// by default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Health {
    /// Done by its kind's rule; also a kind with nothing to wait for (Jobs and Pods, which are
    /// never rolled; a declared kind without a `health` entry).
    Complete,
    /// Not done yet: not observed, pods being replaced, paused, or no status yet.
    #[default]
    Progressing,
    /// Its controller gave up. `reason` is at most [`REASON_LIMIT`] characters: part of it is
    /// written by another controller.
    Failed { reason: String },
}

/// The longest failure reason kept (characters).
pub const REASON_LIMIT: usize = 200;

/// What the judgement reads of a workload besides its status. Small and `Copy`: the
/// controller may keep one per workload.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpecParts {
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `spec.replicas`.
    pub replicas: Option<i64>,
    /// `spec.updateStrategy.type` is `OnDelete`.
    pub on_delete: bool,
}

impl SpecParts {
    /// The parts of a whole object.
    pub fn of(object: &Value) -> SpecParts {
        SpecParts {
            generation: object.pointer("/metadata/generation").and_then(int),
            replicas: object.pointer("/spec/replicas").and_then(int),
            on_delete: object.pointer("/spec/updateStrategy/type").and_then(Value::as_str)
                == Some("OnDelete"),
        }
    }
}

/// The parts of a workload's JSON the judgement reads, and nothing else: deserialising an
/// object into it skips its pod template (and the rest of its spec and metadata) without
/// building them. Fields of unexpected types read as absent, as in [`SpecParts::of`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HealthView {
    pub parts: SpecParts,
    /// `status`, the one part kept whole (a few hundred bytes).
    pub status: Option<Value>,
}

impl<'de> Deserialize<'de> for HealthView {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            #[serde(default)]
            metadata: Option<MetadataWire>,
            #[serde(default)]
            spec: Option<SpecWire>,
            #[serde(default)]
            status: Option<Value>,
        }
        #[derive(Deserialize)]
        struct MetadataWire {
            #[serde(default)]
            generation: Option<Value>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct SpecWire {
            #[serde(default)]
            replicas: Option<Value>,
            #[serde(default)]
            update_strategy: Option<Value>,
        }
        let wire = Wire::deserialize(deserializer)?;
        let spec = wire.spec.as_ref();
        Ok(HealthView {
            parts: SpecParts {
                generation: wire.metadata.and_then(|m| m.generation).as_ref().and_then(int),
                replicas: spec.and_then(|s| s.replicas.as_ref()).and_then(int),
                on_delete: spec
                    .and_then(|s| s.update_strategy.as_ref())
                    .and_then(|u| u.get("type"))
                    .and_then(Value::as_str)
                    == Some("OnDelete"),
            },
            status: wire.status,
        })
    }
}

/// The health of `object` (a workload's JSON, with its status), by its kind's rule.
pub fn health(kind: WorkloadKind, object: &Value) -> Health {
    health_of_parts(kind, SpecParts::of(object), object.get("status"))
}

/// The health of a workload from its [`SpecParts`] and its `status` alone: the same answer as
/// [`health`] on the whole object.
pub fn health_of_parts(kind: WorkloadKind, parts: SpecParts, status: Option<&Value>) -> Health {
    match kind.declaration().rollout {
        // Nothing to wait for: never rolled, or no rule to tell by.
        RolloutRule::NoStatus | RolloutRule::ExplainOnly(_) => Health::Complete,
        RolloutRule::Status(rule) => read(&rule, parts, status.unwrap_or(&Value::Null)).health(),
    }
}

/// A status read by its kind's rule: what [`Health`] and explain's richer answer are made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reading {
    pub generation: Option<i64>,
    pub observed_generation: Option<i64>,
    /// `observedGeneration` stands against the generation as the rule asks.
    pub observed: bool,
    /// Desired pods, by the rule.
    pub desired: i64,
    /// Every check of the rule holds (generation aside).
    pub checks_hold: bool,
    /// Pods of an older template stay until deleted: the kind never replaces them, or honours
    /// the spec's `updateStrategy: OnDelete`.
    pub keeps_old_pods: bool,
    /// Complete once observed: `OnDelete` where the kind honours it.
    pub complete_when_observed: bool,
    /// Why the workload's controller gave up, shortened.
    pub failure: Option<String>,
}

impl Reading {
    /// Not observed comes first: a failure reported for an older generation is stale.
    pub fn health(&self) -> Health {
        if !self.observed {
            Health::Progressing
        } else if let Some(reason) = &self.failure {
            Health::Failed { reason: reason.clone() }
        } else if self.checks_hold || self.complete_when_observed {
            Health::Complete
        } else {
            Health::Progressing
        }
    }
}

/// Reads `status` (`null` when absent) by `rule`.
pub fn read(rule: &StatusRule, parts: SpecParts, status: &Value) -> Reading {
    let observed_generation = status.get("observedGeneration").and_then(int);
    let (generation, observed) = (parts.generation.unwrap_or(0), observed_generation.unwrap_or(0));
    let desired = match rule.desired {
        Desired::SpecReplicas => parts.replicas.unwrap_or(1),
        Desired::Status(field) => count(status, field),
    };
    let on_delete = rule.old_pods == OldPods::KeptUnderOnDelete && parts.on_delete;
    Reading {
        generation: parts.generation,
        observed_generation,
        observed: match rule.observed {
            Observed::AtLeast => observed >= generation,
            Observed::Equal => observed == generation,
            Observed::AtLeastIfReported => observed_generation.is_none_or(|o| o >= generation),
        },
        desired,
        checks_hold: rule.complete.iter().all(|check| holds(*check, status, desired)),
        keeps_old_pods: on_delete || rule.old_pods == OldPods::Kept,
        complete_when_observed: on_delete,
        failure: rule.failure.and_then(|failure| failed(failure, status)),
    }
}

/// Whether one check of a rule holds.
pub fn holds(check: Check, status: &Value, desired: i64) -> bool {
    match check {
        Check::AtDesired(field) => count(status, field) == desired,
        Check::SameText(a, b) => text(status, &[a]) == text(status, &[b]),
        Check::TextIs(path, value) => text(status, path) == Some(value),
    }
}

/// A count of the status; absent (the API server leaves zeros out) or unreadable, 0.
pub fn count(status: &Value, field: &str) -> i64 {
    status.get(field).and_then(int).unwrap_or(0)
}

/// The text at `path` under the status.
pub fn text<'a>(status: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut at = status;
    for field in path {
        at = at.get(field)?;
    }
    at.as_str()
}

/// The reason the workload's controller reports for a failed rollout, if it reports one.
fn failed(failure: Failure, status: &Value) -> Option<String> {
    let reason = match failure {
        Failure::TextIs(path, value) => {
            if text(status, path) != Some(value) {
                return None;
            }
            match text(status, &["message"]) {
                Some(message) if !message.is_empty() => format!("{value} ({message})"),
                _ => value.to_owned(),
            }
        }
        Failure::Condition { kind, status: wanted, reason } => {
            let conditions = status.get("conditions")?.as_array()?;
            let found = conditions.iter().any(|condition| {
                let field = |name: &str| condition.get(name).and_then(Value::as_str);
                field("type") == Some(kind)
                    && field("status") == Some(wanted)
                    && field("reason") == Some(reason)
            });
            if !found {
                return None;
            }
            reason.to_owned()
        }
    };
    Some(shorten_middle(&reason, REASON_LIMIT))
}

/// A number, or a number written as a string (Argo Rollouts' `observedGeneration`).
fn int(value: &Value) -> Option<i64> {
    value.as_i64().or_else(|| value.as_str()?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(generation: i64, replicas: i64, status: Value) -> Value {
        json!({"metadata": {"generation": generation}, "spec": {"replicas": replicas},
            "status": status})
    }

    #[test]
    fn a_deployment_completes_when_every_count_is_at_spec_replicas() {
        let done = deployment(
            4,
            3,
            json!({"observedGeneration": 4, "replicas": 3, "updatedReplicas": 3,
                "availableReplicas": 3}),
        );
        assert_eq!(health(WorkloadKind::Deployment, &done), Health::Complete);
        for (field, value) in [
            ("observedGeneration", json!(3)),
            ("replicas", json!(4)),
            ("updatedReplicas", json!(2)),
            ("availableReplicas", json!(2)),
            // More available than desired is not "equal": the scale-down is not over.
            ("availableReplicas", json!(4)),
        ] {
            let mut going = done.clone();
            going["status"][field] = value.clone();
            assert_eq!(
                health(WorkloadKind::Deployment, &going),
                Health::Progressing,
                "{field}: {value}"
            );
        }
        // Absent spec.replicas is 1; absent counts are 0.
        let one = json!({"metadata": {"generation": 2}, "spec": {},
            "status": {"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1,
                "availableReplicas": 1}});
        assert_eq!(health(WorkloadKind::Deployment, &one), Health::Complete);
        let zero = deployment(2, 0, json!({"observedGeneration": 2}));
        assert_eq!(health(WorkloadKind::Deployment, &zero), Health::Complete);
        let pending = deployment(
            2,
            1,
            json!({"observedGeneration": 2, "replicas": 1,
            "updatedReplicas": 1, "unavailableReplicas": 1}),
        );
        assert_eq!(health(WorkloadKind::Deployment, &pending), Health::Progressing);
        // No status yet, or none observed: not complete.
        let fresh = json!({"metadata": {"generation": 1}, "spec": {"replicas": 0}});
        assert_eq!(health(WorkloadKind::Deployment, &fresh), Health::Progressing);
    }

    #[test]
    fn a_deployment_past_its_deadline_failed_and_a_paused_one_is_progressing() {
        let stalled = deployment(
            2,
            2,
            json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 1,
                "availableReplicas": 2, "conditions": [
                    {"type": "Progressing", "status": "False",
                     "reason": "ProgressDeadlineExceeded", "message": "timed out"}]}),
        );
        assert_eq!(
            health(WorkloadKind::Deployment, &stalled),
            Health::Failed { reason: "ProgressDeadlineExceeded".into() }
        );
        // The condition of an older generation: the new one is still to be tried.
        let mut newer = stalled.clone();
        newer["metadata"]["generation"] = json!(3);
        assert_eq!(health(WorkloadKind::Deployment, &newer), Health::Progressing);
        // Progressing True, or False for another reason, is no failure.
        let mut other = stalled.clone();
        other["status"]["conditions"][0]["reason"] = json!("Something");
        assert_eq!(health(WorkloadKind::Deployment, &other), Health::Progressing);

        let mut paused = stalled.clone();
        paused["status"]["conditions"] = json!([]);
        paused["spec"]["paused"] = json!(true);
        assert_eq!(health(WorkloadKind::Deployment, &paused), Health::Progressing);
    }

    #[test]
    fn a_statefulset_completes_on_one_revision_or_once_accepted_under_on_delete() {
        let done = json!({"metadata": {"generation": 2}, "spec": {"replicas": 2},
            "status": {"observedGeneration": 2, "replicas": 2, "readyReplicas": 2,
                "updatedReplicas": 2, "currentRevision": "db-2", "updateRevision": "db-2"}});
        assert_eq!(health(WorkloadKind::StatefulSet, &done), Health::Complete);
        let mut rolling = done.clone();
        rolling["status"]["currentRevision"] = json!("db-1");
        assert_eq!(health(WorkloadKind::StatefulSet, &rolling), Health::Progressing);
        let mut unready = done.clone();
        unready["status"]["readyReplicas"] = json!(1);
        assert_eq!(health(WorkloadKind::StatefulSet, &unready), Health::Progressing);
        let mut behind = done.clone();
        behind["metadata"]["generation"] = json!(3);
        assert_eq!(health(WorkloadKind::StatefulSet, &behind), Health::Progressing);

        // OnDelete: its template accepted is all a wave waits for.
        let mut on_delete = rolling.clone();
        on_delete["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
        on_delete["status"]["readyReplicas"] = json!(0);
        assert_eq!(health(WorkloadKind::StatefulSet, &on_delete), Health::Complete);
        on_delete["metadata"]["generation"] = json!(3);
        assert_eq!(health(WorkloadKind::StatefulSet, &on_delete), Health::Progressing);
    }

    #[test]
    fn daemonsets_replicasets_and_kinds_never_rolled() {
        let ds = json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1,
            "desiredNumberScheduled": 5, "updatedNumberScheduled": 5,
            "currentNumberScheduled": 6, "numberAvailable": 5}});
        assert_eq!(health(WorkloadKind::DaemonSet, &ds), Health::Complete);
        for field in ["updatedNumberScheduled", "numberAvailable"] {
            let mut going = ds.clone();
            going["status"][field] = json!(4);
            assert_eq!(health(WorkloadKind::DaemonSet, &going), Health::Progressing, "{field}");
        }

        // A ReplicaSet has no updated count: its pods ready is its rollout.
        let rs = json!({"metadata": {"generation": 3}, "spec": {"replicas": 2},
            "status": {"observedGeneration": 3, "replicas": 2, "readyReplicas": 2}});
        assert_eq!(health(WorkloadKind::ReplicaSet, &rs), Health::Complete);
        let mut unready = rs.clone();
        unready["status"]["readyReplicas"] = json!(1);
        assert_eq!(health(WorkloadKind::ReplicaSet, &unready), Health::Progressing);
        let mut behind = rs.clone();
        behind["metadata"]["generation"] = json!(4);
        assert_eq!(health(WorkloadKind::ReplicaSet, &behind), Health::Progressing);

        let job = json!({"metadata": {"generation": 1}, "status": {"active": 1}});
        assert_eq!(health(WorkloadKind::Job, &job), Health::Complete);
        assert_eq!(health(WorkloadKind::Pod, &json!({})), Health::Complete);
    }

    #[test]
    fn an_argo_rollout_is_healthy_at_its_generation_written_as_a_string() {
        let healthy = json!({"metadata": {"generation": 3}, "spec": {"replicas": 2},
            "status": {"observedGeneration": "3", "phase": "Healthy"}});
        assert_eq!(health(WorkloadKind::Rollout, &healthy), Health::Complete);
        let mut behind = healthy.clone();
        behind["status"]["observedGeneration"] = json!("2");
        assert_eq!(health(WorkloadKind::Rollout, &behind), Health::Progressing);
        let mut no_phase = healthy.clone();
        no_phase["status"] = json!({"observedGeneration": "3"});
        assert_eq!(health(WorkloadKind::Rollout, &no_phase), Health::Progressing);
        let mut paused = healthy.clone();
        paused["status"]["phase"] = json!("Paused");
        assert_eq!(health(WorkloadKind::Rollout, &paused), Health::Progressing);

        let mut degraded = healthy.clone();
        degraded["status"]["phase"] = json!("Degraded");
        degraded["status"]["message"] = json!("x".repeat(5000));
        let Health::Failed { reason } = health(WorkloadKind::Rollout, &degraded) else {
            panic!("degraded is failed");
        };
        assert!(reason.starts_with("Degraded (xxx"), "{reason}");
        assert_eq!(reason.chars().count(), REASON_LIMIT);
    }

    #[test]
    fn a_declared_rule_is_read_at_its_path() {
        let rule = StatusRule {
            observed: Observed::AtLeastIfReported,
            desired: Desired::SpecReplicas,
            complete: &[Check::TextIs(&["phase"], "Running")],
            failure: Some(Failure::TextIs(&["phase"], "Failed")),
            old_pods: OldPods::Replaced,
            counts: None,
        };
        let judge = |status: Value| read(&rule, SpecParts::of(&json!({})), &status).health();
        assert_eq!(judge(json!({"phase": "Running"})), Health::Complete);
        assert_eq!(judge(json!({"phase": "Pending"})), Health::Progressing);
        assert_eq!(judge(Value::Null), Health::Progressing);
        assert_eq!(
            judge(json!({"phase": "Failed", "message": "image pull"})),
            Health::Failed { reason: "Failed (image pull)".into() }
        );
        // A generation reported and behind is not complete; none reported is not asked.
        let parts = SpecParts { generation: Some(4), ..SpecParts::default() };
        let status = json!({"phase": "Running", "observedGeneration": 3});
        assert_eq!(read(&rule, parts, &status).health(), Health::Progressing);
        let status = json!({"phase": "Running"});
        assert_eq!(read(&rule, parts, &status).health(), Health::Complete);
        // Without `failed`, any other phase is progress.
        let no_failed = StatusRule { failure: None, ..rule };
        let status = json!({"phase": "Failed"});
        assert_eq!(read(&no_failed, parts, &status).health(), Health::Progressing);
    }

    /// The controller's path: the parts and the status read from the object's JSON give what
    /// the whole object gives, for every built-in kind and each state above.
    #[test]
    fn the_parts_give_the_answer_of_the_whole_object() {
        let statuses = [
            json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
                "availableReplicas": 2, "readyReplicas": 2, "currentRevision": "a",
                "updateRevision": "a", "desiredNumberScheduled": 2,
                "updatedNumberScheduled": 2, "numberAvailable": 2}),
            json!({"observedGeneration": "2", "phase": "Healthy"}),
            json!({"observedGeneration": "2", "phase": "Degraded", "message": "no"}),
            json!({"observedGeneration": 1, "replicas": 2}),
            json!({"observedGeneration": 2, "updatedReplicas": 1, "readyReplicas": 1,
                "currentRevision": "a", "updateRevision": "b",
                "conditions": [{"type": "Progressing", "status": "False",
                    "reason": "ProgressDeadlineExceeded"}]}),
        ];
        let specs = [
            json!({"replicas": 2, "template": {"spec": {"containers": [{"name": "a"}]}}}),
            json!({"replicas": "2", "updateStrategy": {"type": "OnDelete"}}),
            json!({}),
        ];
        let mut kinds = 0;
        for kind in WorkloadKind::all() {
            kinds += 1;
            for spec in &specs {
                for status in statuses.iter().map(Some).chain([None]) {
                    let mut object =
                        json!({"metadata": {"name": "w", "generation": 2}, "spec": spec});
                    if let Some(status) = status {
                        object["status"] = status.clone();
                    }
                    let view: HealthView =
                        serde_json::from_slice(&serde_json::to_vec(&object).expect("json"))
                            .expect("a view");
                    assert_eq!(view.parts, SpecParts::of(&object));
                    assert_eq!(
                        health_of_parts(kind, view.parts, view.status.as_ref()),
                        health(kind, &object),
                        "{kind:?} {object}"
                    );
                }
            }
        }
        assert_eq!(kinds, 7);
        // Odd types read as absent rather than failing the view.
        let odd: HealthView = serde_json::from_str(
            r#"{"metadata": {"generation": [1]}, "spec": {"replicas": {}, "updateStrategy": 3}}"#,
        )
        .expect("a view");
        assert_eq!(odd.parts, SpecParts::default());
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// For any Deployment status: complete iff observed >= generation, the three counts
            /// equal spec.replicas, and the progress deadline not exceeded.
            #[test]
            fn a_deployment_is_complete_exactly_when_its_counts_say_so(
                generation in 1i64..4,
                observed in proptest::option::of(0i64..5),
                replicas in proptest::option::of(0i64..4),
                updated in proptest::option::of(0i64..4),
                available in proptest::option::of(0i64..4),
                existing in proptest::option::of(0i64..5),
                failed in any::<bool>(),
                paused in any::<bool>(),
            ) {
                let mut status = serde_json::Map::new();
                for (field, value) in [("observedGeneration", observed), ("replicas", existing),
                    ("updatedReplicas", updated), ("availableReplicas", available)] {
                    if let Some(value) = value {
                        status.insert(field.into(), json!(value));
                    }
                }
                if failed {
                    status.insert("conditions".into(), json!([{"type": "Progressing",
                        "status": "False", "reason": "ProgressDeadlineExceeded"}]));
                }
                let mut spec = json!({"paused": paused});
                if let Some(replicas) = replicas {
                    spec["replicas"] = json!(replicas);
                }
                let object = json!({"metadata": {"generation": generation}, "spec": spec,
                    "status": status});
                let desired = replicas.unwrap_or(1);
                let observed_ok = observed.unwrap_or(0) >= generation;
                let counts_ok = [updated, available, existing]
                    .iter()
                    .all(|count| count.unwrap_or(0) == desired);
                let got = health(WorkloadKind::Deployment, &object);
                prop_assert_eq!(
                    got == Health::Complete,
                    observed_ok && counts_ok && !failed,
                    "{}", object
                );
                prop_assert_eq!(matches!(got, Health::Failed { .. }), observed_ok && failed);
            }
        }
    }
}
