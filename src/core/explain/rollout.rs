//! Whether a workload's pods run its current pod template, from the workload's own status:
//! "the Secret changed but the pods still run the old value" is, as often as not, a rollout
//! that is paused, still going, or waiting for pods to be deleted (`OnDelete`).

use serde::Serialize;
use serde_json::Value;

use crate::core::workload::WorkloadKind;

/// Where the rollout stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RolloutState {
    /// Every pod runs the current template.
    Complete,
    /// Pods of an older template remain; the workload's controller is replacing them.
    Progressing,
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
    /// Desired pods, and those running the current template.
    pub replicas: Option<i64>,
    pub updated_replicas: Option<i64>,
    /// One line for people.
    pub message: String,
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
    let generation = int(&["metadata", "generation"]);
    let observed_generation = int(&["status", "observedGeneration"]);
    let (replicas, updated, existing) = match kind {
        WorkloadKind::DaemonSet => (
            int(&["status", "desiredNumberScheduled"]),
            int(&["status", "updatedNumberScheduled"]),
            int(&["status", "currentNumberScheduled"]),
        ),
        // A missing spec.replicas is 1, as the API server defaults it.
        _ => (
            int(&["spec", "replicas"]).or(Some(1)),
            int(&["status", "updatedReplicas"]),
            int(&["status", "replicas"]),
        ),
    };
    let mut rollout = Rollout {
        state: RolloutState::Unknown,
        generation,
        observed_generation,
        replicas,
        updated_replicas: updated,
        message: String::new(),
    };
    let on_delete = text(&["spec", "updateStrategy", "type"]).as_deref() == Some("OnDelete")
        || kind == WorkloadKind::ReplicaSet;
    let has_status =
        object.get("status").is_some_and(|s| s.as_object().is_some_and(|s| !s.is_empty()));
    if kind == WorkloadKind::Job || kind == WorkloadKind::Pod || !has_status {
        rollout.message = "no rollout status to tell from".into();
        return rollout;
    }
    let counts = match (updated, replicas) {
        (Some(updated), Some(replicas)) => format!("{updated} of {replicas} pods"),
        (None, Some(replicas)) => format!("0 of {replicas} pods"),
        _ => "its pods".to_owned(),
    };
    // A StatefulSet tells its template revisions apart; the others by counts.
    let revisions_differ = matches!(
        (text(&["status", "currentRevision"]), text(&["status", "updateRevision"])),
        (Some(current), Some(update)) if current != update
    );
    let all_updated = updated.unwrap_or(0) >= replicas.unwrap_or(1)
        && existing.is_none_or(|existing| existing <= updated.unwrap_or(0))
        && !revisions_differ;
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
    } else if all_updated {
        (RolloutState::Complete, format!("{counts} run the current template"))
    } else if paused {
        (RolloutState::Paused, format!("paused: {counts} run the current template"))
    } else if on_delete {
        (
            RolloutState::OnDelete,
            format!(
                "{counts} run the current template; the others are replaced only when deleted (OnDelete)"
            ),
        )
    } else {
        (RolloutState::Progressing, format!("rolling out: {counts} run the current template"))
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
            "status": {"observedGeneration": 4, "replicas": 4, "updatedReplicas": 1}});
        let r = rollout(WorkloadKind::Deployment, &mid);
        assert_eq!(r.state, RolloutState::Progressing);
        assert_eq!(r.message, "rolling out: 1 of 3 pods run the current template");

        let mut paused = mid.clone();
        paused["spec"]["paused"] = json!(true);
        assert_eq!(rollout(WorkloadKind::Deployment, &paused).state, RolloutState::Paused);

        let unobserved = json!({"metadata": {"generation": 5}, "spec": {"replicas": 3},
            "status": {"observedGeneration": 4, "replicas": 3, "updatedReplicas": 3}});
        assert_eq!(rollout(WorkloadKind::Deployment, &unobserved).state, RolloutState::NotObserved);

        // Surge pods of the old template still terminating: not complete yet.
        let surge = json!({"metadata": {"generation": 4}, "spec": {"replicas": 3},
            "status": {"observedGeneration": 4, "replicas": 4, "updatedReplicas": 3}});
        assert_eq!(rollout(WorkloadKind::Deployment, &surge).state, RolloutState::Progressing);

        let done = json!({"metadata": {"generation": 4}, "spec": {"replicas": 3},
            "status": {"observedGeneration": 4, "replicas": 3, "updatedReplicas": 3}});
        assert_eq!(rollout(WorkloadKind::Deployment, &done).state, RolloutState::Complete);
    }

    #[test]
    fn an_on_delete_statefulset_waits_for_its_pods_to_be_deleted() {
        let stale = json!({"metadata": {"generation": 2},
            "spec": {"replicas": 2, "updateStrategy": {"type": "OnDelete"}},
            "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 0,
                "currentRevision": "db-1", "updateRevision": "db-2"}});
        let r = rollout(WorkloadKind::StatefulSet, &stale);
        assert_eq!(r.state, RolloutState::OnDelete);
        assert!(r.message.contains("0 of 2 pods"), "{}", r.message);

        let rolling = json!({"metadata": {"generation": 2}, "spec": {"replicas": 2},
            "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
                "currentRevision": "db-1", "updateRevision": "db-2"}});
        assert_eq!(rollout(WorkloadKind::StatefulSet, &rolling).state, RolloutState::Progressing);
    }

    #[test]
    fn daemonsets_count_nodes_and_files_have_no_status() {
        let ds = json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1,
            "desiredNumberScheduled": 5, "updatedNumberScheduled": 5, "currentNumberScheduled": 5}});
        assert_eq!(rollout(WorkloadKind::DaemonSet, &ds).state, RolloutState::Complete);
        let rendered = json!({"metadata": {"name": "web"}, "spec": {"replicas": 2}});
        assert_eq!(rollout(WorkloadKind::Deployment, &rendered).state, RolloutState::Unknown);
        let argo = json!({"metadata": {"generation": 3}, "spec": {"replicas": 2},
            "status": {"observedGeneration": "3", "replicas": 2, "updatedReplicas": 2}});
        let r = rollout(WorkloadKind::Rollout, &argo);
        assert_eq!((r.state, r.observed_generation), (RolloutState::Complete, Some(3)));
    }
}
