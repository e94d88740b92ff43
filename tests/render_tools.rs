//! `configsum render` run by the real tools (scripts/install-helm.sh puts
//! them in target/tools): Helm 3 runs the binary as its post-renderer, Helm 4
//! the plugin in plugins/helm/configsum-render, and kubectl's kustomize the
//! exec transformer in plugins/kustomize. Each must give the digests
//! `configsum render` gives on its own.

#[path = "support/chart.rs"]
mod chart;
#[path = "support/server.rs"]
mod server;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use server::TempDir;

const KEY: &str = "0123456789abcdef0123456789abcdef\n";

fn tool(path: &str) -> PathBuf {
    let tool = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tools").join(path);
    assert!(tool.exists(), "{} is missing: run scripts/install-helm.sh", tool.display());
    tool
}

/// The shop chart (tests/support/chart.rs) in `dir`.
fn chart(dir: &TempDir) -> PathBuf {
    let chart = dir.path("chart");
    chart::write_shop_chart(&chart);
    chart
}

fn ok(output: Output, what: &str) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{what} failed: {stderr}");
    String::from_utf8(output.stdout).expect("utf-8")
}

fn deployment_annotations(yaml: &str) -> Value {
    let documents: Vec<Value> = serde_saphyr::from_multiple(yaml).expect("YAML stream");
    let deployment = documents.iter().find(|d| d["kind"] == "Deployment").expect("a Deployment");
    deployment["spec"]["template"]["metadata"]["annotations"].clone()
}

/// What `configsum render` alone makes of the chart's plain render.
fn expected(dir: &TempDir, helm: &Path, chart: &Path, key: &str) -> Value {
    let plain = ok(
        Command::new(helm).args(["template", "rel"]).arg(chart).output().expect("helm"),
        "helm template",
    );
    let plain_file = dir.path("plain.yaml");
    std::fs::write(&plain_file, plain).expect("plain render");
    let rendered = ok(
        Command::new(env!("CARGO_BIN_EXE_configsum"))
            .args(["render", "--namespace", "shop", "--digest-key-file", key, "-f"])
            .arg(&plain_file)
            .output()
            .expect("configsum render"),
        "configsum render",
    );
    let annotations = deployment_annotations(&rendered);
    assert!(annotations["configmap.configsum.dev/rel-config"].is_string(), "{annotations}");
    assert!(annotations["secret.configsum.dev/rel-db"].is_string(), "{annotations}");
    annotations
}

#[test]
fn helm_3_runs_configsum_render_as_its_post_renderer() {
    let dir = TempDir::new("helm3-render");
    std::fs::write(dir.path("key"), KEY).expect("key");
    let key = dir.path("key").display().to_string();
    let (helm, chart) = (tool("helm3/helm"), chart(&dir));
    let out = ok(
        Command::new(&helm)
            .args(["template", "rel"])
            .arg(&chart)
            .args(["--namespace", "shop", "--post-renderer", env!("CARGO_BIN_EXE_configsum")])
            .args(["--post-renderer-args", "render", "--post-renderer-args", "--namespace=shop"])
            .arg(format!("--post-renderer-args=--digest-key-file={key}"))
            .output()
            .expect("helm 3"),
        "helm 3 template with the post-renderer",
    );
    assert_eq!(deployment_annotations(&out), expected(&dir, &helm, &chart, &key));
    assert!(out.contains("mode: \"0755\""), "strings stay strings: {out}");
}

