//! `make bench`: configsum under load over keep-alive TLS, against a floor.
//!
//! In one run, on loopback: configsum with `--objects-from` (the pure webhook
//! cost), configsum against the fake API server (zero latency), and nginx
//! answering a fixed AdmissionReview (the floor), each at several fixed
//! concurrency levels with the same TLS 1.3 cipher and the same bodies. Then
//! the webhook's memory with 10,000 Secrets of 100 KB. Prints a Markdown
//! report and writes it to target/bench/load.md.
//!
//! Run with `--bench` (as `cargo bench` does) for the full run; otherwise
//! (under `cargo test`) a seconds-long smoke run checks that it still works.

#[path = "../tests/support/fake_apiserver.rs"]
mod fake_apiserver;
#[path = "support/floor.rs"]
mod floor;
#[path = "support/loadgen.rs"]
mod loadgen;
#[path = "support/reviews.rs"]
mod reviews;
#[path = "../tests/support/server.rs"]
mod server;

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use fake_apiserver::FakeApiServer;
use loadgen::{LoadResult, ProcessStats};
use server::{Server, TempDir, install_crypto_provider, make_certs};

struct Plan {
    concurrency: &'static [usize],
    duration: Duration,
    secrets: usize,
    secret_bytes: usize,
    memory_duration: Duration,
}

const FULL: Plan = Plan {
    concurrency: &[1, 8, 64],
    duration: Duration::from_secs(8),
    secrets: 10_000,
    secret_bytes: 100 * 1024,
    memory_duration: Duration::from_secs(20),
};
const SMOKE: Plan = Plan {
    concurrency: &[1, 8],
    duration: Duration::from_millis(300),
    secrets: 50,
    secret_bytes: 4 * 1024,
    memory_duration: Duration::from_millis(500),
};

struct Row {
    target: &'static str,
    /// The fake API server's request count when the measured run began.
    api_requests_before: usize,
    concurrency: usize,
    result: LoadResult,
    cpu_per_1000: f64,
    peak_rss_mib: f64,
}

fn check_admission(_: usize, body: &[u8]) -> Result<(), String> {
    let answer: serde_json::Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if answer["response"]["allowed"] != true || answer["response"]["uid"] != "bench" {
        return Err(format!("unexpected answer {answer}"));
    }
    if answer["response"].get("warnings").is_some() {
        return Err(format!("warnings: {}", answer["response"]["warnings"]));
    }
    Ok(())
}

fn check_anything(_: usize, _: &[u8]) -> Result<(), String> {
    Ok(())
}

