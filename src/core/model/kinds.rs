//! Every workload kind configsum knows, as data: one [`KindDeclaration`] per kind, the built-in
//! ones in [`BUILT_IN`], more added at start-up by [`declare`] (kinds declared in a file) into the
//! same table. Nothing else names a kind: recognising a review's kind, the operations mutated,
//! where a kind's pod template and digests live, which kinds the controller watches and patches,
//! and its RBAC are all read from the row. tests/manifests.rs checks the manifests' webhook
//! rules and ClusterRoles against the table.

use std::fmt;
use std::sync::OnceLock;

use super::object_ref::ObjectKind;
use super::operation::Operation;
use super::path_segment::Segment;
use super::rollout_rule::{
    Check, Desired, Failure, Observed, OldPods, RolloutRule, StatusCounts, StatusRule,
};

/// What configsum needs to know about one workload kind.
#[derive(Clone, Debug)]
pub struct KindDeclaration {
    /// API group (empty for the core group), version, kind and resource (plural), as in
    /// `request.kind` and in webhook rules.
    pub group: &'static str,
    pub version: &'static str,
    pub name: &'static str,
    pub resource: &'static str,
    /// The operations whose reviews are mutated.
    pub operations: &'static [Operation],
    /// Field path from the object to its pod template (a map with `metadata` and `spec`), or
    /// empty when the object is itself the pod (its own `metadata` and `spec`); `None` for a
    /// kind that has no pod template, only [`KindDeclaration::references`]. The digests go in
    /// that template's `metadata.annotations` unless [`KindDeclaration::annotations`] says.
    pub template: Option<&'static [&'static str]>,
    /// A field path whose presence means the object runs another workload's pod template and
    /// has none of its own to annotate (an Argo Rollout's `spec.workloadRef`).
    pub template_elsewhere: Option<&'static [&'static str]>,
    /// Where the digests go, when not in the pod template's `metadata.annotations` (or, without
    /// a template, the object's own): a map inside `spec` that an operator copies onto its pods.
    pub annotations: Option<&'static [&'static str]>,
    /// ConfigMaps and Secrets named at paths of the object (an operator's custom resource).
    pub references: &'static [ReferenceDeclaration],
    pub controller: Controller,
    /// How its status tells whether its rollout is complete (`configsum explain`, the
    /// controller's waves: `core::rollout_health`).
    pub rollout: RolloutRule,
}

/// A ConfigMap or Secret named at a path of an object: the value there is the object's name
/// (a string), or a map with `name` (and `key` or `items`) that reads like a selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReferenceDeclaration {
    pub kind: ObjectKind,
    pub path: &'static [Segment<'static>],
    /// The keys consumed; `None`: every key (unless the selector names some).
    pub keys: Option<&'static [&'static str]>,
}

/// What the controller does with a kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Controller {
    /// Watched and rolled (patched) when what it consumes changes.
    Rolls,
    /// As `Rolls`, where the API server serves the resource (a CRD); looked
    /// up once, when the controller starts.
    RollsWhereServed,
    /// Never rolled: its pods never restart for new configuration.
    Never,
}

/// A Deployment's rule: `updatedReplicas`, `availableReplicas` and `replicas` all at
/// `spec.replicas`, failed past its progress deadline.
const DEPLOYMENT_ROLLOUT: StatusRule = StatusRule {
    observed: Observed::AtLeast,
    desired: Desired::SpecReplicas,
    complete: &[
        Check::AtDesired("updatedReplicas"),
        Check::AtDesired("availableReplicas"),
        Check::AtDesired("replicas"),
    ],
    failure: Some(Failure::Condition {
        kind: "Progressing",
        status: "False",
        reason: "ProgressDeadlineExceeded",
    }),
    old_pods: OldPods::Replaced,
    counts: Some(StatusCounts {
        updated: "updatedReplicas",
        existing: "replicas",
        ready: "availableReplicas",
    }),
};

/// StatefulSets and ReplicaSets count ready pods, not available ones.
const READY_REPLICAS: StatusCounts =
    StatusCounts { updated: "updatedReplicas", existing: "replicas", ready: "readyReplicas" };

/// The rule of a declared kind without a `health` entry: its status is read as a Deployment's
/// by `configsum explain` (whose operator may not report `observedGeneration`), and a wave
/// counts it complete once patched.
pub const DECLARED_ROLLOUT: RolloutRule = RolloutRule::ExplainOnly(StatusRule {
    observed: Observed::AtLeastIfReported,
    ..DEPLOYMENT_ROLLOUT
});

