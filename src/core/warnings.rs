//! Admission warnings within the limits in the "Failure behaviour" in docs/behaviour.md: each under 120 characters,
//! at most 10 per response, then one `and N more`. Only the ten sent are
//! ever built: the rest are counted, so a request with millions of bad
//! tokens costs a counter, not millions of strings.

use std::fmt::Display;

const MAX_CHARS: usize = 119;
const MAX_WARNINGS: usize = 10;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Warnings {
    messages: Vec<String>,
    /// Warnings beyond the first ten, counted and never built.
    more: usize,
}

impl Warnings {
    /// Adds `before` + `subject` + `after`, shortening the subject (a name or a
    /// user-written token) in the middle so the whole fits. Nothing is
    /// formatted once ten warnings are held.
    pub fn push(&mut self, before: &str, subject: impl Display, after: impl Display) {
        if self.is_full() {
            return;
        }
        let after = after.to_string();
        let budget = MAX_CHARS.saturating_sub(before.chars().count() + after.chars().count());
        let message = format!("{before}{}{after}", shorten(&subject.to_string(), budget));
        self.messages.push(truncate(message));
    }

    /// Adds a message with no variable part.
    pub fn push_plain(&mut self, message: impl Into<String>) {
        if !self.is_full() {
            self.messages.push(truncate(message.into()));
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

/// Keeps the head and tail of `s` around a `…` so it has at most `max` characters.
fn shorten(s: &str, max: usize) -> String {
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

fn truncate(message: String) -> String {
    if message.chars().count() <= MAX_CHARS {
        return message;
    }
    let mut out: String = message.chars().take(MAX_CHARS - 1).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_subjects_are_shortened_in_the_middle() {
        let mut w = Warnings::default();
        let name = format!("start-{}-end", "x".repeat(300));
        w.push("secret/", &name, " not found");
        let sent = w.into_response();
        assert_eq!(sent[0].chars().count(), MAX_CHARS);
        assert!(
            sent[0].starts_with("secret/start-") && sent[0].ends_with("-end not found"),
            "{}",
            sent[0]
        );
    }

    #[test]
    fn multibyte_characters_are_counted_as_characters() {
        let mut w = Warnings::default();
        w.push("bad token ", "ä".repeat(200), "");
        w.push_plain("é".repeat(500));
        for message in w.into_response() {
            assert!(message.chars().count() < 120, "{message}");
        }
    }

    #[test]
    fn at_most_ten_then_a_count() {
        let mut w = Warnings::default();
        for i in 0..13 {
            w.push("warning ", i, "");
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
        (0..10).for_each(|i| w.push("w", i, ""));
        for _ in 0..1_000_000 {
            w.push("bad token ", NeverFormatted, NeverFormatted);
        }
        w.push_plain("plain");
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
