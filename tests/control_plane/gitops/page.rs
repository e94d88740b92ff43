//! The page's YAML blocks, by marker, and the API server's verdict on each.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::{ARGOCD_CM_KEY, DOC, SAMPLE, SNIPPETS, dry_run, parse_yaml, read, with_crds};

const MARKER_START: &str = "<!-- gitops-test: ";
const MARKER_END: &str = " -->";

#[derive(Debug)]
struct Block {
    /// 1-based line of the opening fence.
    line: usize,
    info: String,
    text: String,
    /// The marker on the last non-blank line before the fence, if any.
    marker: Option<String>,
}

fn marker_name(line: &str) -> Option<String> {
    let rest = line.trim().strip_prefix(MARKER_START)?;
    Some(rest.strip_suffix(MARKER_END)?.trim().to_owned())
}

/// The fenced code blocks of a Markdown text (fences of three or more backticks, indented by at
/// most three spaces).
fn fenced_blocks(doc: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut last_text_line: Option<&str> = None;
    let mut open: Option<(usize, String, String, Option<String>, usize)> = None;
    for (index, line) in doc.lines().enumerate() {
        let indent = line.len() - line.trim_start_matches(' ').len();
        let trimmed = line.trim_start_matches(' ');
        let fence = trimmed.len() - trimmed.trim_start_matches('`').len();
        match &mut open {
            Some((start, info, text, marker, width)) => {
                if indent <= 3
                    && fence >= *width
                    && trimmed.trim_start_matches('`').trim().is_empty()
                {
                    blocks.push(Block {
                        line: *start,
                        info: std::mem::take(info),
                        text: std::mem::take(text),
                        marker: marker.take(),
                    });
                    open = None;
                    last_text_line = None;
                } else {
                    text.push_str(line);
                    text.push('\n');
                }
            }
            None => {
                if indent <= 3 && fence >= 3 {
                    let info = trimmed.trim_start_matches('`').trim().to_owned();
                    let marker = last_text_line.and_then(marker_name);
                    open = Some((index + 1, info, String::new(), marker, fence));
                } else if !line.trim().is_empty() {
                    last_text_line = Some(line);
                }
            }
        }
    }
    assert!(open.is_none(), "{DOC}: a fenced block is never closed");
    blocks
}

fn is_yaml(info: &str) -> bool {
    let language = info.split_whitespace().next().unwrap_or("").to_ascii_lowercase();
    language == "yaml" || language == "yml"
}

pub struct Snippet {
    pub name: String,
    pub line: usize,
    pub text: String,
    pub value: Value,
}

/// The page's YAML snippets, by marker; panics on an unmarked block.
pub fn snippets() -> Vec<Snippet> {
    fenced_blocks(&read(DOC))
        .into_iter()
        .filter(|block| is_yaml(&block.info))
        .map(|block| {
            let name = block.marker.unwrap_or_else(|| {
                panic!(
                    "{DOC}:{}: a yaml block without a `{MARKER_START}NAME{MARKER_END}` line before it",
                    block.line
                )
            });
            let value = parse_yaml(&block.text, &format!("{DOC}:{} ({name})", block.line));
            Snippet { name, line: block.line, text: block.text, value }
        })
        .collect()
}

pub fn snippet(name: &str) -> Snippet {
    snippets()
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("{DOC} has no snippet {name}"))
}

/// The ignoreDifferences rule of the `argocd-cm` snippet, parsed.
pub fn argocd_cm_override(cm: &Value) -> Value {
    let text = cm["data"][ARGOCD_CM_KEY]
        .as_str()
        .unwrap_or_else(|| panic!("argocd-cm has no {ARGOCD_CM_KEY}"));
    parse_yaml(text, ARGOCD_CM_KEY)
}

#[test]
fn every_yaml_block_is_marked_and_every_marker_is_known() {
    let doc = read(DOC);
    let blocks = fenced_blocks(&doc);
    let mut names = Vec::new();
    for block in &blocks {
        if is_yaml(&block.info) {
            let name = block.marker.clone().unwrap_or_else(|| {
                panic!(
                    "{DOC}:{}: a yaml block without a `{MARKER_START}NAME{MARKER_END}` line before \
                     it: every YAML snippet must be tested (tests/control_plane/gitops.rs)",
                    block.line
                )
            });
            assert!(
                SNIPPETS.contains(&name.as_str()),
                "{DOC}:{}: snippet {name:?} is not one that tests/control_plane/gitops.rs tests",
                block.line
            );
            names.push(name);
        } else {
            assert!(
                block.marker.is_none(),
                "{DOC}:{}: a test marker before a {:?} block, not a yaml one",
                block.line,
                block.info
            );
        }
    }
    let unique: BTreeSet<_> = names.iter().cloned().collect();
    assert_eq!(unique.len(), names.len(), "{DOC}: a snippet name is used twice: {names:?}");
    let expected: BTreeSet<String> = SNIPPETS.iter().map(|s| s.to_string()).collect();
    assert_eq!(unique, expected, "{DOC}: the snippets tested here");
    // A marker must sit right before a block (blank lines allowed).
    let markers = doc.lines().filter(|l| marker_name(l).is_some()).count();
    assert_eq!(markers, names.len(), "{DOC}: a test marker that no yaml block follows");
}

