//! The real router, in-process (no sockets): wire format, status codes,
//! deadlines and metrics.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use base64::Engine as _;
use configsum::core::{Digester, ObjectContent, ObjectRef, Settings};
use configsum::lookup::{FileSource, LookupError, ObjectSource};
use configsum::process::{MetricsRegistry, Readiness, admin_router};
use configsum::webhook::WebhookMetrics;
use configsum::webhook::api::{
    AppState, BODY_BYTES_IN_FLIGHT, BODY_TIMEOUT, MAX_BODY_BYTES, MAX_REVIEWS_IN_FLIGHT,
    OVERLOADED, router,
};
use http_body_util::BodyExt as _;
use serde_json::{Value, json};
use tower::ServiceExt as _;

const OBJECTS: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: app-config, namespace: shop}
data: {log-level: info}
---
apiVersion: v1
kind: Secret
metadata: {name: db, namespace: shop}
stringData: {password: hunter2}
"#;

/// A source that answers after `delay`, to exercise the deadline.
struct Slow {
    inner: FileSource,
    delay: Duration,
}

impl ObjectSource for Slow {
    async fn fetch(
        &self,
        namespace: &str,
        object: &ObjectRef,
    ) -> Result<Option<Arc<ObjectContent>>, LookupError> {
        tokio::time::sleep(self.delay).await;
        self.inner.fetch(namespace, object).await
    }
}

fn state(delay: Duration) -> Arc<AppState<Slow>> {
    state_recording_into(delay, WebhookMetrics::default())
}

/// A state whose metrics `registry` exposes, as the admin listener does.
fn state_exposing(delay: Duration) -> (Arc<AppState<Slow>>, Arc<MetricsRegistry>) {
    let mut registry = MetricsRegistry::new();
    let state = state_recording_into(delay, WebhookMetrics::register(&mut registry));
    (state, Arc::new(registry))
}

fn state_recording_into(delay: Duration, metrics: WebhookMetrics) -> Arc<AppState<Slow>> {
    let inner = FileSource::parse(OBJECTS, std::path::Path::new("test"), &Default::default())
        .expect("objects");
    Arc::new(AppState::new(
        Slow { inner, delay },
        Digester::default(),
        Settings::default(),
        Duration::from_secs(2),
        metrics,
        Readiness::new(true),
    ))
}

fn review(dry_run: bool) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "uid-1", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "operation": "CREATE", "namespace": "shop", "name": "web", "dryRun": dry_run,
        "object": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "c", "envFrom": [
                {"configMapRef": {"name": "app-config"}}, {"secretRef": {"name": "db"}}]}]}}}}}})
}

async fn post(state: Arc<AppState<Slow>>, uri: &str, body: impl Into<Body>) -> (StatusCode, Value) {
    let request = Request::post(uri)
        .header("content-type", "application/json")
        .body(body.into())
        .expect("request");
    let response = router(state).oneshot(request).await.expect("infallible");
    let status = response.status();
    let bytes = response.into_body().collect().await.expect("body").to_bytes();
    (status, serde_json::from_slice(&bytes).expect("every answer is JSON"))
}

fn decoded_patch(answer: &Value) -> Value {
    let encoded = answer["response"]["patch"].as_str().expect("a base64 patch string");
    let bytes = base64::engine::general_purpose::STANDARD.decode(encoded).expect("base64");
    serde_json::from_slice(&bytes).expect("JSON patch")
}

