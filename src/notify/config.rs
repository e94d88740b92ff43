//! The notify file (`--notify-config`, YAML or JSON): the targets, each a name, a URL, a
//! format and the notices it wants. The file is a credential — webhook URLs carry tokens —
//! so no error and no `Debug` ever shows a URL: a target is named by its `name`.

use std::collections::BTreeSet;
use std::fmt;

use serde_json::Value;

use super::format::Format;
use super::notice::NoticeKind;

/// A target's name: the metric's `target` label and what logs and errors call it.
const MAX_NAME_CHARS: usize = 63;
/// More targets than anyone posts to; each has its own queue and task.
const MAX_TARGETS: usize = 32;

/// One webhook target.
#[derive(Clone, PartialEq, Eq)]
pub struct Target {
    pub name: String,
    /// `http` or `https`, with a host: checked at start-up.
    pub url: hyper::Uri,
    pub format: Format,
    /// The notices it wants; every kind when the file names none.
    pub events: BTreeSet<NoticeKind>,
}

/// Never the URL: it may carry a token.
impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("name", &self.name)
            .field("url", &"<redacted>")
            .field("format", &self.format)
            .field("events", &self.events)
            .finish()
    }
}

/// Why the notify file was refused. Names a target by its name or its position, never by
/// its URL, and quotes no value of the file but names, formats and event words.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotifyConfigError {
    #[error("--notify-config: cannot read the file: {0}")]
    Read(String),
    #[error("--notify-config: not YAML{0}")]
    Syntax(String),
    #[error("--notify-config: {0}")]
    Shape(String),
    #[error("--notify-config: target {target}: {problem}")]
    Target { target: String, problem: String },
    #[error("--notify-config: cannot set up TLS: {0}")]
    Tls(String),
}

/// Reads and checks the notify file at `path`.
pub fn load(path: &std::path::Path) -> Result<Vec<Target>, NotifyConfigError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| NotifyConfigError::Read(e.kind().to_string()))?;
    parse(&text)
}

/// The targets `text` declares.
pub fn parse(text: &str) -> Result<Vec<Target>, NotifyConfigError> {
    // Read as a generic tree: serde's own messages for a typed struct may quote a value.
    let tree: Value = serde_saphyr::from_str(text).map_err(|e| {
        let at = e.location().map(|l| format!(" (line {}, column {})", l.line(), l.column()));
        NotifyConfigError::Syntax(at.unwrap_or_default())
    })?;
    let shape = |s: &str| NotifyConfigError::Shape(s.to_owned());
    let Value::Object(top) = tree else {
        return Err(shape("the file must be a map with `targets:`"));
    };
    if let Some(other) = top.keys().find(|k| *k != "targets") {
        return Err(NotifyConfigError::Shape(format!(
            "unknown field `{}` (only `targets:`)",
            crate::core::model::warnings::shorten_middle(other, 40)
        )));
    }
    let Some(Value::Array(listed)) = top.get("targets") else {
        return Err(shape("`targets:` must be a list"));
    };
    if listed.len() > MAX_TARGETS {
        return Err(NotifyConfigError::Shape(format!("at most {MAX_TARGETS} targets")));
    }
    let mut targets: Vec<Target> = Vec::new();
    for (at, entry) in listed.iter().enumerate() {
        let target = target(at, entry)?;
        if targets.iter().any(|t| t.name == target.name) {
            return Err(NotifyConfigError::Target {
                target: target.name,
                problem: "the name is used by another target: names must be unique".into(),
            });
        }
        targets.push(target);
    }
    Ok(targets)
}

fn target(at: usize, entry: &Value) -> Result<Target, NotifyConfigError> {
    let unnamed = |problem: &str| NotifyConfigError::Target {
        target: format!("#{}", at + 1),
        problem: problem.to_owned(),
    };
    let Value::Object(fields) = entry else {
        return Err(unnamed("must be a map of name, url, format and events"));
    };
    let name = match fields.get("name") {
        Some(Value::String(name)) => name.clone(),
        Some(_) => return Err(unnamed("`name` must be a string")),
        None => return Err(unnamed("`name` is required")),
    };
    let valid_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if name.is_empty() || name.chars().count() > MAX_NAME_CHARS || !name.chars().all(valid_char) {
        return Err(unnamed(&format!(
            "`name` must be 1 to {MAX_NAME_CHARS} letters, digits, `-`, `_` or `.`"
        )));
    }
    let problem = |problem: String| NotifyConfigError::Target { target: name.clone(), problem };
    if let Some(other) =
        fields.keys().find(|k| !["name", "url", "format", "events"].contains(&k.as_str()))
    {
        let other = crate::core::model::warnings::shorten_middle(other, 40);
        return Err(problem(format!("unknown field `{other}` (name, url, format, events)")));
    }
    let url = match fields.get("url") {
        Some(Value::String(url)) => parse_url(url).map_err(|why| problem(why.to_owned()))?,
        Some(_) => return Err(problem("`url` must be a string".into())),
        None => return Err(problem("`url` is required".into())),
    };
    let words = Format::ALL.map(Format::as_str).join(", ");
    let format = match fields.get("format") {
        Some(Value::String(word)) => Format::parse(word).ok_or_else(|| {
            let word = crate::core::model::warnings::shorten_middle(word, 40);
            problem(format!("unknown format `{word}` (one of {words})"))
        })?,
        Some(_) => return Err(problem(format!("`format` must be one of {words}"))),
        None => return Err(problem(format!("`format` is required (one of {words})"))),
    };
    let kinds = NoticeKind::ALL.map(NoticeKind::as_str).join(", ");
    let events = match fields.get("events") {
        None | Some(Value::Null) => NoticeKind::ALL.into_iter().collect(),
        Some(Value::Array(words)) if !words.is_empty() => {
            let mut events = BTreeSet::new();
            for word in words {
                let kind = word.as_str().and_then(NoticeKind::parse).ok_or_else(|| {
                    let word = word.as_str().map_or_else(
                        || "a non-string".to_owned(),
                        |w| format!("`{}`", crate::core::model::warnings::shorten_middle(w, 40)),
                    );
                    problem(format!("unknown event {word} (one of {kinds})"))
                })?;
                events.insert(kind);
            }
            events
        }
        Some(_) => {
            return Err(problem(format!(
                "`events` must be a non-empty list of {kinds}, or left out for all"
            )));
        }
    };
    Ok(Target { name, url, format, events })
}