const CREATE_AND_UPDATE: &[Operation] = &[Operation::Create, Operation::Update];
/// Jobs and Pods: the pod spec is immutable once created.
const CREATE_ONLY: &[Operation] = &[Operation::Create];
const SPEC_TEMPLATE: &[&str] = &["spec", "template"];

/// The kinds built in, in [`WorkloadKind`] order (its constants index them). CronJobs are
/// deliberately absent: their Jobs are created later, from a copy.
pub const BUILT_IN: [KindDeclaration; 7] = [
    KindDeclaration {
        group: "apps",
        version: "v1",
        name: "Deployment",
        resource: "deployments",
        operations: CREATE_AND_UPDATE,
        template: Some(SPEC_TEMPLATE),
        template_elsewhere: None,
        annotations: None,
        references: &[],
        controller: Controller::Rolls,
        rollout: RolloutRule::Status(DEPLOYMENT_ROLLOUT),
    },
    KindDeclaration {
        group: "apps",
        version: "v1",
        name: "StatefulSet",
        resource: "statefulsets",
        operations: CREATE_AND_UPDATE,
        template: Some(SPEC_TEMPLATE),
        template_elsewhere: None,
        annotations: None,
        references: &[],
        controller: Controller::Rolls,
        rollout: RolloutRule::Status(StatusRule {
            complete: &[
                Check::SameText("updateRevision", "currentRevision"),
                Check::AtDesired("readyReplicas"),
            ],
            failure: None,
            old_pods: OldPods::KeptUnderOnDelete,
            counts: Some(READY_REPLICAS),
            ..DEPLOYMENT_ROLLOUT
        }),
    },
    KindDeclaration {
        group: "apps",
        version: "v1",
        name: "DaemonSet",
        resource: "daemonsets",
        operations: CREATE_AND_UPDATE,
        template: Some(SPEC_TEMPLATE),
        template_elsewhere: None,
        annotations: None,
        references: &[],
        controller: Controller::Rolls,
        rollout: RolloutRule::Status(StatusRule {
            desired: Desired::Status("desiredNumberScheduled"),
            complete: &[
                Check::AtDesired("updatedNumberScheduled"),
                Check::AtDesired("numberAvailable"),
            ],
            failure: None,
            old_pods: OldPods::KeptUnderOnDelete,
            counts: Some(StatusCounts {
                updated: "updatedNumberScheduled",
                existing: "currentNumberScheduled",
                ready: "numberAvailable",
            }),
            ..DEPLOYMENT_ROLLOUT
        }),
    },
    KindDeclaration {
        group: "apps",
        version: "v1",
        name: "ReplicaSet",
        resource: "replicasets",
        operations: CREATE_AND_UPDATE,
        template: Some(SPEC_TEMPLATE),
        template_elsewhere: None,
        annotations: None,
        references: &[],
        controller: Controller::Rolls,
        // Standalone: it never replaces its pods, so its rollout is its pods ready.
        rollout: RolloutRule::Status(StatusRule {
            complete: &[Check::AtDesired("readyReplicas")],
            failure: None,
            old_pods: OldPods::Kept,
            counts: Some(READY_REPLICAS),
            ..DEPLOYMENT_ROLLOUT
        }),
    },
    KindDeclaration {
        group: "batch",
        version: "v1",
        name: "Job",
        resource: "jobs",
        operations: CREATE_ONLY,
        template: Some(SPEC_TEMPLATE),
        template_elsewhere: None,
        annotations: None,
        references: &[],
        controller: Controller::Never,
        rollout: RolloutRule::NoStatus,
    },
    KindDeclaration {
        group: "argoproj.io",
        version: "v1alpha1",
        name: "Rollout",
        resource: "rollouts",
        operations: CREATE_AND_UPDATE,
        template: Some(SPEC_TEMPLATE),
        template_elsewhere: Some(&["spec", "workloadRef"]),
        annotations: None,
        references: &[],
        controller: Controller::RollsWhereServed,
        // It says itself when it is done, for the generation it writes as a string.
        rollout: RolloutRule::Status(StatusRule {
            observed: Observed::Equal,
            complete: &[Check::TextIs(&["phase"], "Healthy")],
            failure: Some(Failure::TextIs(&["phase"], "Degraded")),
            ..DEPLOYMENT_ROLLOUT
        }),
    },
    KindDeclaration {
        group: "",
        version: "v1",
        name: "Pod",
        resource: "pods",
        operations: CREATE_ONLY,
        template: Some(&[]),
        template_elsewhere: None,
        annotations: None,
        references: &[],
        controller: Controller::Never,
        rollout: RolloutRule::NoStatus,
    },
];

