//! The parse limit: the least any webhook that reads its reviews can do, on configsum's own
//! stack. hyper (HTTP/1.1 and HTTP/2 by ALPN, the same header timeout) over rustls (ring,
//! TLS 1.3 and 1.2) on a multi-threaded tokio runtime, as `configsum serve` builds its
//! listener; each request's body read whole and checked to be JSON by serde_json, its
//! `request.uid` echoed in an AdmissionReview that allows, with no patch. Unlike nginx's
//! fixed answer (the floor), this is a bound a webhook can be measured against: no review
//! can be answered without this work.
//!
//! It runs as its own process, the bench binary started again with [`ARG`], so that its CPU
//! and memory are counted apart from the load generator's, as configsum's are.
#![allow(dead_code)]

use std::borrow::Cow;
use std::convert::Infallible;
use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt as _, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::peer::Peer;

/// The argument that makes the bench binary this server instead of the bench.
pub const ARG: &str = "--serve-parse-limit";

/// Starts the parse-limit server with the bench's certificate.
pub fn start(cert: &Path, key: &Path) -> Result<Peer, String> {
    let exe = std::env::current_exe().map_err(|e| format!("the bench binary: {e}"))?;
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    Peer::start(&exe, &[ARG, &cert, &key])
}

/// The process's work when started with [`ARG`] `CERT KEY`: serves until killed.
pub fn serve(cert: &str, key: &str) {
    // As configsum's main builds it: the default worker count, one per core.
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(listen(Path::new(cert), Path::new(key)));
}

async fn listen(cert: &Path, key: &Path) {
    let acceptor = TlsAcceptor::from(Arc::new(server_config(cert, key)));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let mut stdout = std::io::stdout();
    let _ = writeln!(stdout, "listening on {addr}");
    let _ = stdout.flush();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // configsum's idle timeout, through hyper's header timeout as there.
    builder.http1().timer(TokioTimer::new()).header_read_timeout(Duration::from_secs(30));
    loop {
        let Ok((tcp, _)) = listener.accept().await else { continue };
        let (acceptor, builder) = (acceptor.clone(), builder.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else { return };
            let service = hyper::service::service_fn(answer);
            let _ = builder.serve_connection(TokioIo::new(tls), service).await;
        });
    }
}

/// TLS 1.3 and 1.2 with ring's default suites, HTTP/2 and HTTP/1.1 by ALPN: configsum's
/// `server_config` without client certificates or certificate reloading.
fn server_config(cert: &Path, key: &Path) -> ServerConfig {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .expect("certificate file")
        .collect::<Result<_, _>>()
        .expect("certificate");
    let key = PrivateKeyDer::from_pem_file(key).expect("key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("certificate and key");
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    config
}

/// Only `request.uid` is kept; serde_json still checks every byte of the rest is JSON.
#[derive(Deserialize)]
struct Review<'a> {
    #[serde(borrow)]
    request: ReviewRequest<'a>,
}

#[derive(Deserialize)]
struct ReviewRequest<'a> {
    #[serde(borrow)]
    uid: Cow<'a, str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Answer<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: AnswerResponse<'a>,
}

#[derive(Serialize)]
struct AnswerResponse<'a> {
    uid: &'a str,
    allowed: bool,
}

async fn answer(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    if request.method() != Method::POST || request.uri().path() != "/mutate" {
        return Ok(status(StatusCode::NOT_FOUND));
    }
    let Ok(body) = request.into_body().collect().await.map(|b| b.to_bytes()) else {
        return Ok(status(StatusCode::BAD_REQUEST));
    };
    let Ok(review) = serde_json::from_slice::<Review<'_>>(&body) else {
        return Ok(status(StatusCode::BAD_REQUEST));
    };
    let answer = Answer {
        api_version: "admission.k8s.io/v1",
        kind: "AdmissionReview",
        response: AnswerResponse { uid: &review.request.uid, allowed: true },
    };
    let Ok(json) = serde_json::to_vec(&answer) else {
        return Ok(status(StatusCode::INTERNAL_SERVER_ERROR));
    };
    let mut response = Response::new(Full::new(Bytes::from(json)));
    let json_type = hyper::header::HeaderValue::from_static("application/json");
    response.headers_mut().insert(hyper::header::CONTENT_TYPE, json_type);
    Ok(response)
}

fn status(code: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = code;
    response
}
