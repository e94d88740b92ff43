//! Request fields as they go into log lines: a caller controls the uid,
//! kind, names and namespace of a review, so each is cut to 253 characters
//! (the longest Kubernetes name) and control characters are escaped. No
//! request can make a huge line, or forge or split one in the text format.

use std::fmt;

/// The longest a logged request field gets, in characters.
pub const MAX_LOGGED_CHARS: usize = 253;

pub struct LogField<'a>(pub &'a str);

impl fmt::Display for LogField<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Nearly every field: short and printable, written whole rather than a character at a
        // time (a bound in bytes is within the bound in characters).
        if self.0.len() <= MAX_LOGGED_CHARS && !self.0.chars().any(char::is_control) {
            return f.write_str(self.0);
        }
        let mut chars = self.0.chars();
        for c in chars.by_ref().take(MAX_LOGGED_CHARS) {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                f.write_fmt(format_args!("{c}"))?;
            }
        }
        if chars.next().is_some() {
            f.write_str("…")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_fields_are_cut_and_control_characters_escaped() {
        let long = "u".repeat(8 * 1024 * 1024);
        let logged = LogField(&long).to_string();
        assert_eq!(logged.chars().count(), MAX_LOGGED_CHARS + 1);
        assert!(logged.ends_with('…'));
        let forged = "abc\n{\"level\":\"INFO\",\"message\":\"forged\"}\r\u{1b}[31m";
        let logged = LogField(forged).to_string();
        assert!(!logged.chars().any(char::is_control), "{logged}");
        assert!(logged.starts_with("abc\\n{"), "{logged}");
        assert_eq!(LogField("team-a/web").to_string(), "team-a/web");
        assert_eq!(LogField("ünïcödé").to_string(), "ünïcödé");
        // At the bound in characters, though longer in bytes: whole, not cut.
        let at_bound = "ü".repeat(MAX_LOGGED_CHARS);
        assert_eq!(LogField(&at_bound).to_string(), at_bound);
        let over = "ü".repeat(MAX_LOGGED_CHARS + 1);
        assert_eq!(LogField(&over).to_string().chars().count(), MAX_LOGGED_CHARS + 1);
        assert_eq!(LogField("short\ttab").to_string(), "short\\ttab");
    }
}
