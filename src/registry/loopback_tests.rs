//! The registry client driven for real against scripted answers on loopback: the
//! `WWW-Authenticate` Bearer handshake (anonymous and with Basic credentials to the token realm),
//! `HEAD` with `Docker-Content-Digest`, the `GET` fallback, and how 401, 404, 503, a bad digest,
//! a slow answer, TLS spoken to plain HTTP and a closed port are classified; and every way a
//! hostile registry or reference tried to misuse it (docs/security.md, "Registries"): plain-HTTP
//! realms, redirects to internal addresses, loopback references, endless bodies, malformed
//! tokens, bodies in logs. Not a registry: a real one is for the integration tests.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use futures_util::StreamExt as _;
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
/// Planted in bodies the client must never log.
const MARKER: &str = "BODY-MARKER-7f3a";

struct Fake {
    addr: SocketAddr,
    /// Another fake whose address realms and redirects may name.
    other: Mutex<Option<SocketAddr>>,
    hits: Mutex<HashMap<String, usize>>,
    /// The `Authorization` each request carried, by path.
    authorizations: Mutex<Vec<(String, Option<String>)>>,
    /// The `User-Agent` of each request, in order.
    user_agents: Mutex<Vec<String>>,
    /// Bytes of endless bodies sent before the client hung up.
    streamed: Arc<AtomicUsize>,
}

impl Fake {
    fn hits(&self, what: &str) -> usize {
        self.hits.lock().map(|h| h.get(what).copied().unwrap_or(0)).unwrap_or(0)
    }

    fn total_hits(&self) -> usize {
        self.hits.lock().map(|h| h.values().sum()).unwrap_or(0)
    }

    fn authorizations(&self, path: &str) -> Vec<Option<String>> {
        let seen = self.authorizations.lock().map(|a| a.clone()).unwrap_or_default();
        seen.into_iter().filter(|(p, _)| p == path).map(|(_, a)| a).collect()
    }

    fn other(&self) -> SocketAddr {
        self.other.lock().ok().and_then(|o| *o).unwrap_or(self.addr)
    }
}

