//! A label selector in the API server's string syntax (`a=b,c!=d,e in (x,y),f,!g`): what
//! `--namespace-selector` and `--object-selector` take. Parsed once at start-up, strictly (an
//! operator's typo must fail the start, not select nothing), matched against an object's
//! labels, and printed back in the form the API server's `labelSelector` parameter reads.

use std::fmt;

use super::object_ref::is_dns_subdomain;

/// The longest selector accepted: a flag, not a place for data.
const MAX_SELECTOR_BYTES: usize = 4096;

/// One requirement: a label key and what its value must be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    operator: Operator,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Operator {
    Equals(String),
    NotEquals(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
}

/// Every requirement must hold; the empty selector selects everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InvalidSelector {
    #[error("label selector is longer than {MAX_SELECTOR_BYTES} bytes")]
    TooLong,
    #[error("label selector requirement {0} is empty")]
    Empty(usize),
    #[error("label selector requirement {at}: {why}")]
    Requirement { at: usize, why: String },
}

impl LabelSelector {
    /// Parses the API server's syntax; `""` selects everything.
    pub fn parse(text: &str) -> Result<Self, InvalidSelector> {
        if text.len() > MAX_SELECTOR_BYTES {
            return Err(InvalidSelector::TooLong);
        }
        if text.trim().is_empty() {
            return Ok(LabelSelector::default());
        }
        let requirements = split_requirements(text)
            .enumerate()
            .map(|(i, part)| parse_requirement(part.trim(), i + 1))
            .collect::<Result<_, _>>()?;
        Ok(LabelSelector { requirements })
    }

    /// `key=value`: the selector of one label.
    pub fn equals(key: &str, value: &str) -> Self {
        let operator = Operator::Equals(value.to_owned());
        LabelSelector { requirements: vec![Requirement { key: key.to_owned(), operator }] }
    }

