//! `make bench-waves`: how long a change of one Secret takes to roll 8, 40 and 400 workloads
//! in health-gated waves at the controller's defaults (`--window 2s`, `--rate 5`,
//! `--burst 20`, `--max-wave 50`), the release binary against the fake API server.
//!
//! The bench plays the Deployment controller: a Deployment patched to a new generation
//! reports its rollout complete `BENCH_WAVES_ROLLOUT` later (default 1s; `0s` measures
//! configsum's own share). Measured from the Secret write: when each wave's first patch
//! arrived (request log), and when the last workload completed. Prints a Markdown report
//! and writes it to target/bench/waves.md. `BENCH_WAVES_SIZES=8,40` runs only those.
//!
//! A run that does not finish within five minutes fails (the report so far printed first);
//! the controller process is killed on every exit path. Run with `--bench` (as `cargo bench`
//! does); under `cargo test` it does nothing.

#[path = "../tests/support/controller.rs"]
mod controller;
#[path = "../tests/support/digests.rs"]
mod digests;
#[path = "../tests/support/fake_apiserver.rs"]
mod fake_apiserver;
#[path = "../tests/support/fixtures.rs"]
mod fixtures;
#[path = "../tests/support/server.rs"]
mod server;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use controller::{Cluster, KEY, NS};
use fake_apiserver::FakeApiServer;
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(300);
const POLL: Duration = Duration::from_millis(50);

/// One run: `workloads` Deployments reading Secret `db`.
struct Run {
    workloads: usize,
    /// Each wave's first patch, since the write.
    waves: Vec<Duration>,
    /// The last rollout complete, since the write.
    total: Duration,
}

async fn run(workloads: usize, rollout: Duration) -> Run {
    let mut cluster = Cluster::new(&format!("bench-waves-{workloads}")).await;
    let names: Vec<String> = (0..workloads).map(|i| format!("w{i:03}")).collect();
    for name in &names {
        cluster.deployment(NS, name, &[], &["db"], true);
        complete(&cluster.api, name);
    }
    let kubeconfig = cluster.api.kubeconfig_for(&cluster.dir.0, "bench").display().to_string();
    let key = cluster.dir.path("digest.key");
    std::fs::write(&key, KEY).expect("key");
    let key = key.display().to_string();
    // The defaults, but for where the Lease is and how it logs.
    let args = [
        "controller",
        "--digest-key-file",
        key.as_str(),
        "--metrics-listen",
        "127.0.0.1:0",
        "--lease-namespace",
        "configsum-system",
        "--identity",
        "bench",
        "--log-format",
        "json",
    ];
    let (mut child, logs, line) = server::spawn(
        &args,
        &[("KUBECONFIG", kubeconfig.as_str())],
        "configsum controller started",
    )
    .await;
    let metrics = line["metrics_listen"].as_str().expect("metrics_listen").to_owned();
    server::until_ready(&metrics, &logs).await;

    let written = Instant::now();
    let at_write = cluster.api.log().len();
    cluster.secret("db", &[("password", "two")]);
    // The Deployment controller's part: each new generation completes `rollout` later.
    let mut completing: HashMap<String, Instant> = HashMap::new();
    let mut done: BTreeMap<String, Duration> = BTreeMap::new();
    while done.len() < workloads {
        assert!(
            written.elapsed() < LIMIT,
            "{workloads}: {} of them rolled within {LIMIT:?}",
            done.len()
        );
        for name in &names {
            if done.contains_key(name) {
                continue;
            }
            let path = FakeApiServer::deployment_path(NS, name);
            let Some(object) = cluster.api.object(&path) else { continue };
            let generation = object["metadata"]["generation"].as_i64();
            if generation <= object["status"]["observedGeneration"].as_i64() {
                continue;
            }
            let due = *completing.entry(name.clone()).or_insert_with(|| Instant::now() + rollout);
            if Instant::now() >= due {
                complete(&cluster.api, name);
                done.insert(name.clone(), written.elapsed());
            }
        }
        tokio::time::sleep(POLL).await;
    }
    let total = written.elapsed();
    // Each wave's first patch: the request log's arrival times, grouped by the wave each
    // workload recorded.
    let mut first_patch: HashMap<String, Duration> = HashMap::new();
    for logged in cluster.api.log().into_iter().skip(at_write) {
        if logged.method != "PATCH" {
            continue;
        }
        let Some(name) = logged.path.rsplit('/').next() else { continue };
        first_patch.entry(name.to_owned()).or_insert(logged.at.saturating_duration_since(written));
    }
    let mut waves: BTreeMap<u64, Duration> = BTreeMap::new();
    for name in &names {
        let object =
            cluster.api.object(&FakeApiServer::deployment_path(NS, name)).expect("workload");
        let record =
            object["metadata"]["annotations"]["configsum.dev/waves"].as_str().unwrap_or("{}");
        let record: serde_json::Value = serde_json::from_str(record).unwrap_or_default();
        let wave = record["secret/db"]["wave"].as_u64().unwrap_or(0);
        if let Some(at) = first_patch.get(name) {
            let first = waves.entry(wave).or_insert(*at);
            *first = (*first).min(*at);
        }
    }
    let _ = child.kill().await;
    Run { workloads, waves: waves.into_values().collect(), total }
}

/// Its rollout complete at its current generation: one replica, updated and available.
fn complete(api: &FakeApiServer, name: &str) {
    let path = FakeApiServer::deployment_path(NS, name);
    let Some(mut object) = api.object(&path) else { return };
    object["status"] = json!({"observedGeneration": object["metadata"]["generation"].clone(),
        "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1});
    api.put(&path, object);
}

fn seconds(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64())
}

#[tokio::main]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!(
            "benches/waves.rs runs under `cargo bench --bench waves` (make bench-waves) only"
        );
        return;
    }
    let rollout = std::env::var("BENCH_WAVES_ROLLOUT")
        .ok()
        .and_then(|v| humantime::parse_duration(&v).ok())
        .unwrap_or(Duration::from_secs(1));
    let sizes: Vec<usize> = std::env::var("BENCH_WAVES_SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![8, 40, 400]);
    let mut report = String::new();
    let _ = writeln!(
        report,
        "# Waves at the defaults (window 2s, rate 5/s, burst 20, max wave 50)\n\n\
         Each rollout completes {} after its patch (the bench plays the Deployment controller).\n\n\
         | workloads | waves | each wave's first patch (s after the write) | all complete (s) |\n|---|---|---|---|",
        humantime::format_duration(rollout)
    );
    for workloads in sizes {
        let run = run(workloads, rollout).await;
        let starts: Vec<String> = run.waves.iter().map(|d| seconds(*d)).collect();
        let _ = writeln!(
            report,
            "| {} | {} | {} | {} |",
            run.workloads,
            run.waves.len(),
            starts.join(", "),
            seconds(run.total)
        );
        println!("{report}");
    }
    let _ = std::fs::create_dir_all("target/bench");
    let _ = std::fs::write("target/bench/waves.md", &report);
}
