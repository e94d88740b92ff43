//! A YAML document as `configsum render` reads and writes it (docs/render.md,
//! "Strings stay strings"). What every reader reads is kept: a plain scalar is
//! written back exactly as spelled, so whatever a YAML 1.1 or 1.2 reader made
//! of it (a number, boolean, null, timestamp or string) it makes again; a
//! quoted or block scalar is a string to every reader and is written so that
//! it still is, byte for byte ([`super::scalar`]); an explicit tag of YAML's
//! core schema (`!!int "12"`, `!!str 12`) is written back with its value, and
//! any other tag is refused ([`crate::lookup::check_tag`]). Aliases are
//! expanded and merge keys (`<<`) merged, as kubectl reads them. Comments,
//! quoting styles, anchors and flow style do not survive; the data does.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use serde_json::Value;
use serde_saphyr::granit_parser::{Event, Marker, Options, Parser, ScalarStyle, Span, Tag};

use super::scalar::{self, MAX_SIMPLE_KEY, pad};
use crate::lookup::{RefusedTag, check_tag, tag_of_event};

/// One node of a document.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    /// A plain scalar as spelled (`web`, `3`, `0x1F`, `yes`, `~`, or empty):
    /// each reader resolves it as it did in the input.
    Plain(String),
    /// A string: quoted or a block scalar in the input, or written by render.
    Str(String),
    /// A node with an explicit tag of the core schema, or `!`, as written
    /// (`!!int`, `!`, `!<tag:yaml.org,2002:str>`).
    Tagged(Box<(String, Node)>),
    List(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

/// Deepest nesting of collections read: far more than any Kubernetes object,
/// and shallow enough that the recursive walks over the tree are safe.
pub const MAX_DEPTH: usize = 128;
/// Most nodes in one document, aliases expanded: a bound on alias bombs.
pub const MAX_NODES: usize = 1_000_000;

/// Why a document cannot be read; quotes no value (a duplicate key is named).
#[derive(Debug, PartialEq)]
pub struct ParseError {
    /// 1-based line and column in the text given to [`parse`].
    pub line: usize,
    pub column: usize,
    pub reason: String,
    /// Valid YAML, refused for a tag outside the core schema.
    pub refused_tag: bool,
}

impl ParseError {
    fn at(marker: &Marker, reason: impl Into<String>) -> Self {
        let (line, column) = (marker.line(), marker.col() + 1);
        ParseError { line, column, reason: reason.into(), refused_tag: false }
    }

    fn tag(refused: RefusedTag) -> Self {
        let RefusedTag { line, column, .. } = refused;
        ParseError { line, column, reason: refused.problem().to_owned(), refused_tag: true }
    }
}

/// Parses one YAML document (the text between two `---`); an empty one is an
/// empty plain scalar.
pub fn parse(text: &str) -> Result<Node, ParseError> {
    let mut options = Options::default();
    options.flow_nesting_limit = MAX_DEPTH;
    options.block_nesting_limit = MAX_DEPTH;
    options.set_emit_comments(false);
    let mut parser = Parser::new_from_str_with_options(text, options);
    let mut builder = Builder::new(text);
    while let Some(event) = parser.next_event() {
        let (event, span) =
            event.map_err(|e| ParseError::at(e.marker(), crate::lookup::scan_reason(&e)))?;
        // Every node of every document passes here, the workloads read twice too: no
        // tag outside YAML's core schema is kept, so none is written back.
        if let Some(tag) = tag_of_event(&event) {
            check_tag(tag, &span.start, text).map_err(ParseError::tag)?;
        }
        match event {
            Event::DocumentStart(..) => {
                builder.documents += 1;
                if builder.documents > 1 {
                    return Err(ParseError::at(&span.start, "more than one document"));
                }
            }
            Event::Scalar(value, style, anchor, tag) => {
                builder.scalar(value.into_owned(), style, anchor, tag.as_deref(), &span)?;
            }
            Event::SequenceStart(_, anchor, tag) => {
                builder.open(Frame::list(anchor, tag.as_deref(), span.start))?;
            }
            Event::MappingStart(_, anchor, tag) => {
                builder.open(Frame::map(anchor, tag.as_deref(), span.start))?;
            }
            Event::SequenceEnd | Event::MappingEnd => builder.close(&span)?,
            Event::Alias(id) => builder.alias(id, &span)?,
            _ => {}
        }
    }
    Ok(builder.root.unwrap_or(Node::Plain(String::new())))
}

/// Builds the tree from parser events without recursion.
struct Builder<'a> {
    text: &'a str,
    /// The text ends in a line with content and no line break (see [`Builder::scalar`]).
    ends_without_break: bool,
    /// The text's length in characters, counted on first need.
    chars: Option<usize>,
    frames: Vec<Frame>,
    root: Option<Node>,
    /// Anchored nodes by the parser's anchor id, with their node counts.
    anchors: HashMap<usize, (Node, usize)>,
    nodes: usize,
    documents: usize,
}

