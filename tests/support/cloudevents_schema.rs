//! A small checker of the vendored CloudEvents 1.0 JSON schema
//! (tests/data/cloudevents/cloudevents.json): it reads the schema and applies the keywords
//! that schema uses — `type` (one or a list), `required`, `properties`, `$ref` to
//! `#/definitions/…`, `minLength`, `format` (`uri-reference`, `uri`, `date-time`) — and
//! refuses a schema with any other keyword, so that nothing is skipped unread. No validator
//! crate is in the tree; this is enough for one draft-07 schema of flat attributes.
#![allow(dead_code)]

use serde_json::Value;

/// The keywords this checker applies; the rest (`$schema`, `description`, `examples`,
/// `contentEncoding`) annotate and assert nothing.
const ASSERTING: [&str; 6] = ["type", "required", "properties", "$ref", "minLength", "format"];
const ANNOTATING: [&str; 5] =
    ["$schema", "description", "examples", "contentEncoding", "definitions"];

pub fn schema() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/cloudevents/cloudevents.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("the vendored schema"))
        .expect("the schema is JSON")
}

/// Every violation of `schema` by `event`, as `<path>: <what>`.
pub fn violations(schema: &Value, event: &Value) -> Vec<String> {
    let mut out = Vec::new();
    check(schema, schema, event, "$", &mut out);
    out
}

fn check(root: &Value, schema: &Value, value: &Value, at: &str, out: &mut Vec<String>) {
    let Value::Object(keywords) = schema else {
        out.push(format!("{at}: the schema is not an object"));
        return;
    };
    for keyword in keywords.keys() {
        assert!(
            ASSERTING.contains(&keyword.as_str()) || ANNOTATING.contains(&keyword.as_str()),
            "the checker does not know the keyword {keyword}: extend it"
        );
    }
    if let Some(Value::String(reference)) = keywords.get("$ref") {
        let name = reference.strip_prefix("#/definitions/").expect("a local definition");
        let target = &root["definitions"][name];
        assert!(!target.is_null(), "no definition {name}");
        check(root, target, value, at, out);
    }
    if let Some(types) = keywords.get("type") {
        let allowed: Vec<&str> = match types {
            Value::String(one) => vec![one.as_str()],
            Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
            _ => panic!("type is a string or a list"),
        };
        if !allowed.contains(&type_of(value)) {
            out.push(format!("{at}: a {}, not one of {allowed:?}", type_of(value)));
        }
    }
    if let (Some(min), Value::String(text)) = (keywords.get("minLength"), value) {
        let min = min.as_u64().expect("minLength is a number") as usize;
        if text.chars().count() < min {
            out.push(format!("{at}: shorter than {min}"));
        }
    }
    if let (Some(Value::String(format)), Value::String(text)) = (keywords.get("format"), value) {
        if let Err(why) = check_format(format, text) {
            out.push(format!("{at}: not a {format}: {why}"));
        }
    }
    if let Value::Object(fields) = value {
        if let Some(Value::Array(required)) = keywords.get("required") {
            for name in required.iter().filter_map(Value::as_str) {
                if !fields.contains_key(name) {
                    out.push(format!("{at}: required {name} is missing"));
                }
            }
        }
        if let Some(Value::Object(properties)) = keywords.get("properties") {
            for (name, property) in properties {
                if let Some(field) = fields.get(name) {
                    check(root, property, field, &format!("{at}.{name}"), out);
                }
            }
        }
    }
}

fn type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// RFC 3986 URI references (relative ones against a base), absolute URIs, RFC 3339 times.
fn check_format(format: &str, text: &str) -> Result<(), String> {
    match format {
        "uri" => url::Url::parse(text).map(|_| ()).map_err(|e| e.to_string()),
        "uri-reference" => {
            if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err("spaces or controls".into());
            }
            let base = url::Url::parse("https://base.example/").expect("base");
            base.join(text).map(|_| ()).map_err(|e| e.to_string())
        }
        "date-time" => {
            // RFC 3339: a date, `T`, a time and an offset (`Z` or ±hh:mm).
            let parsed: Result<jiff::Timestamp, _> = text.parse();
            let offset = text.ends_with('Z')
                || text.rsplit_once(['+', '-']).is_some_and(|(_, o)| o.len() == 5);
            match parsed {
                Ok(_) if offset && text.contains('T') => Ok(()),
                Ok(_) => Err("no T or no offset".into()),
                Err(e) => Err(e.to_string()),
            }
        }
        other => panic!("the checker does not know the format {other}: extend it"),
    }
}
