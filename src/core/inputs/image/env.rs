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
use super::observation::ImageObservation;
use super::reference::ImageName;
use crate::core::model::annotations::AnnotationDomain;
use crate::core::model::warnings::{Subject, Warnings};

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

/// A variable to set: what the tracking's `ImageTarget` carries, with the variable's slot.
#[derive(Debug)]
pub(super) struct EnvTarget {
    pub(super) container: String,
    pub(super) key: String,
    pub(super) reference: String,
    pub(super) written: String,
    pub(super) recorded: Option<String>,
    pub(super) slot: EnvSlot,
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
) -> Vec<EnvTarget> {
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
        targets.push(EnvTarget {
            container: entry.container.clone(),
            key: entry.audit_name(),
            reference: tagged.clone(),
            written: entry.written.clone(),
            recorded: current.clone().filter(|value| is_digest(value)),
            slot: EnvSlot {
                variable: entry.variable.clone(),
                container_path: container_path.to_owned(),
                at,
                current,
            },
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