/// A collection being read.
struct Frame {
    items: Vec<Node>,
    /// A mapping: `items` alternate key, value.
    is_map: bool,
    /// A large mapping's keys so far; a small one's are compared one by one,
    /// which spares a copy of every key of every document.
    keys: Option<HashSet<KeyId>>,
    tag: Option<String>,
    anchor: usize,
    /// Nodes in this collection, itself included.
    count: usize,
    start: Marker,
    /// Where the pending key of a mapping is, for a duplicate's error.
    key_at: Marker,
}

impl Frame {
    fn list(anchor: usize, tag: Option<&Tag>, start: Marker) -> Self {
        Frame {
            items: Vec::new(),
            is_map: false,
            keys: None,
            tag: tag.map(tag_spelling),
            anchor,
            count: 1,
            start,
            key_at: start,
        }
    }

    fn map(anchor: usize, tag: Option<&Tag>, start: Marker) -> Self {
        Frame { is_map: true, ..Frame::list(anchor, tag, start) }
    }
}

/// A key's identity for duplicate detection: whether it is a string, and its text.
type KeyId = (bool, String);

/// Keys a mapping may have before they go into a set: comparing a few keys
/// costs less than hashing and copying them, and the set keeps a hostile
/// mapping of many keys linear.
const LINEAR_KEYS: usize = 16;

impl Frame {
    /// Whether the mapping's last item, a key about to get its value, is one it already has.
    fn is_duplicate_key(&mut self) -> bool {
        let Some((key, earlier)) = self.items.split_last() else { return false };
        let Some(id) = key_ref(key) else { return false };
        // The earlier keys are at the even positions.
        let earlier_keys = earlier.iter().step_by(2);
        if self.keys.is_none() && earlier.len() / 2 >= LINEAR_KEYS {
            let owned = |k: &Node| key_ref(k).map(|(s, t)| (s, t.to_owned()));
            self.keys = Some(earlier_keys.clone().filter_map(owned).collect());
        }
        match &mut self.keys {
            Some(keys) => !keys.insert((id.0, id.1.to_owned())),
            // Texts first: whether a plain key is a string is asked only of equal texts.
            None => earlier_keys
                .filter(|k| scalar_text(k) == Some(id.1))
                .any(|k| key_ref(k) == Some(id)),
        }
    }
}

impl<'a> Builder<'a> {
    fn new(text: &'a str) -> Self {
        let last_line = text.rsplit(['\n', '\r']).next().unwrap_or("");
        Builder {
            text,
            ends_without_break: last_line.chars().any(|c| c != ' ' && c != '\t'),
            chars: None,
            frames: Vec::new(),
            root: None,
            anchors: HashMap::new(),
            nodes: 0,
            documents: 0,
        }
    }

    fn count(&mut self, nodes: usize, at: &Marker) -> Result<(), ParseError> {
        self.nodes = self.nodes.saturating_add(nodes);
        if self.nodes > MAX_NODES {
            return Err(ParseError::at(at, "too deeply nested, too large or too many aliases"));
        }
        Ok(())
    }

    fn scalar(
        &mut self,
        mut value: String,
        style: ScalarStyle,
        anchor: usize,
        tag: Option<&Tag>,
        span: &Span,
    ) -> Result<(), ParseError> {
        self.count(1, &span.start)?;
        // The parser gives a block scalar whose last line ends the text with no
        // line break one all the same; YAML (and PyYAML, ruamel, go-yaml) has
        // none to keep, so the value must not gain one.
        if matches!(style, ScalarStyle::Literal | ScalarStyle::Folded)
            && self.ends_without_break
            && value.ends_with('\n')
            && span.end.index() == *self.chars.get_or_insert_with(|| self.text.chars().count())
        {
            value.pop();
        }
        let node = match style {
            // A plain scalar folded over an empty line holds a line break: only a string can.
            ScalarStyle::Plain if !value.contains('\n') => Node::Plain(value),
            _ => Node::Str(value),
        };
        let node = tagged(node, tag.map(tag_spelling));
        if anchor != 0 {
            self.anchor(anchor, &node, 1, &span.start)?;
        }
        self.attach(node, 1, &span.start)
    }

    fn open(&mut self, frame: Frame) -> Result<(), ParseError> {
        self.count(1, &frame.start)?;
        if self.frames.len() >= MAX_DEPTH {
            return Err(ParseError::at(&frame.start, "too deeply nested"));
        }
        self.frames.push(frame);
        Ok(())
    }