#[tokio::test]
async fn answers_with_the_uid_and_a_base64_patch() {
    let (status, answer) =
        post(state(Duration::ZERO), "/mutate?timeout=10s", review(false).to_string()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(answer["kind"], "AdmissionReview");
    assert_eq!(answer["response"]["uid"], "uid-1");
    assert_eq!(answer["response"]["allowed"], true);
    assert_eq!(answer["response"]["patchType"], "JSONPatch");
    let patch = decoded_patch(&answer);
    let paths: Vec<&str> =
        patch.as_array().expect("array").iter().filter_map(|op| op["path"].as_str()).collect();
    assert_eq!(
        paths,
        [
            "/spec/template/metadata",
            "/spec/template/metadata/annotations",
            "/spec/template/metadata/annotations/configmap.configsum.dev~1app-config",
            "/spec/template/metadata/annotations/secret.configsum.dev~1db",
        ]
    );
}

#[tokio::test]
async fn dry_run_gets_the_same_patch() {
    let (_, real) = post(state(Duration::ZERO), "/mutate", review(false).to_string()).await;
    let (_, dry) = post(state(Duration::ZERO), "/mutate", review(true).to_string()).await;
    assert_eq!(decoded_patch(&real), decoded_patch(&dry));
}

#[tokio::test]
async fn bad_bodies_get_400_with_a_json_error() {
    for body in [
        "",
        "{",
        "[]",
        r#"{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}"#,
        r#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}"#,
    ] {
        let (status, answer) = post(state(Duration::ZERO), "/mutate", body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body:?}");
        assert!(answer["error"].as_str().is_some_and(|e| !e.is_empty()), "{body:?}: {answer}");
    }
}

#[tokio::test]
async fn oversized_bodies_get_413() {
    let body = vec![b' '; MAX_BODY_BYTES + 1];
    let (status, answer) = post(state(Duration::ZERO), "/mutate", body).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(answer["error"].as_str().is_some_and(|e| e.contains("larger than")));
}

#[tokio::test(start_paused = true)]
async fn slow_lookups_are_cut_at_the_api_server_deadline() {
    // timeout=2s: the budget is max(1s, 1s) less a margin, well before a 5 s lookup.
    let started = tokio::time::Instant::now();
    let (status, answer) =
        post(state(Duration::from_secs(5)), "/mutate?timeout=2s", review(false).to_string()).await;
    assert_eq!(status, StatusCode::OK);
    assert!(started.elapsed() < Duration::from_secs(1), "answered after {:?}", started.elapsed());
    let warnings = answer["response"]["warnings"].as_array().expect("warnings");
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings.iter().all(|w| {
        w.as_str()
            .is_some_and(|w| w.ends_with(": could not be read; no annotation written (timeout)"))
    }));
    assert!(answer["response"].get("patch").is_none(), "nothing existed, so nothing to keep");
}

#[tokio::test]
async fn readiness_follows_the_flag() {
    let state = state(Duration::ZERO);
    let get = |state: Arc<AppState<Slow>>, path: &'static str| async move {
        router(state)
            .oneshot(Request::get(path).body(Body::empty()).expect("request"))
            .await
            .expect("infallible")
            .status()
    };
    assert_eq!(get(state.clone(), "/readyz").await, StatusCode::OK);
    assert_eq!(get(state.clone(), "/healthz").await, StatusCode::OK);
    state.ready.set(false);
    assert_eq!(get(state.clone(), "/readyz").await, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(get(state, "/healthz").await, StatusCode::OK, "liveness is not readiness");
}

