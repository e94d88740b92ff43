//! A reconciliation as it travels between the event loop and the worker: the queue's
//! [`Due`] item, the [`Work`] the worker is handed — everything the reconciliation needs, so
//! that the worker shares no state with the loop — and how it ended, reported back as a
//! message.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use tokio::time::Instant;

use super::reading::Fresh;
use super::trigger::Trigger;
use super::trigger::WaveMark;
use super::workload::{Snapshot, WorkloadKey};
use crate::core::inputs::image::ImageObservation;
use crate::core::{ObjectRef, Observation};

/// Bound on each API call, and on one reconciliation's lookups together.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// Conflicts in a row before a reconciliation fails (and is retried with backoff).
pub const CONFLICT_RETRIES: u32 = 5;

/// A workload to reconcile, for the leadership term it was queued in.
#[derive(Clone, Debug)]
pub struct Due {
    pub key: WorkloadKey,
    /// The objects and images whose change made it due, for the Event.
    pub triggers: BTreeSet<Trigger>,
    /// When its coalescing window opened (for the reaction-time metric).
    pub opened: Instant,
    pub term: u64,
    /// Patches of this round refused with 409 Conflict so far.
    pub conflicts: u32,
}

/// What the worker is handed: the due workload with what the loop knows of it.
#[derive(Debug)]
pub struct Work {
    pub due: Due,
    /// The workload as the watch last delivered it: the webhook's plan. `None`: it was
    /// deleted (or left the scope) since it came due.
    pub snapshot: Option<Snapshot>,
    /// Digests the loop's reads computed for it, by object: taken instead of reading the
    /// object again where they cover the keys it reads now.
    pub fresh: HashMap<ObjectRef, Fresh>,
    /// Its images' latest digests, one per image target of the plan.
    pub images: Vec<ImageObservation>,
    /// The template digests of the workloads it tracks, one per tracked workload.
    pub workloads: Vec<Option<Observation>>,
    /// The digests of the SecretProviderClasses it mounts, one per class (`None`: no status
    /// reports it; its annotation is kept).
    pub classes: Vec<Option<Observation>>,
    /// The waves it rolls in, recorded on it with the roll (`<domain>/waves`).
    pub waves: Vec<WaveMark>,
}

/// How a reconciliation ended, short of an error.
#[derive(Debug, PartialEq, Eq)]
pub enum Reconciled {
    /// Patched from the snapshot at this resourceVersion, and this `metadata.generation`: a
    /// rollout status counts for the patch only from a later generation.
    Patched {
        from: Option<String>,
        generation: Option<i64>,
    },
    /// `--dry-run`: it would have been patched; a `WouldRoll` Event says so.
    DryRun,
    Unchanged,
    /// The API server refused the patch with 409 Conflict: the workload changed since the
    /// snapshot at this resourceVersion, and is reconciled again on the one the watch delivers.
    Conflicted {
        from: Option<String>,
    },
    /// Deleted, or no longer one the webhook would mutate.
    Gone,
    /// This replica does not lead (any more) in the work's term: dropped.
    NotLeading,
}

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("API server: {0}")]
    Api(String),
    #[error("{0}")]
    Lookup(String),
    #[error("the workload kept changing under us ({CONFLICT_RETRIES} conflicts)")]
    Conflict,
    #[error("the patch timed out")]
    Timeout,
}

impl ReconcileError {
    /// The `outcome` label of `configsum_controller_patches_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ReconcileError::Conflict => "conflict",
            ReconcileError::Timeout => "timeout",
            ReconcileError::Api(_) | ReconcileError::Lookup(_) => "failed",
        }
    }
}

pub type ReconcileResult = Result<Reconciled, ReconcileError>;
