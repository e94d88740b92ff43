//! Which referenced objects get a digest (README, "What it does" and "Annotations"; docs/behaviour.md, "Limits"): the `track` and `ignore`
//! annotations, the name check, key collisions and the 128-object limit.

use std::collections::{BTreeMap, BTreeSet};

use super::model::annotations::AnnotationDomain;
use super::model::kinds::WorkloadKind;
use super::model::object_ref::{ObjectKind, ObjectRef, is_namespace_name, is_valid_object_name};
use super::model::warnings::{Subject, Warnings};
use super::refs::{ConsumedKeys, Consumption, References};

/// Most objects digested per review; more would crowd the annotations.
pub const MAX_TRACKED: usize = 128;

/// Most workloads tracked per workload: each is a read at admission, and a Keycloak rolls
/// with its database, not with a fleet.
pub const MAX_TRACKED_WORKLOADS: usize = 16;

const KEY_TAKEN: &str = "its annotation key is already taken; skipped";

/// One object to look up and digest, with the annotation key it gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub object: ObjectRef,
    pub consumption: Consumption,
    pub key: String,
    pub reach: Reach,
}

/// How a target came to be tracked. A token `<kind>/<a>/<b>` names either key `<b>` of the
/// workload's own object `<a>` or object `<b>` of namespace `<a>`: the workload's own
/// namespace decides (docs/behaviour.md, "References across namespaces").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Referenced, or named as the workload's own object.
    Own,
    /// Named only by such tokens: the workload's own object where it exists; where it does
    /// not, its tokens name the other namespace's objects instead.
    OwnIfPresent,
    /// The other namespace's object such a token names: tracked when the workload's own
    /// `<a>` does not exist and the object's owner consents. Not `readable` when the
    /// namespace is outside `--namespaces`: then it is never read.
    Across { readable: bool },
}

impl Reach {
    /// Whether it names another namespace's object.
    pub fn is_across(self) -> bool {
        matches!(self, Reach::Across { .. })
    }

    /// The workload's own object whose existence decides what a target of this reach naming
    /// `object` stands for: `<kind>/<a>` for another namespace's object `<a>/<b>`.
    pub fn decided_by(self, object: &ObjectRef) -> Option<ObjectRef> {
        match (self, &object.namespace) {
            (Reach::Across { .. }, Some(namespace)) => {
                Some(ObjectRef::new(object.kind, &**namespace))
            }
            _ => None,
        }
    }
}

impl Target {
    /// Whether a lookup reads it: another namespace's object outside `--namespaces` never is.
    pub fn is_read(&self) -> bool {
        self.reach != Reach::Across { readable: false }
    }
}

/// The namespace a workload is in, and which namespaces configsum may read
/// (`--namespaces`), for tokens that name another namespace.
#[derive(Clone, Copy)]
pub struct Tracker<'a> {
    pub namespace: &'a str,
    pub serves: &'a dyn Fn(&str) -> bool,
}

/// A workload of the same namespace whose pod template's digest this one carries (workloads
/// that roll together), with the annotation key it gets.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct WorkloadTarget {
    pub kind: WorkloadKind,
    pub name: String,
    pub key: String,
}

impl std::fmt::Display for WorkloadTarget {
    /// `deployment/db`, as `track` names it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.kind.word(), self.name)
    }
}

#[derive(Debug, Default)]
pub struct Selection {
    /// In `ObjectRef` order: ConfigMaps, then Secrets, each by name.
    pub targets: Vec<Target>,
    /// The tracked workloads, by kind and name.
    pub workloads: Vec<WorkloadTarget>,
    /// Keys of objects beyond the limit: their existing annotations are kept.
    pub kept_keys: BTreeSet<String>,
}

