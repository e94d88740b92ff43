//! `make bench`: configsum under load over keep-alive TLS, against the servers that bound
//! what it can do.
//!
//! In one run, on loopback, each at several fixed concurrency levels with the same TLS 1.3
//! cipher and the same bodies, three runs per level interleaved so that drift on a shared
//! machine falls on every side of a ratio:
//! - nginx answering a fixed AdmissionReview without reading the body (the floor: no
//!   HTTPS server on this machine answers faster);
//! - the parse limit: configsum's own stack (hyper, rustls, tokio) reading every body,
//!   checking it is JSON and echoing its uid, no patch (support/parse_limit.rs): what any
//!   webhook that reads its reviews must spend, and the goal configsum is measured against;
//! - configsum with `--objects-from` (the webhook's own cost);
//! - a Go webhook written the usual way (benches/go-webhook), answering with the same
//!   digests from the same objects (checked before the runs).
//!
//! Then configsum against the fake API server (zero latency), and the webhook's memory with
//! 10,000 Secrets of 100 KB. Prints a Markdown report and writes it to target/bench/load.md.
//!
//! Run with `--bench` (as `cargo bench` does) for the full run; otherwise (under
//! `cargo test`) a seconds-long smoke run checks that it still works, without the Go webhook
//! unless it was built already. The bench binary started with `--serve-parse-limit` is the
//! parse-limit server.

#[path = "../tests/support/fake_apiserver.rs"]
mod fake_apiserver;
#[path = "support/floor.rs"]
mod floor;
#[path = "support/go_webhook.rs"]
mod go_webhook;
#[path = "support/loadgen.rs"]
mod loadgen;
#[path = "support/parse_limit.rs"]
mod parse_limit;
#[path = "support/peer.rs"]
mod peer;
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
    /// Runs per target and level, interleaved with the floor's, so that drift on a shared
    /// machine falls on both sides of each ratio.
    runs: usize,
    duration: Duration,
    secrets: usize,
    secret_bytes: usize,
    memory_duration: Duration,
}

const FULL: Plan = Plan {
    concurrency: &[1, 8, 64],
    runs: 3,
    duration: Duration::from_secs(5),
    secrets: 10_000,
    secret_bytes: 100 * 1024,
    memory_duration: Duration::from_secs(20),
};
const SMOKE: Plan = Plan {
    concurrency: &[1, 8],
    runs: 1,
    duration: Duration::from_millis(300),
    secrets: 50,
    secret_bytes: 4 * 1024,
    memory_duration: Duration::from_millis(500),
};

const FLOOR: &str = "nginx, fixed answer (floor)";
const PARSE_LIMIT: &str = "parse limit";
const CONFIGSUM: &str = "configsum --objects-from";
const GO_WEBHOOK: &str = "Go webhook";

/// One target at one concurrency level: every run of it.
struct Row {
    target: &'static str,
    concurrency: usize,
    runs: Vec<Run>,
    peak_rss_mib: f64,
}

/// One measured run.
struct Run {
    result: LoadResult,
    cpu_per_1000: f64,
    /// Requests the target made to its API server during the run.
    api_requests: usize,
    /// Lookups the run's reviews made: one per distinct referenced object per review.
    lookups: usize,
}

impl Row {
    fn new(target: &'static str, concurrency: usize) -> Self {
        Row { target, concurrency, runs: Vec::new(), peak_rss_mib: 0.0 }
    }

    fn median(&self, of: impl Fn(&Run) -> f64) -> f64 {
        median(self.runs.iter().map(of).collect())
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn check_admission(_: usize, body: &[u8]) -> Result<(), String> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    if v["response"]["allowed"] != true {
        return Err(format!("not allowed: {v}"));
    }
    // Every server but nginx reads the review: it must answer the one it was asked.
    if v["response"]["uid"] != "bench" {
        return Err(format!("not the review's uid: {v}"));
    }
    Ok(())
}

fn check_anything(_: usize, _: &[u8]) -> Result<(), String> {
    Ok(())
}

/// A server under load: where it listens, its processes, how its answers are checked.
struct Target<'a> {
    name: &'static str,
    addr: &'a str,
    stats: ProcessStats,
    check: fn(usize, &[u8]) -> Result<(), String>,
    /// The API server it looks objects up in, whose requests a run counts.
    api: Option<&'a FakeApiServer>,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 4 && args[1] == parse_limit::ARG {
        return parse_limit::serve(&args[2], &args[3]);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build();
    runtime.expect("runtime").block_on(bench());
}