/// A row of the table: the declaration and what follows from it, worked out once.
#[derive(Debug)]
pub struct KindRow {
    pub declaration: KindDeclaration,
    /// `group/version`, or the version alone for the core group.
    pub api_version: String,
    /// Path of the annotations map that carries the digests.
    pub annotations: Vec<&'static str>,
    /// Path of the pod spec, for kinds with a pod template.
    pub pod_spec: Option<Vec<&'static str>>,
    /// The kind's name in lower case: the word of a `track` token naming a workload
    /// (`deployment/db`) and of its annotation (`deployment.<domain>/db`); followed by its
    /// group when another kind has that name (`daemonset.apps.kruise.io`).
    pub word: String,
}

impl KindRow {
    fn new(declaration: KindDeclaration) -> KindRow {
        let (group, version) = (declaration.group, declaration.version);
        let api_version =
            if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
        let under_template = |field: &[&'static str]| {
            declaration.template.map(|template| {
                let mut path = template.to_vec();
                path.extend_from_slice(field);
                path
            })
        };
        let annotations = match declaration.annotations {
            Some(path) => path.to_vec(),
            None => under_template(&["metadata", "annotations"])
                .unwrap_or_else(|| vec!["metadata", "annotations"]),
        };
        KindRow {
            api_version,
            annotations,
            pod_spec: under_template(&["spec"]),
            word: declaration.name.to_ascii_lowercase(),
            declaration,
        }
    }
}

impl KindRow {
    /// Whether another workload may track this kind's workloads (they roll together): it has
    /// a pod template of its own, and the controller watches it for changes.
    pub fn trackable(&self) -> bool {
        tracked_among(std::iter::once(&self.declaration)).next().is_some()
    }
}

/// Why a declaration cannot join the table.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum KindError {
    #[error("{0} is declared twice, or is a built-in kind")]
    Duplicate(String),
    #[error("{0}: a pod template or annotations path must start at spec")]
    TemplateOutsideSpec(String),
    #[error("{0}: its lower-case name is already the word of a tracked kind")]
    WordTaken(String),
    #[error("the kinds are already in use; declare them once, at start-up")]
    TooLate,
}

static TABLE: OnceLock<Vec<KindRow>> = OnceLock::new();

fn table() -> &'static [KindRow] {
    TABLE.get_or_init(|| rows(Vec::new()).unwrap_or_default())
}

fn rows(extra: Vec<KindDeclaration>) -> Result<Vec<KindRow>, KindError> {
    let mut rows: Vec<KindRow> = Vec::new();
    for declaration in BUILT_IN.into_iter().chain(extra) {
        let named = format!("{} {}", declaration.name, declaration.group);
        let taken = rows.iter().any(|r| {
            let d = &r.declaration;
            // Whatever the version: one kind, one row.
            (d.group, d.name) == (declaration.group, declaration.name)
                || (d.group, d.resource) == (declaration.group, declaration.resource)
        });
        if taken {
            return Err(KindError::Duplicate(named));
        }
        // The controller keeps only a workload's metadata and spec.
        let outside = |path: &[&str]| path.first().is_some_and(|f| *f != "spec");
        let annotations_ok = declaration
            .annotations
            .is_none_or(|p| p == ["metadata", "annotations"] || (p.len() > 1 && !outside(p)));
        if declaration.template.is_some_and(outside) || !annotations_ok {
            return Err(KindError::TemplateOutsideSpec(named));
        }
        let mut row = KindRow::new(declaration);
        // `track` tokens and annotation prefixes are `<word>/…` and `<word>.<domain>/…`: one
        // word, one meaning. A kind named like another (OpenKruise's Advanced DaemonSet is
        // apps.kruise.io's `DaemonSet`) is named with its group, as kubectl qualifies it.
        let taken = |word: &str| {
            ObjectKind::from_word(word).is_some()
                || word == "image"
                || rows.iter().any(|r| r.word == word)
        };
        if taken(&row.word) && !row.declaration.group.is_empty() {
            row.word = format!("{}.{}", row.word, row.declaration.group);
        }
        if taken(&row.word) && row.trackable() {
            return Err(KindError::WordTaken(named));
        }
        rows.push(row);
    }
    if rows.len() > usize::from(u16::MAX) {
        return Err(KindError::Duplicate("too many kinds".into()));
    }
    Ok(rows)
}

/// The table the built-in kinds and `extra` would make, without installing it: for tools and
/// tests that check a rendered installation against the kinds it declares.
pub fn table_with(extra: Vec<KindDeclaration>) -> Result<Vec<KindRow>, KindError> {
    rows(extra)
}

