//! `make bench`: the webhook's worst case under its own limits, for the
//! manifests' memory limit and the "well under 100 ms per 3 MiB review" goal.
//!
//! One release `configsum serve --objects-from` on loopback, then:
//! 1. CPU per review: largest reviews (3 MiB objects made only of references
//!    and `track` tokens) sent one at a time; CPU seconds from /proc. The same
//!    for custom resources of kinds declared with `--custom-kinds` (docs/custom-kinds.md): an
//!    operator's resource made only of references through a `[]` path, and a
//!    workload CRD whose template sits deeper than a Deployment's.
//! 2. Peak memory: at once, up to 1,024 connections (most idle after their
//!    TLS handshake), 12 connections streaming UPDATE reviews just under the
//!    8 MiB limit (more than the body budget holds, so some get 503), and 64
//!    connections of ordinary reviews; VmHWM from /proc, and the probes'
//!    latency meanwhile.
//!
//! Prints a Markdown report (target/bench/hostile.md). Under `cargo test`
//! (no `--bench`) a seconds-long smoke run checks that it still works.

#[path = "support/loadgen.rs"]
mod loadgen;
#[path = "support/reviews.rs"]
mod reviews;
#[path = "../tests/support/server.rs"]
mod server;

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use loadgen::ProcessStats;
use serde_json::{Value, json};
use server::{Server, TempDir, install_crypto_provider, make_certs};
use tokio::net::TcpStream;

struct Plan {
    large_reviews: usize,
    object_bytes: usize,
    update_bytes: usize,
    idle_connections: usize,
    duration: Duration,
}

const FULL: Plan = Plan {
    large_reviews: 20,
    object_bytes: 3 * 1024 * 1024,
    update_bytes: 8 * 1024 * 1024 - 64 * 1024,
    idle_connections: 940,
    duration: Duration::from_secs(20),
};
const SMOKE: Plan = Plan {
    large_reviews: 2,
    object_bytes: 256 * 1024,
    update_bytes: 1024 * 1024,
    idle_connections: 20,
    duration: Duration::from_secs(2),
};

/// A Deployment of about `bytes` made of what costs the most per byte (see
/// tests/fuzz_review.rs): env references, each to a distinct ConfigMap or
/// Secret and key, and a `track` annotation of repeated `*` and unknown tokens.
fn hostile_deployment(bytes: usize) -> Value {
    // Within the 256 KiB Kubernetes allows annotations, or nothing is planned.
    let track = "*, configmap/nope, ".repeat((bytes / 10).min(200 * 1024) / 19);
    let mut size = track.len();
    let mut env = Vec::new();
    while size < bytes {
        let i = env.len();
        let (source, name) = if i % 2 == 0 {
            ("configMapKeyRef", format!("cm-{i:06}"))
        } else {
            ("secretKeyRef", format!("s-{i:06}"))
        };
        let entry = json!({"name": format!("E{i:06}"), "valueFrom": {source: {"name": name, "key": format!("k{i:06}")}}});
        size += entry.to_string().len() + 1;
        env.push(entry);
    }
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "hostile", "namespace": reviews::NAMESPACE},
        "spec": {"selector": {}, "template": {
            "metadata": {"annotations": {"configsum.dev/track": track}},
            "spec": {"containers": [{"name": "c", "env": env}]}}}})
}

/// The declared kinds the custom-resource reviews are of.
const CUSTOM_KINDS: &str = r#"apiVersion: configsum.dev/v1alpha1
kind: CustomKinds
kinds:
- apiVersion: goharbor.io/v1beta1
  kind: HarborCluster
  resource: harborclusters
  references:
  - configMap: spec.components[].configRef
  - secret: spec.components[].secretRef
  annotations: spec.podAnnotations
- apiVersion: example.com/v1
  kind: DeepSet
  resource: deepsets
  template: spec.a.b.c.template
"#;

/// An operator's resource of about `bytes` made only of references through `[]`: each
/// component names a distinct ConfigMap and key, and a distinct Secret.
fn hostile_harbor_cluster(bytes: usize) -> Value {
    let mut size = 0;
    let mut components = Vec::new();
    while size < bytes {
        let i = components.len();
        let entry = json!({"name": format!("c{i:06}"),
            "configRef": {"name": format!("cm-{i:06}"), "key": format!("k{i:06}")},
            "secretRef": format!("s-{i:06}")});
        size += entry.to_string().len() + 1;
        components.push(entry);
    }
    json!({"apiVersion": "goharbor.io/v1beta1", "kind": "HarborCluster",
        "metadata": {"name": "hostile", "namespace": reviews::NAMESPACE},
        "spec": {"components": components}})
}

