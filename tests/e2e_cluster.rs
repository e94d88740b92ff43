//! The real binary against the fake API server: freshness, faults, deadlines,
//! concurrency, certificate rotation, SIGTERM and log hygiene.

#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;
#[path = "support/server.rs"]
mod server;

use std::time::{Duration, Instant};

use base64::Engine as _;
use configsum::lookup::SERVER_WIDE_LOOKUPS;
use fake_apiserver::{FakeApiServer, Fault};
use serde_json::{Value, json};
use server::*;

const NS: &str = "team-a";
const CM: &str = "configmap.configsum.dev/app-config";
const SECRET: &str = "secret.configsum.dev/db";

struct Cluster {
    api: FakeApiServer,
    dir: TempDir,
}

impl Cluster {
    async fn new(label: &str) -> Cluster {
        install_crypto_provider();
        let dir = TempDir::new(label);
        make_certs(&dir.0, "ec-sec1");
        std::fs::write(dir.path("digest.key"), "0123456789abcdef0123456789abcdef\n").expect("key");
        let api = FakeApiServer::start().await;
        api.put_config_map(NS, "app-config", &[("log-level", "debug")]);
        api.put_secret(NS, "db", &[("password", "hunter2-e2e-secret")]);
        Cluster { api, dir }
    }

    async fn start(&self, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let server = self.start_unready(extra, env).await;
        wait_ready(&server).await;
        server
    }

    async fn start_unready(&self, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let kubeconfig = self.api.kubeconfig(&self.dir.0).display().to_string();
        let (cert, key, digest) =
            (self.path("tls.crt"), self.path("tls.key"), self.path("digest.key"));
        let mut args =
            vec!["--tls-cert", cert.as_str(), "--tls-key", &key, "--digest-key-file", &digest];
        args.extend_from_slice(extra);
        let mut env = env.to_vec();
        env.push(("KUBECONFIG", &kubeconfig));
        Server::start(&args, &env, &self.dir.path("ca.crt")).await
    }

    fn path(&self, name: &str) -> String {
        self.dir.path(name).display().to_string()
    }
}

async fn wait_ready(server: &Server) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.get("/readyz").await.0 != 200 {
        assert!(Instant::now() < deadline, "not ready within 20 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn web(annotations: Option<Value>) -> Value {
    let mut template_meta = json!({"labels": {"app": "web"}});
    if let Some(annotations) = annotations {
        template_meta["annotations"] = annotations;
    }
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": template_meta,
            "spec": {"containers": [{"name": "app", "image": "web:1",
                "env": [{"name": "LOG", "valueFrom": {"configMapKeyRef": {"name": "app-config", "key": "log-level"}}}],
                "envFrom": [{"secretRef": {"name": "db"}}]}]}}}})
}

fn review(uid: &str, object: &Value) -> Vec<u8> {
    serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "operation": "UPDATE", "namespace": NS, "name": "web", "object": object, "oldObject": object}}))
    .expect("json")
}

/// POSTs a review and returns (response, the object with the patch applied).
async fn admit(server: &Server, uid: &str, object: &Value, timeout: &str) -> (Value, Value) {
    let (status, body) =
        server.post(&format!("/mutate?timeout={timeout}"), review(uid, object)).await;
    assert_eq!(status, 200);
    let (answer, patched) = apply_response(object, &body);
    assert_eq!(answer["response"]["uid"], uid);
    (answer, patched)
}

