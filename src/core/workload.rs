//! A workload as the core sees it, and how each kind is read: how to recognise
//! it from `request.kind`, which operations it mutates, where its pod
//! template's annotations live, all from its row in [`super::kinds::DECLARED`].

use std::collections::BTreeMap;

use serde::Deserialize;
use serde::de::IgnoredAny;

use super::kinds::{DECLARED, TemplateAt};
use super::pod_spec::{Container, Metadata, PodSpec, Volume};

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

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
    /// API group, version and resource (plural), as in webhook rules.
    pub fn resource(self) -> (&'static str, &'static str, &'static str) {
        let declared = self.declaration();
        (declared.group, declared.version, declared.resource)
    }

    /// The kind for a `request.kind`, or `None` for kinds left untouched
    /// (CronJobs among them: their Jobs are written later, from a copy).
    pub fn from_gvk(group: &str, version: &str, kind: &str) -> Option<Self> {
        DECLARED
            .iter()
            .find(|d| d.group == group && d.version == version && d.name == kind)
            .map(|d| d.kind)
    }

    pub fn as_str(self) -> &'static str {
        self.declaration().name
    }

    /// Whether reviews of this operation are mutated (Jobs and Pods: CREATE only).
    pub fn mutates(self, operation: Operation) -> bool {
        self.declaration().operations.contains(&operation)
    }

    /// JSON path tokens of the annotations map that carries the digests.
    pub fn annotations_path(self) -> &'static [&'static str] {
        match self.declaration().template {
            TemplateAt::Object => OBJECT_ANNOTATIONS,
            TemplateAt::SpecTemplate | TemplateAt::SpecTemplateOrWorkloadRef => {
                TEMPLATE_ANNOTATIONS
            }
        }
    }

    /// Reads an object sent as this kind (an admission request's `object`):
    /// its `apiVersion` and `kind` must match, and the fields configsum reads
    /// must have their API types.
    pub fn parse(self, object: &str) -> Result<Workload, ParseError> {
        let view: ObjectView = serde_json::from_str(object)?;
        if view.api_version != self.api_version() || view.kind != self.as_str() {
            return Err(ParseError::WrongKind {
                expected: format!("{} {}", self.api_version(), self.as_str()),
            });
        }
        let metadata_present = view.metadata.is_some();
        let mut workload = self.from_parts(view.metadata.unwrap_or_default(), view.spec)?;
        // A Pod's digests go in its own metadata: a patch must create it if it is absent.
        if let Template::Present(template) = &mut workload.template {
            if self == WorkloadKind::Pod {
                template.metadata_present = metadata_present;
            }
        }
        Ok(workload)
    }

    /// `apiVersion` of this kind: `group/version`, or the version for the core group.
    pub fn api_version(self) -> String {
        let (group, version, _) = self.resource();
        if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") }
    }

    /// The workload from its metadata and spec, known to be of this kind (the
    /// controller's watches say the kind; list items carry no `apiVersion`/`kind`).
    pub fn from_parts(
        self,
        metadata: Metadata,
        spec: Option<SpecView>,
    ) -> Result<Workload, ParseError> {
        let spec = spec.ok_or(ParseError::NoPodSpec)?;
        let template = match self.declaration().template {
            TemplateAt::Object => {
                let pod = PodTemplate {
                    metadata_present: true,
                    annotations: metadata.annotations.clone(),
                    spec: PodSpec {
                        containers: spec.containers,
                        init_containers: spec.init_containers,
                        volumes: spec.volumes,
                    },
                };
                Template::Present(Box::new(pod))
            }
            TemplateAt::SpecTemplateOrWorkloadRef if spec.workload_ref.is_some() => {
                Template::WorkloadRef
            }
            TemplateAt::SpecTemplate | TemplateAt::SpecTemplateOrWorkloadRef => {
                let template = spec.template.ok_or(ParseError::NoPodSpec)?;
                let pod_spec = template.spec.ok_or(ParseError::NoPodSpec)?;
                let metadata_present = template.metadata.is_some();
                let annotations = template.metadata.and_then(|m| m.annotations);
                Template::Present(Box::new(PodTemplate {
                    metadata_present,
                    annotations,
                    spec: pod_spec,
                }))
            }
        };
        let namespace = metadata.namespace.clone().filter(|n| !n.is_empty());
        Ok(Workload { kind: self, namespace, metadata, template })
    }

    /// Only the digest-carrying annotations of an object (for `oldObject`, whose
    /// annotations are the fallback "existing" values); anything unreadable is empty.
    pub fn annotations_of(self, object: &str) -> BTreeMap<String, String> {
        #[derive(Deserialize, Default)]
        struct Meta {
            #[serde(default, deserialize_with = "super::pod_spec::bounded_annotations")]
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
        let meta = match self.declaration().template {
            TemplateAt::Object => {
                serde_json::from_str::<WithMeta>(object).ok().and_then(|o| o.metadata)
            }
            TemplateAt::SpecTemplate | TemplateAt::SpecTemplateOrWorkloadRef => {
                serde_json::from_str::<WithTemplate>(object)
                    .ok()
                    .and_then(|o| o.spec?.template?.metadata)
            }
        };
        meta.and_then(|m| m.annotations).unwrap_or_default()
    }
}

