//! explain's inputs from YAML streams: the ConfigMaps and Secrets (read as `--objects-from`
//! reads them, the first definition winning, as in `configsum render`), the workloads of
//! the namespace, as JSON for the core's plan, and the Namespace's roll-window if a stream
//! defines the Namespace.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use crate::core::model::kinds::WorkloadKind;
use crate::core::model::object_scope::ObjectScope;
use crate::lookup::{FileSource, namespace_annotations, workload_documents};

/// Largest stream read, as for `configsum render`.
const MAX_INPUT_BYTES: u64 = 64 << 20;

pub struct Inputs {
    pub objects: FileSource,
    /// The workloads of the namespace: their kind and JSON.
    pub workloads: Vec<(WorkloadKind, String)>,
    /// The Namespace's `<domain>/roll-window`, from the first stream that defines it.
    pub namespace_window: Option<String>,
}

/// Reads every stream; objects that name no namespace are in `namespace`. `window_key` is
/// `<domain>/roll-window`.
pub fn read(
    paths: &[PathBuf],
    namespace: &str,
    window_key: &str,
    scope: &ObjectScope,
) -> Result<Inputs, String> {
    let objects = FileSource::scoped(scope.clone());
    let mut inputs = Inputs { objects, workloads: Vec::new(), namespace_window: None };
    let mut namespace_found = false;
    for path in paths {
        let text = read_text(path)?;
        inputs
            .objects
            .add_first_wins(&text, Path::new(&shown(path)), namespace)
            .map_err(|e| e.to_string())?;
        let documents = workload_documents(&text, namespace)
            .ok_or_else(|| format!("{}: not a YAML stream", shown(path)))?;
        let in_namespace = documents.into_iter().filter(|w| w.namespace == namespace);
        inputs.workloads.extend(in_namespace.map(|w| (w.kind, w.object.to_string())));
        if !namespace_found && let Some(mut annotations) = namespace_annotations(&text, namespace) {
            namespace_found = true;
            inputs.namespace_window = annotations.remove(window_key);
        }
    }
    Ok(inputs)
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

/// A path as errors name it.
fn shown(path: &Path) -> String {
    if path.as_os_str() == "-" { "stdin".to_owned() } else { path.display().to_string() }
}
