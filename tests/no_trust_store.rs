//! configsum never depends on the platform's trust store: a FROM-scratch image has no CA bundle,
//! and `configsum serve` once exited at start-up there ("cannot build the registry HTTP client")
//! even with no image tracked. Registry TLS trusts Mozilla's roots built into the binary plus
//! `--registry-ca-file`; a kubeconfig without a CA falls back to the same built-in roots.
//!
//! Two ways to take the trust store away:
//! - `SSL_CERT_FILE` an empty file and `SSL_CERT_DIR` an empty directory (what OpenSSL-style
//!   loaders read first): `serve`, `controller` and `render` start and work, and a registry over
//!   TLS is resolved with `--registry-ca-file` alone;
//! - a root filesystem holding only the binary, its shared libraries and the test's files, with
//!   no `/etc` at all, entered with `chroot` (needs root, as CI runs it; fails otherwise, as
//!   tests/image.rs does): `serve` answers a review over TLS, `controller` turns ready, `render`
//!   renders.

#[path = "support/digests.rs"]
mod digests;
#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;
#[path = "support/registry.rs"]
mod registry;
#[path = "support/server.rs"]
mod server;

use std::path::{Path, PathBuf};

use fake_apiserver::FakeApiServer;
use registry::Registry;
use serde_json::{Value, json};
use server::*;

const KEY: &str = "0123456789abcdef0123456789abcdef\n";
const OBJECTS: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app, namespace: team-a}\n\
                       data: {k: v}\n";

/// The digest of ConfigMap `team-a/app` with `data: {k: v}`.
fn app_digest() -> String {
    digests::config_map("team-a", "app", &[("k", "v")])
}

fn web(image: &str, track_images: bool) -> Value {
    let annotations = if track_images { json!({"configsum.dev/images": "*"}) } else { json!({}) };
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "team-a", "annotations": annotations},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": image, "imagePullPolicy": "Always",
                "envFrom": [{"configMapRef": {"name": "app"}}]}]}}}})
}

fn review(object: &Value) -> Vec<u8> {
    serde_json::to_vec(
        &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "no-trust-store", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
        "operation": "CREATE", "namespace": "team-a", "name": "web", "object": object}}),
    )
    .expect("json")
}

/// The annotations a review's patch writes on the template.
async fn admitted_annotations(server: &Server, object: &Value) -> Value {
    let (status, body) = server.post("/mutate?timeout=10s", review(object)).await;
    assert_eq!(status, 200);
    let (answer, patched) = apply_response(object, &body);
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    patched["spec"]["template"]["metadata"]["annotations"].clone()
}

/// An environment in which no system trust store can be found.
fn no_trust_store(dir: &TempDir) -> Vec<(&'static str, String)> {
    let empty_file = dir.path("empty-ca-file.pem");
    let empty_dir = dir.path("empty-ca-dir");
    std::fs::write(&empty_file, "").expect("empty CA file");
    std::fs::create_dir_all(&empty_dir).expect("empty CA dir");
    vec![
        ("SSL_CERT_FILE", empty_file.display().to_string()),
        ("SSL_CERT_DIR", empty_dir.display().to_string()),
    ]
}

fn borrowed<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

#[tokio::test]
async fn serve_controller_and_render_start_without_a_system_trust_store() {
    install_crypto_provider();
    let dir = TempDir::new("no-trust-store");
    make_certs(&dir.0, "ec-sec1");
    let env = no_trust_store(&dir);
    let env = borrowed(&env);
    std::fs::write(dir.path("objects.yaml"), OBJECTS).expect("objects");
    std::fs::write(dir.path("digest.key"), KEY).expect("key");
    let registry = Registry::anonymous_tls().await;
    let digest = registry.push_image("app", "1", "no trust store").await;
    let path = |name: &str| dir.path(name).display().to_string();
    let ca = registry.ca_file().expect("a TLS registry").display().to_string();

    let (cert, key, objects, digest_key) =
        (path("tls.crt"), path("tls.key"), path("objects.yaml"), path("digest.key"));
    let args = [
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--objects-from",
        &objects,
        "--digest-key-file",
        &digest_key,
        "--registry-ca-file",
        &ca,
        "--registry-allow",
        "127.0.0.1",
    ];
    let server = Server::start(&args, &env, &dir.path("ca.crt")).await;
    let annotations = admitted_annotations(&server, &web(&registry.image("app", "1"), true)).await;
    assert_eq!(
        annotations,
        json!({"configmap.configsum.dev/app": app_digest(), "image.configsum.dev/app": digest}),
        "{:?}",
        server.logs()
    );
    assert_eq!(server.terminate().await, Some(0));

    let api = FakeApiServer::start().await;
    let controller = start_controller(&api, &dir, &[configsum_bin()], &env).await;
    drop(controller);

    let rendered = render(&[configsum_bin()], &dir.0, &env);
    assert!(rendered.contains(&app_digest()), "{rendered}");
}

