//! Rendering charts/configsum and the kustomize base with the real binaries
//! that scripts/install-helm.sh puts in target/tools (Helm 3, Helm 4, kubectl).
//! Nothing here touches a network or a cluster: `helm template`, `helm lint`
//! and `kubectl kustomize` read local files only, and Helm's home directories
//! point into the test's temporary directory.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

pub const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/configsum");
/// Every value away from its default at once.
pub const CUSTOM_VALUES: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/charts/configsum/ci/custom-values.yaml");
/// The namespace of manifests/base, and the one the chart is rendered into to compare.
pub const NAMESPACE: &str = "configsum-system";
pub const RELEASE: &str = "configsum";

/// The metadata labels the chart adds and the kustomize base does not have:
/// Helm's own bookkeeping. These, on each object's own metadata (never on pod
/// templates or selectors), are all that is stripped before comparing.
pub const HELM_ONLY_LABELS: [&str; 4] = [
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
];

fn tool(relative: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tools").join(relative);
    assert!(
        path.is_file(),
        "{} is missing: run scripts/install-helm.sh (make test and scripts/install-test-deps.sh do)",
        path.display()
    );
    path
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Helm {
    V3,
    V4,
}

impl Helm {
    pub const ALL: [Helm; 2] = [Helm::V3, Helm::V4];

    pub fn command(self) -> Command {
        let mut command = Command::new(tool(match self {
            Helm::V3 => "helm3/helm",
            Helm::V4 => "helm4/helm",
        }));
        let home = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("helm-home-{self:?}"));
        for (var, dir) in [
            ("HELM_CACHE_HOME", "cache"),
            ("HELM_CONFIG_HOME", "config"),
            ("HELM_DATA_HOME", "data"),
        ] {
            command.env(var, home.join(dir));
        }
        command.env("KUBECONFIG", "/dev/null");
        command
    }

    pub fn run(self, args: &[&str]) -> Output {
        self.command().args(args).output().unwrap_or_else(|e| panic!("{self:?}: {e}"))
    }

    /// `helm template configsum charts/configsum -n <namespace> <args>`: the
    /// rendered objects, or Helm's error output.
    pub fn template(self, namespace: &str, args: &[&str]) -> Result<Vec<Value>, String> {
        let mut all = vec!["template", RELEASE, CHART, "--namespace", namespace];
        all.extend_from_slice(args);
        let out = self.run(&all);
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(parse_stream(&String::from_utf8_lossy(&out.stdout)))
    }

    pub fn render(self, namespace: &str, args: &[&str]) -> Vec<Value> {
        self.template(namespace, args)
            .unwrap_or_else(|e| panic!("{self:?} template {args:?} failed: {e}"))
    }
}

/// `kubectl kustomize <dir>` (dir relative to the repository).
pub fn kustomize(dir: &str) -> Vec<Value> {
    let out = Command::new(tool("kubectl"))
        .args(["kustomize", &Path::new(env!("CARGO_MANIFEST_DIR")).join(dir).to_string_lossy()])
        .env("KUBECONFIG", "/dev/null")
        .output()
        .expect("kubectl");
    assert!(
        out.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse_stream(&String::from_utf8_lossy(&out.stdout))
}

pub fn parse_stream(text: &str) -> Vec<Value> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(text).unwrap_or_else(|e| panic!("rendered YAML: {e}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// Objects by (kind, namespace, name), with HELM_ONLY_LABELS removed.
pub fn by_identity(objects: Vec<Value>) -> BTreeMap<(String, String, String), Value> {
    let mut out = BTreeMap::new();
    for mut object in objects {
        if let Some(labels) = object["metadata"]["labels"].as_object_mut() {
            for label in HELM_ONLY_LABELS {
                labels.remove(label);
            }
        }
        let field = |f: &str| object["metadata"][f].as_str().unwrap_or_default().to_owned();
        let key =
            (object["kind"].as_str().expect("kind").to_owned(), field("namespace"), field("name"));
        assert!(out.insert(key.clone(), object).is_none(), "{key:?} rendered twice");
    }
    out
}

/// A small chart of an application whose templates set no namespace, as most charts do: a
/// ConfigMap (with date- and octal-like strings), a Secret and a Deployment consuming both.
pub fn write_shop_chart(dir: &Path) {
    std::fs::create_dir_all(dir.join("templates")).expect("chart dir");
    std::fs::write(dir.join("Chart.yaml"), "apiVersion: v2\nname: shop\nversion: 0.1.0\n")
        .expect("Chart.yaml");
    std::fs::write(
        dir.join("templates/config.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-config\n\
         data:\n  log-level: {{ .Values.logLevel | default \"info\" | quote }}\n  mode: \"0755\"\n\
         \x20 day: \"2001-12-14\"\n\
         ---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: {{ .Release.Name }}-db\n\
         stringData:\n  password: hunter2\n",
    )
    .expect("config template");
    std::fs::write(
        dir.join("templates/deployment.yaml"),
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ .Release.Name }}-web\n\
         spec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n\
         \x20   spec:\n      containers:\n        - name: app\n          image: web:1\n\
         \x20         env:\n            - {name: DAY, value: \"2001-12-14\"}\n\
         \x20         envFrom:\n            - configMapRef: {name: {{ .Release.Name }}-config}\n\
         \x20           - secretRef: {name: {{ .Release.Name }}-db}\n",
    )
    .expect("deployment template");
}
