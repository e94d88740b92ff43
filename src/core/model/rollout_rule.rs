//! How a kind's status tells whether its rollout is complete, as data: each row of the kinds
//! table (`kinds.rs`) holds one [`RolloutRule`], and `core::rollout_health` is the one reader
//! of it, for `configsum explain` and for the controller's waves alike. Nothing decides by
//! kind. docs/behaviour.md ("When a rollout is complete") states the rules per kind.

/// How a kind's status tells whether its rollout is complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RolloutRule {
    /// No rollout status to tell from (Jobs, Pods: never rolled). Nothing to wait for.
    NoStatus,
    /// The status tells, for `configsum explain` and for the controller's waves.
    Status(StatusRule),
    /// The status is read by `configsum explain` only, as a guess (a declared kind without a
    /// `health` entry, read as a Deployment): a wave counts the kind complete once patched.
    ExplainOnly(StatusRule),
}

/// A rollout is complete when the status reports the current generation observed
/// ([`StatusRule::observed`]) and every one of [`StatusRule::complete`] holds; or, where the
/// kind honours `spec.updateStrategy.type: OnDelete` and the spec says so, as soon as the
/// generation is observed (the template is accepted; pods change only when deleted). It has
/// failed when [`StatusRule::failure`] says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusRule {
    pub observed: Observed,
    /// How many pods are desired: what [`Check::AtDesired`] compares with.
    pub desired: Desired,
    pub complete: &'static [Check],
    pub failure: Option<Failure>,
    pub old_pods: OldPods,
    /// The counts `configsum explain` shows; `None` for a kind that reports no counts (a
    /// declared kind's `health` field).
    pub counts: Option<StatusCounts>,
}

/// How `status.observedGeneration` (a number, or a string: Argo Rollouts writes `"3"`) must
/// stand against `metadata.generation`. Absent, either is 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observed {
    /// At least the generation: the workload's controller has seen the latest spec.
    AtLeast,
    /// Equal to it (Argo Rollouts).
    Equal,
    /// At least the generation when the status reports one; otherwise not asked (a declared
    /// kind, whose operator may not report it).
    AtLeastIfReported,
}

/// Where the desired number of pods is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Desired {
    /// `spec.replicas`; 1 when absent, as the API server defaults it.
    SpecReplicas,
    /// A count of the status (a DaemonSet's `desiredNumberScheduled`).
    Status(&'static str),
}

/// One condition of a complete rollout, on the status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// This count of the status equals the desired pods; an absent count is 0 (the API server
    /// leaves zeros out).
    AtDesired(&'static str),
    /// Two fields of the status hold the same text, both absent counting as the same (a
    /// StatefulSet's `updateRevision` and `currentRevision`).
    SameText(&'static str, &'static str),
    /// The text at this path under `status` is this value (an Argo Rollout's `phase`
    /// `Healthy`, a declared kind's `health`).
    TextIs(&'static [&'static str], &'static str),
}

/// How a kind's controller reports a rollout it gave up on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// A condition with this type, status and reason (a Deployment's `Progressing`, `False`,
    /// `ProgressDeadlineExceeded`); the reason is the failure.
    Condition { kind: &'static str, status: &'static str, reason: &'static str },
    /// The text at this path under `status` is this value (an Argo Rollout's `phase`
    /// `Degraded`), with `status.message` when there is one.
    TextIs(&'static [&'static str], &'static str),
}

/// What happens to the pods of an older template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OldPods {
    /// The kind's controller replaces them (Deployments, Argo Rollouts, declared kinds).
    Replaced,
    /// Replaced, unless `spec.updateStrategy.type` is `OnDelete`: then they stay until deleted,
    /// and the rollout is complete once the template is accepted (StatefulSets, DaemonSets).
    KeptUnderOnDelete,
    /// Never replaced: they stay until deleted, whatever the spec (a ReplicaSet). The rule's
    /// checks still apply; `configsum explain` says the old pods stay.
    Kept,
}

/// The names of the counts `configsum explain` shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusCounts {
    /// Pods of the current template, all pods, and ready (or available) ones.
    pub updated: &'static str,
    pub existing: &'static str,
    pub ready: &'static str,
}
