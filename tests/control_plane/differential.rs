//! The fake API server (tests/support/fake_apiserver.rs) against a real kube-apiserver: one
//! script of requests sent over raw HTTP to both, the fake in process and a control plane of
//! this test's own over HTTPS (its CA verified, a cluster-admin ServiceAccount's bearer token),
//! each answer normalised and compared. A step fails where the fake answers differently from the
//! real server in a way its module comment claims to reproduce; where the comment lists a
//! deliberate deviation, the step checks that the real server still does what the comment says
//! and that the fake is the stricter one. Every failing step is reported with both answers.
//!
//! Normalised: uids, resourceVersions and creationTimestamps become placeholders (the shapes
//! are checked first), continue tokens are decoded (their snapshot resourceVersion a
//! placeholder, their start key kept), generated name suffixes are checked against the API
//! server's alphabet, numbers and uids inside Status messages become placeholders. Dropped from
//! the real answers only, as the fake's comment lists them as not reproduced: `managedFields`,
//! `remainingItemCount`. `generation` of built-in kinds is dropped from both sides' bodies (a
//! custom resource's is compared there) and compared in steps of its own: a Deployment's through
//! creation and six patches, a ConfigMap's absence.
//!
//! On a control plane of its own: the 410 steps restart kube-apiserver, which would disturb the
//! other tests of this binary.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use http_body_util::{BodyExt as _, Full};
use hyper::body::{Bytes, Incoming};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::control_plane::ControlPlane;
use crate::fake_apiserver::FakeApiServer;
use crate::install::run;
use crate::server::{install_crypto_provider, tls_connector};

/// Where the script's objects live (created on the real server first).
const NS: &str = "differential";
/// Where objects that must not show in NS's lists go.
const OTHER: &str = "differential-other";
const META: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
const META_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
/// The API server's `generateName` alphabet (`k8s.io/apimachinery/pkg/util/rand`).
const NAME_ALPHABET: &str = "bcdfghjklmnpqrstvwxz2456789";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Side {
    Fake,
    Real,
}

enum Backend {
    Fake(FakeApiServer),
    Real { cp: Arc<ControlPlane>, tls: TlsConnector, addr: String },
}

/// One of the two servers, with the token the script uses.
struct Server {
    backend: Backend,
    token: String,
}

#[derive(Clone, Debug)]
enum Auth {
    Token,
    Anonymous,
    /// This Authorization header instead of the script's token.
    Header(&'static str),
}

#[derive(Clone, Debug)]
struct Req {
    method: &'static str,
    path: String,
    auth: Auth,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
}

impl Req {
    fn new(method: &'static str, path: impl Into<String>) -> Req {
        Req { method, path: path.into(), auth: Auth::Token, headers: Vec::new(), body: Vec::new() }
    }

    fn get(path: impl Into<String>) -> Req {
        Req::new("GET", path)
    }

    fn json(method: &'static str, path: impl Into<String>, body: &Value) -> Req {
        Req::new(method, path).body("application/json", body)
    }

    fn patch(path: impl Into<String>, content_type: &str, body: &Value) -> Req {
        Req::new("PATCH", path).body(content_type, body)
    }

    fn body(mut self, content_type: &str, body: &Value) -> Req {
        self.headers.push(("content-type", content_type.to_owned()));
        self.body = serde_json::to_vec(body).expect("a JSON body");
        self
    }

    fn header(mut self, name: &'static str, value: &str) -> Req {
        self.headers.push((name, value.to_owned()));
        self
    }

    fn auth(mut self, auth: Auth) -> Req {
        self.auth = auth;
        self
    }

    fn describe(&self) -> String {
        let mut text = format!("{} {}", self.method, self.path);
        match &self.auth {
            Auth::Token => {}
            Auth::Anonymous => text.push_str(" (no Authorization)"),
            Auth::Header(h) => text.push_str(&format!(" (Authorization: {h})")),
        }
        for (name, value) in &self.headers {
            text.push_str(&format!(" [{name}: {value}]"));
        }
        if !self.body.is_empty() {
            text.push_str(&format!(" {}", String::from_utf8_lossy(&self.body)));
        }
        text
    }
}

/// An answer: status, media type and body (JSON, or the text as a JSON string).
struct Answer {
    status: u16,
    content_type: String,
    body: Value,
}

impl Answer {
    fn value(&self) -> Value {
        json!({"status": self.status, "contentType": self.content_type, "body": self.body})
    }

    fn rv(&self) -> String {
        self.body["metadata"]["resourceVersion"].as_str().unwrap_or("").to_owned()
    }
}

/// A watch read to its end (or until the deadline).
struct WatchResult {
    status: u16,
    /// The events; for a non-200 answer, its body alone.
    events: Vec<Value>,
    /// The server ended the stream by itself.
    ended: bool,
}

impl WatchResult {
    fn value(&self) -> Value {
        json!({"status": self.status, "events": self.events, "ended": self.ended})
    }
}

impl Server {
    fn side(&self) -> Side {
        match self.backend {
            Backend::Fake(_) => Side::Fake,
            Backend::Real { .. } => Side::Real,
        }
    }

    async fn connect(&self) -> hyper::client::conn::http1::SendRequest<Full<Bytes>> {
        match &self.backend {
            Backend::Fake(api) => {
                let tcp = TcpStream::connect(api.addr).await.expect("connect to the fake");
                handshake(tcp).await
            }
            Backend::Real { tls, addr, .. } => {
                let tcp = TcpStream::connect(addr).await.expect("connect to kube-apiserver");
                let name = rustls_pki_types::ServerName::try_from("127.0.0.1").expect("an IP");
                let tls =
                    tls.connect(name, tcp).await.expect("TLS verifying the control plane's CA");
                handshake(tls).await
            }
        }
    }

    async fn start(&self, req: &Req) -> hyper::Response<Incoming> {
        let mut sender = self.connect().await;
        let mut builder =
            hyper::Request::builder().method(req.method).uri(&req.path).header("host", "127.0.0.1");
        match &req.auth {
            Auth::Token => {
                builder = builder.header("authorization", format!("Bearer {}", self.token))
            }
            Auth::Anonymous => {}
            Auth::Header(value) => builder = builder.header("authorization", *value),
        }
        for (name, value) in &req.headers {
            builder = builder.header(*name, value);
        }
        let request = builder.body(Full::new(Bytes::from(req.body.clone()))).expect("a request");
        tokio::time::timeout(Duration::from_secs(15), sender.send_request(request))
            .await
            .unwrap_or_else(|_| {
                panic!("{:?}: no answer within 15 s to {}", self.side(), req.describe())
            })
            .unwrap_or_else(|e| panic!("{:?}: {}: {e}", self.side(), req.describe()))
    }

