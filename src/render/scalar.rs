//! How `configsum render` writes a string so that every YAML reader reads
//! back exactly that string (docs/render.md, "Strings stay strings").
//!
//! A string is written plain only when [`plain_is_safe`] says so: simple
//! characters, and nothing that a YAML 1.1 reader (PyYAML, go-yaml v2, the
//! yaml.org type regexes) or a YAML 1.2 reader (the core schema, ruamel.yaml)
//! could resolve to a boolean, null, number, timestamp, merge key or value
//! key. Every implicit non-string type in those schemas either starts with a
//! digit (after an optional sign or dot) or is one of a few words, so the rule
//! refuses those shapes outright instead of listing each dialect's patterns: it
//! quotes a few strings that need no quotes (`1.16.0`, `3rd`) and cannot miss a
//! number form one dialect has and another lacks.
//!
//! Otherwise multi-line text is a literal block (`|`) whose chomping and
//! indentation indicators make it read back byte for byte, and anything else
//! (or text a block cannot hold: control characters, `\r`, Unicode line
//! separators, a byte-order mark) is double-quoted with YAML escapes.

use std::fmt::Write as _;

/// Longest key written as a simple (implicit) key: YAML readers look at most
/// 1024 characters ahead for the `:` of a simple key. Longer keys use `? `.
pub const MAX_SIMPLE_KEY: usize = 1000;

/// Whether `s` written as a plain scalar reads back as the string `s` for YAML
/// 1.1 and 1.2 readers alike, as a key or as a value, in block context at any
/// indentation (column 0 included).
pub fn plain_is_safe(s: &str) -> bool {
    let bytes = s.as_bytes();
    let Some((&first, rest)) = bytes.split_first() else { return false };
    let second = rest.first().copied();
    let first_ok = match first {
        b'a'..=b'z' | b'A'..=b'Z' | b'/' | b'_' | b'$' | b'(' | b'\\' | b'~' => true,
        // A sign or dot before a letter: `-Xmx1g`, `.dockerconfigjson`. A sign or
        // dot before anything else may be a number or a document marker.
        b'-' | b'+' | b'.' => second.is_some_and(|c| c.is_ascii_alphabetic()),
        // Numbers, timestamps and sexagesimal values in every dialect start here.
        _ => false,
    };
    first_ok
        && bytes.iter().all(|&b| PLAIN_BYTE[usize::from(b)])
        // `: ` starts a value and a trailing `:` ends a key; a trailing space is lost.
        && !s.contains(": ")
        && !s.ends_with([':', ' '])
        && !is_reserved_word(s)
}

/// Booleans (YAML 1.1 and 1.2, `y`/`n` included), nulls, and the YAML 1.1
/// `.inf`/`.nan` floats, in any letter case (a few more than any dialect has).
fn is_reserved_word(s: &str) -> bool {
    const WORDS: [&str; 12] =
        ["y", "n", "yes", "no", "on", "off", "true", "false", "null", "~", ".inf", ".nan"];
    WORDS.iter().any(|w| s.eq_ignore_ascii_case(w))
}

/// Bytes a plain string may hold: ASCII letters and digits, inner spaces, and
/// punctuation that is no indicator inside a block-context plain scalar. Not
/// `#` (a comment after a space), flow indicators, tabs, quotes' openers at
/// the start (the first byte is checked separately), nor any non-ASCII byte.
const PLAIN_BYTE: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric();
        b += 1;
    }
    let punctuation = b" -_./@+=:,~%?&!*'\"()$^;<>|\\";
    let mut i = 0;
    while i < punctuation.len() {
        table[punctuation[i] as usize] = true;
        i += 1;
    }
    table
};