#[test]
fn block_parsing_sees_what_a_markdown_reader_sees() {
    let doc = "text\n<!-- gitops-test: a -->\n\n```yaml\nx: 1\n```\n\n```sh\nls\n```\n  ```yml\ny: 2\n  ```\n````yaml\n```\nz\n````\n";
    let blocks = fenced_blocks(doc);
    let seen: Vec<_> =
        blocks.iter().map(|b| (b.line, b.info.as_str(), b.marker.as_deref())).collect();
    assert_eq!(
        seen,
        [(4, "yaml", Some("a")), (8, "sh", None), (11, "yml", None), (14, "yaml", None)]
    );
    assert_eq!(blocks[3].text, "```\nz\n");
    assert_eq!(blocks.iter().filter(|b| is_yaml(&b.info)).count(), 3);
}

/// The fields of an Application's `ignoreDifferences` item (Argo CD's
/// `ResourceIgnoreDifferences`) that an `argocd-cm` `resource.customizations.ignoreDifferences.*`
/// value (`OverrideIgnoreDiff`) does not have: the key names the kind instead.
const SELECTORS: &[&str] = &["group", "kind", "name", "namespace"];

/// An Application whose one `ignoreDifferences` item is `rule` plus selectors for every kind, so
/// that the API server checks an `argocd-cm` rule's field names and types against the CRD: the
/// two types have the same fields but the selectors, which are refused here.
fn application_with_rule(rule: &Value) -> Result<String, String> {
    let fields = rule.as_object().ok_or_else(|| format!("not a mapping: {rule}"))?;
    if let Some(field) = fields.keys().find(|k| SELECTORS.contains(&k.as_str())) {
        return Err(format!(
            "{field} selects nothing in an argocd-cm rule (the key names the kind)"
        ));
    }
    let mut item = json!({"group": "*", "kind": "*"});
    for (key, value) in fields {
        item[key] = value.clone();
    }
    Ok(json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": "argocd-cm-rule", "namespace": "argocd"},
        "spec": {
            "project": "default",
            "source": {"repoURL": "https://git.example.com/shop/deploy.git", "path": "prod"},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": "shop"},
            "ignoreDifferences": [item],
        },
    })
    .to_string())
}

/// What the API server says of a snippet's text, and of its `argocd-cm` rule if it has one.
fn verdicts(name: &str, text: &str) -> Vec<(String, Result<String, String>)> {
    let cp = with_crds();
    let mut verdicts = vec![(name.to_owned(), dry_run(cp, text))];
    let value: Value = serde_saphyr::from_str(text).unwrap_or(Value::Null);
    if let Some(rule) = value["data"][ARGOCD_CM_KEY].as_str() {
        let label = format!("{name} ({ARGOCD_CM_KEY})");
        let verdict = serde_saphyr::from_str::<Value>(rule)
            .map_err(|e| format!("not YAML: {e}"))
            .and_then(|rule| application_with_rule(&rule))
            .and_then(|application| dry_run(cp, &application));
        verdicts.push((label, verdict));
    }
    verdicts
}

#[test]
fn the_api_server_accepts_every_snippet_under_strict_field_validation() {
    let mut all = Vec::new();
    for s in snippets() {
        all.extend(verdicts(&format!("{DOC}:{} {}", s.line, s.name), &s.text));
    }
    all.extend(verdicts(SAMPLE, &read(SAMPLE)));
    assert!(
        all.iter().any(|(name, _)| name.contains(ARGOCD_CM_KEY)),
        "the argocd-cm rule is checked too"
    );
    let refused: Vec<_> = all.iter().filter(|(_, verdict)| verdict.is_err()).collect();
    assert!(refused.is_empty(), "the API server refused: {refused:#?}");
}

