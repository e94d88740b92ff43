//! `<domain>/image-env`: image digests a workload hands on through environment variables
//! (docs/images.md), for a jobs-manager whose Jobs run another image. The annotation lists
//! `<container>/<VAR>=<image reference>` entries, separated by commas. This is its grammar,
//! bounded: anything a tenant writes is hostile, so each entry is checked as Kubernetes checks
//! container and variable names, and as the distribution grammar checks references.

use std::collections::BTreeSet;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation};
use serde_json::{Value, json};

use super::containers::{ContainerImage, EnvValue};
use super::reference::ImageName;
use super::tracking::{ImageObservation, ImageTarget, Slot};
use crate::core::annotations::AnnotationDomain;
use crate::core::warnings::{Subject, Warnings};

/// At most this many variables are handed digests per workload, as for tracked images: each
/// is a registry request. The rest are left as they are, with a warning.
pub const MAX_IMAGE_ENV: usize = 32;

/// One variable to set: the container (or init container), the variable, and the image whose
/// digest it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageEnv {
    pub container: String,
    pub variable: String,
    /// The reference as written.
    pub written: String,
    /// `<repository>:<tag>`: what is resolved. `None` when the reference is pinned by digest:
    /// its author opted out, and it is never resolved.
    pub tagged: Option<String>,
}

impl ImageEnv {
    /// `image-env/<container>/<VAR>`, as the audit annotation lists it.
    pub fn audit_name(&self) -> String {
        format!("image-env/{}/{}", self.container, self.variable)
    }
}

/// Reads the annotation's entries, in order; each entry it cannot use is skipped with a
/// warning naming it. `annotation` is the annotation's full name, for the warnings.
pub fn parse(text: &str, annotation: &str, warnings: &mut Warnings) -> Vec<ImageEnv> {
    let mut entries = Vec::new();
    let mut seen = BTreeSet::new();
    let mut beyond = 0usize;
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((target, reference)) = entry.split_once('=') else {
            let subject = Subject::Written { text: entry, annotation };
            warnings.push(subject, "not <container>/<VAR>=<image>; skipped");
            continue;
        };
        let (target, reference) = (target.trim(), reference.trim());
        // Named by its `<container>/<VAR>` only: a reference that does not parse could be
        // anything a tenant pasted there, and is not echoed back (as a container's image).
        let subject = Subject::Written { text: target, annotation };
        let Some((container, variable)) = target.split_once('/') else {
            warnings.push(subject, "not <container>/<VAR>=<image>; skipped");
            continue;
        };
        if !is_container_name(container) {
            warnings.push(subject, "not a valid container name; skipped");
            continue;
        }
        if !is_env_var_name(variable) {
            warnings.push(subject, "not a valid environment variable name; skipped");
            continue;
        }
        let Some(image) = ImageName::parse(reference) else {
            warnings.push(subject, "not a valid image reference; skipped");
            continue;
        };
        if !seen.insert((container, variable)) {
            warnings.push(subject, "names a variable already named; the first wins");
            continue;
        }
        if entries.len() == MAX_IMAGE_ENV {
            beyond += 1;
            continue;
        }
        entries.push(ImageEnv {
            container: container.to_owned(),
            variable: variable.to_owned(),
            written: reference.to_owned(),
            tagged: image.digest.is_none().then(|| image.tagged()),
        });
    }
    if beyond > 0 {
        warnings.push_plain(format_args!(
            "{beyond} variables of {annotation} beyond the limit of {MAX_IMAGE_ENV} were not set; they keep their values"
        ));
    }
    entries
}

/// Where a variable's digest goes in its container's `env` list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct EnvSlot {
    pub(super) variable: String,
    /// JSON pointer of the container.
    container_path: String,
    at: EnvAt,
    /// The variable's value now, if it is short enough to be a digest.
    current: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum EnvAt {
    /// The variable is `env[i]`: its `value` is set.
    Index(usize),
    /// The variable is missing: it is appended to `env`.
    Append,
    /// The container has no `env` list: one is created.
    Create,
}