    fn close(&mut self, span: &Span) -> Result<(), ParseError> {
        let Some(frame) = self.frames.pop() else {
            return Err(ParseError::at(&span.start, "unbalanced collection"));
        };
        let node = if frame.is_map {
            let mut entries = Vec::with_capacity(frame.items.len() / 2);
            let mut items = frame.items.into_iter();
            while let (Some(key), Some(value)) = (items.next(), items.next()) {
                entries.push((key, value));
            }
            Node::Map(merge(entries).map_err(|reason| ParseError::at(&frame.start, reason))?)
        } else {
            Node::List(frame.items)
        };
        let node = tagged(node, frame.tag);
        if frame.anchor != 0 {
            self.anchor(frame.anchor, &node, frame.count, &frame.start)?;
        }
        self.attach(node, frame.count, &frame.start)
    }

    /// Keeps a copy of an anchored node for its aliases. The copy counts
    /// against the budget too: anchors nested over a large node would
    /// otherwise copy it once per level.
    fn anchor(
        &mut self,
        id: usize,
        node: &Node,
        count: usize,
        at: &Marker,
    ) -> Result<(), ParseError> {
        self.count(count, at)?;
        self.anchors.insert(id, (node.clone(), count));
        Ok(())
    }

    fn alias(&mut self, id: usize, span: &Span) -> Result<(), ParseError> {
        // An anchor whose node is still open: the alias would contain itself.
        let Some(count) = self.anchors.get(&id).map(|(_, count)| *count) else {
            return Err(ParseError::at(&span.start, "alias to a node that contains it"));
        };
        // Counted before the copy is made: an alias bomb stops here.
        self.count(count, &span.start)?;
        let node = self.anchors.get(&id).map(|(node, _)| node.clone()).unwrap_or_default();
        self.attach(node, count, &span.start)
    }

    fn attach(&mut self, node: Node, count: usize, at: &Marker) -> Result<(), ParseError> {
        let Some(frame) = self.frames.last_mut() else {
            if self.root.is_some() {
                return Err(ParseError::at(at, "more than one document"));
            }
            self.root = Some(node);
            return Ok(());
        };
        frame.count += count;
        if frame.is_map {
            if frame.items.len() % 2 == 0 {
                frame.key_at = *at;
            } else if frame.is_duplicate_key() {
                let key = frame.items.last().map(key_label).unwrap_or_default();
                return Err(ParseError::at(&frame.key_at, format!("duplicate key {key}")));
            }
        }
        frame.items.push(node);
        Ok(())
    }
}

fn tagged(node: Node, tag: Option<String>) -> Node {
    match tag {
        Some(tag) => Node::Tagged(Box::new((tag, node))),
        None => node,
    }
}

/// A merge key: `<<`, plain and untagged.
fn is_merge_key(key: &Node) -> bool {
    matches!(key, Node::Plain(k) if k == "<<")
}

/// Identity of a scalar key: a string key and a plain key that YAML might
/// read otherwise (`1`, `true`) are different keys. Merge keys are not checked.
fn key_ref(key: &Node) -> Option<(bool, &str)> {
    match key {
        _ if is_merge_key(key) => None,
        Node::Plain(s) => Some((scalar::plain_is_safe(s), s)),
        Node::Str(s) => Some((true, s)),
        Node::Tagged(tagged) => match tagged.as_ref() {
            (tag, Node::Plain(s) | Node::Str(s)) if is_string_tag(tag) => Some((true, s)),
            _ => None,
        },
        Node::List(_) | Node::Map(_) => None,
    }
}

fn key_id(key: &Node) -> Option<KeyId> {
    key_ref(key).map(|(string, text)| (string, text.to_owned()))
}

/// The text of a scalar, tagged or not.
fn scalar_text(node: &Node) -> Option<&str> {
    match node {
        Node::Plain(s) | Node::Str(s) => Some(s),
        Node::Tagged(tagged) => match &tagged.1 {
            Node::Plain(s) | Node::Str(s) => Some(s),
            _ => None,
        },
        Node::List(_) | Node::Map(_) => None,
    }
}

/// A key for an error message: its text, escaped and cut short. Keys name
/// things; values are never shown.
fn key_label(key: &Node) -> String {
    let text = match key {
        Node::Plain(s) | Node::Str(s) => s.as_str(),
        Node::Tagged(tagged) => match &tagged.1 {
            Node::Plain(s) | Node::Str(s) => s.as_str(),
            _ => "",
        },
        Node::List(_) | Node::Map(_) => "",
    };
    let mut label: String = text.chars().take(64).collect();
    if label.len() < text.len() {
        label.push('…');
    }
    format!("\"{}\"", label.escape_debug())
}

