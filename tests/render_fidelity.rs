//! `configsum render` changes no data (docs/render.md, "Strings stay
//! strings"), checked with real readers: PyYAML (YAML 1.1) and ruamel.yaml
//! (YAML 1.2, safe and round-trip), from tests/support/yaml_readers.rs, and
//! the project's own readers (render's tree and the `--objects-from` reader).
//!
//! The property tests draw their cases with proptest from the grammars of
//! every implicit type of YAML 1.1 and 1.2 (booleans, nulls, ints in every
//! base, floats, timestamps, merge and value keys) and from random Unicode,
//! control characters and multi-line text, then read a whole batch in one
//! Python process. A failure lists the cases; there is no shrinking.

#[path = "support/yaml_readers.rs"]
mod yaml_readers;

use std::fmt::Write as _;

use configsum::render::tree::{self, Node};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};
use yaml_readers::{READERS, map, read_all, string};

/// Cases per property: `PROPTEST_CASES`, else 400.
fn cases() -> usize {
    std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(400)
}

fn sample<S: Strategy>(strategy: S) -> Vec<S::Value> {
    let mut runner = TestRunner::new(Config::default());
    (0..cases()).map(|_| strategy.new_tree(&mut runner).expect("a case").current()).collect()
}

const WORDS: &[&str] = &[
    "y",
    "Y",
    "yes",
    "Yes",
    "YES",
    "n",
    "N",
    "no",
    "No",
    "NO",
    "true",
    "True",
    "TRUE",
    "false",
    "False",
    "FALSE",
    "on",
    "On",
    "ON",
    "off",
    "Off",
    "OFF",
    "yEs",
    "oN",
    "null",
    "Null",
    "NULL",
    "nULL",
    "~",
    "",
    "<<",
    "=",
    ".inf",
    ".Inf",
    ".INF",
    "-.inf",
    "+.inf",
    "-.Inf",
    ".nan",
    ".NaN",
    ".NAN",
    "inf",
    "nan",
    "+inf",
    "-Infinity",
];

/// Ints in every base (YAML 1.1 and 1.2, with underscores and sexagesimal).
const INT: &str = "[-+]?(0b[01_]{1,6}|0o?[0-7_]{1,6}|0x[0-9a-fA-F_]{1,6}|[0-9][0-9_]{0,6}|[1-9][0-9_]{0,3}(:[0-5]?[0-9]){1,3})";
/// Floats: decimal with and without exponent, sexagesimal.
const FLOAT: &str = "[-+]?([0-9][0-9_]{0,4})?\\.[0-9_]{0,4}([eE][-+]?[0-9]{1,3})?|[-+]?[0-9]{1,3}[eE][-+]?[0-9]{1,3}|[-+]?[0-9][0-9_]{0,2}(:[0-5]?[0-9]){1,2}\\.[0-9_]{0,3}";
/// Timestamps: dates, and date-times with `T`, `t` or spaces and zones.
const TIMESTAMP: &str = "[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(([Tt]|[ ]{1,2})[0-9]{1,2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{0,3})?([ ]{0,2}(Z|[-+][0-9]{1,2}(:[0-9]{2})?))?)?";

/// A value YAML reads as something other than a string when written plain.
fn typed_spelling() -> impl Strategy<Value = String> {
    prop_oneof![prop::sample::select(WORDS).prop_map(str::to_owned), INT, FLOAT, TIMESTAMP,]
}

/// Any string: the typed spellings as strings, and text with indicators,
/// control characters, line breaks, separators and a byte-order mark.
fn any_string() -> impl Strategy<Value = String> {
    let special = "[\\x00-\\x1f\\x7f-\\x9f\\u{85}\\u{a0}\\u{2028}\\u{2029}\\u{feff}\\u{fffe}\\u{ffff} \\t\\n\\r#:,'\"!&*|>%@`{}\\[\\]?-]";
    prop_oneof![
        2 => typed_spelling(),
        1 => "[ -~]{0,12}",
        1 => proptest::string::string_regex(&format!("(\\PC|{special}){{0,12}}"))
            .expect("a valid pattern"),
        1 => (prop::collection::vec("[ -~\\t]{0,8}", 1..5), 0usize..4)
            .prop_map(|(lines, breaks)| lines.join("\n") + &"\n".repeat(breaks)),
        1 => (typed_spelling(), "[ \\t\\n]{1,3}", 0..3u8).prop_map(|(s, pad, side)| match side {
            0 => format!("{pad}{s}"),
            1 => format!("{s}{pad}"),
            _ => format!("{pad}{s}{pad}"),
        }),
    ]
}