/// Each breakage turns a snippet into one with a misspelt, missing or invalid field; the API
/// server must refuse it, with an error that names what was broken: proof that the check above
/// reads field names and values and not only the YAML.
#[test]
fn the_api_server_refuses_misspelt_snippets() {
    // (snippet, text, replacement, a part of the error)
    let breakages: &[(&str, &str, &str, &str)] = &[
        (
            "argocd-application-ignore-differences",
            "  ignoreDifferences:",
            "  ignoreDiferences:",
            r#"unknown field "spec.ignoreDiferences""#,
        ),
        (
            "argocd-application-ignore-differences",
            "jqPathExpressions:",
            "jqPathExpression:",
            r#"unknown field "spec.ignoreDifferences[0].jqPathExpression""#,
        ),
        (
            "argocd-application-ignore-differences",
            "managedFieldsManagers:",
            "managedFieldManagers:",
            r#"unknown field "spec.ignoreDifferences[0].managedFieldManagers""#,
        ),
        (
            "argocd-application-ignore-differences",
            "    syncOptions:",
            "    syncOption:",
            r#"unknown field "spec.syncPolicy.syncOption""#,
        ),
        (
            "argocd-application-ignore-differences",
            "  namespace: argocd",
            "  namespce: argocd",
            r#"unknown field "metadata.namespce""#,
        ),
        (
            "argocd-application-ignore-differences",
            "  project: default\n",
            "",
            "spec.project: Required value",
        ),
        (
            "argocd-application-server-side-diff",
            "    server: https",
            "    servr: https",
            r#"unknown field "spec.destination.servr""#,
        ),
        (
            "argocd-application-pin-ignore-image",
            "    - group: '*'",
            "    - groups: '*'",
            r#"unknown field "spec.ignoreDifferences[0].groups""#,
        ),
        (
            "argocd-cm-ignore-differences",
            "    managedFieldsManagers:",
            "    managedFieldManagers:",
            r#"unknown field "spec.ignoreDifferences[0].managedFieldManagers""#,
        ),
        (
            "argocd-cm-ignore-differences",
            "    jqPathExpressions:",
            "    kind: Deployment\n    jqPathExpressions:",
            "kind selects nothing in an argocd-cm rule",
        ),
        (
            "argocd-cm-ignore-differences",
            "  namespace: argocd",
            "  namespaces: argocd",
            r#"unknown field "metadata.namespaces""#,
        ),
        ("flux-kustomization-ignore", "  ignore:", "  ignores:", r#"unknown field "spec.ignores""#),
        (
            "flux-kustomization-ignore",
            "      target:",
            "      targets:",
            r#"unknown field "spec.ignore[0].targets""#,
        ),
        (
            "flux-kustomization-ignore",
            "  force: false",
            "  force: \"no\"",
            "spec.force in body must be of type boolean",
        ),
        (
            "flux-kustomization-ignore",
            "  interval: 10m",
            "  interval: ten minutes",
            "spec.interval in body should match",
        ),
        (
            "flux-helmrelease-drift-detection",
            "  driftDetection:",
            "  driftDetections:",
            r#"unknown field "spec.driftDetections""#,
        ),
        (
            "flux-helmrelease-drift-detection",
            "    mode: enabled",
            "    mode: enable",
            r#"spec.driftDetection.mode: Unsupported value: "enable""#,
        ),
        (
            "flux-helmrelease-drift-detection",
            "      - paths:",
            "      - path:",
            r#"unknown field "spec.driftDetection.ignore[0].path""#,
        ),
        (
            "flux-helmrelease-drift-detection",
            "          kind: Deployment",
            "          knd: Deployment",
            r#"unknown field "spec.driftDetection.ignore[0].target.knd""#,
        ),
        (
            "deployment-empty-annotations",
            "      annotations: {}",
            "      annotation: {}",
            r#"unknown field "spec.template.metadata.annotation""#,
        ),
        (
            "deployment-empty-annotations",
            "        - name: app",
            "        - nme: app",
            r#"unknown field "spec.template.spec.containers[0].nme""#,
        ),
    ];
    let snippets = snippets();
    let mut accepted = Vec::new();
    for (name, from, to, expected) in breakages {
        let s = snippets
            .iter()
            .find(|s| s.name == *name)
            .unwrap_or_else(|| panic!("no snippet {name}"));
        assert!(s.text.contains(from), "{name}: {from:?} is not in the snippet any more");
        let broken = s.text.replacen(from, to, 1);
        let label = format!("{name}: {from:?} -> {to:?}");
        let errors: Vec<String> =
            verdicts(&label, &broken).into_iter().filter_map(|(_, v)| v.err()).collect();
        if errors.is_empty() {
            accepted.push(label);
        } else {
            assert!(
                errors.iter().any(|e| e.contains(expected)),
                "{label}: refused, but not for {expected:?}: {errors:#?}"
            );
        }
    }
    assert!(accepted.is_empty(), "the API server accepted these broken snippets: {accepted:#?}");
}
