//! A fake Kubernetes API server for tests and benchmarks. It serves objects
//! the way the real one does: GET, LIST (with label selectors and
//! metadata-only answers), WATCH (resourceVersion, bookmarks, 410 Gone),
//! POST, PUT and merge PATCH with resourceVersion conflicts, and `Status`
//! error bodies. Tests change objects, inject latency, error codes and
//! dropped connections per path, interleave concurrent writes, and count
//! requests. Plain HTTP on loopback.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use http_body_util::{BodyExt as _, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::broadcast;

type Body = BoxBody<Bytes, std::io::Error>;

#[derive(Clone, Debug)]
pub enum Fault {
    /// Answer normally after this long.
    Delay(Duration),
    /// Answer with this status and a `Status` body.
    Status(u16),
    /// Close the connection without an answer.
    Drop,
}

/// Where an object lives: `/api/v1` or `/apis/<group>/<version>`, the
/// resource (plural), the namespace for namespaced resources, and the name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Key {
    prefix: String,
    plural: String,
    namespace: Option<String>,
    name: String,
}

impl Key {
    fn path(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{}/namespaces/{ns}/{}/{}", self.prefix, self.plural, self.name),
            None => format!("{}/{}/{}", self.prefix, self.plural, self.name),
        }
    }
}

/// A request path split into its parts; `name` is empty for collections.
#[derive(Debug)]
struct Target {
    prefix: String,
    plural: String,
    namespace: Option<String>,
    name: Option<String>,
}

fn parse_path(path: &str) -> Option<Target> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (prefix, rest) = match parts.as_slice() {
        ["api", version, rest @ ..] => (format!("/api/{version}"), rest),
        ["apis", group, version, rest @ ..] => (format!("/apis/{group}/{version}"), rest),
        _ => return None,
    };
    // `namespaces/<ns>/<plural>[/<name>]` is namespaced; `namespaces[/<name>]` is the Namespace itself.
    let (namespace, plural, name) = match rest {
        ["namespaces", ns, plural] => (Some(ns.to_string()), plural.to_string(), None),
        ["namespaces", ns, plural, name] => {
            (Some(ns.to_string()), plural.to_string(), Some(name.to_string()))
        }
        [plural] => (None, plural.to_string(), None),
        [plural, name] => (None, plural.to_string(), Some(name.to_string())),
        _ => return None,
    };
    Some(Target { prefix, plural, namespace, name })
}

#[derive(Clone, Debug)]
struct WatchEvent {
    kind: &'static str,
    key: Key,
    object: Value,
}

