//! `make bench-node`: how long one Secret write takes to reach every pod on a real node (issue
//! 40, point 5), for 1, 10 and 100 workloads, with the chart's default fan-out (health-gated
//! waves) and with `all` (at once, paced only): what the waves cost against the node's own pace.
//!
//! The cluster is `make cluster`'s (scripts/cluster.sh, without its demo application): the
//! control plane, kube-scheduler, containerd and a kubelet on this machine, configsum installed
//! by its chart from the images in target/image, its webhook and controller running as pods at
//! the chart's defaults. The kubelet's maxPods is raised to 250 (`NODE_MAX_PODS`): 100
//! one-replica Deployments rolling at once hold 200 pods, configsum's own beside them.
//!
//! For each N (`BENCH_NODE_WORKLOADS`, default `1,10,100`): namespace `bench-node-<N>`, opted
//! in, holds ConfigMap `shared-config`, Secret `shared` and N config-echo Deployments of one
//! replica reading both (tests/node/cluster.rs's `app`, pointed at the shared objects). Once
//! every pod is Ready, for each fan-out (`BENCH_NODE_FAN_OUTS`, default `waves,all`; the chart
//! switched by `helm upgrade --reuse-values --set controller.fanOut=<fan-out>`), the Secret is
//! patched, then the namespace's pods and Deployments are listed every 200 ms (one list of
//! each, never one per Deployment) until every Deployment has a new pod Ready and every old
//! pod is gone. Measured from the write: the first and the last patch (a Deployment's
//! generation moved), the first and the last new pod Ready, the old pods gone. Checked: each
//! Deployment rolled exactly once (generation + 1, still so 3 s later, past the controller's
//! 2 s window) and its new pod serves the new value (every pod for N <= 10, ten spread over
//! the rest). Each phase fails, saying where it stood, after 2 minutes + 2 s per workload.
//!
//! Writes target/bench/node.md. Waits first while a control-plane or node test binary runs
//! (its cluster would share the cores). Needs root, `make tools image node-images`. Run with
//! `--bench` (as `cargo bench` does); under `cargo test` it does nothing.

#[path = "../tests/support/control_plane.rs"]
mod control_plane;
// The node tests' config-echo Deployment, pod reader, helm and what a pod serves.
#[allow(dead_code)]
#[path = "../tests/node/cluster.rs"]
mod cluster;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cluster::{Pod, SYSTEM, app, helm, served, wait_until};
use control_plane::{ControlPlane, config_map, secret};
use serde_json::{Value, json};

const SECRET: &str = "shared";
const CONFIG_MAP: &str = "shared-config";
/// The template annotation the webhook writes for the Secret.
const DIGEST: &str = "secret.configsum.dev/shared";
/// Where a roll in a wave records it (the workload's own metadata).
const WAVES: &str = "configsum.dev/waves";
/// The kubelet's maxPods for the run: 200 pods of the workloads mid-rollout and configsum's.
const MAX_PODS: &str = "250";
const POLL: Duration = Duration::from_millis(200);
/// Past the controller's coalescing window (the chart's 2 s): a second patch would show.
const SETTLE: Duration = Duration::from_secs(3);
/// Pods of N > 10 whose answer is checked.
const SAMPLED: usize = 10;

/// The knobs, from the environment.
struct Knobs {
    workloads: Vec<usize>,
    fan_outs: Vec<String>,
}

