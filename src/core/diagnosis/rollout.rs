//! Whether a workload's pods run its current pod template, from the workload's own status:
//! "the Secret changed but the pods still run the old value" is, as often as not, a rollout
//! that is paused, still going, failed, or waiting for pods to be deleted (`OnDelete`). Pods
//! created from the current template are not pods that run it: a rollout completes only when
//! they are ready, by the kind's own rule (SPEC 16's completion rules, which waves will share).

use serde::Serialize;
use serde_json::Value;

use crate::core::model::kinds::{AVAILABLE_REPLICAS, Failure, RolloutRule, WorkloadKind};

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

/// The reason a workload's controller reports for a failed rollout, if it reports one.
fn failure(failure: Failure, object: &Value) -> Option<String> {
    match failure {
        Failure::Phase(failed) => {
            let phase = object.pointer("/status/phase").and_then(Value::as_str)?;
            (phase == failed).then(|| {
                let message = object.pointer("/status/message").and_then(Value::as_str);
                match message {
                    Some(message) if !message.is_empty() => format!("{failed} ({message})"),
                    _ => failed.to_owned(),
                }
            })
        }
        Failure::Condition { kind, status, reason } => {
            let conditions = object.pointer("/status/conditions")?.as_array()?;
            conditions.iter().find_map(|condition| {
                let field = |name: &str| condition.get(name).and_then(Value::as_str);
                (field("type") == Some(kind)
                    && field("status") == Some(status)
                    && field("reason") == Some(reason))
                .then(|| reason.to_owned())
            })
        }
    }
}

/// The rollout of `object` (a workload's JSON, with its status).
pub fn rollout(kind: WorkloadKind, object: &Value) -> Rollout {
    let int = |path: &[&str]| {
        let mut at = object;
        for field in path {
            at = at.get(field)?;
        }
        // Argo Rollouts writes its observedGeneration as a string.
        at.as_i64().or_else(|| at.as_str()?.parse().ok())
    };
    let text = |path: &[&str]| {
        let mut at = object;
        for field in path {
            at = at.get(*field)?;
        }
        at.as_str().map(str::to_owned)
    };
    let rule = match kind.declaration().rollout {
        RolloutRule::Counts(counts) => Some(counts),
        RolloutRule::NoStatus => None,
    };
    // Counted as a Deployment's when the kind has no rollout status; the answer is then
    // "no status".
    let fields = rule.unwrap_or(AVAILABLE_REPLICAS);
    let has_status =
        object.get("status").is_some_and(|s| s.as_object().is_some_and(|s| !s.is_empty()));
    // The API server leaves zero counts out of a status: once there is a status, a missing
    // count is 0.
    let count = |field: &str| int(&["status", field]).or(has_status.then_some(0));
    let generation = int(&["metadata", "generation"]);
    let observed_generation = int(&["status", "observedGeneration"]);
    let (replicas, updated, existing, ready) = (
        match fields.desired {
            Some(field) => count(field),
            // A missing spec.replicas is 1, as the API server defaults it.
            None => int(&["spec", "replicas"]).or(Some(1)),
        },
        count(fields.updated),
        count(fields.existing),
        count(fields.ready),
    );
    let mut rollout = Rollout {
        state: RolloutState::Unknown,
        generation,
        observed_generation,
        replicas,
        updated_replicas: updated,
        ready_replicas: ready,
        message: String::new(),
    };
    let on_delete = text(&["spec", "updateStrategy", "type"]).as_deref() == Some("OnDelete")
        || fields.always_on_delete;
    if rule.is_none() || !has_status {
        rollout.message = "no rollout status to tell from".into();
        return rollout;
    }
    let (updated, existing, ready) =
        (updated.unwrap_or(0), existing.unwrap_or(0), ready.unwrap_or(0));
    let desired = replicas.unwrap_or(1);
    let counts = format!("{updated} of {desired} pods run the current template, {ready} ready");
    // A StatefulSet tells its template revisions apart; the others by counts.
    let revisions_differ = matches!(
        (text(&["status", "currentRevision"]), text(&["status", "updateRevision"])),
        (Some(current), Some(update)) if current != update
    );
    let all_updated = updated >= desired && existing <= updated && !revisions_differ;
    let all_ready = match (fields.done_phase, text(&["status", "phase"])) {
        // An Argo Rollout says itself when it is done.
        (Some(done), Some(phase)) => phase == done,
        _ => ready >= desired,
    };
    let paused = object.pointer("/spec/paused").and_then(Value::as_bool) == Some(true);
    (rollout.state, rollout.message) = if matches!((generation, observed_generation), (Some(g), Some(o)) if o < g)
    {
        (
            RolloutState::NotObserved,
            format!(
                "its controller has not observed generation {} yet (observed {})",
                generation.unwrap_or_default(),
                observed_generation.unwrap_or_default()
            ),
        )
    } else if let Some(reason) = failure(fields.failure, object) {
        (RolloutState::Failed, format!("the rollout failed: {reason}; {counts}"))
    } else if all_updated && all_ready {
        (RolloutState::Complete, counts)
    } else if paused {
        (RolloutState::Paused, format!("paused: {counts}"))
    } else if on_delete && !all_updated {
        (
            RolloutState::OnDelete,
            format!("{counts}; the others are replaced only when deleted (OnDelete)"),
        )
    } else {
        (RolloutState::Progressing, format!("rolling out: {counts}"))
    };
    rollout
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
}
