//! `configsum explain`: which workloads roll when a ConfigMap or Secret changes, and why
//! or why not, answered by the core's own plan (`core::explain`) from YAML streams such as a
//! Helm render. Read-only; the answer goes to stdout, as text or versioned JSON.

mod files;
mod output;

use std::path::Path;

use crate::config::{ExplainArgs, ExplainOutput};
use crate::core::explain::trackers;
use crate::core::{Digester, ObjectRef, Settings};
use crate::process::load_digest_keys;

pub use output::Explanation;

/// Exit codes: 0 answered; 1 the object does not exist (the answer is still given); 2 usage.
pub const EXIT_MISSING: u8 = 1;
pub const EXIT_USAGE: u8 = 2;

/// Runs the command; errors go to stderr. Returns the exit code.
pub fn run(args: &ExplainArgs) -> u8 {
    match explain(args) {
        Ok((text, exists)) => {
            print!("{text}");
            if exists { 0 } else { EXIT_MISSING }
        }
        Err(message) => {
            eprintln!("configsum explain: {message}");
            EXIT_USAGE
        }
    }
}

/// The answer as written, and whether the object exists.
fn explain(args: &ExplainArgs) -> Result<(String, bool), String> {
    let object = ObjectRef::parse(&args.object)
        .ok_or_else(|| format!("{:?} is not configmap/<name> or secret/<name>", args.object))?;
    let digester = match &args.digest_key_file {
        Some(path) => {
            Some(Digester::new(load_digest_keys(Some(path), false).map_err(|e| e.to_string())?))
        }
        None => None,
    };
    let inputs = files::read(&args.files, &args.namespace)?;
    let found = inputs.objects.get(&args.namespace, &object).map(|content| &**content);
    let settings =
        Settings { domain: args.annotations.annotation_domain.clone(), ..Settings::default() };
    let workloads = inputs.workloads();
    let answer = trackers(
        &object,
        &args.namespace,
        args.key.as_deref(),
        &workloads,
        Ok(found),
        digester.as_ref(),
        &settings,
    );
    let explanation = Explanation {
        object: object.to_string(),
        namespace: args.namespace.clone(),
        key: args.key.clone(),
        exists: found.is_some(),
        digest_key: digester.is_some(),
        workloads: answer,
    };
    let text = match args.output {
        ExplainOutput::Json => explanation.json(),
        ExplainOutput::Text => explanation.text(),
    };
    Ok((text, explanation.exists))
}

/// A path as errors name it.
fn shown(path: &Path) -> String {
    if path.as_os_str() == "-" { "stdin".to_owned() } else { path.display().to_string() }
}