#[tokio::main]
async fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let plan = if full { FULL } else { SMOKE };
    install_crypto_provider();
    let dir = TempDir::new("load");
    make_certs(&dir.0, "ec-sec1");
    std::fs::write(dir.path("digest.key"), "0123456789abcdef0123456789abcdef\n").expect("key");
    std::fs::write(dir.path("objects.yaml"), reviews::objects_yaml()).expect("objects");
    let connector = loadgen::connector(&dir.path("ca.crt"));
    let mix = reviews::mix();
    let bodies: Arc<Vec<Vec<u8>>> = Arc::new(mix.iter().map(|m| m.body.clone()).collect());
    let path = |s: &str| dir.path(s).display().to_string();
    let (cert, key, digest, objects) =
        (path("tls.crt"), path("tls.key"), path("digest.key"), path("objects.yaml"));
    let mut rows = Vec::new();

    // 1. configsum with --objects-from: the webhook's own cost.
    {
        let args = [
            "--tls-cert",
            cert.as_str(),
            "--tls-key",
            &key,
            "--digest-key-file",
            &digest,
            "--objects-from",
            &objects,
        ];
        let server = Server::start(&args, &[], &dir.path("ca.crt")).await;
        let stats = ProcessStats::new(vec![server.child.id().expect("pid")]);
        for &c in plan.concurrency {
            rows.push(
                measure(
                    "configsum --objects-from",
                    &server.addr,
                    &connector,
                    &bodies,
                    c,
                    plan.duration,
                    &stats,
                    check_admission,
                    None,
                )
                .await,
            );
        }
        assert_eq!(server.terminate().await, Some(0));
    }

    // 2. configsum against the fake API server, zero latency.
    let api = FakeApiServer::start().await;
    for (kind, name, data) in reviews::objects() {
        let data: Vec<(&str, &str)> = data.iter().map(|(k, v)| (*k, v.as_str())).collect();
        if kind == "Secret" {
            api.put_secret(reviews::NAMESPACE, name, &data);
        } else {
            api.put_config_map(reviews::NAMESPACE, name, &data);
        }
    }
    let kubeconfig = api.kubeconfig(&dir.0).display().to_string();
    let mut lookups_ok = true;
    {
        let args = ["--tls-cert", cert.as_str(), "--tls-key", &key, "--digest-key-file", &digest];
        let server =
            Server::start(&args, &[("KUBECONFIG", &kubeconfig)], &dir.path("ca.crt")).await;
        let stats = ProcessStats::new(vec![server.child.id().expect("pid")]);
        for &c in plan.concurrency {
            let row = measure(
                "configsum + fake API server",
                &server.addr,
                &connector,
                &bodies,
                c,
                plan.duration,
                &stats,
                check_admission,
                Some(&api),
            )
            .await;
            let expected: usize =
                row.result.answered.iter().zip(&mix).map(|(n, m)| n * m.lookups).sum();
            let made = api.total_requests() - row.api_requests_before;
            if made != expected {
                eprintln!(
                    "lookups at c={c}: {made} API requests for {expected} referenced objects"
                );
                lookups_ok = false;
            }
            rows.push(row);
        }
        assert_eq!(server.terminate().await, Some(0));
    }

    // 3. The floor: nginx with a fixed AdmissionReview answer.
    let floor_answer = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"bench","allowed":true}}"#;
    match floor::Nginx::start(&dir.0, &dir.0, floor_answer) {
        Some(nginx) => {
            // The master forks its workers after it starts listening.
            let mut workers = loadgen::children(nginx.pid);
            for _ in 0..100 {
                if workers.len() >= 2 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
                workers = loadgen::children(nginx.pid);
            }
            let mut pids = vec![nginx.pid];
            pids.extend(workers);
            let stats = ProcessStats::new(pids);
            for &c in plan.concurrency {
                rows.push(
                    measure(
                        "floor: nginx, fixed answer",
                        &nginx.addr,
                        &connector,
                        &bodies,
                        c,
                        plan.duration,
                        &stats,
                        check_anything,
                        None,
                    )
                    .await,
                );
            }
        }
        None if full => {
            panic!("nginx is needed for the floor: scripts/install-bench-deps.sh installs it")
        }
        None => eprintln!("smoke run: no nginx, floor skipped"),
    }

    // 4. Memory with many large Secrets, reviews referencing a rotating subset.
    let memory = memory_at_scale(&api, &plan, &dir, &kubeconfig, &connector).await;

    let report = report(&rows, lookups_ok, &memory, &plan);
    println!("{report}");
    if full {
        let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
        let _ = std::fs::create_dir_all(&out);
        let _ = std::fs::write(out.join("load.md"), &report);
    }
    assert!(lookups_ok, "exactly one API request per distinct referenced object per review");
    assert!(rows.iter().all(|r| r.result.errors == 0), "every request answered");
}

#[allow(clippy::too_many_arguments)]
async fn measure(
    target: &'static str,
    addr: &str,
    connector: &tokio_rustls::TlsConnector,
    bodies: &Arc<Vec<Vec<u8>>>,
    concurrency: usize,
    duration: Duration,
    stats: &ProcessStats,
    check: fn(usize, &[u8]) -> Result<(), String>,
    api: Option<&FakeApiServer>,
) -> Row {
    // A short warm-up on the same connections count, not recorded.
    loadgen::run(addr, connector, "/mutate", bodies.clone(), concurrency, duration / 10, check)
        .await;
    let api_requests_before = api.map_or(0, FakeApiServer::total_requests);
    let cpu_before = stats.cpu_seconds();
    let result = loadgen::run(
        addr,
        connector,
        "/mutate?timeout=10s",
        bodies.clone(),
        concurrency,
        duration,
        check,
    )
    .await;
    let cpu = stats.cpu_seconds() - cpu_before;
    let cpu_per_1000 = cpu / result.latencies.len().max(1) as f64 * 1000.0;
    Row {
        target,
        api_requests_before,
        concurrency,
        cpu_per_1000,
        peak_rss_mib: stats.peak_rss_mib(),
        result,
    }
}

struct Memory {
    secrets: usize,
    secret_bytes: usize,
    reviews: usize,
    rss_start: f64,
    rss_peak: f64,
    rss_end: f64,
    samples: Vec<f64>,
}