async fn bench() {
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
    let load = Load { connector: &connector, bodies: &bodies, plan: &plan };

    // The floor: nginx with a fixed AdmissionReview answer, up for the whole run.
    let floor_answer = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"bench","allowed":true}}"#;
    let nginx = floor::Nginx::start(&dir.0, &dir.0, floor_answer);
    if nginx.is_none() && full {
        panic!("nginx is needed for the floor: scripts/install-bench-deps.sh installs it");
    }
    let floor = match &nginx {
        Some(nginx) => Some(Target {
            name: FLOOR,
            addr: &nginx.addr,
            stats: ProcessStats::new(nginx_processes(nginx.pid).await),
            check: check_anything,
            api: None,
        }),
        None => {
            eprintln!("smoke run: no nginx, floor skipped");
            None
        }
    };

    // The parse limit and the Go webhook, up for the whole run as the floor is.
    let parse_limit_server = parse_limit::start(&dir.path("tls.crt"), &dir.path("tls.key"))
        .unwrap_or_else(|e| panic!("the parse-limit server did not start: {e}"));
    let go_server = match go_webhook::binary(full) {
        Ok(binary) => Some(go_webhook::start(&binary, &cert, &key, &digest, &objects)),
        Err(e) if !full => {
            eprintln!("smoke run: Go webhook skipped ({e}); scripts/build-go-webhook.sh builds it");
            None
        }
        Err(e) => panic!("the Go webhook is needed: scripts/build-go-webhook.sh failed: {e}"),
    };
    let parse_limit = peer_target(PARSE_LIMIT, &parse_limit_server);
    let go = go_server.as_ref().map(|server| peer_target(GO_WEBHOOK, server));

    // 1. configsum with --objects-from (the webhook's own cost), each run next to the others'.
    let mut rows: Vec<Row> = Vec::new();
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
        let server = start_configsum(&args, &[], &dir.path("ca.crt")).await;
        let configsum = Target {
            name: CONFIGSUM,
            addr: &server.addr,
            stats: ProcessStats::new(vec![server.child.id().expect("pid")]),
            check: check_admission,
            api: None,
        };
        if let Some(go) = &go {
            same_digests(&configsum, go, &connector, &mix).await;
        }
        let targets: Vec<&Target<'_>> =
            (floor.iter()).chain([&parse_limit, &configsum]).chain(go.as_ref()).collect();
        for run in 0..plan.runs {
            for &c in plan.concurrency {
                for target in &targets {
                    let row = row_of(&mut rows, target.name, c);
                    row.runs.push(load.measure(target, c).await);
                    row.peak_rss_mib = target.stats.peak_rss_mib();
                    eprintln!(
                        "run {}: {} at {c}: {:.0} req/s",
                        run + 1,
                        target.name,
                        row.runs.last().map_or(0.0, |r| r.result.requests_per_second())
                    );
                }
            }
        }
        assert_eq!(server.terminate().await, Some(0));
    }

    // 2. configsum against the fake API server, zero latency: every review makes its lookups.
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
            start_configsum(&args, &[("KUBECONFIG", &kubeconfig)], &dir.path("ca.crt")).await;
        let configsum = Target {
            name: "configsum + fake API server",
            addr: &server.addr,
            stats: ProcessStats::new(vec![server.child.id().expect("pid")]),
            check: check_admission,
            api: Some(&api),
        };
        for _ in 0..plan.runs {
            for &c in plan.concurrency {
                let mut run = load.measure(&configsum, c).await;
                let expected: usize =
                    run.result.answered.iter().zip(&mix).map(|(n, m)| n * m.lookups).sum();
                run.lookups = expected;
                let made = run.api_requests;
                // A GET per lookup, or fewer where concurrent reviews shared a read in
                // flight (lookup::coalesce); exactly one each when reviews never overlap.
                if made > expected || (c == 1 && made != expected) {
                    eprintln!(
                        "lookups at c={c}: {made} API requests for {expected} referenced objects"
                    );
                    lookups_ok = false;
                }
                let row = row_of(&mut rows, configsum.name, c);
                row.runs.push(run);
                row.peak_rss_mib = configsum.stats.peak_rss_mib();
            }
        }
        assert_eq!(server.terminate().await, Some(0));
    }
    drop(nginx);
    drop((parse_limit_server, go_server));

    // 3. Memory with many large Secrets, reviews referencing a rotating subset.
    let memory = memory_at_scale(&api, &plan, &dir, &kubeconfig, &connector).await;

    let report = report(&rows, lookups_ok, &memory, &plan);
    println!("{report}");
    if full {
        let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
        let _ = std::fs::create_dir_all(&out);
        let _ = std::fs::write(out.join("load.md"), &report);
    }
    assert!(lookups_ok, "at most one API request per distinct referenced object per review");
    assert!(
        rows.iter().all(|r| r.runs.iter().all(|run| run.result.errors == 0)),
        "every request answered"
    );
}