impl Knobs {
    fn from_env() -> Knobs {
        let list = |name: &str, default: &str| -> Vec<String> {
            std::env::var(name)
                .unwrap_or_else(|_| default.to_owned())
                .split(',')
                .map(|item| item.trim().to_owned())
                .filter(|item| !item.is_empty())
                .collect()
        };
        let workloads = list("BENCH_NODE_WORKLOADS", "1,10,100")
            .iter()
            .map(|n| match n.parse::<usize>() {
                Ok(n) if (1..=120).contains(&n) => n,
                _ => panic!("BENCH_NODE_WORKLOADS: {n} is not a number from 1 to 120"),
            })
            .collect();
        let fan_outs = list("BENCH_NODE_FAN_OUTS", "waves,all");
        for fan_out in &fan_outs {
            assert!(
                fan_out == "waves" || fan_out == "all",
                "BENCH_NODE_FAN_OUTS: {fan_out} is neither waves nor all"
            );
        }
        Knobs { workloads, fan_outs }
    }
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("benches/node.rs runs under `cargo bench --bench node` (make bench-node) only");
        return;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let knobs = Knobs::from_env();
    wait_while_cluster_tests_run();
    let started = Instant::now();
    let load_before = load_average();
    eprintln!("starting the cluster (scripts/cluster.sh, maxPods {MAX_PODS}) ...");
    let cp =
        ControlPlane::start_cluster_with(&[("CLUSTER_DEMO", "false"), ("NODE_MAX_PODS", MAX_PODS)]);
    let api = Api::new(&cp);
    // scripts/cluster.sh installs the chart with its default, waves.
    let mut fan_out = "waves".to_owned();
    let mut runs = Vec::new();
    for (i, &workloads) in knobs.workloads.iter().enumerate() {
        let namespace = format!("bench-node-{workloads}");
        eprintln!("{workloads} workload(s): creating them in {namespace} ...");
        let created = Instant::now();
        create_workloads(&cp, &api, &namespace, workloads);
        eprintln!("  all Ready in {:.1} s", created.elapsed().as_secs_f64());
        // Every other N takes the fan-outs the other way round: one chart upgrade fewer each.
        let mut order = knobs.fan_outs.clone();
        if i % 2 == 1 {
            order.reverse();
        }
        for wanted in order {
            if wanted != fan_out {
                switch_fan_out(&cp, &wanted);
                fan_out = wanted;
            }
            let run = roll(&api, &namespace, workloads, &fan_out);
            eprintln!(
                "  {fan_out}: first new pod Ready {:.1} s, last {:.1} s, old pods gone {:.1} s",
                run.first_ready.as_secs_f64(),
                run.last_ready.as_secs_f64(),
                run.old_gone.as_secs_f64()
            );
            runs.push(run);
        }
        delete_namespace(&cp, &namespace);
    }
    let report = report(&runs, &load_before, started.elapsed());
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    let _ = std::fs::create_dir_all(&out);
    std::fs::write(out.join("node.md"), &report).expect("write target/bench/node.md");
    println!("{report}");
    eprintln!("report written to {}", out.join("node.md").display());
    cp.stop();
}

/// Another cluster or control plane would share the cores and skew every number.
fn wait_while_cluster_tests_run() {
    let mut told = false;
    loop {
        // This bench's own binary is `node-<hash>` too.
        let me = std::process::id().to_string();
        let running = std::process::Command::new("pgrep")
            .args(["-f", "(control_plane|node)-[0-9a-f]+ "])
            .output()
            .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).lines().any(|pid| pid != me));
        if !running {
            return;
        }
        if !told {
            eprintln!(
                "a control-plane or node test binary is running; waiting for it to finish ..."
            );
            told = true;
        }
        std::thread::sleep(Duration::from_secs(5));
    }
}

/// The 1, 5 and 15 minute load averages.
fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// The API server as the admin, over one kept-alive connection: a poll costs a request, not
/// a kubectl process.
struct Api {
    runtime: tokio::runtime::Runtime,
    client: kube::Client,
}

impl Api {
    fn new(cp: &ControlPlane) -> Api {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let kubeconfig = cp.kubeconfig.clone();
        let client = runtime.block_on(async move {
            let file = kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig");
            let config = kube::Config::from_custom_kubeconfig(file, &Default::default())
                .await
                .expect("kube config");
            kube::Client::try_from(config).expect("kube client")
        });
        Api { runtime, client }
    }

    fn get(&self, path: &str) -> Result<Value, String> {
        let request = hyper::Request::get(path).body(Vec::new()).map_err(|e| e.to_string())?;
        let text = self
            .runtime
            .block_on(self.client.request_text(request))
            .map_err(|e| format!("GET {path}: {e}"))?;
        serde_json::from_str(&text).map_err(|e| format!("GET {path}: {e}"))
    }

    fn merge_patch(&self, path: &str, body: &Value) -> Result<(), String> {
        let request = hyper::Request::patch(path)
            .header("content-type", "application/merge-patch+json")
            .body(body.to_string().into_bytes())
            .map_err(|e| e.to_string())?;
        self.runtime
            .block_on(self.client.request_text(request))
            .map(drop)
            .map_err(|e| format!("PATCH {path}: {e}"))
    }

    /// The namespace's Deployments by name.
    fn deployments(&self, namespace: &str) -> Result<BTreeMap<String, Value>, String> {
        let list = self.get(&format!("/apis/apps/v1/namespaces/{namespace}/deployments"))?;
        Ok(items(&list)
            .iter()
            .map(|d| (d["metadata"]["name"].as_str().unwrap_or_default().to_owned(), d.clone()))
            .collect())
    }

