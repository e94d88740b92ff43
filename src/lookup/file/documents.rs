//! A YAML stream's documents by line, before (or without) parsing: where each
//! starts, and which object an unreadable one describes, so an error can
//! name the document and the object and still quote no value.

/// The texts of the stream's documents, each with the line it starts on. A
/// line starting `---` opens a new document (a leading one opens the first); a
/// line `...` closes one. Comments and blank lines before the first marker are
/// not a document.
pub fn split(text: &str) -> Vec<(usize, &str)> {
    each(text).collect()
}

/// [`split`], one document at a time: a reader that needs only the first
/// few documents of a large stream stops there.
pub fn each(text: &str) -> Documents<'_> {
    Documents {
        text,
        lines: text.split_inclusive('\n').enumerate(),
        start: 0,
        start_line: 1,
        offset: 0,
        seen_marker: false,
        ended: false,
    }
}

/// The documents of a stream, from [`each`].
pub struct Documents<'a> {
    text: &'a str,
    lines: std::iter::Enumerate<std::str::SplitInclusive<'a, char>>,
    /// Where the current document starts: byte offset and line.
    start: usize,
    start_line: usize,
    /// Where the next line starts.
    offset: usize,
    seen_marker: bool,
    /// The last document has been given.
    ended: bool,
}

impl<'a> Iterator for Documents<'a> {
    type Item = (usize, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        for (number, line) in self.lines.by_ref() {
            let bare = line.trim_end_matches(['\n', '\r']);
            let is_marker = bare == "---" || bare.starts_with("--- ") || bare == "...";
            let offset = self.offset;
            self.offset += line.len();
            if !is_marker {
                continue;
            }
            let chunk = &self.text[self.start..offset];
            let found =
                (self.seen_marker || has_content(chunk)).then_some((self.start_line, chunk));
            self.seen_marker = bare != "...";
            // `--- {a: b}`: the content after the marker belongs to the new document.
            (self.start, self.start_line) = if bare.starts_with("--- ") {
                (offset + 4, number + 1)
            } else {
                (offset + line.len(), number + 2)
            };
            if found.is_some() {
                return found;
            }
        }
        if self.ended {
            return None;
        }
        self.ended = true;
        let last = &self.text[self.start..];
        (self.seen_marker || has_content(last)).then_some((self.start_line, last))
    }
}

/// Whether `text` holds more than comments, blank lines and directives: the
/// `%YAML` and `%TAG` lines before a `---` belong to the document it opens,
/// not to one of their own (no content starts a line with `%`).
fn has_content(text: &str) -> bool {
    text.lines().any(|l| {
        let trimmed = l.trim();
        !trimmed.is_empty() && !trimmed.starts_with('#') && !l.starts_with('%')
    })
}

/// The document holding `line` (1-based, in the whole stream): its 1-based
/// number, and the object it describes as far as its lines before `line`
/// tell ([`Object::describe`]).
pub fn object_at(text: &str, line: usize) -> Option<(usize, Object)> {
    let documents = split(text);
    let index = documents.iter().rposition(|(first, _)| *first <= line)?;
    let (first, document) = documents[index];
    Some((index + 1, Object::scan(document, line - first)))
}

/// The object a document describes as far as its lines before `line`
/// (1-based, in the document) tell: `Kind namespace/name`, `Kind`, or empty.
pub fn describe_before(document: &str, line: usize) -> String {
    Object::scan(document, line.saturating_sub(1)).describe()
}