/// Readings that differ from `expected`, as lines for the failure message.
fn differences(text: &str, reading: &Value, expected: &Value, what: &str) -> Vec<String> {
    READERS
        .iter()
        .filter(|reader| reading[**reader] != *expected)
        .map(|reader| format!("{what}: {reader} read {} not {expected}\n{text}", reading[*reader]))
        .collect()
}

fn assert_none(failures: Vec<String>, of: usize) {
    let shown: String = failures.iter().take(8).fold(String::new(), |mut out, f| {
        let _ = writeln!(out, "---- {f}");
        out
    });
    assert!(failures.is_empty(), "{} failures in {of} cases:\n{shown}", failures.len());
}

#[test]
fn every_string_render_writes_reads_back_exactly() {
    let strings = sample(any_string());
    let started = std::time::Instant::now();
    let str_node = |s: &str| Node::Str(s.to_owned());
    let mut texts = Vec::new();
    for s in &strings {
        // As a value, an item and a nested key; then as a key at column 0.
        let document = Node::Map(vec![
            (str_node("v"), str_node(s)),
            (str_node("k"), Node::Map(vec![(str_node(s), str_node("x"))])),
            (
                str_node("l"),
                Node::List(vec![str_node(s), Node::Map(vec![(str_node("n"), str_node(s))])]),
            ),
        ]);
        texts.push(document.to_yaml());
        texts.push(Node::Map(vec![(str_node(s), str_node(s))]).to_yaml());
    }
    let readings = read_all(&texts);
    let mut failures = Vec::new();
    for (i, s) in strings.iter().enumerate() {
        let (text, key_text) = (&texts[2 * i], &texts[2 * i + 1]);
        let expected = json!([map(vec![
            (string("v"), string(s)),
            (string("k"), map(vec![(string(s), string("x"))])),
            (string("l"), json!(["seq", [string(s), map(vec![(string("n"), string(s))])]])),
        ])]);
        failures.extend(differences(text, &readings[2 * i], &expected, &format!("{s:?}")));
        let expected = json!([map(vec![(string(s), string(s))])]);
        failures.extend(differences(key_text, &readings[2 * i + 1], &expected, &format!("{s:?}")));
        // The project's readers: render's own tree, and the --objects-from reader.
        let data = json!({"v": s, "k": {s.as_str(): "x"}, "l": [s, {"n": s}]});
        match tree::parse(text) {
            Ok(node) if node.to_json() == data => {}
            other => failures.push(format!("{s:?}: render's reader read {other:?}\n{text}")),
        }
        match serde_saphyr::from_str::<Value>(text) {
            Ok(read) if read == data => {}
            other => failures.push(format!("{s:?}: serde-saphyr read {other:?}\n{text}")),
        }
    }
    eprintln!(
        "{} strings, {} documents, read in {:?}",
        strings.len(),
        texts.len(),
        started.elapsed()
    );
    assert_none(failures, strings.len());
}

/// `s` in a double-quoted scalar, escaped independently of render's writer.
fn double_quoted(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' | '\\' => out.extend(['\\', c]),
            ' '..='~' => out.push(c),
            c if u32::from(c) <= 0xFFFF => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => {
                let _ = write!(out, "\\U{:08x}", u32::from(c));
            }
        }
    }
    out.push('"');
    out
}