    async fn send(&self, req: &Req) -> Answer {
        let response = self.start(req).await;
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let bytes = tokio::time::timeout(Duration::from_secs(15), response.into_body().collect())
            .await
            .unwrap_or_else(|_| {
                panic!("{:?}: no body within 15 s: {}", self.side(), req.describe())
            })
            .expect("a body")
            .to_bytes();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Answer { status, content_type, body }
    }

    /// A watch read until the server ends it, or `within`.
    async fn watch(&self, req: &Req, within: Duration) -> WatchResult {
        let response = self.start(req).await;
        collect_watch(response, within).await
    }

    /// Serves `argoproj.io/v1alpha1` `rollouts`: the fake's switch, or a CRD on the real server.
    async fn serve_rollouts(&self) {
        match &self.backend {
            Backend::Fake(api) => api.serve_rollouts(),
            Backend::Real { cp, .. } => {
                cp.apply(ROLLOUT_CRD);
                let started = Instant::now();
                loop {
                    let discovery = self.send(&Req::get("/apis/argoproj.io/v1alpha1")).await;
                    let list =
                        self.send(&Req::get(format!("{}/rollouts", ns_path(GROUP_ARGO, NS)))).await;
                    if discovery.status == 200 && list.status == 200 {
                        break;
                    }
                    assert!(
                        started.elapsed() < Duration::from_secs(30),
                        "the Rollout CRD is served"
                    );
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }

    /// Makes every resourceVersion so far too old to watch from: the fake's `compact()`; a
    /// restart of kube-apiserver, whose new watch cache starts at etcd's current revision.
    async fn forget_history(&self) {
        match &self.backend {
            Backend::Fake(api) => api.compact(),
            Backend::Real { cp, .. } => {
                let cp = cp.clone();
                tokio::task::spawn_blocking(move || cp.restart_apiserver()).await.expect("restart");
                // Right after a restart RBAC answers 403 for a moment.
                let started = Instant::now();
                let probe = Req::get(format!("/api/v1/namespaces/{NS}/configmaps"));
                while self.send(&probe).await.status != 200 {
                    assert!(started.elapsed() < Duration::from_secs(30), "kube-apiserver is back");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }
}

async fn handshake<T>(io: T) -> hyper::client::conn::http1::SendRequest<Full<Bytes>>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
            .await
            .expect("an HTTP/1.1 handshake");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    sender
}

async fn collect_watch(response: hyper::Response<Incoming>, within: Duration) -> WatchResult {
    let status = response.status().as_u16();
    let mut body = response.into_body();
    let mut buf = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    let ended = loop {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => break false,
            Ok(None) => break true,
            Ok(Some(Err(_))) => break false,
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    buf.extend_from_slice(&data);
                }
            }
        }
    };
    let events = if status == 200 {
        buf.split(|b| *b == b'\n')
            .filter(|line| !line.iter().all(u8::is_ascii_whitespace))
            .map(|line| {
                serde_json::from_slice(line)
                    .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(line).into_owned()))
            })
            .collect()
    } else {
        vec![
            serde_json::from_slice(&buf)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&buf).into_owned())),
        ]
    };
    WatchResult { status, events, ended }
}

const GROUP_ARGO: &str = "argoproj.io/v1alpha1";

/// `/api/v1/namespaces/<ns>` or `/apis/<group/version>/namespaces/<ns>`.
fn ns_path(group_version: &str, ns: &str) -> String {
    if group_version == "v1" {
        format!("/api/v1/namespaces/{ns}")
    } else {
        format!("/apis/{group_version}/namespaces/{ns}")
    }
}

fn configmaps(ns: &str) -> String {
    format!("{}/configmaps", ns_path("v1", ns))
}

fn configmap(name: &str) -> String {
    format!("{}/{name}", configmaps(NS))
}

fn deployments() -> String {
    format!("{}/deployments", ns_path("apps/v1", NS))
}

fn rollouts() -> String {
    format!("{}/rollouts", ns_path(GROUP_ARGO, NS))
}

fn config_map_body(name: &str, labels: Value, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels}, "data": data})
}

fn deployment_body(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": name}}, "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]}}}})
}

const ROLLOUT_CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: rollouts.argoproj.io}
spec:
  group: argoproj.io
  names: {kind: Rollout, listKind: RolloutList, plural: rollouts, singular: rollout}
  scope: Namespaced
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
";

/// How a step's two observations must relate: `(fake, real)`, both normalised.
type Compare = fn(&Value, &Value) -> Result<(), String>;

/// The same answer.
fn equal(fake: &Value, real: &Value) -> Result<(), String> {
    if fake == real { Ok(()) } else { Err("the answers differ".into()) }
}

/// The same status and Status reason: for errors whose messages the fake does not claim.
fn code_and_reason(fake: &Value, real: &Value) -> Result<(), String> {
    let pick = |v: &Value| json!([v["status"], v["body"]["reason"]]);
    if pick(fake) == pick(real) { Ok(()) } else { Err("status or reason differ".into()) }
}

/// The fake's `/version` claims nothing but a 200 with the version fields.
fn version_shape(fake: &Value, real: &Value) -> Result<(), String> {
    let shape = |v: &Value| {
        v["status"] == 200
            && ["major", "minor", "gitVersion"].iter().all(|k| v["body"][k].is_string())
    };
    if shape(fake) && shape(real) {
        Ok(())
    } else {
        Err("both must be 200 with major, minor, gitVersion".into())
    }
}

/// Every group the fake lists is listed by the real server, alike.
fn groups_subset(fake: &Value, real: &Value) -> Result<(), String> {
    let without = |v: &Value| {
        let mut v = v.clone();
        v["body"]["groups"] = json!(null);
        v
    };
    if without(fake) != without(real) {
        return Err("the APIGroupList documents differ outside their groups".into());
    }
    let real_groups = real["body"]["groups"].as_array().cloned().unwrap_or_default();
    for group in fake["body"]["groups"].as_array().cloned().unwrap_or_default() {
        if !real_groups.contains(&group) {
            return Err(format!("the real server does not list {group} so"));
        }
    }
    Ok(())
}

/// Every resource the fake lists is listed by the real server with the same name, singular,
/// scope and kind, and no verb the real server does not have.
fn resources_subset(fake: &Value, real: &Value) -> Result<(), String> {
    let without = |v: &Value| {
        let mut v = v.clone();
        v["body"]["resources"] = json!(null);
        v
    };
    if without(fake) != without(real) {
        return Err("the APIResourceList documents differ outside their resources".into());
    }
    let real_resources = real["body"]["resources"].as_array().cloned().unwrap_or_default();
    let fake_resources = fake["body"]["resources"].as_array().cloned().unwrap_or_default();
    if fake_resources.is_empty() {
        return Err("the fake lists no resource".into());
    }
    for resource in fake_resources {
        let Some(same) = real_resources.iter().find(|r| r["name"] == resource["name"]) else {
            return Err(format!("the real server does not serve {}", resource["name"]));
        };
        for key in ["singularName", "namespaced", "kind"] {
            if same[key] != resource[key] {
                return Err(format!("{}: {key} differs", resource["name"]));
            }
        }
        let verbs = same["verbs"].as_array().cloned().unwrap_or_default();
        for verb in resource["verbs"].as_array().cloned().unwrap_or_default() {
            if !verbs.contains(&verb) {
                return Err(format!("{}: the real server has no verb {verb}", resource["name"]));
            }
        }
    }
    Ok(())
}