    fn pods(&self, namespace: &str) -> Result<Vec<Pod>, String> {
        let list = self.get(&format!("/api/v1/namespaces/{namespace}/pods"))?;
        Ok(items(&list).iter().map(Pod::from_json).collect())
    }
}

fn items(list: &Value) -> &[Value] {
    list["items"].as_array().map(Vec::as_slice).unwrap_or_default()
}

fn generation(deployment: &Value) -> i64 {
    deployment["metadata"]["generation"].as_i64().unwrap_or_default()
}

/// Its Deployment: config-echo labels its pods `app=<Deployment>`.
fn app_of(pod: &Pod) -> &str {
    pod.json["metadata"]["labels"]["app"].as_str().unwrap_or_default()
}

/// Rolled out: its one replica updated, available, and seen by the Deployment controller.
fn rolled_out(deployment: &Value) -> bool {
    let status = &deployment["status"];
    status["observedGeneration"].as_i64() == Some(generation(deployment))
        && status["updatedReplicas"] == 1
        && status["readyReplicas"] == 1
        && status["replicas"] == 1
}

/// How long a phase over N workloads may take before the bench fails.
fn deadline(workloads: usize) -> Duration {
    Duration::from_secs(120 + 2 * workloads as u64)
}

/// Workload `i`: config-echo, one replica, reading the namespace's shared ConfigMap and Secret.
fn workload(namespace: &str, i: usize) -> Value {
    let mut deployment = app(namespace, &format!("web-{i:03}"), 1);
    let spec = &mut deployment["spec"]["template"]["spec"];
    for env in spec["containers"][0]["env"].as_array_mut().into_iter().flatten() {
        if env["valueFrom"]["configMapKeyRef"].is_object() {
            env["valueFrom"]["configMapKeyRef"]["name"] = json!(CONFIG_MAP);
        }
    }
    spec["volumes"][0]["secret"]["secretName"] = json!(SECRET);
    deployment
}

/// An opted-in namespace with the shared objects and N workloads, once all are Ready and the
/// webhook recorded the Secret on each.
fn create_workloads(cp: &ControlPlane, api: &Api, namespace: &str, workloads: usize) {
    cp.namespace(namespace, true);
    let mut objects = vec![
        config_map(namespace, CONFIG_MAP, &[("value", "v1")]),
        secret(namespace, SECRET, &[("password", "p0")]),
    ];
    objects.extend((0..workloads).map(|i| workload(namespace, i).to_string()));
    cp.apply(&objects.join("\n---\n"));
    let mut state = String::new();
    let timeout = deadline(workloads);
    let started = Instant::now();
    loop {
        let (deployments, pods) = match (api.deployments(namespace), api.pods(namespace)) {
            (Ok(deployments), Ok(pods)) => (deployments, pods),
            (Err(e), _) | (_, Err(e)) => {
                state = e;
                (BTreeMap::new(), Vec::new())
            }
        };
        let ready = deployments.values().filter(|d| rolled_out(d)).count();
        let settled = pods.len() == workloads && pods.iter().all(|p| p.ready && !p.terminating);
        if ready == workloads && settled {
            let unrecorded: Vec<&String> = deployments
                .iter()
                .filter(|(_, d)| d["spec"]["template"]["metadata"]["annotations"][DIGEST].is_null())
                .map(|(name, _)| name)
                .collect();
            assert!(unrecorded.is_empty(), "the webhook did not record {DIGEST} on {unrecorded:?}");
            return;
        }
        if !deployments.is_empty() {
            state = format!("{ready} of {workloads} Deployments rolled out, {} pods", pods.len());
        }
        assert!(
            started.elapsed() < timeout,
            "{namespace}: {workloads} workloads not Ready within {timeout:?}: {state}"
        );
        std::thread::sleep(POLL);
    }
}

