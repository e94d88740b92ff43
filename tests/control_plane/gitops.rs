//! docs/gitops.md, tested where the page is written. Every ```yaml block of the page must follow
//! a `<!-- gitops-test: NAME -->` marker naming one of [`SNIPPETS`], and every name must be in
//! the page, so the page and these tests cannot drift apart. Checked:
//!
//! - validity, by the real API server: the Argo CD `Application` and Flux `Kustomization` and
//!   `HelmRelease` CRDs (scripts/install-gitops-crds.sh makes them from Go modules into
//!   target/gitops-crds) are installed into this binary's control plane, and every snippet is
//!   sent as `kubectl apply --dry-run=server --validate=strict`: unknown fields are errors, as
//!   are values the CRD's schema refuses. Misspelt copies of the snippets must be refused, each
//!   for the reason it was broken ([`page`]).
//! - meaning, by real jq: the `jqPathExpressions` select exactly configsum's annotations (by
//!   configsum's own ownership rule) and, for the pin snippet, exactly the tracked containers'
//!   images; `managedFieldsManagers` names the controller's field manager; Flux's JSON pointers
//!   resolve to configsum's fields ([`meaning`]).
//! - the page's account of field ownership and dry runs, on the real API server with the real
//!   webhook and controller ([`ownership`]).
//!
//! Argo CD and Flux themselves are not run: what they do with these settings is taken from
//! their documentation and source, cited in the page.

mod meaning;
mod ownership;
mod page;
mod pin;

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::control_plane::{ControlPlane, shared};

pub const DOC: &str = "docs/gitops.md";
/// A Deployment as the cluster holds it after the webhook admitted it under `pin`, with other
/// tools' annotations beside configsum's.
pub const SAMPLE: &str = "tests/data/gitops/deployment.yaml";

/// Every snippet the page must have, each tested here.
pub const SNIPPETS: &[&str] = &[
    "deployment-empty-annotations",
    "argocd-application-ignore-differences",
    "argocd-cm-ignore-differences",
    "argocd-application-server-side-diff",
    "argocd-application-pin-ignore-image",
    "flux-kustomization-ignore",
    "flux-helmrelease-drift-detection",
];

/// The `argocd-cm` key the system-level snippet sets.
pub const ARGOCD_CM_KEY: &str = "resource.customizations.ignoreDifferences.all";

/// The CRDs scripts/install-gitops-crds.sh writes, by file, CRD name and the version the page's
/// snippets use.
const CRDS: &[(&str, &str, &str)] = &[
    ("argocd-application.yaml", "applications.argoproj.io", "v1alpha1"),
    ("flux-kustomization.yaml", "kustomizations.kustomize.toolkit.fluxcd.io", "v1"),
    ("flux-helmrelease.yaml", "helmreleases.helm.toolkit.fluxcd.io", "v2"),
];

/// The namespaces the snippets name.
const NAMESPACES: &[&str] = &["argocd", "flux-system", "shop"];

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

pub fn parse_yaml(text: &str, what: &str) -> Value {
    serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("{what} is not YAML: {e}"))
}

pub fn sample() -> Value {
    parse_yaml(&read(SAMPLE), SAMPLE)
}

/// The shared control plane with the Argo CD and Flux CRDs installed and established, and the
/// namespaces the snippets name.
pub fn with_crds() -> &'static ControlPlane {
    static READY: OnceLock<()> = OnceLock::new();
    let cp = shared();
    READY.get_or_init(|| install_crds(cp));
    cp
}

fn install_crds(cp: &ControlPlane) {
    // Nothing when target/gitops-crds is current (make tools ran it); seconds otherwise.
    let script = root().join("scripts/install-gitops-crds.sh");
    let output = Command::new(&script).output().expect("run scripts/install-gitops-crds.sh");
    assert!(
        output.status.success(),
        "scripts/install-gitops-crds.sh failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let dir = root().join("target/gitops-crds");
    let mut names = Vec::new();
    for (file, name, _) in CRDS {
        // Server-side: Argo CD's CRD is too large for client-side apply's annotation.
        let path = dir.join(file).display().to_string();
        cp.kubectl_ok(&["apply", "--server-side", "-f", &path]);
        names.push(format!("crd/{name}"));
    }
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    cp.wait_established(&names);
    for namespace in NAMESPACES {
        cp.namespace(namespace, false);
    }
}

/// `kubectl apply --dry-run=server --validate=strict` of one document: kubectl's stdout if the
/// API server accepted it, its stderr if not. A kind that discovery does not list yet (a CRD
/// established a moment ago) is tried again for a while.
pub fn dry_run(cp: &ControlPlane, yaml: &str) -> Result<String, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let output = cp.kubectl_with_input(
            &["apply", "--dry-run=server", "--validate=strict", "-f", "-"],
            Some(yaml),
        );
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        if output.status.success() {
            assert!(stdout.contains("(server dry run)"), "not a server dry run: {stdout}");
            return Ok(stdout);
        }
        let not_served_yet = stderr.contains("no matches for kind")
            || stderr.contains("could not find the requested resource");
        if !not_served_yet || Instant::now() > deadline {
            return Err(stderr);
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The CRDs serve the versions the snippets use, and those are their storage versions.
#[test]
fn the_crds_serve_the_versions_the_snippets_use() {
    let cp = with_crds();
    for (_, name, version) in CRDS {
        let crd = cp.get_json(&["crd", name]);
        let versions = crd["spec"]["versions"].as_array().expect("versions");
        let served: Vec<_> = versions
            .iter()
            .filter(|v| v["served"] == true)
            .map(|v| (v["name"].as_str().unwrap_or_default(), v["storage"] == true))
            .collect();
        assert_eq!(served, [(*version, true)], "{name}");
    }
}

/// The page's "how this page is tested" names the versions that scripts/install-gitops-crds.sh
/// and tools/gitops-crds/go.mod pin.
#[test]
fn the_page_names_the_pinned_versions() {
    let script = read("scripts/install-gitops-crds.sh");
    let tools = read("tools/gitops-crds/go.mod");
    let doc = read(DOC);
    let pinned = |text: &str, module: &str| -> String {
        text.lines()
            .find_map(|line| line.trim().strip_prefix(module))
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no pin of {module}"))
            .to_owned()
    };
    let section = doc
        .split("How this page is tested")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .unwrap_or_else(|| panic!("{DOC} has no \"How this page is tested\""));
    let section = section.split_whitespace().collect::<Vec<_>>().join(" ");
    for phrase in [
        format!("Argo CD {}", pinned(&script, "argocd=github.com/argoproj/argo-cd/v3@")),
        format!(
            "kustomize-controller {}",
            pinned(&script, "kustomize=github.com/fluxcd/kustomize-controller@")
        ),
        format!("controller-gen {}", pinned(&tools, "sigs.k8s.io/controller-tools ")),
        format!(
            "`github.com/fluxcd/helm-controller/api` {}",
            pinned(&tools, "github.com/fluxcd/helm-controller/api ")
        ),
    ] {
        assert!(section.contains(&phrase), "{DOC}, how it is tested: no {phrase:?}");
    }
}
