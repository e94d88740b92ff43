//! Workloads as the controller's watches deliver them, and the webhook's plan
//! for each. A workload is planned as the kind of the watch it came from: the
//! API server omits `apiVersion` and `kind` on the items of a list
//! (kubernetes/kubernetes#3030), so the object's own fields cannot say it.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::core::field_path::read_at;
use crate::core::inputs::image::PodImages;
use crate::core::inputs::workload_template::{template_digest, template_digest_of_json};
use crate::core::model::kinds::WorkloadKind;
use crate::core::model::pod_spec::Metadata;
use crate::core::rollout_health::{Health, SpecParts, health_of_parts};
use crate::core::verdict::Verdict;
use crate::core::{AnnotationDomain, Mutation, Plan, Settings, plan};

use super::wave_record::WaveRecord;

/// A workload the controller may roll. Its names are shared, not copied: every index holds
/// the key of each workload it knows (the snapshots, the references both ways, the queue),
/// and a clone is a count rather than two allocations.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkloadKey {
    pub kind: WorkloadKind,
    pub namespace: Arc<str>,
    pub name: Arc<str>,
}

impl std::fmt::Display for WorkloadKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{}", self.kind.as_str(), self.namespace, self.name)
    }
}

/// What the controller keeps of a watched workload: the webhook's plan for
/// it (targets, consumed keys, current digests), small and free of data.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub mutation: Mutation,
    pub resource_version: Option<String>,
    pub uid: Option<String>,
    pub rollout: RolloutFacts,
}

/// What rolling it safely needs to know of a workload (docs/behaviour.md, "Rolling safely"):
/// its rollout's health, judged when the watch delivered it (the status is then dropped), and
/// the annotations that place it in waves, windows and pauses.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RolloutFacts {
    /// `metadata.generation`: a status judged before a patch reached it is not the patch's.
    pub generation: Option<i64>,
    pub health: Health,
    /// `<domain>/canary: "true"`.
    pub canary: bool,
    /// `<domain>/paused: "true"`.
    pub paused: bool,
    /// `<domain>/roll-window`, as written (bounded by the grammar's limit when parsed).
    pub roll_window: Option<Box<str>>,
    /// `<domain>/waves`: the waves it rolled in.
    pub waves: WaveRecord,
    /// Whether `metadata.annotations` exists: a JSON Patch must create it before a key.
    pub annotated: bool,
}

/// Only what the plan reads of a watched workload: its metadata, read sparsely (no
/// `managedFields`, no labels), and the text of its `spec`, which is read by the kind's row
/// when the workload is planned and then dropped (the API server omits `kind` on list items,
/// so the decode cannot know the kind). Its `status` is skipped unread.
#[derive(Clone, Debug, Deserialize)]
#[serde(try_from = "Wire")]
pub struct WatchedWorkload {
    /// Name, namespace, uid and resourceVersion: what kube's watcher needs.
    meta: ObjectMeta,
    metadata: Metadata,
    spec: Option<Box<RawValue>>,
    status: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Wire {
    #[serde(default)]
    metadata: Metadata,
    spec: Option<Box<RawValue>>,
    /// Judged into [`RolloutFacts::health`] and dropped.
    #[serde(default)]
    status: Option<serde_json::Value>,
}

/// What a rollout's judgement reads of a spec besides the status; any other type reads as
/// absent.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecWire {
    #[serde(default)]
    replicas: Option<serde_json::Value>,
    #[serde(default)]
    update_strategy: Option<serde_json::Value>,
}

impl TryFrom<Wire> for WatchedWorkload {
    type Error = serde_json::Error;

    fn try_from(wire: Wire) -> Result<Self, serde_json::Error> {
        let m = &wire.metadata;
        let meta = ObjectMeta {
            name: m.name.clone(),
            namespace: m.namespace.clone(),
            uid: m.uid.clone(),
            resource_version: m.resource_version.clone(),
            ..ObjectMeta::default()
        };
        Ok(WatchedWorkload { meta, metadata: wire.metadata, spec: wire.spec, status: wire.status })
    }
}

