//! Which containers' images a workload tracks, and what their resolutions
//! make of the annotations and images (docs/images.md).

use std::collections::{BTreeMap, BTreeSet};

use super::containers::{MAX_CONTAINERS_READ, PodImages};
use super::env::{EnvPatch, EnvSlot, EnvTarget, ImageEnv};
use super::observation::ImageObservation;
use super::reference::ImageName;
use crate::core::model::annotations::ABSENT;
use crate::core::model::annotations::AnnotationDomain;
use crate::core::model::warnings::{Subject, Warnings, kept_or_none};

/// At most this many containers' images are resolved per review: a pod
/// rarely runs ten, and each is a registry request. The rest keep their
/// annotations, with a warning.
pub const MAX_TRACKED_IMAGES: usize = 32;

/// What `<domain>/image-policy` asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ImagePolicy {
    /// Record the digest in the annotation only.
    #[default]
    Record,
    /// Also pin the container's image to it.
    Pin,
}

/// The workload's `<domain>/images` and `<domain>/image-policy`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageTracking {
    pub policy: ImagePolicy,
    containers: Selected,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Selected {
    All,
    Named(BTreeSet<String>),
}

impl ImageTracking {
    /// Reads the two annotations; `None` when `images` is absent or empty.
    pub fn parse(
        images: Option<&str>,
        policy: Option<&str>,
        domain: &AnnotationDomain,
        warnings: &mut Warnings,
    ) -> Option<ImageTracking> {
        let mut tokens = images?.split(',').map(str::trim).filter(|t| !t.is_empty()).peekable();
        tokens.peek()?;
        let containers = if tokens.clone().any(|t| t == "*") {
            Selected::All
        } else {
            Selected::Named(tokens.map(str::to_owned).collect())
        };
        let policy = match policy.map(str::trim) {
            None | Some("record") => ImagePolicy::Record,
            Some("pin") => ImagePolicy::Pin,
            Some(other) => {
                let annotation = domain.image_policy();
                let subject = Subject::Written { text: other, annotation: &annotation };
                warnings.push(subject, "not record or pin; recording only");
                ImagePolicy::Record
            }
        };
        Some(ImageTracking { policy, containers })
    }

    fn tracks(&self, container: &str) -> bool {
        match &self.containers {
            Selected::All => true,
            Selected::Named(names) => names.contains(container),
        }
    }
}

/// One reference to resolve, and where its digest goes: a tracked container's image
/// annotation (and image, under `pin`), or a variable named by `<domain>/image-env`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageTarget {
    pub container: String,
    /// What the digest is recorded as: `image.<domain>/<container>`, or
    /// `image-env/<container>/<VAR>` (the audit annotation's name).
    pub key: String,
    /// `<repository>:<tag>` as written: what the registry is asked about.
    pub reference: String,
    /// The image reference as the author wrote it, for warnings and Events:
    /// the spec's image, or the tagged reference behind configsum's own pin.
    pub written: String,
    /// The digest recorded now: the annotation, or the variable's value if it is a digest.
    /// The controller records no first observation, so it moves only what has one.
    pub recorded: Option<String>,
    pub(super) slot: Slot,
}

/// Where a target's digest goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Slot {
    Image(ImageSlot),
    Env(EnvSlot),
}

/// A tracked container's image as the spec has it now, and where it sits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ImageSlot {
    image: String,
    path: String,
    /// `<repository>:<tag>@<d>` with `d` its annotation: pinned by configsum.
    pinned_by_us: bool,
    pull_always: bool,
}

impl ImageTarget {
    /// The variable this target sets, if it is one of `<domain>/image-env`'s.
    pub fn variable(&self) -> Option<&str> {
        match &self.slot {
            Slot::Env(env) => Some(&env.variable),
            Slot::Image(_) => None,
        }
    }
}

/// The image half of a plan: empty until the image pass has read the pod.
#[derive(Clone, Debug, Default)]
pub struct ImagePlan {
    /// `None` until [`ImagePlan::read`]: then every existing image annotation
    /// is kept as it is, as a reader without the pod spec must. Boxed: the
    /// controller keeps a plan per workload, and most track no image.
    read: Option<Box<Read>>,
}

