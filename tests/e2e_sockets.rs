//! The real binary's listener against callers that hold sockets: idle and
//! half-open connections, the connection cap, and client certificates.

#[path = "support/server.rs"]
mod server;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use server::*;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

const OBJECTS: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app, namespace: team-a}\ndata: {a: '1'}\n";

const REVIEW: &str = r#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
    "uid": "u1", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
    "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
    "namespace": "team-a", "operation": "CREATE", "userInfo": {},
    "object": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
      "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "c",
        "envFrom": [{"configMapRef": {"name": "app"}}]}]}}}}}}"#;

async fn start(dir: &TempDir, extra: &[&str]) -> Server {
    install_crypto_provider();
    make_certs(&dir.0, "ec-sec1");
    std::fs::write(dir.path("objects.yaml"), OBJECTS).expect("objects");
    let (cert, key, objects) = (
        dir.path("tls.crt").display().to_string(),
        dir.path("tls.key").display().to_string(),
        dir.path("objects.yaml").display().to_string(),
    );
    let mut args = vec![
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--objects-from",
        &objects,
        "--allow-plain-secret-digests",
    ];
    args.extend_from_slice(extra);
    Server::start(&args, &[], &dir.path("ca.crt")).await
}

async fn tls(server: &Server, connector: &TlsConnector) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(&server.addr).await?;
    let name = ServerName::try_from("localhost").map_err(std::io::Error::other)?;
    connector.connect(name, tcp).await
}

/// Reads and discards until the server closes; how long since `started`, taken before the
/// server's clock for the connection could start (before the connect, or before the last
/// request), so that a slow machine can only make it longer than the server's deadline.
async fn time_to_close(
    mut stream: impl AsyncRead + Unpin,
    started: Instant,
    limit: Duration,
) -> Duration {
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(started + limit, stream.read(&mut buf)).await {
            Err(_) => panic!("still open after {limit:?}"),
            Ok(Ok(0) | Err(_)) => return started.elapsed(),
            Ok(Ok(_)) => {}
        }
    }
}

/// One HTTP/1.1 `GET /healthz` on a kept-alive connection.
async fn healthz(stream: &mut TlsStream<TcpStream>) -> std::io::Result<()> {
    stream.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n").await?;
    let mut response = Vec::new();
    let mut buf = [0u8; 1024];
    while !response.ends_with(b"\r\n\r\nok") {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        response.extend_from_slice(&buf[..n]);
    }
    assert!(response.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&response));
    Ok(())
}

#[tokio::test]
async fn connections_without_a_request_for_thirty_seconds_are_closed() {
    let dir = TempDir::new("idle");
    let server = start(&dir, &[]).await;
    let connector = server.connector();
    let limit = Duration::from_secs(40);

    // No TLS handshake at all: the handshake deadline closes it first.
    let opened = Instant::now();
    let silent_tcp = TcpStream::connect(&server.addr).await.expect("connect");
    let silent_tcp = tokio::spawn(time_to_close(silent_tcp, opened, limit));
    // A handshake, then nothing.
    let opened = Instant::now();
    let silent_tls = tls(&server, &connector).await.expect("handshake");
    let silent_tls = tokio::spawn(time_to_close(silent_tls, opened, limit));
    // Only the HTTP/2 connection preface.
    let opened = Instant::now();
    let mut preface = tls(&server, &connector).await.expect("handshake");
    preface.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await.expect("preface");
    let preface = tokio::spawn(time_to_close(preface, opened, limit));
    // Request headers that never end.
    let opened = Instant::now();
    let mut headers = tls(&server, &connector).await.expect("handshake");
    headers.write_all(b"POST /mutate HTTP/1.1\r\nhost: localhost\r\n").await.expect("headers");
    let headers = tokio::spawn(time_to_close(headers, opened, limit));
    // One request, then HTTP/1 keep-alive and silence: idle from the end of the request.
    let mut kept_alive = tls(&server, &connector).await.expect("handshake");
    let requested = Instant::now();
    healthz(&mut kept_alive).await.expect("first request");
    let kept_alive = tokio::spawn(time_to_close(kept_alive, requested, limit));
    // A request every 9 s: open longer than 30 s, but never idle that long.
    let mut busy = tls(&server, &connector).await.expect("handshake");
    for _ in 0..4 {
        healthz(&mut busy).await.expect("a busy connection stays open");
        tokio::time::sleep(Duration::from_secs(9)).await;
    }
    healthz(&mut busy).await.expect("a busy connection stays open after 36 s");

    let closed = |task: tokio::task::JoinHandle<Duration>| async { task.await.expect("join") };
    let (tcp, tls, preface, headers, kept_alive) = (
        closed(silent_tcp).await,
        closed(silent_tls).await,
        closed(preface).await,
        closed(headers).await,
        closed(kept_alive).await,
    );
    eprintln!(
        "closed after: tcp {tcp:?}, tls {tls:?}, h2 preface {preface:?}, \
         endless headers {headers:?}, keep-alive {kept_alive:?}"
    );
    // Which deadline closed each: never before it (measured from before the server's clock
    // started), and before the next one would have; past the idle deadline, `limit` fails it.
    // Bounds this loose still tell the deadlines apart on a busy machine; how closely they are
    // kept is src/webhook/connection.rs's paused-clock tests' business.
    let (handshake, idle) = (Duration::from_secs(10), Duration::from_secs(30));
    assert!(tcp >= handshake && tcp < idle, "no handshake: {tcp:?}");
    for (what, took) in [
        ("handshake only", tls),
        ("HTTP/2 preface only", preface),
        ("headers that never end", headers),
        ("idle keep-alive", kept_alive),
    ] {
        assert!(took >= idle && took < limit, "{what}: {took:?}");
    }
    assert_eq!(server.terminate().await, Some(0));
}