/// Deliberately not reproduced: the fake takes any bearer token; the real server answers 401
/// to one it cannot verify, on every path.
fn invalid_token_is_401_on_the_real_server(_fake: &Value, real: &Value) -> Result<(), String> {
    let unauthorized = json!({"status": 401, "contentType": "application/json", "body": {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Unauthorized", "reason": "Unauthorized", "code": 401}});
    if *real == unauthorized { Ok(()) } else { Err("the real server no longer answers 401".into()) }
}

/// Deliberately stricter: metadata-only list items carry no kind/apiVersion in the fake; the
/// real server sets `meta.k8s.io/v1 PartialObjectMetadata` on each (custom resources' list items
/// carry their own). Otherwise alike.
fn items_without_types(fake: &Value, real: &Value) -> Result<(), String> {
    let mut stripped = real.clone();
    if let Some(items) = stripped["body"]["items"].as_array_mut() {
        for item in items {
            let (Some(kind), Some(api_version)) =
                (item["kind"].as_str(), item["apiVersion"].as_str())
            else {
                return Err(
                    "a real list item without kind/apiVersion: no deviation to document".into()
                );
            };
            let expected = match fake["body"]["kind"].as_str() {
                Some("PartialObjectMetadataList") => ("PartialObjectMetadata", "meta.k8s.io/v1"),
                _ => ("Rollout", GROUP_ARGO),
            };
            if (kind, api_version) != expected {
                return Err(format!("a real list item is {api_version} {kind}"));
            }
            if let Some(item) = item.as_object_mut() {
                item.remove("kind");
                item.remove("apiVersion");
            }
        }
    }
    equal(fake, &stripped)
}

/// Deliberately stricter: a `resourceVersion=0` LIST pages in the fake; the real server serves
/// it from the watch cache, whole, without a continue token.
fn rv0_limit(fake: &Value, real: &Value) -> Result<(), String> {
    let count = |v: &Value| v["body"]["items"].as_array().map_or(0, Vec::len);
    let token = |v: &Value| v["body"]["metadata"].get("continue").is_some();
    if count(real) != 3 || token(real) {
        return Err("the real server paged a resourceVersion=0 list".into());
    }
    if count(fake) != 1 || !token(fake) {
        return Err("the fake must honour limit here".into());
    }
    Ok(())
}

/// Deliberately different: a watch asking for `PartialObjectMetadataList` is 406 in the fake;
/// the real server answers 200 and sends nothing.
fn meta_list_watch(fake: &Value, real: &Value) -> Result<(), String> {
    if real["status"] != 200 || real["events"] != json!([]) {
        return Err("the real server no longer answers 200 without events".into());
    }
    if fake["status"] != 406 {
        return Err("the fake must refuse it".into());
    }
    Ok(())
}

/// Deliberately different: a custom resource's GET in the list form is 500 "content is not a
/// list" on the real server; the fake answers 406 as for built-in kinds.
fn crd_meta_list_get(fake: &Value, real: &Value) -> Result<(), String> {
    if real["status"] != 500 || real["body"]["message"] != "content is not a list" {
        return Err("the real server no longer answers 500 content is not a list".into());
    }
    if fake["status"] != 406 {
        return Err("the fake must refuse it".into());
    }
    Ok(())
}

struct Step {
    name: String,
    request: String,
    compare: Compare,
    observed: Value,
}

/// What one server answered to the script.
struct Recorder {
    side: Side,
    steps: Vec<Step>,
}

impl Recorder {
    fn record(&mut self, name: &str, request: String, compare: Compare, observed: Value) {
        let observed = normalise(&observed, self.side);
        self.steps.push(Step { name: name.to_owned(), request, compare, observed });
    }

    fn answer(&mut self, name: &str, req: &Req, compare: Compare, answer: &Answer) {
        self.record(name, req.describe(), compare, answer.value());
    }

    /// A watch's answer without its periodic bookmarks, whose timing is a documented
    /// deviation (the fake's every second, the real server's about once a minute and two
    /// seconds before the timeout); the bookmark that ends the initial events is kept.
    fn watch(&mut self, name: &str, req: &Req, result: &WatchResult) {
        let mut value = result.value();
        if let Some(events) = value["events"].as_array_mut() {
            events.retain(|e| {
                e["type"] != "BOOKMARK"
                    || e["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true"
            });
        }
        self.record(name, req.describe(), equal, value);
    }
}

/// Sends `req` and records the answer.
async fn ask(
    server: &Server,
    log: &mut Recorder,
    name: &str,
    compare: Compare,
    req: Req,
) -> Answer {
    let answer = server.send(&req).await;
    log.answer(name, &req, compare, &answer);
    answer
}

/// The script, as one server answers it.
async fn script(server: &Server) -> Vec<Step> {
    let log = &mut Recorder { side: server.side(), steps: Vec::new() };
    let s = server;

    // Authentication: no token is system:anonymous (403, but /version); a token the server
    // cannot verify is 401 on the real server only (the fake takes any token).
    let anonymous = |method, path: String| Req::new(method, path).auth(Auth::Anonymous);
    ask(s, log, "anonymous /version", version_shape, anonymous("GET", "/version".into())).await;
    ask(s, log, "anonymous list", equal, anonymous("GET", "/api/v1/secrets".into())).await;
    let path = format!("{}/web", deployments());
    ask(s, log, "anonymous get", equal, anonymous("GET", path)).await;
    let path = format!("{}?watch=1&fieldSelector=metadata.name%3Done", configmaps(NS));
    ask(s, log, "anonymous watch by name", equal, anonymous("GET", path)).await;
    ask(s, log, "anonymous create", equal, anonymous("POST", configmaps(NS))).await;
    ask(s, log, "anonymous delete collection", equal, anonymous("DELETE", configmaps(NS))).await;
    ask(s, log, "anonymous /api", equal, anonymous("GET", "/api".into())).await;
    let path = "/apis/example.com/v1/widgets".to_owned();
    ask(s, log, "anonymous unserved group", equal, anonymous("GET", path)).await;
    let basic = |path: &str| Req::get(path).auth(Auth::Header("Basic eDp5"));
    ask(s, log, "Basic /version", version_shape, basic("/version")).await;
    ask(s, log, "Basic list", equal, basic("/api/v1/secrets")).await;
    let empty = Req::get("/api/v1/secrets").auth(Auth::Header("Bearer "));
    ask(s, log, "empty bearer list", equal, empty).await;
    let invalid = |path: &str| Req::get(path).auth(Auth::Header("Bearer not-a-token"));
    let compare = invalid_token_is_401_on_the_real_server;
    ask(s, log, "invalid token /version", compare, invalid("/version")).await;
    ask(s, log, "invalid token list", compare, invalid("/api/v1/secrets")).await;

    // Discovery.
    ask(s, log, "/api", equal, Req::get("/api")).await;
    ask(s, log, "/apis", groups_subset, Req::get("/apis")).await;
    ask(s, log, "/api/v1", resources_subset, Req::get("/api/v1")).await;
    ask(s, log, "/apis/apps/v1", resources_subset, Req::get("/apis/apps/v1")).await;
    for (name, path) in [
        ("unserved group", "/apis/example.com/v1".to_owned()),
        ("unserved group's resource", "/apis/example.com/v1/widgets".to_owned()),
        ("unserved core version", "/api/v2".to_owned()),
        ("unserved core resource", "/api/v1/widgets".to_owned()),
        ("unserved apps resource", format!("{}/widgets", ns_path("apps/v1", NS))),
        ("namespaced object without namespace", "/api/v1/configmaps/one".to_owned()),
        ("CRD not installed", rollouts()),
    ] {
        ask(s, log, name, equal, Req::get(path)).await;
    }

    // Writes.
    let web = json!({"app": "one", "tier": "web", "differential": "yes"});
    let one = config_map_body("one", web, json!({"k": "1"}));
    ask(s, log, "create", equal, Req::json("POST", configmaps(NS), &one)).await;
    let two =
        config_map_body("two", json!({"app": "two", "differential": "yes"}), json!({"k": "2"}));
    ask(s, log, "create two", equal, Req::json("POST", configmaps(NS), &two)).await;
    let labels = json!({"app": "three", "tier": "web", "differential": "yes"});
    let three = config_map_body("three", labels, json!({"k": "3"}));
    ask(s, log, "create three", equal, Req::json("POST", configmaps(NS), &three)).await;
    ask(s, log, "create again", equal, Req::json("POST", configmaps(NS), &one)).await;
    let generated = json!({"metadata": {"generateName": "gen-"}, "data": {"k": "g"}});
    ask(s, log, "generateName", equal, Req::json("POST", configmaps(OTHER), &generated)).await;
    let with_rv = json!({"metadata": {"name": "x", "resourceVersion": "5"}});
    ask(s, log, "create with resourceVersion", equal, Req::json("POST", configmaps(NS), &with_rv))
        .await;
    let nameless = json!({"metadata": {"labels": {"a": "b"}}});
    ask(s, log, "create without a name", equal, Req::json("POST", configmaps(NS), &nameless)).await;
    let elsewhere = json!({"metadata": {"name": "x", "namespace": OTHER}});
    ask(
        s,
        log,
        "create in another namespace",
        equal,
        Req::json("POST", configmaps(NS), &elsewhere),
    )
    .await;
    let yaml =
        Req::new("POST", configmaps(NS)).body("text/plain", &json!({"metadata": {"name": "x"}}));
    ask(s, log, "create as text/plain", equal, yaml).await;
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}});
    ask(
        s,
        log,
        "create of another kind",
        code_and_reason,
        Req::json("POST", configmaps(NS), &secret),
    )
    .await;
    let stamped = json!({"metadata": {"name": "stamped", "uid": "mine",
        "creationTimestamp": "2001-02-03T04:05:06Z"}});
    let req = Req::json("POST", configmaps(OTHER), &stamped);
    let answer = s.send(&req).await;
    let meta = &answer.body["metadata"];
    let observed = json!({"status": answer.status, "uid kept": meta["uid"] == "mine",
        "creationTimestamp kept": meta["creationTimestamp"] == "2001-02-03T04:05:06Z"});
    log.record("uid and creationTimestamp are the server's", req.describe(), equal, observed);

    // A resourceVersion that is stale on both servers: one's before its next write.
    let stale_rv = s.send(&Req::get(configmap("one"))).await.rv();
    let req =
        Req::patch(configmap("one"), "application/merge-patch+json", &json!({"data": {"k": "1a"}}));
    ask(s, log, "merge PATCH", equal, req).await;
    let stale =
        json!({"metadata": {"name": "one", "resourceVersion": stale_rv}, "data": {"k": "x"}});
    ask(s, log, "stale PUT", equal, Req::json("PUT", configmap("one"), &stale)).await;
    let stale_patch = json!({"metadata": {"resourceVersion": stale_rv}, "data": {"k": "x"}});
    let req = Req::patch(configmap("one"), "application/merge-patch+json", &stale_patch);
    ask(s, log, "stale merge PATCH", equal, req).await;
    let failing = json!([{"op": "test", "path": "/data/k", "value": "nope"}]);
    let req = Req::patch(configmap("one"), "application/json-patch+json", &failing);
    ask(s, log, "failing JSON patch", equal, req).await;
    let not_a_patch = json!({"op": "add"});
    let req = Req::patch(configmap("one"), "application/json-patch+json", &not_a_patch);
    ask(s, log, "JSON patch that is not a list", code_and_reason, req).await;
    let req = Req::patch(configmap("one"), "text/plain", &json!({"data": {"k": "x"}}));
    ask(s, log, "text/plain PATCH", equal, req).await;
    let req = Req::patch(
        configmap("one"),
        "application/strategic-merge-patch+json",
        &json!({"data": {"k": "1b"}}),
    );
    ask(s, log, "strategic merge PATCH", equal, req).await;
    let ops = json!([{"op": "add", "path": "/data/j", "value": "added"}]);
    ask(
        s,
        log,
        "JSON PATCH",
        equal,
        Req::patch(configmap("one"), "application/json-patch+json", &ops),
    )
    .await;
    let merge = json!({"data": {"j": null, "k": "1c"}});
    let req = Req::patch(configmap("one"), "application/merge-patch+json", &merge);
    let before = ask(s, log, "merge PATCH removing a key", equal, req).await;

    // Writes that change nothing: the resourceVersion stays, no watch event.
    let req =
        Req::patch(configmap("one"), "application/merge-patch+json", &json!({"data": {"k": "1c"}}));
    let same = s.send(&req).await;
    let observed = json!({"status": same.status, "resourceVersion kept": same.rv() == before.rv()});
    log.record("no-op merge PATCH", req.describe(), equal, observed);
    let req = Req::json("PUT", configmap("one"), &before.body);
    let same = s.send(&req).await;
    let observed = json!({"status": same.status, "resourceVersion kept": same.rv() == before.rv()});
    log.record("no-op PUT", req.describe(), equal, observed);
    let req = Req::get(format!(
        "{}?watch=1&resourceVersion={}&timeoutSeconds=1",
        configmaps(NS),
        before.rv()
    ));
    let result = s.watch(&req, Duration::from_secs(5)).await;
    log.watch("no event for the no-ops", &req, &result);

    let renamed = json!({"metadata": {"name": "other"}, "data": {}});
    ask(s, log, "PUT under another name", equal, Req::json("PUT", configmap("one"), &renamed))
        .await;
    let missing = json!({"metadata": {"name": "missing"}, "data": {}});
    ask(s, log, "PUT of a missing object", equal, Req::json("PUT", configmap("missing"), &missing))
        .await;
    ask(s, log, "DELETE of a missing object", equal, Req::new("DELETE", configmap("missing")))
        .await;
    let req = Req::json("PUT", configmaps(NS), &json!({}));
    ask(s, log, "PUT on a collection", equal, req).await;
    let req = Req::json("POST", configmap("one"), &json!({}));
    ask(s, log, "POST on an object", equal, req).await;
    let body = json!({"metadata": {"name": "x", "namespace": NS}});
    let req = Req::json("POST", "/api/v1/configmaps", &body);
    ask(s, log, "POST of a namespaced kind across namespaces", equal, req).await;
    for (name, preconditions) in [
        ("DELETE with a wrong uid", json!({"uid": "wrong"})),
        ("DELETE with a stale resourceVersion", json!({"resourceVersion": "1"})),
        ("DELETE with both wrong", json!({"uid": "wrong", "resourceVersion": "1"})),
    ] {
        let options =
            json!({"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": preconditions});
        ask(s, log, name, equal, Req::json("DELETE", configmap("two"), &options)).await;
    }
    let current = s.send(&Req::get(configmap("two"))).await;
    let options = json!({"preconditions": {"uid": current.body["metadata"]["uid"],
        "resourceVersion": current.rv()}});
    ask(
        s,
        log,
        "DELETE with preconditions",
        equal,
        Req::json("DELETE", configmap("two"), &options),
    )
    .await;
    ask(s, log, "create two again", equal, Req::json("POST", configmaps(NS), &two)).await;

    // Deployments: errors name the group; bodies are compared only for their types, as the
    // fake does no defaulting.
    let types = |answer: &Answer| {
        json!({"status": answer.status, "kind": answer.body["kind"],
            "apiVersion": answer.body["apiVersion"], "name": answer.body["metadata"]["name"]})
    };
    let req = Req::json("POST", deployments(), &deployment_body("web"));
    let created = s.send(&req).await;
    log.record("create a Deployment", req.describe(), equal, types(&created));
    let req = Req::get(format!("{}/web", deployments()));
    let answer = s.send(&req).await;
    log.record("get a Deployment", req.describe(), equal, types(&answer));
    let req = Req::get(deployments());
    let list = s.send(&req).await;
    let items: Vec<Value> = list.body["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|i| json!({"kind": i.get("kind"), "apiVersion": i.get("apiVersion"), "name": i["metadata"]["name"]}))
        .collect();
    let observed = json!({"status": list.status, "kind": list.body["kind"],
        "apiVersion": list.body["apiVersion"], "items": items});
    log.record("list Deployments", req.describe(), equal, observed);
    ask(s, log, "missing Deployment", equal, Req::get(format!("{}/missing", deployments()))).await;
    let mut stale = deployment_body("web");
    stale["metadata"]["resourceVersion"] = json!("1");
    ask(
        s,
        log,
        "stale Deployment PUT",
        equal,
        Req::json("PUT", format!("{}/web", deployments()), &stale),
    )
    .await;
    let req = Req::patch(
        format!("{}/web", deployments()),
        "application/merge-patch+json",
        &json!({"metadata": {"resourceVersion": "1"}}),
    );
    ask(s, log, "stale Deployment PATCH", equal, req).await;
    let options = json!({"preconditions": {"resourceVersion": "1"}});
    let req = Req::json("DELETE", format!("{}/web", deployments()), &options);
    ask(s, log, "Deployment DELETE with a stale resourceVersion", equal, req).await;
    let mut nameless = deployment_body("x");
    nameless["metadata"] = json!({});
    ask(s, log, "Deployment without a name", equal, Req::json("POST", deployments(), &nameless))
        .await;

    // A Deployment's generation: 1 at creation, one more for a spec or an annotations change,
    // none for labels, status or a generation the client sends.
    let path = format!("{}/counted", deployments());
    let mut body = deployment_body("counted");
    body["metadata"]["generation"] = json!(9);
    let mut generations = vec![
        s.send(&Req::json("POST", deployments(), &body)).await.body["metadata"]["generation"]
            .clone(),
    ];
    for patch in [
        json!({"spec": {"replicas": 3}}),
        json!({"metadata": {"labels": {"tier": "web"}}}),
        json!({"status": {"observedGeneration": 7}}),
        json!({"metadata": {"annotations": {"a": "b"}}}),
        json!({"metadata": {"generation": 40}}),
        json!({"spec": {"template": {"metadata": {"annotations": {"x": "1"}}}}}),
    ] {
        let answer = s.send(&Req::patch(&path, "application/merge-patch+json", &patch)).await;
        generations.push(answer.body["metadata"]["generation"].clone());
    }
    let req = Req::new("DELETE", &path);
    s.send(&req).await;
    let request = format!("POST and six merge patches of {path}");
    log.record("a Deployment's generation", request, equal, json!(generations));
    // No generation on a ConfigMap.
    let answer = s.send(&Req::get(configmap("one"))).await;
    let observed = json!([answer.status, answer.body["metadata"].get("generation")]);
    log.record("a ConfigMap has no generation", configmap("one"), equal, observed);
    ask(s, log, "DELETE a Deployment", equal, Req::new("DELETE", format!("{}/web", deployments())))
        .await;

    // Lists: one, three, two in NS.
    ask(s, log, "list", equal, Req::get(configmaps(NS))).await;
    let first =
        ask(s, log, "first page", equal, Req::get(format!("{}?limit=2", configmaps(NS)))).await;
    let token = first.body["metadata"]["continue"].as_str().unwrap_or("").to_owned();
    let req = Req::get(format!("{}?limit=2&continue={token}", configmaps(NS)));
    let last = ask(s, log, "last page", equal, req.clone()).await;
    let observed = json!({"same snapshot": last.rv() == first.rv()});
    log.record("pages share the first page's resourceVersion", req.describe(), equal, observed);
    let req = Req::get(format!(
        "{}?limit=2&continue={token}&resourceVersion={}",
        configmaps(NS),
        first.rv()
    ));
    ask(s, log, "continue with a resourceVersion", equal, req).await;
    let req = Req::get(format!("{}?limit=2&continue=garbage", configmaps(NS)));
    ask(s, log, "a garbage continue token", code_and_reason, req).await;
    let mut path = "/api/v1/configmaps?limit=1&labelSelector=differential%3Dyes".to_owned();
    let mut pages = Vec::new();
    loop {
        let req = Req::get(&path);
        let page = s.send(&req).await;
        let token = page.body["metadata"]["continue"].as_str().map(str::to_owned);
        pages.push(page.value());
        match token {
            Some(token) if pages.len() < 5 => {
                path = format!(
                    "/api/v1/configmaps?limit=1&labelSelector=differential%3Dyes&continue={token}"
                );
            }
            _ => break,
        }
    }
    log.record(
        "pages across namespaces",
        "GET /api/v1/configmaps?limit=1 ...".into(),
        equal,
        json!(pages),
    );

    // Selectors.
    let names = |answer: &Answer| {
        let names: Vec<Value> = answer.body["items"]
            .as_array()
            .map(|items| items.iter().map(|i| i["metadata"]["name"].clone()).collect())
            .unwrap_or_default();
        json!({"status": answer.status, "names": names})
    };
    for selector in [
        "labelSelector=app%3Done",
        "labelSelector=app%3D%3Done",
        "labelSelector=app%21%3Done",
        "labelSelector=tier",
        "labelSelector=%21tier",
        "labelSelector=app+in+%28one%2Cthree%29",
        "labelSelector=app+notin+%28one%29",
        "labelSelector=tier%3Dweb%2Capp%21%3Dthree",
        "fieldSelector=metadata.name%3Dtwo",
        "fieldSelector=metadata.name%21%3Dtwo",
        "fieldSelector=metadata.name%3D%3Dtwo",
        "fieldSelector=metadata.namespace%3Ddifferential&labelSelector=differential",
    ] {
        let path = if selector.contains("metadata.namespace") {
            format!("/api/v1/configmaps?{selector}")
        } else {
            format!("{}?{selector}", configmaps(NS))
        };
        let req = Req::get(path);
        let answer = s.send(&req).await;
        log.record(selector, req.describe(), equal, names(&answer));
    }
    let req = Req::get(format!("{}?labelSelector=a%20b", configmaps(NS)));
    ask(s, log, "malformed label selector", code_and_reason, req).await;
    let req = Req::get(format!("{}?fieldSelector=data.k%3Dv", configmaps(NS)));
    ask(s, log, "unknown field selector", equal, req).await;
    let req = Req::get(format!("{}?fieldSelector=metadata.name", configmaps(NS)));
    ask(s, log, "field selector without an operator", equal, req).await;

    // List options.
    for (name, query) in [
        ("resourceVersionMatch without resourceVersion", "resourceVersionMatch=Exact".to_owned()),
        (
            "unsupported resourceVersionMatch",
            "resourceVersionMatch=Foo&resourceVersion=1".to_owned(),
        ),
        ("Exact at 0", "resourceVersionMatch=Exact&resourceVersion=0".to_owned()),
        ("sendInitialEvents on a list", "sendInitialEvents=true".to_owned()),
        ("bad limit", "limit=abc".to_owned()),
        ("bad resourceVersion", "resourceVersion=abc".to_owned()),
    ] {
        let compare: Compare = if name.starts_with("bad") { code_and_reason } else { equal };
        ask(s, log, name, compare, Req::get(format!("{}?{query}", configmaps(NS)))).await;
    }
    let snapshot = s.send(&Req::get(configmaps(NS))).await.rv();
    let four = config_map_body("four", json!({}), json!({}));
    s.send(&Req::json("POST", configmaps(NS), &four)).await;
    let req = Req::get(format!(
        "{}?resourceVersion={snapshot}&resourceVersionMatch=Exact",
        configmaps(NS)
    ));
    let answer = s.send(&req).await;
    log.record("Exact at an older resourceVersion", req.describe(), equal, names(&answer));
    s.send(&Req::new("DELETE", configmap("four"))).await;
    let req = Req::get(format!("{}?resourceVersion=0&limit=1", configmaps(NS)));
    ask(s, log, "resourceVersion=0 with limit", rv0_limit, req).await;
    let current: u64 = s.send(&Req::get(configmaps(NS))).await.rv().parse().unwrap_or(0);
    let req = Req::get(format!("{}?resourceVersion={}", configmaps(NS), current + 1_000_000));
    ask(s, log, "a list from a future resourceVersion", equal, req).await;

    // Single objects.
    ask(s, log, "get", equal, Req::get(configmap("one"))).await;
    ask(s, log, "watch=1 on an object", equal, Req::get(format!("{}?watch=1", configmap("one"))))
        .await;
    let req = Req::get(configmap("one")).header("accept", "text/html");
    ask(s, log, "Accept text/html", equal, req).await;

    // Metadata only.
    ask(s, log, "metadata-only get", equal, Req::get(configmap("one")).header("accept", META))
        .await;
    let req = Req::get(format!("{}?limit=2", configmaps(NS))).header("accept", META_LIST);
    ask(s, log, "metadata-only list", items_without_types, req).await;
    let req = Req::get(configmaps(NS)).header("accept", META);
    ask(s, log, "metadata-only form on a list", equal, req).await;
    let req = Req::get(configmap("one")).header("accept", META_LIST);
    ask(s, log, "metadata-only list form on an object", equal, req).await;
    let req =
        Req::get(format!("{}?watch=1&allowWatchBookmarks=true&timeoutSeconds=1", configmaps(NS)))
            .header("accept", META);
    let result = s.watch(&req, Duration::from_secs(5)).await;
    log.watch("metadata-only watch", &req, &result);
    let req = Req::get(format!("{}?watch=1&timeoutSeconds=1", configmaps(NS)))
        .header("accept", META_LIST);
    let result = s.watch(&req, Duration::from_secs(5)).await;
    log.record(
        "metadata-only list form on a watch",
        req.describe(),
        meta_list_watch,
        result.value(),
    );

    // Watches. A watch from a list's resourceVersion replays what happened since, in order.
    let listed = s.send(&Req::get(configmaps(NS))).await.rv();
    s.send(&Req::patch(
        configmap("one"),
        "application/merge-patch+json",
        &json!({"data": {"k": "1d"}}),
    ))
    .await;
    s.send(&Req::json("POST", configmaps(NS), &four)).await;
    s.send(&Req::new("DELETE", configmap("four"))).await;
    let req =
        Req::get(format!("{}?watch=1&resourceVersion={listed}&timeoutSeconds=1", configmaps(NS)));
    let result = s.watch(&req, Duration::from_secs(5)).await;
    log.watch("watch from a list's resourceVersion", &req, &result);
    let rvs: Vec<u64> = result
        .events
        .iter()
        .filter_map(|e| e["object"]["metadata"]["resourceVersion"].as_str()?.parse().ok())
        .collect();
    let from: u64 = listed.parse().unwrap_or(0);
    let ordered = rvs.windows(2).all(|w| w[0] < w[1]) && rvs.iter().all(|rv| *rv > from);
    log.record("its events in order, after the list", req.describe(), equal, json!(ordered));
    for (name, query) in [
        ("watch without resourceVersion", "watch=1&timeoutSeconds=1"),
        (
            "watch from 0 with bookmarks",
            "watch=true&resourceVersion=0&allowWatchBookmarks=true&timeoutSeconds=1",
        ),
        (
            "streaming list",
            "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1",
        ),
        (
            "streaming list without bookmarks",
            "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1",
        ),
        (
            "sendInitialEvents without resourceVersionMatch",
            "watch=1&sendInitialEvents=true&allowWatchBookmarks=true",
        ),
        (
            "resourceVersionMatch without sendInitialEvents",
            "watch=1&resourceVersionMatch=NotOlderThan&resourceVersion=5",
        ),
    ] {
        let req = Req::get(format!("{}?{query}", configmaps(NS)));
        let result = s.watch(&req, Duration::from_secs(5)).await;
        log.watch(name, &req, &result);
    }

    // Bookmarks carry the kind and a resourceVersion only. The real server sends one two
    // seconds before a watch's timeout once the watched resource has moved on (so: a write in
    // another namespace); the fake every second.
    let now = s.send(&Req::get(configmaps(NS))).await.rv();
    let req = Req::get(format!(
        "{}?watch=1&allowWatchBookmarks=true&resourceVersion={now}&timeoutSeconds=5",
        configmaps(NS)
    ));
    let response = s.start(&req).await;
    let watching = tokio::spawn(collect_watch(response, Duration::from_secs(10)));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let elsewhere = json!({"metadata": {"name": "moved-on"}});
    s.send(&Req::json("POST", configmaps(OTHER), &elsewhere)).await;
    let result = watching.await.expect("the watch");
    let mut bookmarks: Vec<Value> = result
        .events
        .iter()
        .filter(|e| e["type"] == "BOOKMARK")
        .map(|e| normalise(&e["object"], log.side))
        .collect();
    bookmarks.dedup();
    let others: Vec<&Value> = result.events.iter().filter(|e| e["type"] != "BOOKMARK").collect();
    let observed = json!({"status": result.status, "ended": result.ended, "bookmarks": bookmarks,
        "other events": others});
    log.record("bookmarks", req.describe(), equal, observed);

    // Objects entering and leaving a selector; a field selector on the name.
    let listed = s.send(&Req::get(configmaps(NS))).await.rv();
    let label = |name: &str, labels: Value| {
        Req::patch(
            configmap(name),
            "application/merge-patch+json",
            &json!({"metadata": {"labels": labels}}),
        )
    };
    let left = s.send(&label("three", json!({"tier": "db"}))).await;
    s.send(&label("two", json!({"tier": "web"}))).await;
    s.send(&Req::patch(
        configmap("one"),
        "application/merge-patch+json",
        &json!({"data": {"k": "1e"}}),
    ))
    .await;
    let query = format!("watch=1&resourceVersion={listed}&timeoutSeconds=1");
    let req = Req::get(format!("{}?labelSelector=tier%3Dweb&{query}", configmaps(NS)));
    let result = s.watch(&req, Duration::from_secs(5)).await;
    log.watch("label-selected watch", &req, &result);
    let deleted = result.events.iter().find(|e| e["type"] == "DELETED");
    let at_change =
        deleted.is_some_and(|e| e["object"]["metadata"]["resourceVersion"] == json!(left.rv()));
    log.record(
        "the leaving object's resourceVersion is the change's",
        req.describe(),
        equal,
        json!(at_change),
    );
    let req = Req::get(format!("{}?fieldSelector=metadata.name%3Done&{query}", configmaps(NS)));
    let result = s.watch(&req, Duration::from_secs(5)).await;
    log.watch("watch by name", &req, &result);

    // A watch from a resourceVersion the server has not reached waits for it.
    let now: u64 = s.send(&Req::get(configmaps(NS))).await.rv().parse().unwrap_or(0);
    let req = Req::get(format!(
        "{}?watch=1&resourceVersion={}&timeoutSeconds=2",
        configmaps(NS),
        now + 1_000_000
    ));
    let result = s.watch(&req, Duration::from_secs(6)).await;
    log.watch("watch from a future resourceVersion", &req, &result);

    // A custom resource.
    s.serve_rollouts().await;
    ask(s, log, "CRD discovery", resources_subset, Req::get("/apis/argoproj.io/v1alpha1")).await;
    let rollout = json!({"apiVersion": GROUP_ARGO, "kind": "Rollout", "metadata": {"name": "r1"},
        "spec": {"replicas": 1}});
    ask(s, log, "create a Rollout", equal, Req::json("POST", rollouts(), &rollout)).await;
    ask(s, log, "list Rollouts", items_without_types, Req::get(rollouts())).await;
    let r1 = format!("{}/r1", rollouts());
    let smp = json!({"spec": {"replicas": 2}});
    let req = Req::patch(&r1, "application/strategic-merge-patch+json", &smp);
    ask(s, log, "strategic merge PATCH of a Rollout", equal, req).await;
    ask(s, log, "text/plain PATCH of a Rollout", equal, Req::patch(&r1, "text/plain", &smp)).await;
    let req = Req::get(&r1).header("accept", META_LIST);
    ask(s, log, "metadata-only list form on a Rollout", crd_meta_list_get, req).await;
    let req = Req::get(rollouts()).header("accept", META);
    ask(s, log, "metadata-only form on the Rollout list", equal, req).await;
    ask(s, log, "Rollouts as text/html", equal, Req::get(rollouts()).header("accept", "text/html"))
        .await;
    ask(s, log, "missing Rollout", equal, Req::get(format!("{}/missing", rollouts()))).await;

    // Last, as it restarts the real kube-apiserver: a watch from a resourceVersion the server
    // no longer holds is one ERROR event with a 410 Expired Status, in a 200 stream.
    let old = s.send(&Req::get(configmaps(NS))).await.rv();
    s.send(&Req::patch(
        configmap("one"),
        "application/merge-patch+json",
        &json!({"data": {"k": "1f"}}),
    ))
    .await;
    s.forget_history().await;
    let req =
        Req::get(format!("{}?watch=1&resourceVersion={old}&timeoutSeconds=2", configmaps(NS)));
    let result = s.watch(&req, Duration::from_secs(6)).await;
    log.watch("watch from a forgotten resourceVersion", &req, &result);
    let message = result.events.first().and_then(|e| e["object"]["message"].as_str()).unwrap_or("");
    let names_it = message.starts_with(&format!("too old resource version: {old} ("));
    log.record(
        "the 410 names the resourceVersion asked for",
        req.describe(),
        equal,
        json!(names_it),
    );

    std::mem::take(&mut log.steps)
}

/// Placeholders for what differs between any two servers; see the module docs.
fn normalise(value: &Value, side: Side) -> Value {
    normalise_within(value, side, false)
}

/// `custom`: inside a custom resource or a list of them (their `generation` is compared).
fn normalise_within(value: &Value, side: Side, custom: bool) -> Value {
    match value {
        Value::Object(map) => {
            let mut out = serde_json::Map::new();
            let is_status = map.get("kind") == Some(&json!("Status"));
            let api_version = map.get("apiVersion").and_then(Value::as_str);
            let custom = custom || api_version.is_some_and(|v| v.starts_with(GROUP_ARGO));
            for (key, v) in map {
                let v = match (key.as_str(), v) {
                    ("metadata", Value::Object(meta)) => normalise_meta(meta, side, custom),
                    ("message", Value::String(text)) if is_status => json!(placeholders(text)),
                    ("uid", Value::String(text)) => json!(placeholders(text)),
                    ("serverAddress", Value::String(_)) => json!("<address>"),
                    _ => normalise_within(v, side, custom),
                };
                out.insert(key.clone(), v);
            }
            Value::Object(out)
        }
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| normalise_within(v, side, custom)).collect())
        }
        other => other.clone(),
    }
}