/// `s` as a double-quoted scalar: `"`, `\`, control characters, DEL, C1
/// controls, the Unicode line and paragraph separators, the byte-order mark
/// and the non-characters U+FFFE/U+FFFF are escaped (YAML 1.1 readers treat
/// U+0085, U+2028 and U+2029 as line breaks, which a quoted scalar folds);
/// other characters are written as they are.
pub fn double_quoted(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\0' => out.push_str("\\0"),
            c if needs_escape(c) => {
                let code = u32::from(c);
                let _ = if code <= 0xFF {
                    write!(out, "\\x{code:02X}")
                } else if code <= 0xFFFF {
                    write!(out, "\\u{code:04X}")
                } else {
                    write!(out, "\\U{code:08X}")
                };
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Characters that are not printable in YAML 1.1 or 1.2, or that some reader
/// takes for a line break or a stream marker.
fn needs_escape(c: char) -> bool {
    matches!(
        c,
        '\0'..='\x1F' | '\x7F'..='\u{9F}' | '\u{2028}' | '\u{2029}' | '\u{FEFF}' | '\u{FFFE}' | '\u{FFFF}'
    )
}

/// Whether `s` can be a literal block scalar: more than one line, some
/// content, and only characters a block holds as they are (no escapes exist
/// there). A line may not start with a tab, which some readers take for
/// indentation.
fn literal_is_safe(s: &str) -> bool {
    s.contains('\n')
        && s.trim_end_matches('\n').chars().any(|c| c != '\n')
        && !s.chars().any(|c| c != '\n' && c != '\t' && needs_escape(c))
        && !s.starts_with('\t')
        && !s.contains("\n\t")
}

/// Writes the string `s` as a mapping value or sequence item whose key or
/// dash is at column `indent`, after `key:` or `-`: a space and the scalar,
/// then the line break (a block scalar's lines indented by two more).
pub fn write_value_string(out: &mut String, s: &str, indent: usize) {
    out.push(' ');
    if plain_is_safe(s) {
        out.push_str(s);
        out.push('\n');
    } else if literal_is_safe(s) {
        write_literal(out, s, indent + 2);
    } else {
        double_quoted(out, s);
        out.push('\n');
    }
}

/// The string `s` on one line: plain when safe, else double-quoted (keys and
/// flow collections, which hold no block scalar).
pub fn inline_string(out: &mut String, s: &str) {
    if plain_is_safe(s) {
        out.push_str(s);
    } else {
        double_quoted(out, s);
    }
}

/// `indent` spaces: `write!` with a width costs a formatter call per line.
pub fn pad(out: &mut String, indent: usize) {
    const SPACES: &str = "                                                                ";
    let mut left = indent;
    while left > 0 {
        let n = left.min(SPACES.len());
        out.push_str(&SPACES[..n]);
        left -= n;
    }
}

/// `|` and its indicators, then the lines at column `content`. The chomping
/// indicator keeps the exact number of final line breaks: `-` none, nothing
/// one, `+` more; the indentation indicator is given when the first line is
/// empty or starts with a space, where a reader would guess it wrong.
fn write_literal(out: &mut String, s: &str, content: usize) {
    let body = s.trim_end_matches('\n');
    let breaks = s.len() - body.len();
    out.push('|');
    if s.starts_with([' ', '\n']) {
        out.push('2');
    }
    match breaks {
        0 => out.push('-'),
        1 => {}
        _ => out.push('+'),
    }
    out.push('\n');
    for line in body.split('\n') {
        if !line.is_empty() {
            pad(out, content);
            out.push_str(line);
        }
        out.push('\n');
    }
    // The first final break ends the last line; the others are empty lines.
    for _ in 1..breaks {
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_any_reader_could_resolve_otherwise_are_not_plain() {
        let quoted = [
            "",
            "true",
            "True",
            "TRUE",
            "yes",
            "Yes",
            "y",
            "Y",
            "n",
            "N",
            "no",
            "on",
            "On",
            "off",
            "OFF",
            "null",
            "Null",
            "NULL",
            "~",
            "0755",
            "0o17",
            "0x1F",
            "0b101",
            "1_000",
            "1__0",
            "0x_1F",
            "0755_1",
            "12:30:45",
            "+12",
            "-12",
            ".inf",
            "-.Inf",
            "+.inf",
            ".NaN",
            "1e3",
            "6.8523015e+5",
            "1_000.5",
            "190:20:30.15",
            "2001-12-14",
            "2001-12-14t21:59:43.10-05:00",
            "2001-12-14 21:59:43.10 -5",
            "<<",
            "=",
            ".5",
            "1.16.0",
            "3rd",
            "-",
            "---",
            "...",
            "a: b",
            "a:",
            "a ",
            " a",
            "#a",
            "a #b",
            "a\tb",
            "é",
            "[a]",
            "{a}",
            "a,b[",
            "!a",
            "&a",
            "*a",
            "|",
            ">",
            "'a",
            "\"a",
            "%a",
            "@a",
            "`a",
            "?a",
            ":a",
            "-1",
            "+.5",
            "..",
            "-.",
            "a\nb",
        ];
        for s in quoted {
            assert!(!plain_is_safe(s), "{s:?} must be quoted");
        }
        let plain = [
            "web",
            "kind",
            "configmap.configsum.dev/app",
            "sha256:0123abcdef",
            "nginx:1.25",
            "http://x.example/a?b=c&d",
            "-Xmx1g",
            ".dockerconfigjson",
            "a b",
            "it's",
            "yesno",
            "nullable",
            "onboarding",
            "True2",
            "app=web",
            "_x",
            "/etc/x",
            "~user",
            "$HOME",
            "a=",
        ];
        for s in plain {
            assert!(plain_is_safe(s), "{s:?} can be plain");
        }
    }

    fn value(s: &str) -> String {
        let mut out = String::new();
        write_value_string(&mut out, s, 0);
        out
    }

    #[test]
    fn literal_blocks_keep_their_final_line_breaks_and_first_line_indentation() {
        assert_eq!(value("a\nb"), " |-\n  a\n  b\n");
        assert_eq!(value("a\nb\n"), " |\n  a\n  b\n");
        assert_eq!(value("a\n\nb\n\n\n"), " |+\n  a\n\n  b\n\n\n");
        assert_eq!(value("  a\nb\n"), " |2\n    a\n  b\n");
        assert_eq!(value("\na\n"), " |2\n\n  a\n");
        // Text a block cannot hold is double-quoted instead.
        assert_eq!(value("a\r\nb"), " \"a\\r\\nb\"\n");
        assert_eq!(value("\ta\nb"), " \"\\ta\\nb\"\n");
        assert_eq!(value("\n\n"), " \"\\n\\n\"\n");
        assert_eq!(value("a\u{2028}b\nc"), " \"a\\u2028b\\nc\"\n");
    }

    #[test]
    fn double_quotes_escape_what_a_reader_would_not_read_back() {
        let mut out = String::new();
        double_quoted(&mut out, "\"\\\u{7}\u{7F}\u{85}\u{A0}é\u{FEFF}\u{FFFF}😀");
        assert_eq!(out, "\"\\\"\\\\\\x07\\x7F\\x85\u{A0}é\\uFEFF\\uFFFF😀\"");
    }
}