/// `configsum serve`: the binary cargo built, or `CONFIGSUM_BENCH_BIN`, to measure another build
/// (an earlier commit's, the image's) the same way.
/// Its log lines (one per review) are read and dropped, as a node's log collector reads them:
/// kept, they grew a vector of this process, the load generator's, all through the bench.
async fn start_configsum(args: &[&str], env: &[(&str, &str)], ca: &std::path::Path) -> Server {
    let server = match std::env::var("CONFIGSUM_BENCH_BIN") {
        Ok(bin) => Server::start_program(&[bin.as_str()], args, env, ca).await,
        Err(_) => Server::start(args, env, ca).await,
    };
    server.discard_logs();
    server
}

fn peer_target<'a>(name: &'static str, peer: &'a peer::Peer) -> Target<'a> {
    Target {
        name,
        addr: &peer.addr,
        stats: ProcessStats::new(vec![peer.pid]),
        check: check_admission,
        api: None,
    }
}

/// Aborts unless the Go webhook answers every review of the mix with configsum's digest
/// annotations (and at least one review gets some): otherwise the two do different work.
async fn same_digests(
    configsum: &Target<'_>,
    go: &Target<'_>,
    connector: &tokio_rustls::TlsConnector,
    mix: &[reviews::MixEntry],
) {
    let mut annotated = 0;
    for entry in mix {
        let post = |addr| loadgen::post(addr, connector, "/mutate", entry.body.clone());
        let ours = post(configsum.addr).await.expect("configsum's answer");
        let theirs = post(go.addr).await.expect("the Go webhook's answer");
        if let Err(e) = go_webhook::same_annotations(&ours, &theirs) {
            panic!("the Go webhook's patch for the {} differs from configsum's: {e}", entry.name);
        }
        annotated += go_webhook::annotations(&ours).map_or(0, |a| a.len());
    }
    assert!(annotated > 0, "configsum set no digest for the mix: nothing compared");
    eprintln!("the Go webhook sets configsum's {annotated} digest annotations over the mix");
}

/// nginx's master and the workers it forks after it starts listening.
async fn nginx_processes(master: u32) -> Vec<u32> {
    let mut workers = loadgen::children(master);
    for _ in 0..100 {
        if workers.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        workers = loadgen::children(master);
    }
    std::iter::once(master).chain(workers).collect()
}

fn row_of<'r>(rows: &'r mut Vec<Row>, target: &'static str, concurrency: usize) -> &'r mut Row {
    let at = rows.iter().position(|r| r.target == target && r.concurrency == concurrency);
    let at = at.unwrap_or_else(|| {
        rows.push(Row::new(target, concurrency));
        rows.len() - 1
    });
    &mut rows[at]
}

/// What every run shares: the client's TLS, the bodies, the plan.
struct Load<'a> {
    connector: &'a tokio_rustls::TlsConnector,
    bodies: &'a Arc<Vec<Vec<u8>>>,
    plan: &'a Plan,
}

