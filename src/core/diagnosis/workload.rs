//! The answer about one workload: every input it tracks (ConfigMaps and Secrets with their
//! keys, images, `image-env` variables, workloads it rolls with), what its template records
//! for each, what each is now, each one's verdict; and whether its pods run its template.

use serde::Serialize;
use serde_json::Value;

use super::gates::{Line, Why, judge};
use super::namespace::{
    NamespaceView, ReadWorkload, current_for_object, current_of, input_verdict, keys_of, planned,
    standing_of, verdict,
};
use super::rollout::{Rollout, rollout};
use crate::core::digest::Digester;
use crate::core::field_path::read_at;
use crate::core::inputs::image::observation::ImageObservation;
use crate::core::model::object_ref::ObjectRef;
use crate::core::model::object_scope::Standing;
use crate::core::mutate::{Found, Meaning, Mutation, Observation, meaning};
use crate::core::verdict::Verdict;

/// One input of the workload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InputLine {
    /// `secret/db`, `image api`, `image-env api/DIGEST`, `deployment/db`.
    pub input: String,
    /// For a ConfigMap or Secret, the keys its pods read (`["*"]`: every key).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keys: Option<Vec<String>>,
    /// For an image, the reference asked about (`<repository>:<tag>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    pub recorded: Option<String>,
    /// `None` when it cannot be told: a Secret without the digest key, an image whose registry
    /// was not asked or did not answer.
    pub current: Option<String>,
    pub verdict: Verdict,
    /// Why it reads `paused`, `waiting-window` or `halted`.
    #[serde(flatten)]
    pub why: Why,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadAnswer {
    /// `Deployment`, as the API names the kind.
    pub kind: &'static str,
    pub name: String,
    /// The workload's own verdict: why it is skipped, else the most pressing of its inputs'.
    pub verdict: Verdict,
    pub inputs: Vec<InputLine>,
    pub rollout: Rollout,
}