/// Adds `extra` kinds to the built-in ones. Once, at start-up, before anything reads a kind.
pub fn declare(extra: Vec<KindDeclaration>) -> Result<(), KindError> {
    let rows = rows(extra)?;
    TABLE.set(rows).map_err(|_| KindError::TooLate)
}

/// A workload kind: its index in the table. Cheap to copy and compare; everything about it is
/// in its row.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkloadKind(u16);

#[allow(non_upper_case_globals)]
impl WorkloadKind {
    pub const Deployment: WorkloadKind = WorkloadKind(0);
    pub const StatefulSet: WorkloadKind = WorkloadKind(1);
    pub const DaemonSet: WorkloadKind = WorkloadKind(2);
    pub const ReplicaSet: WorkloadKind = WorkloadKind(3);
    pub const Job: WorkloadKind = WorkloadKind(4);
    pub const Rollout: WorkloadKind = WorkloadKind(5);
    pub const Pod: WorkloadKind = WorkloadKind(6);
}

impl WorkloadKind {
    /// This kind's row.
    pub fn row(self) -> &'static KindRow {
        // Every WorkloadKind comes from the table (or is a built-in's constant), so its index
        // is in range.
        &table()[usize::from(self.0)]
    }

    pub fn declaration(self) -> &'static KindDeclaration {
        &self.row().declaration
    }

    /// Every kind of the table, built-in ones first.
    pub fn all() -> impl Iterator<Item = WorkloadKind> {
        (0..table().len()).filter_map(|i| u16::try_from(i).ok()).map(WorkloadKind)
    }

    /// The kind's lower-case name (`deployment`), as `track` tokens and annotations write it.
    pub fn word(self) -> &'static str {
        &self.row().word
    }

    /// Whether other workloads may track workloads of this kind (see [`KindRow::trackable`]).
    pub fn trackable(self) -> bool {
        self.row().trackable()
    }

    /// The trackable kind whose word is `word`.
    pub fn trackable_from_word(word: &str) -> Option<Self> {
        WorkloadKind::all().find(|k| k.word() == word && k.trackable())
    }

    /// The kind kubectl means by `word`: its lower-case name (`deployment`), its resource
    /// (`deployments`), either followed by its group (`deployment.apps`), or a built-in kind's
    /// short name (`deploy`, `sts`, `ds`, `rs`, `po`, `ro`). The first kind of the table wins,
    /// as kubectl prefers the built-in kinds.
    pub fn from_kubectl_word(word: &str) -> Option<Self> {
        const SHORT_NAMES: [(&str, WorkloadKind); 6] = [
            ("deploy", WorkloadKind::Deployment),
            ("sts", WorkloadKind::StatefulSet),
            ("ds", WorkloadKind::DaemonSet),
            ("rs", WorkloadKind::ReplicaSet),
            ("po", WorkloadKind::Pod),
            ("ro", WorkloadKind::Rollout),
        ];
        let word = word.to_ascii_lowercase();
        if let Some((_, kind)) = SHORT_NAMES.iter().find(|(short, _)| *short == word) {
            return Some(*kind);
        }
        WorkloadKind::all().find(|k| {
            let d = k.declaration();
            let name = d.name.to_ascii_lowercase();
            [name.as_str(), d.resource].iter().any(|base| {
                word == *base
                    || word.strip_prefix(base).and_then(|rest| rest.strip_prefix('.'))
                        == Some(d.group)
            })
        })
    }

    /// The kind for a `request.kind` (group, version, kind), or `None` for kinds left untouched.
    pub fn from_gvk(group: &str, version: &str, kind: &str) -> Option<Self> {
        WorkloadKind::all().find(|k| {
            let d = k.declaration();
            d.group == group && d.version == version && d.name == kind
        })
    }
}

impl fmt::Debug for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.declaration().name)
    }
}

/// (API group, resource) of every kind another workload may track.
pub fn tracked_resources() -> impl Iterator<Item = (&'static str, &'static str)> {
    tracked_among(WorkloadKind::all().map(WorkloadKind::declaration))
}

/// (API group, resource) of the kinds among `declarations` another workload may track: a pod
/// template of their own, and watched by the controller.
pub fn tracked_among<'a>(
    declarations: impl Iterator<Item = &'a KindDeclaration>,
) -> impl Iterator<Item = (&'static str, &'static str)> {
    declarations
        .filter(|declared| {
            declared.template.is_some_and(|path| !path.is_empty())
                && declared.controller != Controller::Never
        })
        .map(|declared| (declared.group, declared.resource))
}

