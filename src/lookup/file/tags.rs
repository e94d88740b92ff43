//! YAML tags outside the core schema, refused. No Kubernetes object carries
//! one, and a language tag (`!!python/object/apply:os.system`) that a reader
//! keeps and writes back would run in a later, careless YAML loader.
//!
//! Allowed: the core schema's `!!str`, `!!int`, `!!float`, `!!bool`, `!!null`,
//! `!!map` and `!!seq` (in any spelling that resolves to `tag:yaml.org,2002:`
//! and one of them), and the non-specific `!`. Anything else is refused:
//! `!!binary`, `!!timestamp`, `!!set`, `!!omap`, local tags (`!custom`) and
//! any other global tag, also when a `%TAG` directive makes `!!` mean
//! something else.
//!
//! The tags are read by the parser every reader of the project uses, so text
//! that only looks like a tag (in a quoted string, a block scalar, a comment)
//! is not one, and a `%TAG` directive is applied as YAML applies it. Errors
//! name where the tag is, never the tag ([`RefusedTag`]).

use serde_saphyr::granit_parser::{Event, Marker, Options, Parser, Tag};

/// A tag refused, and where it is written (1-based, in the text read). The
/// tag itself is not kept: a stray `!` before a Secret's value makes the
/// value a tag, and errors never quote a value.
#[derive(Debug, PartialEq)]
pub struct RefusedTag {
    pub line: usize,
    pub column: usize,
}

impl RefusedTag {
    /// What is wrong, without the place.
    pub fn problem(&self) -> &'static str {
        "tag outside YAML's core schema"
    }
}

/// Nesting the scanner follows: deeper than any reader of the project reads
/// (render stops at 128 collections, the `--objects-from` reader at 255), so
/// a tag the scanner does not reach is in a document no reader accepts. The
/// parser keeps its nesting on the heap: this bounds memory, not the stack.
const MAX_NESTING: usize = 1024;

/// How far before its node a refused tag is looked for, in bytes: past an
/// anchor, spaces and a line break or two. Further, the node's place is named.
const LOOK_BACK: usize = 4096;

/// The one rule: `tag`, on the node of `text` that starts at `node`, is in the
/// core schema or is `!`. A refused tag is placed where it is written, or at
/// its node when it cannot be found just before it (a `%`-escaped suffix).
pub fn check(tag: &Tag, node: &Marker, text: &str) -> Result<(), RefusedTag> {
    let non_specific = tag.handle().is_empty() && tag.suffix() == "!";
    if non_specific || tag.is_yaml_core_schema() {
        return Ok(());
    }
    let written = tag.original();
    let (line, column) = written_at(text, &written, node).unwrap_or((node.line(), node.col() + 1));
    Err(RefusedTag { line, column })
}

/// Line and column of the last `written` in the [`LOOK_BACK`] bytes before `node`.
fn written_at(text: &str, written: &str, node: &Marker) -> Option<(usize, usize)> {
    let end = node.byte_offset()?;
    let mut from = end.saturating_sub(LOOK_BACK + written.len());
    while !text.is_char_boundary(from) {
        from -= 1;
    }
    let at = from + text.get(from..end)?.rfind(written)?;
    let breaks = text[at..end].matches('\n').count();
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let line = node.line().checked_sub(breaks).filter(|l| *l > 0)?;
    Some((line, text[line_start..at].chars().count() + 1))
}

/// The tag of a node's event: a scalar, or the start of a sequence or mapping.
pub fn of_event<'e>(event: &'e Event<'_>) -> Option<&'e Tag> {
    match event {
        Event::Scalar(_, _, _, tag)
        | Event::SequenceStart(_, _, tag)
        | Event::MappingStart(_, _, tag) => tag.as_deref(),
        _ => None,
    }
}