#[derive(Default)]
struct State {
    objects: BTreeMap<Key, Value>,
    faults: HashMap<String, Fault>,
    counts: HashMap<String, usize>,
    /// Method + path counts, e.g. "PATCH /apis/apps/v1/namespaces/ns/deployments/web".
    calls: HashMap<String, usize>,
    /// Merge patches applied just before the next PATCH of a path (a concurrent writer).
    interleaved: HashMap<String, Value>,
    resource_version: u64,
    /// Every change (the object only for deletions; others replay the current
    /// object, as a compacted watch cache would), so a watch from an older
    /// resourceVersion misses nothing.
    history: Vec<(u64, &'static str, Key, Option<Value>)>,
}

#[derive(Clone)]
pub struct FakeApiServer {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    events: broadcast::Sender<WatchEvent>,
    /// Plurals whose open watches must end with 410 Gone.
    gone: broadcast::Sender<String>,
    in_flight: Arc<AtomicUsize>,
    most_in_flight: Arc<AtomicUsize>,
}

impl FakeApiServer {
    pub async fn start() -> FakeApiServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind fake API server");
        let server = FakeApiServer {
            addr: listener.local_addr().expect("addr"),
            state: Arc::default(),
            events: broadcast::channel(65_536).0,
            gone: broadcast::channel(64).0,
            in_flight: Arc::default(),
            most_in_flight: Arc::default(),
        };
        let handle = server.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { continue };
                let handle = handle.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let handle = handle.clone();
                        async move { handle.answer(request).await }
                    });
                    let builder =
                        hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    let _ = builder.serve_connection(TokioIo::new(tcp), service).await;
                });
            }
        });
        server
    }

    /// A kubeconfig for this server, written into `dir`.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://{}\n\
             users:\n- name: fake\n  user:\n    token: fake-token\ncontexts:\n- name: fake\n  context:\n    \
             cluster: fake\n    user: fake\ncurrent-context: fake\n",
            self.addr
        );
        std::fs::write(&path, text).expect("write kubeconfig");
        path
    }

    pub fn put_config_map(&self, namespace: &str, name: &str, data: &[(&str, &str)]) {
        let data: serde_json::Map<String, Value> =
            data.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
        self.put_body(
            &Self::config_map_path(namespace, name),
            "v1",
            "ConfigMap",
            json!({"data": data}),
        );
    }

    pub fn put_secret(&self, namespace: &str, name: &str, data: &[(&str, &str)]) {
        let b64 = base64::engine::general_purpose::STANDARD;
        let data: serde_json::Map<String, Value> =
            data.iter().map(|(k, v)| (k.to_string(), json!(b64.encode(v)))).collect();
        self.put_body(
            &Self::secret_path(namespace, name),
            "v1",
            "Secret",
            json!({"type": "Opaque", "data": data}),
        );
    }

    pub fn put_secret_bytes(&self, namespace: &str, name: &str, key: &str, value: &[u8]) {
        let b64 = base64::engine::general_purpose::STANDARD;
        let body = json!({"type": "Opaque", "data": {key: b64.encode(value)}});
        self.put_body(&Self::secret_path(namespace, name), "v1", "Secret", body);
    }

    /// A Secret whose one key holds `encoded` (already base64): cheap for many large Secrets.
    pub fn put_secret_encoded(&self, namespace: &str, name: &str, key: &str, encoded: &str) {
        let body = json!({"type": "Opaque", "data": {key: encoded}});
        self.put_body(&Self::secret_path(namespace, name), "v1", "Secret", body);
    }

    /// A Namespace with these labels.
    pub fn put_namespace(&self, name: &str, labels: &[(&str, &str)]) {
        let labels: serde_json::Map<String, Value> =
            labels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
        let mut labels = labels;
        labels.insert("kubernetes.io/metadata.name".into(), json!(name));
        self.put(
            &format!("/api/v1/namespaces/{name}"),
            json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": labels}}),
        );
    }

    fn put_body(&self, path: &str, api_version: &str, kind: &str, body: Value) {
        let mut object = json!({"apiVersion": api_version, "kind": kind});
        if let (Some(object), Some(body)) = (object.as_object_mut(), body.as_object()) {
            object.extend(body.clone());
        }
        // Keep labels and annotations of an existing object unless the body sets them.
        if let Some(old) = self.object(path) {
            object["metadata"] = old["metadata"].clone();
        }
        self.put(path, object);
    }

    /// Stores `object` at `path` (creating or replacing it) and tells watchers.
    pub fn put(&self, path: &str, mut object: Value) {
        let target = parse_path(path).expect("an object path");
        let key = Key {
            prefix: target.prefix,
            plural: target.plural,
            namespace: target.namespace,
            name: target.name.expect("a name"),
        };
        let mut state = self.state.lock().expect("state");
        let existed = state.objects.contains_key(&key);
        state.resource_version += 1;
        let rv = state.resource_version;
        stamp(&mut object, &key, rv);
        state.objects.insert(key.clone(), object.clone());
        let _ = self.events.send(WatchEvent {
            kind: if existed { "MODIFIED" } else { "ADDED" },
            key,
            object,
        });
    }

    /// Changes only the labels of an object (a metadata-only change).
    pub fn set_labels(&self, path: &str, labels: Value) {
        let mut object = self.object(path).expect("object exists");
        object["metadata"]["labels"] = labels;
        self.put(path, object);
    }

    pub fn delete(&self, plural: &str, namespace: &str, name: &str) {
        let prefix = if matches!(plural, "configmaps" | "secrets" | "events") {
            "/api/v1"
        } else {
            "/apis/apps/v1"
        };
        self.delete_path(&format!("{prefix}/namespaces/{namespace}/{plural}/{name}"));
    }

    pub fn delete_path(&self, path: &str) {
        let Some(target) = parse_path(path) else { return };
        let key = Key {
            prefix: target.prefix,
            plural: target.plural,
            namespace: target.namespace,
            name: target.name.unwrap_or_default(),
        };
        let mut state = self.state.lock().expect("state");
        if let Some(mut object) = state.objects.remove(&key) {
            state.resource_version += 1;
            let rv = state.resource_version;
            stamp(&mut object, &key, rv);
            state.history.push((rv, "DELETED", key.clone(), Some(object.clone())));
            let _ = self.events.send(WatchEvent { kind: "DELETED", key, object });
        }
    }

    /// Sets (or clears) the fault for requests to `path`.
    pub fn fault(&self, path: &str, fault: Option<Fault>) {
        let mut state = self.state.lock().expect("state");
        match fault {
            Some(fault) => state.faults.insert(path.to_owned(), fault),
            None => state.faults.remove(path),
        };
    }

    /// Ends every open watch of `plural` with a 410 Gone, as after etcd compaction.
    pub fn expire_watches(&self, plural: &str) {
        let _ = self.gone.send(plural.to_owned());
    }

    /// Applies `merge_patch` to the object at `path` right before the next
    /// PATCH of it arrives: a concurrent writer, so that PATCH conflicts.
    pub fn interleave_write(&self, path: &str, merge_patch: Value) {
        self.state.lock().expect("state").interleaved.insert(path.to_owned(), merge_patch);
    }

    pub fn secret_path(namespace: &str, name: &str) -> String {
        format!("/api/v1/namespaces/{namespace}/secrets/{name}")
    }

    pub fn config_map_path(namespace: &str, name: &str) -> String {
        format!("/api/v1/namespaces/{namespace}/configmaps/{name}")
    }

    pub fn deployment_path(namespace: &str, name: &str) -> String {
        format!("/apis/apps/v1/namespaces/{namespace}/deployments/{name}")
    }

    /// Requests seen for `path` (any method, with or without a query).
    pub fn requests(&self, path: &str) -> usize {
        self.state.lock().expect("state").counts.get(path).copied().unwrap_or(0)
    }

    /// Requests seen for `method path`, e.g. `calls("PATCH", path)`.
    pub fn calls(&self, method: &str, path: &str) -> usize {
        self.state
            .lock()
            .expect("state")
            .calls
            .get(&format!("{method} {path}"))
            .copied()
            .unwrap_or(0)
    }

    pub fn total_requests(&self) -> usize {
        self.state.lock().expect("state").counts.values().sum()
    }

    pub fn most_in_flight(&self) -> usize {
        self.most_in_flight.load(Ordering::SeqCst)
    }

    /// The stored object at `path`, if any.
    pub fn object(&self, path: &str) -> Option<Value> {
        let target = parse_path(path)?;
        let key = Key {
            prefix: target.prefix,
            plural: target.plural,
            namespace: target.namespace,
            name: target.name?,
        };
        self.state.lock().expect("state").objects.get(&key).cloned()
    }

    /// Every stored object of a collection path (e.g. `/api/v1/namespaces/ns/events`).
    pub fn list(&self, collection: &str) -> Vec<Value> {
        let Some(target) = parse_path(collection) else { return Vec::new() };
        let state = self.state.lock().expect("state");
        state
            .objects
            .iter()
            .filter(|(k, _)| k.prefix == target.prefix && k.plural == target.plural)
            .filter(|(k, _)| target.namespace.is_none() || k.namespace == target.namespace)
            .map(|(_, v)| v.clone())
            .collect()
    }

    async fn answer(&self, request: Request<Incoming>) -> Result<Response<Body>, std::io::Error> {
        let path = request.uri().path().to_owned();
        let query: HashMap<String, String> = request
            .uri()
            .query()
            .unwrap_or("")
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .map(|(k, v)| (k.to_owned(), percent_decode(v)))
            .collect();
        let fault = {
            let mut state = self.state.lock().expect("state");
            *state.counts.entry(path.clone()).or_default() += 1;
            *state.calls.entry(format!("{} {path}", request.method())).or_default() += 1;
            state.faults.get(&path).cloned()
        };
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
        let _guard = Decrement(self.in_flight.clone());
        match fault {
            Some(Fault::Delay(delay)) => tokio::time::sleep(delay).await,
            Some(Fault::Status(code)) => return Ok(status(code, "injected failure")),
            // An error from the service makes hyper close the connection unanswered.
            Some(Fault::Drop) => return Err(std::io::Error::other("injected connection drop")),
            None => {}
        }
        if path == "/version" {
            return Ok(json_response(
                StatusCode::OK,
                &json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0"}),
            ));
        }
        let Some(target) = parse_path(&path) else { return Ok(status(404, "not found")) };
        let metadata_only = request
            .headers()
            .get("accept")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("as=PartialObjectMetadata"));
        let method = request.method().clone();
        Ok(match (method, &target.name) {
            (Method::GET, Some(_)) => self.get(&target, metadata_only),
            (Method::GET, None) if query.get("watch").is_some_and(|w| w == "true" || w == "1") => {
                self.watch(target, &query, metadata_only)
            }
            (Method::GET, None) => self.list_response(&target, &query, metadata_only),
            (Method::POST, None) => self.create(&target, request).await,
            (Method::PUT, Some(_)) => self.replace(&target, request).await,
            (Method::PATCH, Some(_)) => self.patch(&target, &path, request).await,
            _ => status(405, "method not allowed"),
        })
    }

    fn key(target: &Target, name: &str) -> Key {
        Key {
            prefix: target.prefix.clone(),
            plural: target.plural.clone(),
            namespace: target.namespace.clone(),
            name: name.to_owned(),
        }
    }

    fn get(&self, target: &Target, metadata_only: bool) -> Response<Body> {
        let key = Self::key(target, target.name.as_deref().unwrap_or_default());
        match self.state.lock().expect("state").objects.get(&key) {
            Some(object) if metadata_only => json_response(StatusCode::OK, &partial(object)),
            Some(object) => json_response(StatusCode::OK, object),
            None => status(404, "not found"),
        }
    }

    fn list_response(
        &self,
        target: &Target,
        query: &HashMap<String, String>,
        metadata_only: bool,
    ) -> Response<Body> {
        let state = self.state.lock().expect("state");
        let items: Vec<Value> = state
            .objects
            .iter()
            .filter(|(k, _)| k.prefix == target.prefix && k.plural == target.plural)
            .filter(|(k, _)| target.namespace.is_none() || k.namespace == target.namespace)
            .filter(|(_, v)| selects(query.get("labelSelector"), v))
            .map(|(_, o)| if metadata_only { partial(o) } else { o.clone() })
            .collect();
        let (api_version, kind) = if metadata_only {
            ("meta.k8s.io/v1".to_owned(), "PartialObjectMetadataList".to_owned())
        } else {
            (
                target.prefix.trim_start_matches("/api/").trim_start_matches("/apis/").to_owned(),
                "List".to_owned(),
            )
        };
        json_response(
            StatusCode::OK,
            &json!({"apiVersion": api_version, "kind": kind,
                "metadata": {"resourceVersion": state.resource_version.to_string()}, "items": items}),
        )
    }

    fn watch(
        &self,
        target: Target,
        query: &HashMap<String, String>,
        metadata_only: bool,
    ) -> Response<Body> {
        let selector = query.get("labelSelector").cloned();
        let since: u64 = query.get("resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0);
        let bookmarks = query.get("allowWatchBookmarks").is_some_and(|v| v == "true");
        let timeout = Duration::from_secs(
            query.get("timeoutSeconds").and_then(|v| v.parse().ok()).unwrap_or(290),
        );
        // Subscribe before reading the history, then skip what the history covered.
        let mut events = self.events.subscribe();
        let mut gone = self.gone.subscribe();
        let state = self.state.clone();
        let replay: Vec<WatchEvent> = {
            let state = self.state.lock().expect("state");
            state
                .history
                .iter()
                .filter(|(rv, _, key, _)| {
                    *rv > since && key.prefix == target.prefix && key.plural == target.plural
                })
                .filter_map(|(_, kind, key, deleted)| {
                    let object = deleted.clone().or_else(|| state.objects.get(key).cloned())?;
                    Some(WatchEvent { kind, key: key.clone(), object })
                })
                .collect()
        };
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(65_536);
        tokio::spawn(async move {
            let line = |v: Value| Bytes::from(format!("{v}\n"));
            let deadline = tokio::time::Instant::now() + timeout;
            let mut ticker = tokio::time::interval(Duration::from_millis(500));
            let mut sent_up_to = since;
            for event in replay {
                sent_up_to = sent_up_to.max(rv_of(&event.object));
                if let Some(out) = render(event, &target, selector.as_ref(), metadata_only, since) {
                    if tx.send(line(out)).await.is_err() {
                        return;
                    }
                }
            }
            loop {
                tokio::select! {
                    event = events.recv() => {
                        let Ok(event) = event else { break };
                        if rv_of(&event.object) <= sent_up_to {
                            continue;
                        }
                        if let Some(out) = render(event, &target, selector.as_ref(), metadata_only, since) {
                            if tx.send(line(out)).await.is_err() { break }
                        }
                    }
                    plural = gone.recv() => {
                        if plural.is_ok_and(|p| p == target.plural) {
                            let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                "message": "too old resource version", "reason": "Expired", "code": 410});
                            let _ = tx.send(line(json!({"type": "ERROR", "object": status}))).await;
                            break;
                        }
                    }
                    _ = ticker.tick(), if bookmarks => {
                        let rv = state.lock().expect("state").resource_version;
                        let api_version = if metadata_only { "meta.k8s.io/v1" } else { "v1" };
                        let bookmark = json!({"type": "BOOKMARK", "object": {"apiVersion": api_version,
                            "kind": if metadata_only { "PartialObjectMetadata" } else { "Bookmark" },
                            "metadata": {"resourceVersion": rv.to_string()}}});
                        if tx.send(line(bookmark)).await.is_err() { break }
                    }
                    _ = tokio::time::sleep_until(deadline) => break,
                }
            }
        });
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|chunk| (Ok::<_, std::io::Error>(Frame::data(chunk)), rx))
        });
        let mut response = Response::new(StreamBody::new(stream).boxed());
        response.headers_mut().insert("content-type", "application/json".parse().expect("header"));
        response
    }

    async fn read_json(request: Request<Incoming>) -> Option<Value> {
        let body = request.into_body().collect().await.ok()?.to_bytes();
        serde_json::from_slice(&body).ok()
    }

    /// POST to a collection: 201 with the stored object, or 409 if it exists.
    async fn create(&self, target: &Target, request: Request<Incoming>) -> Response<Body> {
        let Some(mut object) = Self::read_json(request).await else {
            return status(400, "not JSON");
        };
        let name = match object["metadata"]["name"].as_str() {
            Some(name) => name.to_owned(),
            None => match object["metadata"]["generateName"].as_str() {
                Some(prefix) => {
                    format!("{prefix}{:05}", self.state.lock().expect("state").resource_version + 1)
                }
                None => return status(422, "metadata.name is required"),
            },
        };
        object["metadata"]["name"] = json!(name);
        let key = Self::key(target, &name);
        if self.state.lock().expect("state").objects.contains_key(&key) {
            return status(409, "already exists");
        }
        self.put(&key.path(), object);
        json_response(StatusCode::CREATED, &self.object(&key.path()).unwrap_or_default())
    }

    /// PUT: replace, guarded by `metadata.resourceVersion`.
    async fn replace(&self, target: &Target, request: Request<Incoming>) -> Response<Body> {
        let Some(object) = Self::read_json(request).await else { return status(400, "not JSON") };
        let key = Self::key(target, target.name.as_deref().unwrap_or_default());
        let current = self.state.lock().expect("state").objects.get(&key).cloned();
        let Some(current) = current else { return status(404, "not found") };
        let sent = object["metadata"]["resourceVersion"].as_str();
        if sent.is_some() && sent != current["metadata"]["resourceVersion"].as_str() {
            return status(
                409,
                "the object has been modified; please apply your changes to the latest version",
            );
        }
        self.put(&key.path(), object);
        json_response(StatusCode::OK, &self.object(&key.path()).unwrap_or_default())
    }

    /// Merge PATCH, guarded by `metadata.resourceVersion` when the patch sets it.
    async fn patch(
        &self,
        target: &Target,
        path: &str,
        request: Request<Incoming>,
    ) -> Response<Body> {
        let content_type = request
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        if !content_type.starts_with("application/merge-patch+json") {
            return status(415, "only merge patches are supported here");
        }
        let Some(patch) = Self::read_json(request).await else { return status(400, "not JSON") };
        let key = Self::key(target, target.name.as_deref().unwrap_or_default());
        let interleaved = self.state.lock().expect("state").interleaved.remove(path);
        if let (Some(concurrent), Some(mut current)) = (interleaved, self.object(path)) {
            json_patch::merge(&mut current, &concurrent);
            self.put(path, current);
        }
        let Some(mut current) = self.object(path) else { return status(404, "not found") };
        let sent = patch["metadata"]["resourceVersion"].as_str();
        if sent.is_some() && sent != current["metadata"]["resourceVersion"].as_str() {
            return status(
                409,
                "the object has been modified; please apply your changes to the latest version",
            );
        }
        json_patch::merge(&mut current, &patch);
        self.put(&key.path(), current);
        json_response(StatusCode::OK, &self.object(path).unwrap_or_default())
    }
}

