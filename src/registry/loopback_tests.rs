//! oci-client driven for real against a few scripted answers on loopback: the `WWW-Authenticate`
//! Bearer handshake (anonymous and with Basic credentials to the token realm), `HEAD` with
//! `Docker-Content-Digest`, the `GET` fallback, and how 401, 404, 503, a bad digest, a slow
//! answer, TLS spoken to plain HTTP and a closed port are classified. Not a registry: a real one
//! is for the integration tests.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use sha2::{Digest as _, Sha256};

use super::*;

const D1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const D2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";
const BODY: &str =
    r#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}"#;
const MEDIA_TYPES: [&str; 4] = [
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
];

struct Fake {
    addr: SocketAddr,
    hits: Mutex<HashMap<String, usize>>,
    realm_saw: Mutex<Vec<String>>,
}

impl Fake {
    fn hits(&self, what: &str) -> usize {
        self.hits.lock().map(|h| h.get(what).copied().unwrap_or(0)).unwrap_or(0)
    }
}

fn envelope(code: &str) -> String {
    format!(r#"{{"errors":[{{"code":"{code}","message":"scripted"}}]}}"#)
}

async fn answer(State(fake): State<Arc<Fake>>, request: Request) -> Response {
    let path = request.uri().path().to_owned();
    let head = request.method() == Method::HEAD;
    if let Ok(mut hits) = fake.hits.lock() {
        *hits.entry(format!("{} {path}", request.method())).or_default() += 1;
    }
    let headers = request.headers();
    let authorization =
        headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).unwrap_or("");
    if path == "/v2/" {
        let challenge = format!(r#"Bearer realm="http://{}/token",service="fake""#, fake.addr);
        return (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, challenge)]).into_response();
    }
    if path == "/token" {
        let user = authorization
            .strip_prefix("Basic ")
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .and_then(|b| String::from_utf8(b).ok());
        if let Ok(mut saw) = fake.realm_saw.lock() {
            saw.push(user.clone().unwrap_or_else(|| "anonymous".into()));
        }
        return match user.as_deref() {
            None => r#"{"token":"tok-anonymous"}"#.into_response(),
            Some("alice:s3cret") => r#"{"token":"tok-alice"}"#.into_response(),
            Some(_) => StatusCode::UNAUTHORIZED.into_response(),
        };
    }
    let Some((name, tag)) =
        path.strip_prefix("/v2/").and_then(|rest| rest.split_once("/manifests/"))
    else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if !accepts_every_manifest_type(headers) {
        return StatusCode::NOT_ACCEPTABLE.into_response();
    }
    let token = authorization.strip_prefix("Bearer ").unwrap_or("");
    let with_digest =
        |digest: &str| (StatusCode::OK, [("docker-content-digest", digest.to_owned())], BODY);
    match (name, tag) {
        (_, "gone") | ("absent/app", _) => (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "application/json")],
            envelope("MANIFEST_UNKNOWN"),
        )
            .into_response(),
        ("public/app", _) if token.starts_with("tok-") => with_digest(D1).into_response(),
        ("private/app", _) if token == "tok-alice" => with_digest(D2).into_response(),
        ("public/nodigest", _) => BODY.into_response(),
        ("public/baddigest", _) => with_digest("sha256:../../etc/passwd").into_response(),
        ("public/broken", _) => {
            (StatusCode::SERVICE_UNAVAILABLE, "down for maintenance").into_response()
        }
        ("public/slow", _) => {
            tokio::time::sleep(Duration::from_secs(3)).await;
            with_digest(D1).into_response()
        }
        _ => {
            let body = if head { String::new() } else { envelope("UNAUTHORIZED") };
            (StatusCode::UNAUTHORIZED, [(header::CONTENT_TYPE, "application/json")], body)
                .into_response()
        }
    }
}

fn accepts_every_manifest_type(headers: &HeaderMap) -> bool {
    let accept: Vec<&str> =
        headers.get_all(header::ACCEPT).iter().filter_map(|v| v.to_str().ok()).collect();
    let accept = accept.join(",");
    MEDIA_TYPES.iter().all(|t| accept.contains(t))
}

async fn serve() -> Arc<Fake> {
    let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
        Ok(listener) => listener,
        Err(error) => panic!("bind loopback: {error}"),
    };
    let addr = match listener.local_addr() {
        Ok(addr) => addr,
        Err(error) => panic!("local addr: {error}"),
    };
    let fake = Arc::new(Fake { addr, hits: Mutex::default(), realm_saw: Mutex::default() });
    let router = Router::new().fallback(answer).with_state(Arc::clone(&fake));
    tokio::spawn(async move { axum::serve(listener, router).await });
    fake
}

fn client_for(
    fake: &Fake,
    insecure: bool,
    timeout: Duration,
    metrics: RegistryMetrics,
) -> RegistryClient {
    let config = RegistryConfig {
        insecure_registries: if insecure { vec![fake.addr.to_string()] } else { Vec::new() },
        timeout,
        ..RegistryConfig::default()
    };
    match RegistryClient::new(config, metrics) {
        Ok(client) => client,
        Err(error) => panic!("{error}"),
    }
}