/// `s` as the input spells it: plain, single- or double-quoted, or a literal
/// or folded block, whichever can hold it (`style` picks among those), as
/// the value of `v:`. A block may end the input with no final line break.
fn spelled(s: &str, style: u8, at_end: bool) -> (String, bool) {
    let printable = |c: char| {
        c == ' '
            || (c.is_ascii_graphic())
            || (c > '\u{a0}' && !"\u{2028}\u{2029}\u{feff}\u{fffe}\u{ffff}".contains(c))
    };
    let one_line = !s.is_empty() && s.chars().all(printable);
    let body = s.trim_end_matches('\n');
    let block = !body.is_empty()
        && s.chars().all(|c| c == '\n' || printable(c))
        && !body.split('\n').any(|line| line.starts_with(' ') && line.trim().is_empty());
    match style % 4 {
        1 if one_line => (format!("v: '{}'\n", s.replace('\'', "''")), false),
        2 | 3 if block && !(style % 4 == 3 && s.contains("\n ")) => {
            let chomp = match s.len() - body.len() {
                0 => "-",
                1 => "",
                _ => "+",
            };
            let header = if style % 4 == 2 { "|" } else { ">" };
            let mut text = format!("v: {header}2{chomp}\n");
            for line in body.split('\n') {
                if !line.is_empty() {
                    text.push_str("  ");
                }
                text.push_str(line);
                text.push('\n');
            }
            text.push_str(&"\n".repeat((s.len() - body.len()).saturating_sub(1)));
            // With no final line break, `|2` at the very end reads `body` too.
            if at_end && s.len() == body.len() && header == "|" {
                return (
                    format!("v: |2\n  {}", body.replace('\n', "\n  ").replace("\n  \n", "\n\n")),
                    true,
                );
            }
            (text, false)
        }
        _ => (format!("v: {}\n", double_quoted(s)), false),
    }
}

/// Readings of the inputs and of what render wrote, compared per reader.
fn same_before_and_after(inputs: Vec<String>) -> Vec<String> {
    let mut texts = Vec::new();
    let mut refused = Vec::new();
    for input in &inputs {
        let output = tree::parse(input).map(|node| node.to_yaml());
        texts.push(input.clone());
        texts.push(output.as_ref().cloned().unwrap_or_default());
        refused.push(output.err());
    }
    let readings = read_all(&texts);
    let mut failures = Vec::new();
    for (i, input) in inputs.iter().enumerate() {
        let (before, after) = (&readings[2 * i], &readings[2 * i + 1]);
        if let Some(e) = &refused[i] {
            // Refusing is right only for what every reader refuses (`k: {<<: x}`).
            if READERS.iter().any(|reader| before[*reader][0] != "error") {
                failures.push(format!("render's reader refused {e:?}, readable:\n{input}"));
            }
            continue;
        }
        for reader in READERS {
            if before[reader] != after[reader] {
                failures.push(format!(
                    "{reader} read {} before and {} after\n{input}=> render wrote:\n{}",
                    before[reader],
                    after[reader],
                    texts[2 * i + 1]
                ));
            }
        }
    }
    failures
}

#[test]
fn any_spelling_of_a_string_reads_the_same_after_render() {
    let inputs: Vec<String> = sample((any_string(), any::<u8>(), any::<bool>(), any::<bool>()))
        .into_iter()
        .map(|(s, style, at_end, with_key)| {
            let (mut text, ended) = spelled(&s, style, at_end);
            if with_key && !ended {
                text.push_str(&format!("k:\n  {}: x\n", double_quoted(&s)));
            }
            text
        })
        .collect();
    let of = inputs.len();
    assert_none(same_before_and_after(inputs), of);
}

#[test]
fn plain_numbers_booleans_nulls_and_timestamps_stay_what_they_were() {
    let inputs: Vec<String> = sample(typed_spelling())
        .into_iter()
        .map(|s| {
            let key = if s.is_empty() { String::new() } else { format!("k:\n  {s}: x\n") };
            format!("v: {s}\nl:\n- {s}\n- [{s}]\n{key}")
        })
        .collect();
    let of = inputs.len();
    assert_none(same_before_and_after(inputs), of);
}

#[test]
fn explicitly_tagged_scalars_keep_their_meaning() {
    const TAGS: &[&str] =
        &["!!str", "!!int", "!!float", "!!bool", "!!null", "!!timestamp", "!!binary", "!"];
    let inputs: Vec<String> = sample((
        prop::sample::select(TAGS),
        prop_oneof![typed_spelling(), any_string(), "[A-Za-z0-9+/]{4,12}={0,2}"],
        any::<bool>(),
    ))
    .into_iter()
    .map(|(tag, value, quoted)| {
        // Plain only where the spelling is a plain scalar (a typed one, or base64).
        let plain = !value.is_empty()
            && (value.chars().all(|c| c.is_ascii_alphanumeric() || "+/=-_.:".contains(c)))
            && !value.starts_with(['-', ':']);
        let spelled = if quoted || !plain { double_quoted(&value) } else { value };
        format!("v: {tag} {spelled}\nl:\n- {tag} {spelled}\n")
    })
    .collect();
    let of = inputs.len();
    assert_none(same_before_and_after(inputs), of);
}
