//! The `configsum render` command around [`super::render`]: flags and a
//! ResourceList's `functionConfig`, the input, the digest keys, and exit
//! codes. Nothing reaches stdout unless the whole stream rendered.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use super::stream::function_config;
use super::tree::Node;
use super::{Options, render};
use crate::config::RenderArgs;
use crate::core::{AnnotationDomain, Digester, Settings};
use crate::process::load_digest_keys;
use crate::process::startup::declare_custom_kinds;

/// Exit codes: 0 written, 1 unreadable input, 2 usage.
pub const EXIT_INPUT: u8 = 1;
pub const EXIT_USAGE: u8 = 2;

/// Largest input render reads: far above any rendered chart or kustomize build
/// (the API server stores objects of at most about 1.5 MiB), and small enough
/// that a hostile stream is refused before it is parsed.
pub const MAX_INPUT_BYTES: u64 = 64 << 20;

/// Runs the command; notes and errors go to stderr. Returns the exit code.
pub fn run(mut args: RenderArgs) -> u8 {
    let input = match read_input(&args.file) {
        Ok(input) => input,
        Err((code, e)) => return fail(code, &e),
    };
    // A ResourceList's functionConfig.data holds options named like the flags.
    // A parse error is reported by render, after the usage checks.
    if let Err(e) = apply_function_config(function_config(&input).as_ref(), &mut args) {
        return fail(EXIT_USAGE, &e);
    }
    if let Err(e) = declare_custom_kinds(args.kinds.custom_kinds.as_deref()) {
        return fail(EXIT_USAGE, &e);
    }
    let keys = match load_digest_keys(
        args.keys.digest_key_file.as_deref(),
        args.keys.allow_plain_secret_digests,
    ) {
        Ok(keys) => keys,
        Err(e) => return fail(EXIT_USAGE, &e.to_string()),
    };
    let mut objects_from = Vec::new();
    for path in &args.objects_from {
        match std::fs::read_to_string(path) {
            Ok(text) => objects_from.push((path.clone(), text)),
            Err(e) => return fail(EXIT_USAGE, &format!("cannot read {}: {e}", path.display())),
        }
    }
    let options = Options {
        settings: Settings {
            domain: args.annotations.annotation_domain.clone(),
            object_selector: args.annotations.object_selector.clone(),
            ..Settings::default()
        },
        digester: Digester::new(keys),
        namespace: args.namespace.clone(),
        objects_from,
    };
    match render(input, &options) {
        Ok(rendered) => {
            let mut stderr = std::io::stderr().lock();
            for note in &rendered.notes {
                let _ = writeln!(stderr, "configsum render: {note}");
            }
            // Buffered: stdout flushes at every line break, a write for each document.
            let mut stdout = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
            let written =
                rendered.output.iter().try_for_each(|text| stdout.write_all(text.as_bytes()));
            if written.and_then(|()| stdout.flush()).is_err() {
                return fail(EXIT_INPUT, "cannot write the output");
            }
            0
        }
        Err(e) => fail(EXIT_INPUT, &e.to_string()),
    }
}

fn fail(code: u8, message: &str) -> u8 {
    eprintln!("configsum render: {message}");
    code
}

/// Reads the whole input, refusing (exit 1) more than [`MAX_INPUT_BYTES`]
/// without reading further; a file or stdin that cannot be read is a usage error.
fn read_input(file: &Path) -> Result<String, (u8, String)> {
    let (name, reader): (String, Box<dyn std::io::Read>) = if file == Path::new("-") {
        ("stdin".to_owned(), Box::new(std::io::stdin().lock()))
    } else {
        let opened = std::fs::File::open(file)
            .map_err(|e| (EXIT_USAGE, format!("cannot read {}: {e}", file.display())))?;
        (file.display().to_string(), Box::new(opened))
    };
    let mut bytes = Vec::new();
    reader
        .take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| (EXIT_USAGE, format!("cannot read {name}: {e}")))?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        let mib = MAX_INPUT_BYTES >> 20;
        return Err((EXIT_INPUT, format!("{name} is larger than {mib} MiB")));
    }
    String::from_utf8(bytes)
        .map_err(|_| (EXIT_USAGE, format!("cannot read {name}: it is not UTF-8 text")))
}

/// Options from `functionConfig.data` (a ConfigMap), which win over flags.
fn apply_function_config(config: Option<&Node>, args: &mut RenderArgs) -> Result<(), String> {
    let Some(Node::Map(entries)) = config.and_then(|c| c.get("data")) else { return Ok(()) };
    for (key, value) in entries {
        let (Some(key), Some(value)) = (key.as_str(), scalar_text(value)) else { continue };
        match key {
            "namespace" => args.namespace = value,
            "annotation-domain" => {
                args.annotations.annotation_domain =
                    AnnotationDomain::new(&value).map_err(|e| format!("functionConfig: {e}"))?;
            }
            "digest-key-file" => args.keys.digest_key_file = Some(PathBuf::from(value)),
            "custom-kinds" => args.kinds.custom_kinds = Some(PathBuf::from(value)),
            "allow-plain-secret-digests" => {
                args.keys.allow_plain_secret_digests = value == "true";
            }
            "objects-from" => {
                args.objects_from = value
                    .split(',')
                    .map(str::trim)
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
                    .collect();
            }
            other => return Err(format!("functionConfig: unknown option {other:?}")),
        }
    }
    Ok(())
}

fn scalar_text(node: &Node) -> Option<String> {
    match node {
        Node::Str(s) | Node::Plain(s) => Some(s.clone()),
        _ => None,
    }
}