fn normalise_meta(meta: &serde_json::Map<String, Value>, side: Side, custom: bool) -> Value {
    let mut out = serde_json::Map::new();
    for (key, v) in meta {
        let not_reproduced = match key.as_str() {
            "managedFields" | "remainingItemCount" => true,
            "generation" => !custom,
            _ => false,
        };
        // A metadata-only view of a custom resource says nothing of its kind: its generation
        // is left out on both sides there.
        if not_reproduced && (side == Side::Real || key == "generation") {
            continue;
        }
        let v = match (key.as_str(), v.as_str()) {
            ("uid", Some(uid)) if is_uuid(uid) => json!("<uid>"),
            ("resourceVersion", Some(rv))
                if !rv.is_empty() && rv.bytes().all(|b| b.is_ascii_digit()) =>
            {
                json!("<rv>")
            }
            ("creationTimestamp", Some(t)) if is_timestamp(t) => json!("<timestamp>"),
            ("continue", Some(token)) if !token.is_empty() => decode_continue(token),
            ("name", Some(name)) => match meta.get("generateName").and_then(Value::as_str) {
                Some(prefix) => match name.strip_prefix(prefix) {
                    Some(suffix)
                        if suffix.len() == 5
                            && suffix.chars().all(|c| NAME_ALPHABET.contains(c)) =>
                    {
                        json!(format!("{prefix}<suffix>"))
                    }
                    _ => v.clone(),
                },
                None => v.clone(),
            },
            _ => normalise(v, side),
        };
        out.insert(key.clone(), v);
    }
    Value::Object(out)
}