#[test]
fn helm_4_runs_the_shipped_post_renderer_plugin() {
    let dir = TempDir::new("helm4-render");
    std::fs::write(dir.path("key"), KEY).expect("key");
    let key = dir.path("key").display().to_string();
    let (helm, chart) = (tool("helm4/helm"), chart(&dir));
    let plugin = Path::new(env!("CARGO_MANIFEST_DIR")).join("plugins/helm/configsum-render");
    // Helm's own state in the temp dir; configsum on PATH for the plugin.
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_configsum")).parent().expect("bin dir");
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let helm_cmd = |args: &[&str]| {
        let mut command = Command::new(&helm);
        command
            .args(args)
            .env("PATH", &path)
            // Helm 4.1 installs plugins under HELM_DATA_HOME whatever
            // HELM_PLUGINS says, but looks for them in HELM_PLUGINS: leave it unset.
            .env_remove("HELM_PLUGINS")
            .env("HELM_CONFIG_HOME", dir.path("config"))
            .env("HELM_CACHE_HOME", dir.path("cache"))
            .env("HELM_DATA_HOME", dir.path("data"));
        command
    };
    ok(
        helm_cmd(&["plugin", "install"]).arg(&plugin).output().expect("helm plugin install"),
        "helm 4 plugin install",
    );
    let out = ok(
        helm_cmd(&["template", "rel"])
            .arg(&chart)
            .args(["--namespace", "shop", "--post-renderer", "configsum-render"])
            .args(["--post-renderer-args", "--namespace=shop"])
            .arg(format!("--post-renderer-args=--digest-key-file={key}"))
            .output()
            .expect("helm 4"),
        "helm 4 template with the plugin",
    );
    assert_eq!(deployment_annotations(&out), expected(&dir, &helm, &chart, &key));
    // Helm 4 marks each document for the post-renderer and takes the mark off after.
    assert!(!out.contains("postrenderer.helm.sh"), "{out}");
}

#[test]
fn kustomize_runs_the_shipped_exec_transformer() {
    let dir = TempDir::new("kustomize-render");
    std::fs::write(dir.path("key"), KEY).expect("key");
    let key = dir.path("key").display().to_string();
    // Strings kustomize's YAML 1.1 reader would take for dates and numbers if
    // render wrote them plain: it failed on the key and wrote the values as
    // `2001-12-14T00:00:00Z`.
    let app = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\ndata: {mode: \"0755\", \"2001-12-15\": date-like key}\n---\n\
        apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  selector: {matchLabels: {app: web}}\n\
        \x20 template:\n    metadata: {labels: {app: web, since: \"2001-12-14\"}}\n    spec: {containers: [{name: c, image: x, \
        env: [{name: SINCE, value: \"2001-12-14\"}, {name: N, value: \"1__0\"}], envFrom: [{configMapRef: {name: app}}]}]}\n";
    std::fs::write(dir.path("app.yaml"), app).expect("app");
    std::fs::write(
        dir.path("kustomization.yaml"),
        "namespace: shop\nresources: [app.yaml]\ntransformers: [configsum.yaml]\n",
    )
    .expect("kustomization");
    std::fs::write(
        dir.path("configsum.yaml"),
        "apiVersion: configsum.dev/v1\nkind: Render\nmetadata: {name: configsum}\n",
    )
    .expect("transformer config");
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_configsum")).parent().expect("bin dir");
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let plugins = Path::new(env!("CARGO_MANIFEST_DIR")).join("plugins/kustomize");
    let out = ok(
        Command::new(tool("kubectl"))
            .args(["kustomize", "--enable-alpha-plugins"])
            .arg(&dir.0)
            .env("PATH", &path)
            .env("KUSTOMIZE_PLUGIN_HOME", &plugins)
            .env("CONFIGSUM_DIGEST_KEY_FILE", &key)
            .output()
            .expect("kubectl kustomize"),
        "kubectl kustomize with the transformer",
    );
    for line in [
        "  \"2001-12-15\": date-like key\n",
        "        since: \"2001-12-14\"\n",
        "          value: \"2001-12-14\"\n",
        "          value: \"1__0\"\n",
    ] {
        assert!(out.contains(line), "{line:?} in:\n{out}");
    }
    let annotations = deployment_annotations(&out);
    let digest = annotations["configmap.configsum.dev/app"].as_str().expect("a digest").to_owned();
    // The same as configsum render on the stream kustomize built without it.
    std::fs::write(dir.path("kustomization.yaml"), "namespace: shop\nresources: [app.yaml]\n")
        .expect("kustomization");
    let plain = ok(
        Command::new(tool("kubectl")).arg("kustomize").arg(&dir.0).output().expect("kustomize"),
        "kubectl kustomize",
    );
    std::fs::write(dir.path("plain.yaml"), plain).expect("plain");
    let rendered = ok(
        Command::new(env!("CARGO_BIN_EXE_configsum"))
            .args(["render", "--digest-key-file", &key, "-f"])
            .arg(dir.path("plain.yaml"))
            .output()
            .expect("configsum render"),
        "configsum render",
    );
    assert_eq!(deployment_annotations(&rendered)["configmap.configsum.dev/app"], digest);
}
