//! What one read of a tracked ConfigMap or Secret found, already digested for every workload
//! tracking it: the data is dropped before the result reaches the event loop.

use super::workload::WorkloadKey;
use crate::core::model::annotations::ABSENT;
use crate::core::refs::ConsumedKeys;
use crate::core::{Observation, Reach};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Its annotation matches the content.
    Current,
    /// Its annotation does not match: it must be brought up to date.
    Stale,
    /// It has no annotation for the object.
    NoDigest,
    /// The object's owner ignores it (`<domain>/ignore`): nothing rolls on its account.
    Ignored,
}

/// What one read means for one tracking workload.
#[derive(Clone, Debug)]
pub struct Judged {
    pub workload: WorkloadKey,
    pub verdict: Verdict,
    /// The digest of the keys it consumes (or absent), for its reconciliation.
    pub fresh: Fresh,
}

/// A digest a read computed for a workload, with the keys it covers and how the workload
/// reaches the object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fresh {
    pub keys: ConsumedKeys,
    pub observation: Observation,
    pub reach: Reach,
}

impl Fresh {
    /// The annotation value it stands for; `None` for an untracked object (no annotation), and
    /// for an absent one that a token may name in another namespace instead, or that is
    /// another namespace's (absent, or without its owner's consent).
    pub fn annotation(&self) -> Option<&str> {
        match &self.observation {
            Observation::Digest(value) => Some(value),
            Observation::Untracked(_) => None,
            Observation::Absent if self.reach != Reach::Own => None,
            Observation::Absent | Observation::Unreadable(_) => Some(ABSENT),
        }
    }
}

/// The outcome of one read, with the data already digested and dropped.
#[derive(Clone, Debug)]
pub struct Reading {
    pub resource_version: Option<String>,
    /// A digest of the whole content (keyed for a Secret under `--digest-key-file`); `None`
    /// when the object does not exist.
    pub content_digest: Option<String>,
    pub judged: Vec<Judged>,
}
