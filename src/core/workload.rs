//! The workload kinds configsum mutates (SPEC §1 table): how to recognise each
//! from `request.kind`, which operations it mutates, where its pod template's
//! annotations live, and how to read its pod template from the object.
//!
//! A new workload kind is one new `WorkloadKind` variant and one arm in each
//! `match` below.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde::de::DeserializeOwned;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

impl Operation {
    pub fn parse(wire: &str) -> Option<Self> {
        match wire {
            "CREATE" => Some(Operation::Create),
            "UPDATE" => Some(Operation::Update),
            "DELETE" => Some(Operation::Delete),
            "CONNECT" => Some(Operation::Connect),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
    DaemonSet,
    ReplicaSet,
    Job,
    Rollout,
    Pod,
}

const TEMPLATE_ANNOTATIONS: &[&str] = &["spec", "template", "metadata", "annotations"];
const OBJECT_ANNOTATIONS: &[&str] = &["metadata", "annotations"];

impl WorkloadKind {
    /// Every kind configsum mutates; the webhook's rules must list exactly these.
    pub const ALL: [WorkloadKind; 7] = [
        WorkloadKind::Deployment,
        WorkloadKind::StatefulSet,
        WorkloadKind::DaemonSet,
        WorkloadKind::ReplicaSet,
        WorkloadKind::Job,
        WorkloadKind::Rollout,
        WorkloadKind::Pod,
    ];

    /// API group, version and resource (plural), as in webhook rules.
    pub fn resource(self) -> (&'static str, &'static str, &'static str) {
        match self {
            WorkloadKind::Deployment => ("apps", "v1", "deployments"),
            WorkloadKind::StatefulSet => ("apps", "v1", "statefulsets"),
            WorkloadKind::DaemonSet => ("apps", "v1", "daemonsets"),
            WorkloadKind::ReplicaSet => ("apps", "v1", "replicasets"),
            WorkloadKind::Job => ("batch", "v1", "jobs"),
            WorkloadKind::Rollout => ("argoproj.io", "v1alpha1", "rollouts"),
            WorkloadKind::Pod => ("", "v1", "pods"),
        }
    }

    /// The kind for a `request.kind`, or `None` for kinds left untouched
    /// (CronJobs among them: their Jobs are written later, from a copy).
    pub fn from_gvk(group: &str, version: &str, kind: &str) -> Option<Self> {
        match (group, version, kind) {
            ("apps", "v1", "Deployment") => Some(WorkloadKind::Deployment),
            ("apps", "v1", "StatefulSet") => Some(WorkloadKind::StatefulSet),
            ("apps", "v1", "DaemonSet") => Some(WorkloadKind::DaemonSet),
            ("apps", "v1", "ReplicaSet") => Some(WorkloadKind::ReplicaSet),
            ("batch", "v1", "Job") => Some(WorkloadKind::Job),
            ("argoproj.io", "v1alpha1", "Rollout") => Some(WorkloadKind::Rollout),
            ("", "v1", "Pod") => Some(WorkloadKind::Pod),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::DaemonSet => "DaemonSet",
            WorkloadKind::ReplicaSet => "ReplicaSet",
            WorkloadKind::Job => "Job",
            WorkloadKind::Rollout => "Rollout",
            WorkloadKind::Pod => "Pod",
        }
    }

    /// Jobs and Pods are mutated on CREATE only: their pod spec is immutable.
    pub fn mutates(self, operation: Operation) -> bool {
        match self {
            WorkloadKind::Job | WorkloadKind::Pod => operation == Operation::Create,
            _ => matches!(operation, Operation::Create | Operation::Update),
        }
    }

    /// JSON path tokens of the annotations map that carries the digests.
    pub fn annotations_path(self) -> &'static [&'static str] {
        match self {
            WorkloadKind::Pod => OBJECT_ANNOTATIONS,
            _ => TEMPLATE_ANNOTATIONS,
        }
    }

    /// Reads the object as this kind.
    pub fn parse(self, object: &str) -> Result<Workload, ParseError> {
        match self {
            WorkloadKind::Deployment => {
                templated(object, |d: Deployment| (d.metadata, d.spec.map(|s| s.template)))
            }
            WorkloadKind::StatefulSet => {
                templated(object, |s: StatefulSet| (s.metadata, s.spec.map(|s| s.template)))
            }
            WorkloadKind::DaemonSet => {
                templated(object, |d: DaemonSet| (d.metadata, d.spec.map(|s| s.template)))
            }
            WorkloadKind::ReplicaSet => {
                templated(object, |r: ReplicaSet| (r.metadata, r.spec.and_then(|s| s.template)))
            }
            WorkloadKind::Job => {
                templated(object, |j: Job| (j.metadata, j.spec.map(|s| s.template)))
            }
            WorkloadKind::Rollout => parse_rollout(object),
            WorkloadKind::Pod => {
                let pod: Pod = serde_json::from_str(object)?;
                let spec = pod.spec.ok_or(ParseError::NoPodSpec)?;
                let annotations = pod.metadata.annotations.clone();
                Ok(Workload {
                    metadata: pod.metadata,
                    template: Template::Present(Box::new(PodTemplate {
                        metadata_present: true,
                        annotations,
                        spec,
                    })),
                })
            }
        }
    }

    /// Only the digest-carrying annotations of an object (for `oldObject`, whose
    /// annotations are the fallback "existing" values); anything unreadable is empty.
    pub fn annotations_of(self, object: &str) -> BTreeMap<String, String> {
        #[derive(Deserialize, Default)]
        struct Meta {
            annotations: Option<BTreeMap<String, String>>,
        }
        #[derive(Deserialize, Default)]
        struct WithMeta {
            metadata: Option<Meta>,
        }
        #[derive(Deserialize, Default)]
        struct Spec {
            template: Option<WithMeta>,
        }
        #[derive(Deserialize, Default)]
        struct WithTemplate {
            spec: Option<Spec>,
        }
        let meta = match self {
            WorkloadKind::Pod => {
                serde_json::from_str::<WithMeta>(object).ok().and_then(|o| o.metadata)
            }
            _ => serde_json::from_str::<WithTemplate>(object)
                .ok()
                .and_then(|o| o.spec?.template?.metadata),
        };
        meta.and_then(|m| m.annotations).unwrap_or_default()
    }
}

/// What configsum needs of a workload object.
#[derive(Debug)]
pub struct Workload {
    /// The workload's own metadata: opt-out annotations and owner references.
    pub metadata: ObjectMeta,
    pub template: Template,
}

#[derive(Debug)]
pub enum Template {
    Present(Box<PodTemplate>),
    /// An Argo Rollout whose pods come from `spec.workloadRef`, not its own template.
    WorkloadRef,
}

#[derive(Debug)]
pub struct PodTemplate {
    /// Whether the template's `metadata` exists (the patch must create it otherwise).
    pub metadata_present: bool,
    pub annotations: Option<BTreeMap<String, String>>,
    pub spec: PodSpec,
}

#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error("it has no pod template spec")]
    NoPodSpec,
}