#[derive(Clone, Debug)]
struct Read {
    policy: ImagePolicy,
    targets: Vec<ImageTarget>,
    observations: Vec<ImageObservation>,
    /// Containers no longer tracked whose image configsum pinned: (path, `<repository>:<tag>`).
    unpin: Vec<(String, String)>,
    /// Annotations of tracked containers beyond [`MAX_TRACKED_IMAGES`], kept as they are.
    kept: Vec<String>,
    pull_secrets: Vec<String>,
    service_account: Option<String>,
}

/// What the image half adds to the answer.
#[derive(Debug, Default)]
pub struct ImageOutcome {
    /// Desired image annotations; `None` keeps every existing one.
    pub annotations: Option<BTreeMap<String, String>>,
    /// (JSON pointer, new image) for each container image to rewrite.
    pub images: Vec<(String, String)>,
    /// Containers whose existing digest changed value, for the audit annotation.
    pub changed: Vec<String>,
    /// The `env` operations of `<domain>/image-env`, in target order.
    pub env: Vec<json_patch::PatchOperation>,
    /// `<container>/<VAR>` of each variable whose digest changed value, likewise.
    pub changed_env: Vec<String>,
}

impl ImagePlan {
    /// Whether the image pass must read the pod: the workload tracks images,
    /// or carries image annotations to update or remove.
    pub fn wanted(
        tracking: Option<&ImageTracking>,
        image_env: &[ImageEnv],
        existing_image_keys: bool,
    ) -> bool {
        tracking.is_some() || !image_env.is_empty() || existing_image_keys
    }

    /// Selects the tracked containers of `pod`, then the variables of `image_env`.
    /// `existing` gives an image annotation's existing value.
    pub fn read(
        tracking: Option<&ImageTracking>,
        image_env: &[ImageEnv],
        pod: PodImages,
        domain: &AnnotationDomain,
        existing: impl Fn(&str) -> Option<String>,
        warnings: &mut Warnings,
    ) -> ImagePlan {
        if pod.unread > 0 {
            // An absurd pod: leave every image annotation and image as it is.
            warnings.push_plain(format_args!(
                "the pod spec has over {MAX_CONTAINERS_READ} containers or pull secrets; images were not resolved"
            ));
            return ImagePlan::default();
        }
        let env_targets = super::env::select(image_env, &pod.containers, domain, warnings);
        let mut targets = Vec::new();
        let mut unpin = Vec::new();
        let mut seen = BTreeSet::new();
        for container in pod.containers {
            seen.insert(container.name.clone());
            let key = domain.image_key(&container.name);
            let annotation = existing(&key);
            let Some(name) = ImageName::parse(&container.image) else {
                if tracking.is_some_and(|t| t.tracks(&container.name)) {
                    let subject = Subject::ContainerName(&container.name);
                    warnings.push(subject, "its image is not a valid reference; not tracked");
                }
                continue;
            };
            let subject = Subject::Container { name: &container.name, image: &container.image };
            let pinned_by_us = name.digest.is_some() && name.digest == annotation.as_deref();
            let tracked = tracking.is_some_and(|t| t.tracks(&container.name));
            if !tracked {
                if pinned_by_us {
                    unpin.push((container.path, name.tagged()));
                }
                continue;
            }
            if name.digest.is_some() && !pinned_by_us {
                // Pinned by its author: there is no tag to follow.
                if matches!(tracking.map(|t| &t.containers), Some(Selected::Named(_))) {
                    warnings.push(subject, "pinned by digest; not tracked");
                }
                continue;
            }
            let pull_always = match container.pull_policy.as_deref() {
                Some(policy) => policy == "Always",
                // The API server's default: Always for `latest` or no tag.
                None => name.tag_or_default() == "latest",
            };
            let reference = name.tagged();
            let written = if pinned_by_us { reference.clone() } else { container.image.clone() };
            let slot = ImageSlot {
                image: container.image,
                path: container.path,
                pinned_by_us,
                pull_always,
            };
            targets.push(ImageTarget {
                container: container.name,
                key,
                reference,
                written,
                recorded: annotation,
                slot: Slot::Image(slot),
            });
        }
        if let Some(Selected::Named(names)) = tracking.map(|t| &t.containers) {
            let annotation = domain.images();
            for missing in names.difference(&seen) {
                let subject = Subject::Written { text: missing, annotation: &annotation };
                warnings.push(subject, "no container of that name in the pod spec");
            }
        }
        let mut kept = Vec::new();
        if targets.len() > MAX_TRACKED_IMAGES {
            let beyond = targets.split_off(MAX_TRACKED_IMAGES);
            warnings.push_plain(format_args!(
                "{} containers beyond the first {MAX_TRACKED_IMAGES} track images; their annotations were kept",
                beyond.len()
            ));
            kept.extend(beyond.into_iter().map(|target| target.key));
        }
        targets.extend(env_targets.into_iter().map(|t: EnvTarget| ImageTarget {
            container: t.container,
            key: t.key,
            reference: t.reference,
            written: t.written,
            recorded: t.recorded,
            slot: Slot::Env(t.slot),
        }));
        let observations = vec![ImageObservation::Keep; targets.len()];
        ImagePlan {
            read: Some(Box::new(Read {
                policy: tracking.map(|t| t.policy).unwrap_or_default(),
                targets,
                observations,
                unpin,
                kept,
                pull_secrets: pod.pull_secrets,
                service_account: pod.service_account,
            })),
        }
    }