/// `helm upgrade --reuse-values --set controller.fanOut=<fan_out>`, then until the
/// controller's pods all run with it and one of them leads: a change the bench writes meets
/// a controller that is up, not one starting.
fn switch_fan_out(cp: &ControlPlane, fan_out: &str) {
    eprintln!("  helm upgrade --set controller.fanOut={fan_out} ...");
    let set = format!("controller.fanOut={fan_out}");
    let args = ["upgrade", "configsum", "charts/configsum", "-n", SYSTEM, "--reuse-values"];
    let output = helm(cp, &[&args[..], &["--set", &set, "--wait", "--timeout", "3m"]].concat());
    assert!(output.status.success(), "helm upgrade: {}", String::from_utf8_lossy(&output.stderr));
    let flag = json!(format!("--fan-out={fan_out}"));
    wait_until(
        &format!("every controller pod Ready with {flag} and one leading"),
        Duration::from_secs(120),
        || {
            let list = cp.get_json(&[
                "pods",
                "-n",
                SYSTEM,
                "-l",
                "app.kubernetes.io/name=configsum-controller",
            ]);
            let pods: Vec<Pod> = items(&list).iter().map(Pod::from_json).collect();
            let lease = cp.get_json(&["lease", "configsum-controller", "-n", SYSTEM]);
            let holder = lease["spec"]["holderIdentity"].as_str().unwrap_or_default();
            !pods.is_empty()
                && pods.iter().all(|p| {
                    p.ready
                        && !p.terminating
                        && p.json["spec"]["containers"][0]["args"]
                            .as_array()
                            .is_some_and(|args| args.contains(&flag))
                })
                && pods.iter().any(|p| p.name == holder)
        },
    );
}

/// One measured change.
struct Run {
    workloads: usize,
    fan_out: String,
    /// The load average when the Secret was written.
    load: String,
    first_patch: Duration,
    last_patch: Duration,
    first_ready: Duration,
    last_ready: Duration,
    old_gone: Duration,
    /// The waves the controller recorded (waves only).
    waves: Option<u64>,
    checked_pods: usize,
}

/// Writes the Secret and follows the rollouts it causes until every workload runs one new pod,
/// Ready, and no old one; then checks each rolled once and serves the new value.
fn roll(api: &Api, namespace: &str, workloads: usize, fan_out: &str) -> Run {
    let before = api.deployments(namespace).unwrap_or_else(|e| panic!("{e}"));
    let old: BTreeSet<String> =
        api.pods(namespace).unwrap_or_else(|e| panic!("{e}")).into_iter().map(|p| p.name).collect();
    assert_eq!((before.len(), old.len()), (workloads, workloads), "{namespace} is not at rest");
    let password = format!("p-{fan_out}");
    let load = load_average();

    let written = Instant::now();
    let path = format!("/api/v1/namespaces/{namespace}/secrets/{SECRET}");
    api.merge_patch(&path, &json!({"stringData": {"password": password}}))
        .unwrap_or_else(|e| panic!("{e}"));
    let timeout = deadline(workloads);
    let mut patched: BTreeMap<String, Duration> = BTreeMap::new();
    let mut ready: BTreeMap<String, Duration> = BTreeMap::new();
    let mut error;
    let old_gone = loop {
        let tick = Instant::now();
        match (api.deployments(namespace), api.pods(namespace)) {
            (Ok(deployments), Ok(pods)) => {
                let now = written.elapsed();
                for (name, deployment) in &deployments {
                    if generation(deployment) > before.get(name).map_or(i64::MAX, generation) {
                        patched.entry(name.clone()).or_insert(now);
                    }
                }
                for pod in pods.iter().filter(|p| !old.contains(&p.name) && p.ready) {
                    ready.entry(app_of(pod).to_owned()).or_insert(now);
                }
                let old_left = pods.iter().filter(|p| old.contains(&p.name)).count();
                if ready.len() == workloads && old_left == 0 {
                    break now;
                }
                error = format!(
                    "{} of {workloads} Deployments patched, {} with a new pod Ready, \
                     {old_left} old pods left",
                    patched.len(),
                    ready.len()
                );
            }
            (Err(e), _) | (_, Err(e)) => error = e,
        }
        assert!(
            written.elapsed() < timeout,
            "N={workloads}, fan-out {fan_out}: not rolled within {timeout:?}: {error}"
        );
        std::thread::sleep(POLL.saturating_sub(tick.elapsed()));
    };

    std::thread::sleep(SETTLE);
    let after = api.deployments(namespace).unwrap_or_else(|e| panic!("{e}"));
    let not_once: Vec<String> = before
        .iter()
        .filter(|(name, d)| after.get(*name).map(generation) != Some(generation(d) + 1))
        .map(|(name, d)| {
            let now = after.get(name).map(generation);
            format!("{name}: generation {} -> {now:?}", generation(d))
        })
        .collect();
    assert!(not_once.is_empty(), "N={workloads}, {fan_out}: not rolled exactly once: {not_once:?}");
    let waves = (fan_out == "waves").then(|| {
        after
            .values()
            .filter_map(|d| d["metadata"]["annotations"][WAVES].as_str())
            .filter_map(|record| serde_json::from_str::<Value>(record).ok())
            .filter_map(|record| record[format!("secret/{SECRET}")]["wave"].as_u64())
            .max()
            .unwrap_or_default()
    });

    let pods = api.pods(namespace).unwrap_or_else(|e| panic!("{e}"));
    let step = if workloads <= SAMPLED { 1 } else { workloads / SAMPLED };
    let mut checked_pods = 0;
    for pod in pods.iter().step_by(step) {
        let ip = pod.ip.as_deref().unwrap_or_else(|| panic!("{}: no IP", pod.name));
        let answer = served(ip);
        assert_eq!(
            (&answer["value"], &answer["fileValue"]),
            (&json!("v1"), &json!(password)),
            "{} serves {answer}",
            pod.name
        );
        checked_pods += 1;
    }

    let first = |times: &BTreeMap<String, Duration>| times.values().min().copied();
    let last = |times: &BTreeMap<String, Duration>| times.values().max().copied();
    Run {
        workloads,
        fan_out: fan_out.to_owned(),
        load,
        first_patch: first(&patched).unwrap_or_default(),
        last_patch: last(&patched).unwrap_or_default(),
        first_ready: first(&ready).unwrap_or_default(),
        last_ready: last(&ready).unwrap_or_default(),
        old_gone,
        waves,
        checked_pods,
    }
}