fn envelope(code: &str) -> String {
    format!(r#"{{"errors":[{{"code":"{code}","message":"scripted {MARKER}"}}]}}"#)
}

/// An endless body of `{"token":"xxxx…` or of spaces, counting what was sent.
fn endless(prefix: &'static str, streamed: Arc<AtomicUsize>) -> Body {
    let chunk = vec![b' '; 64 * 1024];
    let stream = futures_util::stream::iter(
        std::iter::once(prefix.as_bytes().to_vec()).chain(std::iter::repeat_n(chunk, 1 << 20)),
    )
    .map(move |bytes| {
        streamed.fetch_add(bytes.len(), Ordering::SeqCst);
        Ok::<_, Infallible>(bytes)
    });
    Body::from_stream(stream)
}

async fn answer(State(fake): State<Arc<Fake>>, request: Request) -> Response {
    let path = request.uri().path().to_owned();
    let head = request.method() == Method::HEAD;
    if let Ok(mut hits) = fake.hits.lock() {
        *hits.entry(format!("{} {path}", request.method())).or_default() += 1;
    }
    let headers = request.headers();
    let authorization =
        headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_owned);
    if let Ok(mut seen) = fake.authorizations.lock() {
        seen.push((path.clone(), authorization.clone()));
    }
    let user_agent = headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok());
    if let Ok(mut seen) = fake.user_agents.lock() {
        seen.push(user_agent.unwrap_or_default().to_owned());
    }
    let authorization = authorization.unwrap_or_default();
    let other = fake.other();
    let challenge = |realm: String| {
        let value = format!(r#"Bearer realm="{realm}",service="fake""#);
        // The body reflects the caller's Authorization, as some realms do: it must not be logged.
        let body = format!("{MARKER} {authorization}");
        (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, value)], body).into_response()
    };
    let redirect = |to: String| {
        (StatusCode::TEMPORARY_REDIRECT, [(header::LOCATION, to)], MARKER).into_response()
    };
    match path.as_str() {
        "/token" => {
            let user = authorization
                .strip_prefix("Basic ")
                .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                .and_then(|b| String::from_utf8(b).ok());
            return match user.as_deref() {
                None => r#"{"token":"tok-anonymous"}"#.into_response(),
                Some("alice:s3cret") => r#"{"token":"tok-alice"}"#.into_response(),
                Some(_) => (StatusCode::UNAUTHORIZED, MARKER).into_response(),
            };
        }
        "/token/endless" => {
            return endless(r#"{"token":"x"#, Arc::clone(&fake.streamed)).into_response();
        }
        "/token/malformed" => return r#"{"token":"tok\r\nInjected: yes"}"#.into_response(),
        "/token/huge-valid" => {
            return format!(r#"{{"token":"{}"}}"#, "t".repeat(2 * 1024 * 1024)).into_response();
        }
        "/elsewhere" => return with_digest(D2).into_response(),
        _ => {}
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
    match (name, tag) {
        ("realm/plain-elsewhere", _) if token.is_empty() => {
            challenge(format!("http://{other}/token"))
        }
        ("realm/plain-elsewhere", _) => with_digest(D1).into_response(),
        ("realm/endless", _) if token.is_empty() => {
            challenge(format!("http://{}/token/endless", fake.addr))
        }
        ("realm/malformed", _) if token.is_empty() => {
            challenge(format!("http://{}/token/malformed", fake.addr))
        }
        ("realm/huge-valid", _) if token.is_empty() => {
            challenge(format!("http://{}/token/huge-valid", fake.addr))
        }
        ("redirect/internal", _) => redirect(format!("http://{other}/elsewhere")),
        ("redirect/metadata", _) => redirect("http://169.254.169.254/latest/meta-data/".to_owned()),
        ("redirect/https-internal", _) => redirect(format!("https://{other}/elsewhere")),
        ("redirect/same-origin", _) => redirect("/v2/public/app/manifests/prod".to_owned()),
        ("redirect/listed", _) => redirect(format!("http://{other}/elsewhere")),
        ("redirect/loop", _) => redirect(path.clone()),
        ("public/endless", _) if head => StatusCode::OK.into_response(),
        ("public/endless", _) => endless("{", Arc::clone(&fake.streamed)).into_response(),
        (_, "gone") | ("absent/app", _) => (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "application/json")],
            envelope("MANIFEST_UNKNOWN"),
        )
            .into_response(),
        (_, _) if token.is_empty() => challenge(format!("http://{}/token", fake.addr)),
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

fn with_digest(digest: &str) -> impl IntoResponse {
    (StatusCode::OK, [("docker-content-digest", digest.to_owned())], BODY)
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
    let fake = Arc::new(Fake {
        addr,
        other: Mutex::default(),
        hits: Mutex::default(),
        authorizations: Mutex::default(),
        user_agents: Mutex::default(),
        streamed: Arc::default(),
    });
    let router = Router::new().fallback(answer).with_state(Arc::clone(&fake));
    tokio::spawn(async move { axum::serve(listener, router).await });
    fake
}

/// Two fakes, each knowing the other's address.
async fn serve_pair() -> (Arc<Fake>, Arc<Fake>) {
    let (a, b) = (serve().await, serve().await);
    for (fake, other) in [(&a, b.addr), (&b, a.addr)] {
        if let Ok(mut slot) = fake.other.lock() {
            *slot = Some(other);
        }
    }
    (a, b)
}

fn client_with(insecure: &[SocketAddr], allow: &[&str], timeout: Duration) -> RegistryClient {
    let config = RegistryConfig {
        insecure_registries: insecure.iter().map(ToString::to_string).collect(),
        allowed_registries: allow.iter().map(|s| (*s).to_owned()).collect(),
        timeout,
        ..RegistryConfig::default()
    };
    match RegistryClient::new(config, RegistryMetrics::default()) {
        Ok(client) => client,
        Err(error) => panic!("{error}"),
    }
}

fn client_for(
    fake: &Fake,
    insecure: bool,
    timeout: Duration,
    metrics: RegistryMetrics,
) -> RegistryClient {
    let config = RegistryConfig {
        insecure_registries: if insecure { vec![fake.addr.to_string()] } else { Vec::new() },
        // Listed so that its loopback address may be contacted over TLS too.
        allowed_registries: vec![fake.addr.to_string()],
        timeout,
        ..RegistryConfig::default()
    };
    match RegistryClient::new(config, metrics) {
        Ok(client) => client,
        Err(error) => panic!("{error}"),
    }
}

fn image(fake: &Fake, path: &str) -> ImageRef {
    image_at(&fake.addr.to_string(), path)
}

fn image_at(host: &str, path: &str) -> ImageRef {
    match ImageRef::parse(&format!("{host}/{path}")) {
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

fn refused(refusal: super::policy::Refusal) -> Resolution {
    Resolution::failed(FailureKind::Refused(refusal), None)
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
    let mut metrics = crate::metrics_registry::MetricsRegistry::new();
    let registry_metrics = RegistryMetrics::register(&mut metrics);
    let client = client_for(&fake, true, DEFAULT_TIMEOUT, registry_metrics);

    assert_eq!(client.resolve(&image(&fake, "public/app:prod"), &[]).await, digest(D1));
    assert_eq!(fake.hits("HEAD /v2/public/app/manifests/prod"), 2, "challenged, then answered");
    assert_eq!(fake.hits("GET /v2/public/app/manifests/prod"), 0, "HEAD gave the digest");
    // Reused: no second request.
    assert_eq!(client.resolve(&image(&fake, "public/app:prod"), &[]).await, digest(D1));
    assert_eq!(fake.hits("HEAD /v2/public/app/manifests/prod"), 2);
    // Another tag of the repository: the cached token serves it, with no second handshake.
    assert_eq!(client.resolve(&image(&fake, "public/app:other"), &[]).await, digest(D1));
    assert_eq!(fake.hits("HEAD /v2/public/app/manifests/other"), 1);
    assert_eq!(fake.hits("GET /token"), 1);

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
        [("digest", 3), ("unknown", 2), ("server_error", 1), ("unauthorized", 1)]
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
    let basic =
        format!("Basic {}", base64::engine::general_purpose::STANDARD.encode("alice:s3cret"));
    assert!(fake.authorizations("/token").contains(&Some(basic)), "the realm is the registry's");
}

/// Every request, the token realm's included, names configsum and the command that sent it.
#[tokio::test]
async fn every_request_carries_the_commands_user_agent() {
    let (registry, realm) = serve_pair().await;
    let config = RegistryConfig {
        insecure_registries: vec![registry.addr.to_string(), realm.addr.to_string()],
        user_agent: crate::user_agent::header_value(crate::user_agent::Caller::Controller),
        ..RegistryConfig::default()
    };
    let client = match RegistryClient::new(config, RegistryMetrics::default()) {
        Ok(client) => client,
        Err(error) => panic!("{error}"),
    };
    let reference = image(&registry, "realm/plain-elsewhere:1");
    assert_eq!(client.resolve(&reference, &[]).await, digest(D1));
    let expected = format!("configsum/{} (controller)", env!("CARGO_PKG_VERSION"));
    for fake in [&registry, &realm] {
        let seen = fake.user_agents.lock().map(|s| s.clone()).unwrap_or_default();
        assert!(!seen.is_empty());
        assert!(seen.iter().all(|agent| *agent == expected), "{seen:?}");
    }
}

/// Before: a registry answering 401 with `Bearer realm="http://…"` elsewhere received the pull
/// secret's `Authorization: Basic` over plain HTTP.
#[tokio::test]
async fn credentials_never_go_to_a_plain_http_realm_elsewhere() {
    let (registry, realm) = serve_pair().await;
    let alice = credential(&registry, "alice", "s3cret");
    let reference = image(&registry, "realm/plain-elsewhere:1");

    // The realm's host is not an --insecure-registry: not contacted at all.
    let client = client_with(&[registry.addr], &[], DEFAULT_TIMEOUT);
    let resolution = client.resolve(&reference, std::slice::from_ref(&alice)).await;
    assert_eq!(resolution, refused(super::policy::Refusal::PlainHttp));
    assert_eq!(realm.total_hits(), 0);

    // Listed as insecure, it is contacted, but another origin over plain HTTP gets no credentials.
    let client = client_with(&[registry.addr, realm.addr], &[], DEFAULT_TIMEOUT);
    assert_eq!(client.resolve(&reference, std::slice::from_ref(&alice)).await, digest(D1));
    assert_eq!(realm.authorizations("/token"), [None]);
}

/// Before: a registry's 307 to an internal plain-HTTP URL was followed and the body's SHA-256
/// recorded as the image digest: a blind SSRF with an oracle.
#[tokio::test]
async fn redirects_to_internal_or_plain_http_addresses_are_refused() {
    let (registry, internal) = serve_pair().await;
    let client = client_with(&[registry.addr], &[], DEFAULT_TIMEOUT);
    for (path, refusal) in [
        ("redirect/internal:1", super::policy::Refusal::PlainHttp),
        ("redirect/metadata:1", super::policy::Refusal::PlainHttp),
    ] {
        let anonymous = client.resolve(&image(&registry, path), &[]).await;
        assert_eq!(anonymous, refused(refusal), "{path}");
    }
    assert_eq!(internal.total_hits(), 0);
    // The same redirect over HTTPS to an unlisted loopback port is refused on its address.
    assert_eq!(
        client.resolve(&image(&registry, "redirect/https-internal:1"), &[]).await,
        refused(super::policy::Refusal::InternalAddress)
    );
    assert_eq!(internal.total_hits(), 0);

    // Same origin: followed, with the token.
    assert_eq!(client.resolve(&image(&registry, "redirect/same-origin:1"), &[]).await, digest(D1));
    // A listed host: followed, but without the registry's Authorization.
    let client = client_with(&[registry.addr, internal.addr], &[], DEFAULT_TIMEOUT);
    assert_eq!(client.resolve(&image(&registry, "redirect/listed:1"), &[]).await, digest(D2));
    assert_eq!(internal.authorizations("/elsewhere"), [None]);
    // A loop ends.
    assert_eq!(
        client.resolve(&image(&registry, "redirect/loop:1"), &[]).await,
        failed(FailureKind::InvalidResponse, None)
    );
}

/// Before: an image reference naming a loopback or link-local host was contacted.
#[tokio::test]
async fn references_to_internal_addresses_are_refused_unless_listed() {
    let fake = serve().await;
    let port = fake.addr.port();
    let client = client_with(&[], &[], DEFAULT_TIMEOUT);
    for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}")] {
        let resolution = client.resolve(&image_at(&host, "public/app:1"), &[]).await;
        assert_eq!(resolution, refused(super::policy::Refusal::InternalAddress), "{host}");
    }
    let metadata = client.resolve(&image_at("169.254.169.254", "x:1"), &[]).await;
    assert_eq!(metadata, refused(super::policy::Refusal::InternalAddress));
    assert_eq!(fake.total_hits(), 0);

    // Named by --registry-allow: contacted (over HTTPS here, so the plain fake fails TLS).
    let allowed = client_with(&[], &[&format!("localhost:{port}")], DEFAULT_TIMEOUT);
    let resolution = allowed.resolve(&image_at(&format!("localhost:{port}"), "x:1"), &[]).await;
    assert_eq!(resolution, failed(FailureKind::Tls, None));
}

#[tokio::test]
async fn only_allowed_registries_are_contacted() {
    let fake = serve().await;
    let client = client_with(&[fake.addr], &["ghcr.io", "*.example.com"], DEFAULT_TIMEOUT);
    assert_eq!(
        client.resolve(&image(&fake, "public/app:prod"), &[]).await,
        failed(FailureKind::NotAllowed, None)
    );
    assert_eq!(fake.total_hits(), 0);
}

/// Before: an endless manifest body or token answer was read whole (1.4 GiB of peak memory in
/// one webhook); now at most the bound is read and the resolution fails.
#[tokio::test]
async fn endless_bodies_are_cut_at_their_bound() {
    let fake = serve().await;
    let client = client_for(&fake, true, Duration::from_secs(20), RegistryMetrics::default());
    assert_eq!(
        client.resolve(&image(&fake, "public/endless:1"), &[]).await,
        failed(FailureKind::TooLarge, None)
    );
    let manifest = fake.streamed.swap(0, Ordering::SeqCst);
    assert!(manifest < 16 << 20, "{manifest} bytes sent for a 4 MiB bound");
    assert_eq!(
        client.resolve(&image(&fake, "realm/endless:1"), &[]).await,
        failed(FailureKind::TooLarge, None)
    );
    let token = fake.streamed.load(Ordering::SeqCst);
    println!("endless bodies: {manifest} bytes sent for the manifest, {token} for the token");
    assert!(token < 8 << 20, "{token} bytes sent for a 1 MiB bound");
    // A valid token over 1 MiB is too large as well.
    assert_eq!(
        client.resolve(&image(&fake, "realm/huge-valid:1"), &[]).await,
        failed(FailureKind::TooLarge, None)
    );
}

/// Before: a token that cannot be a header value panicked a worker inside oci-client.
#[tokio::test]
async fn malformed_tokens_fail_the_resolution() {
    let fake = serve().await;
    let client = client_for(&fake, true, DEFAULT_TIMEOUT, RegistryMetrics::default());
    assert_eq!(
        client.resolve(&image(&fake, "realm/malformed:1"), &[]).await,
        failed(FailureKind::InvalidResponse, None)
    );
}

/// Before: oci-client logged a 401's body at debug level, so a realm reflecting the
/// Authorization header put credentials in the log.
#[test]
fn no_registry_body_or_credential_is_logged_at_any_level() {
    let log = Arc::new(Mutex::new(Vec::<u8>::new()));
    let writer = {
        let log = Arc::clone(&log);
        move || CapturedLog(Arc::clone(&log))
    };
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(writer)
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => panic!("{error}"),
    };
    runtime.block_on(async {
        let fake = serve().await;
        let client = client_for(&fake, true, DEFAULT_TIMEOUT, RegistryMetrics::default());
        let creds = [credential(&fake, "mallory", "guess"), credential(&fake, "alice", "s3cret")];
        for path in ["private/app:1", "public/broken:1", "absent/app:1", "redirect/loop:1"] {
            client.resolve(&image(&fake, path), &creds).await;
        }
        client.resolve(&image(&fake, "public/app:gone"), &[]).await;
    });
    let text =
        String::from_utf8_lossy(&log.lock().map(|l| l.clone()).unwrap_or_default()).into_owned();
    assert!(!text.is_empty(), "the capture works: something was logged");
    let basic = base64::engine::general_purpose::STANDARD.encode("alice:s3cret");
    for secret in [MARKER, "s3cret", basic.as_str(), "tok-alice", "guess"] {
        assert!(!text.contains(secret), "{secret} in the log:\n{text}");
    }
}

struct CapturedLog(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for CapturedLog {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut log) = self.0.lock() {
            log.extend_from_slice(bytes);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
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
    // A timeout, not the digest the fake sends after 3 s: cut before the answer came, and not
    // before the client's own deadline (how soon after it is a speed, not checked here).
    assert!(started.elapsed() >= short, "{:?}", started.elapsed());

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
    let client = client_with(&[closed], &[], DEFAULT_TIMEOUT);
    let nobody = image_at(&closed.to_string(), "public/app:prod");
    assert_eq!(client.resolve(&nobody, &[]).await, failed(FailureKind::Connection, None));
}
