//! The admission decision, in two pure steps around the lookups:
//! [`plan`] reads the request and says which objects to digest;
//! [`Mutation::decide`] turns their digests into the patch, warnings and audit.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use json_patch::PatchOperation;

use super::digest::{Digester, ObjectId};
use super::field_path::MAX_NAMED;
use super::inputs::image::containers::PodImages;
use super::inputs::image::env::{self, ImageEnv};
use super::inputs::image::observation::ImageObservation;
use super::inputs::image::tracking::{ImagePlan, ImageTracking};
use super::inputs::secret_provider_class::{self, MAX_CLASSES};
use super::inputs::workload_template::template_digest;
use super::model::annotations::AnnotationDomain;
use super::model::annotations::{ABSENT, MAX_ANNOTATIONS_BYTES};
use super::model::kinds::WorkloadKind;
use super::model::label_selector::LabelSelector;
use super::model::object_content::ObjectContent;
use super::model::object_ref::{ObjectRef, is_dns_subdomain};
use super::model::object_scope::{ObjectScope, Standing};
use super::model::warnings::{Subject, Warnings, kept_or_none};
use super::patch::{AnnotationsLocation, annotations_patch, annotations_size, pointer};
use super::refs::{References, add_named};
use super::selection::{Reach, Target, Tracker, WorkloadTarget, select};
use super::workload::{Template, Workload};

/// What to do when a ConfigMap or Secret cannot be read (`--on-lookup-error`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LookupErrorPolicy {
    /// Keep the object's existing annotation and admit.
    #[default]
    Allow,
    /// Deny the request.
    Deny,
}

/// Server-wide settings the decision depends on.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    pub domain: AnnotationDomain,
    pub on_lookup_error: LookupErrorPolicy,
    /// configsum's own namespace (`None`: [`DEFAULT_OWN_NAMESPACE`]).
    pub own_namespace: Option<String>,
    /// `--object-selector`: the ConfigMaps and Secrets that count.
    pub object_selector: LabelSelector,
    /// `--namespaces`: the only namespaces served, sorted (empty: every namespace).
    pub namespaces: Vec<String>,
}

/// Whether `namespaces` (`--namespaces`, sorted; empty: every namespace) has `namespace`.
pub fn serves(namespaces: &[String], namespace: &str) -> bool {
    namespaces.is_empty() || namespaces.binary_search_by(|n| n.as_str().cmp(namespace)).is_ok()
}

/// configsum's namespace when `POD_NAMESPACE` does not say otherwise.
pub const DEFAULT_OWN_NAMESPACE: &str = "configsum-system";

impl Settings {
    /// configsum's own namespace and `kube-system` are never mutated, and
    /// nothing in them is looked up: the installed configuration never sends
    /// them, so a review for them comes from a direct caller probing digests.
    pub fn is_protected(&self, namespace: &str) -> bool {
        namespace == "kube-system"
            || namespace == self.own_namespace.as_deref().unwrap_or(DEFAULT_OWN_NAMESPACE)
    }

    /// Whether `--namespaces` lets configsum read and mutate in `namespace`.
    pub fn serves(&self, namespace: &str) -> bool {
        serves(&self.namespaces, namespace)
    }

    /// Which ConfigMaps and Secrets count (the owner's `<domain>/ignore`, the object
    /// selector): the readers judge each object by it.
    pub fn object_scope(&self) -> ObjectScope {
        ObjectScope::new(&self.domain, self.object_selector.clone())
    }
}

/// Why a request is allowed untouched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    Kind,
    Subresource,
    Operation,
    ControllerOwned,
    Disabled,
    WorkloadRef,
    ProtectedNamespace,
    /// Outside `--namespaces`: nothing there is read.
    OutsideNamespaces,
}

impl Skip {
    pub fn as_str(self) -> &'static str {
        match self {
            Skip::Kind => "kind not handled",
            Skip::Subresource => "subresource",
            Skip::Operation => "operation not mutated for this kind",
            Skip::ControllerOwned => "has a controller owner",
            Skip::Disabled => "disabled by annotation",
            Skip::WorkloadRef => "rollout uses workloadRef",
            Skip::ProtectedNamespace => "configsum's own namespace or kube-system",
            Skip::OutsideNamespaces => "outside --namespaces",
        }
    }
}

