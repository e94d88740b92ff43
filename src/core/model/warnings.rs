//! Admission warnings (docs/behaviour.md, "Warnings"): each is
//! `<subject>: <reason>` in under 120 characters, at most 10 per response,
//! then one `and N more`. The subject — what the warning is about: an object,
//! a container and its image reference, or a token of a workload annotation —
//! is named in full whenever it fits beside [`MIN_REASON`] characters of
//! reason; the reason is shortened first (`…` at its end), and only a subject
//! too long for that is shortened, in the middle of its names. Only the ten
//! sent are ever built: the rest are counted, so a request with millions of
//! bad tokens costs a counter, not millions of strings.

use std::borrow::Cow;
use std::fmt::Display;

use super::object_ref::ObjectRef;

/// Characters in a warning at most: the limit is "under 120".
pub const MAX_CHARS: usize = 119;
const MAX_WARNINGS: usize = 10;
/// A reason keeps at least this many characters (or all it has) beside a
/// subject that must be shortened: enough for what went wrong and what
/// became of the annotation (`image not resolved; its annotation was kept`).
pub const MIN_REASON: usize = 44;
const SEPARATOR: &str = ": ";

/// What a warning is about, named the same way in every warning.
#[derive(Clone, Copy, Debug)]
pub enum Subject<'a> {
    /// `configmap/<name>`, as `track` and the audit annotation write it.
    Object(&'a ObjectRef),
    /// `configmap/"<name>"`: a name that is not valid, quoted so that any
    /// character in it shows.
    InvalidObject(&'a ObjectRef),
    /// `container <name> (<image>)`: a container and its image reference,
    /// one the distribution grammar accepts.
    Container { name: &'a str, image: &'a str },
    /// `container <name>`: a container whose image is not a valid reference.
    /// That text could be anything a tenant pasted there, so it is not
    /// echoed back, as parse errors never quote a body.
    ContainerName(&'a str),
    /// `container <name> env <VAR> (<image>)`: a variable `<domain>/image-env` sets to the
    /// digest behind an image reference (one the distribution grammar accepts).
    EnvVar { container: &'a str, variable: &'a str, image: &'a str },
    /// `deployment/<name>`: a tracked workload, as `track` names it.
    Workload { word: &'static str, name: &'a str },
    /// `"<text>" in <annotation>`: something written in a workload annotation.
    Written { text: &'a str, annotation: &'a str },
}

/// A piece of a subject: fixed wording, or a name that may be shortened.
enum Piece<'a> {
    Fixed(&'static str),
    Name(Cow<'a, str>),
}

impl<'a> Subject<'a> {
    fn pieces(self) -> Vec<Piece<'a>> {
        use Piece::{Fixed, Name};
        match self {
            Subject::Object(object) => match &object.namespace {
                // Another namespace's object: both names, shortened together.
                Some(namespace) => vec![
                    Fixed(object.kind.prefix()),
                    Fixed("/"),
                    Name(Cow::Owned(format!("{namespace}/{}", object.name))),
                ],
                None => {
                    vec![Fixed(object.kind.prefix()), Fixed("/"), Name(Cow::Borrowed(&object.name))]
                }
            },
            Subject::InvalidObject(object) => vec![
                Fixed(object.kind.prefix()),
                Fixed("/"),
                Name(Cow::Owned(format!("{:?}", object.name))),
            ],
            Subject::Container { name, image } => vec![
                Fixed("container "),
                Name(Cow::Borrowed(name)),
                Fixed(" ("),
                Name(Cow::Borrowed(image)),
                Fixed(")"),
            ],
            Subject::ContainerName(name) => vec![Fixed("container "), Name(Cow::Borrowed(name))],
            Subject::Workload { word, name } => {
                vec![Fixed(word), Fixed("/"), Name(Cow::Borrowed(name))]
            }
            Subject::EnvVar { container, variable, image } => vec![
                Fixed("container "),
                Name(Cow::Borrowed(container)),
                Fixed(" env "),
                Name(Cow::Borrowed(variable)),
                Fixed(" ("),
                Name(Cow::Borrowed(image)),
                Fixed(")"),
            ],
            Subject::Written { text, annotation } => vec![
                Name(Cow::Owned(format!("{text:?}"))),
                Fixed(" in "),
                Name(Cow::Borrowed(annotation)),
            ],
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Warnings {
    messages: Vec<String>,
    /// Warnings beyond the first ten, counted and never built.
    more: usize,
}

impl Warnings {
    /// Adds `<subject>: <reason>`. Nothing is formatted once ten warnings are held.
    pub fn push(&mut self, subject: Subject<'_>, reason: impl Display) {
        if !self.is_full() {
            self.messages.push(message(subject, &reason.to_string()));
        }
    }

    /// Adds a warning about the workload as a whole, which has no subject to
    /// name: its wording is fixed but for numbers, shortened like a reason.
    pub fn push_plain(&mut self, message: impl Display) {
        if !self.is_full() {
            self.messages.push(shorten_end(&message.to_string(), MAX_CHARS));
        }
    }

    /// Counts the warning instead of keeping it if ten are held already.
    fn is_full(&mut self) -> bool {
        let full = self.messages.len() >= MAX_WARNINGS;
        if full {
            self.more += 1;
        }
        full
    }

    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The warnings as sent: the first ten, then `and N more`.
    pub fn into_response(mut self) -> Vec<String> {
        if self.more > 0 {
            self.messages.push(format!("and {} more", self.more));
        }
        self.messages
    }
}

/// How a reason ends for something that could not be read or resolved:
/// "kept" only when there was an annotation to keep.
pub fn kept_or_none(existing: bool) -> &'static str {
    if existing { "its annotation was kept" } else { "no annotation written" }
}

/// `<subject>: <reason>` within [`MAX_CHARS`]: the one shortening rule.
fn message(subject: Subject<'_>, reason: &str) -> String {
    let separator = SEPARATOR.chars().count();
    let reason_chars = reason.chars().count();
    let subject_budget = MAX_CHARS - separator - reason_chars.min(MIN_REASON);
    let subject = fit(&subject.pieces(), subject_budget);
    let reason_budget = MAX_CHARS - separator - subject.chars().count();
    let mut out = subject;
    out.push_str(SEPARATOR);
    out.push_str(&shorten_end(reason, reason_budget));
    out
}

/// The pieces joined within `budget` characters: in full if they fit, else
/// with the longest names shortened in the middle, each to the same length
/// as far as the budget allows.
fn fit(pieces: &[Piece<'_>], budget: usize) -> String {
    let chars = |s: &str| s.chars().count();
    let fixed: usize =
        pieces.iter().map(|p| if let Piece::Fixed(s) = p { chars(s) } else { 0 }).sum();
    let names: Vec<usize> = pieces
        .iter()
        .filter_map(|p| if let Piece::Name(s) = p { Some(chars(s)) } else { None })
        .collect();
    let total = fixed + names.iter().sum::<usize>();
    let joined = || -> String {
        pieces
            .iter()
            .map(|p| match p {
                Piece::Fixed(s) => *s,
                Piece::Name(s) => s.as_ref(),
            })
            .collect()
    };
    if total <= budget {
        return joined();
    }
    if fixed + names.len() > budget {
        // Not even one character per name: never the case for the subjects above.
        return shorten_middle(&joined(), budget);
    }
    // The largest cap with every name cut to it fitting the room left.
    let room = budget - fixed;
    let within = |cap: usize| names.iter().map(|&n| n.min(cap)).sum::<usize>() <= room;
    let (mut low, mut high) = (1, names.iter().copied().max().unwrap_or(1));
    while low < high {
        let mid = (low + high).div_ceil(2);
        if within(mid) {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    let cap = low;
    let mut spare = room - names.iter().map(|&n| n.min(cap)).sum::<usize>();
    let mut out = String::new();
    for piece in pieces {
        match piece {
            Piece::Fixed(s) => out.push_str(s),
            Piece::Name(s) => {
                let len = chars(s);
                let mut keep = len.min(cap);
                if len > cap && spare > 0 {
                    keep += 1;
                    spare -= 1;
                }
                out.push_str(&shorten_middle(s, keep));
            }
        }
    }
    out
}

/// Keeps the head and tail of `s` around a `…` so it has at most `max` characters.
pub fn shorten_middle(s: &str, max: usize) -> String {
    let len = s.chars().count();
    if len <= max {
        return s.to_owned();
    }
    if max == 0 {
        return String::new();
    }
    let keep = max - 1;
    let head = keep.div_ceil(2);
    let tail = keep - head;
    let mut out: String = s.chars().take(head).collect();
    out.push('…');
    out.extend(s.chars().skip(len - tail));
    out
}

/// Keeps the start of `s`, ending in `…`, so it has at most `max` characters.
fn shorten_end(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    if max == 0 {
        return String::new();
    }
    let mut out: String = s.chars().take(max - 1).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(subject: Subject<'_>, reason: &str) -> String {
        let mut w = Warnings::default();
        w.push(subject, reason);
        w.into_response().remove(0)
    }

    fn chars(s: &str) -> usize {
        s.chars().count()
    }

    /// A 253-character name (the longest valid one) whose ends show.
    fn long_name(fill: char) -> String {
        format!("start-{}-end", fill.to_string().repeat(253 - 10))
    }

    #[test]
    fn short_warnings_are_whole() {
        let object = ObjectRef::secret("db");
        assert_eq!(
            one(Subject::Object(&object), "could not be read (timeout); its annotation was kept"),
            "secret/db: could not be read (timeout); its annotation was kept"
        );
        assert_eq!(
            one(
                Subject::Container { name: "app", image: "ghcr.io/org/app:prod" },
                "image not resolved"
            ),
            "container app (ghcr.io/org/app:prod): image not resolved"
        );
        assert_eq!(
            one(Subject::Written { text: "cm/b", annotation: "configsum.dev/track" }, "skipped"),
            r#""cm/b" in configsum.dev/track: skipped"#
        );
        let bad = ObjectRef::config_map("Bad_Name");
        assert_eq!(
            one(Subject::InvalidObject(&bad), "invalid"),
            r#"configmap/"Bad_Name": invalid"#
        );
    }

    #[test]
    fn the_reason_is_shortened_before_the_subject() {
        // A subject of 73 characters fits beside 44 of reason: it stays whole.
        let name = "n".repeat(73 - "configmap/".len());
        let object = ObjectRef::config_map(&name);
        let sent = one(Subject::Object(&object), &"r".repeat(100));
        assert_eq!(chars(&sent), MAX_CHARS);
        assert!(sent.starts_with(&format!("configmap/{name}: rrr")), "{sent}");
        assert!(sent.ends_with("r…"), "{sent}");
        // One more character of subject: the subject is shortened, in the middle.
        let longer = ObjectRef::config_map(format!("{name}m"));
        let sent = one(Subject::Object(&longer), &"r".repeat(100));
        assert_eq!(chars(&sent), MAX_CHARS);
        assert!(sent.starts_with("configmap/nnn") && sent.contains("nnnm: rrr"), "{sent}");
        assert_eq!(sent.split(": ").next().map(|s| s.matches('…').count()), Some(1));
        assert!(sent.ends_with(&format!(": {}…", "r".repeat(MIN_REASON - 1))), "{sent}");

        // At the edge: subject + reason exactly 119 characters, all whole.
        let reason = "r".repeat(MAX_CHARS - 73 - 2);
        let sent = one(Subject::Object(&object), &reason);
        assert_eq!(sent, format!("configmap/{name}: {reason}"));
        // One more character: the reason loses it, not the subject.
        let sent = one(Subject::Object(&object), &format!("{reason}x"));
        assert_eq!(chars(&sent), MAX_CHARS);
        assert!(sent.starts_with(&format!("configmap/{name}: ")) && sent.ends_with('…'));
    }

    #[test]
    fn a_253_character_name_is_shortened_in_the_middle_beside_the_reason() {
        let object = ObjectRef::config_map(long_name('x'));
        let reason = r#"not found; its digest is "absent""#;
        let sent = one(Subject::Object(&object), reason);
        assert_eq!(chars(&sent), MAX_CHARS, "{sent}");
        assert!(sent.starts_with("configmap/start-xx"), "{sent}");
        // The reason is whole: it is shorter than the 44 characters it may keep.
        assert!(sent.ends_with(r#"xx-end: not found; its digest is "absent""#), "{sent}");
        assert_eq!(sent.matches('…').count(), 1, "{sent}");

        // A short reason leaves the name more room.
        let sent = one(Subject::Object(&object), "gone");
        assert_eq!(chars(&sent), MAX_CHARS);
        assert!(sent.ends_with("-end: gone"), "{sent}");
    }

    #[test]
    fn a_container_and_a_255_character_reference_are_both_named() {
        let image = format!("registry.example.com/{}:prod", "a".repeat(255 - 26));
        assert_eq!(chars(&image), 255);
        let sent = one(
            Subject::Container { name: "app", image: &image },
            "image not resolved; its annotation was kept (timeout)",
        );
        assert_eq!(chars(&sent), MAX_CHARS, "{sent}");
        assert!(sent.starts_with("container app (registry.example.com/aa"), "{sent}");
        assert!(sent.ends_with("aa:prod): image not resolved; its annotation was kept…"), "{sent}");

        // A 63-character container name with it: both shortened alike.
        let name = format!("c{}", "n".repeat(61)) + "z";
        let sent = one(Subject::Container { name: &name, image: &image }, "image not resolved");
        assert_eq!(chars(&sent), MAX_CHARS, "{sent}");
        assert!(sent.starts_with("container cnn") && sent.contains("nz (registry"), "{sent}");
        assert!(sent.ends_with(":prod): image not resolved"), "{sent}");
    }

    #[test]
    fn multibyte_characters_are_counted_as_characters() {
        let object = ObjectRef::config_map(long_name('ä'));
        let image = "é".repeat(255);
        let mut w = Warnings::default();
        w.push(Subject::Object(&object), "not found");
        w.push(Subject::InvalidObject(&object), "ü".repeat(300));
        w.push(Subject::Container { name: &"ö".repeat(300), image: &image }, "ß".repeat(300));
        w.push(Subject::Written { text: &"ä".repeat(500), annotation: "configsum.dev/track" }, "x");
        w.push_plain("é".repeat(500));
        for message in w.into_response() {
            assert_eq!(chars(&message), MAX_CHARS, "{message}");
        }
    }

    #[test]
    fn no_warning_ever_exceeds_119_characters() {
        for name_len in (1..300).step_by(7) {
            for reason_len in (0..300).step_by(11) {
                let (name, reason) = ("n".repeat(name_len), "r".repeat(reason_len));
                let object = ObjectRef::secret(&name);
                let subjects = [
                    Subject::Object(&object),
                    Subject::InvalidObject(&object),
                    Subject::Container { name: &name, image: &name },
                    Subject::ContainerName(&name),
                    Subject::Written { text: &name, annotation: &name },
                ];
                for subject in subjects {
                    let full: String = subject
                        .pieces()
                        .iter()
                        .map(|p| match p {
                            Piece::Fixed(s) => *s,
                            Piece::Name(s) => s.as_ref(),
                        })
                        .collect();
                    let sent = one(subject, &reason);
                    assert!(chars(&sent) <= MAX_CHARS, "{name_len}/{reason_len}: {sent}");
                    // Whole whenever it fits beside the reason's first 44 characters.
                    let fits = chars(&full) + 2 + reason_len.min(MIN_REASON) <= MAX_CHARS;
                    assert_eq!(sent.starts_with(&format!("{full}: ")), fits, "{sent}");
                    // The reason is whole when it fits; never cut below 44 characters.
                    let whole =
                        reason_len <= MIN_REASON || chars(&full) + 2 + reason_len <= MAX_CHARS;
                    assert_eq!(sent.ends_with(&format!(": {reason}")), whole, "{sent}");
                    let kept = sent.chars().rev().take_while(|&c| c == 'r' || c == '…').count();
                    assert!(kept >= reason_len.min(MIN_REASON), "{sent}");
                }
            }
        }
    }

    #[test]
    fn at_most_ten_then_a_count() {
        let mut w = Warnings::default();
        for i in 0..13 {
            w.push_plain(format_args!("warning {i}"));
        }
        let sent = w.into_response();
        assert_eq!(sent.len(), 11);
        assert_eq!(sent[9], "warning 9");
        assert_eq!(sent[10], "and 3 more");
    }

    /// Panics if formatted: proves a warning beyond the tenth is never built.
    struct NeverFormatted;

    impl Display for NeverFormatted {
        fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            panic!("a warning beyond the tenth was built")
        }
    }

    #[test]
    fn warnings_beyond_ten_are_counted_never_built() {
        let mut w = Warnings::default();
        (0..10).for_each(|i| w.push_plain(i));
        let object = ObjectRef::secret("db");
        for _ in 0..1_000_000 {
            w.push(Subject::Object(&object), NeverFormatted);
        }
        w.push_plain(NeverFormatted);
        assert_eq!(w.messages.len(), 10, "only ten are held");
        let sent = w.into_response();
        assert_eq!(sent.len(), 11);
        assert_eq!(sent[10], "and 1000001 more");
    }

    #[test]
    fn ten_exactly_has_no_count() {
        let mut w = Warnings::default();
        (0..10).for_each(|i| w.push_plain(format!("w{i}")));
        assert_eq!(w.into_response().len(), 10);
    }
}