/// Applies `track` (default `*`) and `ignore` to the references of a pod spec.
/// `ignore: "*"` ignores every ConfigMap and Secret, tracked or referenced;
/// images are not its business (`<domain>/images`).
pub fn select(
    refs: References,
    track: Option<&str>,
    ignore: Option<&str>,
    tracker: Tracker<'_>,
    domain: &AnnotationDomain,
    warnings: &mut Warnings,
) -> Selection {
    let mut ignore_all = false;
    let mut ignored: BTreeSet<ObjectRef> = BTreeSet::new();
    // Its name is built only for a warning.
    let ignore_annotation = || domain.ignore();
    let mut key_tokens_ignored = Vec::new();
    let mut workload_tokens_ignored = Vec::new();
    for token in tokens(ignore.unwrap_or(""), ignore_annotation, warnings) {
        match token {
            Token::All => ignore_all = true,
            Token::Ref(object) => {
                ignored.insert(object);
            }
            Token::Key(object, key) => key_tokens_ignored.push((object, key)),
            Token::Workload(kind, name) => workload_tokens_ignored.push((kind, name)),
        }
    }
    for (kind, name) in &workload_tokens_ignored {
        let text = format!("{}/{name}", kind.word());
        let annotation = ignore_annotation();
        let subject = Subject::Written { text: &text, annotation: &annotation };
        warnings.push(subject, "a workload is tracked only when named; skipped");
    }
    for (object, key) in &key_tokens_ignored {
        let text = format!("{object}/{key}");
        let annotation = ignore_annotation();
        let subject = Subject::Written { text: &text, annotation: &annotation };
        warnings.push(subject, "ignore names whole objects; skipped");
    }

    // Linear in the annotation: `*` counts once, however often it is
    // repeated, and a repeated reference is looked up and copied once (its
    // consumption may list thousands of keys).
    let mut whole: BTreeSet<ObjectRef> = BTreeSet::new();
    let mut keys: BTreeMap<ObjectRef, BTreeSet<String>> = BTreeMap::new();
    // Objects named by key tokens that may name another namespace, and those named otherwise.
    let mut maybe_across: BTreeMap<ObjectRef, BTreeSet<String>> = BTreeMap::new();
    let mut own_keys: BTreeSet<ObjectRef> = BTreeSet::new();
    let mut all = false;
    let mut workloads: BTreeSet<(WorkloadKind, String)> = BTreeSet::new();
    for token in tokens(track.unwrap_or("*"), || domain.track(), warnings) {
        if let Token::Workload(kind, name) = token {
            // Named, never referenced: `ignore` is about ConfigMaps and Secrets.
            workloads.insert((kind, name));
            continue;
        }
        if ignore_all {
            // Read only for its warnings: `ignore: "*"` wins over every token.
            continue;
        }
        match token {
            Token::All => all = true,
            Token::Ref(object) => {
                whole.insert(object);
            }
            Token::Key(object, key) => {
                let across = object.name != tracker.namespace
                    && is_namespace_name(&object.name)
                    && is_valid_object_name(&key);
                match across {
                    true => maybe_across.entry(object.clone()).or_default().insert(key.clone()),
                    false => own_keys.insert(object.clone()),
                };
                keys.entry(object).or_default().insert(key);
            }
            Token::Workload(..) => {}
        }
    }
    // A tracked object is consumed as the pod spec (or the kind's paths) consume it, else whole
    // when named whole; a tracked key adds to that. Not referenced, it is expected to exist.
    let mut named: BTreeMap<ObjectRef, Consumption> = BTreeMap::new();
    for object in whole.iter().chain(keys.keys()) {
        if named.contains_key(object) {
            continue;
        }
        let mut consumption = refs.get(object).cloned().unwrap_or_else(|| Consumption {
            keys: if whole.contains(object) {
                ConsumedKeys::All
            } else {
                ConsumedKeys::Keys(BTreeSet::new())
            },
            optional: false,
        });
        if let Some(keys) = keys.get(object) {
            consumption.keys.merge(ConsumedKeys::Keys(keys.clone()));
        }
        named.insert(object.clone(), consumption);
    }
    // Named only by tokens that may name another namespace: those objects are candidates too.
    let own_if_present: BTreeSet<&ObjectRef> = maybe_across
        .keys()
        .filter(|o| !own_keys.contains(*o) && !whole.contains(*o) && refs.get(o).is_none())
        .collect();
    let own_if_present = |object: &ObjectRef| own_if_present.contains(object);
    for (object, names) in maybe_across.iter().filter(|(object, _)| own_if_present(object)) {
        for name in names {
            let across = ObjectRef::across(object.kind, &object.name, name.clone());
            let consumption = Consumption { keys: ConsumedKeys::All, optional: false };
            named.insert(across, consumption);
        }
    }
    // The references themselves are moved, never copied: a pod spec may
    // reference tens of thousands of objects, of which at most 128 are digested.
    let referenced = (all && !ignore_all).then(|| refs.into_iter()).into_iter().flatten();
    let chosen = merge_sorted(referenced, named.into_iter());

    let mut selection = Selection::default();
    let mut target_keys = BTreeSet::new();
    let mut beyond_limit = 0;
    // The workload's own objects that stand aside when absent, selected, names by kind (so that
    // a namespace is looked up without a copy): in `ObjectRef` order each comes before the other
    // namespace's objects its tokens name.
    let mut standing_aside: BTreeMap<ObjectKind, BTreeSet<String>> = BTreeMap::new();
    // Other namespaces' objects count in a limit of their own: each stands in for a key of
    // an own object, so a workload tracking many keys never pushes its own objects out.
    let (mut own_count, mut across_count) = (0, 0);
    for (object, consumption) in chosen {
        if ignored.contains(&object) {
            continue;
        }
        let reach = match &object.namespace {
            Some(namespace)
                if standing_aside
                    .get(&object.kind)
                    .is_some_and(|names| names.contains(&**namespace)) =>
            {
                Reach::Across { readable: (tracker.serves)(namespace) }
            }
            Some(_) => continue,
            None if own_if_present(&object) => Reach::OwnIfPresent,
            None => Reach::Own,
        };
        if !is_valid_object_name(&object.name) {
            warnings.push(Subject::InvalidObject(&object), "not a valid object name; skipped");
            continue;
        }
        let key = domain.key_for(&object);
        if target_keys.contains(&key) {
            warnings.push(Subject::Object(&object), KEY_TAKEN);
            continue;
        }
        let count = if reach.is_across() { &mut across_count } else { &mut own_count };
        if *count == MAX_TRACKED {
            if selection.kept_keys.contains(&key) {
                warnings.push(Subject::Object(&object), KEY_TAKEN);
            } else {
                beyond_limit += 1;
                selection.kept_keys.insert(key);
            }
            continue;
        }
        *count += 1;
        target_keys.insert(key.clone());
        if reach == Reach::OwnIfPresent {
            standing_aside.entry(object.kind).or_default().insert(object.name.clone());
        }
        selection.targets.push(Target { object, consumption, key, reach });
    }
    if beyond_limit > 0 {
        warnings.push_plain(format_args!(
            "{beyond_limit} objects beyond the limit of {MAX_TRACKED} were not digested; they keep their annotations"
        ));
    }
    select_workloads(workloads, domain, &mut selection, warnings);
    selection
}