/// The answer about `workload`; `objects` reads a ConfigMap or Secret of the namespace as it
/// is now; `images` has what registries said of its tracked images, in [`plan_of`]'s order
/// (none, or fewer: not asked).
pub fn explain_workload<'o>(
    view: &NamespaceView<'_>,
    workload: &ReadWorkload<'_>,
    objects: &dyn Fn(&ObjectRef) -> Found<'o>,
    images: &[ImageObservation],
) -> WorkloadAnswer {
    let name = workload.name();
    let parsed: Value = serde_json::from_str(workload.json).unwrap_or(Value::Null);
    let rollout = rollout(workload.kind, &parsed);
    let Some((mutation, skipped)) = planned(workload, view) else {
        // Not a workload the webhook plans for (no pod spec to read): it tracks nothing.
        return WorkloadAnswer {
            kind: workload.kind.as_str(),
            name,
            verdict: verdict(None, workload.kind, false, None, None),
            inputs: Vec::new(),
            rollout,
        };
    };
    // The held source is named as holds name it; `line` as the controller's halts do.
    let line_verdict =
        |held_as: &str,
         line: Line<'_>,
         standing: Standing,
         current: Option<&str>,
         failing_current: &dyn Fn(&ReadWorkload<'_>) -> Option<String>| {
            let held = view.holds.holds(workload.kind, &name, held_as);
            let kind = workload.kind;
            let base = input_verdict(skipped, kind, standing, held, line.recorded, current);
            judge(view, workload, base, &line, failing_current)
        };
    let plain = Digester::default();
    let mut inputs = Vec::new();
    for target in &mutation.targets {
        let source = target.object.to_string();
        let recorded = mutation.existing(target).map(str::to_owned);
        let found = objects(&target.object);
        // Where a token names a key of the workload's own object or another namespace's
        // object, only what it stands for is listed.
        let seen = match &found {
            Ok(Some(_)) => Observation::Digest(String::new()),
            Ok(None) => Observation::Absent,
            Err(why) => Observation::Unreadable(why.clone()),
        };
        let own_exists =
            target.reach.decided_by(&target.object).and_then(|own| match objects(&own) {
                Ok(found) => Some(found.is_some()),
                Err(_) => None,
            });
        if meaning(target, &seen, own_exists) == Meaning::Elsewhere {
            continue;
        }
        // Another namespace's object that is missing or withholds consent: no digest.
        let refused = target.object.namespace.is_some()
            && match &found {
                Ok(Some(content)) => !content.readable_from(&mutation.namespace),
                Ok(None) => true,
                Err(_) => false,
            };
        let current = view
            .digester_for(target.object.kind, &plain)
            .filter(|_| !refused)
            .and_then(|digester| current_of(mutation.observe(target, digester, found.clone())));
        let standing = match refused {
            true => Standing::Unselected,
            false => standing_of(&objects(&target.object)),
        };
        let line = Line { source: &source, alias: None, recorded: recorded.as_deref() };
        // Each workload has its own digest of the object: of the keys its pods read.
        let failing_current = |failing: &ReadWorkload<'_>| {
            current_for_object(view, failing, &target.object, objects(&target.object))
        };
        let (verdict, why) =
            line_verdict(&source, line, standing, current.as_deref(), &failing_current);
        inputs.push(InputLine {
            verdict,
            why,
            input: source,
            keys: Some(keys_of(&target.consumption.keys)),
            reference: None,
            recorded,
            current,
        });
    }
    for (index, image) in mutation.images.targets().iter().enumerate() {
        let input = match image.variable() {
            Some(variable) => format!("image-env {}/{variable}", image.container),
            None => format!("image {}", image.container),
        };
        let source = format!("image {}", image.written);
        let current = match images.get(index) {
            Some(ImageObservation::Digest(digest)) => Some(digest.clone()),
            _ => None,
        };
        // The controller names an image by the reference it asks about; a tag's digest is
        // the same for every workload that runs it.
        let asked = format!("image {}", image.reference);
        let line =
            Line { source: &asked, alias: Some(&source), recorded: image.recorded.as_deref() };
        let failing_current = |_: &ReadWorkload<'_>| current.clone();
        let (verdict, why) =
            line_verdict(&source, line, Standing::Tracked, current.as_deref(), &failing_current);
        inputs.push(InputLine {
            input,
            keys: None,
            reference: Some(image.reference.clone()),
            verdict,
            why,
            recorded: image.recorded.clone(),
            current,
        });
    }
    for tracked in &mutation.workloads {
        let source = tracked.to_string();
        let recorded = mutation.existing_annotation(&tracked.key).map(str::to_owned);
        let template = view
            .workloads
            .iter()
            .find(|w| w.kind == tracked.kind && w.name() == tracked.name)
            .and_then(|w| template_of(w));
        let found = Ok(template.as_ref());
        let current = current_of(mutation.observe_workload(found, &view.settings.domain));
        let line = Line { source: &source, alias: None, recorded: recorded.as_deref() };
        // A template's digest is the same for every workload that tracks it.
        let failing_current = |_: &ReadWorkload<'_>| current.clone();
        let (verdict, why) =
            line_verdict(&source, line, Standing::Tracked, current.as_deref(), &failing_current);
        inputs.push(InputLine {
            verdict,
            why,
            input: source,
            keys: None,
            reference: None,
            recorded,
            current,
        });
    }
    WorkloadAnswer {
        kind: workload.kind.as_str(),
        name,
        verdict: overall(skipped, workload, &inputs),
        inputs,
        rollout,
    }
}

/// The webhook's plan for `workload`: what [`explain_workload`] will ask about (its
/// ConfigMaps and Secrets in `targets`, its images in `images.targets()`).
pub fn plan_of(view: &NamespaceView<'_>, workload: &ReadWorkload<'_>) -> Option<Mutation> {
    planned(workload, view).map(|(mutation, _)| mutation)
}

/// A workload's pod template, as the webhook reads a tracked one (`Null` when it has none).
fn template_of(workload: &ReadWorkload<'_>) -> Option<Value> {
    let path = workload.kind.declaration().template?;
    let found: Option<Value> = read_at(workload.json, path).ok()?;
    Some(found.unwrap_or(Value::Null))
}

