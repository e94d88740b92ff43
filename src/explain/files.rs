//! explain's inputs from YAML streams: the ConfigMaps and Secrets (read as `--objects-from`
//! reads them, the first definition winning, as in `configsum render`) and the workloads of
//! the namespace, as JSON for the core's plan.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::shown;
use crate::core::explain::ReadWorkload;
use crate::core::workload::WorkloadKind;
use crate::lookup::FileSource;

/// Largest stream read, as for `configsum render`.
const MAX_INPUT_BYTES: u64 = 64 << 20;

pub struct Inputs {
    pub objects: FileSource,
    /// The workloads of the namespace: their kind and JSON.
    workloads: Vec<(WorkloadKind, String)>,
}

impl Inputs {
    pub fn workloads(&self) -> Vec<ReadWorkload<'_>> {
        self.workloads.iter().map(|(kind, json)| ReadWorkload { kind: *kind, json }).collect()
    }
}

/// Reads every stream; objects that name no namespace are in `namespace`.
pub fn read(paths: &[PathBuf], namespace: &str) -> Result<Inputs, String> {
    let mut inputs = Inputs { objects: FileSource::default(), workloads: Vec::new() };
    for path in paths {
        let text = read_text(path)?;
        inputs
            .objects
            .add_first_wins(&text, Path::new(&shown(path)), namespace)
            .map_err(|e| e.to_string())?;
        let mut options = serde_saphyr::Options::default();
        options.non_finite_float_policy = serde_saphyr::NonFiniteFloatPolicy::PassThrough;
        options.with_snippet = false;
        let documents: Vec<Value> = serde_saphyr::from_multiple_with_options(&text, options)
            .map_err(|_| format!("{}: not a YAML stream", shown(path)))?;
        for document in documents {
            match document["items"].as_array().filter(|_| document["kind"] == "List") {
                Some(items) => items.iter().for_each(|item| inputs.add(item, namespace)),
                None => inputs.add(&document, namespace),
            }
        }
    }
    Ok(inputs)
}

impl Inputs {
    fn add(&mut self, object: &Value, namespace: &str) {
        let text_at = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
        let api_version = text_at("/apiVersion").unwrap_or_default();
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let Some(kind) = WorkloadKind::from_gvk(group, version, text_at("/kind").unwrap_or(""))
        else {
            return;
        };
        let ns = text_at("/metadata/namespace").filter(|n| !n.is_empty()).unwrap_or(namespace);
        if ns == namespace {
            self.workloads.push((kind, object.to_string()));
        }
    }
}

fn read_text(path: &Path) -> Result<String, String> {
    let mut text = String::new();
    let read = if path.as_os_str() == "-" {
        std::io::stdin().take(MAX_INPUT_BYTES + 1).read_to_string(&mut text)
    } else {
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_INPUT_BYTES + 1).read_to_string(&mut text))
    };
    read.map_err(|e| format!("cannot read {}: {e}", shown(path)))?;
    if text.len() as u64 > MAX_INPUT_BYTES {
        return Err(format!("{} is over {} MiB", shown(path), MAX_INPUT_BYTES >> 20));
    }
    Ok(text)
}