/// The tracked workloads with valid names, up to [`MAX_TRACKED_WORKLOADS`]; the annotations
/// of those beyond it are kept.
fn select_workloads(
    workloads: BTreeSet<(WorkloadKind, String)>,
    domain: &AnnotationDomain,
    selection: &mut Selection,
    warnings: &mut Warnings,
) {
    let mut beyond_limit = 0;
    for (kind, name) in workloads {
        if !is_valid_object_name(&name) {
            // Quoted, so that any character in it shows.
            let quoted = format!("{name:?}");
            let subject = Subject::Workload { word: kind.word(), name: &quoted };
            warnings.push(subject, "not a valid object name; skipped");
            continue;
        }
        let subject = Subject::Workload { word: kind.word(), name: &name };
        let Some(key) = domain.workload_key(kind, &name) else {
            warnings.push(subject, "its annotation prefix is too long for the domain; skipped");
            continue;
        };
        if selection.workloads.len() == MAX_TRACKED_WORKLOADS {
            beyond_limit += 1;
            selection.kept_keys.insert(key);
            continue;
        }
        selection.workloads.push(WorkloadTarget { kind, name, key });
    }
    if beyond_limit > 0 {
        warnings.push_plain(format_args!(
            "{beyond_limit} workloads beyond the limit of {MAX_TRACKED_WORKLOADS} were not digested; they keep their annotations"
        ));
    }
}

