//! The Go webhook (benches/go-webhook): the same job as configsum's written the usual way,
//! with Kubernetes' API types and Go's standard library. scripts/build-go-webhook.sh builds
//! it once per change of its sources; this finds the build, starts it, and checks that its
//! digests are configsum's, so that the two are measured doing the same work.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine as _;

use crate::peer::Peer;

/// The built binary: built now if `build`, else only one already built (a smoke run does
/// not wait for Go). The error says why there is none.
pub fn binary(build: bool) -> Result<PathBuf, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/build-go-webhook.sh");
    let mut command = Command::new(&script);
    if !build {
        command.arg("--cached");
    }
    let output = command.output().map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).trim().to_owned());
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&output.stdout).trim()))
}

/// Starts it with configsum's serving certificate, digest key and `--objects-from` file.
pub fn start(binary: &Path, cert: &str, key: &str, digest_key: &str, objects: &str) -> Peer {
    let args = [
        "-tls-cert",
        cert,
        "-tls-key",
        key,
        "-digest-key-file",
        digest_key,
        "-objects-from",
        objects,
    ];
    Peer::start(binary, &args).unwrap_or_else(|e| panic!("the Go webhook did not start: {e}"))
}

/// Whether two AdmissionReview answers set the same digest annotations: the same keys with
/// the same values, whatever the shape of the patch that sets them.
pub fn same_annotations(configsum: &[u8], go: &[u8]) -> Result<(), String> {
    let (ours, theirs) = (annotations(configsum)?, annotations(go)?);
    if ours == theirs {
        return Ok(());
    }
    Err(format!("configsum sets {ours:?}, the Go webhook {theirs:?}"))
}

/// The annotations an answer's JSON Patch adds or replaces.
pub fn annotations(answer: &[u8]) -> Result<BTreeMap<String, String>, String> {
    let answer: serde_json::Value =
        serde_json::from_slice(answer).map_err(|e| format!("answer not JSON: {e}"))?;
    let mut out = BTreeMap::new();
    let Some(patch) = answer["response"]["patch"].as_str() else { return Ok(out) };
    let patch = base64::engine::general_purpose::STANDARD
        .decode(patch)
        .map_err(|e| format!("patch not base64: {e}"))?;
    let patch: Vec<serde_json::Value> =
        serde_json::from_slice(&patch).map_err(|e| format!("patch not a JSON list: {e}"))?;
    for operation in &patch {
        let (op, path) = (operation["op"].as_str(), operation["path"].as_str().unwrap_or(""));
        if !matches!(op, Some("add" | "replace")) {
            return Err(format!("unexpected operation {operation}"));
        }
        match (path.rsplit_once("/annotations"), &operation["value"]) {
            // The whole map, where the template had none.
            (Some((_, "")), serde_json::Value::Object(map)) => {
                for (key, value) in map {
                    out.insert(key.clone(), value.as_str().unwrap_or_default().to_owned());
                }
            }
            (Some((_, key)), serde_json::Value::String(value)) if key.starts_with('/') => {
                let key = key[1..].replace("~1", "/").replace("~0", "~");
                out.insert(key, value.clone());
            }
            _ => return Err(format!("not an annotation: {operation}")),
        }
    }
    Ok(out)
}