/// Resolves the merge keys of a mapping as YAML 1.1 readers and kubectl do:
/// the entries of the merged mapping (or of each mapping of a merged list, the
/// first one winning) that the mapping does not set itself, in place of `<<`.
fn merge(entries: Vec<(Node, Node)>) -> Result<Vec<(Node, Node)>, &'static str> {
    if !entries.iter().any(|(key, _)| is_merge_key(key)) {
        return Ok(entries);
    }
    let mut seen: HashSet<KeyId> = entries.iter().filter_map(|(key, _)| key_id(key)).collect();
    let mut merged = Vec::with_capacity(entries.len());
    for (key, value) in entries {
        if !is_merge_key(&key) {
            merged.push((key, value));
            continue;
        }
        let sources = match value {
            Node::Map(entries) => vec![entries],
            Node::List(items) => items
                .into_iter()
                .map(|item| match item {
                    Node::Map(entries) => Ok(entries),
                    _ => Err("a merge key's list holds something other than mappings"),
                })
                .collect::<Result<_, _>>()?,
            _ => return Err("a merge key's value is not a mapping"),
        };
        for (key, value) in sources.into_iter().flatten() {
            if key_id(&key).is_none_or(|id| seen.insert(id)) {
                merged.push((key, value));
            }
        }
    }
    Ok(merged)
}

/// `!!str`, and `!` (the non-specific tag): the value is a string, whatever it looks like.
fn is_string_tag(tag: &str) -> bool {
    tag == "!!str" || tag == "!"
}

/// How a tag is written back: `!!type`, however the input spelled it
/// (`!<tag:yaml.org,2002:str>`, a `%TAG` handle), or the non-specific `!`.
/// No other tag gets this far ([`check_tag`]); were one to, it would be `!`.
fn tag_spelling(tag: &Tag) -> String {
    match tag.core_suffix() {
        Some(core) => format!("!!{core}"),
        None => "!".to_owned(),
    }
}

impl Default for Node {
    /// An empty plain scalar: a null.
    fn default() -> Self {
        Node::Plain(String::new())
    }
}

impl Node {
    /// The value of `key` in a mapping.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match self.untagged() {
            Node::Map(entries) => {
                entries.iter().find(|(k, _)| k.as_str() == Some(key)).map(|e| &e.1)
            }
            _ => None,
        }
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut Node> {
        match self.untagged_mut() {
            Node::Map(entries) => {
                entries.iter_mut().find(|(k, _)| k.as_str() == Some(key)).map(|e| &mut e.1)
            }
            _ => None,
        }
    }

    /// The node itself, or under a tag that only restates its type (`!!map`,
    /// `!!seq`, `!!str`, `!`).
    fn untagged(&self) -> &Node {
        match self {
            Node::Tagged(tagged) if restates_type(&tagged.0, &tagged.1) => &tagged.1,
            other => other,
        }
    }

    fn untagged_mut(&mut self) -> &mut Node {
        if matches!(self, Node::Tagged(tagged) if restates_type(&tagged.0, &tagged.1)) {
            if let Node::Tagged(tagged) = self {
                return &mut tagged.1;
            }
        }
        self
    }

    /// The text of a string scalar, as the core reads it (a plain scalar YAML
    /// reads as a number, boolean or null is none).
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Node::Tagged(tagged) if is_string_tag(&tagged.0) => match &tagged.1 {
                Node::Plain(s) | Node::Str(s) => Some(s),
                _ => None,
            },
            Node::Str(s) => Some(s),
            Node::Plain(s) if plain_json(s).is_string() => Some(s),
            _ => None,
        }
    }

    /// The node as JSON, for the core: plain scalars and tagged ones become
    /// what YAML reads them as, as for `--objects-from`.
    pub fn to_json(&self) -> Value {
        match self {
            Node::Str(s) => Value::String(s.clone()),
            Node::Plain(s) => plain_json(s),
            Node::Tagged(tagged) => match tagged.as_ref() {
                (tag, Node::Plain(s) | Node::Str(s)) if is_string_tag(tag) => {
                    Value::String(s.clone())
                }
                (tag, inner) if restates_type(tag, inner) => inner.to_json(),
                (_, inner @ (Node::List(_) | Node::Map(_))) => inner.to_json(),
                _ => {
                    let mut text = String::from("v:");
                    write_value(&mut text, self, 0);
                    serde_saphyr::from_str::<Value>(&text)
                        .ok()
                        .and_then(|mut v| v.get_mut("v").map(Value::take))
                        .unwrap_or_else(|| Value::String(tagged.1.text().to_owned()))
                }
            },
            Node::List(items) => Value::Array(items.iter().map(Node::to_json).collect()),
            Node::Map(entries) => {
                Value::Object(entries.iter().map(|(k, v)| (k.key_text(), v.to_json())).collect())
            }
        }
    }

    /// A scalar's text; empty for a collection.
    fn text(&self) -> &str {
        match self {
            Node::Plain(s) | Node::Str(s) => s,
            Node::Tagged(tagged) => tagged.1.text(),
            Node::List(_) | Node::Map(_) => "",
        }
    }

    fn key_text(&self) -> String {
        match self {
            Node::List(_) | Node::Map(_) => self.to_json().to_string(),
            Node::Plain(s) if s.is_empty() || s == "~" => "null".to_owned(),
            other => other.text().to_owned(),
        }
    }

    /// Sets the string at the path `tokens` (a JSON Patch `add` of a string
    /// or an empty object), creating the mappings on the way.
    pub fn set(&mut self, tokens: &[String], value: Node) {
        let Some((last, parents)) = tokens.split_last() else { return };
        let mut node = self;
        for token in parents {
            if node.get(token).is_none() {
                if let Node::Map(entries) = node.untagged_mut() {
                    entries.push((Node::Str(token.clone()), Node::Map(Vec::new())));
                }
            }
            match node.get_mut(token) {
                Some(child) if matches!(child.untagged(), Node::Map(_)) => node = child,
                Some(child) => {
                    *child = Node::Map(Vec::new());
                    node = child;
                }
                None => return,
            }
        }
        if let Node::Map(entries) = node.untagged_mut() {
            match entries.iter_mut().find(|(k, _)| k.as_str() == Some(last.as_str())) {
                // `add` of `{}` on an existing map (metadata, annotations) keeps it.
                Some((_, existing))
                    if matches!(value, Node::Map(_))
                        && matches!(existing.untagged(), Node::Map(_)) => {}
                Some((_, existing)) => *existing = value,
                None => entries.push((Node::Str(last.clone()), value)),
            }
        }
    }

    /// Removes the entry at the path `tokens`, if it exists.
    pub fn remove(&mut self, tokens: &[String]) {
        let Some((last, parents)) = tokens.split_last() else { return };
        let mut node = self;
        for token in parents {
            match node.get_mut(token) {
                Some(child) => node = child,
                None => return,
            }
        }
        if let Node::Map(entries) = node.untagged_mut() {
            entries.retain(|(k, _)| k.as_str() != Some(last.as_str()));
        }
    }

    /// The document as block YAML.
    pub fn to_yaml(&self) -> String {
        let mut out = String::new();
        self.write_yaml(&mut out);
        out
    }

    /// [`Self::to_yaml`], appended to `out`.
    pub fn write_yaml(&self, out: &mut String) {
        match self {
            Node::Map(entries) if !entries.is_empty() => write_map(out, entries, 0),
            Node::List(items) if !items.is_empty() => write_list(out, items, 0),
            other => {
                // A document that is a scalar or a tagged node: as a value at column 0.
                let mut line = String::new();
                write_value(&mut line, other, 0);
                let line = line.strip_prefix(' ').unwrap_or(&line);
                out.push_str(if line.is_empty() || line == "\n" { "null\n" } else { line });
            }
        }
    }
}

