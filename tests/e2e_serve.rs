//! The real binary over real TLS: the digest test vectors end to end, bad
//! bodies, start-up refusals, flags from the environment, metrics, logs and
//! SIGTERM.

#[path = "support/server.rs"]
mod server;

use std::time::Duration;

use serde_json::{Value, json};
use server::*;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// ConfigMap A and Secret S of the digest test vectors (src/core/digest.rs).
const OBJECTS: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: app-config, namespace: team-a}
data:
  log-level: debug
  app.properties: "a=1\nb=2\n"
binaryData:
  logo.png: iVBORw0K
---
apiVersion: v1
kind: Secret
metadata: {name: db, namespace: team-a}
data: {password: aHVudGVyMg==, username: YWRtaW4=}
"#;
const KEY: &str = "0123456789abcdef0123456789abcdef\n";
const CM_A_ALL: &str = "sha256:6aa84d86725084df4dd56c66212d1b00c3fcb3145f0eb4e0e7ecf0336ab38df5";
const CM_A_LOG_LEVEL: &str =
    "sha256:ae0ce9e1a354a9cf4fe1be0dadc77d4a1e1f972409004e0ad0e5813a6062c866";
const S_KEYED: &str =
    "hmac-sha256:ee8d3eae330430830554df0f8b303d6ed3b252aacea417363027e8c638c575d2";
const S_PLAIN: &str = "sha256:ce9453749df7a28f03dd7450a871546b6f0aa2dca98802812835eac969b0a5da";

struct Setup {
    dir: TempDir,
}

impl Setup {
    fn new(label: &str, key_type: &str) -> Setup {
        install_crypto_provider();
        let dir = TempDir::new(label);
        make_certs(&dir.0, key_type);
        std::fs::write(dir.path("objects.yaml"), OBJECTS).expect("objects");
        std::fs::write(dir.path("digest.key"), KEY).expect("key");
        Setup { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path(name).display().to_string()
    }

    async fn start(&self, extra: &[&str]) -> Server {
        let (cert, key, objects, digest) = (
            self.path("tls.crt"),
            self.path("tls.key"),
            self.path("objects.yaml"),
            self.path("digest.key"),
        );
        let mut args = vec![
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--objects-from",
            &objects,
            "--digest-key-file",
            &digest,
        ];
        args.extend_from_slice(extra);
        Server::start(&args, &[], &self.dir.path("ca.crt")).await
    }
}

fn deployment(operation: &str, object: &Value) -> Vec<u8> {
    serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "e2e-uid", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
        "operation": operation, "namespace": "team-a", "name": "web", "object": object, "oldObject": null}}))
    .expect("json")
}

fn web() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "team-a"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": "web:1",
                "env": [{"name": "LOG", "valueFrom": {"configMapKeyRef": {"name": "app-config", "key": "log-level"}}}],
                "envFrom": [{"secretRef": {"name": "db"}}]}]}}}})
}

#[tokio::test]
async fn spec_digests_over_tls_with_every_key_format() {
    for key_type in ["ec-sec1", "ec-pkcs8", "rsa-pkcs1"] {
        let setup = Setup::new(key_type, key_type);
        let server = setup.start(&[]).await;
        let (status, body) = server.post("/mutate?timeout=10s", deployment("CREATE", &web())).await;
        assert_eq!(status, 200, "{key_type}");
        let (answer, patched) = apply_response(&web(), &body);
        assert_eq!(answer["response"]["uid"], "e2e-uid");
        assert_eq!(answer["response"]["allowed"], true);
        assert_eq!(
            patched["spec"]["template"]["metadata"]["annotations"],
            json!({"configmap.configsum.dev/app-config": CM_A_LOG_LEVEL, "secret.configsum.dev/db": S_KEYED}),
            "{key_type}"
        );
        // Admitting the patched object again yields no patch.
        let (_, body) = server.post("/mutate", deployment("UPDATE", &patched)).await;
        let (answer, _) = apply_response(&patched, &body);
        assert!(
            answer["response"].get("patch").is_none()
                && answer["response"].get("patchType").is_none()
        );
        assert_eq!(server.terminate().await, Some(0));
    }
}

#[tokio::test]
async fn tls_1_2_and_1_3_clients_are_served_the_full_chain() {
    let setup = Setup::new("tls-versions", "ec-sec1");
    let server = setup.start(&[]).await;
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let connector = tls_connector(&server.ca, Some(&[version]));
        let mut sender = server.connect(connector).await;
        let (status, _) = send(&mut sender, "GET", "/healthz", Vec::new()).await;
        assert_eq!(status, 200);
    }
    assert_eq!(server.terminate().await, Some(0));
}

