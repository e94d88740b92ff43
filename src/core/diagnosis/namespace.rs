//! What every diagnosis starts from: a namespace's workloads as read, the digest key and the
//! flap guard's holds ([`NamespaceView`]), and each workload's plan as the webhook makes it.

use std::collections::{BTreeMap, HashSet};

use serde_json::Value;

use super::halts::Halts;
use super::holds::Holds;
use crate::core::digest::Digester;
use crate::core::model::kinds::{Controller, WorkloadKind};
use crate::core::model::object_content::ObjectContent;
use crate::core::model::object_ref::ObjectKind;
use crate::core::model::object_ref::ObjectRef;
use crate::core::model::object_scope::Standing;
use crate::core::mutate::{Found, Mutation, Observation, Plan, Settings, Skip};
use crate::core::refs::ConsumedKeys;
use crate::core::review::{Request, plan_review};
use crate::core::verdict::Verdict;

/// A workload as read, and its kind.
#[derive(Clone, Copy, Debug)]
pub struct ReadWorkload<'a> {
    pub kind: WorkloadKind,
    /// The object's JSON.
    pub json: &'a str,
}

impl ReadWorkload<'_> {
    pub fn name(&self) -> String {
        name_of(self.json)
    }
}

/// What the gates read besides the workloads: the halts, the namespace's window, the sources'
/// `resume`, and the time they are judged at.
#[derive(Debug, Default)]
pub struct Gates {
    pub halts: Halts,
    /// The namespace's `<domain>/roll-window`, if it has one (and it could be read).
    pub namespace_window: Option<String>,
    /// `<domain>/resume` of each ConfigMap and Secret read that has one, by source
    /// (`secret/db`). The controller reads it on no other source.
    pub resumes: BTreeMap<String, String>,
    /// Seconds since the epoch: when windows are judged (Events are judged when read).
    pub now: i64,
}

/// What explain knows of a namespace: its workloads, the digest key, the flap guard's holds,
/// what the other gates read.
pub struct NamespaceView<'a> {
    pub namespace: &'a str,
    pub workloads: &'a [ReadWorkload<'a>],
    /// `None` when the digest key is unknown: Secrets' digests then cannot be told (ConfigMap
    /// digests are never keyed).
    pub digester: Option<&'a Digester>,
    pub holds: &'a Holds,
    /// What the controller's pause, window and wave gates read, and when they are judged.
    pub gates: &'a Gates,
    pub settings: &'a Settings,
}

impl<'a> NamespaceView<'a> {
    /// (kind, name) of every workload of the namespace, each name read once.
    pub(super) fn listed(&self) -> HashSet<(String, String)> {
        self.workloads.iter().map(|w| (w.kind.as_str().to_owned(), w.name())).collect()
    }

    /// Whether the controller that owns `workload` is among `listed` (see [`Self::listed`]).
    pub(super) fn owner_listed(
        workload: &ReadWorkload<'_>,
        listed: &HashSet<(String, String)>,
    ) -> bool {
        #[derive(serde::Deserialize)]
        struct Owner {
            kind: String,
            name: String,
            #[serde(default)]
            controller: Option<bool>,
        }
        let owners: Option<Vec<Owner>> =
            crate::core::field_path::read_at(workload.json, &["metadata", "ownerReferences"])
                .ok()
                .flatten();
        let Some(owner) = owners.into_iter().flatten().find(|o| o.controller == Some(true)) else {
            return false;
        };
        listed.contains(&(owner.kind, owner.name))
    }

    /// The digester for an object of `kind`; `plain` stands in for ConfigMaps without a key.
    pub(super) fn digester_for(
        &self,
        kind: ObjectKind,
        plain: &'a Digester,
    ) -> Option<&'a Digester> {
        match (kind, self.digester) {
            (ObjectKind::Secret, None) => None,
            (_, Some(digester)) => Some(digester),
            (_, None) => Some(plain),
        }
    }
}

/// The webhook's plan for a workload; one it skips for opt-out or ownership is planned as if
/// it had neither, with that verdict, so that what it would track still shows.
pub(super) fn planned(
    workload: &ReadWorkload<'_>,
    view: &NamespaceView<'_>,
) -> Option<(Mutation, Option<Verdict>)> {
    let (namespace, settings) = (view.namespace, view.settings);
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

/// One input's verdict for a workload: why it will not roll comes first (skipped, a kind that
/// never rolls, an input that does not count, held by the flap guard), then what is recorded
/// against what is current.
pub(super) fn verdict(
    skipped: Option<Verdict>,
    kind: WorkloadKind,
    held: bool,
    recorded: Option<&str>,
    current: Option<&str>,
) -> Verdict {
    input_verdict(skipped, kind, Standing::Tracked, held, recorded, current)
}

/// [`verdict`], for a ConfigMap or Secret that stands as `standing`.
pub(super) fn input_verdict(
    skipped: Option<Verdict>,
    kind: WorkloadKind,
    standing: Standing,
    held: bool,
    recorded: Option<&str>,
    current: Option<&str>,
) -> Verdict {
    match skipped {
        Some(verdict) => verdict,
        None if kind.declaration().controller == Controller::Never => Verdict::NotRolling,
        None if standing != Standing::Tracked => Verdict::Untracked,
        None if held => Verdict::Held,
        None => Verdict::of_input(recorded, current),
    }
}

/// An input's current value as explain prints it: its digest, `absent`, or `None` when it
/// could not be read.
pub(super) fn current_of(observation: Observation) -> Option<String> {
    match observation {
        Observation::Digest(digest) => Some(digest),
        Observation::Absent => Some(crate::core::model::annotations::ABSENT.to_owned()),
        // Its line says why instead (`untracked`).
        Observation::Unreadable(_) | Observation::Untracked(_) => None,
    }
}

/// How the object a lookup found stands (an absent or unreadable one counts).
pub(super) fn standing_of(found: &Found<'_>) -> Standing {
    found.as_ref().ok().and_then(|content| content.map(ObjectContent::standing)).unwrap_or_default()
}

/// `workload`'s current digest of `object` (its own keys of it), as [`current_of`] prints
/// it; `None` when it does not track the object or the digest cannot be told.
pub(super) fn current_for_object(
    view: &NamespaceView<'_>,
    workload: &ReadWorkload<'_>,
    object: &ObjectRef,
    found: Found<'_>,
) -> Option<String> {
    let (mutation, _) = planned(workload, view)?;
    let target = mutation.targets.iter().find(|t| t.object == *object)?;
    let plain = Digester::default();
    let digester = view.digester_for(object.kind, &plain)?;
    current_of(mutation.observe(target, digester, found))
}

/// The keys as explain prints them: `["*"]` for every key.
pub(super) fn keys_of(keys: &ConsumedKeys) -> Vec<String> {
    match keys {
        ConsumedKeys::All => vec!["*".to_owned()],
        ConsumedKeys::Keys(keys) => keys.iter().cloned().collect(),
    }
}

fn name_of(json: &str) -> String {
    let name: Option<String> =
        crate::core::field_path::read_at(json, &["metadata", "name"]).ok().flatten();
    name.unwrap_or_default()
}