async fn memory_at_scale(
    api: &FakeApiServer,
    plan: &Plan,
    dir: &TempDir,
    kubeconfig: &str,
    connector: &tokio_rustls::TlsConnector,
) -> Memory {
    let value: Vec<u8> = (0..plan.secret_bytes).map(|i| (i * 7 % 251) as u8).collect();
    for i in 0..plan.secrets {
        api.put_secret_bytes(reviews::NAMESPACE, &format!("big-{i:05}"), "blob", &value);
    }
    // 250 different Deployments, each reading 2 of the Secrets (and 2 ConfigMaps).
    let bodies: Vec<Vec<u8>> = (0..250)
        .map(|i| {
            let a = format!("big-{:05}", (i * 2) % plan.secrets);
            let b = format!("big-{:05}", (i * 2 + 1) % plan.secrets);
            let d =
                reviews::deployment_20kb(["app-config", "nginx-conf"], [a.as_str(), b.as_str()]);
            reviews::review(("apps", "v1", "Deployment"), "CREATE", &d, None)
        })
        .collect();
    let path = |s: &str| dir.path(s).display().to_string();
    let (cert, key, digest) = (path("tls.crt"), path("tls.key"), path("digest.key"));
    let args = ["--tls-cert", cert.as_str(), "--tls-key", &key, "--digest-key-file", &digest];
    let server = Server::start(&args, &[("KUBECONFIG", kubeconfig)], &dir.path("ca.crt")).await;
    let stats = ProcessStats::new(vec![server.child.id().expect("pid")]);
    let rss_start = stats.rss_mib();
    let bodies = Arc::new(bodies);
    let load = {
        let (addr, connector, bodies, duration) =
            (server.addr.clone(), connector.clone(), bodies.clone(), plan.memory_duration);
        tokio::spawn(async move {
            loadgen::run(&addr, &connector, "/mutate", bodies, 8, duration, check_admission).await
        })
    };
    let mut samples = Vec::new();
    while !load.is_finished() {
        samples.push(stats.rss_mib());
        tokio::time::sleep(plan.memory_duration / 20).await;
    }
    let result = load.await.expect("memory load");
    let memory = Memory {
        secrets: plan.secrets,
        secret_bytes: plan.secret_bytes,
        reviews: result.latencies.len(),
        rss_start,
        rss_peak: stats.peak_rss_mib(),
        rss_end: stats.rss_mib(),
        samples,
    };
    assert_eq!(server.terminate().await, Some(0));
    memory
}

fn report(rows: &[Row], lookups_ok: bool, memory: &Memory, plan: &Plan) -> String {
    let mut out = String::new();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let _ = writeln!(
        out,
        "Load: closed loop, keep-alive TLS 1.3 (AES-128-GCM, X25519), {} s per level, mix of 4 reviews",
        plan.duration.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "(20.7 KB Deployment CREATE, 41.2 KB Deployment UPDATE with oldObject, CronJob, Pod).\n"
    );
    let _ = writeln!(
        out,
        "| target | conc. | req/s | p50 ms | p99 ms | p99.9 ms | CPU s / 1k | peak RSS MiB | vs floor req/s | p99 − floor |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for row in rows {
        let floor =
            rows.iter().find(|r| r.target.starts_with("floor") && r.concurrency == row.concurrency);
        let (ratio, p99_delta) = match floor {
            Some(f) if !row.target.starts_with("floor") => (
                format!(
                    "{:.0} %",
                    100.0 * row.result.requests_per_second() / f.result.requests_per_second()
                ),
                format!("{:+.2} ms", ms(row.result.quantile(0.99)) - ms(f.result.quantile(0.99))),
            ),
            _ => ("".into(), "".into()),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.3} | {:.1} | {} | {} |",
            row.target,
            row.concurrency,
            row.result.requests_per_second(),
            ms(row.result.quantile(0.5)),
            ms(row.result.quantile(0.99)),
            ms(row.result.quantile(0.999)),
            row.cpu_per_1000,
            row.peak_rss_mib,
            ratio,
            p99_delta
        );
    }
    let _ = writeln!(
        out,
        "\nAPI requests: {}",
        if lookups_ok {
            "exactly one per distinct referenced object per review"
        } else {
            "MISMATCH (see above)"
        }
    );
    let samples: Vec<String> = memory.samples.iter().map(|s| format!("{s:.1}")).collect();
    let _ = writeln!(
        out,
        "\nMemory: {} Secrets of {} KB in the fake API server, {} reviews of 250 Deployments reading 2 of them each, 8 connections:\n\
         RSS {:.1} MiB at start, {:.1} MiB peak, {:.1} MiB at the end; samples: {}",
        memory.secrets,
        memory.secret_bytes / 1024,
        memory.reviews,
        memory.rss_start,
        memory.rss_peak,
        memory.rss_end,
        samples.join(" ")
    );
    out
}