/// What configsum needs of a workload object: the typed entry to the core.
#[derive(Debug)]
pub struct Workload {
    pub kind: WorkloadKind,
    /// Where its references are looked up: the request's namespace, else the object's.
    pub namespace: Option<String>,
    /// The workload's own metadata: opt-out annotations and owner references.
    pub metadata: Metadata,
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
    #[error("it is not an {expected}")]
    WrongKind { expected: String },
    #[error("it has no pod template spec")]
    NoPodSpec,
}

/// One view for every kind: templated kinds have `spec.template`, a Pod has
/// its pod spec fields directly under `spec`; the names never collide.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObjectView {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    metadata: Option<Metadata>,
    spec: Option<SpecView>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpecView {
    template: Option<TemplateView>,
    workload_ref: Option<IgnoredAny>,
    // A Pod's own spec (not `#[serde(flatten)]`, which would buffer every
    // other field), read as sparsely as a template's.
    #[serde(default, deserialize_with = "super::pod_spec::sparse")]
    containers: Option<Vec<Container>>,
    #[serde(default, deserialize_with = "super::pod_spec::sparse")]
    init_containers: Option<Vec<Container>>,
    #[serde(default, deserialize_with = "super::pod_spec::sparse")]
    volumes: Option<Vec<Volume>>,
}

#[derive(Clone, Debug, Deserialize)]
struct TemplateView {
    metadata: Option<Metadata>,
    spec: Option<PodSpec>,
}

impl SpecView {
    /// Whether the pod template carries an annotation whose key starts
    /// with `prefix` (for a Pod, whose own annotations are its template's,
    /// none here).
    pub fn template_has_annotation(&self, prefix: &str) -> bool {
        let annotations = self.template.as_ref().and_then(|t| t.metadata.as_ref());
        let annotations = annotations.and_then(|m| m.annotations.as_ref());
        annotations.is_some_and(|a| a.keys().any(|k| k.starts_with(prefix)))
    }
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
        for kind in WorkloadKind::all() {
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
    fn a_pods_own_lists_are_read_sparsely_too() {
        // `[]` reads as a struct of absent fields, as serde allows.
        let (arrays, objects) = (vec!["[]"; 100_000].join(","), vec!["{}"; 100_000].join(","));
        let pod = format!(
            r#"{{"apiVersion": "v1", "kind": "Pod", "spec": {{"containers": [{arrays}],
                "initContainers": [{objects}], "volumes": [{objects}, {{"secret": {{"secretName": "s"}}}}]}}}}"#
        );
        let workload = WorkloadKind::Pod.parse(&pod).expect("a Pod");
        let Template::Present(template) = workload.template else { panic!("a template") };
        assert_eq!(template.spec.containers.map(|c| c.len()), Some(0));
        assert_eq!(template.spec.init_containers.map(|c| c.len()), Some(0));
        assert_eq!(template.spec.volumes.map(|v| v.len()), Some(1));
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