/// Two iterators sorted by object, merged in order; an object in both comes
/// once, with `b`'s consumption (the tracked one, which holds the referenced one).
fn merge_sorted(
    a: impl Iterator<Item = (ObjectRef, Consumption)>,
    b: impl Iterator<Item = (ObjectRef, Consumption)>,
) -> impl Iterator<Item = (ObjectRef, Consumption)> {
    let (mut a, mut b) = (a.peekable(), b.peekable());
    std::iter::from_fn(move || match (a.peek(), b.peek()) {
        (Some((x, _)), Some((y, _))) => match x.cmp(y) {
            std::cmp::Ordering::Less => a.next(),
            std::cmp::Ordering::Greater => b.next(),
            std::cmp::Ordering::Equal => {
                a.next();
                b.next()
            }
        },
        (Some(_), None) => a.next(),
        (None, _) => b.next(),
    })
}

enum Token {
    All,
    Ref(ObjectRef),
    /// `secret/<name>/<key>`: one key of an object (keys hold no `/`).
    Key(ObjectRef, String),
    /// `deployment/<name>`: a workload of the same namespace (workloads that roll together).
    Workload(WorkloadKind, String),
}

/// Comma-separated tokens; blanks are skipped, unparseable ones warned about.
fn tokens<'a>(
    list: &'a str,
    annotation: impl Fn() -> String + 'a,
    warnings: &'a mut Warnings,
) -> impl Iterator<Item = Token> + 'a {
    list.split(',').map(str::trim).filter(|t| !t.is_empty()).filter_map(move |token| {
        if token == "*" {
            return Some(Token::All);
        }
        if let Some((word, name)) = token.split_once('/') {
            if let Some(kind) = WorkloadKind::trackable_from_word(word) {
                return Some(Token::Workload(kind, name.to_owned()));
            }
        }
        let parsed = ObjectRef::parse(token).map(|object| match object.name.split_once('/') {
            Some((name, key)) if !key.is_empty() && !key.contains('/') => {
                let object = ObjectRef::new(object.kind, name);
                Token::Key(object, key.to_owned())
            }
            _ => Token::Ref(object),
        });
        if parsed.is_none() {
            let annotation = annotation();
            let subject = Subject::Written { text: token, annotation: &annotation };
            // `job/x`: a workload kind, but nothing rolls when a Job or a Pod changes.
            let workload_word = token
                .split_once('/')
                .is_some_and(|(word, _)| WorkloadKind::all().any(|kind| kind.word() == word));
            let reason = if workload_word {
                "not a kind that can be tracked; skipped"
            } else {
                "not configmap/<name> or secret/<name>; skipped"
            };
            warnings.push(subject, reason);
        }
        parsed
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::refs::PodSpec;
    use serde_json::json;

    fn refs(names: &[(&str, &str)]) -> References {
        let env_from: Vec<_> = names
            .iter()
            .map(|(kind, name)| match *kind {
                "cm" => json!({"configMapRef": {"name": name}}),
                _ => json!({"secretRef": {"name": name}}),
            })
            .collect();
        let spec: PodSpec =
            serde_json::from_value(json!({"containers": [{"name": "c", "envFrom": env_from}]}))
                .expect("spec");
        spec.references
    }

    /// A workload of namespace `app`, where every namespace is served.
    const TRACKER: Tracker<'static> = Tracker { namespace: "app", serves: &|_| true };

    fn run(
        refs: &References,
        track: Option<&str>,
        ignore: Option<&str>,
    ) -> (Selection, Vec<String>) {
        let mut warnings = Warnings::default();
        let selection = select(
            refs.clone(),
            track,
            ignore,
            TRACKER,
            &AnnotationDomain::default(),
            &mut warnings,
        );
        (selection, warnings.into_response())
    }

    fn names(selection: &Selection) -> Vec<String> {
        selection.targets.iter().map(|t| t.object.to_string()).collect()
    }

    #[test]
    fn default_tracks_every_reference() {
        let (s, w) = run(&refs(&[("secret", "b"), ("cm", "a")]), None, None);
        assert_eq!(names(&s), ["configmap/a", "secret/b"]);
        assert_eq!(s.targets[0].key, "configmap.configsum.dev/a");
        assert!(w.is_empty());
    }

    #[test]
    fn track_lists_exactly_these() {
        let r = refs(&[("cm", "a"), ("cm", "b"), ("secret", "s")]);
        let (s, _) = run(&r, Some("configmap/b, secret/s"), None);
        assert_eq!(names(&s), ["configmap/b", "secret/s"]);
        let (s, _) = run(&r, Some(""), None);
        assert!(s.targets.is_empty(), "an empty track list tracks nothing");
    }

    #[test]
    fn tracked_but_unreferenced_is_digested_whole() {
        let (s, _) = run(&refs(&[("cm", "a")]), Some("*, secret/extra"), None);
        assert_eq!(names(&s), ["configmap/a", "secret/extra"]);
        assert_eq!(
            s.targets[1].consumption,
            Consumption { keys: ConsumedKeys::All, optional: false }
        );
    }

    #[test]
    fn tracked_keys_add_to_what_is_consumed() {
        let r = refs(&[("cm", "a")]);
        let keys = |s: &Selection, name: &str| {
            s.targets.iter().find(|t| t.object.to_string() == name).map(|t| t.consumption.clone())
        };
        // Not referenced: only the named keys, expected to exist.
        let (s, w) = run(&r, Some("secret/db/password, secret/db/user"), None);
        assert!(w.is_empty(), "{w:?}");
        let consumed = keys(&s, "secret/db").expect("tracked");
        assert_eq!(
            consumed.keys,
            ConsumedKeys::Keys(["password", "user"].map(String::from).into_iter().collect())
        );
        assert!(!consumed.optional);
        // Named whole too: the whole object.
        let (s, _) = run(&r, Some("secret/db/password, secret/db"), None);
        assert_eq!(keys(&s, "secret/db").map(|c| c.keys), Some(ConsumedKeys::All));
        // Referenced (all keys, through envFrom) with `*`: still all, once.
        let (s, _) = run(&r, Some("*, configmap/a/extra"), None);
        assert_eq!(names(&s), ["configmap/a"]);
        assert_eq!(keys(&s, "configmap/a").map(|c| c.keys), Some(ConsumedKeys::All));
        // `ignore` names whole objects only.
        let (s, w) = run(&r, Some("*"), Some("configmap/a/k"));
        assert_eq!(names(&s), ["configmap/a"]);
        assert!(w.iter().any(|w| w.contains("ignore names whole objects")), "{w:?}");
        // A key with a slash, or an empty one, is no key.
        let (_, w) = run(&r, Some("secret/db/a/b, secret/db/"), None);
        assert_eq!(w.len(), 2, "{w:?}");
    }

    #[test]
    fn ignore_wins_over_track() {
        let r = refs(&[("cm", "a"), ("secret", "s")]);
        let (s, _) = run(&r, Some("*"), Some("secret/s"));
        assert_eq!(names(&s), ["configmap/a"]);
        let (s, _) = run(&r, Some("configmap/a"), Some("configmap/a"));
        assert!(s.targets.is_empty());
    }

    #[test]
    fn ignore_star_ignores_every_object_tracked_or_referenced() {
        let r = refs(&[("cm", "a"), ("secret", "s")]);
        let (s, w) = run(&r, Some("*, secret/extra"), Some("*"));
        assert!(s.targets.is_empty() && s.kept_keys.is_empty(), "{:?}", names(&s));
        assert!(w.is_empty(), "{w:?}");
        // Among other tokens, and with a bad one warned about.
        let (s, w) = run(&r, None, Some("secret/s, *, cm/x"));
        assert!(s.targets.is_empty(), "{:?}", names(&s));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("\"cm/x\""), "{w:?}");
    }

    #[test]
    fn bad_tokens_are_skipped_with_a_warning() {
        let (s, w) = run(&refs(&[("cm", "a")]), Some("configmap/a, cm/b,,  "), Some("Secret/x"));
        assert_eq!(names(&s), ["configmap/a"]);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w.iter().any(|m| m.contains("\"cm/b\"") && m.contains("configsum.dev/track")),
            "{w:?}"
        );
        assert!(
            w.iter().any(|m| m.contains("\"Secret/x\"") && m.contains("configsum.dev/ignore")),
            "{w:?}"
        );
    }

    #[test]
    fn repeated_stars_and_refs_cost_no_more_than_reading_them_once() {
        // 8,000 references and `*` 8,000 times: a quadratic pass would
        // re-insert 64 million references (minutes); linear takes milliseconds.
        let names: Vec<String> = (0..8_000).map(|i| format!("s-{i:05}")).collect();
        let pairs: Vec<(&str, &str)> = names.iter().map(|n| ("secret", n.as_str())).collect();
        let refs = refs(&pairs);
        let stars = vec!["*"; 8_000].join(",");
        let ignore = vec!["secret/s-00000"; 8_000].join(",");
        let before = crate::cpu_time::this_thread();
        let mut warnings = Warnings::default();
        let domain = AnnotationDomain::default();
        let selection =
            select(refs.clone(), Some(&stars), Some(&ignore), TRACKER, &domain, &mut warnings);
        let took = crate::cpu_time::this_thread() - before;
        assert_eq!(selection.targets.len(), MAX_TRACKED);
        assert_eq!(
            selection.targets[0].object,
            ObjectRef::secret("s-00001"),
            "ignored once, however often listed"
        );
        assert_eq!(selection.kept_keys.len(), 8_000 - 1 - MAX_TRACKED);
        assert!(took < std::time::Duration::from_secs(5), "{took:?} of CPU time");
    }

    #[test]
    fn a_repeated_reference_is_copied_once_however_many_keys_it_consumes() {
        // One ConfigMap consumed through 10,000 keys and tracked 10,000 times:
        // copying its keys at each repetition makes 100 million key copies
        // (minutes); copying them once takes milliseconds.
        let items: Vec<_> =
            (0..10_000).map(|i| json!({"key": format!("k{i:05}"), "path": "p"})).collect();
        let spec: PodSpec = serde_json::from_value(json!({"containers": [{"name": "c"}],
            "volumes": [{"name": "v", "configMap": {"name": "cm", "items": items}}]}))
        .expect("spec");
        let refs = spec.references;
        let track = vec!["configmap/cm"; 10_000].join(",");
        let before = crate::cpu_time::this_thread();
        let (selection, warnings) = run(&refs, Some(&track), None);
        let took = crate::cpu_time::this_thread() - before;
        assert_eq!(names(&selection), ["configmap/cm"]);
        assert!(
            matches!(&selection.targets[0].consumption.keys, ConsumedKeys::Keys(k) if k.len() == 10_000),
            "the consumed keys, as referenced"
        );
        assert!(warnings.is_empty(), "{warnings:?}");
        assert!(took < std::time::Duration::from_secs(5), "{took:?} of CPU time");
    }

    #[test]
    fn millions_of_bad_tokens_give_ten_warnings_and_a_count() {
        let track = vec!["bad token"; 1_000_000].join(",");
        let mut warnings = Warnings::default();
        let domain = AnnotationDomain::default();
        let selection = select(refs(&[]), Some(&track), None, TRACKER, &domain, &mut warnings);
        assert!(selection.targets.is_empty());
        let sent = warnings.into_response();
        assert_eq!(sent.len(), 11);
        assert_eq!(sent[10], "and 999990 more");
    }

    #[test]
    fn invalid_names_are_skipped_with_a_warning() {
        let (s, w) = run(&refs(&[("cm", "Bad_Name"), ("cm", "good"), ("secret", "")]), None, None);
        assert_eq!(names(&s), ["configmap/good"]);
        assert_eq!(w.len(), 2, "{w:?}");
        assert_eq!(
            w,
            [
                r#"configmap/"Bad_Name": not a valid object name; skipped"#,
                r#"secret/"": not a valid object name; skipped"#
            ]
        );
    }

    #[test]
    fn at_most_128_configmaps_first_then_by_name() {
        let mut list: Vec<(String, String)> =
            (0..100).map(|i| ("secret".into(), format!("s{i:03}"))).collect();
        list.extend((0..100).map(|i| ("cm".into(), format!("c{i:03}"))));
        let list: Vec<(&str, &str)> = list.iter().map(|(k, n)| (k.as_str(), n.as_str())).collect();
        let (s, w) = run(&refs(&list), None, None);
        assert_eq!(s.targets.len(), MAX_TRACKED);
        assert_eq!(s.targets[99].object, ObjectRef::config_map("c099"));
        assert_eq!(s.targets[127].object, ObjectRef::secret("s027"));
        assert_eq!(s.kept_keys.len(), 72);
        assert!(s.kept_keys.contains("secret.configsum.dev/s028"));
        assert_eq!(w.len(), 1);
        assert!(w[0].starts_with("72 objects beyond the limit of 128"), "{w:?}");
    }

    #[test]
    fn other_namespaces_objects_count_in_a_limit_of_their_own() {
        // 200 keys of `db`, which may each name Secret `k…` of namespace `db`, beside 128
        // referenced objects: the referenced ones all stay.
        // (Named `a…`, so that they come before `db` in name order.)
        let names: Vec<String> = (0..128).map(|i| format!("a{i:03}")).collect();
        let pairs: Vec<(&str, &str)> = names.iter().map(|n| ("secret", n.as_str())).collect();
        let track: Vec<String> = (0..200).map(|i| format!("secret/db/k{i:03}")).collect();
        let track = format!("*, {}", track.join(", "));
        let (s, w) = run(&refs(&pairs), Some(&track), None);
        let count =
            |reach: fn(&Reach) -> bool| s.targets.iter().filter(|t| reach(&t.reach)).count();
        assert_eq!(count(|r| *r == Reach::Own), 128);
        assert_eq!(count(|r| *r == Reach::OwnIfPresent), 0, "`db` beyond the own limit");
        assert_eq!(count(|r| r.is_across()), 0, "nothing stands in for `db`'s keys then");
        assert_eq!(
            w,
            ["1 objects beyond the limit of 128 were not digested; they keep their annotations"]
        );
        // Without the referenced ones: `db` and the first 128 of the other namespace's.
        let (s, _) = run(&refs(&[]), Some(&track), None);
        assert_eq!(s.targets.len(), 1 + MAX_TRACKED);
        assert_eq!(s.targets[0].reach, Reach::OwnIfPresent);
        assert_eq!(s.targets[1].key, "secret.configsum.dev/db_k000");
        assert_eq!(s.targets[1].reach, Reach::Across { readable: true });
    }

    #[test]
    fn colliding_keys_keep_the_first_in_name_order() {
        let long = "a".repeat(70);
        // A 63-character name equal to the shortened form of the long one.
        let lookalike = format!("{}-6bd5e50348", "a".repeat(52));
        let (s, w) = run(&refs(&[("cm", &long), ("cm", &lookalike)]), None, None);
        assert_eq!(s.targets.len(), 1);
        assert_eq!(s.targets[0].object.name, lookalike, "the earlier in name order wins");
        assert_eq!(w.len(), 1);
        // 80 characters of subject beside 44 of reason: the name is shortened.
        assert!(w[0].starts_with("configmap/aaa") && w[0].contains("a…a"), "{w:?}");
        assert!(w[0].ends_with("aaa: its annotation key is already taken; skipped"), "{w:?}");
    }
}
