//! The container image `make image` builds (scripts/build-image.sh), as a user's cluster would
//! get it: its OCI archive's config (numeric non-root user, entrypoint, `MALLOC_ARENA_MAX`), a
//! root filesystem holding one static binary and the CA roots and no shell; `--version` and a
//! `serve` answering a review over TLS, run from the image's own root filesystem as its user,
//! resolving registries by name (through `/etc/hosts`, and through DNS) over TLS with
//! `--registry-ca-file` and over plain HTTP; the controller turning ready from the same root
//! without the CA file; and the archive pushed to a real registry keeps its digest, which
//! configsum's own registry client resolves.
//!
//! Needs root (chroot, port 53 on loopback), skopeo and umoci (scripts/install-test-deps.sh),
//! and the archive (`make image`; `make test` builds it first).

#[path = "support/digests.rs"]
mod digests;
#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;
#[path = "support/registry.rs"]
mod registry;
#[path = "support/server.rs"]
mod server;

use std::path::{Path, PathBuf};
use std::process::Command;

use configsum::registry::{ImageRef, RegistryClient, RegistryConfig, RegistryMetrics, Resolution};
use registry::Registry;
use serde_json::{Value, json};
use server::*;

const KEY: &str = "0123456789abcdef0123456789abcdef\n";
/// A name only the test's DNS server knows.
const DNS_NAME: &str = "registry.configsum.test";

fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

fn archive() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("target/image/configsum-{}.tar", version()));
    assert!(path.is_file(), "{} is missing: run `make image`", path.display());
    path
}

/// A command that must succeed; its stdout.
fn run(program: &str, args: &[&str]) -> String {
    let out =
        Command::new(program).args(args).output().unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// Every path under `root`, relative, sorted.
fn files(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
            let path = entry.path();
            let relative = path.strip_prefix(root).expect("under root").display().to_string();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                out.push(relative);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

/// Answers every A query with 127.0.0.1 and every other query with no answer, on
/// 127.0.0.1:53, for as long as the test runs: the cluster DNS a pod's resolv.conf names.
async fn dns_server() -> tokio::task::JoinHandle<()> {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:53")
        .await
        .expect("port 53 on loopback is free for the test's DNS server");
    tokio::spawn(async move {
        let mut buf = [0u8; 512];
        while let Ok((len, from)) = socket.recv_from(&mut buf).await {
            let query = &buf[..len];
            // Header (12 bytes), then the question: labels up to a zero byte, type, class.
            let Some(end) = query.iter().skip(12).position(|b| *b == 0).map(|i| 12 + i + 5) else {
                continue;
            };
            if end > len {
                continue;
            }
            let a_query = query[end - 4..end - 2] == [0, 1];
            let mut answer = Vec::with_capacity(end + 16);
            answer.extend_from_slice(&query[..2]);
            answer.extend_from_slice(&[0x81, 0x80, 0, 1, 0, u8::from(a_query), 0, 0, 0, 0]);
            answer.extend_from_slice(&query[12..end]);
            if a_query {
                // A pointer to the question's name, type A, class IN, TTL 60, 127.0.0.1.
                answer
                    .extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 127, 0, 0, 1]);
            }
            let _ = socket.send_to(&answer, from).await;
        }
    })
}

fn deployment(image: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "team-a", "annotations": {"configsum.dev/images": "*"}},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": image,
                "envFrom": [{"configMapRef": {"name": "app"}}]}]}}}})
}

async fn admitted(server: &Server, object: &Value) -> Value {
    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "image", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
        "operation": "CREATE", "namespace": "team-a", "name": "web", "object": object}});
    let (status, body) = server.post("/mutate?timeout=10s", review.to_string().into_bytes()).await;
    assert_eq!(status, 200);
    let (answer, patched) = apply_response(object, &body);
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    patched["spec"]["template"]["metadata"]["annotations"].clone()
}