    pub fn selects_everything(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether labels `label` (a label's value by key) satisfy every requirement.
    pub fn matches<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements.iter().all(|r| {
            let value = label(&r.key);
            match &r.operator {
                Operator::Equals(v) => value == Some(v.as_str()),
                Operator::NotEquals(v) => value != Some(v.as_str()),
                Operator::In(values) => value.is_some_and(|x| values.iter().any(|v| v == x)),
                Operator::NotIn(values) => value.is_none_or(|x| values.iter().all(|v| v != x)),
                Operator::Exists => value.is_some(),
                Operator::DoesNotExist => value.is_none(),
            }
        })
    }

    /// Whether the selector reads label `key`: a reader keeps only these labels.
    pub fn reads(&self, key: &str) -> bool {
        self.requirements.iter().any(|r| r.key == key)
    }
}

/// Splits at the commas outside parentheses.
fn split_requirements(text: &str) -> impl Iterator<Item = &str> {
    let mut depth = 0usize;
    let mut start = 0;
    let mut parts = Vec::new();
    for (at, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts.into_iter()
}

fn parse_requirement(part: &str, at: usize) -> Result<Requirement, InvalidSelector> {
    let invalid = |why: String| InvalidSelector::Requirement { at, why };
    if part.is_empty() {
        return Err(InvalidSelector::Empty(at));
    }
    if let Some(key) = part.strip_prefix('!') {
        let key = checked_key(key.trim()).map_err(invalid)?;
        return Ok(Requirement { key, operator: Operator::DoesNotExist });
    }
    for (word, set_operator) in [(" notin ", false), (" in ", true)] {
        if let Some((key, values)) = part.split_once(word) {
            let key = checked_key(key.trim()).map_err(invalid)?;
            let values = set_values(values.trim()).map_err(invalid)?;
            let operator =
                if set_operator { Operator::In(values) } else { Operator::NotIn(values) };
            return Ok(Requirement { key, operator });
        }
    }
    for (symbol, equal) in [("!=", false), ("==", true), ("=", true)] {
        if let Some((key, value)) = part.split_once(symbol) {
            let key = checked_key(key.trim()).map_err(invalid)?;
            let value = checked_value(value.trim()).map_err(invalid)?;
            let operator = if equal { Operator::Equals(value) } else { Operator::NotEquals(value) };
            return Ok(Requirement { key, operator });
        }
    }
    let key = checked_key(part).map_err(invalid)?;
    Ok(Requirement { key, operator: Operator::Exists })
}

/// `(a, b)`: at least one value, each a valid label value.
fn set_values(text: &str) -> Result<Vec<String>, String> {
    let inner = text
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .ok_or_else(|| "a set of values is written in parentheses, e.g. (a, b)".to_owned())?;
    if inner.trim().is_empty() {
        return Err("a set of values needs at least one value".to_owned());
    }
    inner.split(',').map(|v| checked_value(v.trim())).collect()
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63
/// characters.
fn checked_key(key: &str) -> Result<String, String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|p| is_dns_subdomain(p, 253));
    if !prefix_ok || name.is_empty() || !is_label_word(name) {
        return Err(format!("{:?} is not a valid label key", shown(key)));
    }
    Ok(key.to_owned())
}

/// A label value: empty, or a name of at most 63 characters.
fn checked_value(value: &str) -> Result<String, String> {
    if value.is_empty() || is_label_word(value) {
        Ok(value.to_owned())
    } else {
        Err(format!("{:?} is not a valid label value", shown(value)))
    }
}

/// At most 63 of `[A-Za-z0-9._-]`, starting and ending alphanumeric.
fn is_label_word(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// An operator's text in an error, cut short.
fn shown(s: &str) -> String {
    super::warnings::shorten_middle(s, 80)
}

impl fmt::Display for LabelSelector {
    /// The API server's syntax, as its `labelSelector` parameter reads it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let key = &r.key;
            match &r.operator {
                Operator::Equals(v) => write!(f, "{key}={v}")?,
                Operator::NotEquals(v) => write!(f, "{key}!={v}")?,
                Operator::In(values) => write!(f, "{key} in ({})", values.join(","))?,
                Operator::NotIn(values) => write!(f, "{key} notin ({})", values.join(","))?,
                Operator::Exists => write!(f, "{key}")?,
                Operator::DoesNotExist => write!(f, "!{key}")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn selects(selector: &str, pairs: &[(&str, &str)]) -> bool {
        let labels = labels(pairs);
        let selector = LabelSelector::parse(selector).expect(selector);
        selector.matches(|k| labels.get(k).map(String::as_str))
    }

    #[test]
    fn each_operator_as_the_api_server_reads_it() {
        assert!(selects("configsum.dev/enabled=true", &[("configsum.dev/enabled", "true")]));
        assert!(!selects("configsum.dev/enabled=true", &[("configsum.dev/enabled", "yes")]));
        assert!(selects("team==a", &[("team", "a")]));
        assert!(selects("team!=a", &[]), "!= holds where the label is missing");
        assert!(!selects("team!=a", &[("team", "a")]));
        assert!(selects("tier in (web, api)", &[("tier", "api")]));
        assert!(!selects("tier in (web,api)", &[]));
        assert!(selects("tier notin (web,api)", &[]));
        assert!(!selects("tier notin (web,api)", &[("tier", "web")]));
        assert!(selects("reload", &[("reload", "")]));
        assert!(!selects("reload", &[]));
        assert!(selects("!legacy", &[("other", "x")]));
        assert!(!selects("! legacy", &[("legacy", "1")]));
        assert!(selects("", &[]), "the empty selector selects everything");
        let both = "app.kubernetes.io/part-of=shop, tier in (web,api)";
        assert!(selects(both, &[("app.kubernetes.io/part-of", "shop"), ("tier", "web")]));
        assert!(!selects(both, &[("app.kubernetes.io/part-of", "shop")]));
    }

    #[test]
    fn printed_as_the_api_servers_parameter() {
        let text = "a=b, c != d,e in (x, y),f notin (z),g,!h";
        let selector = LabelSelector::parse(text).expect("valid");
        assert_eq!(selector.to_string(), "a=b,c!=d,e in (x,y),f notin (z),g,!h");
        assert_eq!(LabelSelector::parse(&selector.to_string()), Ok(selector));
        assert_eq!(LabelSelector::equals("k", "v").to_string(), "k=v");
    }

    #[test]
    fn typos_fail_with_the_requirement_named() {
        for (text, expected) in [
            ("a=b,,c", "requirement 2 is empty"),
            ("a=b,c in x", "requirement 2: a set of values is written in parentheses"),
            ("tier in ()", "needs at least one value"),
            ("-bad=x", "\"-bad\" is not a valid label key"),
            ("a=b c", "\"b c\" is not a valid label value"),
            ("bad_/x=y", "is not a valid label key"),
            ("k=this-value-is-far-too-long-for-a-label-value-at-sixty-eight-chars-x", "value"),
        ] {
            let error = LabelSelector::parse(text).expect_err(text).to_string();
            assert!(error.contains(expected), "{text}: {error}");
        }
        let long = "a=b,".repeat(2000);
        assert_eq!(LabelSelector::parse(&long), Err(InvalidSelector::TooLong));
    }

    #[test]
    fn reads_only_the_keys_it_names() {
        let selector = LabelSelector::parse("a=b,!c").expect("valid");
        assert!(selector.reads("a") && selector.reads("c") && !selector.reads("b"));
    }
}
