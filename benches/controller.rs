//! `make bench-controller`: `configsum controller` (the release binary)
//! against the fake API server holding a large cluster.
//!
//! 100 namespaces labelled `configsum.dev/enabled=true` (and
//! `configsum-system`, not labelled) hold 100,000 Secrets, 20,000 ConfigMaps
//! and 10,000 Deployments. Each Deployment reads one Secret and one ConfigMap
//! of its own; in `bench-000` all 100 also read the Secret `shared`. Every
//! Deployment already carries the digests the webhook wrote at its creation
//! (computed with tests/support/fixtures.rs and the same key as the
//! controller), so a correct controller has nothing to patch at start-up.
//!
//! Then a second, realistic shape (the one a user measured): 50 namespaces
//! holding the same 100,000 Secrets, 20,000 ConfigMaps and 10,000
//! Deployments, each Secret with the metadata a Helm-managed one has on a
//! real cluster (six labels, three annotations, one `managedFields` entry),
//! each Deployment with the `configsum.dev/waves` record earlier rolls in
//! waves left on it (two sources);
//! the controller is measured once synced and again after every watch it
//! holds was ended with a 410 Gone and listed again while loaded.
//! Then, only when asked for (`BENCH_CONTROLLER_SHAPES=million`, `make
//! bench-controller-million`), the million shape: 500 namespaces holding
//! 1,000,000 Secrets with Helm's metadata, 100,000 ConfigMaps and 50,000
//! Deployments with waves records (2,000, 200 and 100 a namespace, each
//! Deployment reading its own Secret and ConfigMap: 100,000 tracked objects),
//! measured as the realistic one and then for the reaction to 20 Secret
//! changes; its targets are 256 MiB of peak RSS and 60 s to ready. The fake
//! API server holds each object as its JSON text, about 1.6 GB for this shape.
//! `BENCH_CONTROLLER_SHAPES` takes a comma-separated list (`base,realistic`,
//! the default; `million`; `realistic,million`);
//! `BENCH_CONTROLLER_WAVE_RECORDS=0` leaves the waves records out (what they cost);
//! `BENCH_CONTROLLER_WRAPPER="heaptrack -o FILE"` runs the controller under
//! that command (its RSS rows then measure the wrapper).
//!
//! Measured: spawn to `/readyz` 200; the controller's peak RSS (VmHWM) once
//! synced and at the end; PATCHes at start-up (must be 0); the API requests
//! one single-Secret change costs (request log, by method); the reaction
//! time from a Secret write to the PATCH of its workload (request-log
//! arrival time) for 20 Secrets each tracked by one workload, changed one at
//! a time, and for `shared`, tracked by 100 workloads. Prints a Markdown
//! report and writes it to target/bench/controller.md.
//!
//! A patch that does not arrive within 30 s fails the run (the report so far
//! is printed first). The controller process is killed on every exit path.
//! Run with `--bench` (as `cargo bench` does); under `cargo test` it does
//! nothing.

#[path = "../tests/support/fake_apiserver.rs"]
mod fake_apiserver;
#[path = "../tests/support/fixtures.rs"]
mod fixtures;
#[path = "../tests/support/server.rs"]
mod server;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use configsum::core::ObjectRef;
use fake_apiserver::{FakeApiServer, Logged};
use fixtures::{Admit, Objects, apply};
use serde_json::{Value, json};
use server::TempDir;
use tokio::process::Child;

const NAMESPACES: usize = 100;
const SECRETS_PER_NAMESPACE: usize = 1_000;
const CONFIG_MAPS_PER_NAMESPACE: usize = 200;
const DEPLOYMENTS_PER_NAMESPACE: usize = 100;
/// Its Deployments all read the Secret `shared` too.
const SHARED_NAMESPACE: &str = "bench-000";
const SINGLE_CHANGES: usize = 20;
const PATCH_DEADLINE: Duration = Duration::from_secs(30);
const READY_DEADLINE: Duration = Duration::from_secs(120);
const SETTLE_DEADLINE: Duration = Duration::from_secs(120);
/// The controller's default `--window`; the bench does not set it.
const WINDOW: Duration = Duration::from_secs(2);
const DIGEST_KEY: &str = "0123456789abcdef0123456789abcdef\n";
/// The controller's bearer token, to tell its requests apart in the log.
const TOKEN: &str = "controller";
const LEASE: &str =
    "/apis/coordination.k8s.io/v1/namespaces/configsum-system/leases/configsum-controller";
const RSS_TARGET_MIB: f64 = 64.0;
/// The user's shape: as many objects in half the namespaces, realistic metadata.
const REALISTIC: Shape = Shape {
    name: "realistic shape",
    namespaces: 50,
    secrets: 2_000,
    config_maps: 400,
    deployments: 200,
    rich: true,
    rss_target_mib: RSS_TARGET_MIB,
    ready_target: READY_TARGET,
    deadline: READY_DEADLINE,
};
const BASE: Shape = Shape {
    name: "base shape",
    namespaces: NAMESPACES,
    secrets: SECRETS_PER_NAMESPACE,
    config_maps: CONFIG_MAPS_PER_NAMESPACE,
    deployments: DEPLOYMENTS_PER_NAMESPACE,
    rich: false,
    rss_target_mib: RSS_TARGET_MIB,
    ready_target: READY_TARGET,
    deadline: READY_DEADLINE,
};
/// Issue 40's cluster: a million Secrets in 500 namespaces, 100,000 objects tracked. 500
/// namespaces keeps each one's counts those of the realistic shape but for the Deployments
/// (100, as in the base shape), so what grows is the cluster, not a namespace.
const MILLION: Shape = Shape {
    name: "million shape",
    namespaces: 500,
    secrets: 2_000,
    config_maps: 200,
    deployments: 100,
    rich: true,
    rss_target_mib: 256.0,
    ready_target: Duration::from_secs(60),
    deadline: Duration::from_secs(300),
};
const READY_TARGET: Duration = Duration::from_secs(30);

