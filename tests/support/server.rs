//! Runs the real `configsum` binary and talks to it over real TLS.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio_rustls::TlsConnector;

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(label: &str) -> Self {
        static COUNTER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("configsum-{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("temp dir");
        TempDir(path)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Makes a CA and a serving certificate for localhost with certs/make-dev-certs.sh.
pub fn make_certs(dir: &Path, key_type: &str) {
    make_certs_for(dir, key_type, &["localhost"]);
}

/// The same for `names`; none means the script's defaults (the Service names).
pub fn make_certs_for(dir: &Path, key_type: &str, names: &[&str]) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("certs/make-dev-certs.sh");
    let status = std::process::Command::new(script)
        .arg(dir)
        .args(names)
        .env("KEY_TYPE", key_type)
        .status()
        .expect("run make-dev-certs.sh (needs openssl)");
    assert!(status.success(), "make-dev-certs.sh failed for {key_type}");
}

pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A running `configsum serve` and its captured log lines.
pub struct Server {
    pub child: Child,
    pub addr: String,
    pub metrics_addr: String,
    pub logs: Arc<Mutex<Vec<String>>>,
    pub ca: PathBuf,
    /// Whether its log lines are still kept in `logs` ([`Server::discard_logs`]).
    keep_logs: Arc<AtomicBool>,
}

impl Server {
    /// Starts `configsum serve` with `args` (listening on free loopback ports)
    /// and waits for its "started" log line.
    pub async fn start(args: &[&str], env: &[(&str, &str)], ca: &Path) -> Server {
        Server::start_program(&[env!("CARGO_BIN_EXE_configsum")], args, env, ca).await
    }

    /// The same through another command line, such as `chroot DIR /configsum`.
    pub async fn start_program(
        program: &[&str],
        args: &[&str],
        env: &[(&str, &str)],
        ca: &Path,
    ) -> Server {
        let mut all = vec!["serve", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"];
        // JSON logs unless the test chooses.
        if !args.contains(&"--log-format") {
            all.extend(["--log-format", "json"]);
        }
        all.extend_from_slice(args);
        let keep_logs = Arc::new(AtomicBool::new(true));
        let (child, logs, line) =
            spawn_keeping(program, &all, env, "configsum serve started", keep_logs.clone()).await;
        Server {
            child,
            addr: line["listen"].as_str().expect("listen").to_owned(),
            metrics_addr: line["metrics_listen"].as_str().expect("metrics_listen").to_owned(),
            logs,
            ca: ca.to_owned(),
            keep_logs,
        }
    }

    /// From now on its log lines are read and dropped, not kept: a load bench's server logs a
    /// line per request, and keeping them all grew a vector in the load generator's own process
    /// (and runtime) by hundreds of thousands of lines.
    pub fn discard_logs(&self) {
        self.keep_logs.store(false, Ordering::Relaxed);
    }

    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().expect("log lock").clone()
    }

    /// Whether a line matching `wanted` is logged within 10 s: the server writes its
    /// lines in batches, a moment after what they tell of.
    pub async fn logged(&self, wanted: impl Fn(&str) -> bool) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            if self.logs().iter().any(|line| wanted(line)) {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub fn connector(&self) -> TlsConnector {
        tls_connector(&self.ca, None)
    }

    /// POSTs `body` to `path` over a fresh TLS connection that verifies the CA.
    pub async fn post(&self, path: &str, body: Vec<u8>) -> (u16, Vec<u8>) {
        let mut sender = self.connect(self.connector()).await;
        send(&mut sender, "POST", path, body).await
    }

    pub async fn get(&self, path: &str) -> (u16, Vec<u8>) {
        let mut sender = self.connect(self.connector()).await;
        send(&mut sender, "GET", path, Vec::new()).await
    }

    /// A TLS handshake to this server that verifies the CA for `name`.
    pub async fn handshake_as(&self, name: &str) -> Result<(), std::io::Error> {
        let tcp = TcpStream::connect(&self.addr).await?;
        let name = ServerName::try_from(name.to_owned()).map_err(std::io::Error::other)?;
        self.connector().connect(name, tcp).await.map(|_| ())
    }

    /// An HTTP/1.1 connection over TLS, for several requests.
    pub async fn connect(
        &self,
        connector: TlsConnector,
    ) -> hyper::client::conn::http1::SendRequest<Full<Bytes>> {
        let tcp = TcpStream::connect(&self.addr).await.expect("connect");
        let name = ServerName::try_from("localhost").expect("server name");
        let tls = connector.connect(name, tcp).await.expect("TLS handshake verifying the CA");
        let (sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
                .await
                .expect("HTTP handshake");
        tokio::spawn(connection);
        sender
    }

    /// Sends SIGTERM and waits for the exit code.
    pub async fn terminate(mut self) -> Option<i32> {
        let pid = self.child.id().expect("running");
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
        let exit = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("exits")
            .expect("wait");
        exit.code()
    }
}

/// Runs the configsum binary with `args` and `env`, collecting its stderr
/// lines, until it logs `started` (returned as JSON).
pub async fn spawn(
    args: &[&str],
    env: &[(&str, &str)],
    started: &'static str,
) -> (Child, Arc<Mutex<Vec<String>>>, serde_json::Value) {
    spawn_program(&[env!("CARGO_BIN_EXE_configsum")], args, env, started).await
}

/// Waits up to 20 s for `/readyz` on `metrics_addr` to answer 200; `logs` say why not.
pub async fn until_ready(metrics_addr: &str, logs: &Arc<Mutex<Vec<String>>>) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while http_get(metrics_addr, "/readyz").await.0 != 200 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not ready: {:?}",
            logs.lock().map(|l| l.clone()).unwrap_or_default()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// [`spawn`] with another command line in front of the arguments, such as
/// `chroot DIR /configsum`.
pub async fn spawn_program(
    program: &[&str],
    args: &[&str],
    env: &[(&str, &str)],
    started: &'static str,
) -> (Child, Arc<Mutex<Vec<String>>>, serde_json::Value) {
    spawn_keeping(program, args, env, started, Arc::new(AtomicBool::new(true))).await
}

/// [`spawn_program`], keeping its log lines while `keep` holds.
async fn spawn_keeping(
    program: &[&str],
    args: &[&str],
    env: &[(&str, &str)],
    started: &'static str,
    keep: Arc<AtomicBool>,
) -> (Child, Arc<Mutex<Vec<String>>>, serde_json::Value) {
    let (program, before) = program.split_first().expect("a program");
    let mut child = Command::new(program)
        .args(before)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn configsum");
    let stderr = child.stderr.take().expect("stderr");
    let logs = Arc::new(Mutex::new(Vec::new()));
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let sink = logs.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        let mut started_tx = Some(started_tx);
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains(started) {
                if let Some(tx) = started_tx.take() {
                    let _ = tx.send(line.clone());
                }
            }
            sink.lock().expect("log lock").push(line);
            if !keep.load(Ordering::Relaxed) {
                break;
            }
        }
        // No longer kept: drained, so that the process never blocks on a full pipe.
        let _ = tokio::io::copy(lines.get_mut(), &mut tokio::io::sink()).await;
    });
    let line = match tokio::time::timeout(Duration::from_secs(30), started_rx).await {
        Ok(Ok(line)) => line,
        Ok(Err(_)) => {
            // Its stderr closed first: say how it ended and what it said.
            let status = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
            let logs = logs.lock().expect("log lock").join("\n");
            panic!("configsum ended before it logged {started:?} ({status:?}):\n{logs}")
        }
        Err(_) => panic!("configsum did not log {started:?} within 30 s"),
    };
    (child, logs, log_fields(&line))
}