/// The workload's verdict: its skip, else the most pressing of its inputs' verdicts. Those
/// that say why a stale input does not roll come first, in the order of the controller's
/// gates (flap guard, pause, window, waves): the first gate that holds the workload is the one
/// its `configsum_controller_workloads{verdict}` gauge counts it under, so explain and the
/// gauge give a workload one word. `stale` is next: it rolls without anyone's help.
fn overall(skipped: Option<Verdict>, workload: &ReadWorkload<'_>, inputs: &[InputLine]) -> Verdict {
    const PRESSING: [Verdict; 8] = [
        Verdict::Held,
        Verdict::Paused,
        Verdict::WaitingWindow,
        Verdict::Halted,
        Verdict::Stale,
        Verdict::Unknown,
        Verdict::FirstObservation,
        Verdict::Current,
    ];
    let first = verdict(skipped, workload.kind, false, Some(""), Some(""));
    if first != Verdict::Current {
        return first;
    }
    PRESSING
        .into_iter()
        .find(|v| inputs.iter().any(|line| line.verdict == *v))
        .unwrap_or(Verdict::Current)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::diagnosis::holds::{ControllerEvent, HOLD_REASON, Holds, hold_message};
    use crate::core::diagnosis::namespace::Gates;
    use crate::core::digest::{DigestKeys, ObjectId};
    use crate::core::model::kinds::WorkloadKind;
    use crate::core::model::object_content::ObjectContent;
    use crate::core::mutate::Settings;
    use crate::core::refs::ConsumedKeys;
    use serde_json::json;
    use std::collections::BTreeMap;

    const NS: &str = "shop";

    fn digester() -> Digester {
        Digester::new(DigestKeys::parse(b"0123456789abcdef0123456789abcdef").expect("key"))
    }

    #[test]
    fn every_input_with_its_recorded_and_current_value() {
        let secret =
            ObjectContent::from_entries(BTreeMap::from([("password".to_owned(), b"new".to_vec())]));
        let config = ObjectContent::from_entries(BTreeMap::from([("a".to_owned(), b"1".to_vec())]));
        let db_ref = ObjectRef::secret("db");
        let cm_ref = ObjectRef::config_map("app");
        let cm_digest = Digester::default().digest(
            ObjectId { namespace: NS, object: &cm_ref },
            &config,
            &ConsumedKeys::All,
            None,
        );
        let db = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "db", "namespace": NS},
            "spec": {"template": {"spec": {"containers": [{"name": "pg", "image": "pg:16"}]}}}})
        .to_string();
        let api = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "api", "namespace": NS, "generation": 2,
                "annotations": {"configsum.dev/track": "*, deployment/db", "configsum.dev/images": "*"}},
            "spec": {"replicas": 2, "template": {
                "metadata": {"annotations": {
                    "configmap.configsum.dev/app": cm_digest,
                    "secret.configsum.dev/db": "hmac-sha256:old",
                    "image.configsum.dev/api": format!("sha256:{}", "a".repeat(64))}},
                "spec": {"containers": [{"name": "api", "image": "ghcr.io/org/api:prod",
                    "envFrom": [{"configMapRef": {"name": "app"}}],
                    "env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}]}]}}},
            "status": {"observedGeneration": 2, "replicas": 3, "updatedReplicas": 1}})
        .to_string();
        let workloads = [
            ReadWorkload { kind: WorkloadKind::Deployment, json: &api },
            ReadWorkload { kind: WorkloadKind::Deployment, json: &db },
        ];
        let digester = digester();
        let hold = ControllerEvent {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "api".into(),
            reason: HOLD_REASON.into(),
            message: hold_message("secret/db", 5, std::time::Duration::from_secs(600)),
            at: 100,
        };
        let holds = Holds::from_events(&[hold], 100);
        let settings = Settings::default();
        let view = NamespaceView {
            namespace: NS,
            workloads: &workloads,
            digester: Some(&digester),
            holds: &holds,
            gates: &Gates::default(),
            settings: &settings,
        };
        let objects = |object: &ObjectRef| -> Found<'_> {
            Ok(if *object == db_ref {
                Some(&secret)
            } else if *object == cm_ref {
                Some(&config)
            } else {
                None
            })
        };
        let moved = ImageObservation::Digest(format!("sha256:{}", "b".repeat(64)));
        let answer = explain_workload(&view, &workloads[0], &objects, &[moved]);
        let lines: Vec<(&str, Verdict)> =
            answer.inputs.iter().map(|l| (l.input.as_str(), l.verdict)).collect();
        assert_eq!(
            lines,
            [
                ("configmap/app", Verdict::Current),
                ("secret/db", Verdict::Held),
                ("image api", Verdict::Stale),
                ("deployment/db", Verdict::FirstObservation),
            ]
        );
        assert_eq!(answer.verdict, Verdict::Held);
        assert_eq!(answer.inputs[1].keys.as_deref(), Some(&["password".to_owned()][..]));
        assert_eq!(answer.inputs[2].reference.as_deref(), Some("ghcr.io/org/api:prod"));
        assert!(answer.inputs[3].current.as_deref().is_some_and(|d| d.starts_with("sha256:")));
        assert_eq!(answer.rollout.state, super::super::rollout::RolloutState::Progressing);

        // Without holds, the Secret is stale; the tracked workload gone reads absent.
        let none = Holds::default();
        let alone = [workloads[0]];
        let view = NamespaceView { holds: &none, workloads: &alone, ..view };
        let answer = explain_workload(&view, &workloads[0], &objects, &[]);
        assert_eq!(answer.inputs[1].verdict, Verdict::Stale);
        assert_eq!(answer.inputs[2].verdict, Verdict::Unknown, "no registry asked");
        assert_eq!(answer.inputs[3].current.as_deref(), Some("absent"));
        assert_eq!(answer.verdict, Verdict::Stale);
    }
}