/// Kind, namespace and name, each kept only when shaped like one (a kind is
/// a word, a name or namespace uses the characters Kubernetes names use), so
/// nothing else from the file is ever shown.
#[derive(Debug, Default, PartialEq)]
pub struct Object {
    pub kind: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

impl Object {
    /// A light scan of the first `lines` lines of a document: a top-level
    /// `kind:`, and `name:`/`namespace:` directly under a top-level
    /// `metadata:` (block or one-line flow). Each line is read on its own,
    /// so the broken line and anything after it are never looked at.
    fn scan(document: &str, lines: usize) -> Object {
        let mut object = Object::default();
        let mut in_metadata = false;
        let mut child_indent = None;
        for line in document.lines().take(lines) {
            let content = line.trim_start_matches(' ');
            let indent = line.len() - content.len();
            if content.is_empty() || content.starts_with('#') {
                continue;
            }
            if indent == 0 {
                in_metadata = content.split(" #").next().map(str::trim_end) == Some("metadata:");
                child_indent = None;
                if content.starts_with("kind:") {
                    object.kind = field(line, &["kind"]).filter(|k| is_kind(k));
                } else if content.starts_with("metadata:") && !in_metadata {
                    object.name = field(line, &["metadata", "name"]).filter(|n| is_name(n));
                    object.namespace =
                        field(line, &["metadata", "namespace"]).filter(|n| is_name(n));
                }
            } else if in_metadata && *child_indent.get_or_insert(indent) == indent {
                if content.starts_with("name:") {
                    object.name = field(content, &["name"]).filter(|n| is_name(n));
                } else if content.starts_with("namespace:") {
                    object.namespace = field(content, &["namespace"]).filter(|n| is_name(n));
                }
            }
        }
        object
    }

    /// `Kind namespace/name`, `Kind name`, `Kind`, or empty.
    pub fn describe(&self) -> String {
        let name = match (&self.namespace, &self.name) {
            (Some(namespace), Some(name)) => format!("{namespace}/{name}"),
            (None, Some(name)) => name.clone(),
            _ => String::new(),
        };
        match &self.kind {
            Some(kind) if name.is_empty() => kind.clone(),
            Some(kind) => format!("{kind} {name}"),
            None if name.is_empty() => String::new(),
            None => format!("object {name}"),
        }
    }
}

/// The string at `path` in one line read as YAML on its own.
fn field(line: &str, path: &[&str]) -> Option<String> {
    let mut value: serde_json::Value = serde_saphyr::from_str(line).ok()?;
    for key in path {
        value = value.get_mut(*key)?.take();
    }
    value.as_str().map(str::to_owned)
}

fn is_kind(s: &str) -> bool {
    s.len() <= 63
        && s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars().all(|c| c.is_ascii_alphanumeric())
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.chars().all(|c| c.is_ascii_alphanumeric() || "-._:@".contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_streams_as_yaml_does() {
        assert_eq!(split("a: 1\n---\nb: 2\n"), vec![(1, "a: 1\n"), (3, "b: 2\n")]);
        assert_eq!(
            split("---\n# Source: x\na: 1\n---\n---\nb: 2"),
            vec![(2, "# Source: x\na: 1\n"), (5, ""), (6, "b: 2")]
        );
        assert_eq!(split("# only a comment\n---\na: 1\n"), vec![(3, "a: 1\n")]);
        assert_eq!(split("--- {a: 1}\n"), vec![(1, "{a: 1}\n")]);
        assert_eq!(split("a: 1\n...\n"), vec![(1, "a: 1\n")]);
        assert_eq!(split("a: |\n  ---\n  x\n"), vec![(1, "a: |\n  ---\n  x\n")]);
        // Directives are no document of their own.
        assert_eq!(split("%TAG !e! tag:x,2000:\n---\na: 1\n"), vec![(3, "a: 1\n")]);
        assert_eq!(split("a: 1\n...\n%YAML 1.2\n---\nb: 2\n"), vec![(1, "a: 1\n"), (5, "b: 2\n")]);
    }

    #[test]
    fn the_object_is_read_from_the_lines_before_the_error_only() {
        let text = "kind: ConfigMap\nmetadata: {name: c}\n---\n# c\nkind: Secret\nmetadata:\n  \
                    labels: {name: no}\n  namespace: \"team-a\"\n  name: db # the database\n\
                    stringData:\n  name: S3CR3T\n  password: 'S3CR3T\n";
        let object = |line| object_at(text, line).map(|(n, o)| (n, o.describe()));
        assert_eq!(object(2), Some((1, "ConfigMap".to_owned())));
        assert_eq!(object(3), Some((1, "ConfigMap c".to_owned())));
        assert_eq!(object(9), Some((2, "Secret".to_owned())));
        assert_eq!(object(12), Some((2, "Secret team-a/db".to_owned())));
        // Not a kind or a name in shape: not shown.
        let odd = "kind: 'Secret: S3CR3T'\nmetadata: {name: 'a b S3CR3T'}\nx: [\n";
        assert_eq!(object_at(odd, 3), Some((1, Object::default())));
    }
}