/// (API group, resource) of every kind the controller may roll.
pub fn rolled_resources() -> impl Iterator<Item = (&'static str, &'static str)> {
    rolled_among(WorkloadKind::all().map(WorkloadKind::declaration))
}

/// (API group, resource) of the kinds among `declarations` the controller may roll.
pub fn rolled_among<'a>(
    declarations: impl Iterator<Item = &'a KindDeclaration>,
) -> impl Iterator<Item = (&'static str, &'static str)> {
    declarations
        .filter(|declared| declared.controller != Controller::Never)
        .map(|declared| (declared.group, declared.resource))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_constants_name_their_rows() {
        let named: Vec<&str> = WorkloadKind::all().map(|k| k.declaration().name).collect();
        assert_eq!(
            named,
            ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "Rollout", "Pod"]
        );
        assert_eq!(WorkloadKind::Pod.declaration().name, "Pod");
        assert_eq!(WorkloadKind::Rollout.declaration().name, "Rollout");
        assert_eq!(format!("{:?}", WorkloadKind::Job), "Job");
    }

    #[test]
    fn kinds_are_found_as_kubectl_names_them() {
        let found = |word| WorkloadKind::from_kubectl_word(word);
        for word in ["deployment", "Deployments", "deploy", "deployment.apps", "deployments.apps"] {
            assert_eq!(found(word), Some(WorkloadKind::Deployment), "{word}");
        }
        assert_eq!(found("sts"), Some(WorkloadKind::StatefulSet));
        assert_eq!(found("statefulsets.apps"), Some(WorkloadKind::StatefulSet));
        assert_eq!(found("rollouts.argoproj.io"), Some(WorkloadKind::Rollout));
        assert_eq!(found("po"), Some(WorkloadKind::Pod));
        for word in ["cronjob", "configmap", "deployment.batch", "deploymentsapps", ""] {
            assert_eq!(found(word), None, "{word}");
        }
    }

    #[test]
    fn paths_follow_from_the_template() {
        let deployment = WorkloadKind::Deployment.row();
        assert_eq!(deployment.annotations, ["spec", "template", "metadata", "annotations"]);
        assert_eq!(deployment.pod_spec, Some(vec!["spec", "template", "spec"]));
        assert_eq!(deployment.api_version, "apps/v1");
        let pod = WorkloadKind::Pod.row();
        assert_eq!(pod.annotations, ["metadata", "annotations"]);
        assert_eq!(pod.pod_spec, Some(vec!["spec"]));
        assert_eq!(pod.api_version, "v1");
    }

    #[test]
    fn declarations_extend_the_same_table_or_are_refused() {
        let clone_set = KindDeclaration {
            group: "apps.kruise.io",
            version: "v1alpha1",
            name: "CloneSet",
            resource: "clonesets",
            operations: CREATE_AND_UPDATE,
            template: Some(SPEC_TEMPLATE),
            template_elsewhere: None,
            annotations: None,
            references: &[],
            controller: Controller::RollsWhereServed,
            rollout: DECLARED_ROLLOUT,
        };
        let table = rows(vec![clone_set.clone()]).expect("a new kind");
        assert_eq!(table.len(), BUILT_IN.len() + 1);
        let row = &table[BUILT_IN.len()];
        assert_eq!(row.api_version, "apps.kruise.io/v1alpha1");
        assert_eq!(row.annotations, ["spec", "template", "metadata", "annotations"]);

        // Named like a built-in kind: its word carries its group.
        let advanced =
            KindDeclaration { name: "DaemonSet", resource: "daemonsets", ..clone_set.clone() };
        let table = rows(vec![advanced]).expect("a kind of another group");
        assert_eq!(table[BUILT_IN.len()].word, "daemonset.apps.kruise.io");
        assert_eq!(table[WorkloadKind::DaemonSet.0 as usize].word, "daemonset");

        let duplicate = rows(vec![clone_set.clone(), clone_set.clone()]);
        assert!(matches!(duplicate, Err(KindError::Duplicate(_))));
        let built_in = KindDeclaration { name: "Deployment", group: "apps", ..clone_set.clone() };
        assert!(matches!(rows(vec![built_in]), Err(KindError::Duplicate(_))));
        let outside = KindDeclaration { template: Some(&["status", "template"]), ..clone_set };
        assert!(matches!(rows(vec![outside]), Err(KindError::TemplateOutsideSpec(_))));
        // The table is in use by now (this process's other tests read it): too late.
        let _ = WorkloadKind::all().count();
        assert_eq!(declare(Vec::new()), Err(KindError::TooLate));
    }
}