/// Serve, controller and render chrooted into a root filesystem with no `/etc` at all.
#[tokio::test]
async fn serve_controller_and_render_run_in_a_root_filesystem_without_etc() {
    // Not a pass when it cannot run: `make test` runs as root (CI does).
    assert!(rustix::process::geteuid().is_root(), "the chroot variant needs root (chroot)");
    install_crypto_provider();
    let dir = TempDir::new("no-etc-root");
    let root = dir.path("root");
    make_root(&root);
    make_certs(&root, "ec-sec1");
    std::fs::write(root.join("objects.yaml"), OBJECTS).expect("objects");
    std::fs::write(root.join("digest.key"), KEY).expect("key");
    assert!(!root.join("etc").exists());
    let root_text = root.display().to_string();
    let chroot = ["chroot", root_text.as_str(), "/configsum"];

    let args = [
        "--tls-cert",
        "/tls.crt",
        "--tls-key",
        "/tls.key",
        "--objects-from",
        "/objects.yaml",
        "--digest-key-file",
        "/digest.key",
    ];
    let server = Server::start_program(&chroot, &args, &[], &root.join("ca.crt")).await;
    let annotations = admitted_annotations(&server, &web("web:1", false)).await;
    assert_eq!(annotations, json!({"configmap.configsum.dev/app": app_digest()}));
    assert_eq!(server.terminate().await, Some(0));

    let api = FakeApiServer::start().await;
    api.kubeconfig_for(&root, "chrooted");
    let controller = start_controller(&api, &dir, &chroot, &[]).await;
    drop(controller);

    let rendered = render(&chroot, &root, &[]);
    assert!(rendered.contains(&app_digest()), "{rendered}");
}

fn configsum_bin() -> &'static str {
    env!("CARGO_BIN_EXE_configsum")
}

/// Starts `configsum controller` (through `program`) against `api` and waits until ready. In a
/// chroot, paths are the root's: the kubeconfig and key are at `/`.
async fn start_controller(
    api: &FakeApiServer,
    dir: &TempDir,
    program: &[&str],
    env: &[(&str, &str)],
) -> tokio::process::Child {
    let chrooted = program.len() > 1;
    let (kubeconfig, key) = if chrooted {
        ("/kubeconfig-chrooted".to_owned(), "/digest.key".to_owned())
    } else {
        let kubeconfig = api.kubeconfig_for(&dir.0, "plain");
        (kubeconfig.display().to_string(), dir.path("digest.key").display().to_string())
    };
    let mut env = env.to_vec();
    env.push(("KUBECONFIG", &kubeconfig));
    let args = [
        "controller",
        "--digest-key-file",
        &key,
        "--metrics-listen",
        "127.0.0.1:0",
        "--lease-namespace",
        "configsum-system",
        "--identity",
        "no-trust-store",
        "--log-format",
        "json",
    ];
    let (child, logs, line) =
        spawn_program(program, &args, &env, "configsum controller started").await;
    until_ready(line["metrics_listen"].as_str().expect("metrics_listen"), &logs).await;
    child
}

/// Runs `configsum render` (through `program`) over a Deployment and returns its output. `dir`
/// holds objects.yaml and digest.key (the root, in a chroot).
fn render(program: &[&str], dir: &Path, env: &[(&str, &str)]) -> String {
    let stream = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: team-a}\n\
                  spec:\n  template:\n    spec:\n      containers:\n      - name: app\n        \
                  image: web:1\n        envFrom: [{configMapRef: {name: app}}]\n";
    std::fs::write(dir.join("stream.yaml"), stream).expect("stream");
    let inside = |name: &str| -> String {
        if program.len() > 1 { format!("/{name}") } else { dir.join(name).display().to_string() }
    };
    let (program, before) = program.split_first().expect("program");
    let output = std::process::Command::new(program)
        .args(before)
        .args(["render", "-f", &inside("stream.yaml"), "--objects-from", &inside("objects.yaml")])
        .args(["--digest-key-file", &inside("digest.key")])
        .envs(env.iter().copied())
        .output()
        .expect("run render");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A root filesystem with the binary and the shared libraries `ldd` names, nothing else.
fn make_root(root: &Path) {
    std::fs::create_dir_all(root).expect("root");
    let binary = PathBuf::from(configsum_bin());
    link_or_copy(&binary, &root.join("configsum"));
    let ldd = std::process::Command::new("ldd").arg(&binary).output().expect("ldd");
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)" or "/lib64/ld-linux-x86-64.so.2 (0x…)"
        let library = line.split("=>").last().and_then(|l| l.split_whitespace().next());
        if let Some(library) = library.filter(|l| l.starts_with('/')) {
            let inside = root.join(library.trim_start_matches('/'));
            std::fs::create_dir_all(inside.parent().expect("a parent")).expect("lib dir");
            std::fs::copy(library, &inside).expect("copy a library");
        }
    }
}

fn link_or_copy(from: &Path, to: &Path) {
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).expect("copy the binary");
    }
}