/// The fields of a log line: a JSON line as it is; a text line's
/// `key=value` pairs (`--log-format text`) as a JSON object of strings.
pub fn log_fields(line: &str) -> serde_json::Value {
    if let Ok(json) = serde_json::from_str(line) {
        return json;
    }
    let fields: serde_json::Map<String, serde_json::Value> = line
        .split_whitespace()
        .filter_map(|token| token.split_once('='))
        .map(|(k, v)| (k.to_owned(), serde_json::Value::String(v.trim_matches('"').to_owned())))
        .collect();
    serde_json::Value::Object(fields)
}

pub fn tls_connector(
    ca: &Path,
    versions: Option<&[&'static rustls::SupportedProtocolVersion]>,
) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("CA file") {
        roots.add(cert.expect("CA cert")).expect("add CA");
    }
    let builder = match versions {
        Some(versions) => rustls::ClientConfig::builder_with_protocol_versions(versions),
        None => rustls::ClientConfig::builder(),
    };
    TlsConnector::from(Arc::new(builder.with_root_certificates(roots).with_no_client_auth()))
}

pub async fn send(
    sender: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    method: &str,
    path: &str,
    body: Vec<u8>,
) -> (u16, Vec<u8>) {
    let request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("request");
    let response = sender.send_request(request).await.expect("response");
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.expect("body").to_bytes().to_vec();
    (status, body)
}

/// A plain-HTTP GET (the metrics listener).
pub async fn http_get(addr: &str, path: &str) -> (u16, String) {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .expect("handshake");
    tokio::spawn(connection);
    let (status, body) = send(&mut sender, "GET", path, Vec::new()).await;
    (status, String::from_utf8(body).expect("utf8"))
}

impl Server {
    /// Waits for the exit code of a server already sent SIGTERM.
    pub async fn terminate_wait(mut self) -> Option<i32> {
        let exit = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("exits")
            .expect("wait");
        exit.code()
    }

    /// Sends SIGTERM, waits for exit 0, and returns every log line.
    pub async fn terminate_logs(self) -> Vec<String> {
        let logs = self.logs.clone();
        assert_eq!(self.terminate().await, Some(0));
        // The reader task drains stderr until EOF; give it a moment after exit.
        tokio::time::sleep(Duration::from_millis(100)).await;
        logs.lock().expect("log lock").clone()
    }
}

/// Decodes an AdmissionReview answer as the API server does (base64 JSON
/// Patch) and applies its patch to `object`: (the answer, the patched object).
pub fn apply_response(
    object: &serde_json::Value,
    body: &[u8],
) -> (serde_json::Value, serde_json::Value) {
    use base64::Engine as _;
    let answer: serde_json::Value = serde_json::from_slice(body).expect("AdmissionReview JSON");
    let mut patched = object.clone();
    if let Some(encoded) = answer["response"]["patch"].as_str() {
        assert_eq!(answer["response"]["patchType"], "JSONPatch");
        let bytes =
            base64::engine::general_purpose::STANDARD.decode(encoded).expect("base64 patch");
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).expect("RFC 6902 patch");
        json_patch::patch(&mut patched, &patch).expect("patch applies");
    } else {
        assert!(answer["response"].get("patchType").is_none(), "patchType without patch");
    }
    (answer, patched)
}
