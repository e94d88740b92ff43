//! Real YAML readers for the render tests: PyYAML (YAML 1.1, `yaml.safe_load`)
//! and ruamel.yaml (YAML 1.2: its safe loader and its default round-trip
//! loader), installed pinned in target/tools-venv by
//! scripts/install-python-tools.sh. One Python process reads a whole batch.
//!
//! Each reading is typed JSON, so a string and the number it looks like
//! differ: `["str", "12"]`, `["int", "12"]`, `["float", "1.0"]`, `["bool", true]`,
//! `["null"]`, `["timestamp", iso]`, `["date", iso]`, `["binary", base64]`,
//! `["seq", [..]]`, `["map", [[key, value], ..]]` (pairs sorted: key order is
//! not data), `["set", ..]`, `["other", type]`; a document that a reader
//! refuses reads as `["error", exception class]`.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

/// The readers, by the name used in failure messages.
pub const READERS: [&str; 3] = ["pyyaml", "ruamel-safe", "ruamel-rt"];

const SCRIPT: &str = r#"
import base64, datetime, json, sys
import yaml
from ruamel.yaml import YAML

def enc(v):
    name = type(v).__name__
    if v is None: return ["null"]
    if isinstance(v, bool) or name == "ScalarBoolean": return ["bool", bool(v)]
    if isinstance(v, int): return ["int", str(int(v))]
    if isinstance(v, float): return ["float", repr(float(v))]
    if isinstance(v, str): return ["str", str(v)]
    if isinstance(v, (bytes, bytearray)): return ["binary", base64.b64encode(bytes(v)).decode()]
    if isinstance(v, datetime.datetime): return ["timestamp", v.isoformat()]
    if isinstance(v, datetime.date): return ["date", v.isoformat()]
    if isinstance(v, dict): return ["map", [[enc(k), enc(x)] for k, x in v.items()]]
    if isinstance(v, (set, frozenset)): return ["set", [enc(x) for x in v]]
    if isinstance(v, (list, tuple)): return ["seq", [enc(x) for x in v]]
    return ["other", name]

def read(load_all, text):
    try:
        return [enc(d) for d in load_all(text)]
    except Exception as e:
        return ["error", type(e).__name__]

safe = YAML(typ="safe", pure=True)
rt = YAML()
out = []
for text in json.load(sys.stdin):
    out.append({
        "pyyaml": read(yaml.safe_load_all, text),
        "ruamel-safe": read(lambda t: list(safe.load_all(t)), text),
        "ruamel-rt": read(lambda t: list(rt.load_all(t)), text),
    })
json.dump(out, sys.stdout, ensure_ascii=False)
"#;

fn python() -> PathBuf {
    let python = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/tools-venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/install-python-tools.sh (PyYAML and ruamel.yaml for the render tests)",
        python.display()
    );
    python
}

/// Each text (a YAML stream) as every reader reads it: one object per text,
/// `{reader: [document, ..] or ["error", class]}`, maps normalized.
pub fn read_all(texts: &[String]) -> Vec<Value> {
    let mut child = Command::new(python())
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the venv's python");
    let input = serde_json::to_vec(texts).expect("texts as JSON");
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().expect("python finishes");
    writer.join().expect("writer").expect("write to python");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the YAML readers failed (run scripts/install-python-tools.sh if a module is missing): {stderr}"
    );
    let mut readings: Vec<Value> = serde_json::from_slice(&out.stdout).expect("readings as JSON");
    assert_eq!(readings.len(), texts.len());
    for reading in &mut readings {
        normalize(reading);
    }
    readings
}

/// Sorts every map's pairs by key, recursively: key order is not data.
pub fn normalize(value: &mut Value) {
    match value {
        Value::Array(items) => {
            for item in items.iter_mut() {
                normalize(item);
            }
            if items.first() == Some(&json!("map")) {
                if let Some(Value::Array(pairs)) = items.get_mut(1) {
                    pairs.sort_by_key(|pair| pair[0].to_string());
                }
            }
        }
        Value::Object(fields) => fields.values_mut().for_each(normalize),
        _ => {}
    }
}

/// The typed reading of a string.
pub fn string(s: &str) -> Value {
    json!(["str", s])
}

/// The typed reading of a mapping, normalized.
pub fn map(pairs: Vec<(Value, Value)>) -> Value {
    let pairs: Vec<Value> = pairs.into_iter().map(|(k, v)| json!([k, v])).collect();
    let mut value = json!(["map", pairs]);
    normalize(&mut value);
    value
}