#[tokio::test]
async fn bad_bodies_get_400_and_413_and_the_server_keeps_serving() {
    let setup = Setup::new("bad-bodies", "ec-sec1");
    let server = setup.start(&[]).await;
    for body in [
        &b"{\"nope\""[..],
        b"{}",
        br#"{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}"#,
    ] {
        let (status, answer) = server.post("/mutate", body.to_vec()).await;
        assert_eq!(status, 400);
        let answer: Value = serde_json::from_slice(&answer).expect("JSON error body");
        assert!(answer["error"].is_string());
    }
    let (status, answer) = server.post("/mutate", vec![b'x'; 8 * 1024 * 1024 + 1]).await;
    assert_eq!(status, 413);
    assert!(
        serde_json::from_slice::<Value>(&answer).expect("JSON error body")["error"].is_string()
    );
    // An AdmissionReview whose object is not a Deployment: allowed with a warning.
    let (status, body) = server
        .post("/mutate", deployment("CREATE", &json!({"kind": "Pod", "apiVersion": "v1"})))
        .await;
    assert_eq!(status, 200);
    let (answer, _) = apply_response(&web(), &body);
    assert_eq!(answer["response"]["allowed"], true);
    assert_eq!(answer["response"]["warnings"].as_array().map(Vec::len), Some(1));
    // Still serving.
    let (status, _) = server.post("/mutate", deployment("CREATE", &web())).await;
    assert_eq!(status, 200);
    assert_eq!(server.terminate().await, Some(0));
}

#[tokio::test]
async fn sigterm_finishes_in_flight_requests_and_exits_zero() {
    let setup = Setup::new("sigterm", "ec-sec1");
    let server = setup.start(&[]).await;
    let body = deployment("CREATE", &web());
    // Send the headers and half the body, so the request is in flight.
    let tcp = tokio::net::TcpStream::connect(&server.addr).await.expect("connect");
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let mut tls = server.connector().connect(name, tcp).await.expect("handshake");
    let head = format!(
        "POST /mutate HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await.expect("write head");
    let (first, rest) = body.split_at(body.len() / 2);
    tls.write_all(first).await.expect("write first half");
    tls.flush().await.expect("flush");

    let pid = server.child.id().expect("pid").to_string();
    assert!(
        std::process::Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success()
    );
    let logs = server.logs.clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !logs.lock().expect("logs").iter().any(|l| l.contains("shutting down")) {
        assert!(tokio::time::Instant::now() < deadline, "no shutdown log");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // New connections are refused once shutdown began.
    assert!(
        tokio::net::TcpStream::connect(&server.addr).await.is_err(),
        "still accepting after SIGTERM"
    );

    tls.write_all(rest).await.expect("write second half");
    tls.flush().await.expect("flush");
    let mut response = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&response).contains("\"uid\":\"e2e-uid\"") {
        let n = tokio::time::timeout(Duration::from_secs(10), tls.read(&mut buf))
            .await
            .expect("answer")
            .expect("read");
        assert!(
            n > 0,
            "connection closed before the answer: {}",
            String::from_utf8_lossy(&response)
        );
        response.extend_from_slice(&buf[..n]);
    }
    assert!(response.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&response));
    drop(tls);
    assert_eq!(server.terminate_wait().await, Some(0));
}