/// A continue token as what it holds, its snapshot resourceVersion a placeholder.
fn decode_continue(token: &str) -> Value {
    let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok());
    match decoded {
        Some(mut value) => {
            if value["rv"].is_u64() {
                value["rv"] = json!("<rv>");
            }
            json!({"decoded continue token": value})
        }
        None => json!({"undecodable continue token": token}),
    }
}

fn is_uuid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups.iter().all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn is_timestamp(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 20
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

/// A message with its uids as `<uid>` and its numbers as `<n>`.
fn placeholders(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while !rest.is_empty() {
        if rest.len() >= 36 && rest.is_char_boundary(36) && is_uuid(&rest[..36]) {
            out.push_str("<uid>");
            rest = &rest[36..];
            continue;
        }
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 {
            out.push_str("<n>");
            rest = &rest[digits..];
            continue;
        }
        let mut chars = rest.chars();
        if let Some(c) = chars.next() {
            out.push(c);
        }
        rest = chars.as_str();
    }
    out
}

/// The differences between the two runs of the script, each with both answers.
fn differences(fake: &[Step], real: &[Step]) -> Vec<String> {
    let fake_names: Vec<&str> = fake.iter().map(|s| s.name.as_str()).collect();
    let real_names: Vec<&str> = real.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(fake_names, real_names, "both servers ran the same script");
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
    fake.iter()
        .zip(real)
        .enumerate()
        .filter_map(|(i, (f, r))| {
            (f.compare)(&f.observed, &r.observed).err().map(|why| {
                format!(
                    "step {} `{}`: {why}\n  fake: {}\n  real: {}\n--- fake answered:\n{}\n--- real answered:\n{}\n",
                    i + 1,
                    f.name,
                    f.request,
                    r.request,
                    pretty(&f.observed),
                    pretty(&r.observed)
                )
            })
        })
        .collect()
}

/// The real server with the script's namespaces and a cluster-admin ServiceAccount's token.
async fn real_server() -> Server {
    let cp =
        tokio::task::spawn_blocking(|| ControlPlane::start(&[])).await.expect("a control plane");
    for ns in [NS, OTHER] {
        cp.namespace(ns, false);
    }
    cp.kubectl_ok(&["create", "serviceaccount", "differential", "-n", NS]);
    cp.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        "differential",
        "--clusterrole=cluster-admin",
        &format!("--serviceaccount={NS}:differential"),
    ]);
    let token = cp.kubectl_ok(&["create", "token", "differential", "-n", NS, "--duration", "1h"]);
    let tls = tls_connector(&cp.dir.join("pki/ca.crt"), None);
    let addr = cp.server.trim_start_matches("https://").to_owned();
    Server {
        backend: Backend::Real { cp: Arc::new(cp), tls, addr },
        token: token.trim().to_owned(),
    }
}

