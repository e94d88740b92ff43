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
//!
//! The chart test renders the project's own charts with the real Helm 3 and
//! Helm 4 (scripts/install-helm.sh; tests/support/chart.rs, no network):
//! charts/configsum and the scalars test chart of tests/data/charts/scalars,
//! each with its defaults and its ci/custom-values.yaml. Every document must
//! read the same before and after render under every reader, but for the
//! digest annotations render adds.

#[path = "support/chart.rs"]
mod chart;
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
    // The core schema's and `!`: render refuses any other tag (docs/render.md).
    const TAGS: &[&str] = &["!!str", "!!int", "!!float", "!!bool", "!!null", "!"];
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

/// A key of an object's field: a plain word, a plain spelling YAML reads as
/// something else (`1`, `yes`, `~`), or any string double-quoted.
fn object_key() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => "[a-z][a-z0-9._-]{0,8}",
        1 => typed_spelling().prop_filter("a key", |s| !s.is_empty() && s != "<<"),
        1 => any_string().prop_map(|s| double_quoted(&s)),
    ]
}

/// A value of an object's field as the input spells it, under `key` at
/// column 2: a plain typed spelling, base64, or any string in any style,
/// sometimes with an explicit tag, an anchor, or as a mapping or a list.
fn object_value() -> impl Strategy<Value = (String, u8, u8)> {
    let base64 = prop_oneof![
        "[A-Za-z0-9+/]{4,12}={0,2}",
        any_string().prop_map(|s| {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(s)
        }),
    ];
    (prop_oneof![typed_spelling(), any_string(), base64], any::<u8>(), 0..24u8)
}

fn object_field(key: &str, (value, style, extra): &(String, u8, u8), anchor: usize) -> String {
    let plain = !value.is_empty()
        && value.chars().all(|c| c.is_ascii_alphanumeric() || "+/=-_.:~ ".contains(c))
        && !value.starts_with(['-', ':', ' ', '~'])
        && !value.ends_with([' ', ':'])
        && !value.contains(": ");
    match extra {
        0 => return format!("  {key}: [{}]\n", double_quoted(value)),
        1 => return format!("  {key}: {{k: {}}}\n", double_quoted(value)),
        2 => return format!("  {key}: !!str {}\n", double_quoted(value)),
        3 if plain => return format!("  {key}: !!str {value}\n"),
        4 => {
            return format!(
                "  {key}: &a{anchor} {}\n  {key}-alias: *a{anchor}\n",
                double_quoted(value)
            );
        }
        5..=10 if plain => return format!("  {key}: {value}\n"),
        _ => {}
    }
    let (spelled, _) = spelled(value, *style, false);
    let mut out = format!("  {key}:");
    for (i, line) in spelled.trim_start_matches("v:").split_inclusive('\n').enumerate() {
        if i > 0 && line != "\n" {
            out.push_str("  ");
        }
        out.push_str(line);
    }
    out
}

/// A ConfigMap or Secret: its name and namespace missing, typed, quoted or
/// not strings, its data fields of any keys and values.
fn object_document() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        4 => "[a-z][a-z0-9-]{0,8}",
        1 => typed_spelling(),
        1 => any_string().prop_map(|s| double_quoted(&s)),
        1 => Just("[x]".to_owned()),
        1 => Just("!!str 12".to_owned()),
    ];
    let fields = prop::collection::vec((object_key(), object_value()), 0..5);
    (
        0..3u8,
        prop::option::of(name.clone()),
        prop::option::of(name),
        prop::collection::vec((0..4u8, fields), 0..3),
    )
        .prop_map(|(kind, name, namespace, data)| {
            let kind = ["ConfigMap", "Secret", "\"Secret\""][usize::from(kind)];
            let mut text = format!("apiVersion: v1\nkind: {kind}\nmetadata:\n  labels: {{a: b}}\n");
            for (key, value) in [("name", name), ("namespace", namespace)] {
                if let Some(value) = value {
                    text.push_str(&format!("  {key}: {value}\n"));
                }
            }
            for (anchor, (field, entries)) in data.iter().enumerate() {
                let field = ["data", "binaryData", "stringData", "data"][usize::from(*field)];
                text.push_str(&format!("{field}:\n"));
                if entries.is_empty() {
                    text.truncate(text.len() - 1);
                    text.push_str(if anchor % 2 == 0 { " {}\n" } else { "\n" });
                }
                for (i, (key, value)) in entries.iter().enumerate() {
                    text.push_str(&object_field(key, value, anchor * 10 + i));
                }
            }
            text
        })
}