    /// The tracked containers, in pod-spec order.
    pub fn targets(&self) -> &[ImageTarget] {
        self.read.as_ref().map_or(&[], |r| &r.targets)
    }

    /// `imagePullSecrets` and the ServiceAccount (`default` when unset) whose
    /// pull secrets are the credentials to resolve with.
    pub fn credentials(&self) -> (&[String], &str) {
        match &self.read {
            Some(r) => (&r.pull_secrets, r.service_account.as_deref().unwrap_or("default")),
            None => (&[], "default"),
        }
    }

    /// The digest recorded for the target `key` names, if any.
    pub fn recorded(&self, key: &str) -> Option<&str> {
        let target = self.targets().iter().find(|target| target.key == key)?;
        target.recorded.as_deref()
    }

    /// Records what resolving [`ImagePlan::targets`] found, in their order.
    pub fn observe(&mut self, observations: Vec<ImageObservation>) {
        if let Some(read) = &mut self.read {
            let n = read.targets.len();
            read.observations = observations;
            read.observations.resize(n, ImageObservation::Keep);
        }
    }

    /// The annotations and image rewrites the observations call for.
    pub fn decide(
        self,
        existing: impl Fn(&str) -> Option<String>,
        warnings: &mut Warnings,
    ) -> ImageOutcome {
        let Some(read) = self.read.map(|read| *read) else { return ImageOutcome::default() };
        let mut outcome = ImageOutcome { annotations: Some(BTreeMap::new()), ..Default::default() };
        let annotations = outcome.annotations.get_or_insert_default();
        outcome.images.extend(read.unpin);
        for key in read.kept {
            if let Some(value) = existing(&key) {
                annotations.insert(key, value);
            }
        }
        let mut env = EnvPatch::default();
        for (target, observation) in read.targets.into_iter().zip(read.observations) {
            let slot = match target.slot {
                Slot::Image(slot) => slot,
                Slot::Env(slot) => {
                    env.apply(&target.container, slot, &target.written, observation, warnings);
                    continue;
                }
            };
            let old = existing(&target.key);
            let name = ImageName::parse(&slot.image);
            let subject = Subject::Container { name: &target.container, image: &target.written };
            let (value, image) = match observation {
                ImageObservation::Digest(digest) => {
                    if read.policy == ImagePolicy::Record && !slot.pull_always {
                        warnings.push(
                            subject,
                            "imagePullPolicy is not Always: a node may run an older image it cached",
                        );
                    }
                    let image = name.map(|n| match read.policy {
                        ImagePolicy::Pin => n.pinned(&digest),
                        ImagePolicy::Record => {
                            if slot.pinned_by_us {
                                n.tagged()
                            } else {
                                slot.image.clone()
                            }
                        }
                    });
                    (Some(digest), image)
                }
                ImageObservation::Unknown => {
                    warnings.push(subject, "unknown to the registry; its digest is \"absent\"");
                    // No digest to pin to: back to the tag.
                    let image = name.filter(|_| slot.pinned_by_us).map(|n| n.tagged());
                    (Some(ABSENT.to_owned()), image)
                }
                ImageObservation::Failed(reason) => {
                    let outcome = kept_or_none(old.is_some());
                    warnings
                        .push(subject, format_args!("image not resolved; {outcome} ({reason})"));
                    (old.clone(), None)
                }
                ImageObservation::Keep => (old.clone(), None),
            };
            if let Some(value) = value {
                if old.as_ref().is_some_and(|old| *old != value) {
                    outcome.changed.push(target.container.clone());
                }
                annotations.insert(target.key, value);
            }
            if let Some(image) = image.filter(|image| *image != slot.image) {
                outcome.images.push((slot.path, image));
            }
        }
        (outcome.env, outcome.changed_env) = env.finish();
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::inputs::image::containers::ContainerImage;
    use serde_json::json;

    const D1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const D2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    fn pod(containers: &[(&str, &str, Option<&str>)]) -> PodImages {
        let containers = containers
            .iter()
            .enumerate()
            .map(|(i, (name, image, policy))| ContainerImage {
                name: name.to_string(),
                image: image.to_string(),
                pull_policy: policy.map(str::to_owned),
                path: format!("/spec/containers/{i}/image"),
                env: None,
            })
            .collect();
        PodImages { containers, ..PodImages::default() }
    }

    fn domain() -> AnnotationDomain {
        AnnotationDomain::default()
    }

    fn tracking(images: &str, policy: &str) -> ImageTracking {
        ImageTracking::parse(Some(images), Some(policy), &domain(), &mut Warnings::default())
            .expect("tracks")
    }

    struct Run {
        outcome: ImageOutcome,
        warnings: Vec<String>,
        targets: Vec<String>,
    }

    fn run(
        tracking: Option<&ImageTracking>,
        pod: PodImages,
        existing: &[(&str, &str)],
        observe: impl Fn(&ImageTarget) -> ImageObservation,
    ) -> Run {
        let existing: BTreeMap<String, String> =
            existing.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let get = |k: &str| existing.get(k).cloned();
        let mut warnings = Warnings::default();
        let domain = AnnotationDomain::default();
        let mut plan = ImagePlan::read(tracking, &[], pod, &domain, get, &mut warnings);
        let targets = plan.targets().iter().map(|t| t.reference.clone()).collect();
        let observations = plan.targets().iter().map(&observe).collect();
        plan.observe(observations);
        let outcome = plan.decide(get, &mut warnings);
        Run { outcome, warnings: warnings.into_response(), targets }
    }

    fn annotations(run: &Run) -> Vec<(&str, &str)> {
        let map = run.outcome.annotations.as_ref().expect("read");
        map.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }

    #[test]
    fn parses_the_workload_annotations() {
        let mut warnings = Warnings::default();
        assert_eq!(ImageTracking::parse(None, Some("pin"), &domain(), &mut warnings), None);
        assert_eq!(ImageTracking::parse(Some(" , "), None, &domain(), &mut warnings), None);
        let t = ImageTracking::parse(Some("app, *"), None, &domain(), &mut warnings).expect("all");
        assert_eq!((t.policy, t.containers), (ImagePolicy::Record, Selected::All));
        let t = ImageTracking::parse(Some("app,sidecar"), Some(" pin "), &domain(), &mut warnings)
            .expect("named");
        assert_eq!(t.policy, ImagePolicy::Pin);
        assert!(t.tracks("sidecar") && !t.tracks("other"));
        assert!(warnings.is_empty());
        let t =
            ImageTracking::parse(Some("*"), Some("Pin"), &domain(), &mut warnings).expect("tracks");
        assert_eq!(t.policy, ImagePolicy::Record);
        assert_eq!(
            warnings.into_response(),
            vec![r#""Pin" in configsum.dev/image-policy: not record or pin; recording only"#]
        );
    }

    #[test]
    fn record_writes_the_digest_and_warns_when_pulls_may_use_a_cached_image() {
        let t = tracking("*", "record");
        let pod = pod(&[("app", "app:prod", Some("IfNotPresent")), ("web", "nginx", None)]);
        let run = run(Some(&t), pod, &[], |_| ImageObservation::Digest(D1.into()));
        assert_eq!(run.targets, vec!["app:prod", "nginx:latest"]);
        assert_eq!(
            annotations(&run),
            vec![("image.configsum.dev/app", D1), ("image.configsum.dev/web", D1)]
        );
        assert!(run.outcome.images.is_empty() && run.outcome.changed.is_empty());
        assert_eq!(run.warnings.len(), 1, "nginx defaults to Always: {:?}", run.warnings);
        assert_eq!(
            run.warnings,
            [
                "container app (app:prod): imagePullPolicy is not Always: a node may run an older image it cached"
            ]
        );
    }

    #[test]
    fn pin_rewrites_the_image_and_is_idempotent() {
        let t = tracking("app", "pin");
        let first = run(Some(&t), pod(&[("app", "r.io/app:prod", None)]), &[], |_| {
            ImageObservation::Digest(D1.into())
        });
        let pinned = format!("r.io/app:prod@{D1}");
        assert_eq!(first.outcome.images, vec![("/spec/containers/0/image".into(), pinned.clone())]);
        assert!(first.warnings.is_empty(), "pin needs no pull-policy warning");

        // Admitted again: the pinned image is re-resolved through its tag.
        let existing = [("image.configsum.dev/app", D1)];
        let again = run(Some(&t), pod(&[("app", &pinned, None)]), &existing, |_| {
            ImageObservation::Digest(D1.into())
        });
        assert_eq!(again.targets, vec!["r.io/app:prod"]);
        assert!(again.outcome.images.is_empty() && again.outcome.changed.is_empty());

        // The tag moved: new pin, and the audit names the container.
        let moved = run(Some(&t), pod(&[("app", &pinned, None)]), &existing, |_| {
            ImageObservation::Digest(D2.into())
        });
        assert_eq!(
            moved.outcome.images,
            vec![("/spec/containers/0/image".into(), format!("r.io/app:prod@{D2}"))]
        );
        assert_eq!(moved.outcome.changed, vec!["app"]);
    }

    #[test]
    fn author_pins_are_never_tracked_and_our_pins_are_undone_when_no_longer_wanted() {
        let t = tracking("app", "record");
        let existing = [("image.configsum.dev/app", D1)];
        // Pinned by configsum, now under record: written back to the tag.
        let run1 = run(
            Some(&t),
            pod(&[("app", &format!("app:1@{D1}"), Some("Always"))]),
            &existing,
            |_| ImageObservation::Digest(D1.into()),
        );
        assert_eq!(run1.outcome.images, vec![("/spec/containers/0/image".into(), "app:1".into())]);
        // Pinned by its author (another digest): not tracked, its annotation goes.
        let run2 = run(Some(&t), pod(&[("app", &format!("app:1@{D2}"), None)]), &existing, |_| {
            panic!("not resolved")
        });
        assert!(run2.targets.is_empty() && annotations(&run2).is_empty());
        // The subject (93 characters with the digest) leaves the reason its 32.
        assert_eq!(
            run2.warnings,
            vec![format!(
                "container app (app:1@sha256:{}…{}): pinned by digest; not tracked",
                "2".repeat(23),
                "2".repeat(35)
            )]
        );
        // No longer tracked at all: the annotation goes and our pin is undone.
        let run3 = run(None, pod(&[("app", &format!("app:1@{D1}"), None)]), &existing, |_| {
            panic!("not resolved")
        });
        assert!(annotations(&run3).is_empty());
        assert_eq!(run3.outcome.images, vec![("/spec/containers/0/image".into(), "app:1".into())]);
    }

    #[test]
    fn unknown_is_absent_and_failures_keep_what_is_there() {
        let t = tracking("a, b, c, ghost", "pin");
        let pinned = format!("b:1@{D1}");
        let pod = pod(&[("a", "a:1", None), ("b", &pinned, None), ("c", "c:1", None)]);
        let existing = [("image.configsum.dev/b", D1), ("image.configsum.dev/c", D2)];
        let run = run(Some(&t), pod, &existing, |target| match target.container.as_str() {
            "a" => ImageObservation::Failed("HTTP 503".into()),
            "b" => ImageObservation::Unknown,
            _ => ImageObservation::Failed("timeout".into()),
        });
        assert_eq!(
            annotations(&run),
            vec![("image.configsum.dev/b", "absent"), ("image.configsum.dev/c", D2)],
            "a gets none, b is absent, c keeps its digest"
        );
        assert_eq!(run.outcome.images, vec![("/spec/containers/1/image".into(), "b:1".into())]);
        assert_eq!(run.outcome.changed, vec!["b"]);
        assert_eq!(
            run.warnings,
            vec![
                r#""ghost" in configsum.dev/images: no container of that name in the pod spec"#,
                "container a (a:1): image not resolved; no annotation written (HTTP 503)",
                r#"container b (b:1): unknown to the registry; its digest is "absent""#,
                "container c (c:1): image not resolved; its annotation was kept (timeout)",
            ],
            "b is named by its tag, not by configsum's pin"
        );
    }

    #[test]
    fn warnings_name_the_image_as_written_and_fit_whole_references() {
        // A 255-character reference as its author wrote it (no tag: `latest`).
        let image = format!("registry.example.com/{}", "r".repeat(255 - 21));
        let t = tracking("*", "record");
        let run =
            run(Some(&t), pod(&[("app", &image, None), ("bad", "Not A Ref", None)]), &[], |_| {
                ImageObservation::Failed("timeout".into())
            });
        assert_eq!(run.targets, vec![format!("{image}:latest")], "resolved through its tag");
        assert_eq!(run.warnings.len(), 2, "{:?}", run.warnings);
        // Not a reference: not echoed back.
        assert_eq!(
            run.warnings[0],
            "container bad: its image is not a valid reference; not tracked"
        );
        let failed = &run.warnings[1];
        assert_eq!(failed.chars().count(), 119, "{failed}");
        assert!(failed.starts_with("container app (registry.example.com/rrr"), "{failed}");
        // The reason keeps 44 characters: what happened to the annotation first.
        assert!(failed.ends_with("rrr): image not resolved; no annotation written (…"), "{failed}");
        assert!(!failed.contains(":latest"), "as written: {failed}");
    }

    #[test]
    fn at_most_32_images_are_resolved_and_the_rest_keep_their_annotations() {
        let names: Vec<(String, String)> =
            (0..40).map(|i| (format!("c{i:02}"), format!("app{i}:1"))).collect();
        let containers: Vec<(&str, &str, Option<&str>)> =
            names.iter().map(|(n, i)| (n.as_str(), i.as_str(), Some("Always"))).collect();
        let existing = [("image.configsum.dev/c39", D2)];
        let run = run(Some(&tracking("*", "record")), pod(&containers), &existing, |_| {
            ImageObservation::Digest(D1.into())
        });
        assert_eq!(run.targets.len(), MAX_TRACKED_IMAGES);
        let annotations = annotations(&run);
        assert_eq!(annotations.len(), 33, "32 resolved and the one existing kept");
        assert!(annotations.contains(&("image.configsum.dev/c39", D2)));
        assert_eq!(
            run.warnings,
            vec!["8 containers beyond the first 32 track images; their annotations were kept"]
        );
    }

    #[test]
    fn an_absurd_pod_is_left_as_it_is() {
        let mut pod = pod(&[("app", "app:1", None)]);
        pod.unread = 1;
        let run = run(Some(&tracking("*", "pin")), pod, &[("image.configsum.dev/app", D1)], |_| {
            panic!("not resolved")
        });
        assert!(run.outcome.annotations.is_none(), "every image annotation kept");
        assert_eq!(
            run.warnings,
            vec!["the pod spec has over 256 containers or pull secrets; images were not resolved"]
        );
    }

    #[test]
    fn without_the_image_pass_every_image_annotation_is_kept() {
        let outcome = ImagePlan::default().decide(|_| None, &mut Warnings::default());
        assert!(outcome.annotations.is_none() && outcome.images.is_empty());
    }

    /// The image pass over a Deployment with `containers` and `<domain>/image-env` set to
    /// `annotation`, then `observe` for every target.
    fn decide_env(
        annotation: &str,
        containers: serde_json::Value,
        observe: impl Fn(&ImageTarget) -> ImageObservation,
    ) -> (Vec<ImageTarget>, serde_json::Value, Vec<String>, Vec<String>) {
        use crate::core::model::kinds::WorkloadKind;
        let deployment = json!({"spec": {"template": {"spec": {"containers": containers}}}});
        let pod = PodImages::of(WorkloadKind::Deployment, &deployment.to_string()).expect("reads");
        let mut warnings = Warnings::default();
        let entries =
            super::super::env::parse(annotation, "configsum.dev/image-env", &mut warnings);
        let domain = AnnotationDomain::default();
        let mut plan = ImagePlan::read(None, &entries, pod, &domain, |_| None, &mut warnings);
        let targets = plan.targets().to_vec();
        plan.observe(targets.iter().map(observe).collect());
        let outcome = plan.decide(|_| None, &mut warnings);
        let mut patched = deployment;
        json_patch::patch(&mut patched, &outcome.env).expect("the patch applies");
        let env = patched["spec"]["template"]["spec"]["containers"].clone();
        (targets, env, outcome.changed_env, warnings.into_response())
    }

    #[test]
    fn a_variable_is_set_replaced_or_added_and_its_recorded_digest_read() {
        let containers = json!([
            {"name": "api", "image": "api:1", "env": [
                {"name": "OTHER", "value": "x"},
                {"name": "INGESTOR_IMAGE_DIGEST", "value": D1}]},
            {"name": "worker", "image": "worker:1", "env": [{"name": "A", "value": "b"}]},
            {"name": "bare", "image": "bare:1"},
        ]);
        let annotation = "api/INGESTOR_IMAGE_DIGEST=ghcr.io/org/ingestor:prod, \
            worker/NEW=ghcr.io/org/ingestor:prod, bare/ONE=ghcr.io/org/ingestor:prod, \
            bare/TWO=ghcr.io/org/ingestor:prod";
        let (targets, env, changed, warnings) =
            decide_env(annotation, containers, |_| ImageObservation::Digest(D2.into()));
        assert!(warnings.is_empty(), "{warnings:?}");
        let keys: Vec<&str> = targets.iter().map(|t| t.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "image-env/api/INGESTOR_IMAGE_DIGEST",
                "image-env/worker/NEW",
                "image-env/bare/ONE",
                "image-env/bare/TWO"
            ]
        );
        assert_eq!(targets[0].recorded.as_deref(), Some(D1), "the controller moves this one");
        assert!(targets[1..].iter().all(|t| t.recorded.is_none()), "first observations");
        assert!(targets.iter().all(|t| t.reference == "ghcr.io/org/ingestor:prod"));
        assert_eq!(
            env[0]["env"],
            json!([{"name": "OTHER", "value": "x"},
            {"name": "INGESTOR_IMAGE_DIGEST", "value": D2}])
        );
        assert_eq!(
            env[1]["env"],
            json!([{"name": "A", "value": "b"}, {"name": "NEW", "value": D2}])
        );
        assert_eq!(
            env[2]["env"],
            json!([{"name": "ONE", "value": D2}, {"name": "TWO", "value": D2}])
        );
        assert_eq!(changed, ["api/INGESTOR_IMAGE_DIGEST"], "only a digest that was there changed");
    }

    #[test]
    fn a_current_digest_needs_no_patch_and_a_failure_never_empties_the_variable() {
        let containers = json!([{"name": "api", "image": "api:1", "env": [
            {"name": "SAME", "value": D1}, {"name": "GONE", "value": D1},
            {"name": "BROKEN", "value": D1}, {"name": "UNSET"}]}]);
        let annotation =
            "api/SAME=r.io/a:1, api/GONE=r.io/gone:1, api/BROKEN=r.io/b:1, api/UNSET=r.io/a:1";
        let (_, env, changed, warnings) =
            decide_env(annotation, containers.clone(), |t| match t.reference.as_str() {
                "r.io/gone:1" => ImageObservation::Unknown,
                "r.io/b:1" => ImageObservation::Failed("HTTP 503".into()),
                _ => ImageObservation::Digest(D1.into()),
            });
        let mut expected = containers[0]["env"].clone();
        expected[3]["value"] = json!(D1);
        assert_eq!(env[0]["env"], expected, "only UNSET gets a value");
        assert!(changed.is_empty());
        assert_eq!(
            warnings,
            [
                "container api env GONE (r.io/gone:1): unknown to the registry; left as it is",
                "container api env BROKEN (r.io/b:1): image not resolved; left as it is (HTTP 503)",
            ]
        );
    }

    #[test]
    fn value_from_pins_missing_containers_and_long_env_lists_are_left_alone() {
        let long: Vec<serde_json::Value> =
            (0..300).map(|i| json!({"name": format!("V{i}"), "value": "x"})).collect();
        let containers = json!([
            {"name": "api", "image": "api:1", "env": [
                {"name": "FROM", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]},
            {"name": "long", "image": "long:1", "env": long},
        ]);
        let pinned = format!("r.io/tool:1@{D1}");
        let annotation =
            format!("api/FROM=r.io/a:1, api/PINNED={pinned}, ghost/V=r.io/a:1, long/V1=r.io/a:1");
        let (targets, env, _, warnings) =
            decide_env(&annotation, containers.clone(), |_| panic!("nothing is resolved"));
        assert!(targets.is_empty(), "{targets:?}");
        assert_eq!(env, containers, "nothing changed");
        assert_eq!(
            warnings,
            [
                "container api env FROM (r.io/a:1): set through valueFrom; left alone",
                r#""ghost/V" in configsum.dev/image-env: no container of that name in the pod spec"#,
                "container long env V1 (r.io/a:1): its container has over 256 env entries; left as it is",
            ]
        );
    }
}
