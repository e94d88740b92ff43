//! A real Kubernetes control plane for tests: kube-apiserver, etcd and kube-controller-manager
//! started by `scripts/control-plane.sh up` on loopback (docs/testing.md). One control plane
//! serves every test of a test binary (each test works in namespaces of its own); the script's
//! watchdog stops it when the test binary exits, however it exits.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

/// A running control plane. See the module docs.
pub struct ControlPlane {
    pub dir: PathBuf,
    /// An admin's kubeconfig (`system:masters`).
    pub kubeconfig: PathBuf,
    /// `https://127.0.0.1:<port>`.
    pub server: String,
    /// kubectl of the control plane's own version.
    pub kubectl: PathBuf,
}

/// The repository's root, where scripts/ is.
pub fn repository() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The control plane of this test binary, started on first use.
pub fn shared() -> &'static ControlPlane {
    static SHARED: OnceLock<ControlPlane> = OnceLock::new();
    SHARED.get_or_init(|| ControlPlane::start(&[]))
}

impl ControlPlane {
    /// Runs `scripts/control-plane.sh up` in a directory under target/, with `env` (such as
    /// `CONTROL_PLANE_COMPACTION`). Panics with the script's output if it fails.
    pub fn start(env: &[(&str, &str)]) -> ControlPlane {
        ControlPlane::up("scripts/control-plane.sh", &[], env)
    }

    /// The same with kube-scheduler and a node where pods run (`up DIR --node`): kube-apiserver
    /// listens on the kubernetes Service's address on the node's bridge.
    pub fn start_with_node() -> ControlPlane {
        ControlPlane::up("scripts/control-plane.sh", &["--node"], &[])
    }

    /// `make cluster`'s cluster (scripts/cluster.sh): the node, configsum installed by its
    /// chart from the image `make image` built, and the demo application.
    pub fn start_cluster() -> ControlPlane {
        ControlPlane::start_cluster_with(&[])
    }

    /// The same with `env` for scripts/cluster.sh (`CLUSTER_DEMO`, `NODE_MAX_PODS`).
    pub fn start_cluster_with(env: &[(&str, &str)]) -> ControlPlane {
        ControlPlane::up("scripts/cluster.sh", &[], env)
    }

    /// Runs `script up DIR args` in a directory under target/. Panics with the script's
    /// output if it fails.
    fn up(script: &str, args: &[&str], env: &[(&str, &str)]) -> ControlPlane {
        let runs = repository().join("target/control-plane-runs");
        remove_stale_runs(&runs);
        let dir = runs.join(format!("run-{}-{}", std::process::id(), unique()));
        std::fs::create_dir_all(&dir).expect("control plane directory");
        let output = Command::new(repository().join(script))
            .arg("up")
            .arg(&dir)
            .args(args)
            .env("CONTROL_PLANE_OWNER", std::process::id().to_string())
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run {script}: {e}"));
        assert!(
            output.status.success(),
            "{script} up failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let server = std::fs::read_to_string(dir.join("server")).expect("server address");
        ControlPlane {
            kubeconfig: dir.join("kubeconfig"),
            kubectl: dir.join("kubectl"),
            server: server.trim().to_owned(),
            dir,
        }
    }

    /// Stops it now (a shared one stops when the binary exits).
    pub fn stop(&self) {
        let _ = Command::new(repository().join("scripts/control-plane.sh"))
            .arg("down")
            .arg(&self.dir)
            .output();
    }

    /// Makes `down` (and so the watchdog, when the test binary exits) stop process `pid` too:
    /// processes shared by every test of a binary are never dropped. Recorded with its start
    /// time, as scripts/lib.sh's `record_pid` does: most adopted processes exit long before
    /// `down`, and PIDs wrap at 32768 here within a run, so `down` must not kill a PID that has
    /// since become another test's process (a new `configsum serve`, say, killed as it starts).
    pub fn adopt(&self, pid: u32, name: &str) {
        record_pid(&self.dir.join("pids"), pid, name);
    }

    /// Stops kube-apiserver and starts it again with the same flags (etcd keeps its data): every
    /// watch ends; a client resuming from a resourceVersion older than the new watch cache gets
    /// 410 Gone.
    pub fn restart_apiserver(&self) {
        let output = Command::new(repository().join("scripts/control-plane.sh"))
            .arg("restart-apiserver")
            .arg(&self.dir)
            .output()
            .expect("run scripts/control-plane.sh");
        assert!(
            output.status.success(),
            "restart-apiserver: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// The API server's audit events so far (metadata of every request), oldest first.
    pub fn audit_events(&self) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(self.dir.join("logs/audit.log")).unwrap_or_default();
        text.lines().filter_map(|line| serde_json::from_str(line).ok()).collect()
    }

    /// `kubectl` as the admin.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_with_input(args, None)
    }

    pub fn kubectl_with_input(&self, args: &[&str], input: Option<&str>) -> Output {
        use std::io::Write as _;
        let mut child = Command::new(&self.kubectl)
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run kubectl");
        if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin.write_all(input.as_bytes()).expect("kubectl stdin");
        }
        child.wait_with_output().expect("kubectl finishes")
    }