/// Whether the realistic shape's Deployments carry waves records (`BENCH_CONTROLLER_WAVE_RECORDS`).
fn wave_records() -> bool {
    std::env::var("BENCH_CONTROLLER_WAVE_RECORDS").as_deref() != Ok("0")
}

/// What the fake API server is filled with: per namespace, Secrets,
/// ConfigMaps and Deployments (each reading the Secret and ConfigMap of its
/// number); `rich`: Secrets carry a Helm-managed object's metadata.
struct Shape {
    /// As the report names it.
    name: &'static str,
    namespaces: usize,
    secrets: usize,
    config_maps: usize,
    deployments: usize,
    rich: bool,
    rss_target_mib: f64,
    ready_target: Duration,
    /// How long readiness, a settling and a relist may each take before the run fails.
    deadline: Duration,
}

/// A Secret as Helm leaves it on a real cluster: its labels, annotations and
/// the one `managedFields` entry the server records for the writer, all of
/// which a metadata-only list returns.
fn rich_secret(ns: &str, i: usize, data: &[(String, String)]) -> Value {
    let b64 = base64::engine::general_purpose::STANDARD;
    let release = format!("app-{:02}", i % 40);
    let encoded: serde_json::Map<String, Value> =
        data.iter().map(|(k, v)| (k.clone(), json!(base64::Engine::encode(&b64, v)))).collect();
    json!({
        "metadata": {
            "labels": {
                "app.kubernetes.io/name": format!("svc-{i:04}"),
                "app.kubernetes.io/instance": release,
                "app.kubernetes.io/component": "backend",
                "app.kubernetes.io/part-of": "shop",
                "app.kubernetes.io/managed-by": "Helm",
                "helm.sh/chart": "app-1.14.2",
            },
            "annotations": {
                "meta.helm.sh/release-name": release,
                "meta.helm.sh/release-namespace": ns,
                "checksum/values": token(i),
            },
            "managedFields": [{
                "manager": "helm",
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2026-11-20T09:14:07Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:data": {".": {}, "f:DATABASE_URL": {}, "f:password": {}, "f:username": {}},
                    "f:metadata": {
                        "f:annotations": {
                            ".": {},
                            "f:checksum/values": {},
                            "f:meta.helm.sh/release-name": {},
                            "f:meta.helm.sh/release-namespace": {},
                        },
                        "f:labels": {
                            ".": {},
                            "f:app.kubernetes.io/component": {},
                            "f:app.kubernetes.io/instance": {},
                            "f:app.kubernetes.io/managed-by": {},
                            "f:app.kubernetes.io/name": {},
                            "f:app.kubernetes.io/part-of": {},
                            "f:helm.sh/chart": {},
                        },
                    },
                    "f:type": {},
                },
            }],
        },
        "type": "Opaque",
        "data": encoded,
    })
}

fn namespace(i: usize) -> String {
    format!("bench-{i:03}")
}