#[derive(Debug)]
pub enum Plan {
    /// Allow untouched, no lookups.
    Skip(Skip),
    /// Allow without a patch, with a warning: the object is not a valid instance of its kind.
    Unparsable(String),
    /// Look up `targets`, then [`Mutation::decide`].
    Mutate(Mutation),
}

/// What a lookup found for one target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observation {
    /// The annotation value: `sha256:…` or `hmac-sha256:…`.
    Digest(String),
    /// The object does not exist.
    Absent,
    /// Any other answer; the reason is short and names no content.
    Unreadable(String),
    /// The object exists and does not count (its owner's `ignore`, `--object-selector`):
    /// no digest, and an existing one is removed.
    Untracked(Standing),
}

/// Whether an observation says the object exists; `None` when it could not be read.
pub fn exists(observation: &Observation) -> Option<bool> {
    match observation {
        Observation::Digest(_) | Observation::Untracked(_) => Some(true),
        Observation::Absent => Some(false),
        Observation::Unreadable(_) => None,
    }
}

/// What a target stands for once observed, where a `<kind>/<a>/<b>` token names either a key
/// of the workload's own `<a>` or object `<b>` of namespace `<a>` (docs/behaviour.md, "References
/// across namespaces").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Meaning {
    /// It counts: digested (or warned about) as usual.
    Counts,
    /// Its token names the other object: no annotation for this one.
    Elsewhere,
    /// The workload's own `<a>` could not be read: its annotation, if any, is kept.
    Undecided,
}

/// What `target`, observed as `observation`, stands for; for another namespace's object,
/// `own_exists` is whether the workload's own object that decides ([`Reach::decided_by`])
/// exists (`None`: unread).
pub fn meaning(target: &Target, observation: &Observation, own_exists: Option<bool>) -> Meaning {
    match target.reach {
        Reach::Own => Meaning::Counts,
        Reach::OwnIfPresent if *observation == Observation::Absent => Meaning::Elsewhere,
        Reach::OwnIfPresent => Meaning::Counts,
        Reach::Across { .. } => match own_exists {
            Some(false) => Meaning::Counts,
            Some(true) => Meaning::Elsewhere,
            None => Meaning::Undecided,
        },
    }
}

#[derive(Clone, Debug)]
pub struct Mutation {
    pub kind: WorkloadKind,
    pub namespace: String,
    /// The objects to look up, in `ObjectRef` order.
    pub targets: Vec<Target>,
    /// The workloads of the namespace whose pod templates' digests this one carries.
    pub workloads: Vec<WorkloadTarget>,
    /// The SecretProviderClasses its CSI volumes name, whose rotations it tracks ([`Self::classes`];
    /// one pointer, as most plans the controller keeps mount none).
    classes: Option<Box<ClassTargets>>,
    location: AnnotationsLocation,
    /// The template's annotations as sent in `request.object`. Sorted pairs
    /// rather than a map: the controller keeps one plan per watched workload,
    /// and a B-tree node per map would be most of its memory.
    current: SortedPairs,
    /// Owned annotations of `request.object`, else of `request.oldObject`.
    existing: SortedPairs,
    kept_keys: Box<[String]>,
    warnings: Warnings,
    /// `<domain>/images` and `<domain>/image-policy`, if the workload tracks
    /// images (boxed: most plans the controller keeps track none).
    image_tracking: Option<Box<ImageTracking>>,
    /// `<domain>/image-env`'s variables (empty for most workloads).
    image_env: Box<[ImageEnv]>,
    /// The tracked images, once [`Mutation::read_pod_images`] has read the pod.
    pub images: ImagePlan,
}

/// A SecretProviderClass a pod template's CSI volume names (a valid name), and its
/// annotation key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassTarget {
    pub name: String,
    pub key: String,
}

/// A plan's classes, boxed behind one pointer.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ClassTargets(Vec<ClassTarget>);

/// What the shell observed for a plan: one [`Observation`] per target (in `targets` order) and
/// one [`ImageObservation`] per tracked image (in [`ImagePlan::targets`] order; missing ones
/// keep their annotations).
#[derive(Debug, Default)]
pub struct Observed {
    pub objects: Vec<Observation>,
    pub images: Vec<ImageObservation>,
    /// One per tracked workload (in [`Mutation::workloads`] order); `None`, or none at all,
    /// keeps its annotation as it is (render, and the controller's first observation).
    pub workloads: Vec<Option<Observation>>,
    /// One per tracked SecretProviderClass (in [`Mutation::classes`] order): its digest, or
    /// `Absent` when no status reports it; `None`, `Absent` or `Unreadable` keep its
    /// annotation as it is (never a denial).
    pub classes: Vec<Option<Observation>>,
}

