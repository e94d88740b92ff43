//! Whether a ConfigMap or Secret counts at all: its owner can say `<domain>/ignore: "true"`
//! on it, and `--object-selector` can leave it out. An object that does not count is
//! untracked: no workload gets a digest for it, and an existing one is removed.
//!
//! The readers judge an object as they read it (they keep only the labels the selector reads
//! and the one annotation); the decision is this file's.

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

/// The rules an object is judged by: the ignore annotation's key and the object selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectScope {
    ignore_key: String,
    selector: LabelSelector,
}

impl Default for ObjectScope {
    /// The default domain's `ignore`, every object selected.
    fn default() -> Self {
        ObjectScope::new(AnnotationDomain::default().ignore(), LabelSelector::default())
    }
}

impl ObjectScope {
    /// `ignore_key`: `<domain>/ignore`. `selector`: `--object-selector` (empty: every object).
    pub fn new(ignore_key: String, selector: LabelSelector) -> Self {
        ObjectScope { ignore_key, selector }
    }

    /// The annotation a reader must keep: `<domain>/ignore`.
    pub fn ignore_key(&self) -> &str {
        &self.ignore_key
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

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(selector: &str) -> ObjectScope {
        let selector = LabelSelector::parse(selector).expect("valid");
        ObjectScope::new("configsum.dev/ignore".to_owned(), selector)
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
