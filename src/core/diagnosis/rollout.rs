//! Whether a workload's pods run its current pod template, from the workload's own status:
//! "the Secret changed but the pods still run the old value" is, as often as not, a rollout
//! that is paused, still going, failed, or waiting for pods to be deleted (`OnDelete`). Pods
//! created from the current template are not pods that run it: a rollout completes only when
//! they are ready, by the kind's own rule (SPEC 16's completion rules, which waves will share).

use serde::Serialize;
use serde_json::Value;

use crate::core::model::kinds::WorkloadKind;
use crate::core::model::rollout_rule::{Check, Desired, RolloutRule, StatusRule};
use crate::core::model::warnings::shorten_middle;
use crate::core::rollout_health::{SpecParts, count, holds, read, text};

/// Where the rollout stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RolloutState {
    /// Every pod runs the current template and is ready.
    Complete,
    /// Pods of an older template remain, or new ones are not ready yet; the workload's
    /// controller is replacing them.
    Progressing,
    /// The workload's controller gave up: a Deployment past its `progressDeadlineSeconds`
    /// (`ProgressDeadlineExceeded`), an Argo Rollout `Degraded`. Old pods keep running.
    Failed,
    /// `spec.paused`: nothing is replaced until it is resumed.
    Paused,
    /// `updateStrategy: OnDelete` (or a ReplicaSet, which never replaces pods): pods of an
    /// older template stay until someone deletes them.
    OnDelete,
    /// The workload's controller has not seen the latest spec yet.
    NotObserved,
    /// No status to tell from (files, a kind without one, Jobs and Pods).
    Unknown,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    pub state: RolloutState,
    pub generation: Option<i64>,
    pub observed_generation: Option<i64>,
    /// Desired pods, those running the current template, and those ready (available, for
    /// the kinds that count availability: Deployments, DaemonSets, Argo Rollouts).
    pub replicas: Option<i64>,
    pub updated_replicas: Option<i64>,
    pub ready_replicas: Option<i64>,
    /// One line for people.
    pub message: String,
}

/// The rollout of `object` (a workload's JSON, with its status): the kind's rule as the
/// controller's waves read it (`core::rollout_health`), told in more words. Where a wave and
/// explain differ, explain says more: a paused rollout is `Paused` (a wave waits), and one
/// whose old pods stay until deleted is `OnDelete` (a wave counts it complete).
pub fn rollout(kind: WorkloadKind, object: &Value) -> Rollout {
    rollout_by(kind.declaration().rollout, object)
}

fn rollout_by(rule: RolloutRule, object: &Value) -> Rollout {
    let parts = SpecParts::of(object);
    let rule = match rule {
        RolloutRule::Status(rule) | RolloutRule::ExplainOnly(rule) => Some(rule),
        RolloutRule::NoStatus => None,
    };
    let status = object.get("status").filter(|s| s.as_object().is_some_and(|s| !s.is_empty()));
    let (Some(rule), Some(status)) = (rule, status) else {
        return Rollout {
            state: RolloutState::Unknown,
            generation: parts.generation,
            observed_generation: object
                .pointer("/status/observedGeneration")
                .and_then(Value::as_i64),
            // A missing spec.replicas is 1, as the API server defaults it.
            replicas: match rule.map(|r| r.desired) {
                Some(Desired::Status(_)) => None,
                _ => Some(parts.replicas.unwrap_or(1)),
            },
            updated_replicas: None,
            ready_replicas: None,
            message: "no rollout status to tell from".into(),
        };
    };
    let reading = read(&rule, parts, status);
    let desired = reading.desired;
    let counts = rule
        .counts
        .map(|c| (count(status, c.updated), count(status, c.existing), count(status, c.ready)));
    let (told, all_updated) = match counts {
        Some((updated, existing, ready)) => (
            format!("{updated} of {desired} pods run the current template, {ready} ready"),
            // Every pod of the current template, and (a StatefulSet) one revision.
            updated >= desired
                && existing <= updated
                && rule.complete.iter().all(|check| {
                    !matches!(check, Check::SameText(..)) || holds(*check, status, desired)
                }),
        ),
        // A declared kind's `health` field: what it says is all there is.
        None => (said(&rule, status), reading.checks_hold),
    };
    let paused = object.pointer("/spec/paused").and_then(Value::as_bool) == Some(true);
    // Pods of an older template that stay until deleted: the rule may be met, the pods not.
    let old_pods_stay = reading.keeps_old_pods && !all_updated;
    let (state, message) = if !reading.observed {
        (
            RolloutState::NotObserved,
            format!(
                "its controller has not observed generation {} yet (observed {})",
                reading.generation.unwrap_or_default(),
                reading.observed_generation.unwrap_or_default()
            ),
        )
    } else if let Some(reason) = &reading.failure {
        (RolloutState::Failed, format!("the rollout failed: {reason}; {told}"))
    } else if reading.checks_hold && !old_pods_stay {
        (RolloutState::Complete, told)
    } else if paused {
        (RolloutState::Paused, format!("paused: {told}"))
    } else if old_pods_stay {
        (
            RolloutState::OnDelete,
            format!("{told}; the others are replaced only when deleted (OnDelete)"),
        )
    } else {
        (RolloutState::Progressing, format!("rolling out: {told}"))
    };
    Rollout {
        state,
        generation: reading.generation,
        observed_generation: reading.observed_generation,
        replicas: counts.is_some().then_some(desired),
        updated_replicas: counts.map(|(updated, _, _)| updated),
        ready_replicas: counts.map(|(_, _, ready)| ready),
        message,
    }
}