#[tokio::test]
async fn refuses_to_start_without_a_usable_digest_key() {
    let setup = Setup::new("keys", "ec-sec1");
    std::fs::write(setup.dir.path("short.key"), "too-short\n").expect("short key");
    let (cert, key, objects) =
        (setup.path("tls.crt"), setup.path("tls.key"), setup.path("objects.yaml"));
    let base = [
        "serve",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--objects-from",
        &objects,
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
    ];
    let run = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_configsum"))
            .args(base)
            .args(extra)
            .output()
            .expect("run configsum");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, stderr) = run(&[]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("no --digest-key-file") && stderr.contains("--allow-plain-secret-digests"),
        "{stderr}"
    );
    let short = setup.path("short.key");
    let (code, stderr) = run(&["--digest-key-file", &short]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("line 1 is 9 bytes") && !stderr.contains("too-short"), "{stderr}");
    let (code, stderr) = run(&["--digest-key-file", "/nonexistent/key"]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("cannot read digest key file /nonexistent/key"), "{stderr}");
    // A key that does not belong to the certificate.
    let other = TempDir::new("other-cert");
    make_certs(&other.0, "ec-sec1");
    let other_key = other.path("tls.key").display().to_string();
    let digest = setup.path("digest.key");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_configsum"))
        .args([
            "serve",
            "--tls-cert",
            &cert,
            "--tls-key",
            &other_key,
            "--objects-from",
            &objects,
            "--digest-key-file",
            &digest,
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not fit the certificate"));
}

/// An `--objects-from` file with a language tag: serve refuses to start, naming the file, the
/// document, the object and the line; a later careless loader of the file is not its concern.
#[test]
fn refuses_to_start_on_a_tag_outside_yaml_s_core_schema() {
    let setup = Setup::new("tags", "ec-sec1");
    let tagged = format!(
        "{OBJECTS}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: evil, namespace: team-a}}\n\
         data:\n  run: !!python/object/apply:os.system [\"id\"]\n"
    );
    std::fs::write(setup.dir.path("tagged.yaml"), tagged).expect("tagged objects");
    let (cert, key, objects) =
        (setup.path("tls.crt"), setup.path("tls.key"), setup.path("tagged.yaml"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_configsum"))
        .args(["serve", "--tls-cert", &cert, "--tls-key", &key, "--objects-from", &objects])
        .args(["--allow-plain-secret-digests", "--listen", "127.0.0.1:0"])
        .args(["--metrics-listen", "127.0.0.1:0"])
        .output()
        .expect("run configsum");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let expected = format!(
        "{objects}: document 3 (ConfigMap team-a/evil): tag outside YAML's core schema at line 20, \
         column 8"
    );
    assert!(stderr.contains(&expected), "{expected} in:\n{stderr}");
}

#[tokio::test]
async fn every_flag_can_come_from_the_environment() {
    let setup = Setup::new("env", "ec-sec1");
    let (cert, key, objects) =
        (setup.path("tls.crt"), setup.path("tls.key"), setup.path("objects.yaml"));
    let env = [
        ("CONFIGSUM_TLS_CERT", cert.as_str()),
        ("CONFIGSUM_TLS_KEY", key.as_str()),
        ("CONFIGSUM_OBJECTS_FROM", objects.as_str()),
        ("CONFIGSUM_ALLOW_PLAIN_SECRET_DIGESTS", "true"),
        ("CONFIGSUM_ANNOTATION_DOMAIN", "example.com"),
        ("CONFIGSUM_LOOKUP_TIMEOUT", "1500ms"),
        ("CONFIGSUM_ON_LOOKUP_ERROR", "deny"),
    ];
    let server = Server::start(&[], &env, &setup.dir.path("ca.crt")).await;
    let (_, body) = server.post("/mutate", deployment("CREATE", &web())).await;
    let (_, patched) = apply_response(&web(), &body);
    assert_eq!(
        patched["spec"]["template"]["metadata"]["annotations"],
        json!({"configmap.example.com/app-config": CM_A_LOG_LEVEL, "secret.example.com/db": S_PLAIN})
    );
    assert!(
        server.logged(|l| l.contains("plain SHA-256")).await,
        "the plain-digest warning is logged"
    );
    assert_eq!(server.terminate().await, Some(0));
}

#[tokio::test]
async fn metrics_and_one_log_line_per_admission_without_secret_values() {
    let setup = Setup::new("observability", "ec-sec1");
    let (cert, key, objects, digest) = (
        setup.path("tls.crt"),
        setup.path("tls.key"),
        setup.path("objects.yaml"),
        setup.path("digest.key"),
    );
    let args = [
        "--tls-cert",
        cert.as_str(),
        "--tls-key",
        &key,
        "--objects-from",
        &objects,
        "--digest-key-file",
        &digest,
    ];
    let server =
        Server::start(&args, &[("CONFIGSUM_LOG", "trace")], &setup.dir.path("ca.crt")).await;
    let whole = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "c",
            "envFrom": [{"configMapRef": {"name": "app-config"}}]}],
            "volumes": [{"name": "s", "secret": {"secretName": "db"}}]}}}});
    let (_, body) = server.post("/mutate", deployment("CREATE", &whole)).await;
    let (_, patched) = apply_response(&whole, &body);
    assert_eq!(
        patched["spec"]["template"]["metadata"]["annotations"],
        json!({"configmap.configsum.dev/app-config": CM_A_ALL, "secret.configsum.dev/db": S_KEYED})
    );
    server.post("/mutate", b"garbage".to_vec()).await;

    let (status, metrics) = http_get(&server.metrics_addr, "/metrics").await;
    assert_eq!(status, 200);
    assert!(metrics.contains(r#"configsum_admissions_total{kind="Deployment",operation="CREATE",outcome="mutated"} 1"#), "{metrics}");
    assert!(metrics.contains(r#"outcome="bad_request"} 1"#), "{metrics}");
    assert!(metrics.contains("configsum_admission_duration_seconds_bucket"), "{metrics}");
    assert_eq!(http_get(&server.metrics_addr, "/healthz").await.0, 200);
    assert_eq!(server.get("/readyz").await.0, 200);

    let logs = server.terminate_logs().await;
    let answered: Vec<Value> = logs
        .iter()
        .filter(|l| l.contains("admission answered"))
        .map(|l| serde_json::from_str(l).expect("JSON log line"))
        .collect();
    assert_eq!(answered.len(), 1);
    let line = &answered[0];
    assert_eq!(line["uid"], "e2e-uid");
    assert_eq!(line["kind"], "Deployment");
    assert_eq!(line["object"], "team-a/web");
    assert_eq!(line["operation"], "CREATE");
    assert_eq!(line["patch_ops"], 4);
    assert!(line["duration_ms"].is_number());
    for secret in ["hunter2", "aHVudGVyMg", "0123456789abcdef"] {
        assert!(!logs.iter().any(|l| l.contains(secret)), "{secret} leaked into the logs");
    }
}

#[tokio::test]
async fn dev_certificates_verify_for_the_service_dns_name() {
    install_crypto_provider();
    let dir = TempDir::new("service-certs");
    make_certs_for(&dir.0, "ec-sec1", &[]);
    std::fs::write(dir.path("objects.yaml"), OBJECTS).expect("objects");
    let (cert, key, objects) = (dir.path("tls.crt"), dir.path("tls.key"), dir.path("objects.yaml"));
    let (cert, key, objects) =
        (cert.display().to_string(), key.display().to_string(), objects.display().to_string());
    let args = [
        "--tls-cert",
        cert.as_str(),
        "--tls-key",
        &key,
        "--objects-from",
        &objects,
        "--allow-plain-secret-digests",
    ];
    let server = Server::start(&args, &[], &dir.path("ca.crt")).await;
    for name in [
        "configsum-webhook.configsum-system.svc",
        "configsum-webhook.configsum-system.svc.cluster.local",
    ] {
        assert!(server.handshake_as(name).await.is_ok(), "{name} verifies");
    }
    assert!(server.handshake_as("other.configsum-system.svc").await.is_err(), "other names do not");
    assert_eq!(server.terminate().await, Some(0));
}

#[tokio::test]
async fn a_body_that_stalls_is_answered_408_after_ten_seconds_and_serving_goes_on() {
    let setup = Setup::new("stalled-body", "ec-sec1");
    let server = setup.start(&[]).await;
    let tcp = tokio::net::TcpStream::connect(&server.addr).await.expect("connect");
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let mut tls = server.connector().connect(name, tcp).await.expect("handshake");
    let head = "POST /mutate HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n";
    tls.write_all(head.as_bytes()).await.expect("write head");
    tls.write_all(b"{\"apiVersion\": ").await.expect("write a little of the body");
    tls.flush().await.expect("flush");
    let started = tokio::time::Instant::now();
    let mut response = Vec::new();
    let mut buf = [0u8; 4096];
    while !response.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(15), tls.read(&mut buf))
            .await
            .expect("an answer within 15 s")
            .expect("read");
        assert!(n > 0, "closed without an answer");
        response.extend_from_slice(&buf[..n]);
    }
    let waited = started.elapsed();
    eprintln!("a stalled body was answered after {waited:?}");
    assert!(response.starts_with(b"HTTP/1.1 408"), "{}", String::from_utf8_lossy(&response));
    assert!(
        waited >= Duration::from_millis(9_900) && waited < Duration::from_secs(12),
        "{waited:?}"
    );
    let (status, _) = server.post("/mutate", deployment("CREATE", &web())).await;
    assert_eq!(status, 200, "still serving");
    assert_eq!(server.terminate().await, Some(0));
}