/// The lookups the webhook has begun, by `configsum_lookup_reads_total`: joined, started
/// and started fresher, summed.
async fn lookups_begun(server: &Server) -> u64 {
    let (status, metrics) = http_get(&server.metrics_addr, "/metrics").await;
    assert_eq!(status, 200);
    metrics
        .lines()
        .filter(|line| line.starts_with("configsum_lookup_reads_total{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

fn annotations(object: &Value) -> Value {
    object["spec"]["template"]["metadata"]["annotations"].clone()
}

#[tokio::test]
async fn not_ready_until_the_api_server_answers() {
    let cluster = Cluster::new("readiness").await;
    cluster.api.fault("/version", Some(Fault::Status(503)));
    let server = cluster.start_unready(&[], &[]).await;
    // A second probe means the first one's 503 was answered and seen.
    let deadline = Instant::now() + Duration::from_secs(20);
    while cluster.api.requests("/version") < 2 {
        assert!(Instant::now() < deadline, "the API server was not probed twice within 20 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(server.get("/readyz").await.0, 503, "not ready while the API server fails");
    assert_eq!(server.get("/healthz").await.0, 200, "but alive");
    cluster.api.fault("/version", None);
    wait_ready(&server).await;
    assert!(cluster.api.requests("/version") >= 2);
    assert_eq!(server.terminate().await, Some(0));
}

#[tokio::test]
async fn every_review_sees_the_write_acknowledged_before_it() {
    let cluster = Cluster::new("freshness").await;
    let server = cluster.start(&[], &[]).await;
    let mut object = web(None);
    let mut seen = std::collections::HashSet::new();
    for i in 0..20 {
        cluster.api.put_config_map(NS, "app-config", &[("log-level", &format!("level-{i}"))]);
        let (_, patched) = admit(&server, &format!("fresh-{i}"), &object, "10s").await;
        let digest = annotations(&patched)[CM].as_str().expect("digest").to_owned();
        assert!(seen.insert(digest), "review {i} did not see the new ConfigMap");
        object = patched;
    }
    assert_eq!(cluster.api.requests(&FakeApiServer::config_map_path(NS, "app-config")), 20);
    assert_eq!(server.terminate().await, Some(0));
}

#[tokio::test]
async fn each_fault_keeps_the_faulty_annotation_and_updates_the_rest() {
    let cluster = Cluster::new("faults").await;
    let server = cluster.start(&["--lookup-timeout", "1s"], &[]).await;
    let (_, current) = admit(&server, "baseline", &web(None), "10s").await;
    let before = annotations(&current);
    let secret_path = FakeApiServer::secret_path(NS, "db");
    let faults = [
        ("timeout", Fault::Delay(Duration::from_secs(5))),
        ("HTTP 503", Fault::Status(503)),
        ("HTTP 500", Fault::Status(500)),
        ("HTTP 429", Fault::Status(429)),
        ("HTTP 403", Fault::Status(403)),
        ("HTTP 401", Fault::Status(401)),
        ("connection error", Fault::Drop),
    ];
    for (i, (reason, fault)) in faults.into_iter().enumerate() {
        cluster.api.put_config_map(NS, "app-config", &[("log-level", &format!("changed-{i}"))]);
        let delayed = matches!(fault, Fault::Delay(_));
        cluster.api.fault(&secret_path, Some(fault));
        let reads_before = cluster.api.requests(&secret_path);
        let started = Instant::now();
        let (answer, patched) = admit(&server, &format!("fault-{i}"), &current, "10s").await;
        let took = started.elapsed();
        // Whether the fake had answered the Secret's read when the review was: not for the
        // delay, which the lookup deadline cut short.
        let answered_read =
            cluster.api.log().iter().rev().find(|l| l.path == secret_path).map(|l| l.status != 0);
        cluster.api.fault(&secret_path, None);
        eprintln!("fault {reason}: answered after {took:?}");
        assert_eq!(
            cluster.api.requests(&secret_path),
            reads_before + 1,
            "{reason}: one read, never retried within the review"
        );
        if delayed {
            assert_eq!(answered_read, Some(false), "{reason}: answered before the API server");
        }
        assert_eq!(answer["response"]["allowed"], true);
        let after = annotations(&patched);
        assert_eq!(
            after[SECRET], before[SECRET],
            "{reason}: the Secret's digest is kept as it was"
        );
        assert_ne!(after[CM], before[CM], "{reason}: the ConfigMap's digest still moves");
        let warnings = answer["response"]["warnings"].to_string();
        assert!(
            warnings.contains("secret/db: could not be read; its annotation was kept (")
                && warnings.contains(reason),
            "{reason}: {warnings}"
        );
    }
    let (status, metrics) = http_get(&server.metrics_addr, "/metrics").await;
    assert_eq!(status, 200);
    for reason in
        ["timeout", "server_error", "throttled", "forbidden", "unauthorized", "connection"]
    {
        assert!(
            metrics.contains(&format!("configsum_lookup_errors_total{{reason=\"{reason}\"}}")),
            "{reason}\n{metrics}"
        );
    }
    assert_eq!(server.terminate().await, Some(0));
}

#[tokio::test]
async fn a_missing_object_is_absent_and_deny_mode_denies_on_errors() {
    let cluster = Cluster::new("deny").await;
    let server = cluster.start(&["--on-lookup-error", "deny"], &[]).await;
    cluster.api.delete("configmaps", NS, "app-config");
    let (answer, patched) = admit(&server, "absent", &web(None), "10s").await;
    assert_eq!(annotations(&patched)[CM], "absent");
    assert!(
        answer["response"]["warnings"]
            .to_string()
            .contains(r#"configmap/app-config: not found; its digest is \"absent\""#)
    );

    cluster.api.fault(&FakeApiServer::secret_path(NS, "db"), Some(Fault::Status(503)));
    let (answer, _) = admit(&server, "denied", &web(None), "10s").await;
    assert_eq!(answer["response"]["allowed"], false);
    assert!(
        answer["response"]["status"]["message"].as_str().is_some_and(|m| m.contains("secret/db")),
        "{answer}"
    );
    assert!(answer["response"].get("patch").is_none());
    assert_eq!(server.terminate().await, Some(0));
}

#[tokio::test]
async fn lookups_run_concurrently_once_per_object() {
    let cluster = Cluster::new("concurrency").await;
    let server = cluster.start(&[], &[]).await;
    let spec = json!({"containers": [{"name": "c", "envFrom": [
        {"configMapRef": {"name": "a"}}, {"configMapRef": {"name": "b"}},
        {"secretRef": {"name": "c"}}, {"secretRef": {"name": "d"}}],
        "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "a", "key": "k"}}}]}],
        "volumes": [{"name": "v", "secret": {"secretName": "c"}}]});
    let object = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": NS},
        "spec": {"selector": {}, "template": {"spec": spec}}});
    let paths = [
        FakeApiServer::config_map_path(NS, "a"),
        FakeApiServer::config_map_path(NS, "b"),
        FakeApiServer::secret_path(NS, "c"),
        FakeApiServer::secret_path(NS, "d"),
    ];
    for path in &paths {
        cluster.api.fault(path, Some(Fault::Delay(Duration::from_millis(200))));
    }
    let started = Instant::now();
    let (answer, _) = admit(&server, "parallel", &object, "10s").await;
    let took = started.elapsed();
    eprintln!(
        "review with four 200 ms lookups took {took:?}, {} API requests in flight at most",
        cluster.api.most_in_flight()
    );
    assert!(took >= Duration::from_millis(200), "took {took:?}: the lookups were not delayed");
    // Concurrent, whatever the machine's speed: all four held by the fake at once (one after
    // the other, with the odd readiness probe beside them, makes two at most).
    assert!(
        cluster.api.most_in_flight() >= paths.len(),
        "{} lookups in flight at most",
        cluster.api.most_in_flight()
    );
    assert_eq!(
        answer["response"]["warnings"].as_array().map(Vec::len),
        Some(4),
        "all four are absent"
    );
    for path in &paths {
        assert_eq!(cluster.api.requests(path), 1, "{path}");
    }
    assert_eq!(server.terminate().await, Some(0));
}

#[tokio::test]
async fn two_hundred_concurrent_reviews_are_all_correct() {
    let cluster = Cluster::new("burst").await;
    let server = std::sync::Arc::new(cluster.start(&[], &[]).await);
    let (_, expected) = admit(&server, "expected", &web(None), "10s").await;
    let expected = annotations(&expected);
    // Slow lookups, so that the server-wide cap is what bounds concurrency: 400 lookups
    // through 16 at a time take at least 0.5 s, within the default budget of 1.9 s.
    for path in
        [FakeApiServer::config_map_path(NS, "app-config"), FakeApiServer::secret_path(NS, "db")]
    {
        cluster.api.fault(&path, Some(Fault::Delay(Duration::from_millis(20))));
    }
    let started = std::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..200 {
        let server = server.clone();
        tasks.spawn(async move {
            let (answer, patched) = admit(&server, &format!("burst-{i}"), &web(None), "10s").await;
            (answer, annotations(&patched))
        });
    }
    let mut answered = 0;
    while let Some(result) = tasks.join_next().await {
        let (answer, got) = result.expect("task");
        assert_eq!(got, expected);
        assert!(answer["response"].get("warnings").is_none(), "{answer}");
        answered += 1;
    }
    assert_eq!(answered, 200);
    eprintln!(
        "200 concurrent reviews: most API requests in flight {}, all answered in {:?}",
        cluster.api.most_in_flight(),
        started.elapsed()
    );
    assert_eq!(cluster.api.most_in_flight(), SERVER_WIDE_LOOKUPS, "lookups are capped server-wide");
    let server = std::sync::Arc::into_inner(server).expect("only owner");
    assert_eq!(server.terminate().await, Some(0));
}

#[tokio::test]
async fn a_write_made_while_an_older_read_is_in_flight_is_seen_by_the_next_review() {
    let cluster = Cluster::new("fresher").await;
    let server = std::sync::Arc::new(cluster.start(&["--lookup-timeout", "10s"], &[]).await);
    let path = FakeApiServer::config_map_path(NS, "app-config");
    // The first review's read is served from the ConfigMap as it is, and answered late.
    cluster.api.fault(&path, Some(Fault::Late(Duration::from_millis(1500))));
    let older = {
        let server = server.clone();
        tokio::spawn(async move { admit(&server, "older", &web(None), "10s").await })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while cluster.api.requests(&path) < 1 {
        assert!(Instant::now() < deadline, "the first review never read its ConfigMap");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Served: the fake reads the object as the request arrives.
    tokio::time::sleep(Duration::from_millis(100)).await;
    cluster.api.put_config_map(NS, "app-config", &[("log-level", "written-after-the-read")]);
    cluster.api.fault(&path, None);
    // Acknowledged, then sent: this review must see the write, not the read in flight.
    let (_, newer) = admit(&server, "newer", &web(None), "10s").await;
    assert!(!older.is_finished(), "the newer review did not wait for the older read");
    let (_, older) = older.await.expect("the older review");
    let (_, settled) = admit(&server, "settled", &web(None), "10s").await;
    assert_ne!(annotations(&newer)[CM], annotations(&older)[CM], "the write was missed");
    assert_eq!(annotations(&newer)[CM], annotations(&settled)[CM]);
    assert_eq!(cluster.api.requests(&path), 3, "a read of its own for each review");
    let server = std::sync::Arc::into_inner(server).expect("only owner");
    assert_eq!(server.terminate().await, Some(0));
}

#[tokio::test]
async fn sixteen_reviews_that_arrived_before_any_read_share_eight_reads() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let cluster = Cluster::new("shared-reads").await;
    let names: Vec<String> = (0..8).map(|i| format!("shared-{i}")).collect();
    let paths: Vec<String> = names.iter().map(|n| FakeApiServer::config_map_path(NS, n)).collect();
    for (name, path) in names.iter().zip(&paths) {
        cluster.api.put_config_map(NS, name, &[("k", name)]);
        // Long enough for every review to reach its lookups while the reads are in flight.
        cluster.api.fault(path, Some(Fault::Delay(Duration::from_secs(1))));
    }
    let server = cluster.start(&["--lookup-timeout", "10s"], &[]).await;
    let env_from: Vec<Value> = names.iter().map(|n| json!({"configMapRef": {"name": n}})).collect();
    let object = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": NS},
        "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "c", "envFrom": env_from}]}}}});
    // Every review's head and a byte of its body first: the webhook notes a review's
    // arrival before it reads the body, so all sixteen arrive before any read begins.
    let mut connections = Vec::new();
    for i in 0..16 {
        let body = review(&format!("shared-{i}"), &object);
        let tcp = tokio::net::TcpStream::connect(&server.addr).await.expect("connect");
        let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
        let mut tls = server.connector().connect(name, tcp).await.expect("handshake");
        let head = format!(
            "POST /mutate?timeout=10s HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        tls.write_all(head.as_bytes()).await.expect("write head");
        tls.write_all(&body[..1]).await.expect("write a byte of the body");
        tls.flush().await.expect("flush");
        connections.push((tls, body));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let read: usize = paths.iter().map(|p| cluster.api.requests(p)).sum();
    assert_eq!(read, 0, "no review was decided yet");
    let mut answers = tokio::task::JoinSet::new();
    for (mut tls, body) in connections {
        tls.write_all(&body[1..]).await.expect("write the rest of the body");
        tls.flush().await.expect("flush");
        answers.spawn(async move {
            let mut response = Vec::new();
            tls.read_to_end(&mut response).await.expect("read the answer");
            response
        });
    }
    let mut digests = std::collections::HashSet::new();
    while let Some(response) = answers.join_next().await {
        let response = response.expect("task");
        assert!(response.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&response));
        let at = response.windows(4).position(|w| w == b"\r\n\r\n").expect("a head");
        let (answer, patched) = apply_response(&object, &response[at + 4..]);
        assert!(answer["response"].get("warnings").is_none(), "{answer}");
        digests.insert(annotations(&patched).to_string());
    }
    assert_eq!(digests.len(), 1, "every review digested the same objects");
    for path in &paths {
        assert_eq!(cluster.api.requests(path), 1, "{path}: one read shared by sixteen reviews");
    }
    let (_, metrics) = http_get(&server.metrics_addr, "/metrics").await;
    for (read, count) in [("joined", 120), ("started", 8)] {
        let line = format!("configsum_lookup_reads_total{{read=\"{read}\"}} {count}");
        assert!(metrics.contains(&line), "{line}\n{metrics}");
    }
    assert_eq!(server.terminate().await, Some(0));
}

/// Sixteen reviews sent at once, each tracking the same eight ConfigMaps, against an API
/// server answering each GET after `latency`: how many GETs they make (128 without
/// sharing). Prints the counts: docs/performance.md, "Shared reads".
#[tokio::test]
async fn sixteen_concurrent_reviews_of_eight_objects_share_what_reads_they_can() {
    let cluster = Cluster::new("sharing-rounds").await;
    let names: Vec<String> = (0..8).map(|i| format!("shared-{i}")).collect();
    let paths: Vec<String> = names.iter().map(|n| FakeApiServer::config_map_path(NS, n)).collect();
    for name in &names {
        cluster.api.put_config_map(NS, name, &[("k", name)]);
    }
    let server = std::sync::Arc::new(cluster.start(&["--lookup-timeout", "10s"], &[]).await);
    let env_from: Vec<Value> = names.iter().map(|n| json!({"configMapRef": {"name": n}})).collect();
    let object = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": NS},
        "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "c", "envFrom": env_from}]}}}});
    let reads = |metrics: &str, read: &str| -> u64 {
        let prefix = format!("configsum_lookup_reads_total{{read=\"{read}\"}} ");
        let line = metrics.lines().find_map(|l| l.strip_prefix(prefix.as_str()));
        line.and_then(|n| n.parse().ok()).unwrap_or(0)
    };
    for latency in [0, 5, 50] {
        for path in &paths {
            cluster.api.fault(path, Some(Fault::Delay(Duration::from_millis(latency))));
        }
        for round in 0..3 {
            let before: usize = paths.iter().map(|p| cluster.api.requests(p)).sum();
            let (_, metrics) = http_get(&server.metrics_addr, "/metrics").await;
            let started_before = reads(&metrics, "started") + reads(&metrics, "started_fresher");
            let mut reviews = tokio::task::JoinSet::new();
            for i in 0..16 {
                let (server, object) = (server.clone(), object.clone());
                let uid = format!("round-{latency}-{round}-{i}");
                reviews.spawn(async move { admit(&server, &uid, &object, "10s").await });
            }
            while let Some(review) = reviews.join_next().await {
                let (answer, _) = review.expect("review");
                assert!(answer["response"].get("warnings").is_none(), "{answer}");
            }
            let gets = paths.iter().map(|p| cluster.api.requests(p)).sum::<usize>() - before;
            let (_, metrics) = http_get(&server.metrics_addr, "/metrics").await;
            let started = reads(&metrics, "started") + reads(&metrics, "started_fresher");
            eprintln!("GETs at {latency} ms per GET, round {round}: {gets} for 128 lookups");
            assert!((8..=128).contains(&gets), "{gets} GETs");
            assert_eq!(gets as u64, started - started_before, "the metric counts every GET");
        }
    }
    let server = std::sync::Arc::into_inner(server).expect("only owner");
    assert_eq!(server.terminate().await, Some(0));
}

#[tokio::test]
async fn sigterm_answers_every_request_in_flight_and_exits_zero() {
    let cluster = Cluster::new("drain").await;
    let server = std::sync::Arc::new(cluster.start(&[], &[]).await);
    cluster.api.fault(
        &FakeApiServer::secret_path(NS, "db"),
        Some(Fault::Delay(Duration::from_millis(500))),
    );
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..20 {
        let server = server.clone();
        tasks.spawn(async move { admit(&server, &format!("drain-{i}"), &web(None), "10s").await });
    }
    // Every review in flight: each has looked up the Secret (reading it or sharing a read of
    // it), which answers in 500 ms, after its ConfigMap.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while lookups_begun(&server).await < 40 {
        assert!(std::time::Instant::now() < deadline, "20 reviews never reached their lookups");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let pid = server.child.id().expect("pid").to_string();
    assert!(
        std::process::Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success()
    );
    let mut answered = 0;
    while let Some(result) = tasks.join_next().await {
        let (answer, patched) = result.expect("every in-flight review is answered");
        assert_eq!(answer["response"]["allowed"], true);
        assert!(
            annotations(&patched)[SECRET].as_str().is_some_and(|d| d.starts_with("hmac-sha256:"))
        );
        answered += 1;
    }
    assert_eq!(answered, 20);
    let server = std::sync::Arc::into_inner(server).expect("only owner");
    assert_eq!(server.terminate_wait().await, Some(0));
}

#[tokio::test]
async fn no_secret_value_reaches_the_logs_at_trace_level() {
    let cluster = Cluster::new("logs").await;
    let server = cluster.start(&[], &[("CONFIGSUM_LOG", "trace")]).await;
    admit(&server, "logs-1", &web(None), "10s").await;
    cluster.api.fault(&FakeApiServer::secret_path(NS, "db"), Some(Fault::Status(500)));
    admit(&server, "logs-2", &web(None), "10s").await;
    let logs = server.terminate_logs().await;
    assert!(logs.len() > 5, "trace logging is on");
    let encoded = base64::engine::general_purpose::STANDARD.encode("hunter2-e2e-secret");
    for line in &logs {
        assert!(
            !line.contains("hunter2-e2e-secret") && !line.contains(&encoded),
            "secret in log: {line}"
        );
    }
}

#[tokio::test]
async fn certificate_rotation_by_symlink_swap_while_requests_flow() {
    let cluster = Cluster::new("rotation").await;
    // Lay the pair out as the kubelet mounts a Secret: tls.crt -> ..data/tls.crt, ..data -> ..v1.
    let mount = cluster.dir.path("mount");
    let v1 = mount.join("..v1");
    std::fs::create_dir_all(&v1).expect("mount");
    for file in ["tls.crt", "tls.key"] {
        std::fs::copy(cluster.dir.path(file), v1.join(file)).expect("copy");
        std::os::unix::fs::symlink(format!("..data/{file}"), mount.join(file)).expect("symlink");
    }
    std::os::unix::fs::symlink("..v1", mount.join("..data")).expect("..data");
    // A second certificate from another CA.
    let next = TempDir::new("rotation-next");
    make_certs(&next.0, "ec-pkcs8");

    let kubeconfig = cluster.api.kubeconfig(&cluster.dir.0).display().to_string();
    let (cert, key, digest) = (
        mount.join("tls.crt").display().to_string(),
        mount.join("tls.key").display().to_string(),
        cluster.path("digest.key"),
    );
    let args = ["--tls-cert", cert.as_str(), "--tls-key", &key, "--digest-key-file", &digest];
    let server = std::sync::Arc::new(
        Server::start(&args, &[("KUBECONFIG", &kubeconfig)], &cluster.dir.path("ca.crt")).await,
    );
    wait_ready(&server).await;

    // Requests flow on one kept-alive connection throughout the swap.
    let flowing = {
        let server = server.clone();
        tokio::spawn(async move {
            let mut sender = server.connect(server.connector()).await;
            for i in 0..60 {
                let (status, _) =
                    send(&mut sender, "POST", "/mutate", review(&format!("flow-{i}"), &web(None)))
                        .await;
                assert_eq!(status, 200, "request {i} during rotation");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The kubelet's swap: write ..v2, then atomically repoint ..data.
    let v2 = mount.join("..v2");
    std::fs::create_dir_all(&v2).expect("v2");
    for file in ["tls.crt", "tls.key"] {
        std::fs::copy(next.path(file), v2.join(file)).expect("copy");
    }
    std::os::unix::fs::symlink("..v2", mount.join("..data_tmp")).expect("tmp link");
    std::fs::rename(mount.join("..data_tmp"), mount.join("..data")).expect("swap");

    // New connections see the new certificate within a few poll intervals.
    let new_ca = next.path("ca.crt");
    let swapped = Instant::now();
    let deadline = swapped + Duration::from_secs(10);
    loop {
        let tcp = tokio::net::TcpStream::connect(&server.addr).await.expect("connect");
        let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
        if tls_connector(&new_ca, None).connect(name, tcp).await.is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "the new certificate was not served within 10 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("new certificate served {:?} after the swap", swapped.elapsed());
    flowing.await.expect("no request failed during rotation");
    let (_, metrics) = http_get(&server.metrics_addr, "/metrics").await;
    assert!(
        metrics.contains(r#"configsum_certificate_reloads_total{outcome="loaded"} 1"#),
        "{metrics}"
    );
    assert!(!metrics.contains("configsum_certificate_expiry_timestamp_seconds 0"), "{metrics}");

    // A broken pair is refused and the current one kept.
    std::fs::write(v2.join("tls.key"), "not a key").expect("break key");
    let rejected = r#"configsum_certificate_reloads_total{outcome="rejected"} 1"#;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, metrics) = http_get(&server.metrics_addr, "/metrics").await;
        if metrics.contains(rejected) {
            break;
        }
        assert!(Instant::now() < deadline, "the broken pair was not rejected within 20 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let tcp = tokio::net::TcpStream::connect(&server.addr).await.expect("connect");
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    assert!(
        tls_connector(&new_ca, None).connect(name, tcp).await.is_ok(),
        "still serving the good pair"
    );
    let (_, metrics) = http_get(&server.metrics_addr, "/metrics").await;
    assert!(metrics.contains(rejected), "rejected once, not again: {metrics}");
    assert!(
        metrics.contains(r#"configsum_certificate_reloads_total{outcome="loaded"} 1"#),
        "the broken pair was not loaded: {metrics}"
    );
    let server = std::sync::Arc::into_inner(server).expect("only owner");
    assert_eq!(server.terminate().await, Some(0));
}

/// Runs `configsum ensure-digest-key` against the fake API server.
async fn ensure_digest_key(cluster: &Cluster) -> (Option<i32>, String) {
    let kubeconfig = cluster.api.kubeconfig(&cluster.dir.0);
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_configsum"))
        .args(["ensure-digest-key", "--namespace", "configsum-system"])
        .env("KUBECONFIG", kubeconfig)
        .output()
        .await
        .expect("run configsum ensure-digest-key");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[tokio::test]
async fn ensure_digest_key_creates_a_random_key_once_and_keeps_any_existing_one() {
    let cluster = Cluster::new("digest-key").await;
    let path = FakeApiServer::secret_path("configsum-system", "configsum-digest-key");
    let key_of = |cluster: &Cluster| -> String {
        let secret = cluster.api.object(&path).expect("the Secret exists");
        let encoded = secret["data"]["keys"].as_str().expect("data.keys").to_owned();
        String::from_utf8(
            base64::engine::general_purpose::STANDARD.decode(encoded).expect("base64"),
        )
        .expect("utf8")
    };
    let (code, logs) = ensure_digest_key(&cluster).await;
    assert_eq!(code, Some(0), "{logs}");
    let first = key_of(&cluster);
    assert_eq!(first.trim().len(), 64, "32 random bytes as hex");
    assert!(configsum::core::DigestKeys::parse(first.as_bytes()).is_ok());
    assert!(!logs.contains(first.trim()), "the key is never logged");

    // Re-applying the manifests runs the Job again: the key stays.
    let (code, _) = ensure_digest_key(&cluster).await;
    assert_eq!(code, Some(0));
    assert_eq!(key_of(&cluster), first);

    // A user's own key is kept; an unusable one is an error, not overwritten.
    let other = Cluster::new("digest-key-byo").await;
    other.api.put_secret(
        "configsum-system",
        "configsum-digest-key",
        &[("keys", "my-own-key-of-enough-length\n")],
    );
    let (code, _) = ensure_digest_key(&other).await;
    assert_eq!(code, Some(0));
    assert_eq!(key_of(&other), "my-own-key-of-enough-length\n");
    other.api.put_secret("configsum-system", "configsum-digest-key", &[("keys", "short")]);
    let (code, logs) = ensure_digest_key(&other).await;
    assert_eq!(code, Some(1));
    assert!(logs.contains("not a usable digest key file"), "{logs}");
    assert_eq!(key_of(&other), "short");
}

/// A direct caller (the installed configuration never sends these) asks for
/// kube-system and configsum's own namespace: allowed untouched, nothing read.
#[tokio::test]
async fn reviews_for_kube_system_and_its_own_namespace_make_no_lookups() {
    let cluster = Cluster::new("protected-ns").await;
    cluster.api.put_secret("kube-system", "root-token", &[("token", "very-secret")]);
    let server = cluster.start(&[], &[("POD_NAMESPACE", "configsum")]).await;
    cluster.api.clear_log();
    for ns in ["kube-system", "configsum"] {
        let mut object = web(None);
        object["metadata"]["namespace"] = json!(ns);
        object["spec"]["template"]["spec"]["containers"][0]["envFrom"] =
            json!([{"secretRef": {"name": "root-token"}}]);
        let mut body: Value = serde_json::from_slice(&review(ns, &object)).expect("json");
        body["request"]["namespace"] = json!(ns);
        let (status, answer) =
            server.post("/mutate", serde_json::to_vec(&body).expect("json")).await;
        assert_eq!(status, 200);
        let answer: Value = serde_json::from_slice(&answer).expect("answer");
        assert_eq!(answer["response"]["allowed"], true, "{ns}");
        assert!(answer["response"]["patch"].is_null(), "{ns}: {answer}");
    }
    let lookups: Vec<String> = cluster
        .api
        .log()
        .into_iter()
        .filter(|l| l.path.contains("/secrets/") || l.path.contains("/configmaps/"))
        .map(|l| l.path)
        .collect();
    assert!(lookups.is_empty(), "{lookups:?}");
    // The same review for an ordinary namespace is mutated (the test is not vacuous).
    let (answer, _) = admit(&server, "ordinary", &web(None), "10s").await;
    assert!(answer["response"]["patch"].is_string(), "{answer}");
}

/// A uid with a newline cannot forge a log line, and a huge one is cut.
#[tokio::test]
async fn request_fields_in_logs_are_cut_and_cannot_forge_lines() {
    let cluster = Cluster::new("log-fields").await;
    let server = cluster.start(&["--log-format", "text"], &[]).await;
    let forged = "abc\nINFO configsum: admission answered uid=forged";
    let (answer, _) = admit(&server, forged, &web(None), "10s").await;
    assert_eq!(answer["response"]["uid"], forged, "the answer echoes the uid as sent");
    let huge = "u".repeat(1024 * 1024);
    admit(&server, &huge, &web(None), "10s").await;
    // The later review's line is written after the forged one's.
    assert!(
        server.logged(|l| l.contains("admission answered") && l.contains("uuuuuuuu")).await,
        "the second review's line: {:?}",
        server.logs()
    );
    let logs = server.logs();
    assert!(!logs.iter().any(|l| l.starts_with("INFO configsum: admission answered uid=forged")));
    assert!(logs.iter().any(|l| l.contains(r"abc\nINFO")), "escaped in place: {logs:?}");
    let longest = logs.iter().map(String::len).max().unwrap_or(0);
    assert!(longest < 4096, "a log line of {longest} bytes");
}
