//! Every workload kind configsum knows, declared once, in [`DECLARED`].
//!
//! Everything else is read from this table: recognising a review's kind, the
//! operations mutated, where a kind's pod template and digests live, which
//! kinds the controller watches and patches, and its RBAC. The manifests'
//! webhook rules and ClusterRoles are checked against it by tests/manifests.rs.
//!
//! A new kind is a new [`WorkloadKind`] variant and its row here; the compiler
//! and those tests point at anything else that needs it.

use super::workload::{Operation, WorkloadKind};

/// What configsum needs to know about one workload kind.
#[derive(Debug)]
pub struct KindDeclaration {
    pub kind: WorkloadKind,
    /// API group (empty for the core group), version, kind and resource
    /// (plural), as in `request.kind` and in webhook rules.
    pub group: &'static str,
    pub version: &'static str,
    pub name: &'static str,
    pub resource: &'static str,
    /// The operations whose reviews are mutated.
    pub operations: &'static [Operation],
    pub template: TemplateAt,
    pub controller: Controller,
}

/// Where a kind keeps its pod template, hence where the digests go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TemplateAt {
    /// `spec.template`, digests in `spec.template.metadata.annotations`.
    SpecTemplate,
    /// `spec.template`, or none of its own when `spec.workloadRef` names the
    /// workload whose template it runs (an Argo Rollout).
    SpecTemplateOrWorkloadRef,
    /// The object is the pod: `spec` is the pod spec, digests in `metadata.annotations`.
    Object,
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

const CREATE_AND_UPDATE: &[Operation] = &[Operation::Create, Operation::Update];
/// Jobs and Pods: the pod spec is immutable once created.
const CREATE_ONLY: &[Operation] = &[Operation::Create];

/// Every kind configsum mutates, in [`WorkloadKind`] order. CronJobs are
/// deliberately absent: their Jobs are created later, from a copy.
pub const DECLARED: [KindDeclaration; 7] = [
    KindDeclaration {
        kind: WorkloadKind::Deployment,
        group: "apps",
        version: "v1",
        name: "Deployment",
        resource: "deployments",
        operations: CREATE_AND_UPDATE,
        template: TemplateAt::SpecTemplate,
        controller: Controller::Rolls,
    },
    KindDeclaration {
        kind: WorkloadKind::StatefulSet,
        group: "apps",
        version: "v1",
        name: "StatefulSet",
        resource: "statefulsets",
        operations: CREATE_AND_UPDATE,
        template: TemplateAt::SpecTemplate,
        controller: Controller::Rolls,
    },
    KindDeclaration {
        kind: WorkloadKind::DaemonSet,
        group: "apps",
        version: "v1",
        name: "DaemonSet",
        resource: "daemonsets",
        operations: CREATE_AND_UPDATE,
        template: TemplateAt::SpecTemplate,
        controller: Controller::Rolls,
    },
    KindDeclaration {
        kind: WorkloadKind::ReplicaSet,
        group: "apps",
        version: "v1",
        name: "ReplicaSet",
        resource: "replicasets",
        operations: CREATE_AND_UPDATE,
        template: TemplateAt::SpecTemplate,
        controller: Controller::Rolls,
    },
    KindDeclaration {
        kind: WorkloadKind::Job,
        group: "batch",
        version: "v1",
        name: "Job",
        resource: "jobs",
        operations: CREATE_ONLY,
        template: TemplateAt::SpecTemplate,
        controller: Controller::Never,
    },
    KindDeclaration {
        kind: WorkloadKind::Rollout,
        group: "argoproj.io",
        version: "v1alpha1",
        name: "Rollout",
        resource: "rollouts",
        operations: CREATE_AND_UPDATE,
        template: TemplateAt::SpecTemplateOrWorkloadRef,
        controller: Controller::RollsWhereServed,
    },
    KindDeclaration {
        kind: WorkloadKind::Pod,
        group: "",
        version: "v1",
        name: "Pod",
        resource: "pods",
        operations: CREATE_ONLY,
        template: TemplateAt::Object,
        controller: Controller::Never,
    },
];

// The table is indexed by the variant: a row out of place fails the build.
const _: () = {
    let mut i = 0;
    while i < DECLARED.len() {
        assert!(DECLARED[i].kind as usize == i, "DECLARED is not in WorkloadKind order");
        i += 1;
    }
};

impl WorkloadKind {
    /// This kind's row of [`DECLARED`].
    pub fn declaration(self) -> &'static KindDeclaration {
        &DECLARED[self as usize]
    }

    /// Every declared kind, in declaration order.
    pub fn all() -> impl Iterator<Item = WorkloadKind> {
        DECLARED.iter().map(|declared| declared.kind)
    }
}

/// The verbs the controller needs on the kinds it rolls.
pub const ROLLED_KIND_VERBS: &[&str] = &["list", "watch", "patch"];

/// (API group, resource) of every kind the controller may roll.
pub fn rolled_resources() -> impl Iterator<Item = (&'static str, &'static str)> {
    DECLARED
        .iter()
        .filter(|declared| declared.controller != Controller::Never)
        .map(|declared| (declared.group, declared.resource))
}
