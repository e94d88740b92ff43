//! A small closed-loop HTTPS load generator: N kept-alive TLS connections,
//! each sending the next body of the mix as soon as the previous answer
//! arrived, recording every latency (exact percentiles, no sampling).
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// TLS 1.3 with AES-128-GCM and X25519 only, so every server is measured
/// with the same protocol, cipher and key exchange.
pub fn connector(ca: &Path) -> TlsConnector {
    let base = rustls::crypto::ring::default_provider();
    let provider = CryptoProvider {
        cipher_suites: vec![rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256],
        kx_groups: vec![rustls::crypto::ring::kx_group::X25519],
        ..base
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("CA file") {
        roots.add(cert.expect("CA certificate")).expect("add CA");
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

pub struct LoadResult {
    pub latencies: Vec<Duration>,
    /// Answers per mix entry.
    pub answered: Vec<usize>,
    pub errors: usize,
    pub elapsed: Duration,
}

impl LoadResult {
    pub fn requests_per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64()
    }

    /// The latency at quantile `q` (0..=1), exact over every request.
    pub fn quantile(&self, q: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let index = ((self.latencies.len() as f64 - 1.0) * q).round() as usize;
        self.latencies[index.min(self.latencies.len() - 1)]
    }
}

/// Drives `addr` with `concurrency` connections for `duration`, cycling
/// through `bodies` (POSTed to `path`). `check` validates the first answer
/// to each body.
pub async fn run(
    addr: &str,
    connector: &TlsConnector,
    path: &str,
    bodies: Arc<Vec<Vec<u8>>>,
    concurrency: usize,
    duration: Duration,
    check: fn(usize, &[u8]) -> Result<(), String>,
) -> LoadResult {
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = tokio::task::JoinSet::new();
    for connection in 0..concurrency {
        let (addr, connector, path, bodies) =
            (addr.to_owned(), connector.clone(), path.to_owned(), bodies.clone());
        tasks.spawn(async move {
            let mut sender = open(&addr, &connector).await;
            let mut latencies = Vec::with_capacity(1 << 16);
            let mut answered = vec![0usize; bodies.len()];
            let mut errors = 0;
            let mut next = connection % bodies.len();
            while Instant::now() < deadline {
                let request = hyper::Request::post(&path)
                    .header("host", "localhost")
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(bodies[next].clone())))
                    .expect("request");
                let sent = Instant::now();
                let outcome = match sender.send_request(request).await {
                    Ok(response) if response.status() == 200 => {
                        response.into_body().collect().await.ok().map(|b| b.to_bytes())
                    }
                    _ => None,
                };
                // A refused request may end the connection (a server that
                // answered before reading the whole body closes it): open
                // another rather than failing on the dead one in a loop.
                if outcome.is_none() && sender.ready().await.is_err() {
                    sender = open(&addr, &connector).await;
                }
                let took = sent.elapsed();
                match outcome {
                    Some(body) => {
                        if answered[next] == 0 {
                            if let Err(e) = check(next, &body) {
                                panic!("wrong answer to body {next}: {e}");
                            }
                        }
                        answered[next] += 1;
                        latencies.push(took);
                    }
                    None => errors += 1,
                }
                next = (next + 1) % bodies.len();
            }
            (latencies, answered, errors)
        });
    }
    let mut result = LoadResult {
        latencies: Vec::new(),
        answered: vec![0; bodies.len()],
        errors: 0,
        elapsed: Duration::ZERO,
    };
    while let Some(done) = tasks.join_next().await {
        let (latencies, answered, errors) = done.expect("connection task");
        result.latencies.extend(latencies);
        result.answered.iter_mut().zip(answered).for_each(|(a, b)| *a += b);
        result.errors += errors;
    }
    result.elapsed = started.elapsed();
    result.latencies.sort_unstable();
    result
}

/// One POST of `body` to `path` on a fresh connection: the answer's body, if 200.
pub async fn post(
    addr: &str,
    connector: &TlsConnector,
    path: &str,
    body: Vec<u8>,
) -> Result<Vec<u8>, String> {
    let mut sender = open(addr, connector).await;
    let request = hyper::Request::post(path)
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
    let status = response.status();
    let body = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    if status != 200 {
        return Err(format!("{status}: {}", String::from_utf8_lossy(&body)));
    }
    Ok(body.to_vec())
}

/// A kept-alive HTTP/1.1 connection over TLS to `addr`.
async fn open(addr: &str, connector: &TlsConnector) -> SendRequest<Full<Bytes>> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    tcp.set_nodelay(true).expect("nodelay");
    let name = ServerName::try_from("localhost").expect("name");
    let tls = connector.connect(name, tcp).await.expect("TLS");
    let (sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .expect("HTTP/1.1");
    tokio::spawn(connection);
    sender
}

/// CPU time (user + system) and peak resident memory of processes.
pub struct ProcessStats {
    pids: Vec<u32>,
    ticks_per_second: f64,
}

impl ProcessStats {
    pub fn new(pids: Vec<u32>) -> Self {
        let ticks = std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
            .unwrap_or(100.0);
        ProcessStats { pids, ticks_per_second: ticks }
    }

    /// Total CPU seconds used so far.
    pub fn cpu_seconds(&self) -> f64 {
        self.pids
            .iter()
            .filter_map(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                // Fields after the command name (which may hold spaces): utime is 14th, stime 15th.
                let rest = stat.rsplit_once(')')?.1;
                let fields: Vec<&str> = rest.split_whitespace().collect();
                let ticks: f64 =
                    fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
                Some(ticks / self.ticks_per_second)
            })
            .sum()
    }

    /// Sum of peak resident set sizes (VmHWM), in MiB.
    pub fn peak_rss_mib(&self) -> f64 {
        self.status_kib("VmHWM:") / 1024.0
    }

    /// Sum of current resident set sizes (VmRSS), in MiB.
    pub fn rss_mib(&self) -> f64 {
        self.status_kib("VmRSS:") / 1024.0
    }

    fn status_kib(&self, field: &str) -> f64 {
        self.pids
            .iter()
            .filter_map(|pid| {
                let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
                let line = status.lines().find(|l| l.starts_with(field))?;
                line.split_whitespace().nth(1)?.parse::<f64>().ok()
            })
            .sum()
    }
}

/// The children of `pid` (nginx's workers).
pub fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok()?.parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|s| s.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse::<u32>().ok())
                == Some(pid)
        })
        .collect()
}