    /// `kubectl` that must succeed; its stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let output = self.kubectl(args);
        assert!(
            output.status.success(),
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Waits until each CRD of `names` (`crd/<plural>.<group>`) is Established. Right after
    /// its creation a CRD may have no conditions yet, which `kubectl wait` reports as an error
    /// rather than waiting: that is asked again.
    pub fn wait_established(&self, names: &[&str]) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let mut args = vec!["wait", "--for=condition=Established", "--timeout=60s"];
        args.extend_from_slice(names);
        loop {
            let output = self.kubectl(&args);
            if output.status.success() {
                return;
            }
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(
                stderr.contains("status.conditions accessor error")
                    && std::time::Instant::now() < deadline,
                "kubectl {}: {stderr}",
                args.join(" ")
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }

    /// `kubectl apply -f -` of `yaml`, which must succeed.
    pub fn apply(&self, yaml: &str) -> String {
        let output = self.kubectl_with_input(&["apply", "-f", "-"], Some(yaml));
        assert!(
            output.status.success(),
            "kubectl apply: {}\n{yaml}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// An object as JSON (`kubectl get -o json`).
    pub fn get_json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = vec!["get", "-o", "json"];
        all.extend_from_slice(args);
        serde_json::from_str(&self.kubectl_ok(&all)).expect("kubectl JSON")
    }

    /// A namespace labelled for configsum (or not).
    pub fn namespace(&self, name: &str, opted_in: bool) {
        let label = if opted_in { "\n  labels: {configsum.dev/enabled: \"true\"}" } else { "" };
        self.apply(&format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}{label}\n"));
    }

    /// A kubeconfig that authenticates as `namespace/service_account` with a token from the
    /// TokenRequest API, written next to the admin's: a file of its own for each call. Tests
    /// that start at once asked for the same account's, and one rewrote the shared file
    /// (truncated, then written) while the other's `configsum serve` was reading it: that serve
    /// found no current context and exited before its start line.
    pub fn kubeconfig_as(&self, namespace: &str, service_account: &str) -> PathBuf {
        let token = self.kubectl_ok(&[
            "create",
            "token",
            service_account,
            "-n",
            namespace,
            "--duration",
            "1h",
        ]);
        let path = self.dir.join(format!("kubeconfig-{namespace}-{service_account}-{}", unique()));
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    \
             certificate-authority: {}\nusers:\n- name: u\n  user:\n    token: {}\ncontexts:\n- \
             name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n",
            self.server,
            self.dir.join("pki/ca.crt").display(),
            token.trim()
        );
        std::fs::write(&path, text).expect("write a kubeconfig");
        path
    }
}

/// Appends `PID NAME START` to a control plane's pids file (which must exist), as
/// scripts/lib.sh's `record_pid` does; START is `-` for a process already gone.
pub fn record_pid(pids: &Path, pid: u32, name: &str) {
    use std::io::Write as _;
    let start = started_at(pid).unwrap_or_else(|| "-".to_owned());
    let mut file =
        std::fs::OpenOptions::new().append(true).open(pids).expect("the control plane's pids file");
    writeln!(file, "{pid} {name} {start}").expect("record a process");
}

/// Process `pid`'s start time in clock ticks since boot (field 22 of /proc/PID/stat; the
/// command name before it, in parentheses, may hold spaces).
pub fn started_at(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, fields) = stat.rsplit_once(") ")?;
    fields.split_whitespace().nth(19).map(str::to_owned)
}

fn unique() -> usize {
    static COUNTER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Removes the directories of earlier runs whose test binary is gone (their watchdog stopped
/// the processes; the logs stay until the next run, for a failure to be read).
fn remove_stale_runs(runs: &Path) {
    let Ok(entries) = std::fs::read_dir(runs) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let pid = name.strip_prefix("run-").and_then(|rest| rest.split('-').next());
        let alive = pid.is_some_and(|pid| Path::new("/proc").join(pid).exists());
        if !alive && !entry.path().join("pids").exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// A ConfigMap as YAML (JSON is YAML).
pub fn config_map(namespace: &str, name: &str, data: &[(&str, &str)]) -> String {
    let data: serde_json::Map<String, serde_json::Value> =
        data.iter().map(|(k, v)| ((*k).to_owned(), serde_json::json!(v))).collect();
    serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace}, "data": data})
    .to_string()
}

/// A Secret as YAML, with `stringData`.
pub fn secret(namespace: &str, name: &str, data: &[(&str, &str)]) -> String {
    let data: serde_json::Map<String, serde_json::Value> =
        data.iter().map(|(k, v)| ((*k).to_owned(), serde_json::json!(v))).collect();
    serde_json::json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace}, "stringData": data})
    .to_string()
}