/// What the status says at the paths of a rule without counts: `status.phase is Running`.
fn said(rule: &StatusRule, status: &Value) -> String {
    let said: Vec<String> = rule
        .complete
        .iter()
        .filter_map(|check| match check {
            Check::TextIs(path, _) => Some(format!(
                "status.{} is {}",
                path.join("."),
                text(status, path).map_or_else(|| "not set".to_owned(), |t| shorten_middle(t, 64))
            )),
            _ => None,
        })
        .collect();
    said.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_deployment_mid_rollout_paused_or_done() {
        let mid = json!({"metadata": {"generation": 4}, "spec": {"replicas": 3},
            "status": {"observedGeneration": 4, "replicas": 4, "updatedReplicas": 1,
                "availableReplicas": 3}});
        let r = rollout(WorkloadKind::Deployment, &mid);
        assert_eq!(r.state, RolloutState::Progressing);
        assert_eq!(r.message, "rolling out: 1 of 3 pods run the current template, 3 ready");

        let mut paused = mid.clone();
        paused["spec"]["paused"] = json!(true);
        assert_eq!(rollout(WorkloadKind::Deployment, &paused).state, RolloutState::Paused);

        let unobserved = json!({"metadata": {"generation": 5}, "spec": {"replicas": 3},
            "status": {"observedGeneration": 4, "replicas": 3, "updatedReplicas": 3,
                "availableReplicas": 3}});
        assert_eq!(rollout(WorkloadKind::Deployment, &unobserved).state, RolloutState::NotObserved);

        // Surge pods of the old template still terminating: not complete yet.
        let surge = json!({"metadata": {"generation": 4}, "spec": {"replicas": 3},
            "status": {"observedGeneration": 4, "replicas": 4, "updatedReplicas": 3,
                "availableReplicas": 3}});
        assert_eq!(rollout(WorkloadKind::Deployment, &surge).state, RolloutState::Progressing);

        let done = json!({"metadata": {"generation": 4}, "spec": {"replicas": 3},
            "status": {"observedGeneration": 4, "replicas": 3, "updatedReplicas": 3,
                "availableReplicas": 3}});
        let r = rollout(WorkloadKind::Deployment, &done);
        assert_eq!((r.state, r.ready_replicas), (RolloutState::Complete, Some(3)));
        assert_eq!(r.message, "3 of 3 pods run the current template, 3 ready");
    }

    /// On a control plane without nodes, a pod created from the template is Pending forever:
    /// it is not a pod that runs it. The API server leaves the zero availableReplicas out.
    #[test]
    fn pods_of_the_current_template_that_are_not_ready_are_still_rolling_out() {
        let pending = json!({"metadata": {"generation": 1}, "spec": {"replicas": 1},
            "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                "unavailableReplicas": 1}});
        let r = rollout(WorkloadKind::Deployment, &pending);
        assert_eq!((r.state, r.ready_replicas), (RolloutState::Progressing, Some(0)));
        assert_eq!(r.message, "rolling out: 1 of 1 pods run the current template, 0 ready");

        let sts = json!({"metadata": {"generation": 2}, "spec": {"replicas": 2},
            "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
                "readyReplicas": 1, "currentRevision": "db-2", "updateRevision": "db-2"}});
        assert_eq!(rollout(WorkloadKind::StatefulSet, &sts).state, RolloutState::Progressing);
    }

    #[test]
    fn a_deployment_past_its_progress_deadline_has_failed() {
        let stalled = json!({"metadata": {"generation": 2}, "spec": {"replicas": 2},
            "status": {"observedGeneration": 2, "replicas": 3, "updatedReplicas": 1,
                "availableReplicas": 2, "unavailableReplicas": 1,
                "conditions": [
                    {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                    {"type": "Progressing", "status": "False",
                     "reason": "ProgressDeadlineExceeded",
                     "message": "ReplicaSet \"web-5d9\" has timed out progressing."}]}});
        let r = rollout(WorkloadKind::Deployment, &stalled);
        assert_eq!(r.state, RolloutState::Failed);
        assert_eq!(
            r.message,
            "the rollout failed: ProgressDeadlineExceeded; 1 of 2 pods run the current template, \
             2 ready"
        );
        // Still progressing within the deadline.
        let mut progressing = stalled.clone();
        progressing["status"]["conditions"][1] = json!({"type": "Progressing",
            "status": "True", "reason": "ReplicaSetUpdated"});
        assert_eq!(
            rollout(WorkloadKind::Deployment, &progressing).state,
            RolloutState::Progressing
        );

        let degraded = json!({"metadata": {"generation": 3}, "spec": {"replicas": 2},
            "status": {"observedGeneration": "3", "phase": "Degraded",
                "message": "ProgressDeadlineExceeded: timed out", "replicas": 3,
                "updatedReplicas": 1, "availableReplicas": 2}});
        let r = rollout(WorkloadKind::Rollout, &degraded);
        assert_eq!(r.state, RolloutState::Failed);
        assert!(r.message.starts_with("the rollout failed: Degraded (ProgressDeadlineExceeded"));
    }

    #[test]
    fn an_on_delete_statefulset_waits_for_its_pods_to_be_deleted() {
        let stale = json!({"metadata": {"generation": 2},
            "spec": {"replicas": 2, "updateStrategy": {"type": "OnDelete"}},
            "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 0,
                "readyReplicas": 2, "currentRevision": "db-1", "updateRevision": "db-2"}});
        let r = rollout(WorkloadKind::StatefulSet, &stale);
        assert_eq!(r.state, RolloutState::OnDelete);
        assert!(r.message.contains("0 of 2 pods"), "{}", r.message);

        let rolling = json!({"metadata": {"generation": 2}, "spec": {"replicas": 2},
            "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
                "readyReplicas": 2, "currentRevision": "db-1", "updateRevision": "db-2"}});
        assert_eq!(rollout(WorkloadKind::StatefulSet, &rolling).state, RolloutState::Progressing);
    }

    #[test]
    fn daemonsets_count_nodes_and_files_have_no_status() {
        let ds = json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1,
            "desiredNumberScheduled": 5, "updatedNumberScheduled": 5, "currentNumberScheduled": 5,
            "numberAvailable": 5}});
        assert_eq!(rollout(WorkloadKind::DaemonSet, &ds).state, RolloutState::Complete);
        let mut unavailable = ds.clone();
        unavailable["status"]["numberAvailable"] = json!(4);
        assert_eq!(rollout(WorkloadKind::DaemonSet, &unavailable).state, RolloutState::Progressing);
        let rendered = json!({"metadata": {"name": "web"}, "spec": {"replicas": 2}});
        let r = rollout(WorkloadKind::Deployment, &rendered);
        assert_eq!((r.state, r.ready_replicas), (RolloutState::Unknown, None));
        let argo = json!({"metadata": {"generation": 3}, "spec": {"replicas": 2},
            "status": {"observedGeneration": "3", "phase": "Healthy", "replicas": 2,
                "updatedReplicas": 2, "availableReplicas": 2}});
        let r = rollout(WorkloadKind::Rollout, &argo);
        assert_eq!((r.state, r.observed_generation), (RolloutState::Complete, Some(3)));
        let mut progressing = argo.clone();
        progressing["status"]["phase"] = json!("Progressing");
        assert_eq!(rollout(WorkloadKind::Rollout, &progressing).state, RolloutState::Progressing);
    }

    /// A declared kind's `health` entry: its field is what explain tells.
    #[test]
    fn a_declared_health_field_is_told_as_it_reads() {
        use crate::core::model::rollout_rule::{Failure, Observed, OldPods};
        let rule = RolloutRule::Status(StatusRule {
            observed: Observed::AtLeastIfReported,
            desired: Desired::SpecReplicas,
            complete: &[Check::TextIs(&["phase"], "Running")],
            failure: Some(Failure::TextIs(&["phase"], "Failed")),
            old_pods: OldPods::Replaced,
            counts: None,
        });
        let running = json!({"metadata": {"generation": 2}, "status": {"phase": "Running"}});
        let r = rollout_by(rule, &running);
        assert_eq!(
            (r.state, r.message.as_str()),
            (RolloutState::Complete, "status.phase is Running")
        );
        assert_eq!((r.replicas, r.ready_replicas), (None, None));
        let pending = json!({"metadata": {"generation": 2}, "status": {"phase": "Pending"}});
        let r = rollout_by(rule, &pending);
        assert_eq!(r.state, RolloutState::Progressing);
        assert_eq!(r.message, "rolling out: status.phase is Pending");
        let failed = json!({"metadata": {"generation": 2},
            "status": {"phase": "Failed", "message": "no quota"}});
        let r = rollout_by(rule, &failed);
        assert_eq!(r.state, RolloutState::Failed);
        assert_eq!(r.message, "the rollout failed: Failed (no quota); status.phase is Failed");
    }

    /// Where a wave and explain differ, explain says more; the judgement is the same rule.
    #[test]
    fn explain_and_waves_read_one_rule() {
        use crate::core::rollout_health::{Health, health};
        let on_delete = json!({"metadata": {"generation": 2},
            "spec": {"replicas": 2, "updateStrategy": {"type": "OnDelete"}},
            "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 0,
                "readyReplicas": 2, "currentRevision": "db-1", "updateRevision": "db-2"}});
        assert_eq!(rollout(WorkloadKind::StatefulSet, &on_delete).state, RolloutState::OnDelete);
        assert_eq!(health(WorkloadKind::StatefulSet, &on_delete), Health::Complete);

        // A ReplicaSet's old pods stay: explain says so, a wave waits for its pods ready.
        let rs = json!({"metadata": {"generation": 3}, "spec": {"replicas": 2},
            "status": {"observedGeneration": 3, "replicas": 2, "readyReplicas": 2}});
        let r = rollout(WorkloadKind::ReplicaSet, &rs);
        assert_eq!(r.state, RolloutState::OnDelete);
        assert!(r.message.ends_with("replaced only when deleted (OnDelete)"), "{}", r.message);
        assert_eq!(health(WorkloadKind::ReplicaSet, &rs), Health::Complete);

        let paused = json!({"metadata": {"generation": 4}, "spec": {"replicas": 3, "paused": true},
            "status": {"observedGeneration": 4, "replicas": 3, "updatedReplicas": 0,
                "availableReplicas": 3}});
        assert_eq!(rollout(WorkloadKind::Deployment, &paused).state, RolloutState::Paused);
        assert_eq!(health(WorkloadKind::Deployment, &paused), Health::Progressing);

        // A Deployment with every count at spec.replicas, however written, is complete.
        let done = json!({"metadata": {"generation": 1}, "spec": {},
            "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                "availableReplicas": 1}});
        assert_eq!(rollout(WorkloadKind::Deployment, &done).state, RolloutState::Complete);
        assert_eq!(health(WorkloadKind::Deployment, &done), Health::Complete);
    }
}