/// A few hundred bytes of deterministic, realistic-looking configuration.
fn token(seed: usize) -> String {
    let mut x = (seed as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5851_f42d_4c95_7f2d;
    (0..4)
        .map(|_| {
            x ^= x >> 33;
            x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
            format!("{x:016x}")
        })
        .collect()
}

fn secret_data(ns: &str, i: usize, generation: usize) -> Vec<(String, String)> {
    let password = token(i * 7919 + generation * 104_729 + ns.len());
    vec![
        ("username".into(), format!("svc-{ns}-{i:03}")),
        ("password".into(), password.clone()),
        (
            "DATABASE_URL".into(),
            format!(
                "postgres://svc-{i:03}:{password}@db-{i:03}.{ns}.svc.cluster.local:5432/app?sslmode=require"
            ),
        ),
    ]
}

fn config_map_data(ns: &str, i: usize) -> Vec<(String, String)> {
    vec![
        ("LOG_LEVEL".into(), "info".into()),
        (
            "app.properties".into(),
            format!(
                "service.name=app-{i:03}\nservice.namespace={ns}\nhttp.port=8080\nhttp.timeout=30s\n\
                 cache.ttl=300\nfeature.flags=search,checkout,recommendations\n\
                 upstream.url=http://api.{ns}.svc.cluster.local:8080/v1\n"
            ),
        ),
    ]
}

fn borrowed(data: &[(String, String)]) -> Vec<(&str, &str)> {
    data.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// Fills the fake API server with `shape`; returns how long it took.
fn fill(api: &FakeApiServer, shape: &Shape) -> Duration {
    let started = Instant::now();
    api.put_namespace("configsum-system", &[]);
    let mut objects = Objects::default();
    for n in 0..shape.namespaces {
        let ns = namespace(n);
        api.put_namespace(&ns, &[("configsum.dev/enabled", "true")]);
        for i in 0..shape.secrets {
            let data = secret_data(&ns, i, 0);
            let name = format!("s-{i:03}");
            if shape.rich {
                api.put(&FakeApiServer::secret_path(&ns, &name), rich_secret(&ns, i, &data));
            } else {
                api.put_secret(&ns, &name, &borrowed(&data));
            }
            if i < shape.deployments {
                objects.insert(&ns, ObjectRef::secret(name), &borrowed(&data));
            }
        }
        for i in 0..shape.config_maps {
            let data = config_map_data(&ns, i);
            api.put_config_map(&ns, &format!("c-{i:03}"), &borrowed(&data));
            if i < shape.deployments {
                objects.insert(&ns, ObjectRef::config_map(format!("c-{i:03}")), &borrowed(&data));
            }
        }
    }
    let shared = secret_data(SHARED_NAMESPACE, 9_999, 0);
    api.put_secret(SHARED_NAMESPACE, "shared", &borrowed(&shared));
    objects.insert(SHARED_NAMESPACE, ObjectRef::secret("shared"), &borrowed(&shared));
    for n in 0..shape.namespaces {
        let ns = namespace(n);
        for i in 0..shape.deployments {
            let (secret, config_map) = (format!("s-{i:03}"), format!("c-{i:03}"));
            let mut secrets = vec![secret.as_str()];
            if ns == SHARED_NAMESPACE {
                secrets.push("shared");
            }
            let spec = fixtures::pod_spec_env_from(&[config_map.as_str()], &secrets);
            let mut object = fixtures::workload("Deployment", &ns, spec);
            let name = format!("d-{i:03}");
            object["metadata"]["name"] = json!(name);
            if shape.rich && wave_records() {
                // As after earlier changes rolled in waves: each roll's record, on its metadata.
                let record = format!(
                    r#"{{"configmap/{config_map}":{{"change":"0123456789ab","wave":3,"at":"2026-11-20T10:00:00Z"}},"secret/{secret}":{{"change":"fedcba987654","wave":1,"at":"2026-11-21T10:00:00Z","digest":"aaaaaaaaaaaa"}}}}"#
                );
                object["metadata"]["annotations"] = json!({"configsum.dev/waves": record});
            }
            let app = json!({"app": name});
            object["spec"]["selector"]["matchLabels"] = app.clone();
            object["spec"]["template"]["metadata"]["labels"] = app;
            // The digests the webhook wrote when the Deployment was created.
            let decision = Admit::new("Deployment", "CREATE", &object).run(&objects);
            let admitted = apply(&object, &decision);
            api.put(&FakeApiServer::deployment_path(&ns, &name), admitted);
        }
    }
    started.elapsed()
}

/// The running controller; killed when dropped (on every exit path).
struct Controller {
    child: Child,
    pid: u32,
    metrics: String,
    logs: Arc<Mutex<Vec<String>>>,
}

impl Controller {
    async fn spawn(kubeconfig: &str, key_file: &str) -> Controller {
        Controller::spawn_as(kubeconfig, key_file, "bench", &[]).await
    }

    /// The same as `identity`, with `extra` arguments (a shard's `--shard I/N`).
    async fn spawn_as(
        kubeconfig: &str,
        key_file: &str,
        identity: &str,
        extra: &[&str],
    ) -> Controller {
        let mut args = vec![
            "controller",
            "--digest-key-file",
            key_file,
            "--metrics-listen",
            "127.0.0.1:0",
            "--rate",
            "10000",
            "--burst",
            "10000",
            "--lease-namespace",
            "configsum-system",
            "--identity",
            identity,
            "--log-format",
            "json",
            // Scale and reaction are measured here: the fake completes no rollout, so the 100
            // readers of `shared` roll at once (waves: make bench-waves).
            "--fan-out",
            "all",
        ];
        args.extend_from_slice(extra);
        // A profiler in front (`heaptrack`), for where the memory goes; VmHWM is then the wrapper's.
        let wrapper = std::env::var("BENCH_CONTROLLER_WRAPPER").unwrap_or_default();
        let mut program: Vec<&str> = wrapper.split_whitespace().collect();
        program.push(env!("CARGO_BIN_EXE_configsum"));
        // As the image sets it (Dockerfile).
        let env = [("KUBECONFIG", kubeconfig), ("MALLOC_ARENA_MAX", "2")];
        let (child, logs, line) =
            server::spawn_program(&program, &args, &env, "configsum controller started").await;
        let pid = child.id().expect("the controller runs");
        let metrics = line["metrics_listen"].as_str().expect("metrics_listen").to_owned();
        Controller { child, pid, metrics, logs }
    }

    /// `VmHWM:` or `VmRSS:` of the controller, in MiB.
    fn memory_mib(&self, field: &str) -> f64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kib| kib.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    }

    /// Where the RSS is: the heap and stacks (`RssAnon`) and the binary's pages (`RssFile`).
    fn rss_split(&self) -> String {
        format!(
            "{:.1} MiB anonymous, {:.1} MiB file-backed",
            self.memory_mib("RssAnon:"),
            self.memory_mib("RssFile:")
        )
    }

    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// GET on the metrics listener: (status, body), or `None` if it does not answer.
    async fn get(&self, path: &str) -> Option<(u16, String)> {
        let attempt = async {
            let tcp = tokio::net::TcpStream::connect(&self.metrics).await.ok()?;
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
                    .await
                    .ok()?;
            tokio::spawn(connection);
            let request = hyper::Request::builder()
                .uri(path)
                .header("host", "bench")
                .body(http_body_util::Full::new(hyper::body::Bytes::new()))
                .ok()?;
            let response = sender.send_request(request).await.ok()?;
            let status = response.status().as_u16();
            let body =
                http_body_util::BodyExt::collect(response.into_body()).await.ok()?.to_bytes();
            Some((status, String::from_utf8_lossy(&body).into_owned()))
        };
        tokio::time::timeout(Duration::from_secs(5), attempt).await.ok().flatten()
    }

    fn last_logs(&self, n: usize) -> Vec<String> {
        let logs = self.logs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        logs.iter().rev().take(n).rev().cloned().collect()
    }

    /// SIGTERM, then the exit code (SIGKILL after 20 s).
    async fn stop(mut self) -> Option<i32> {
        let _ = std::process::Command::new("kill").args(["-TERM", &self.pid.to_string()]).status();
        match tokio::time::timeout(Duration::from_secs(20), self.child.wait()).await {
            Ok(Ok(status)) => status.code(),
            _ => {
                let _ = self.child.kill().await;
                None
            }
        }
    }
}

/// Sum of the samples of a metric family in an OpenMetrics text.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

/// The nearest-rank percentile.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// Requests by method, e.g. "GET 3, PATCH 1, POST 1".
fn by_method<'a>(entries: impl Iterator<Item = &'a Logged>, per: f64) -> String {
    let mut counts: BTreeMap<&str, f64> = BTreeMap::new();
    for entry in entries {
        *counts.entry(entry.method.as_str()).or_default() += 1.0;
    }
    if counts.is_empty() {
        return "none".into();
    }
    counts
        .iter()
        .map(|(m, n)| {
            let n = n / per;
            if n.fract() == 0.0 { format!("{m} {n:.0}") } else { format!("{m} {n:.2}") }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[derive(Default)]
struct Report {
    rows: Vec<[String; 3]>,
    notes: Vec<String>,
}

impl Report {
    fn row(&mut self, what: &str, value: String, target: &str) {
        self.rows.push([what.to_owned(), value, target.to_owned()]);
    }

    fn note(&mut self, note: String) {
        eprintln!("  {note}");
        self.notes.push(note);
    }

    fn render(&self, failure: Option<&str>) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "## configsum controller against the fake API server\n");
        let _ = writeln!(
            out,
            "{NAMESPACES} enabled namespaces; {} Secrets, {} ConfigMaps, {} Deployments with \
             current digests; window {} s (the default), `--rate 10000 --burst 10000`; release \
             build; loopback, {} CPUs. The realistic shape: the same objects in {} namespaces, \
             Secrets with Helm's labels, annotations and `managedFields`, Deployments {}. \
             The million shape (only when asked for): {} namespaces holding {} Secrets as the \
             realistic ones, {} ConfigMaps and {} Deployments as the realistic ones.\n",
            NAMESPACES * SECRETS_PER_NAMESPACE + 1,
            NAMESPACES * CONFIG_MAPS_PER_NAMESPACE,
            NAMESPACES * DEPLOYMENTS_PER_NAMESPACE,
            WINDOW.as_secs(),
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            REALISTIC.namespaces,
            if wave_records() {
                "with the waves record of two earlier rolls"
            } else {
                "without waves records (BENCH_CONTROLLER_WAVE_RECORDS=0)"
            },
            MILLION.namespaces,
            MILLION.namespaces * MILLION.secrets,
            MILLION.namespaces * MILLION.config_maps,
            MILLION.namespaces * MILLION.deployments,
        );
        let _ = writeln!(out, "| measure | value | target |");
        let _ = writeln!(out, "|---|---:|---|");
        for [what, value, target] in &self.rows {
            let _ = writeln!(out, "| {what} | {value} | {target} |");
        }
        if let Some(failure) = failure {
            let _ = writeln!(out, "\n**FAILED:** {failure}");
        }
        if !self.notes.is_empty() {
            let _ = writeln!(out);
            for note in &self.notes {
                let _ = writeln!(out, "- {note}");
            }
        }
        out
    }

    fn publish(&self, failure: Option<&str>) {
        let text = self.render(failure);
        println!("\n{text}");
        let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
        let _ = std::fs::create_dir_all(&out);
        let _ = std::fs::write(out.join("controller.md"), &text);
    }
}

/// Prints the report so far and the controller's last log lines, then
/// panics; unwinding drops (and so kills) the controller.
fn fail(report: &Report, controller: &Controller, why: &str) -> ! {
    report.publish(Some(why));
    eprintln!("last controller log lines:");
    for line in controller.last_logs(20) {
        eprintln!("  {line}");
    }
    panic!("{why}");
}

/// Waits for the first PATCH of `path` that arrived at or after `since`.
async fn patch_of(api: &FakeApiServer, path: &str, since: Instant) -> Option<Logged> {
    let deadline = Instant::now() + PATCH_DEADLINE;
    loop {
        if let Some(found) =
            api.log().into_iter().find(|l| l.method == "PATCH" && l.path == path && l.at >= since)
        {
            return Some(found);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn annotations(api: &FakeApiServer, ns: &str, name: &str) -> Value {
    api.object(&FakeApiServer::deployment_path(ns, name))
        .map(|o| o["spec"]["template"]["metadata"]["annotations"].clone())
        .unwrap_or_default()
}

/// Waits for `/readyz` 200; how long it took since `spawned`.
async fn until_ready(
    report: &Report,
    controller: &mut Controller,
    spawned: Instant,
    deadline: Duration,
) -> Duration {
    loop {
        if let Some(status) = controller.exited() {
            fail(report, controller, &format!("the controller exited during start-up: {status}"));
        }
        if controller.get("/readyz").await.is_some_and(|(code, _)| code == 200) {
            return spawned.elapsed();
        }
        if spawned.elapsed() > deadline {
            let why = format!("the controller was not ready within {} s", deadline.as_secs());
            fail(report, controller, &why);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until nothing is queued and no PATCH came for 2 s (and at least a
/// window went by); a note says how it went, `what` names the phase.
async fn settle(report: &mut Report, controller: &Controller, what: &str, deadline: Duration) {
    let settle_started = Instant::now();
    let mut last = (-1.0, settle_started);
    loop {
        let Some((_, text)) = controller.get("/metrics").await else {
            fail(report, controller, "the metrics listener stopped answering");
        };
        let done = metric(&text, "configsum_controller_patches_total") + 0.0;
        let queued = metric(&text, "configsum_controller_queue_depth");
        if done != last.0 {
            last = (done, Instant::now());
        }
        let quiet = last.1.elapsed() >= Duration::from_secs(2);
        if queued == 0.0 && quiet && settle_started.elapsed() >= WINDOW + Duration::from_secs(1) {
            report.note(format!(
                "{what}: reconciliations: {done} (patched, unchanged, conflict, failed), settled {:.1} s after it began; \
                 watched objects: {}",
                last.1.saturating_duration_since(settle_started).as_secs_f64(),
                metric(&text, "configsum_controller_watched_objects"),
            ));
            return;
        }
        if settle_started.elapsed() > deadline {
            let why = format!("{what}: did not settle within {} s", deadline.as_secs());
            fail(report, controller, &why);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn rss_row(report: &mut Report, what: &str, mib: f64) {
    rss_row_within(report, what, mib, RSS_TARGET_MIB);
}

fn rss_row_within(report: &mut Report, what: &str, mib: f64, target: f64) {
    let met = if mib <= target { "✓" } else { "✗" };
    report.row(what, format!("{mib:.1} MiB"), &format!("≤ {target:.0} MiB {met}"));
}

/// A GET of one ConfigMap or Secret: a read of its content.
fn is_content_read(l: &Logged) -> bool {
    l.method == "GET"
        && l.query.is_empty()
        && (l.path.contains("/secrets/") || l.path.contains("/configmaps/"))
}

/// This process's own peak RSS (the fake API server and its objects), in MiB.
fn own_peak_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kib| kib.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

#[tokio::main]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!(
            "benches/controller.rs runs under `cargo bench --bench controller` (make bench-controller) only"
        );
        return;
    }
    server::install_crypto_provider();
    let shapes = std::env::var("BENCH_CONTROLLER_SHAPES").unwrap_or_default();
    let shapes: Vec<&str> = match shapes.trim() {
        "" => vec!["base", "realistic"],
        list => list.split(',').map(str::trim).collect(),
    };
    let mut report = Report::default();
    let mut startup_patches = 0;
    for shape in shapes {
        startup_patches += match shape {
            "base" => base(&mut report).await,
            "realistic" => loaded(&mut report, &REALISTIC).await,
            "million" => loaded(&mut report, &MILLION).await,
            "million-sharded" => sharded(&mut report, &MILLION, shard_count()).await,
            other => {
                panic!(
                    "BENCH_CONTROLLER_SHAPES: no shape {other:?} (base, realistic, million, million-sharded)"
                )
            }
        };
    }
    report.publish(None);
    assert_eq!(startup_patches, 0, "a correct controller patches nothing at start-up");
}

/// The base shape: start-up, single changes, a Secret tracked by 100
/// workloads. Returns the PATCHes at start-up.
async fn base(report: &mut Report) -> usize {
    let api = FakeApiServer::start().await;
    eprintln!("filling the fake API server ...");
    let filled = fill(&api, &BASE);
    report.note(format!(
        "fake API server filled in {:.1} s (resourceVersion {})",
        filled.as_secs_f64(),
        api.resource_version()
    ));
    let dir = TempDir::new("bench-controller");
    let key_file = dir.path("digest.key");
    std::fs::write(&key_file, DIGEST_KEY).expect("digest key");
    let kubeconfig = api.kubeconfig_for(&dir.0, TOKEN).display().to_string();
    api.clear_log();

    // Start-up: spawn to ready, then let the start-up catch-up settle.
    let spawned = Instant::now();
    let mut controller = Controller::spawn(&kubeconfig, &key_file.display().to_string()).await;
    let ready = until_ready(report, &mut controller, spawned, BASE.deadline).await;
    let ready_met = if ready <= READY_TARGET { "✓" } else { "✗" };
    report.row(
        "spawn to `/readyz` 200",
        format!("{:.2} s", ready.as_secs_f64()),
        &format!("≤ 30 s {ready_met}"),
    );
    eprintln!("ready after {ready:?}; waiting for the start-up catch-up to settle ...");
    settle(report, &controller, "start-up", SETTLE_DEADLINE).await;
    let startup = api.log();
    let startup_patches = startup.iter().filter(|l| l.method == "PATCH").count();
    let pages = startup.iter().filter(|l| l.method == "GET" && l.query.contains("limit=")).count();
    let reads = startup.iter().filter(|l| l.method == "GET" && l.query.is_empty()).count();
    report.row(
        "PATCHes at start-up",
        startup_patches.to_string(),
        if startup_patches == 0 { "0 ✓" } else { "0 ✗" },
    );
    report.note(format!(
        "start-up API requests: {} ({}); {pages} LIST pages, {reads} single-object GETs",
        startup.len(),
        by_method(startup.iter(), 1.0)
    ));
    rss_row(report, "peak RSS once synced (VmHWM)", controller.memory_mib("VmHWM:"));
    api.clear_log();

    // Single-tracked Secrets, one at a time.
    let mut reactions = Vec::new();
    let mut changes = Vec::new();
    for k in 0..SINGLE_CHANGES {
        let ns = namespace(1 + k);
        let deployment = FakeApiServer::deployment_path(&ns, "d-000");
        let before = annotations(&api, &ns, "d-000");
        let data = secret_data(&ns, 0, 1);
        let written = Instant::now();
        api.put_secret(&ns, "s-000", &borrowed(&data));
        let Some(patch) = patch_of(&api, &deployment, written).await else {
            report.row(
                "reaction, single-tracked Secret",
                format!("no PATCH of {ns}/d-000 within 30 s of change {}", k + 1),
                "≤ window + 1 s ✗",
            );
            fail(
                report,
                &controller,
                &format!(
                    "no PATCH of Deployment {ns}/d-000 within 30 s of a change to Secret {ns}/s-000 \
                     (change {} of {SINGLE_CHANGES})",
                    k + 1
                ),
            );
        };
        reactions.push(patch.at.duration_since(written));
        // Let the Event and anything else that follows arrive.
        tokio::time::sleep(Duration::from_millis(500)).await;
        if annotations(&api, &ns, "d-000") == before {
            report.note(format!("{ns}/d-000 was patched but its annotations did not change"));
        }
        changes.push(written);
        eprintln!("  change {}: patched after {:?}", k + 1, reactions[k]);
    }
    let log = api.log();
    let mine = || {
        log.iter().filter(|l| l.token == TOKEN && l.path != LEASE && !l.query.contains("watch="))
    };
    let first_end = changes.get(1).copied().unwrap_or_else(Instant::now);
    let first = mine().filter(|l| l.at >= changes[0] && l.at < first_end);
    report.row("API requests for one Secret change (first change)", by_method(first, 1.0), "—");
    report.row(
        "API requests per Secret change (mean of 20)",
        by_method(mine(), SINGLE_CHANGES as f64),
        "—",
    );
    let lease_requests = log.iter().filter(|l| l.path == LEASE).count();
    report.note(format!(
        "not counted above: {lease_requests} Lease requests (renewals every 3 s) during the {SINGLE_CHANGES} changes"
    ));
    reactions.sort();
    let target = WINDOW + Duration::from_secs(1);
    let p99 = percentile(&reactions, 99.0);
    report.row(
        "reaction p50 / p99, 20 single-tracked Secrets",
        format!("{} / {}", ms(percentile(&reactions, 50.0)), ms(p99)),
        &format!("≤ {} {}", ms(target), if p99 <= target { "✓" } else { "✗" }),
    );
    api.clear_log();

    // One Secret tracked by 100 workloads.
    let data = secret_data(SHARED_NAMESPACE, 9_999, 1);
    let written = Instant::now();
    api.put_secret(SHARED_NAMESPACE, "shared", &borrowed(&data));
    let mut fanned = Vec::new();
    for i in 0..DEPLOYMENTS_PER_NAMESPACE {
        let path = FakeApiServer::deployment_path(SHARED_NAMESPACE, &format!("d-{i:03}"));
        match patch_of(&api, &path, written).await {
            Some(patch) => fanned.push(patch.at.duration_since(written)),
            None => {
                report.row(
                    "reaction, Secret tracked by 100 workloads",
                    format!("{} of 100 patched within 30 s", fanned.len()),
                    "≤ window + 1 s ✗",
                );
                fail(
                    report,
                    &controller,
                    &format!(
                        "no PATCH of {SHARED_NAMESPACE}/d-{i:03} within 30 s of a change to Secret `shared`"
                    ),
                );
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    fanned.sort();
    let p99 = percentile(&fanned, 99.0);
    report.row(
        "reaction p50 / p99, 1 Secret tracked by 100 workloads",
        format!("{} / {}", ms(percentile(&fanned, 50.0)), ms(p99)),
        &format!("≤ {} {}", ms(target), if p99 <= target { "✓" } else { "✗" }),
    );
    let log = api.log();
    report.note(format!(
        "API requests for the shared Secret's change: {}",
        by_method(
            log.iter()
                .filter(|l| l.token == TOKEN && l.path != LEASE && !l.query.contains("watch=")),
            1.0
        )
    ));

    rss_row(report, "peak RSS at the end (VmHWM)", controller.memory_mib("VmHWM:"));
    report.note(format!("RSS at the end (VmRSS): {:.1} MiB", controller.memory_mib("VmRSS:")));
    let code = controller.stop().await;
    report.note(format!("controller exit code after SIGTERM: {code:?}"));
    startup_patches
}

/// A shape with Helm's metadata: synced, then every watch ended with a 410 Gone and
/// listed again while loaded; for the million shape, then the reaction to Secret changes.
/// Returns the PATCHes at start-up.
async fn loaded(report: &mut Report, shape: &Shape) -> usize {
    let name = shape.name;
    let api = FakeApiServer::start().await;
    eprintln!("filling the fake API server ({name}) ...");
    let filled = fill(&api, shape);
    report.note(format!(
        "{name}: fake API server filled in {:.1} s (resourceVersion {}); this process's peak RSS {:.0} MiB",
        filled.as_secs_f64(),
        api.resource_version(),
        own_peak_mib()
    ));
    let dir = TempDir::new("bench-controller-loaded");
    let key_file = dir.path("digest.key");
    std::fs::write(&key_file, DIGEST_KEY).expect("digest key");
    let kubeconfig = api.kubeconfig_for(&dir.0, TOKEN).display().to_string();
    api.clear_log();

    let spawned = Instant::now();
    let mut controller = Controller::spawn(&kubeconfig, &key_file.display().to_string()).await;
    let ready = until_ready(report, &mut controller, spawned, shape.deadline).await;
    eprintln!("ready after {ready:?}; waiting for the start-up catch-up to settle ...");
    settle(report, &controller, &format!("{name}, start-up"), shape.deadline).await;
    let startup = api.log();
    let startup_patches = startup.iter().filter(|l| l.method == "PATCH").count();
    let pages = startup.iter().filter(|l| l.method == "GET" && l.query.contains("limit=")).count();
    let reads = startup.iter().filter(|l| is_content_read(l)).count();
    report.note(format!(
        "{name}: spawn to ready {:.2} s; {startup_patches} PATCHes at start-up; {pages} LIST \
         pages, {reads} content reads; RSS once synced (VmRSS) {:.1} MiB: {}",
        ready.as_secs_f64(),
        controller.memory_mib("VmRSS:"),
        controller.rss_split()
    ));
    if shape.ready_target != READY_TARGET {
        let met = if ready <= shape.ready_target { "✓" } else { "✗" };
        report.row(
            &format!("{name}: spawn to `/readyz` 200"),
            format!("{:.2} s", ready.as_secs_f64()),
            &format!("≤ {} s {met}", shape.ready_target.as_secs()),
        );
        let met = if startup_patches == 0 { "0 ✓" } else { "0 ✗" };
        report.row(&format!("{name}: PATCHes at start-up"), startup_patches.to_string(), met);
    }
    rss_row_within(
        report,
        &format!("{name}: peak RSS once synced (VmHWM)"),
        controller.memory_mib("VmHWM:"),
        shape.rss_target_mib,
    );

    // As after an etcd compaction: every watch ends with a 410 Gone and lists again.
    api.clear_log();
    let expired = Instant::now();
    let relisted = [
        "/api/v1/namespaces",
        "/api/v1/secrets",
        "/api/v1/configmaps",
        "/apis/apps/v1/deployments",
    ];
    for plural in ["namespaces", "secrets", "configmaps", "deployments"] {
        api.expire_watches(plural);
    }
    loop {
        let log = api.log();
        let watching = |path: &str| {
            log.iter().any(|l| l.path == path && l.query.contains("watch=") && l.at >= expired)
        };
        if relisted.iter().all(|p| watching(p)) {
            break;
        }
        if expired.elapsed() > shape.deadline {
            let why = format!(
                "{name}: the watches did not list again within {} s",
                shape.deadline.as_secs()
            );
            fail(report, &controller, &why);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let listed = expired.elapsed();
    settle(report, &controller, &format!("{name}, relist"), shape.deadline).await;
    let log = api.log();
    let pages = log.iter().filter(|l| l.method == "GET" && l.query.contains("limit=")).count();
    let reads = log.iter().filter(|l| is_content_read(l)).count();
    let others =
        log.iter().filter(|l| l.method == "GET" && l.query.is_empty() && l.path != LEASE).count()
            - reads;
    let patches = log.iter().filter(|l| l.method == "PATCH").count();
    report.note(format!(
        "{name}, relist: every watch listing again took {:.1} s; {pages} LIST pages, \
         {reads} content reads (GETs of a ConfigMap or Secret), {others} other GETs (discovery \
         of the kinds not served, every 30 s), {patches} PATCHes; RSS after it (VmRSS) {:.1} MiB: {}",
        listed.as_secs_f64(),
        controller.memory_mib("VmRSS:"),
        controller.rss_split()
    ));
    if shape.ready_target != READY_TARGET {
        let met = if reads == 0 { "0 ✓" } else { "0 ✗" };
        report.row(
            &format!("{name}: content reads (GETs) on a relist, nothing changed"),
            reads.to_string(),
            met,
        );
    }
    rss_row_within(
        report,
        &format!("{name}: peak RSS after a relist of every watch (VmHWM)"),
        controller.memory_mib("VmHWM:"),
        shape.rss_target_mib,
    );
    if shape.ready_target != READY_TARGET {
        reactions(report, &api, &controller, shape).await;
        rss_row_within(
            report,
            &format!("{name}: peak RSS at the end (VmHWM)"),
            controller.memory_mib("VmHWM:"),
            shape.rss_target_mib,
        );
    }
    let code = controller.stop().await;
    report.note(format!("{name}: controller exit code after SIGTERM: {code:?}"));
    startup_patches
}

/// `BENCH_CONTROLLER_SHARDS`: how many shards `million-sharded` runs (default 3).
fn shard_count() -> u32 {
    std::env::var("BENCH_CONTROLLER_SHARDS").ok().and_then(|n| n.parse().ok()).unwrap_or(3).max(1)
}

/// `shape` served by `count` controllers at once, each `--shard I/N`, as a cluster too large
/// for one would run them: each shard's spawn to ready and peak RSS, synced and after a relist
/// of every watch, the content reads of that relist, and the reactions. Returns the PATCHes
/// at start-up.
async fn sharded(report: &mut Report, shape: &Shape, count: u32) -> usize {
    let name = format!("{} in {count} shards", shape.name);
    let api = FakeApiServer::start().await;
    eprintln!("filling the fake API server ({name}) ...");
    let filled = fill(&api, shape);
    report.note(format!("{name}: fake API server filled in {:.1} s", filled.as_secs_f64()));
    let dir = TempDir::new("bench-controller-sharded");
    let key_file = dir.path("digest.key");
    std::fs::write(&key_file, DIGEST_KEY).expect("digest key");
    let key_file = key_file.display().to_string();
    let kubeconfig = api.kubeconfig_for(&dir.0, TOKEN).display().to_string();
    api.clear_log();

    let spawned = Instant::now();
    let mut shards = Vec::new();
    for i in 0..count {
        let shard = format!("{i}/{count}");
        let identity = format!("bench-{i}");
        shards.push(
            Controller::spawn_as(&kubeconfig, &key_file, &identity, &["--shard", &shard]).await,
        );
    }
    let mut ready = Vec::new();
    for controller in &mut shards {
        ready.push(until_ready(report, controller, spawned, shape.deadline).await);
    }
    for (i, controller) in shards.iter().enumerate() {
        settle(report, controller, &format!("{name}, shard {i}, start-up"), shape.deadline).await;
    }
    let startup_patches = api.log().iter().filter(|l| l.method == "PATCH").count();
    for (i, controller) in shards.iter().enumerate() {
        let tracked = metric(
            &controller.get("/metrics").await.unwrap_or_default().1,
            "configsum_controller_watched_objects",
        );
        report.row(
            &format!("{name}: shard {i}/{count}, spawn to ready / peak RSS synced (VmHWM)"),
            format!("{:.1} s / {:.1} MiB", ready[i].as_secs_f64(), controller.memory_mib("VmHWM:")),
            &format!("{tracked} tracked objects"),
        );
    }
    report.row(&format!("{name}: PATCHes at start-up"), startup_patches.to_string(), "0");

    api.clear_log();
    let expired = Instant::now();
    for plural in ["namespaces", "secrets", "configmaps", "deployments"] {
        api.expire_watches(plural);
    }
    // Every shard lists again: one watch of each resource per shard, opened after the expiry.
    loop {
        let log = api.log();
        let relisted = [
            "/api/v1/namespaces",
            "/api/v1/secrets",
            "/api/v1/configmaps",
            "/apis/apps/v1/deployments",
        ]
        .iter()
        .all(|p| {
            log.iter()
                .filter(|l| l.path == *p && l.query.contains("watch=") && l.at >= expired)
                .count()
                >= count as usize
        });
        if relisted {
            break;
        }
        if expired.elapsed() > shape.deadline {
            fail(report, &shards[0], &format!("{name}: the shards did not list again in time"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (i, controller) in shards.iter().enumerate() {
        settle(report, controller, &format!("{name}, shard {i}, relist"), shape.deadline).await;
    }
    let reads = api.log().iter().filter(|l| is_content_read(l)).count();
    report.row(
        &format!("{name}: content reads on a relist, nothing changed"),
        reads.to_string(),
        "0",
    );
    for (i, controller) in shards.iter().enumerate() {
        report.row(
            &format!("{name}: shard {i}/{count}, peak RSS after the relist (VmHWM)"),
            format!("{:.1} MiB", controller.memory_mib("VmHWM:")),
            &format!("≤ {} MiB", shape.rss_target_mib),
        );
    }
    reactions(report, &api, &shards[0], shape).await;
    for controller in shards {
        controller.stop().await;
    }
    startup_patches
}

/// Secret writes, one at a time across the shape's namespaces, each Secret tracked by one
/// workload: the reaction p50 / p99 from the write to the workload's PATCH.
async fn reactions(
    report: &mut Report,
    api: &FakeApiServer,
    controller: &Controller,
    shape: &Shape,
) {
    let name = shape.name;
    let mut reactions = Vec::new();
    for k in 0..SINGLE_CHANGES {
        let ns = namespace(k * shape.namespaces / SINGLE_CHANGES);
        let deployment = FakeApiServer::deployment_path(&ns, "d-000");
        let data = secret_data(&ns, 0, 1);
        let written = Instant::now();
        api.put(&FakeApiServer::secret_path(&ns, "s-000"), rich_secret(&ns, 0, &data));
        let Some(patch) = patch_of(api, &deployment, written).await else {
            let why =
                format!("{name}: no PATCH of {ns}/d-000 within 30 s of a change to {ns}/s-000");
            fail(report, controller, &why);
        };
        reactions.push(patch.at.duration_since(written));
        eprintln!("  change {}: patched after {:?}", k + 1, reactions[k]);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    reactions.sort();
    let target = WINDOW + Duration::from_secs(1);
    let p99 = percentile(&reactions, 99.0);
    report.row(
        &format!("{name}: reaction p50 / p99, {SINGLE_CHANGES} single-tracked Secrets"),
        format!("{} / {}", ms(percentile(&reactions, 50.0)), ms(p99)),
        &format!("≤ {} {}", ms(target), if p99 <= target { "✓" } else { "✗" }),
    );
}