fn image(fake: &Fake, path: &str) -> ImageRef {
    match ImageRef::parse(&format!("{}/{path}", fake.addr)) {
        Ok(image) => image,
        Err(error) => panic!("{path}: {error}"),
    }
}

fn digest(d: &str) -> Resolution {
    match ImageDigest::parse(d) {
        Some(digest) => Resolution::Digest(digest),
        None => panic!("{d} is not a digest"),
    }
}

fn failed(kind: FailureKind, status: Option<u16>) -> Resolution {
    Resolution::failed(kind, status)
}

fn credential(fake: &Fake, user: &str, password: &str) -> PullCredential {
    match crate::registry::RegistryKey::parse(&format!("http://{}/v2/", fake.addr)) {
        Some(key) => PullCredential::new(key, user.into(), password.into()),
        None => panic!("key"),
    }
}

#[tokio::test]
async fn answers_over_the_bearer_handshake_are_classified() {
    let fake = serve().await;
    let mut metrics = crate::metrics::Metrics::new();
    let registry_metrics = RegistryMetrics::register(&mut metrics);
    let client = client_for(&fake, true, DEFAULT_TIMEOUT, registry_metrics);

    assert_eq!(client.resolve(&image(&fake, "public/app:prod"), &[]).await, digest(D1));
    assert_eq!(fake.hits("HEAD /v2/public/app/manifests/prod"), 1);
    assert_eq!(fake.hits("GET /v2/public/app/manifests/prod"), 0, "HEAD gave the digest");
    // Reused: no second request.
    assert_eq!(client.resolve(&image(&fake, "public/app:prod"), &[]).await, digest(D1));
    assert_eq!(fake.hits("HEAD /v2/public/app/manifests/prod"), 1);

    let sha = format!("sha256:{:x}", Sha256::digest(BODY.as_bytes()));
    assert_eq!(client.resolve(&image(&fake, "public/nodigest:1"), &[]).await, digest(&sha));
    assert_eq!(client.resolve(&image(&fake, "public/app:gone"), &[]).await, Resolution::Unknown);
    assert_eq!(client.resolve(&image(&fake, "absent/app:1"), &[]).await, Resolution::Unknown);
    assert_eq!(
        client.resolve(&image(&fake, "public/broken:1"), &[]).await,
        failed(FailureKind::ServerError, Some(503))
    );
    assert_eq!(
        client.resolve(&image(&fake, "public/baddigest:1"), &[]).await,
        failed(FailureKind::InvalidResponse, None)
    );
    let private = image(&fake, "private/app:prod");
    assert_eq!(client.resolve(&private, &[]).await, failed(FailureKind::Unauthorized, Some(401)));

    let text = metrics.encode();
    let label = |outcome: &str| format!(r#"{{registry="{}",outcome="{outcome}"}}"#, fake.addr);
    for (outcome, count) in
        [("digest", 2), ("unknown", 2), ("server_error", 1), ("unauthorized", 1)]
    {
        let needle = format!("configsum_registry_requests_total{} {count}", label(outcome));
        assert!(text.contains(&needle), "missing {needle} in\n{text}");
    }
}

#[tokio::test]
async fn basic_credentials_go_to_the_token_realm_and_refusals_fall_through() {
    let fake = serve().await;
    let client = client_for(&fake, true, DEFAULT_TIMEOUT, RegistryMetrics::default());
    let private = image(&fake, "private/app:prod");
    let wrong = credential(&fake, "mallory", "guess");
    let alice = credential(&fake, "alice", "s3cret");

    assert_eq!(
        client.resolve(&private, std::slice::from_ref(&wrong)).await,
        failed(FailureKind::Unauthorized, Some(401))
    );
    assert_eq!(client.resolve(&private, &[wrong, alice]).await, digest(D2));
    let saw = fake.realm_saw.lock().map(|s| s.clone()).unwrap_or_default();
    assert!(saw.contains(&"alice:s3cret".to_owned()), "{saw:?}");
}

#[tokio::test]
async fn transport_failures_are_classified() {
    let fake = serve().await;
    let short = Duration::from_millis(300);
    let client = client_for(&fake, true, short, RegistryMetrics::default());
    let started = tokio::time::Instant::now();
    assert_eq!(
        client.resolve(&image(&fake, "public/slow:1"), &[]).await,
        failed(FailureKind::Timeout, None)
    );
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());

    // HTTPS spoken to a plain-HTTP port.
    let tls = client_for(&fake, false, DEFAULT_TIMEOUT, RegistryMetrics::default());
    assert_eq!(
        tls.resolve(&image(&fake, "public/app:prod"), &[]).await,
        failed(FailureKind::Tls, None)
    );

    // A port nobody listens on.
    let closed = match std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
        Ok(addr) => addr,
        Err(error) => panic!("{error}"),
    };
    let nobody = match ImageRef::parse(&format!("{closed}/public/app:prod")) {
        Ok(image) => image,
        Err(error) => panic!("{error}"),
    };
    let config = RegistryConfig {
        insecure_registries: vec![closed.to_string()],
        ..RegistryConfig::default()
    };
    let client = match RegistryClient::new(config, RegistryMetrics::default()) {
        Ok(client) => client,
        Err(error) => panic!("{error}"),
    };
    assert_eq!(client.resolve(&nobody, &[]).await, failed(FailureKind::Connection, None));
}