#[tokio::test]
async fn metrics_count_admissions_by_kind_operation_and_outcome() {
    let (state, registry) = state_exposing(Duration::ZERO);
    post(state.clone(), "/mutate", review(false).to_string()).await;
    post(state.clone(), "/mutate", "nonsense").await;
    let response = admin_router(registry, state.ready.clone())
        .oneshot(Request::get("/metrics").body(Body::empty()).expect("request"))
        .await
        .expect("infallible");
    let text =
        String::from_utf8(response.into_body().collect().await.expect("body").to_bytes().to_vec())
            .expect("utf8");
    assert!(text.contains(r#"configsum_admissions_total{kind="Deployment",operation="CREATE",outcome="mutated"} 1"#), "{text}");
    assert!(text.contains(r#"configsum_admissions_total{kind="unknown",operation="unknown",outcome="bad_request"} 1"#), "{text}");
    assert!(text.contains("configsum_lookup_duration_seconds_count 2"), "{text}");
    assert!(!text.contains("hunter2"));
}

/// A source whose lookups wait until the test opens the gate.
struct Gate {
    inner: FileSource,
    open: tokio::sync::Semaphore,
    waiting: std::sync::atomic::AtomicUsize,
}

impl ObjectSource for Gate {
    async fn fetch(
        &self,
        namespace: &str,
        object: &ObjectRef,
    ) -> Result<Option<Arc<ObjectContent>>, LookupError> {
        self.waiting.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let _permit = self.open.acquire().await.map_err(|_| LookupError::Connection)?;
        self.inner.fetch(namespace, object).await
    }
}

#[tokio::test]
async fn reviews_over_the_in_flight_limit_are_answered_at_once_unchanged() {
    let inner = FileSource::parse(OBJECTS, std::path::Path::new("test"), &Default::default())
        .expect("objects");
    let gate = Gate { inner, open: tokio::sync::Semaphore::new(0), waiting: Default::default() };
    let mut registry = MetricsRegistry::new();
    let state = Arc::new(AppState::new(
        gate,
        Digester::default(),
        Settings::default(),
        Duration::from_secs(60),
        WebhookMetrics::register(&mut registry),
        Readiness::new(true),
    ));
    let send = |state: Arc<AppState<Gate>>| async move {
        let request = Request::post("/mutate").body(Body::from(review(false).to_string()));
        let response = router(state).oneshot(request.expect("request")).await.expect("infallible");
        let bytes = response.into_body().collect().await.expect("body").to_bytes();
        serde_json::from_slice::<Value>(&bytes).expect("JSON")
    };
    let held: Vec<_> =
        (0..MAX_REVIEWS_IN_FLIGHT).map(|_| tokio::spawn(send(state.clone()))).collect();
    // Each held review waits on its two lookups.
    while state.source.waiting.load(std::sync::atomic::Ordering::SeqCst) < 2 * MAX_REVIEWS_IN_FLIGHT
    {
        tokio::task::yield_now().await;
    }
    let shed = tokio::time::timeout(Duration::from_secs(5), send(state.clone()))
        .await
        .expect("answered at once, not queued");
    assert_eq!(shed["response"]["uid"], "uid-1");
    assert_eq!(shed["response"]["allowed"], true);
    assert!(shed["response"].get("patch").is_none(), "{shed}");
    assert_eq!(shed["response"]["warnings"], json!([OVERLOADED]));
    assert!(OVERLOADED.chars().count() < 120);

    state.source.open.add_permits(10_000);
    for review in held {
        let answer = review.await.expect("joined");
        assert!(answer["response"]["patch"].is_string(), "held reviews are decided: {answer}");
    }
    // Capacity is back.
    assert!(send(state.clone()).await["response"]["patch"].is_string());
    let text = registry.encode();
    assert!(text.contains(r#"outcome="overloaded"} 1"#), "{text}");
}

#[tokio::test(start_paused = true)]
async fn a_body_that_stalls_gets_408_after_ten_seconds() {
    let first = Ok::<_, std::io::Error>(axum::body::Bytes::from_static(b"{\"apiVersion\""));
    let stalled = futures_util::StreamExt::chain(
        futures_util::stream::iter([first]),
        futures_util::stream::pending(),
    );
    let started = tokio::time::Instant::now();
    let (status, answer) = post(state(Duration::ZERO), "/mutate", Body::from_stream(stalled)).await;
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT);
    assert!(answer["error"].as_str().is_some_and(|e| e.contains("did not arrive")), "{answer}");
    assert_eq!(started.elapsed(), BODY_TIMEOUT);
}

#[tokio::test]
async fn bodies_beyond_the_replica_byte_budget_get_503_at_once() {
    let (state, registry) = state_exposing(Duration::ZERO);
    // Stalled senders that declared the largest body each hold 8 MiB of budget.
    let mut stalled = Vec::new();
    for _ in 0..BODY_BYTES_IN_FLIGHT / MAX_BODY_BYTES {
        let request = Request::post("/mutate")
            .header("content-length", MAX_BODY_BYTES)
            .body(Body::from_stream(futures_util::stream::pending::<std::io::Result<Vec<u8>>>()))
            .expect("request");
        stalled.push(tokio::spawn(router(state.clone()).oneshot(request)));
    }
    tokio::time::timeout(Duration::from_secs(5), async {
        while state.bodies.available() > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the stalled bodies take the whole budget");
    let (status, answer) = post(state.clone(), "/mutate", review(false).to_string()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(answer["error"].as_str().is_some_and(|e| e.contains("overloaded")), "{answer}");
    let text = registry.encode();
    assert!(text.contains(r#"outcome="over_body_budget"} 1"#), "{text}");
    for request in &stalled {
        request.abort();
    }
    for request in stalled {
        let _ = request.await;
    }
    assert_eq!(
        state.bodies.available(),
        BODY_BYTES_IN_FLIGHT,
        "an abandoned body gives its budget back"
    );
    let (status, _) = post(state, "/mutate", review(false).to_string()).await;
    assert_eq!(status, StatusCode::OK);
}
