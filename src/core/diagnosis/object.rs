//! The answer about a ConfigMap or Secret: which workloads of the namespace track it (the
//! webhook's own plan: `track`, `ignore`, opt-out and ownership applied), the keys each
//! consumes, and each one's verdict.

use serde::Serialize;

use super::gates::{Line, Why, judge};
use super::namespace::{
    NamespaceView, ReadWorkload, current_for_object, current_of, input_verdict, keys_of, planned,
    standing_of,
};
use crate::core::digest::Digester;
use crate::core::model::object_ref::ObjectRef;
use crate::core::mutate::Found;
use crate::core::verdict::Verdict;

/// One workload that tracks the object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Tracker {
    /// `Deployment`, as the API names the kind.
    pub kind: &'static str,
    pub name: String,
    /// The keys its pods read: `["*"]` for every key.
    pub keys: Vec<String>,
    /// The digest its template records, if any.
    pub recorded: Option<String>,
    /// The digest the object has now (`absent` when it does not exist); `None` when it cannot
    /// be told (a Secret without the digest key, an object that could not be read).
    pub current: Option<String>,
    pub verdict: Verdict,
    /// Why it reads `paused`, `waiting-window` or `halted`.
    #[serde(flatten)]
    pub why: Why,
}

/// The workloads of `view` that track `object` (with `key`: only those whose pods read that
/// key), with their verdicts. `found` is the object as read now.
pub fn trackers(
    view: &NamespaceView<'_>,
    object: &ObjectRef,
    key: Option<&str>,
    found: Found<'_>,
) -> Vec<Tracker> {
    let plain = Digester::default();
    let digester = view.digester_for(object.kind, &plain);
    let source = object.to_string();
    let listed = std::cell::OnceCell::new();
    let mut trackers = Vec::new();
    for workload in view.workloads {
        let Some((mutation, skipped)) = planned(workload, view) else { continue };
        let Some(target) = mutation.targets.iter().find(|t| t.object == *object) else {
            continue;
        };
        // A ReplicaSet of a listed Deployment, a Pod of a listed ReplicaSet: its owner answers.
        // The namespace's names are read once, and only if some tracker is owned.
        if skipped == Some(Verdict::ControllerOwned)
            && NamespaceView::owner_listed(workload, listed.get_or_init(|| view.listed()))
        {
            continue;
        }
        let keys = keys_of(&target.consumption.keys);
        if key.is_some_and(|k| keys != ["*"] && !keys.iter().any(|read| read == k)) {
            continue;
        }
        let recorded = mutation.existing(target).map(str::to_owned);
        let current = digester
            .and_then(|digester| current_of(mutation.observe(target, digester, found.clone())));
        let name = workload.name();
        let held = view.holds.holds(workload.kind, &name, &source);
        let standing = standing_of(&found);
        let (recorded_now, current_now) = (recorded.as_deref(), current.as_deref());
        let base = input_verdict(skipped, workload.kind, standing, held, recorded_now, current_now);
        let line = Line { source: &source, alias: None, recorded: recorded.as_deref() };
        let failing_current =
            |failing: &ReadWorkload<'_>| current_for_object(view, failing, object, found.clone());
        let (verdict, why) = judge(view, workload, base, &line, &failing_current);
        trackers.push(Tracker {
            kind: workload.kind.as_str(),
            name,
            keys,
            recorded,
            current,
            verdict,
            why,
        });
    }
    trackers.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    trackers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::diagnosis::holds::Holds;
    use crate::core::diagnosis::namespace::Gates;
    use crate::core::diagnosis::namespace::{NamespaceView, ReadWorkload};
    use crate::core::digest::{DigestKeys, ObjectId};
    use crate::core::model::kinds::WorkloadKind;
    use crate::core::model::object_content::ObjectContent;
    use crate::core::model::object_scope::Standing;
    use crate::core::mutate::Settings;
    use crate::core::refs::ConsumedKeys;
    use crate::core::verdict::Verdict;
    use serde_json::Value;
    use serde_json::json;
    use std::collections::BTreeMap;

    const NS: &str = "shop";

    fn digester() -> Digester {
        Digester::new(DigestKeys::parse(b"0123456789abcdef0123456789abcdef").expect("key"))
    }

    fn content(password: &str) -> ObjectContent {
        ObjectContent::from_entries(BTreeMap::from([
            ("password".to_owned(), password.as_bytes().to_vec()),
            ("user".to_owned(), b"shop".to_vec()),
        ]))
    }

    fn digest_of(password: &str, keys: &ConsumedKeys) -> String {
        let object = ObjectRef::secret("db");
        let id = ObjectId { namespace: NS, object: &object };
        digester().digest(id, &content(password), keys, None)
    }

    /// A Deployment `name` reading Secret db as `how`, recording `recorded`, with `annotations`.
    fn deployment(name: &str, how: Value, recorded: Option<String>, annotations: Value) -> String {
        let template_annotations = match recorded {
            Some(digest) => json!({"secret.configsum.dev/db": digest}),
            None => json!({}),
        };
        let mut container = json!({"name": "c", "image": "app:1"});
        if let (Some(container), Some(how)) = (container.as_object_mut(), how.as_object()) {
            container.extend(how.clone());
        }
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": NS, "annotations": annotations},
            "spec": {"template": {"metadata": {"annotations": template_annotations},
                "spec": {"containers": [container]}}}})
        .to_string()
    }

    fn env_key(key: &str) -> Value {
        json!({"env": [{"name": "V", "valueFrom": {"secretKeyRef": {"name": "db", "key": key}}}]})
    }

    #[test]
    fn every_tracker_with_its_keys_and_verdict() {
        let all = json!({"envFrom": [{"secretRef": {"name": "db"}}]});
        let one = ConsumedKeys::Keys(["password".to_owned()].into());
        let workloads = [
            deployment(
                "current",
                all.clone(),
                Some(digest_of("new", &ConsumedKeys::All)),
                json!({}),
            ),
            deployment("stale", env_key("password"), Some(digest_of("old", &one)), json!({})),
            deployment("user-only", env_key("user"), Some("sha256:x".into()), json!({})),
            deployment("fresh", all.clone(), None, json!({})),
            deployment("opted-out", all.clone(), None, json!({"configsum.dev/enabled": "false"})),
            deployment("ignores", all.clone(), None, json!({"configsum.dev/ignore": "secret/db"})),
            deployment("other", json!({}), None, json!({})),
        ];
        let read: Vec<ReadWorkload<'_>> = workloads
            .iter()
            .map(|json| ReadWorkload { kind: WorkloadKind::Deployment, json })
            .collect();
        let secret = ObjectRef::secret("db");
        let new = content("new");
        let settings = Settings::default();
        let digester = digester();
        let holds = Holds::default();
        let view = NamespaceView {
            namespace: NS,
            workloads: &read,
            digester: Some(&digester),
            holds: &holds,
            gates: &Gates::default(),
            settings: &settings,
        };
        let answer = trackers(&view, &secret, None, Ok(Some(&new)));
        let verdicts: Vec<(&str, Verdict)> =
            answer.iter().map(|t| (t.name.as_str(), t.verdict)).collect();
        assert_eq!(
            verdicts,
            [
                ("current", Verdict::Current),
                ("fresh", Verdict::FirstObservation),
                ("opted-out", Verdict::OptedOut),
                ("stale", Verdict::Stale),
                ("user-only", Verdict::Stale),
            ],
            "ignores and other do not track it"
        );
        assert_eq!(answer[3].keys, ["password"]);
        assert_eq!(answer[0].keys, ["*"]);

        // --key password: only the workloads whose pods read it.
        let password = trackers(&view, &secret, Some("password"), Ok(Some(&new)));
        let names: Vec<&str> = password.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["current", "fresh", "opted-out", "stale"]);

        // Without the digest key, a Secret's verdicts cannot be told.
        let keyless = NamespaceView { digester: None, ..view };
        let unknown = trackers(&keyless, &secret, None, Ok(Some(&new)));
        assert_eq!(unknown[0].verdict, Verdict::Unknown);
        assert_eq!(unknown[0].current, None);
        assert_eq!(unknown[1].verdict, Verdict::FirstObservation, "nothing recorded, either way");

        // Deleted: absent.
        let gone = trackers(&view, &secret, None, Ok(None));
        assert_eq!(gone[0].current.as_deref(), Some("absent"));
        assert_eq!(gone[0].verdict, Verdict::Stale);

        // Its owner ignores it: untracked, except where the webhook skips the workload anyway.
        let ignored = content("new").with_standing(Standing::Ignored);
        let untracked = trackers(&view, &secret, None, Ok(Some(&ignored)));
        let verdicts: Vec<(&str, Verdict)> =
            untracked.iter().map(|t| (t.name.as_str(), t.verdict)).collect();
        assert_eq!(
            verdicts,
            [
                ("current", Verdict::Untracked),
                ("fresh", Verdict::Untracked),
                ("opted-out", Verdict::OptedOut),
                ("stale", Verdict::Untracked),
                ("user-only", Verdict::Untracked),
            ]
        );
        assert_eq!(untracked[0].current, None, "no digest is current for it");
    }

    #[test]
    fn jobs_never_roll_and_owned_workloads_say_so() {
        let all = json!({"envFrom": [{"secretRef": {"name": "db"}}]});
        let job = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "migrate", "namespace": NS},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x",
                "envFrom": [{"secretRef": {"name": "db"}}]}]}}}})
        .to_string();
        let mut owned: Value =
            serde_json::from_str(&deployment("owned", all, None, json!({}))).expect("json");
        owned["metadata"]["ownerReferences"] = json!([{"apiVersion": "x/v1", "kind": "App", "name": "a", "uid": "u", "controller": true}]);
        let mut replica_set = owned.clone();
        replica_set["kind"] = json!("ReplicaSet");
        replica_set["metadata"]["name"] = json!("owned-5d4f");
        replica_set["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1",
            "kind": "Deployment", "name": "owned", "uid": "u2", "controller": true}]);
        let (owned, replica_set) = (owned.to_string(), replica_set.to_string());
        let read = [
            ReadWorkload { kind: WorkloadKind::Job, json: &job },
            ReadWorkload { kind: WorkloadKind::Deployment, json: &owned },
            ReadWorkload { kind: WorkloadKind::ReplicaSet, json: &replica_set },
        ];
        let new = content("new");
        let (digester, holds, settings) = (digester(), Holds::default(), Settings::default());
        let view = NamespaceView {
            namespace: NS,
            workloads: &read,
            digester: Some(&digester),
            holds: &holds,
            gates: &Gates::default(),
            settings: &settings,
        };
        let answer = trackers(&view, &ObjectRef::secret("db"), None, Ok(Some(&new)));
        let verdicts: Vec<(&str, Verdict)> = answer.iter().map(|t| (t.kind, t.verdict)).collect();
        assert_eq!(
            verdicts,
            [("Deployment", Verdict::ControllerOwned), ("Job", Verdict::NotRolling)],
            "the ReplicaSet of a listed Deployment is left to its owner"
        );
    }
}