/// What the `--objects-from` reader read: each object's digest, or the refusal.
fn objects_read(
    objects: &configsum::lookup::FileSource,
    refused: Option<configsum::render::objects::Refused>,
) -> Result<Vec<(String, String, String)>, String> {
    use configsum::core::digest::{Digester, ObjectId};
    use configsum::core::refs::ConsumedKeys;
    if let Some(refused) = refused {
        return Err(refused.to_string());
    }
    let mut read: Vec<_> = objects
        .objects()
        .map(|(namespace, object, content)| {
            let id = ObjectId { namespace, object };
            let digest = Digester::default().digest(id, content, &ConsumedKeys::All, None);
            (namespace.to_owned(), format!("{:?}/{}", object.kind, object.name), digest)
        })
        .collect();
    read.sort();
    Ok(read)
}

/// render reads a ConfigMap or Secret from its own tree where it is certain
/// what the `--objects-from` reader makes of render's writing of it, and
/// that must be exactly what that reader makes of it: the same objects and
/// data, or the same refusal.
#[test]
fn objects_read_from_render_tree_are_those_read_from_its_writing() {
    use configsum::lookup::FileSource;
    use configsum::render::objects;
    let documents = sample(object_document());
    let (mut from_tree, mut refused_by_tree, mut failures) = (0, 0, Vec::new());
    for text in &documents {
        let Ok(node) = tree::parse(text) else { continue };
        let (mut tree, mut written) = (FileSource::default(), FileSource::default());
        let Some(added) = objects::add_from_tree(&mut tree, &node, "ns") else { continue };
        from_tree += 1;
        refused_by_tree += usize::from(added.is_err());
        let read = objects_read(&tree, added.err());
        let refused = objects::add_written(&mut written, &node, "ns").err();
        let expected = objects_read(&written, refused);
        if read != expected {
            failures.push(format!("read {read:?}, not {expected:?}, from:\n{text}"));
        }
    }
    eprintln!(
        "{} documents, {from_tree} read from the tree ({refused_by_tree} refused)",
        documents.len()
    );
    assert_none(failures, documents.len());
    assert!(from_tree * 4 >= documents.len(), "only {from_tree} read from the tree");
    assert!(refused_by_tree > 0 && refused_by_tree < from_tree, "{refused_by_tree} refused");
}

/// configsum's test chart of scalars (tests/data/charts/README.md).
const SCALARS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/charts/scalars");
const SCALARS_CUSTOM: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/charts/scalars/ci/custom-values.yaml");

/// The last line of the scalars chart's default output: the last line of a
/// literal block (`notes: |`) that ends the stream.
const SCALARS_LAST_LINE: &str = "    The last line of the stream.";

/// The binary whose render is checked: `RENDER_FIDELITY_BIN`, to see what
/// another build (an older render) gets wrong, else this build's.
fn render_binary() -> std::path::PathBuf {
    std::env::var_os("RENDER_FIDELITY_BIN")
        .map(Into::into)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_configsum").into())
}