/// The targets `entries` call for, in their order, among the containers the image pass read.
/// An entry whose reference is pinned by digest is never resolved; one whose variable is set
/// through `valueFrom`, whose container is missing, or whose `env` list is too long to read
/// whole, is left as it is with a warning.
pub(super) fn select(
    entries: &[ImageEnv],
    containers: &[ContainerImage],
    domain: &AnnotationDomain,
    warnings: &mut Warnings,
) -> Vec<ImageTarget> {
    let mut targets = Vec::new();
    for entry in entries {
        let Some(tagged) = &entry.tagged else { continue };
        let subject = entry.subject();
        let Some(container) = containers.iter().find(|c| c.name == entry.container) else {
            let annotation = domain.image_env();
            let text = format!("{}/{}", entry.container, entry.variable);
            let subject = Subject::Written { text: &text, annotation: &annotation };
            warnings.push(subject, "no container of that name in the pod spec");
            continue;
        };
        let env = container.env.as_ref();
        if env.is_some_and(|env| env.unread > 0) {
            warnings.push(subject, "its container has over 256 env entries; left as it is");
            continue;
        }
        // With a name listed twice the last one is the value the container sees.
        let var = env.and_then(|env| env.vars.iter().rev().find(|(_, v)| v.name == entry.variable));
        let (at, current) = match var {
            Some((_, var)) if var.value == EnvValue::From => {
                warnings.push(subject, "set through valueFrom; left alone");
                continue;
            }
            Some((index, var)) => {
                let current = match &var.value {
                    EnvValue::Short(value) => Some(value.clone()),
                    _ => None,
                };
                (EnvAt::Index(*index), current)
            }
            None if env.is_some() => (EnvAt::Append, None),
            None => (EnvAt::Create, None),
        };
        let container_path = container.path.strip_suffix("/image").unwrap_or(&container.path);
        targets.push(ImageTarget {
            container: entry.container.clone(),
            key: entry.audit_name(),
            reference: tagged.clone(),
            written: entry.written.clone(),
            recorded: current.clone().filter(|value| is_digest(value)),
            slot: Slot::Env(EnvSlot {
                variable: entry.variable.clone(),
                container_path: container_path.to_owned(),
                at,
                current,
            }),
        });
    }
    targets
}

impl ImageEnv {
    fn subject(&self) -> Subject<'_> {
        Subject::EnvVar {
            container: &self.container,
            variable: &self.variable,
            image: &self.written,
        }
    }
}