/// The answer: a patch (possibly empty), warnings, and what changed.
#[derive(Debug, Default)]
pub struct Decision {
    pub patch: Vec<PatchOperation>,
    pub warnings: Vec<String>,
    /// Objects whose existing digest changed value, for `auditAnnotations`.
    pub changed: Vec<ObjectRef>,
    /// Containers whose existing image digest changed value, likewise.
    pub changed_images: Vec<String>,
    /// `<container>/<VAR>` of each image-env variable whose digest changed value, likewise.
    pub changed_env: Vec<String>,
    /// Tracked workloads (`deployment/db`) whose existing digest changed value, likewise.
    pub changed_workloads: Vec<String>,
    /// Tracked SecretProviderClasses (`secretproviderclass/vault`) whose existing digest
    /// changed value, likewise.
    pub changed_classes: Vec<String>,
    /// Tracked workloads left as they are because nothing here can read them (render).
    pub unobserved_workloads: Vec<String>,
    /// Objects that could not be read: their annotations were kept, or the
    /// request is denied. The controller retries these rather than deny.
    pub unreadable: Vec<ObjectRef>,
    /// The webhook's denial (`--on-lookup-error=deny` and something unreadable).
    pub denied: Option<String>,
}

impl Decision {
    /// Allowed untouched with one warning about the workload as a whole,
    /// within the same limits as every other warning.
    pub fn warn(message: String) -> Self {
        let mut warnings = Warnings::default();
        warnings.push_plain(message);
        Decision { warnings: warnings.into_response(), ..Decision::default() }
    }
}