/// `configsum render` of `input` (on stdin): its stdout, or its stderr.
fn render_stream(input: &str) -> Result<String, String> {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let mut child = Command::new(render_binary())
        .args(["render", "--allow-plain-secret-digests"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start configsum render");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_owned();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("configsum render finishes");
    // A render that refused its input may not have read it all.
    let _ = writer.join().expect("stdin writer");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    String::from_utf8(out.stdout).map_err(|e| format!("not UTF-8: {e}"))
}

/// The streams to check: charts/configsum (defaults and its
/// ci/custom-values.yaml) and the scalars chart (defaults and its own
/// ci/custom-values.yaml), each as Helm 3 and Helm 4 render it now, and the
/// scalars chart's default stream without its final line break, as a file
/// saved without one holds it (Helm always ends its output with one).
fn chart_streams() -> Vec<(String, String)> {
    let charts: [(&str, &str, &str, &[&str]); 4] = [
        ("configsum", chart::CHART, chart::NAMESPACE, &[]),
        (
            "configsum, ci/custom-values.yaml",
            chart::CHART,
            chart::NAMESPACE,
            &["-f", chart::CUSTOM_VALUES],
        ),
        ("scalars", SCALARS, "demo", &[]),
        ("scalars, ci/custom-values.yaml", SCALARS, "demo", &["-f", SCALARS_CUSTOM]),
    ];
    let mut streams = Vec::new();
    for helm in chart::Helm::ALL {
        for (name, dir, namespace, values) in charts {
            let mut args = vec!["template", "rel", dir, "--namespace", namespace];
            args.extend_from_slice(values);
            let out = helm.run(&args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{helm:?} template {name}: {stderr}");
            let text = String::from_utf8(out.stdout).expect("Helm writes UTF-8");
            streams.push((format!("{helm:?}: {name}"), text));
        }
    }
    let (name, scalars) = &streams[2];
    let trimmed = scalars.trim_end_matches('\n').to_owned();
    assert!(trimmed.ends_with(SCALARS_LAST_LINE), "{name} ends with the Sample's notes block");
    streams.push((format!("{name}, no final line break"), trimmed));
    streams
}

/// The digest annotations render writes (`configmap.`/`secret.configsum.dev/`).
fn is_digest_key(key: &str) -> bool {
    key.starts_with("configmap.configsum.dev/") || key.starts_with("secret.configsum.dev/")
}

/// `after` (a typed reading) less what render may add: digest annotations,
/// and the `annotations` mapping it wrote for them where `before` had none
/// (absent) or a null one (an empty `annotations:`). Anything else render
/// changed stays, for the comparison with `before` to find.
fn typed_less_digests(before: Option<&Value>, after: &Value) -> Value {
    let items = |reading: Option<&Value>, kind: &str| -> Vec<Value> {
        match reading {
            Some(Value::Array(parts)) if parts.first() == Some(&json!(kind)) => {
                parts.get(1).and_then(Value::as_array).cloned().unwrap_or_default()
            }
            _ => Vec::new(),
        }
    };
    match after.get(0).and_then(Value::as_str) {
        Some("map") => {
            let old = items(before, "map");
            let old_value = |key: &Value| old.iter().find(|pair| pair[0] == *key).map(|p| &p[1]);
            let mut pairs = Vec::new();
            for pair in items(Some(after), "map") {
                let (key, value) = (&pair[0], &pair[1]);
                if *key == string("annotations") && value[0] == "map" {
                    let all = items(Some(value), "map");
                    let kept: Vec<Value> = all
                        .iter()
                        .filter(|entry| !entry[0][1].as_str().is_some_and(is_digest_key))
                        .cloned()
                        .collect();
                    if kept.is_empty() && !all.is_empty() {
                        match old_value(key) {
                            None => continue,
                            Some(null) if *null == json!(["null"]) => {
                                pairs.push(json!([key, ["null"]]));
                                continue;
                            }
                            Some(_) => {}
                        }
                    }
                    pairs.push(json!([key, ["map", kept]]));
                } else {
                    pairs.push(json!([key, typed_less_digests(old_value(key), value)]));
                }
            }
            json!(["map", pairs])
        }
        Some("seq") => {
            let old = items(before, "seq");
            let new: Vec<Value> = items(Some(after), "seq")
                .iter()
                .enumerate()
                .map(|(i, item)| typed_less_digests(old.get(i), item))
                .collect();
            json!(["seq", new])
        }
        _ => after.clone(),
    }
}

/// As [`typed_less_digests`], on the project's readings (plain JSON).
fn json_less_digests(before: Option<&Value>, after: &Value) -> Value {
    match after {
        Value::Object(fields) => {
            let old = before.and_then(Value::as_object);
            let mut out = serde_json::Map::new();
            for (key, value) in fields {
                let old_value = old.and_then(|o| o.get(key));
                if let (true, Value::Object(annotations)) = (key == "annotations", value) {
                    let mut kept = annotations.clone();
                    kept.retain(|k, _| !is_digest_key(k));
                    if kept.is_empty() && !annotations.is_empty() {
                        match old_value {
                            None => continue,
                            Some(Value::Null) => {
                                out.insert(key.clone(), Value::Null);
                                continue;
                            }
                            Some(_) => {}
                        }
                    }
                    out.insert(key.clone(), Value::Object(kept));
                } else {
                    out.insert(key.clone(), json_less_digests(old_value, value));
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => {
            let old = before.and_then(Value::as_array);
            Value::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| json_less_digests(old.and_then(|o| o.get(i)), item))
                    .collect(),
            )
        }
        _ => after.clone(),
    }
}

/// A stream's documents by 1-based number, or why the reader refused it.
type ProjectReading = Result<Vec<(usize, Value)>, String>;

/// The stream's documents as the project's readers read them, by 1-based
/// document number: render's own tree (a List's items under their List's
/// number) and serde-saphyr (the parser under the `--objects-from` reader).
/// serde-saphyr reads only a stream that ends with a line break: at the very
/// end of the input its parser gives a block scalar a final line break that
/// no other reader gives (the `--objects-from` reader removes it, render's
/// tree too; tests/render.rs and src/lookup/file test those).
fn project_readings(text: &str) -> Vec<(&'static str, ProjectReading)> {
    let tree = configsum::render::stream::Stream::parse(text)
        .map(|mut stream| {
            stream
                .documents_mut()
                .iter()
                .map(|document| (document.number, document.node.to_json()))
                .collect()
        })
        .map_err(|e| e.to_string());
    let mut readings = vec![("render's reader", tree)];
    if text.ends_with('\n') {
        let saphyr = serde_saphyr::from_multiple::<Value>(text)
            .map(|documents| documents.into_iter().enumerate().map(|(i, d)| (i + 1, d)).collect())
            .map_err(|e| e.to_string());
        readings.push(("serde-saphyr", saphyr));
    }
    readings
}

/// Where a digest was written: (the workload's name, the digest key), from
/// render's reading of its output.
fn digests_written(output: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Ok(mut stream) = configsum::render::stream::Stream::parse(output) else { return out };
    for document in stream.documents_mut() {
        let object = document.node.to_json();
        let name = object["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        if let Some(annotations) = object["spec"]["template"]["metadata"]["annotations"].as_object()
        {
            for key in annotations.keys().filter(|key| is_digest_key(key)) {
                out.push((name.clone(), key.clone()));
            }
        }
    }
    out
}

/// The pod template annotations of the workload `name`, as render's reader reads them.
fn template_annotations(text: &str, name: &str) -> Option<Value> {
    let mut stream = configsum::render::stream::Stream::parse(text).ok()?;
    let documents = stream.documents_mut();
    let workload = documents.iter().find(|d| d.node.to_json()["metadata"]["name"] == name)?;
    Some(workload.node.to_json()["spec"]["template"]["metadata"]["annotations"].take())
}

/// One document that a reader read differently after render.
fn difference(name: &str, number: usize, reader: &str, before: &Value, after: &Value) -> String {
    format!(
        "{name}: document {number}: {reader} read\n{before}\nbefore and\n{after}\nafter (digests aside)"
    )
}

#[test]
fn rendered_charts_read_the_same_except_the_digest_annotations() {
    let streams = chart_streams();
    let mut texts = Vec::new();
    let mut failures = Vec::new();
    // (stream, document number) of every document some reader read differently.
    let mut wrong = std::collections::BTreeSet::new();
    for (name, input) in &streams {
        let output = render_stream(input).unwrap_or_else(|e| panic!("{name}: render failed: {e}"));
        if name.contains("scalars") {
            // The chart's defaults leave the web pods' `annotations:` empty (null).
            if !name.contains("custom") {
                let annotations = template_annotations(input, "rel-scalars-web");
                assert_eq!(annotations, Some(Value::Null), "{name}: an empty annotations:");
            }
            let digests = digests_written(&output);
            for expected in [
                ("rel-scalars-web", "configmap.configsum.dev/rel-scalars-settings"),
                ("rel-scalars-web", "secret.configsum.dev/rel-scalars-credentials"),
                ("rel-scalars-worker", "configmap.configsum.dev/rel-scalars-worker"),
            ] {
                assert!(
                    digests.iter().any(|(w, k)| (w.as_str(), k.as_str()) == expected),
                    "{name}: render wrote {expected:?}: {digests:?}"
                );
            }
        }
        for ((reader, before), (_, after)) in
            project_readings(input).into_iter().zip(project_readings(&output))
        {
            let before = before.unwrap_or_else(|e| panic!("{name}: {reader}: {e}"));
            let after = after.unwrap_or_else(|e| {
                failures.push(format!("{name}: {reader} refused render's output: {e}"));
                wrong.extend(before.iter().map(|(number, _)| (name.clone(), *number)));
                Vec::new()
            });
            if !after.is_empty() && before.len() != after.len() {
                failures.push(format!(
                    "{name}: {reader} read {} documents, then {}",
                    before.len(),
                    after.len()
                ));
            }
            for ((number, b), (_, a)) in before.iter().zip(&after) {
                let a = json_less_digests(Some(b), a);
                if a != *b {
                    failures.push(difference(name, *number, reader, b, &a));
                    wrong.insert((name.clone(), *number));
                }
            }
        }
        texts.push(input.clone());
        texts.push(output);
    }
    let readings = read_all(&texts);
    let mut documents = 0;
    for (i, (name, _)) in streams.iter().enumerate() {
        for reader in READERS {
            let (before, after) = (&readings[2 * i][reader], &readings[2 * i + 1][reader]);
            assert_ne!(before[0], "error", "{reader} reads {name} as Helm wrote it: {before}");
            let before = before.as_array().expect("the documents");
            if reader == READERS[0] {
                documents += before.len();
            }
            if after[0] == "error" {
                failures.push(format!("{name}: {reader} refused render's output: {after}"));
                wrong.extend((1..=before.len()).map(|number| (name.clone(), number)));
                continue;
            }
            let after = after.as_array().expect("the documents");
            if before.len() != after.len() {
                failures.push(format!(
                    "{name}: {reader} read {} documents, then {}",
                    before.len(),
                    after.len()
                ));
            }
            for (index, (b, a)) in before.iter().zip(after).enumerate() {
                let a = typed_less_digests(Some(b), a);
                if a != *b {
                    failures.push(difference(name, index + 1, reader, b, &a));
                    wrong.insert((name.clone(), index + 1));
                }
            }
        }
    }
    eprintln!(
        "{} streams, {documents} documents: {} read differently after render ({} differences)",
        streams.len(),
        wrong.len(),
        failures.len()
    );
    let shown = failures.iter().take(12).fold(String::new(), |mut out, f| {
        let _ = writeln!(out, "---- {f}");
        out
    });
    assert!(
        failures.is_empty(),
        "{} of {documents} documents read differently after render: {wrong:?}\n{} differences:\n{shown}",
        wrong.len(),
        failures.len()
    );
}
