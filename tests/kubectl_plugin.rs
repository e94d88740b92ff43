//! configsum as a kubectl plugin, installed as a user would: scripts/krew-package.sh builds the
//! archive and renders plugins/krew/configsum.yaml for it, the real krew installs it offline,
//! and the real kubectl runs `kubectl configsum explain …`, which answers exactly as
//! `configsum explain` does.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::json;

fn tool(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tools").join(name);
    assert!(
        path.exists(),
        "{} is missing: run scripts/install-krew.sh and scripts/install-helm.sh (make tools does)",
        path.display()
    );
    path
}

fn succeeded(what: &str, out: Output) -> String {
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what}: {}\n{stdout}\n{stderr}", out.status);
    stdout
}

#[test]
fn krew_installs_the_plugin_and_kubectl_configsum_explains() {
    let dir = std::env::temp_dir().join(format!("configsum-kubectl-plugin-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));

    // The archive and the manifest, as a release would publish them.
    let packaged = Command::new(root.join("scripts/krew-package.sh"))
        .arg(env!("CARGO_BIN_EXE_configsum"))
        .arg(dir.join("out"))
        .output()
        .expect("krew-package.sh");
    let archive = succeeded("krew-package.sh", packaged).trim().to_owned();
    let manifest = dir.join("out/configsum.yaml");
    let text = std::fs::read_to_string(&manifest).expect("manifest");
    assert!(text.contains("kind: Plugin") && text.contains("name: configsum"), "{text}");
    assert!(!text.contains("{{"), "every template field rendered: {text}");

    // krew checks the archive against the manifest's sha256 and links the binary.
    let krew_root = dir.join("krew");
    let install = Command::new(tool("krew"))
        .args(["install", "--manifest"])
        .arg(&manifest)
        .arg("--archive")
        .arg(&archive)
        .env("KREW_ROOT", &krew_root)
        .output()
        .expect("krew");
    succeeded("krew install", install);
    let link = krew_root.join("bin/kubectl-configsum");
    assert!(link.exists(), "krew linked {}", link.display());

    // A namespace as a Helm render would write it.
    let stream = [
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
            "stringData": {"password": "hunter2", "user": "shop"}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api"},
            "spec": {"selector": {"matchLabels": {"app": "api"}}, "template": {
                "metadata": {"labels": {"app": "api"}},
                "spec": {"containers": [{"name": "api", "image": "shop/api:1", "env": [{"name": "P",
                    "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}]}]}}}}),
    ]
    .map(|d| d.to_string())
    .join("\n---\n");
    let file = dir.join("shop.yaml");
    std::fs::write(&file, stream).expect("stream");
    let file = file.display().to_string();
    let question = ["explain", "secret/db", "-n", "shop", "--key", "password", "-f", &file];

    let path = format!(
        "{}:{}",
        krew_root.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let kubectl = |args: &[&str]| {
        let out = Command::new(tool("kubectl"))
            .args(args)
            .env("PATH", &path)
            .env("KUBECONFIG", "/dev/null")
            .output()
            .expect("kubectl");
        succeeded(&format!("kubectl {args:?}"), out)
    };
    let plugins = kubectl(&["plugin", "list", "--name-only"]);
    assert!(plugins.lines().any(|l| l.trim() == "kubectl-configsum"), "{plugins}");
    let mut args = vec!["configsum"];
    args.extend_from_slice(&question);
    let through_kubectl = kubectl(&args);
    let direct = Command::new(env!("CARGO_BIN_EXE_configsum")).args(question).output();
    let direct = succeeded("configsum explain", direct.expect("configsum"));
    assert_eq!(through_kubectl, direct, "the plugin answers as the binary does");
    assert!(
        through_kubectl.starts_with("secret/db in shop, key password: tracked by 1 workload\n")
    );
    assert!(!through_kubectl.contains("hunter2"));

    let help = kubectl(&["configsum", "explain", "--help"]);
    assert!(help.contains("Usage: kubectl configsum explain"), "{help}");
    let _ = std::fs::remove_dir_all(&dir);
}