#[test]
fn the_fake_api_server_answers_as_the_real_one_where_it_claims_to() {
    run(async {
        install_crypto_provider();
        let started = Instant::now();
        let fake = Server {
            backend: Backend::Fake(FakeApiServer::start().await),
            token: "differential".into(),
        };
        let real = real_server().await;
        let ready = started.elapsed();
        let (fake_steps, real_steps) = tokio::join!(script(&fake), script(&real));
        eprintln!(
            "differential: {} steps; control plane ready in {ready:?}, both scripts done {:?} later",
            fake_steps.len(),
            started.elapsed() - ready
        );
        if let Backend::Real { cp, .. } = &real.backend {
            cp.stop();
        }
        if std::env::var_os("DIFFERENTIAL_VERBOSE").is_some() {
            for (i, (f, r)) in fake_steps.iter().zip(&real_steps).enumerate() {
                eprintln!(
                    "step {} `{}`: {}\n  fake: {}\n  real: {}",
                    i + 1,
                    f.name,
                    r.request,
                    f.observed,
                    r.observed
                );
            }
        }
        let differences = differences(&fake_steps, &real_steps);
        assert!(
            differences.is_empty(),
            "the fake API server answered {} of {} steps differently from kube-apiserver:\n\n{}",
            differences.len(),
            fake_steps.len(),
            differences.join("\n")
        );
    });
}