/// Sets name, namespace, uid and resourceVersion as the API server would.
fn stamp(object: &mut Value, key: &Key, rv: u64) {
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    let meta = &mut object["metadata"];
    meta["name"] = json!(key.name);
    if let Some(ns) = &key.namespace {
        meta["namespace"] = json!(ns);
    }
    if meta["uid"].is_null() {
        meta["uid"] = json!(format!("uid-{}-{}", key.plural, key.name));
    }
    if meta["creationTimestamp"].is_null() {
        meta["creationTimestamp"] = json!("2026-11-22T00:00:00Z");
    }
    meta["resourceVersion"] = json!(rv.to_string());
}

/// A change as a watch event line for this watch, if it concerns it.
fn render(
    event: WatchEvent,
    target: &Target,
    selector: Option<&String>,
    metadata_only: bool,
    since: u64,
) -> Option<Value> {
    let k = &event.key;
    let relevant = k.prefix == target.prefix
        && k.plural == target.plural
        && (target.namespace.is_none() || k.namespace == target.namespace)
        && rv_of(&event.object) > since;
    if !relevant {
        return None;
    }
    let mut kind = event.kind;
    if selector.is_some() && !selects(selector, &event.object) {
        // An object that stops matching the selector leaves the watch as DELETED.
        if event.kind == "MODIFIED" { kind = "DELETED" } else { return None }
    }
    let object = if metadata_only { partial(&event.object) } else { event.object };
    Some(json!({"type": kind, "object": object}))
}

