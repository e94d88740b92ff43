//! `configsum explain`'s answer about a ConfigMap or Secret, pure: which workloads of the
//! namespace track it (the webhook's own plan: `track`, `ignore`, opt-out and ownership
//! applied), the keys each consumes, and each one's verdict. The shell reads the workloads
//! and the object, from the cluster or from files; nothing here is I/O.

use serde::Serialize;
use serde_json::Value;

use super::kinds::Controller;
use super::refs::ConsumedKeys;
use super::review::{Request, plan_review};
use super::verdict::Verdict;
use super::workload::WorkloadKind;
use super::{Digester, Found, Mutation, ObjectKind, ObjectRef, Observation, Plan, Settings, Skip};

/// A workload as read, and its kind.
#[derive(Clone, Copy, Debug)]
pub struct ReadWorkload<'a> {
    pub kind: WorkloadKind,
    /// The object's JSON.
    pub json: &'a str,
}

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
}

/// The workloads among `workloads` that track `object` in `namespace` (with `key`: only those
/// whose pods read that key), with their verdicts. `found` is the object as read now;
/// `digester` is `None` when the digest key is unknown, which makes Secrets' verdicts
/// `unknown` (ConfigMap digests are never keyed).
pub fn trackers(
    object: &ObjectRef,
    namespace: &str,
    key: Option<&str>,
    workloads: &[ReadWorkload<'_>],
    found: Found<'_>,
    digester: Option<&Digester>,
    settings: &Settings,
) -> Vec<Tracker> {
    let plain = Digester::default();
    let digester = match (object.kind, digester) {
        (ObjectKind::Secret, None) => None,
        (_, Some(digester)) => Some(digester),
        (_, None) => Some(&plain),
    };
    let mut trackers = Vec::new();
    for workload in workloads {
        let Some((mutation, skipped)) = planned(workload, namespace, settings) else { continue };
        let Some(target) = mutation.targets.iter().find(|t| t.object == *object) else {
            continue;
        };
        let keys = match &target.consumption.keys {
            ConsumedKeys::All => vec!["*".to_owned()],
            ConsumedKeys::Keys(keys) => keys.iter().cloned().collect(),
        };
        if key.is_some_and(|k| keys != ["*"] && !keys.iter().any(|read| read == k)) {
            continue;
        }
        let recorded = mutation.existing(target).map(str::to_owned);
        let current =
            digester.and_then(|digester| match mutation.observe(target, digester, found.clone()) {
                Observation::Digest(digest) => Some(digest),
                Observation::Absent => Some(super::digest::ABSENT.to_owned()),
                Observation::Unreadable(_) => None,
            });
        let rolls = workload.kind.declaration().controller != Controller::Never;
        let verdict = match skipped {
            Some(verdict) => verdict,
            None if !rolls => Verdict::NotRolling,
            None => Verdict::of_input(recorded.as_deref(), current.as_deref()),
        };
        let name = name_of(workload.json);
        trackers.push(Tracker {
            kind: workload.kind.as_str(),
            name,
            keys,
            recorded,
            current,
            verdict,
        });
    }
    trackers.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    trackers
}

/// The webhook's plan for a workload; one it skips for opt-out or ownership is planned as if
/// it had neither, with that verdict, so that what it would track still shows.
fn planned(
    workload: &ReadWorkload<'_>,
    namespace: &str,
    settings: &Settings,
) -> Option<(Mutation, Option<Verdict>)> {
    let plan = |json: &str| {
        let (group, version, _) = workload.kind.resource();
        let request = Request {
            group,
            version,
            kind: workload.kind.as_str(),
            // Every kind is mutated on CREATE; what is recorded is read from the object.
            operation: "CREATE",
            namespace: Some(namespace),
            object: Some(json),
            ..Request::default()
        };
        plan_review(&request, settings)
    };
    match plan(workload.json) {
        Plan::Mutate(mutation) => Some((mutation, None)),
        Plan::Skip(skip @ (Skip::Disabled | Skip::ControllerOwned)) => {
            let mut object: Value = serde_json::from_str(workload.json).ok()?;
            let metadata = object.get_mut("metadata")?.as_object_mut()?;
            match skip {
                Skip::Disabled => {
                    let annotations = metadata.get_mut("annotations")?.as_object_mut()?;
                    annotations.remove(&settings.domain.enabled());
                }
                _ => {
                    metadata.remove("ownerReferences");
                }
            }
            match plan(&object.to_string()) {
                Plan::Mutate(mutation) => Some((mutation, Verdict::of_skip(skip))),
                _ => None,
            }
        }
        _ => None,
    }
}

fn name_of(json: &str) -> String {
    let name: Option<String> =
        super::field_path::read_at(json, &["metadata", "name"]).ok().flatten();
    name.unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{DigestKeys, ObjectContent, ObjectId};
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
        let answer = trackers(&secret, NS, None, &read, Ok(Some(&new)), Some(&digester), &settings);
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
        let password = trackers(
            &secret,
            NS,
            Some("password"),
            &read,
            Ok(Some(&new)),
            Some(&digester),
            &settings,
        );
        let names: Vec<&str> = password.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["current", "fresh", "opted-out", "stale"]);

        // Without the digest key, a Secret's verdicts cannot be told.
        let unknown = trackers(&secret, NS, None, &read, Ok(Some(&new)), None, &settings);
        assert_eq!(unknown[0].verdict, Verdict::Unknown);
        assert_eq!(unknown[0].current, None);
        assert_eq!(unknown[1].verdict, Verdict::FirstObservation, "nothing recorded, either way");

        // Deleted: absent.
        let gone = trackers(&secret, NS, None, &read, Ok(None), Some(&digester), &settings);
        assert_eq!(gone[0].current.as_deref(), Some("absent"));
        assert_eq!(gone[0].verdict, Verdict::Stale);
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
        let owned = owned.to_string();
        let read = [
            ReadWorkload { kind: WorkloadKind::Job, json: &job },
            ReadWorkload { kind: WorkloadKind::Deployment, json: &owned },
        ];
        let new = content("new");
        let answer = trackers(
            &ObjectRef::secret("db"),
            NS,
            None,
            &read,
            Ok(Some(&new)),
            Some(&digester()),
            &Settings::default(),
        );
        let verdicts: Vec<(&str, Verdict)> = answer.iter().map(|t| (t.kind, t.verdict)).collect();
        assert_eq!(
            verdicts,
            [("Deployment", Verdict::ControllerOwned), ("Job", Verdict::NotRolling)]
        );
    }
}
