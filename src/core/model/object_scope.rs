//! Whether a ConfigMap or Secret counts at all: its owner can say `<domain>/ignore: "true"`
//! on it, and `--object-selector` can leave it out. An object that does not count is
//! untracked: no workload gets a digest for it, and an existing one is removed. Its owner
//! also says which other namespaces may track it (`<domain>/readable-from`).
//!
//! The readers judge an object as they read it (they keep only the labels the selector reads
//! and the two annotations); the decision is this file's.

use super::annotations::AnnotationDomain;
use super::label_selector::LabelSelector;

/// Whether an object counts, and if not, why.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Standing {
    #[default]
    Tracked,
    /// Its own `<domain>/ignore: "true"`: the controller ignores its changes too.
    Ignored,
    /// Outside `--object-selector`: moving out counts as a deletion, moving in as a creation.
    Unselected,
}

impl Standing {
    /// Why it is untracked, for warnings and `explain`.
    pub fn reason(self) -> Option<&'static str> {
        match self {
            Standing::Tracked => None,
            Standing::Ignored => Some("its owner ignores it"),
            Standing::Unselected => Some("outside the object selector"),
        }
    }
}

/// The rules an object is judged by: the keys of its owner's annotations and the object
/// selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectScope {
    ignore_key: String,
    readable_from_key: String,
    selector: LabelSelector,
}

impl Default for ObjectScope {
    /// The default domain's annotations, every object selected.
    fn default() -> Self {
        ObjectScope::new(&AnnotationDomain::default(), LabelSelector::default())
    }
}

impl ObjectScope {
    /// `domain`'s `ignore` and `readable-from`; `selector`: `--object-selector` (empty: every
    /// object).
    pub fn new(domain: &AnnotationDomain, selector: LabelSelector) -> Self {
        let (ignore_key, readable_from_key) = (domain.ignore(), domain.readable_from());
        ObjectScope { ignore_key, readable_from_key, selector }
    }

    /// An annotation a reader must keep: `<domain>/ignore`.
    pub fn ignore_key(&self) -> &str {
        &self.ignore_key
    }

    /// The other annotation a reader must keep: `<domain>/readable-from`.
    pub fn readable_from_key(&self) -> &str {
        &self.readable_from_key
    }

    /// Whether a reader must keep label `key`.
    pub fn reads_label(&self, key: &str) -> bool {
        self.selector.reads(key)
    }

    /// The selector, for a watch that can leave unselected objects to the API server.
    pub fn selector(&self) -> &LabelSelector {
        &self.selector
    }

    /// How an object stands, from its `ignore` annotation (only exactly `"true"` counts) and
    /// its labels.
    pub fn standing<'a>(
        &self,
        ignore: Option<&str>,
        label: impl Fn(&str) -> Option<&'a str>,
    ) -> Standing {
        if ignore == Some("true") {
            Standing::Ignored
        } else if !self.selector.matches(label) {
            Standing::Unselected
        } else {
            Standing::Tracked
        }
    }
}

/// Whether an object whose `<domain>/readable-from` says `readable_from` may be tracked from
/// `namespace`: a comma-separated list of namespaces (spaces allowed) or `*`.
pub fn consents(readable_from: Option<&str>, namespace: &str) -> bool {
    let listed = readable_from.into_iter().flat_map(|list| list.split(',')).map(str::trim);
    listed.into_iter().any(|entry| entry == "*" || entry == namespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(selector: &str) -> ObjectScope {
        let selector = LabelSelector::parse(selector).expect("valid");
        ObjectScope::new(&AnnotationDomain::default(), selector)
    }

    #[test]
    fn consent_lists_namespaces_or_every_one() {
        assert!(consents(Some("app"), "app"));
        assert!(consents(Some(" web , app "), "app"));
        assert!(consents(Some("*"), "app"));
        assert!(consents(Some("web, *"), "app"));
        for refused in [None, Some(""), Some("ap"), Some("app-x"), Some("web,,"), Some("a*")] {
            assert!(!consents(refused, "app"), "{refused:?}");
        }
    }

    #[test]
    fn only_exactly_true_ignores() {
        let none = |_: &str| None;
        assert_eq!(scope("").standing(Some("true"), none), Standing::Ignored);
        for value in ["True", "yes", "1", " true", ""] {
            assert_eq!(scope("").standing(Some(value), none), Standing::Tracked, "{value:?}");
        }
        assert_eq!(scope("").standing(None, none), Standing::Tracked);
    }

    #[test]
    fn the_selector_leaves_objects_out_and_ignore_wins() {
        let scope = scope("reload=on");
        let on = |k: &str| (k == "reload").then_some("on");
        assert_eq!(scope.standing(None, on), Standing::Tracked);
        assert_eq!(scope.standing(None, |_| None), Standing::Unselected);
        assert_eq!(scope.standing(Some("true"), on), Standing::Ignored);
        assert!(scope.reads_label("reload") && !scope.reads_label("app"));
        assert_eq!(Standing::Unselected.reason(), Some("outside the object selector"));
    }
}