dynamic_resource!(WatchedWorkload, metadata: false);

impl WatchedWorkload {
    pub fn key(&self, kind: WorkloadKind) -> Option<WorkloadKey> {
        Some(WorkloadKey {
            kind,
            namespace: self.meta.namespace.as_deref()?.into(),
            name: self.meta.name.as_deref()?.into(),
        })
    }

    pub fn resource_version(&self) -> Option<&str> {
        self.meta.resource_version.as_deref()
    }

    pub fn uid(&self) -> Option<&str> {
        self.meta.uid.as_deref()
    }

    /// What rolling it safely needs to know of it, as `kind`, under `domain`.
    pub fn rollout_facts(&self, kind: WorkloadKind, domain: &AnnotationDomain) -> RolloutFacts {
        let spec =
            self.spec.as_deref().and_then(|s| serde_json::from_str::<SpecWire>(s.get()).ok());
        let parts = SpecParts {
            generation: self.metadata.generation,
            replicas: spec
                .as_ref()
                .and_then(|s| s.replicas.as_ref())
                .and_then(serde_json::Value::as_i64),
            on_delete: spec
                .as_ref()
                .and_then(|s| s.update_strategy.as_ref())
                .and_then(|u| u.get("type"))
                .and_then(serde_json::Value::as_str)
                == Some("OnDelete"),
        };
        let annotations = self.metadata.annotations.as_ref();
        let annotation = |name: String| annotations.and_then(|a| a.get(&name));
        RolloutFacts {
            generation: self.metadata.generation,
            health: health_of_parts(kind, parts, self.status.as_ref()),
            canary: annotation(domain.canary()).is_some_and(|v| v == "true"),
            paused: annotation(domain.paused()).is_some_and(|v| v == "true"),
            roll_window: annotation(domain.roll_window()).map(|w| w.as_str().into()),
            waves: annotation(domain.waves()).map(|w| WaveRecord::parse(w)).unwrap_or_default(),
            annotated: annotations.is_some(),
        }
    }

    /// Its pod template, as a template read would find it (the tests' API).
    #[cfg(test)]
    pub fn template(&self, kind: WorkloadKind) -> Option<serde_json::Value> {
        let path = kind.declaration().template?.get(1..)?;
        read_at(self.spec.as_deref()?.get(), path).ok()?
    }

    /// The digest of its pod template, as a workload tracking it records it; `None` for a kind
    /// no workload may track. Read from the spec's text, before the plan drops it.
    pub fn template_digest(&self, kind: WorkloadKind, prefixes: &[String]) -> Option<String> {
        if !kind.trackable() {
            return None;
        }
        // The template path starts at `spec` (kinds.rs refuses any other).
        let path = kind.declaration().template?.get(1..)?;
        let spec = self.spec.as_deref().map(RawValue::get);
        let template: Option<&RawValue> = match spec {
            Some(spec) => read_at(spec, path).ok()?,
            None => None,
        };
        // As the webhook digests it (a missing template is `null`), without building the tree
        // unless the template is too deep for the text path.
        let text = template.map_or("null", RawValue::get);
        template_digest_of_json(text, prefixes).or_else(|| {
            let tree: serde_json::Value = serde_json::from_str(text).ok()?;
            Some(template_digest(&tree, prefixes))
        })
    }

    /// The webhook's rules (owners, opt-out, track/ignore, name checks,
    /// limits) applied to this workload as `kind`; `None` when the webhook
    /// would leave it alone. The controller's patch goes through the webhook,
    /// so only the object itself counts: there is no old object.
    pub fn plan(self, kind: WorkloadKind, settings: &Settings) -> Option<Mutation> {
        self.plan_or_skip(kind, settings).ok()
    }