/// `sha256:` and 64 lower-case hex digits: what a registry's digest looks like here.
fn is_digest(value: &str) -> bool {
    value.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// The `env` operations of a decision, built one variable at a time.
#[derive(Debug, Default)]
pub(super) struct EnvPatch {
    ops: Vec<PatchOperation>,
    /// Containers whose `env` list this patch creates.
    created: BTreeSet<String>,
    changed: Vec<String>,
}

impl EnvPatch {
    /// What `observation` makes of the variable in `slot`: its value set to a new digest,
    /// else left as it is (never emptied), with a warning for a failure.
    pub(super) fn apply(
        &mut self,
        container: &str,
        slot: EnvSlot,
        written: &str,
        observation: ImageObservation,
        warnings: &mut Warnings,
    ) {
        let subject = Subject::EnvVar { container, variable: &slot.variable, image: written };
        let digest = match observation {
            ImageObservation::Digest(digest) => digest,
            ImageObservation::Unknown => {
                warnings.push(subject, "unknown to the registry; left as it is");
                return;
            }
            ImageObservation::Failed(reason) => {
                let why = format_args!("image not resolved; left as it is ({reason})");
                warnings.push(subject, why);
                return;
            }
            ImageObservation::Keep => return,
        };
        if slot.current.as_deref() == Some(digest.as_str()) {
            return;
        }
        if slot.current.as_deref().is_some_and(is_digest) {
            self.changed.push(format!("{container}/{}", slot.variable));
        }
        let env = |tokens: &[&str]| {
            let base = slot.container_path.split('/').skip(1);
            PointerBuf::from_tokens(base.chain(["env"]).chain(tokens.iter().copied()))
        };
        let entry = json!({"name": slot.variable, "value": digest});
        let (path, value) = match slot.at {
            // `add` on an existing member replaces it, and sets a `value` the entry lacked.
            EnvAt::Index(index) => (env(&[&index.to_string(), "value"]), Value::String(digest)),
            EnvAt::Create if self.created.insert(slot.container_path.clone()) => {
                (env(&[]), Value::Array(vec![entry]))
            }
            EnvAt::Append | EnvAt::Create => (env(&["-"]), entry),
        };
        self.ops.push(PatchOperation::Add(AddOperation { path, value }));
    }

    /// The operations, and `<container>/<VAR>` of each variable whose digest changed.
    pub(super) fn finish(self) -> (Vec<PatchOperation>, Vec<String>) {
        (self.ops, self.changed)
    }
}

/// A DNS-1123 label, as a container's name must be.
fn is_container_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    (1..=63).contains(&bytes.len())
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// An environment variable name as the API server accepts it
/// (`[-._a-zA-Z][-._a-zA-Z0-9]*`), at most 256 bytes here.
fn is_env_var_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let allowed = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_');
    (1..=256).contains(&bytes.len())
        && bytes.iter().all(allowed)
        && bytes.first().is_some_and(|b| !b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::inputs::image::ImageTarget;

    const ANNOTATION: &str = "configsum.dev/image-env";

    fn read(text: &str) -> (Vec<ImageEnv>, Vec<String>) {
        let mut warnings = Warnings::default();
        let entries = parse(text, ANNOTATION, &mut warnings);
        (entries, warnings.into_response())
    }

    #[test]
    fn seed_002s_jobs_manager_hands_on_the_ingestor_digest() {
        let text = " api/INGESTOR_IMAGE_DIGEST = ghcr.io/org/ingestor:prod ,, \
            worker/PINNED=ghcr.io/org/tool:1@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let (entries, warnings) = read(text);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].container, "api");
        assert_eq!(entries[0].variable, "INGESTOR_IMAGE_DIGEST");
        assert_eq!(entries[0].written, "ghcr.io/org/ingestor:prod");
        assert_eq!(entries[0].tagged.as_deref(), Some("ghcr.io/org/ingestor:prod"));
        assert_eq!(entries[0].audit_name(), "image-env/api/INGESTOR_IMAGE_DIGEST");
        assert_eq!(entries[1].tagged, None, "pinned by digest: never resolved");
        let (entries, _) = read("c/V=nginx");
        assert_eq!(entries[0].tagged.as_deref(), Some("nginx:latest"));
    }

    #[test]
    fn each_bad_entry_is_skipped_with_a_warning_naming_it() {
        let (entries, warnings) = read(
            "no-equals, NoSlash=app:1, Bad_Container/V=app:1, c/1DIGIT=app:1, c/V=UPPER/App, \
             c/V=app:1, c/V=app:2, c/W=app:3",
        );
        let named: Vec<(&str, &str)> =
            entries.iter().map(|e| (e.variable.as_str(), e.written.as_str())).collect();
        assert_eq!(named, [("V", "app:1"), ("W", "app:3")]);
        assert_eq!(warnings.len(), 6, "{warnings:?}");
        assert!(warnings[0].contains("\"no-equals\" in configsum.dev/image-env"), "{warnings:?}");
        assert!(warnings[2].contains("container name"), "{warnings:?}");
        assert!(warnings[3].contains("variable name"), "{warnings:?}");
        assert_eq!(
            warnings[4],
            r#""c/V" in configsum.dev/image-env: not a valid image reference; skipped"#,
            "the reference that does not parse is not echoed back"
        );
        assert!(warnings[5].contains("the first wins"), "{warnings:?}");
    }

    #[test]
    fn hostile_annotations_cost_linear_work_and_keep_a_bounded_list() {
        let text = (0..20_000).map(|i| format!("c/V{i}=app:{i}")).collect::<Vec<_>>().join(",");
        let (entries, warnings) = read(&text);
        assert_eq!(entries.len(), MAX_IMAGE_ENV);
        assert_eq!(warnings.len(), 1, "one warning for all those beyond the limit");
        assert!(
            warnings[0]
                .starts_with("19968 variables of configsum.dev/image-env beyond the limit of 32")
        );
        // A huge single token and a long run of separators: nothing, quickly.
        let (entries, _) = read(&"x".repeat(256 * 1024));
        assert!(entries.is_empty());
        let (entries, warnings) = read(&",".repeat(256 * 1024));
        assert!(entries.is_empty() && warnings.is_empty());
        let long = format!("c/{}=app:1", "V".repeat(300));
        assert!(read(&long).0.is_empty(), "variable names are bounded");
    }

    const D1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const D2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    /// The image pass over a Deployment with `containers`, then `observe` for every target.
    fn decide(
        annotation: &str,
        containers: serde_json::Value,
        observe: impl Fn(&ImageTarget) -> ImageObservation,
    ) -> (Vec<ImageTarget>, serde_json::Value, Vec<String>, Vec<String>) {
        use crate::core::inputs::image::{ImagePlan, PodImages};
        use crate::core::workload::WorkloadKind;
        let deployment = json!({"spec": {"template": {"spec": {"containers": containers}}}});
        let pod = PodImages::of(WorkloadKind::Deployment, &deployment.to_string()).expect("reads");
        let mut warnings = Warnings::default();
        let entries = parse(annotation, ANNOTATION, &mut warnings);
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
            decide(annotation, containers, |_| ImageObservation::Digest(D2.into()));
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
            decide(annotation, containers.clone(), |t| match t.reference.as_str() {
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
            decide(&annotation, containers.clone(), |_| panic!("nothing is resolved"));
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

    proptest::proptest! {
        /// Whatever a tenant writes: no panic, at most the limit kept, and every entry kept
        /// is one the API server and a registry would accept.
        #[test]
        fn any_annotation_reads_to_valid_entries(text in "[a-zA-Z0-9_./:@=, -]{0,400}") {
            let (entries, warnings) = read(&text);
            proptest::prop_assert!(entries.len() <= MAX_IMAGE_ENV);
            proptest::prop_assert!(warnings.len() <= 11);
            for entry in &entries {
                proptest::prop_assert!(is_container_name(&entry.container));
                proptest::prop_assert!(is_env_var_name(&entry.variable));
                proptest::prop_assert!(ImageName::parse(&entry.written).is_some());
                let written = format!("{}/{}={}", entry.container, entry.variable, entry.written);
                proptest::prop_assert_eq!(read(&written).0, vec![entry.clone()], "reads back");
            }
        }
    }
}