/// Deletes the namespace and waits for it to go, so the next N starts on an idle node.
fn delete_namespace(cp: &ControlPlane, namespace: &str) {
    let output = cp.kubectl(&["delete", "namespace", namespace, "--timeout=5m"]);
    assert!(
        output.status.success(),
        "delete namespace {namespace}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn report(runs: &[Run], load_before: &str, took: Duration) -> String {
    let command = |program: &str, args: &[&str]| {
        std::process::Command::new(program)
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default()
    };
    let commit =
        command("git", &["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "--short", "HEAD"]);
    let date = command("date", &["-u", "+%Y-%m-%d %H:%M UTC"]);
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let seconds = |d: Duration| format!("{:.1} s", d.as_secs_f64());
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# A Secret write to the last new pod Ready, on a real node (`make bench-node`)\n"
    );
    let _ = writeln!(
        out,
        "{date}, commit {commit}, {cores} cores; load average (1, 5, 15 min) before {load_before}, \
         after {}; the run took {:.0} s.\n",
        load_average(),
        took.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "Method: `make cluster`'s cluster (scripts/cluster.sh: kube-apiserver, \
         kube-controller-manager, kube-scheduler, containerd and a kubelet with maxPods \
         {MAX_PODS} on this machine), configsum installed by its chart at its defaults (webhook \
         and controller as pods; `--window 2s --rate 5 --burst 20`), the fan-out switched by \
         `helm upgrade --reuse-values --set controller.fanOut=...`. N config-echo Deployments \
         of one replica (readiness probe every second; maxSurge 1, maxUnavailable 0) read one \
         Secret; one merge patch of it, then one list of the namespace's pods and one of its \
         Deployments every 200 ms until every Deployment has a new pod Ready and no old pod is \
         left. Times are from the write to the first list that shows it (±0.2 s plus a list). \
         Patch: a Deployment's generation moved. Each Deployment rolled exactly once \
         (generation + 1, still 3 s later); the new pods checked serve the new value. \
         new pods/s: N over write → last new pod Ready.\n"
    );
    let _ = writeln!(
        out,
        "| N | fan-out | waves | write → first patch | → first new pod Ready | → last patch | \
         → last new pod Ready | → old pods gone | new pods/s | pods checked | load at write |"
    );
    let _ = writeln!(out, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for run in runs {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {:.1} | {} | {} |",
            run.workloads,
            run.fan_out,
            run.waves.map_or("—".to_owned(), |w| w.to_string()),
            seconds(run.first_patch),
            seconds(run.first_ready),
            seconds(run.last_patch),
            seconds(run.last_ready),
            seconds(run.old_gone),
            run.workloads as f64 / run.last_ready.as_secs_f64().max(0.001),
            run.checked_pods,
            run.load
        );
    }
    out
}