    /// As [`Self::plan`], saying why the webhook leaves it alone when a user would ask
    /// (`opted-out`, `controller-owned`).
    pub fn plan_or_skip(
        self,
        kind: WorkloadKind,
        settings: &Settings,
    ) -> Result<Mutation, Option<Verdict>> {
        let spec = self.spec.as_deref().map(RawValue::get);
        let workload = kind.from_parts(self.metadata, spec).map_err(|_| None)?;
        let mutation = match plan(workload, &BTreeMap::new(), settings) {
            Plan::Mutate(mutation) => mutation,
            Plan::Skip(skip) => return Err(Verdict::of_skip(skip)),
            Plan::Unparsable(_) => return Err(None),
        };
        // Without a readable spec the image annotations are kept as they are.
        let read = |_env| spec.and_then(|spec| PodImages::of_spec(kind, spec).ok()).map(Ok);
        mutation.with_pod_images::<std::convert::Infallible>(settings, read).map_err(|_| None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ObjectRef;
    use serde_json::json;

    fn deployment(with_types: bool) -> serde_json::Value {
        let mut object = json!({"metadata": {"name": "web", "namespace": "ns", "uid": "u1",
                "resourceVersion": "7", "annotations": {"configsum.dev/ignore": "secret/skip"},
                "managedFields": [{"manager": "kubectl"}]},
            "spec": {"replicas": 2, "template": {"metadata": {"annotations": {"configmap.configsum.dev/app": "sha256:00"}},
                "spec": {"containers": [{"name": "c", "image": "nginx",
                    "env": [{"name": "PLAIN", "value": "x"}],
                    "envFrom": [{"configMapRef": {"name": "app"}}, {"secretRef": {"name": "skip"}}]}]}}},
            "status": {"replicas": 2}});
        if with_types {
            object["apiVersion"] = json!("apps/v1");
            object["kind"] = json!("Deployment");
        }
        object
    }

    #[test]
    fn rollout_facts_judge_the_status_and_read_the_annotations_then_drop_them() {
        let domain = AnnotationDomain::default();
        let mut object = deployment(false);
        object["metadata"]["generation"] = json!(3);
        object["metadata"]["annotations"] = json!({
            "configsum.dev/canary": "true",
            "configsum.dev/paused": "yes",
            "configsum.dev/roll-window": "* 02:00-04:00 UTC",
            "configsum.dev/waves": r#"{"secret/db":{"change":"0123456789ab","wave":2,"at":"2026-11-28T16:00:00Z"}}"#,
        });
        object["status"] = json!({"observedGeneration": 3, "replicas": 2, "updatedReplicas": 2,
            "availableReplicas": 2});
        let watched: WatchedWorkload = serde_json::from_value(object.clone()).expect("decodes");
        let facts = watched.rollout_facts(WorkloadKind::Deployment, &domain);
        assert_eq!(facts.generation, Some(3));
        assert_eq!(facts.health, Health::Complete);
        assert!(facts.canary);
        assert!(!facts.paused, "only \"true\" pauses");
        assert_eq!(facts.roll_window.as_deref(), Some("* 02:00-04:00 UTC"));
        assert_eq!(facts.waves.get("secret/db").map(|e| e.wave), Some(2));

        // Behind: the status describes generation 2, so the patch of generation 3 is not done.
        object["status"]["observedGeneration"] = json!(2);
        let watched: WatchedWorkload = serde_json::from_value(object.clone()).expect("decodes");
        assert_eq!(
            watched.rollout_facts(WorkloadKind::Deployment, &domain).health,
            Health::Progressing
        );
        // Hostile types read as absent, never as a failure to decode.
        object["metadata"]["generation"] = json!("3");
        object["spec"]["replicas"] = json!("two");
        let watched: WatchedWorkload = serde_json::from_value(object).expect("decodes");
        let facts = watched.rollout_facts(WorkloadKind::Deployment, &domain);
        assert_eq!((facts.generation, facts.health), (None, Health::Progressing));
    }

    #[test]
    fn a_list_item_without_types_is_planned_as_the_watched_kind() {
        for with_types in [false, true] {
            let watched: WatchedWorkload =
                serde_json::from_value(deployment(with_types)).expect("decodes");
            let key = watched.key(WorkloadKind::Deployment).expect("key");
            assert_eq!(key.to_string(), "Deployment ns/web");
            assert_eq!(watched.resource_version(), Some("7"));
            assert_eq!(watched.uid(), Some("u1"));
            let mutation = watched
                .plan(WorkloadKind::Deployment, &Settings::default())
                .expect("the webhook would mutate it");
            let objects: Vec<_> = mutation.targets.iter().map(|t| t.object.clone()).collect();
            assert_eq!(objects, vec![ObjectRef::config_map("app")], "ignore is honoured");
            assert!(mutation.existing_annotation("configmap.configsum.dev/app").is_some());
        }
    }

    #[test]
    fn the_template_digest_is_the_webhooks_and_leaves_the_tracking_annotations_out() {
        let prefixes = crate::core::AnnotationDomain::default().workload_prefixes();
        let object = deployment(false);
        let watched: WatchedWorkload = serde_json::from_value(object.clone()).expect("decodes");
        let digest = watched.template_digest(WorkloadKind::Deployment, &prefixes);
        let expected = template_digest(&object["spec"]["template"], &prefixes);
        assert_eq!(digest.as_deref(), Some(expected.as_str()));
        let mut tracking = object.clone();
        tracking["spec"]["template"]["metadata"]["annotations"]["deployment.configsum.dev/b"] =
            json!("sha256:11");
        let watched: WatchedWorkload = serde_json::from_value(tracking).expect("decodes");
        assert_eq!(watched.template_digest(WorkloadKind::Deployment, &prefixes), digest);
        let mut restarted = object;
        restarted["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"] =
            json!("2026-11-27T12:00:00Z");
        let watched: WatchedWorkload = serde_json::from_value(restarted).expect("decodes");
        assert_ne!(watched.template_digest(WorkloadKind::Deployment, &prefixes), digest);
        assert_eq!(watched.template_digest(WorkloadKind::Job, &prefixes), None, "not trackable");
    }

    #[test]
    fn the_image_pass_reads_the_watched_spec_of_workloads_that_track_images() {
        let mut tracking = deployment(false);
        tracking["metadata"]["annotations"]["configsum.dev/images"] = json!("c");
        let watched: WatchedWorkload = serde_json::from_value(tracking).expect("decodes");
        let mutation = watched.plan(WorkloadKind::Deployment, &Settings::default()).expect("plan");
        let targets: Vec<_> = mutation.images.targets().iter().map(|t| &t.reference).collect();
        assert_eq!(targets, ["nginx:latest"]);
        assert_eq!(mutation.images.credentials().1, "default");

        let mut recorded = deployment(false);
        recorded["spec"]["template"]["metadata"]["annotations"]["image.configsum.dev/c"] =
            json!("sha256:00");
        let watched: WatchedWorkload = serde_json::from_value(recorded).expect("decodes");
        let mutation = watched.plan(WorkloadKind::Deployment, &Settings::default()).expect("plan");
        assert!(mutation.images.targets().is_empty(), "recorded but not tracked: removed, no read");

        let plain: WatchedWorkload = serde_json::from_value(deployment(false)).expect("decodes");
        let mutation = plain.plan(WorkloadKind::Deployment, &Settings::default()).expect("plan");
        assert!(mutation.images.targets().is_empty());
    }

    #[test]
    fn what_the_webhook_leaves_alone_is_not_planned() {
        let mut owned = deployment(false);
        owned["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "X", "name": "o", "uid": "1", "controller": true}]);
        let mut disabled = deployment(false);
        disabled["metadata"]["annotations"]["configsum.dev/enabled"] = json!("false");
        for object in [owned, disabled] {
            let watched: WatchedWorkload = serde_json::from_value(object).expect("decodes");
            assert!(watched.plan(WorkloadKind::Deployment, &Settings::default()).is_none());
        }
        let no_template: WatchedWorkload = serde_json::from_value(
            json!({"metadata": {"name": "x", "namespace": "ns"}, "spec": {}}),
        )
        .expect("decodes");
        assert!(no_template.plan(WorkloadKind::StatefulSet, &Settings::default()).is_none());
    }
}