impl Load<'_> {
    async fn measure(&self, target: &Target<'_>, concurrency: usize) -> Run {
        let (addr, connector, bodies) = (target.addr, self.connector, self.bodies);
        // A short warm-up on the same connections count, not recorded.
        let warm_up = self.plan.duration / 10;
        loadgen::run(
            addr,
            connector,
            "/mutate",
            bodies.clone(),
            concurrency,
            warm_up,
            target.check,
        )
        .await;
        let api_before = target.api.map_or(0, FakeApiServer::total_requests);
        let cpu_before = target.stats.cpu_seconds();
        let result = loadgen::run(
            addr,
            connector,
            "/mutate?timeout=10s",
            bodies.clone(),
            concurrency,
            self.plan.duration,
            target.check,
        )
        .await;
        let cpu = target.stats.cpu_seconds() - cpu_before;
        let cpu_per_1000 = cpu / result.latencies.len().max(1) as f64 * 1000.0;
        let api_requests = target.api.map_or(0, FakeApiServer::total_requests) - api_before;
        Run { result, cpu_per_1000, api_requests, lookups: 0 }
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
    let server = start_configsum(&args, &[("KUBECONFIG", kubeconfig)], &dir.path("ca.crt")).await;
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
        "Load: closed loop, keep-alive TLS 1.3 (AES-128-GCM, X25519), {} runs of {} s per level \
         (nginx, the parse limit, configsum --objects-from and the Go webhook interleaved), mix of 4 reviews",
        plan.runs,
        plan.duration.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "(Deployment CREATE, Deployment UPDATE with oldObject, CronJob, Pod). Medians of the runs; \
         the ranges are the runs' lowest and highest.\n"
    );
    let _ = writeln!(
        out,
        "| target | conc. | req/s | p50 ms | p99 ms | p99.9 ms | CPU s / 1k | peak RSS MiB |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|");
    for row in rows {
        let rps: Vec<f64> = row.runs.iter().map(|r| r.result.requests_per_second()).collect();
        let (low, high) = range(&rps);
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} ({low:.0}–{high:.0}) | {:.2} | {:.2} | {:.2} | {:.3} | {:.1} |",
            row.target,
            row.concurrency,
            median(rps.clone()),
            row.median(|r| ms(r.result.quantile(0.5))),
            row.median(|r| ms(r.result.quantile(0.99))),
            row.median(|r| ms(r.result.quantile(0.999))),
            row.median(|r| r.cpu_per_1000),
            row.peak_rss_mib,
        );
    }
    // configsum against each server it ran next to, run i against run i.
    let _ = writeln!(
        out,
        "\nconfigsum --objects-from against the others, run by run (median, range); \
         a req/s ratio of 1 is as fast, a CPU ratio of 1 as cheap per review:\n"
    );
    let _ = writeln!(
        out,
        "| conc. | req/s ÷ parse limit | req/s ÷ Go | req/s ÷ nginx | CPU / review ÷ parse limit | CPU / review ÷ Go | p99 − parse limit |"
    );
    let _ = writeln!(out, "|---:|---:|---:|---:|---:|---:|---:|");
    let rps = |r: &Run| r.result.requests_per_second();
    let cpu = |r: &Run| r.cpu_per_1000;
    for configsum in rows.iter().filter(|r| r.target == CONFIGSUM) {
        let other = |target| {
            rows.iter().find(|r| r.target == target && r.concurrency == configsum.concurrency)
        };
        let p99 = |r: &Run| ms(r.result.quantile(0.99));
        let p99_delta = other(PARSE_LIMIT).map_or(String::new(), |limit| {
            format!("{:+.2} ms", configsum.median(p99) - limit.median(p99))
        });
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {p99_delta} |",
            configsum.concurrency,
            ratio(configsum, other(PARSE_LIMIT), rps),
            ratio(configsum, other(GO_WEBHOOK), rps),
            ratio(configsum, other(FLOOR), rps),
            ratio(configsum, other(PARSE_LIMIT), cpu),
            ratio(configsum, other(GO_WEBHOOK), cpu),
        );
    }
    let _ = writeln!(
        out,
        "\nAPI requests: {}",
        if lookups_ok {
            "at most one per distinct referenced object per review, exactly one at 1 connection"
        } else {
            "MISMATCH (see above)"
        }
    );
    // Reads shared by concurrent reviews (lookup::coalesce), per level, over all runs.
    for row in rows.iter().filter(|r| r.runs.iter().any(|run| run.lookups > 0)) {
        let gets: usize = row.runs.iter().map(|r| r.api_requests).sum();
        let lookups: usize = row.runs.iter().map(|r| r.lookups).sum();
        let reviews: usize = row.runs.iter().map(|r| r.result.answered.iter().sum::<usize>()).sum();
        let _ = writeln!(
            out,
            "- {} at {}: {gets} GETs for {lookups} lookups ({:.2} GETs per review, {:.2} lookups)",
            row.target,
            row.concurrency,
            gets as f64 / reviews.max(1) as f64,
            lookups as f64 / reviews.max(1) as f64,
        );
    }
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

/// `row`'s runs over `other`'s, run by run: "median (lowest–highest)", or "–" without `other`.
fn ratio(row: &Row, other: Option<&Row>, of: impl Fn(&Run) -> f64) -> String {
    let Some(other) = other else { return "–".into() };
    let ratios: Vec<f64> = row.runs.iter().zip(&other.runs).map(|(r, o)| of(r) / of(o)).collect();
    let (low, high) = range(&ratios);
    format!("{:.2} ({low:.2}–{high:.2})", median(ratios.clone()))
}

fn range(values: &[f64]) -> (f64, f64) {
    let low = values.iter().copied().fold(f64::INFINITY, f64::min);
    let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (low, high)
}