fn restates_type(tag: &str, node: &Node) -> bool {
    match node {
        Node::Map(_) => tag == "!!map",
        Node::List(_) => tag == "!!seq",
        Node::Plain(_) | Node::Str(_) => is_string_tag(tag),
        Node::Tagged(_) => false,
    }
}

/// A plain scalar as the project's reader reads it (as `--objects-from` and
/// the API server do): a string unless YAML reads it as something else.
fn plain_json(s: &str) -> Value {
    if scalar::plain_is_safe(s) {
        return Value::String(s.to_owned());
    }
    if s.is_empty() {
        return Value::Null;
    }
    if let Some(value) = common_plain_json(s) {
        return value;
    }
    serde_saphyr::from_str::<Value>(s).unwrap_or_else(|_| Value::String(s.to_owned()))
}

/// The plain scalars workloads are full of, read without starting a YAML
/// parser for each (which took a tenth of render's time): decimal integers
/// (`3`, `8080`), `true` and `false`, and quantities such as `500m` or `256Mi`
/// (digits then letters: no YAML type has that shape but hexadecimal, octal
/// and binary integers, which start with `0` and a letter).
fn common_plain_json(s: &str) -> Option<Value> {
    match s {
        "true" => return Some(Value::Bool(true)),
        "false" => return Some(Value::Bool(false)),
        _ => {}
    }
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let (number, letters) = s.split_at(digits);
    if digits == 0 || (number.starts_with('0') && digits > 1) {
        return None;
    }
    if letters.is_empty() {
        // Up to 18 digits fit an i64 whatever they are.
        return (digits <= 18).then(|| number.parse::<i64>().ok().map(Value::from)).flatten();
    }
    let quantity = letters.bytes().all(|b| b.is_ascii_alphabetic()) && !number.starts_with('0');
    quantity.then(|| Value::String(s.to_owned()))
}