/// An absolute `http` or `https` URL with a host, as hyper sends to it. The reason never
/// quotes the URL.
fn parse_url(text: &str) -> Result<hyper::Uri, &'static str> {
    let parsed = url::Url::parse(text).map_err(|_| "`url` is not a valid URL")?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err("`url` must be http or https");
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("`url` has no host");
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("`url` must not carry user information (put a token in the path or query)");
    }
    parsed.as_str().parse::<hyper::Uri>().map_err(|_| "`url` is not a valid URL")
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET_URL: &str = "https://hooks.slack.com/services/T000/B000/XXXXsecrettoken";

    #[test]
    fn targets_are_read_with_their_events_defaulting_to_all() {
        let text = format!(
            "targets:\n- name: chat\n  url: {SECRET_URL}\n  format: slack\n  events: [rolled, halted]\n- name: bus\n  url: http://receiver.observability:8080/events\n  format: cloudevents\n"
        );
        let targets = parse(&text).expect("valid");
        assert_eq!(targets.len(), 2);
        assert_eq!(targets[0].name, "chat");
        assert_eq!(targets[0].format, Format::Slack);
        assert_eq!(targets[0].events, BTreeSet::from([NoticeKind::Rolled, NoticeKind::Halted]));
        assert_eq!(targets[0].url.to_string(), SECRET_URL);
        assert_eq!(targets[1].events.len(), NoticeKind::ALL.len());
        assert!(!format!("{targets:?}").contains("secrettoken"));
        // JSON is YAML.
        let json =
            format!(r#"{{"targets": [{{"name": "j", "url": "{SECRET_URL}", "format": "json"}}]}}"#);
        assert_eq!(parse(&json).expect("JSON")[0].format, Format::Json);
        assert_eq!(parse("targets: []").expect("no targets"), Vec::new());
    }

    #[test]
    fn mistakes_are_named_by_the_target_never_by_its_url() {
        let one = |fields: &str| parse(&format!("targets:\n- {fields}\n"));
        let cases: [(String, &str); 12] = [
            (
                format!("name: a\n  url: {SECRET_URL}\n  format: discord"),
                "target a: unknown format `discord`",
            ),
            (
                format!(
                    "name: a\n  url: {SECRET_URL}\n  format: slack\n  events: [rolled, exploded]"
                ),
                "target a: unknown event `exploded`",
            ),
            (
                format!("name: a\n  url: {SECRET_URL}\n  format: slack\n  events: []"),
                "target a: `events` must be a non-empty list",
            ),
            (format!("url: {SECRET_URL}\n  format: slack"), "target #1: `name` is required"),
            (
                format!("name: 'a b'\n  url: {SECRET_URL}\n  format: slack"),
                "target #1: `name` must be 1 to 63",
            ),
            (
                "name: a\n  url: 'https://exa mple/secrettoken'\n  format: slack".into(),
                "target a: `url` is not a valid URL",
            ),
            (
                "name: a\n  url: ftp://example/secrettoken\n  format: slack".into(),
                "target a: `url` must be http or https",
            ),
            (
                "name: a\n  url: https://user:secrettoken@example/\n  format: slack".into(),
                "target a: `url` must not carry user information",
            ),
            (
                "name: a\n  url: /secrettoken\n  format: slack".into(),
                "target a: `url` is not a valid URL",
            ),
            ("name: a\n  format: slack".into(), "target a: `url` is required"),
            (format!("name: a\n  url: {SECRET_URL}"), "target a: `format` is required"),
            (
                format!("name: a\n  url: {SECRET_URL}\n  format: slack\n  headers: {{}}"),
                "target a: unknown field `headers`",
            ),
        ];
        for (fields, expected) in cases {
            let error = one(&fields).expect_err(expected).to_string();
            assert!(error.contains(expected), "{error} (expected {expected})");
            assert!(!error.contains("secrettoken"), "{error}");
        }
        let twice = format!(
            "targets:\n- {{name: a, url: '{SECRET_URL}', format: slack}}\n- {{name: a, url: '{SECRET_URL}', format: teams}}\n"
        );
        let error = parse(&twice).expect_err("duplicate").to_string();
        assert!(error.contains("target a: the name is used by another target"), "{error}");
        assert!(
            parse("targets: {}").expect_err("not a list").to_string().contains("must be a list")
        );
        assert!(
            parse("webhooks: []")
                .expect_err("field")
                .to_string()
                .contains("unknown field `webhooks`")
        );
        let broken =
            parse("targets: [\n  {name: a, url: 'https://x/secrettoken'").expect_err("syntax");
        assert!(broken.to_string().starts_with("--notify-config: not YAML"), "{broken}");
        assert!(!broken.to_string().contains("secrettoken"), "{broken}");
    }
}