fn rv_of(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"].as_str().and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// The object as a PartialObjectMetadata (metadata-only requests).
fn partial(object: &Value) -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": object["metadata"]})
}

/// Equality selectors only (`a=b,c=d`), enough for the tests.
fn selects(selector: Option<&String>, object: &Value) -> bool {
    let Some(selector) = selector.filter(|s| !s.is_empty()) else { return true };
    selector.split(',').all(|term| match term.split_once('=') {
        Some((k, v)) => object["metadata"]["labels"][k].as_str() == Some(v.trim_start_matches('=')),
        None => !object["metadata"]["labels"][term].is_null(),
    })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

struct Decrement(Arc<AtomicUsize>);

impl Drop for Decrement {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn json_response(code: StatusCode, body: &Value) -> Response<Body> {
    let full = Full::new(Bytes::from(body.to_string())).map_err(|never| match never {});
    let mut response = Response::new(full.boxed());
    *response.status_mut() = code;
    response.headers_mut().insert("content-type", "application/json".parse().expect("header"));
    response
}

/// A `Status` body as the API server sends with errors.
fn status(code: u16, message: &str) -> Response<Body> {
    let reason = match code {
        404 => "NotFound",
        409 => "Conflict",
        403 => "Forbidden",
        401 => "Unauthorized",
        410 => "Expired",
        429 => "TooManyRequests",
        _ => "InternalError",
    };
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code});
    json_response(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), &body)
}