/// Writes `key` (see [`write_inline_key`]) straight into `out`, which has just had
/// the key's indentation and, in a list, `- `. Returns the key's text instead
/// when it is too long for an implicit key (removed from `out`).
fn write_simple_key(out: &mut String, key: &Node, indent: usize) -> Option<String> {
    let start = out.len();
    write_inline_key(out, key, indent);
    if out.len() - start > MAX_SIMPLE_KEY {
        return Some(out.split_off(start));
    }
    None
}

fn write_map(out: &mut String, entries: &[(Node, Node)], indent: usize) {
    for (key, value) in entries {
        pad(out, indent);
        if let Some(key_text) = write_simple_key(out, key, indent) {
            // Too long for an implicit key: an explicit `? key`, then `: value`.
            out.push_str("? ");
            out.push_str(&key_text);
            out.push('\n');
            pad(out, indent);
        }
        out.push(':');
        write_value(out, value, indent);
    }
}

fn write_list(out: &mut String, items: &[Node], indent: usize) {
    for item in items {
        pad(out, indent);
        out.push('-');
        match item {
            Node::Map(entries) if !entries.is_empty() => {
                let (first, rest) = entries.split_at(1);
                let (key, value) = &first[0];
                out.push(' ');
                if write_simple_key(out, key, indent + 2).is_some() {
                    // Dropped: the whole mapping goes under the dash, this key as `? key`.
                    out.pop();
                    out.push('\n');
                    write_map(out, entries, indent + 2);
                } else {
                    // The first entry on the dash's line, the rest under it.
                    out.push(':');
                    write_value(out, value, indent + 2);
                    write_map(out, rest, indent + 2);
                }
            }
            Node::List(inner) if !inner.is_empty() => {
                out.push('\n');
                write_list(out, inner, indent + 2);
            }
            other => write_value(out, other, indent),
        }
    }
}

/// What follows `key:` or `-` whose key or dash is at column `indent`.
fn write_value(out: &mut String, value: &Node, indent: usize) {
    match value {
        Node::Map(entries) if !entries.is_empty() => {
            out.push('\n');
            write_map(out, entries, indent + 2);
        }
        Node::List(items) if !items.is_empty() => {
            out.push('\n');
            write_list(out, items, indent);
        }
        Node::Map(_) => out.push_str(" {}\n"),
        Node::List(_) => out.push_str(" []\n"),
        // Empty: a null, as it was written.
        Node::Plain(s) if s.is_empty() => out.push('\n'),
        Node::Plain(s) => {
            out.push(' ');
            out.push_str(s);
            out.push('\n');
        }
        Node::Str(s) => scalar::write_value_string(out, s, indent),
        Node::Tagged(tagged) => {
            let (tag, inner) = tagged.as_ref();
            out.push(' ');
            out.push_str(tag);
            match inner {
                Node::Map(entries) if !entries.is_empty() => {
                    out.push('\n');
                    write_map(out, entries, indent + 2);
                }
                Node::List(items) if !items.is_empty() => {
                    out.push('\n');
                    write_list(out, items, indent + 2);
                }
                other => write_value(out, other, indent),
            }
        }
    }
}

/// A key on one line. A plain key is kept as spelled unless it would read as
/// a document marker at column 0 (only strings can look like one).
fn write_inline_key(out: &mut String, key: &Node, indent: usize) {
    match key {
        Node::Plain(s) if s.is_empty() => out.push_str("null"),
        Node::Plain(s) if indent == 0 && (s.starts_with("---") || s.starts_with("...")) => {
            scalar::double_quoted(out, s);
        }
        Node::Plain(s) => out.push_str(s),
        Node::Str(s) => scalar::inline_string(out, s),
        Node::Tagged(tagged) => {
            let (tag, inner) = tagged.as_ref();
            out.push_str(tag);
            out.push(' ');
            write_inline_key(out, inner, 1);
        }
        Node::List(_) | Node::Map(_) => write_flow(out, key),
    }
}

