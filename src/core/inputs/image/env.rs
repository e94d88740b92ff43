//! `<domain>/image-env`: image digests a workload hands on through environment variables
//! (docs/images.md), for a jobs-manager whose Jobs run another image. The annotation lists
//! `<container>/<VAR>=<image reference>` entries, separated by commas. This is its grammar,
//! bounded: anything a tenant writes is hostile, so each entry is checked as Kubernetes checks
//! container and variable names, and as the distribution grammar checks references.

use std::collections::BTreeSet;

use super::reference::ImageName;
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
        let subject = Subject::Written { text: entry, annotation };
        let Some((target, reference)) = entry.split_once('=') else {
            warnings.push(subject, "not <container>/<VAR>=<image>; skipped");
            continue;
        };
        let (target, reference) = (target.trim(), reference.trim());
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
        assert!(warnings[4].contains("image reference"), "{warnings:?}");
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