/// The first refused tag of the stream `text` (any number of documents),
/// reading no further. `None` when it has none, or when the text stops being
/// YAML before one: its reader, the same parser, stops there too and says why.
///
/// One pass of the parser's events, no tree and no alias expanded: linear in
/// the text, with nesting bounded by [`MAX_NESTING`].
pub fn scan(text: &str) -> Option<RefusedTag> {
    let mut options = Options::default();
    options.flow_nesting_limit = MAX_NESTING;
    options.block_nesting_limit = MAX_NESTING;
    options.set_emit_comments(false);
    let mut parser = Parser::new_from_str_with_options(text, options);
    while let Some(Ok((event, span))) = parser.next_event() {
        if let Some(Err(refused)) = of_event(&event).map(|tag| check(tag, &span.start, text)) {
            return Some(refused);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The line and column of the refused tag, if any.
    fn refused(text: &str) -> Option<(usize, usize)> {
        scan(text).map(|r| (r.line, r.column))
    }

    #[test]
    fn core_schema_tags_and_the_non_specific_tag_pass() {
        for text in [
            "a: !!str 12\nb: !!int \"12\"\nc: !!float '1'\nd: !!bool \"true\"\ne: !!null ''\n",
            "m: !!map {k: v}\ns: !!seq [a]\nblock: !!map\n  k: v\n",
            "a: ! 12\nb: !<tag:yaml.org,2002:str> x\nc: !<tag:yaml.org,2002:seq> [x]\n",
            "!!map\nkind: ConfigMap\n",
            "--- !!map\na: b\n",
            // Quoted and block scalars, comments and plain text that only look like tags.
            "a: \"!!python/object/apply:os.system\"\nb: '!custom x'\n",
            "a: |\n  !!python/object/apply:os.system [\"id\"]\n  !custom\nb: >-\n  !!binary x\n",
            "# !!python/object/apply:os.system\na: b # !custom\n",
            "a: b!!python/name:x\nc: x !y\nd: [a!b]\n",
            "\"!!binary\": v\n'!x': y\n",
            // A %TAG directive that resolves to the core schema.
            "%TAG !e! tag:yaml.org,2002:\n---\na: !e!str 12\nb: !e!int '1'\n",
            "%TAG ! tag:yaml.org,2002:\n---\na: !str 12\n",
            "",
            "---\n---\n",
        ] {
            assert_eq!(refused(text), None, "{text:?}");
        }
    }

    #[test]
    fn other_tags_are_refused_wherever_they_are() {
        for (text, line, column) in [
            ("a: !!python/object/apply:os.system [\"id\"]\n", 1, 4),
            // In a key, a value, a flow sequence, a flow mapping, after an anchor.
            ("!!python/name:os.system k: v\n", 1, 1),
            ("a: b\nc:\n  d: !custom x\n", 3, 6),
            ("a: [x, y, !!binary aGk=]\n", 1, 11),
            ("a: {k: v, !!set x: y}\n", 1, 11),
            ("a: &anchor !!timestamp 2001-12-14\n", 1, 12),
            ("a: !!omap &o\n  - k: v\n", 1, 4),
            ("a: !custom\n\n  # a comment\n  k: v\n", 1, 4),
            ("a:\n- x\n- !local\n  k: v\n", 3, 3),
            ("? !!python/tuple [a]\n: v\n", 1, 3),
            // A document's own tag, and verbatim tags outside the core schema.
            ("--- !!python/object:x\na: b\n", 1, 5),
            ("a: !<tag:example.com,2000:x> y\n", 1, 4),
            ("a: !<tag:yaml.org,2002:binary> aGk=\n", 1, 4),
            // `%TAG` directives that give `!!` or `!e!` another meaning.
            ("%TAG !! tag:example.com,2000:\n---\na: !!str x\n", 3, 4),
            ("%TAG !e! tag:clarkevans.com,2002:\n---\na: !e!str x\n", 3, 4),
            ("%TAG !e! tag:yaml.org,2002:python/\n---\na: !e!name x\n", 3, 4),
            ("%TAG ! tag:example.com,2000:\n---\na: !str x\n", 3, 4),
            // Escaped: not found as written, so its node is named.
            ("a: !e%78 y\n", 1, 10),
        ] {
            assert_eq!(refused(text), Some((line, column)), "{text:?}");
        }
    }

    #[test]
    fn the_first_refused_tag_of_a_stream_is_named_with_its_line() {
        let stream =
            "a: !!str b\n---\nkind: ConfigMap\ndata:\n  k: !!binary x\n---\nc: !custom d\n";
        assert_eq!(scan(stream), Some(RefusedTag { line: 5, column: 6 }));
        // A directive applies to its document only: `!!` is the core schema's again after it.
        let stream = "%TAG !! tag:example.com,2000:\n---\na: b\n...\n---\nc: !!str d\n";
        assert_eq!(refused(stream), None);
    }

    #[test]
    fn text_that_stops_being_yaml_is_left_to_its_reader() {
        assert_eq!(refused("a: 'unclosed\nb: !custom x\n"), None);
        assert_eq!(refused("a: !custom x\nb: 'unclosed\n"), Some((1, 4)));
    }

    /// A hostile stream of a size: n items, or about n bytes.
    type Shape = fn(usize) -> String;

    /// CPU time of a scan of `text`, the least of three.
    fn cpu(text: &str) -> std::time::Duration {
        (0..3)
            .map(|_| {
                let before = crate::cpu_time::this_thread();
                std::hint::black_box(scan(text));
                crate::cpu_time::this_thread() - before
            })
            .min()
            .unwrap_or_default()
    }

    #[test]
    fn hostile_streams_are_scanned_in_linear_time() {
        // Each shape at n and 8n: linear time grows 8 times, quadratic 64.
        let shapes: [(&str, Shape); 5] = [
            ("core tags", |n| format!("a: [{}]\n", vec!["!!str x"; n].join(", "))),
            ("tag-like text in a quoted string", |n| format!("a: \"{}\"\n", "!!x ".repeat(n))),
            ("aliases, never expanded", |n| {
                format!("a: &a [x, x]\nb: [{}]\n", vec!["*a"; n].join(", "))
            }),
            ("nesting at the limit", |n| {
                let deep =
                    format!("{}x{}\n", "[".repeat(MAX_NESTING - 1), "]".repeat(MAX_NESTING - 1));
                vec![deep; n / 1000 + 1].join("---\n")
            }),
            ("comments and block scalars", |n| {
                "k: v # !!python/x\nb: |\n  !custom\n".repeat(n / 4 + 1)
            }),
        ];
        for (what, make) in shapes {
            let n = 10_000;
            let (small, large) = (cpu(&make(n)), cpu(&make(8 * n)));
            eprintln!("{what}: {small:?} for {n}, {large:?} for {}", 8 * n);
            let bound = small * 24 + std::time::Duration::from_millis(100);
            assert!(large < bound, "{what}: {small:?} for {n}, {large:?} for 8 times as much");
        }
        // Deeper than any reader reads: the parser stops at once.
        let deep = format!("a: {}1{}\n", "[".repeat(1_000_000), "]".repeat(1_000_000));
        assert_eq!(scan(&deep), None);
        assert!(cpu(&deep) < std::time::Duration::from_millis(500));
    }
}