/// A collection on one line, for a complex key: strings double-quoted, as
/// flow context gives `,[]{}` a meaning.
fn write_flow(out: &mut String, node: &Node) {
    match node {
        Node::Map(entries) => {
            out.push('{');
            for (i, (k, v)) in entries.iter().enumerate() {
                out.push_str(if i == 0 { "" } else { ", " });
                write_flow(out, k);
                out.push_str(": ");
                write_flow(out, v);
            }
            out.push('}');
        }
        Node::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                out.push_str(if i == 0 { "" } else { ", " });
                write_flow(out, item);
            }
            out.push(']');
        }
        Node::Plain(s) if s.is_empty() => out.push_str("null"),
        Node::Plain(s) if !s.contains([',', '[', ']', '{', '}']) => out.push_str(s),
        Node::Plain(s) | Node::Str(s) => scalar::double_quoted(out, s),
        Node::Tagged(tagged) => {
            let _ = write!(out, "{} ", tagged.0);
            write_flow(out, &tagged.1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written, read back and written again: the same text and the same data.
    fn round_trip(node: &Node) -> String {
        let written = node.to_yaml();
        let again = parse(&written).unwrap_or_else(|e| panic!("{e:?} in:\n{written}"));
        assert_eq!(again.to_json(), node.to_json(), "written:\n{written}");
        assert_eq!(again.to_yaml(), written, "stable");
        written
    }

    #[test]
    fn scalars_keep_their_string_ness_through_a_round_trip() {
        let text = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: c, labels: {app: web}}
data:
  quoted-true: "true"
  mode: "0755"
  time: "12:30:45"
  date: '2001-12-14'
  looks-like-a-number: "72e40602"
  plain-hex: 0x1F
  plain-date: 2001-12-14
  count: 3
  flag: yes
  nothing: ~
  empty: ""
  "2001-12-14": date-like key
  script: |
    #!/bin/sh
    echo "hi: there"
  folded: >-
    one
    two
list: [a, "1", 2, {k: v}, [x]]
empty-map: {}
empty-list: []
"#;
        let node = parse(text).expect("parses");
        let written = round_trip(&node);
        let data = node.get("data").expect("data");
        assert_eq!(data.get("quoted-true"), Some(&Node::Str("true".into())));
        assert_eq!(data.get("mode"), Some(&Node::Str("0755".into())));
        assert_eq!(data.get("plain-hex"), Some(&Node::Plain("0x1F".into())));
        assert_eq!(data.get("flag"), Some(&Node::Plain("yes".into())));
        for line in [
            "  quoted-true: \"true\"\n",
            "  date: \"2001-12-14\"\n",
            "  \"2001-12-14\": date-like key\n",
            "  plain-hex: 0x1F\n",
            "  plain-date: 2001-12-14\n",
            "  nothing: ~\n",
            "  script: |\n    #!/bin/sh\n    echo \"hi: there\"\n",
            "kind: ConfigMap\n",
        ] {
            assert!(written.contains(line), "{line:?} in:\n{written}");
        }
        let json = node.to_json();
        assert_eq!(json["data"]["count"], 3);
        assert_eq!(json["data"]["flag"], true);
        assert_eq!(json["data"]["nothing"], Value::Null);
        assert_eq!(json["data"]["looks-like-a-number"], "72e40602");
        assert_eq!(json["data"]["plain-date"], "2001-12-14");
        assert_eq!(json["data"]["script"], "#!/bin/sh\necho \"hi: there\"\n");
        assert_eq!(json["data"]["folded"], "one two");
    }

    #[test]
    fn a_block_scalar_that_ends_the_text_gains_no_line_break() {
        for (text, value) in [
            ("a: |\n  foo", "foo"),
            ("a: |+\n  foo", "foo"),
            ("a: >\n  foo\n  bar", "foo bar"),
            ("a: |\n  foo   ", "foo   "),
            ("- |\n  foo", "foo"),
            // A last line of spaces only is no content: the break before it stays.
            ("a: |+\n  foo\n  ", "foo\n"),
            ("a: |\n  foo\n", "foo\n"),
            ("a: |\n  foo\r", "foo\n"),
        ] {
            let node = parse(text).expect("parses");
            let json = node.to_json();
            let read = json.get("a").unwrap_or(&json[0]);
            assert_eq!(read, value, "for {text:?}");
            round_trip(&node);
        }
    }

    #[test]
    fn core_schema_tags_are_written_back() {
        let text = "a: !!int \"12\"\nb: !!str 12\nc: !!bool \"true\"\nd: !!float '1'\n\
                    e: !!null ''\nf: ! 12\nh: !!map {k: v}\ni: !<tag:yaml.org,2002:str> y\n\
                    j: !!seq [x]\n";
        let node = parse(text).expect("parses");
        let written = round_trip(&node);
        for line in [
            "a: !!int \"12\"\n",
            "b: !!str 12\n",
            "c: !!bool \"true\"\n",
            "d: !!float \"1\"\n",
            "e: !!null \"\"\n",
            "f: ! 12\n",
            "h: !!map\n  k: v\n",
            "i: !!str y\n",
            "j: !!seq\n  - x\n",
        ] {
            assert!(written.contains(line), "{line:?} in:\n{written}");
        }
        let json = node.to_json();
        assert_eq!(json["a"], 12);
        assert_eq!(json["b"], "12");
        assert_eq!(json["c"], true);
        assert_eq!(json["f"], "12");
        assert_eq!(node.get("h").and_then(|h| h.get("k")).and_then(Node::as_str), Some("v"));
    }

    #[test]
    fn tags_outside_the_core_schema_are_refused_where_they_are() {
        for (text, line, column) in [
            ("a: b\nc: !!python/object/apply:os.system [id]\n", 2, 4),
            ("a: !!binary aGk=\n", 1, 4),
            ("a:\n  b: !custom\n    x: 1\n", 2, 6),
            ("a: [!<tag:example.com,2000:x> y]\n", 1, 5),
            // An anchored node's tag is refused once, before any alias copies it.
            ("a: &x !!set {k: ~}\nb: *x\n", 1, 7),
        ] {
            let error = parse(text).map(|_| ()).expect_err(text);
            let expected = "tag outside YAML's core schema".to_owned();
            assert_eq!(
                (error.reason, error.line, error.column),
                (expected, line, column),
                "{text}"
            );
            assert!(error.refused_tag);
        }
        assert!(!parse("a: 'open\n").map(|_| ()).expect_err("not YAML").refused_tag);
    }

    #[test]
    fn aliases_are_expanded_and_merge_keys_merged() {
        let text = "base: &b {x: 1, y: 2}\nmerged: {<<: *b, y: 3}\nlist: [*b]\n\
                    many: {<<: [{p: 1}, {p: 2, q: 2}]}\n";
        let node = parse(text).expect("parses");
        let json = node.to_json();
        assert_eq!(json["merged"], serde_json::json!({"x": 1, "y": 3}));
        assert_eq!(json["list"][0], serde_json::json!({"x": 1, "y": 2}));
        assert_eq!(json["many"], serde_json::json!({"p": 1, "q": 2}));
        round_trip(&node);
    }

    #[test]
    fn hostile_documents_are_refused_and_duplicate_keys_named() {
        let error = |text: &str| parse(text).err().map(|e| e.reason).unwrap_or_default();
        assert_eq!(error("a: 1\nsecret: x\nsecret: y\n"), "duplicate key \"secret\"");
        assert_eq!(parse("a: 1\n\"a\": 2\n").map(|_| ()).err().map(|e| e.line), Some(2));
        assert!(parse("a: 1\n'1': 2\n1: 3\n").is_ok(), "a string and an int are different keys");
        let deep = format!("{}1{}", "[".repeat(10_000), "]".repeat(10_000));
        assert_eq!(error(&deep), "too deeply nested");
        let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let aliases = vec![format!("*a{}", i - 1); 10].join(", ");
            bomb.push_str(&format!("a{i}: &a{i} [{aliases}]\n"));
        }
        assert_eq!(error(&bomb), "too deeply nested, too large or too many aliases");
        // Anchors nested over a large node: each one's copy counts.
        let items = vec!["x"; 20_000].join(", ");
        let nested = format!("{}[{items}]{}", "&a [".repeat(100), "]".repeat(100));
        let before = crate::cpu_time::this_thread();
        assert_eq!(error(&nested), "too deeply nested, too large or too many aliases");
        let cpu = crate::cpu_time::this_thread() - before;
        assert!(cpu < std::time::Duration::from_secs(1), "{cpu:?} of CPU time");
    }

    #[test]
    fn common_plain_scalars_read_as_yaml_reads_them() {
        let mut samples: Vec<String> = ["0", "00", "007", "1", "10", "8080", "999999999999999999"]
            .iter()
            .chain(&["9999999999999999999", "true", "false", "True", "1.5", "1_000", "+1", "-1"])
            .map(|s| (*s).to_owned())
            .collect();
        for number in ["0", "1", "12", "0755", "100"] {
            for letters in ["m", "Mi", "Gi", "k", "e", "E", "x", "xff", "o", "o17", "b", "b1"] {
                samples.push(format!("{number}{letters}"));
            }
            for tail in ["e3", "E+2", "e-1", ".5", ":30", "x1F", "o17", "b101", "h30m", "-01"] {
                samples.push(format!("{number}{tail}"));
            }
        }
        for s in &samples {
            let parsed =
                serde_saphyr::from_str::<Value>(s).unwrap_or_else(|_| Value::String(s.clone()));
            if let Some(fast) = common_plain_json(s) {
                assert_eq!(fast, parsed, "{s:?}");
            }
            assert_eq!(plain_json(s), parsed, "{s:?}");
        }
    }

    #[test]
    fn set_and_remove_follow_json_patch_paths() {
        let mut node = parse("spec: {template: {spec: {}}}").expect("parses");
        let path = |p: &str| p.split('/').skip(1).map(str::to_owned).collect::<Vec<_>>();
        node.set(&path("/spec/template/metadata"), Node::Map(Vec::new()));
        node.set(&path("/spec/template/metadata/annotations"), Node::Map(Vec::new()));
        node.set(&path("/spec/template/metadata/annotations/a.b~1c"), Node::Str("x".into()));
        node.set(&path("/spec/template/metadata/annotations/keep"), Node::Str("1".into()));
        node.remove(&path("/spec/template/metadata/annotations/keep"));
        let json = node.to_json();
        assert_eq!(
            json["spec"]["template"]["metadata"]["annotations"],
            serde_json::json!({"a.b~1c": "x"})
        );
    }
}