fn templated<T: DeserializeOwned>(
    object: &str,
    split: impl FnOnce(T) -> (ObjectMeta, Option<PodTemplateSpec>),
) -> Result<Workload, ParseError> {
    let (metadata, template) = split(serde_json::from_str(object)?);
    let template = template.ok_or(ParseError::NoPodSpec)?;
    Ok(Workload { metadata, template: Template::Present(Box::new(pod_template(template)?)) })
}

fn pod_template(template: PodTemplateSpec) -> Result<PodTemplate, ParseError> {
    let spec = template.spec.ok_or(ParseError::NoPodSpec)?;
    let metadata_present = template.metadata.is_some();
    let annotations = template.metadata.and_then(|m| m.annotations);
    Ok(PodTemplate { metadata_present, annotations, spec })
}

/// Argo Rollouts have no k8s-openapi type; only the fields configsum reads.
fn parse_rollout(object: &str) -> Result<Workload, ParseError> {
    #[derive(Deserialize)]
    struct Rollout {
        #[serde(rename = "apiVersion")]
        api_version: String,
        kind: String,
        #[serde(default)]
        metadata: ObjectMeta,
        spec: Option<RolloutSpec>,
    }
    #[derive(Deserialize)]
    struct RolloutSpec {
        template: Option<PodTemplateSpec>,
        #[serde(rename = "workloadRef")]
        workload_ref: Option<serde_json::Value>,
    }
    let rollout: Rollout = serde_json::from_str(object)?;
    if rollout.api_version != "argoproj.io/v1alpha1" || rollout.kind != "Rollout" {
        return Err(ParseError::Json(serde::de::Error::custom(format!(
            "expected argoproj.io/v1alpha1 Rollout, found {} {}",
            rollout.api_version, rollout.kind
        ))));
    }
    let spec = rollout.spec.ok_or(ParseError::NoPodSpec)?;
    let template = match (spec.workload_ref, spec.template) {
        (Some(r), _) if !r.is_null() => Template::WorkloadRef,
        (_, Some(template)) => Template::Present(Box::new(pod_template(template)?)),
        (_, None) => return Err(ParseError::NoPodSpec),
    };
    Ok(Workload { metadata: rollout.metadata, template })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn recognises_exactly_the_spec_kinds() {
        assert_eq!(
            WorkloadKind::from_gvk("apps", "v1", "Deployment"),
            Some(WorkloadKind::Deployment)
        );
        assert_eq!(WorkloadKind::from_gvk("", "v1", "Pod"), Some(WorkloadKind::Pod));
        assert_eq!(
            WorkloadKind::from_gvk("argoproj.io", "v1alpha1", "Rollout"),
            Some(WorkloadKind::Rollout)
        );
        assert_eq!(WorkloadKind::from_gvk("batch", "v1", "CronJob"), None);
        assert_eq!(WorkloadKind::from_gvk("apps", "v1beta1", "Deployment"), None);
        assert_eq!(WorkloadKind::from_gvk("", "v1", "ConfigMap"), None);
    }

    #[test]
    fn resources_agree_with_kinds() {
        for kind in WorkloadKind::ALL {
            let (group, version, _) = kind.resource();
            assert_eq!(WorkloadKind::from_gvk(group, version, kind.as_str()), Some(kind));
        }
    }

    #[test]
    fn jobs_and_pods_only_on_create() {
        use Operation::*;
        for kind in [WorkloadKind::Job, WorkloadKind::Pod] {
            assert!(kind.mutates(Create));
            assert!(!kind.mutates(Update) && !kind.mutates(Delete) && !kind.mutates(Connect));
        }
        for kind in [
            WorkloadKind::Deployment,
            WorkloadKind::StatefulSet,
            WorkloadKind::DaemonSet,
            WorkloadKind::ReplicaSet,
            WorkloadKind::Rollout,
        ] {
            assert!(kind.mutates(Create) && kind.mutates(Update));
            assert!(!kind.mutates(Delete) && !kind.mutates(Connect));
        }
    }

    #[test]
    fn rollout_with_workload_ref_is_recognised() {
        let object = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "metadata": {"name": "r"},
            "spec": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"}}});
        let workload = WorkloadKind::Rollout.parse(&object.to_string()).expect("rollout");
        assert!(matches!(workload.template, Template::WorkloadRef));
    }

    #[test]
    fn wrong_kind_or_missing_template_does_not_parse() {
        let as_pod =
            json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": []}}).to_string();
        assert!(WorkloadKind::Deployment.parse(&as_pod).is_err());
        let no_template =
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replicas": 1}});
        assert!(matches!(
            WorkloadKind::Deployment.parse(&no_template.to_string()),
            Err(ParseError::NoPodSpec)
        ));
        assert!(WorkloadKind::Pod.parse("[1, 2]").is_err());
    }

    #[test]
    fn reads_old_object_annotations_only() {
        let d = json!({"metadata": {"annotations": {"outer": "x"}},
            "spec": {"template": {"metadata": {"annotations": {"inner": "y"}}}}})
        .to_string();
        assert_eq!(
            WorkloadKind::Deployment.annotations_of(&d),
            BTreeMap::from([("inner".into(), "y".into())])
        );
        assert_eq!(
            WorkloadKind::Pod.annotations_of(&d),
            BTreeMap::from([("outer".into(), "x".into())])
        );
        assert!(WorkloadKind::Deployment.annotations_of("not json").is_empty());
    }
}