/// How many connections wait in the accept queue of the listener on `addr` (127.0.0.1:port):
/// a listening socket's `rx_queue` in /proc/net/tcp.
fn accept_queue(addr: &str) -> usize {
    let port = addr.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok()).expect("a port");
    let local = format!("0100007F:{port:04X}");
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    table
        .lines()
        .skip(1)
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        // Fields: sl, local_address, rem_address, st (0A: LISTEN), tx_queue:rx_queue, …
        .find(|fields| fields.get(1) == Some(&local.as_str()) && fields.get(3) == Some(&"0A"))
        .and_then(|fields| fields.get(4)?.split_once(':').map(|(_, rx)| rx.to_owned()))
        .and_then(|rx| usize::from_str_radix(&rx, 16).ok())
        .expect("the listener in /proc/net/tcp")
}

async fn connections_gauge(server: &Server) -> String {
    let (_, metrics) = http_get(&server.metrics_addr, "/metrics").await;
    metrics.lines().find(|l| l.starts_with("configsum_connections ")).unwrap_or_default().to_owned()
}

#[tokio::test]
async fn connections_beyond_1024_wait_until_one_closes() {
    configsum::process::raise_open_file_limit();
    let dir = TempDir::new("connection-cap");
    let server = start(&dir, &[]).await;
    // Plain TCP connections count from the accept, before any handshake.
    let mut held = Vec::new();
    for _ in 0..1024 {
        held.push(TcpStream::connect(&server.addr).await.expect("connect"));
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while connections_gauge(&server).await != "configsum_connections 1024" {
        assert!(Instant::now() < deadline, "{}", connections_gauge(&server).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let connector = server.connector();
    let addr = server.addr.clone();
    let waiting = tokio::spawn(async move {
        let tcp = TcpStream::connect(&addr).await?;
        let name = ServerName::try_from("localhost").map_err(std::io::Error::other)?;
        let mut stream = connector.connect(name, tcp).await?;
        healthz(&mut stream).await
    });
    // The 1,025th has reached the server: the kernel holds it in the listener's accept queue
    // (or, were there no cap, the server took it).
    let deadline = Instant::now() + Duration::from_secs(10);
    while accept_queue(&server.addr) < 1
        && !waiting.is_finished()
        && connections_gauge(&server).await == "configsum_connections 1024"
    {
        assert!(Instant::now() < deadline, "the 1,025th connection never reached the listener");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // And the server has answered later requests (the metrics, on its other listener) since.
    for _ in 0..3 {
        assert_eq!(connections_gauge(&server).await, "configsum_connections 1024");
    }
    assert_eq!(accept_queue(&server.addr), 1, "still waiting to be accepted");
    assert!(!waiting.is_finished(), "the 1,025th connection was served at once");
    drop(held.pop());
    let served = tokio::time::timeout(Duration::from_secs(3), waiting).await;
    served.expect("served once a slot is free").expect("join").expect("healthz");
    drop(held);
    assert_eq!(server.terminate().await, Some(0));
}

/// A client certificate for `cn` signed by the CA in `ca_dir`.
fn client_certificate(ca_dir: &Path, out: &Path, cn: &str) {
    let run = |args: &[&str]| {
        let status = std::process::Command::new("openssl")
            .args(args)
            .current_dir(out)
            .stderr(std::process::Stdio::null())
            .status()
            .expect("openssl");
        assert!(status.success(), "openssl {args:?}");
    };
    let (ca_crt, ca_key) =
        (ca_dir.join("ca.crt").display().to_string(), ca_dir.join("ca.key").display().to_string());
    run(&["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "client.key"]);
    run(&[
        "req",
        "-new",
        "-key",
        "client.key",
        "-subj",
        &format!("/CN={cn}"),
        "-out",
        "client.csr",
    ]);
    std::fs::write(out.join("client.ext"), "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n").expect("ext");
    run(&[
        "x509",
        "-req",
        "-in",
        "client.csr",
        "-CA",
        &ca_crt,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-days",
        "30",
        "-sha256",
        "-extfile",
        "client.ext",
        "-out",
        "client.crt",
    ]);
}

fn connector_with_client_certificate(ca: &Path, dir: &Path) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("CA file") {
        roots.add(cert.expect("CA cert")).expect("add CA");
    }
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(dir.join("client.crt"))
        .expect("client.crt")
        .map(|c| c.expect("certificate"))
        .collect();
    let key = PrivateKeyDer::from_pem_file(dir.join("client.key")).expect("client.key");
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .expect("client auth");
    TlsConnector::from(Arc::new(config))
}

async fn post_review(stream: &mut TlsStream<TcpStream>) -> std::io::Result<String> {
    let head = format!(
        "POST /mutate HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        REVIEW.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(REVIEW.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    Ok(String::from_utf8_lossy(&response).into_owned())
}

#[tokio::test]
async fn with_a_client_ca_only_verified_callers_reach_mutate() {
    let dir = TempDir::new("client-ca");
    let (trusted, other) = (TempDir::new("client-trusted"), TempDir::new("client-other"));
    make_certs(&other.0, "ec-sec1");
    let ca = dir.path("ca.crt").display().to_string();
    // The serving CA doubles as the client CA here; start() makes it first.
    let server = start(&dir, &["--client-ca-file", &ca]).await;
    client_certificate(&dir.0, &trusted.0, "kube-apiserver");
    client_certificate(&other.0, &other.0, "kube-apiserver");

    let with_cert = connector_with_client_certificate(&dir.path("ca.crt"), &trusted.0);
    let mut stream = tls(&server, &with_cert).await.expect("handshake with a trusted certificate");
    let answer = post_review(&mut stream).await.expect("answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#""uid":"u1""#) && answer.contains(r#""patch":"#), "{answer}");

    let mut anonymous = tls(&server, &server.connector()).await.expect("handshake without one");
    let answer = post_review(&mut anonymous).await.expect("answer");
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(answer.contains("client certificate"), "{answer}");
    assert_eq!(server.get("/healthz").await.0, 200, "probes carry no certificate");
    assert_eq!(server.get("/readyz").await.0, 200, "probes carry no certificate");

    // Signed by another CA: refused in the handshake (TLS 1.3 reports it on
    // the client's first read).
    let untrusted = connector_with_client_certificate(&dir.path("ca.crt"), &other.0);
    let refused = match tls(&server, &untrusted).await {
        Err(_) => true,
        Ok(mut stream) => post_review(&mut stream).await.map_or(true, |a| a.is_empty()),
    };
    assert!(refused, "a certificate from another CA must be refused");

    let (_, metrics) = http_get(&server.metrics_addr, "/metrics").await;
    assert!(metrics.contains(r#"outcome="unauthenticated"} 1"#), "{metrics}");
    assert!(metrics.contains(r#"outcome="mutated"} 1"#), "{metrics}");
    assert_eq!(server.terminate().await, Some(0));
}
