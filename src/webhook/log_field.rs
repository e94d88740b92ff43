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
    }
}