#[tokio::test]
async fn the_image_holds_one_static_binary_and_serves_from_its_own_root_filesystem() {
    assert!(rustix::process::geteuid().is_root(), "the image test needs root (chroot, port 53)");
    install_crypto_provider();
    let archive = archive();
    let archive_ref = format!("oci-archive:{}", archive.display());
    let dir = TempDir::new("image");

    // The config a runtime reads.
    let config: Value =
        serde_json::from_str(&run("skopeo", &["inspect", "--config", &archive_ref])).expect("json");
    let config = &config["config"];
    assert_eq!(config["User"], "65532:65532", "a numeric non-root user");
    assert_eq!(config["Entrypoint"], json!(["/configsum"]));
    assert!(config["Cmd"].is_null(), "{config}");
    assert!(
        config["Env"].as_array().is_some_and(|env| env.contains(&json!("MALLOC_ARENA_MAX=2"))),
        "{config}"
    );

    // Its root filesystem: the binary and the CA roots, nothing else (no shell).
    let layout = format!("oci:{}:configsum", dir.path("layout").display());
    run("skopeo", &["copy", "--quiet", &archive_ref, &layout]);
    let bundle = dir.path("bundle");
    let image = format!("{}:configsum", dir.path("layout").display());
    run("umoci", &["unpack", "--image", &image, &bundle.display().to_string()]);
    let root = bundle.join("rootfs");
    assert_eq!(files(&root), ["configsum", "etc/ssl/certs/ca-certificates.crt"]);
    let headers = run(
        "readelf",
        &["--program-headers", "--dynamic", &root.join("configsum").display().to_string()],
    );
    assert!(!headers.contains("INTERP"), "no program interpreter: a static binary\n{headers}");
    assert!(!headers.contains("(NEEDED)"), "no shared library\n{headers}");
    let size = std::fs::metadata(root.join("configsum")).expect("binary").len();
    let archive_size = std::fs::metadata(&archive).expect("archive").len();
    eprintln!("image: binary {size} bytes, OCI archive {archive_size} bytes");

    // Run from the image's root, as its user. What a pod adds: /etc/hosts and resolv.conf
    // (the kubelet mounts them), the serving certificate and key, a digest key, objects.
    let root_text = root.display().to_string();
    let user = "--userspec=65532:65532";
    let out = run("chroot", &[user, &root_text, "/configsum", "--version"]);
    assert_eq!(out, format!("configsum {}\n", version()));

    let tls_registry = Registry::anonymous_tls().await;
    let http_registry = Registry::anonymous().await;
    let by_hosts = tls_registry.push_image("app", "1", "resolved through /etc/hosts").await;
    let by_dns = http_registry.push_image("app", "1", "resolved through DNS").await;
    let _dns = dns_server().await;
    let etc = root.join("etc");
    std::fs::write(etc.join("hosts"), "127.0.0.1 localhost\n").expect("hosts");
    std::fs::write(etc.join("resolv.conf"), "nameserver 127.0.0.1\n").expect("resolv.conf");
    let mounted = root.join("run/configsum");
    std::fs::create_dir_all(&mounted).expect("mount dir");
    make_certs(&mounted, "ec-sec1");
    std::fs::write(mounted.join("digest.key"), KEY).expect("key");
    std::fs::write(
        mounted.join("objects.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app, namespace: team-a}\ndata: {k: v}\n",
    )
    .expect("objects");
    std::fs::copy(tls_registry.ca_file().expect("a CA"), mounted.join("registry-ca.crt"))
        .expect("registry CA");
    run("chmod", &["-R", "a+rX", &mounted.display().to_string()]);

    let tls_host = format!("localhost:{}", tls_registry.port());
    let dns_host = format!("{DNS_NAME}:{}", http_registry.port());
    let chroot = ["chroot", user, root_text.as_str(), "/configsum"];
    let args = [
        "--tls-cert",
        "/run/configsum/tls.crt",
        "--tls-key",
        "/run/configsum/tls.key",
        "--objects-from",
        "/run/configsum/objects.yaml",
        "--digest-key-file",
        "/run/configsum/digest.key",
        "--registry-ca-file",
        "/run/configsum/registry-ca.crt",
        "--registry-allow",
        &tls_host,
        "--registry-allow",
        &dns_host,
        "--insecure-registry",
        &dns_host,
    ];
    let server = Server::start_program(&chroot, &args, &[], &mounted.join("ca.crt")).await;
    let config_map = digests::config_map("team-a", "app", &[("k", "v")]);
    let tls_image = format!("{tls_host}/app:1");
    let annotations = admitted(&server, &deployment(&tls_image)).await;
    assert_eq!(
        annotations,
        json!({"configmap.configsum.dev/app": config_map, "image.configsum.dev/app": by_hosts}),
        "over TLS, the name from /etc/hosts: {:?}",
        server.logs()
    );
    let dns_image = format!("{dns_host}/app:1");
    let annotations = admitted(&server, &deployment(&dns_image)).await;
    assert_eq!(
        annotations,
        json!({"configmap.configsum.dev/app": config_map, "image.configsum.dev/app": by_dns}),
        "the name from DNS: {:?}",
        server.logs()
    );
    assert_eq!(server.terminate().await, Some(0));

    // The controller from the same root, without the CA file this time: it needs none.
    std::fs::remove_file(etc.join("ssl/certs/ca-certificates.crt")).expect("remove the CA roots");
    let api = fake_apiserver::FakeApiServer::start().await;
    api.kubeconfig_for(&mounted, "image");
    run("chmod", &["-R", "a+rX", &mounted.display().to_string()]);
    let args = [
        "controller",
        "--digest-key-file",
        "/run/configsum/digest.key",
        "--metrics-listen",
        "127.0.0.1:0",
        "--lease-namespace",
        "configsum-system",
        "--identity",
        "image",
        "--log-format",
        "json",
    ];
    let env = [("KUBECONFIG", "/run/configsum/kubeconfig-image")];
    let (controller, logs, line) =
        spawn_program(&chroot, &args, &env, "configsum controller started").await;
    until_ready(line["metrics_listen"].as_str().expect("metrics_listen"), &logs).await;
    drop(controller);

    // Pushed to a registry, the image keeps its digest, and configsum resolves it.
    let manifest: Value =
        serde_json::from_str(&run("skopeo", &["inspect", &archive_ref])).expect("json");
    let digest = manifest["Digest"].as_str().expect("digest").to_owned();
    let pushed = format!("docker://{}/configsum:{}", http_registry.host(), version());
    run(
        "skopeo",
        &[
            "copy",
            "--quiet",
            "--preserve-digests",
            "--dest-tls-verify=false",
            &archive_ref,
            &pushed,
        ],
    );
    let client = RegistryClient::new(
        RegistryConfig {
            insecure_registries: vec![http_registry.host()],
            allowed_registries: vec![http_registry.host()],
            ..RegistryConfig::default()
        },
        RegistryMetrics::default(),
    )
    .expect("a registry client");
    let image = ImageRef::parse(&format!("{}/configsum:{}", http_registry.host(), version()))
        .expect("a reference");
    match client.resolve(&image, &[]).await {
        Resolution::Digest(resolved) => assert_eq!(resolved.as_str(), digest, "the same digest"),
        other => panic!("not resolved: {other:?}"),
    }
}

/// The Dockerfile, for builders with Docker, passes hadolint and gives the image the layout
/// scripts/build-image.sh gives it (it cannot be built here: no Docker daemon, no network).
#[test]
fn the_dockerfile_passes_hadolint_and_matches_the_buildah_layout() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let hadolint = root.join("target/tools-venv/bin/hadolint");
    assert!(hadolint.is_file(), "run scripts/install-python-tools.sh (make tools does)");
    run(&hadolint.display().to_string(), &[&root.join("Dockerfile").display().to_string()]);
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile")).expect("Dockerfile");
    let script = std::fs::read_to_string(root.join("scripts/build-image.sh")).expect("script");
    for (docker, buildah) in [
        ("FROM scratch", "from --pull=never scratch"),
        ("USER 65532:65532", "--user 65532:65532"),
        ("ENTRYPOINT [\"/configsum\"]", "--entrypoint '[\"/configsum\"]'"),
        ("ENV MALLOC_ARENA_MAX=2", "--env MALLOC_ARENA_MAX=2"),
        ("EXPOSE 8443/tcp 9090/tcp", "--port 8443/tcp --port 9090/tcp"),
        ("target-feature=+crt-static", "target-feature=+crt-static"),
        ("/etc/ssl/certs/ca-certificates.crt", "/etc/ssl/certs/ca-certificates.crt"),
    ] {
        assert!(dockerfile.contains(docker), "the Dockerfile lacks {docker:?}");
        assert!(script.contains(buildah), "build-image.sh lacks {buildah:?}");
    }
}