/// The hostile Deployment's pod template, at `spec.a.b.c.template` of a declared kind.
fn hostile_deep_set(bytes: usize) -> Value {
    let deployment = hostile_deployment(bytes);
    json!({"apiVersion": "example.com/v1", "kind": "DeepSet",
        "metadata": {"name": "hostile", "namespace": reviews::NAMESPACE},
        "spec": {"a": {"b": {"c": {"template": deployment["spec"]["template"].clone()}}}}})
}

/// CPU seconds per review of `body`, sent `count` times one at a time.
async fn cpu_per(server: &Server, stats: &ProcessStats, body: &[u8], count: usize) -> f64 {
    let before = stats.cpu_seconds();
    for _ in 0..count {
        let (status, answer) = server.post("/mutate", body.to_vec()).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
        ok_200(0, &answer).expect("a hostile review is still answered");
    }
    (stats.cpu_seconds() - before) / count as f64
}

fn ok_200(_: usize, body: &[u8]) -> Result<(), String> {
    let answer: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    match answer["response"]["allowed"] {
        Value::Bool(true) => Ok(()),
        _ => Err(format!("not allowed: {answer}")),
    }
}

#[tokio::main]
async fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let plan = if full { FULL } else { SMOKE };
    install_crypto_provider();
    configsum::process::raise_open_file_limit();
    let dir = TempDir::new("hostile");
    make_certs(&dir.0, "ec-sec1");
    std::fs::write(dir.path("digest.key"), "0123456789abcdef0123456789abcdef\n").expect("key");
    std::fs::write(dir.path("objects.yaml"), reviews::objects_yaml()).expect("objects");
    std::fs::write(dir.path("kinds.yaml"), CUSTOM_KINDS).expect("kinds");
    let path = |s: &str| dir.path(s).display().to_string();
    let (cert, key, digest, objects) =
        (path("tls.crt"), path("tls.key"), path("digest.key"), path("objects.yaml"));
    let kinds = path("kinds.yaml");
    let args = [
        "--tls-cert",
        cert.as_str(),
        "--tls-key",
        &key,
        "--digest-key-file",
        &digest,
        "--objects-from",
        &objects,
        "--custom-kinds",
        &kinds,
    ];
    // As the container image sets it (see the Dockerfile).
    let server = Server::start(&args, &[("MALLOC_ARENA_MAX", "2")], &dir.path("ca.crt")).await;
    let stats = ProcessStats::new(vec![server.child.id().expect("pid")]);
    let connector = loadgen::connector(&dir.path("ca.crt"));
    let rss_idle = stats.rss_mib();

    // 1. CPU per largest review, one at a time.
    let object = hostile_deployment(plan.object_bytes);
    let create = reviews::review(("apps", "v1", "Deployment"), "CREATE", &object, None);
    let cpu_before = stats.cpu_seconds();
    let started = Instant::now();
    let mut answered = 0;
    for _ in 0..plan.large_reviews {
        let (status, body) = server.post("/mutate", create.clone()).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        ok_200(0, &body).expect("a hostile review is still answered");
        answered += 1;
    }
    let wall_per_review = started.elapsed() / answered as u32;
    let cpu_per_review = (stats.cpu_seconds() - cpu_before) / f64::from(answered as u32);
    let count = |v: &Value| v.as_array().map_or(0, Vec::len);
    let deployment_refs = count(&object["spec"]["template"]["spec"]["containers"][0]["env"]);
    let harbor = hostile_harbor_cluster(plan.object_bytes);
    let harbor_refs = 2 * count(&harbor["spec"]["components"]);
    let harbor =
        reviews::review(("goharbor.io", "v1beta1", "HarborCluster"), "CREATE", &harbor, None);
    let harbor_cpu = cpu_per(&server, &stats, &harbor, plan.large_reviews).await;
    let deep = hostile_deep_set(plan.object_bytes);
    let deep = reviews::review(("example.com", "v1", "DeepSet"), "CREATE", &deep, None);
    let deep_cpu = cpu_per(&server, &stats, &deep, plan.large_reviews).await;

    // 2. Peak memory with every limit reached at once.
    let mut idle = Vec::new();
    for _ in 0..plan.idle_connections {
        let tcp = TcpStream::connect(&server.addr).await.expect("connect");
        let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
        idle.push(connector.connect(name, tcp).await.expect("TLS"));
    }
    let half = hostile_deployment(plan.update_bytes / 2);
    let update = reviews::review(("apps", "v1", "Deployment"), "UPDATE", &half, Some(&half));
    let large = {
        let (addr, connector, duration) = (server.addr.clone(), connector.clone(), plan.duration);
        let bodies = Arc::new(vec![update.clone()]);
        tokio::spawn(async move {
            loadgen::run(&addr, &connector, "/mutate", bodies, 12, duration, ok_200).await
        })
    };
    let ordinary = {
        let (addr, connector, duration) = (server.addr.clone(), connector.clone(), plan.duration);
        let bodies: Arc<Vec<Vec<u8>>> =
            Arc::new(reviews::mix().into_iter().map(|m| m.body).collect());
        tokio::spawn(async move {
            loadgen::run(&addr, &connector, "/mutate", bodies, 64, duration, ok_200).await
        })
    };
    // The liveness probe (metrics port) and the readiness probe (HTTPS, a
    // new connection each time, as the kubelet makes).
    let (mut liveness, mut readiness) = (Vec::new(), Vec::new());
    while !(large.is_finished() && ordinary.is_finished()) {
        let probe = Instant::now();
        assert_eq!(server::http_get(&server.metrics_addr, "/healthz").await.0, 200);
        liveness.push(probe.elapsed());
        let probe = Instant::now();
        assert_eq!(server.get("/readyz").await.0, 200);
        readiness.push(probe.elapsed());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (large, ordinary) = match (large.await, ordinary.await) {
        (Ok(large), Ok(ordinary)) => (large, ordinary),
        (large, ordinary) => {
            let logs = server.logs();
            let connections = logs.iter().filter(|l| l.contains("connection") || l.contains("TLS"));
            connections.take(20).for_each(|line| eprintln!("{line}"));
            panic!("a load task failed: {:?} {:?}", large.err(), ordinary.err());
        }
    };
    liveness.sort_unstable();
    readiness.sort_unstable();
    let rss_peak = stats.peak_rss_mib();
    drop(idle);
    assert_eq!(server.terminate().await, Some(0));

    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut out = String::new();
    let build = if cfg!(debug_assertions) { "debug" } else { "release" };
    let _ = writeln!(out, "Worst case under the webhook's limits ({build} build, loopback):\n");
    let _ = writeln!(out, "| measure | value |\n|---|---:|");
    let _ = writeln!(out, "| body of the largest CREATE review | {:.2} MiB |", mib(create.len()));
    let per_thousand = |cpu: f64, refs: usize| cpu * 1e6 / refs.max(1) as f64;
    let _ = writeln!(
        out,
        "| CPU per largest review ({deployment_refs} references) | {:.1} ms ({:.1} ms per 1,000 references) |",
        cpu_per_review * 1000.0,
        per_thousand(cpu_per_review, deployment_refs)
    );
    let _ = writeln!(
        out,
        "| CPU per {:.2} MiB review of a declared operator kind, references through `[]` ({harbor_refs} references) | {:.1} ms ({:.1} ms per 1,000 references) |",
        mib(harbor.len()),
        harbor_cpu * 1000.0,
        per_thousand(harbor_cpu, harbor_refs)
    );
    let _ = writeln!(
        out,
        "| CPU per {:.2} MiB review of a declared workload kind, template at `spec.a.b.c.template` ({deployment_refs} references) | {:.1} ms |",
        mib(deep.len()),
        deep_cpu * 1000.0
    );
    let _ = writeln!(
        out,
        "| wall time per largest review (with TLS) | {:.1} ms |",
        ms(wall_per_review)
    );
    let _ = writeln!(out, "| RSS idle | {rss_idle:.1} MiB |");
    let _ = writeln!(
        out,
        "| connections held at the peak | {} idle + 12 large + 64 ordinary + probes |",
        plan.idle_connections
    );
    let _ = writeln!(
        out,
        "| {:.1} MiB UPDATE reviews answered 200 / refused 503 | {} / {} |",
        mib(update.len()),
        large.latencies.len(),
        large.errors
    );
    let _ = writeln!(
        out,
        "| ordinary reviews meanwhile: answered (req/s, p99) / refused 503 | {:.0}, {:.1} ms / {} |",
        ordinary.requests_per_second(),
        ms(ordinary.quantile(0.99)),
        ordinary.errors
    );
    let p50_max = |probes: &[Duration]| {
        let p50 = probes.get(probes.len() / 2).copied().unwrap_or_default();
        format!("{:.1} / {:.1} ms", ms(p50), ms(probes.last().copied().unwrap_or_default()))
    };
    let _ =
        writeln!(out, "| liveness `/healthz` (metrics port) p50 / max | {} |", p50_max(&liveness));
    let _ = writeln!(
        out,
        "| readiness `/readyz` (HTTPS, new connection) p50 / max | {} |",
        p50_max(&readiness)
    );
    let _ = writeln!(out, "| peak RSS (VmHWM) | {rss_peak:.1} MiB |");
    println!("{out}");
    if full {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(dir.join("hostile.md"), &out);
    }
    assert!(!ordinary.latencies.is_empty(), "ordinary reviews are still answered");
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