/// Which objects does this workload's pod template consume, and which
/// annotations does it carry? `old_annotations` are the annotations at the
/// same place in the object's previous version (an UPDATE's `oldObject`), the
/// fallback "existing" values; empty when there is none.
pub fn plan(
    workload: Workload,
    old_annotations: &BTreeMap<String, String>,
    settings: &Settings,
) -> Plan {
    let kind = workload.kind;
    let unparsable = |why: &str| {
        Plan::Unparsable(format!("configsum: the {} was not changed: {why}", kind.as_str()))
    };
    if workload.namespace.as_deref().is_some_and(|ns| settings.is_protected(ns)) {
        return Plan::Skip(Skip::ProtectedNamespace);
    }
    if workload.namespace.as_deref().is_some_and(|ns| !settings.serves(ns)) {
        return Plan::Skip(Skip::OutsideNamespaces);
    }
    let meta = &workload.metadata;
    if meta.owner_references.iter().flatten().any(|o| o.controller == Some(true)) {
        return Plan::Skip(Skip::ControllerOwned);
    }
    let domain = &settings.domain;
    let annotation = |name: &str| domain.value_in(meta.annotations.as_ref(), name);
    if annotation(AnnotationDomain::ENABLED) == Some("false") {
        return Plan::Skip(Skip::Disabled);
    }
    let (mut refs, class_names) = match workload.template {
        Template::Present(template) => (template.spec.references, template.spec.classes),
        Template::WorkloadRef => return Plan::Skip(Skip::WorkloadRef),
        Template::None => (References::default(), BTreeSet::new()),
    };
    let Some(namespace) = workload.namespace.filter(|n| !n.is_empty()) else {
        return unparsable("it has no namespace");
    };

    let mut warnings = Warnings::default();
    for at in &workload.named {
        add_named(&mut refs, at.reference, &at.values);
    }
    let beyond: usize = workload.named.iter().map(|n| n.beyond).sum();
    if beyond > 0 {
        warnings.push_plain(format!(
            "configsum: {beyond} values at reference paths beyond the first {MAX_NAMED} were not read"
        ));
    }
    let track = annotation(AnnotationDomain::TRACK);
    let ignore = annotation(AnnotationDomain::IGNORE);
    let serves = |other: &str| settings.serves(other);
    let tracker = Tracker { namespace: &namespace, serves: &serves };
    let mut selection = select(refs, track, ignore, tracker, domain, &mut warnings);
    // Its own template digest would change with every change of its own: a roll each time.
    let own = |target: &WorkloadTarget| {
        target.kind == kind && meta.name.as_deref() == Some(target.name.as_str())
    };
    if let Some(itself) = selection.workloads.iter().find(|t| own(t)) {
        let subject = Subject::Workload { word: kind.word(), name: &itself.name };
        warnings.push(subject, "a workload cannot track itself; skipped");
        selection.workloads.retain(|t| !own(t));
    }
    let image_tracking = ImageTracking::parse(
        annotation(AnnotationDomain::IMAGES),
        annotation(AnnotationDomain::IMAGE_POLICY),
        domain,
        &mut warnings,
    )
    .map(Box::new);
    let image_env = match annotation(AnnotationDomain::IMAGE_ENV) {
        Some(text) => env::parse(text, &domain.image_env(), &mut warnings).into_boxed_slice(),
        None => Box::default(),
    };

    let classes = class_targets(class_names, domain, &mut warnings);
    let classes = (!classes.is_empty()).then(|| Box::new(ClassTargets(classes)));

    let location = AnnotationsLocation {
        path: kind.annotations_path(),
        present: workload.annotations.present,
    };
    let current = workload.annotations.values.unwrap_or_default();
    let mut existing: BTreeMap<String, String> = current
        .iter()
        .filter(|(k, _)| domain.owns(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (key, value) in old_annotations {
        if domain.owns(key) {
            existing.entry(key.clone()).or_insert_with(|| value.clone());
        }
    }
    Plan::Mutate(Mutation {
        kind,
        namespace,
        targets: selection.targets,
        workloads: selection.workloads,
        classes,
        location,
        current: SortedPairs::from(current),
        existing: SortedPairs::from(existing),
        kept_keys: selection.kept_keys.into_iter().collect(),
        warnings,
        image_tracking,
        image_env,
        images: ImagePlan::default(),
    })
}

/// The classes `names` (from the CSI volumes) as targets: valid names only, at most
/// [`MAX_CLASSES`], each with its key; the others said once in a warning.
fn class_targets(
    names: BTreeSet<String>,
    domain: &AnnotationDomain,
    warnings: &mut Warnings,
) -> Vec<ClassTarget> {
    let word = secret_provider_class::WORD;
    let mut targets = Vec::new();
    let mut beyond = 0;
    for name in names {
        if !is_dns_subdomain(&name, 253) {
            warnings.push_plain(format_args!(
                "configsum: a CSI volume names the SecretProviderClass {:?}, not a valid name; not tracked",
                super::model::warnings::shorten_middle(&name, 80)
            ));
            continue;
        }
        let Some(key) = domain.provider_class_key(&name) else {
            let subject = Subject::Workload { word, name: &name };
            warnings.push(subject, "its annotation key would be too long; not tracked");
            continue;
        };
        if targets.len() == MAX_CLASSES {
            beyond += 1;
            continue;
        }
        targets.push(ClassTarget { name, key });
    }
    if beyond > 0 {
        warnings.push_plain(format_args!(
            "configsum: {beyond} SecretProviderClasses beyond the first {MAX_CLASSES} were not tracked"
        ));
    }
    targets
}

impl Mutation {
    /// Whether the image pass must read the pod spec: the workload tracks
    /// images, or carries image annotations that may need updating or removing.
    fn wants_pod_images(&self, settings: &Settings) -> bool {
        let has_image_keys = self.existing.0.iter().any(|(k, _)| settings.domain.is_image_key(k));
        ImagePlan::wanted(self.image_tracking.as_deref(), &self.image_env, has_image_keys)
    }

    /// The image pass, for the webhook and the controller alike: when the workload tracks
    /// images or carries their digests, `read` gives its containers (read in the pass over the
    /// review, or in a second, light pass over the text the workload came from); its argument
    /// says whether their `env` is needed (`<domain>/image-env`). `None` from `read` keeps every
    /// image annotation as it is; an error is the caller's to report.
    pub fn with_pod_images<E>(
        mut self,
        settings: &Settings,
        read: impl FnOnce(bool) -> Option<Result<PodImages, E>>,
    ) -> Result<Self, E> {
        if self.wants_pod_images(settings) {
            if let Some(pod) = read(!self.image_env.is_empty()) {
                self.read_pod_images(pod?, settings);
            }
        }
        Ok(self)
    }

    /// Selects the tracked images from what the image pass read. Without it,
    /// every existing image annotation is kept as it is.
    fn read_pod_images(&mut self, pod: PodImages, settings: &Settings) {
        let existing = &self.existing;
        self.images = ImagePlan::read(
            self.image_tracking.as_deref(),
            &self.image_env,
            pod,
            &settings.domain,
            |key| existing.get(key).map(str::to_owned),
            &mut self.warnings,
        );
    }

    /// Whether every input records a digest already (objects, images, image-env variables,
    /// workloads): else some is a first observation, which the controller leaves alone.
    pub fn records_every_input(&self) -> bool {
        self.targets.iter().all(|t| self.existing.get(&t.key).is_some())
            && self.workloads.iter().all(|w| self.existing.get(&w.key).is_some())
            && self.classes().iter().all(|c| self.existing.get(&c.key).is_some())
            && self.images.targets().iter().all(|t| t.recorded.is_some())
    }

    /// The SecretProviderClasses its CSI volumes name, in name order.
    pub fn classes(&self) -> &[ClassTarget] {
        self.classes.as_deref().map_or(&[], |c| c.0.as_slice())
    }

    /// The existing value of the owned annotation `key`, if any.
    pub fn existing_annotation(&self, key: &str) -> Option<&str> {
        self.existing.get(key)
    }

    /// The existing annotation value for `target` (see the README's "Annotations"), if any.
    pub fn existing(&self, target: &Target) -> Option<&str> {
        self.existing.get(&target.key)
    }

    /// Turns what was observed into the answer.
    pub fn decide(self, observed: Observed, settings: &Settings) -> Decision {
        let Mutation {
            targets,
            workloads,
            classes,
            location,
            current,
            existing,
            kept_keys,
            mut warnings,
            mut images,
            ..
        } = self;
        let Observed {
            objects: observations,
            images: image_observations,
            workloads: mut workload_observations,
            classes: mut class_observations,
        } = observed;
        images.observe(image_observations);
        let (current, existing) = (current.into_map(), existing.into_map());
        let mut desired: BTreeMap<String, String> = BTreeMap::new();
        let mut unreadable = Vec::new();
        let mut changed = Vec::new();
        // Whether the workload's own objects that stand aside when absent exist: only where
        // one does not do its tokens name the other namespace's objects.
        let own: BTreeMap<ObjectRef, Option<bool>> = targets
            .iter()
            .zip(&observations)
            .filter(|(target, _)| target.reach == Reach::OwnIfPresent)
            .map(|(target, seen)| (target.object.clone(), exists(seen)))
            .collect();
        for (target, observation) in targets.into_iter().zip(observations) {
            let decides = target.reach.decided_by(&target.object);
            let own_exists = decides.and_then(|own_object| own.get(&own_object).copied().flatten());
            match meaning(&target, &observation, own_exists) {
                Meaning::Counts => {}
                Meaning::Elsewhere => {
                    if existing.contains_key(&target.key) {
                        changed.push(target.object);
                    }
                    continue;
                }
                Meaning::Undecided => {
                    if let Some(value) = existing.get(&target.key) {
                        desired.insert(target.key, value.clone());
                    }
                    continue;
                }
            }
            if matches!(target.reach, Reach::Across { .. }) && observation == Observation::Absent {
                // Said the same whether or not the object exists: no oracle.
                let (word, namespace) =
                    (target.object.kind.prefix(), target.object.namespace_from(""));
                let readable_from = settings.domain.readable_from();
                let reason = format_args!(
                    "no {word} {namespace} here, and namespace {namespace} gives no consent ({readable_from}); skipped"
                );
                warnings.push(Subject::Object(&target.object), reason);
                if existing.contains_key(&target.key) {
                    changed.push(target.object);
                }
                continue;
            }
            let value = match observation {
                Observation::Digest(digest) => digest,
                Observation::Absent => {
                    if !target.consumption.optional {
                        let subject = Subject::Object(&target.object);
                        warnings.push(subject, "not found; its digest is \"absent\"");
                    }
                    ABSENT.to_owned()
                }
                Observation::Untracked(standing) => {
                    // Said once, where the digest goes away (and the template changes).
                    if existing.contains_key(&target.key) {
                        let why = standing.reason().unwrap_or_default();
                        let subject = Subject::Object(&target.object);
                        warnings.push(subject, format_args!("{why}; its digest is removed"));
                        changed.push(target.object);
                    }
                    continue;
                }
                Observation::Unreadable(reason) => {
                    let kept = existing.get(&target.key);
                    let outcome = kept_or_none(kept.is_some());
                    let subject = Subject::Object(&target.object);
                    warnings.push(subject, format_args!("could not be read; {outcome} ({reason})"));
                    if let Some(value) = kept {
                        desired.insert(target.key, value.clone());
                    }
                    unreadable.push(target.object);
                    continue;
                }
            };
            if existing.get(&target.key).is_some_and(|old| *old != value) {
                changed.push(target.object);
            }
            desired.insert(target.key, value);
        }
        let mut unreadable_workloads = Vec::new();
        let mut changed_workloads = Vec::new();
        workload_observations.resize(workloads.len(), None);
        for (target, observation) in workloads.into_iter().zip(workload_observations) {
            let subject = Subject::Workload { word: target.kind.word(), name: &target.name };
            let old = existing.get(&target.key);
            let value = match observation {
                Some(Observation::Digest(digest)) => digest,
                Some(Observation::Absent) => {
                    warnings.push(subject, "not found; its digest is \"absent\"");
                    ABSENT.to_owned()
                }
                Some(Observation::Unreadable(reason)) => {
                    let outcome = kept_or_none(old.is_some());
                    warnings.push(subject, format_args!("could not be read; {outcome} ({reason})"));
                    unreadable_workloads.push(target.to_string());
                    match old {
                        Some(old) => old.clone(),
                        None => continue,
                    }
                }
                // A workload's template is never untracked; kept, as unobserved.
                None | Some(Observation::Untracked(_)) => match old {
                    Some(old) => old.clone(),
                    None => continue,
                },
            };
            if old.is_some_and(|old| *old != value) {
                changed_workloads.push(target.to_string());
            }
            desired.insert(target.key, value);
        }
        let mut changed_classes = Vec::new();
        let classes = classes.map(|c| c.0).unwrap_or_default();
        class_observations.resize(classes.len(), None);
        for (target, observation) in classes.into_iter().zip(class_observations) {
            let old = existing.get(&target.key);
            let value = match observation {
                Some(Observation::Digest(digest)) => digest,
                Some(Observation::Unreadable(reason)) => {
                    let word = secret_provider_class::WORD;
                    let subject = Subject::Workload { word, name: &target.name };
                    let outcome = kept_or_none(old.is_some());
                    warnings.push(subject, format_args!("could not be read; {outcome} ({reason})"));
                    match old {
                        Some(old) => old.clone(),
                        None => continue,
                    }
                }
                // No status reports it (its pods are gone, or not mounted yet), or not observed.
                None | Some(Observation::Absent | Observation::Untracked(_)) => match old {
                    Some(old) => old.clone(),
                    None => continue,
                },
            };
            if old.is_some_and(|old| *old != value) {
                changed_classes.push(format!("{}/{}", secret_provider_class::WORD, target.name));
            }
            desired.insert(target.key, value);
        }
        for key in kept_keys {
            if let Some(value) = existing.get(&key) {
                desired.insert(key, value.clone());
            }
        }

        let images = images.decide(|key| existing.get(key).cloned(), &mut warnings);
        match images.annotations {
            Some(annotations) => desired.extend(annotations),
            None => {
                let image_keys = existing.iter().filter(|(k, _)| settings.domain.is_image_key(k));
                desired.extend(image_keys.map(|(k, v)| (k.clone(), v.clone())));
            }
        }

        let unreadable_any = !unreadable.is_empty() || !unreadable_workloads.is_empty();
        if settings.on_lookup_error == LookupErrorPolicy::Deny && unreadable_any {
            let mut names: Vec<String> = unreadable.iter().map(ToString::to_string).collect();
            names.extend(unreadable_workloads);
            let denied = format!(
                "configsum could not read {} and --on-lookup-error=deny is set; retry shortly",
                names.join(", ")
            );
            return Decision {
                denied: Some(denied),
                warnings: warnings.into_response(),
                unreadable,
                ..Decision::default()
            };
        }

        // Counted before the patch takes the desired values.
        let others = current.iter().filter(|(k, _)| !settings.domain.owns(k));
        let size = annotations_size(others.chain(desired.iter()));
        let mut patch = annotations_patch(location, &current, desired, |k| settings.domain.owns(k));
        patch.extend(images.images.into_iter().map(|(path, image)| replace(&path, image)));
        patch.extend(images.env);
        if !patch.is_empty() && size > MAX_ANNOTATIONS_BYTES {
            warnings.push_plain(format_args!(
                "configsum: no digests written: the annotations would total {size} bytes, over the 262144 limit"
            ));
            return Decision {
                warnings: warnings.into_response(),
                unreadable,
                ..Decision::default()
            };
        }
        Decision {
            patch,
            warnings: warnings.into_response(),
            changed,
            changed_images: images.changed,
            changed_env: images.changed_env,
            changed_workloads,
            changed_classes,
            unobserved_workloads: Vec::new(),
            unreadable,
            denied: None,
        }
    }
}

/// A `replace` of the string at `path` (a container's `image`, a pointer the
/// image pass built from field names and indexes, which need no escaping).
fn replace(path: &str, value: String) -> PatchOperation {
    let path = pointer(path.split('/').skip(1));
    PatchOperation::Replace(json_patch::ReplaceOperation {
        path,
        value: serde_json::Value::String(value),
    })
}

/// String pairs sorted by key, read by binary search; small and compact.
#[derive(Clone, Debug, Default)]
struct SortedPairs(Box<[(String, String)]>);

impl From<BTreeMap<String, String>> for SortedPairs {
    fn from(map: BTreeMap<String, String>) -> Self {
        SortedPairs(map.into_iter().collect())
    }
}

impl SortedPairs {
    fn get(&self, key: &str) -> Option<&str> {
        let i = self.0.binary_search_by(|(k, _)| k.as_str().cmp(key)).ok()?;
        Some(self.0[i].1.as_str())
    }

    fn into_map(self) -> BTreeMap<String, String> {
        self.0.into_vec().into_iter().collect()
    }
}

/// Where a lookup finds a target ([`Mutation::lookup_key`]): the namespace the object lives
/// in, and the object as named from there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LookupKey<'a> {
    pub namespace: &'a str,
    pub object: Cow<'a, ObjectRef>,
}

/// The outcome of looking up one object, before digesting.
pub type Found<'a> = Result<Option<&'a ObjectContent>, String>;

impl Mutation {
    /// Where a lookup finds `target`: its own namespace and name; `None` when it is never
    /// read (another namespace's, outside `--namespaces`). Borrowed from the plan but for
    /// another namespace's object, which is named there without its namespace.
    pub fn lookup_key<'a>(&'a self, target: &'a Target) -> Option<LookupKey<'a>> {
        if !target.is_read() {
            return None;
        }
        let object = &target.object;
        Some(match &object.namespace {
            None => LookupKey { namespace: &self.namespace, object: Cow::Borrowed(object) },
            Some(namespace) => LookupKey {
                namespace,
                object: Cow::Owned(ObjectRef::new(object.kind, object.name.as_str())),
            },
        })
    }

    /// Digests the pod template a lookup found for a tracked workload (the template's JSON,
    /// as the API server returns it).
    pub fn observe_workload(
        &self,
        found: Result<Option<&serde_json::Value>, String>,
        domain: &AnnotationDomain,
    ) -> Observation {
        match found {
            Ok(Some(template)) => {
                Observation::Digest(template_digest(template, &domain.workload_prefixes()))
            }
            Ok(None) => Observation::Absent,
            Err(reason) => Observation::Unreadable(reason),
        }
    }

    /// Digests what a lookup found for `target`; the content can be dropped after.
    pub fn observe(&self, target: &Target, digester: &Digester, found: Found<'_>) -> Observation {
        match found {
            // Another namespace's object without its owner's consent is as good as absent:
            // nothing tells the two apart.
            Ok(Some(content))
                if target.object.namespace.is_some() && !content.readable_from(&self.namespace) =>
            {
                Observation::Absent
            }
            Ok(Some(content)) if content.standing() != Standing::Tracked => {
                Observation::Untracked(content.standing())
            }
            Ok(Some(content)) => {
                let namespace = target.object.namespace_from(&self.namespace);
                let id = ObjectId { namespace, object: &target.object };
                Observation::Digest(digester.digest(
                    id,
                    content,
                    &target.consumption.keys,
                    self.existing(target),
                ))
            }
            Ok(None) => Observation::Absent,
            Err(reason) => Observation::Unreadable(reason),
        }
    }
}
