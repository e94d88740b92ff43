//! A fake Kubernetes API server for tests: serves ConfigMaps and Secrets the
//! way the real one does (objects and `Status` 404 bodies), lets the test
//! change them, injects latency, error codes and dropped connections per path,
//! and counts requests. Plain HTTP on loopback.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::net::TcpListener;

#[derive(Clone, Debug)]
pub enum Fault {
    /// Answer normally after this long.
    Delay(Duration),
    /// Answer with this status and a `Status` body.
    Status(u16),
    /// Close the connection without an answer.
    Drop,
}

#[derive(Default)]
struct State {
    objects: HashMap<String, Value>,
    faults: HashMap<String, Fault>,
    counts: HashMap<String, usize>,
    resource_version: u64,
}

#[derive(Clone)]
pub struct FakeApiServer {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    in_flight: Arc<AtomicUsize>,
    most_in_flight: Arc<AtomicUsize>,
}

fn path_of(plural: &str, namespace: &str, name: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/{plural}/{name}")
}

impl FakeApiServer {
    pub async fn start() -> FakeApiServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind fake API server");
        let server = FakeApiServer {
            addr: listener.local_addr().expect("addr"),
            state: Arc::default(),
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
        self.put("configmaps", "ConfigMap", namespace, name, json!({"data": data}));
    }

    pub fn put_secret(&self, namespace: &str, name: &str, data: &[(&str, &str)]) {
        let b64 = base64::engine::general_purpose::STANDARD;
        let data: serde_json::Map<String, Value> =
            data.iter().map(|(k, v)| (k.to_string(), json!(b64.encode(v)))).collect();
        self.put("secrets", "Secret", namespace, name, json!({"type": "Opaque", "data": data}));
    }

    /// Stores a large Secret without building it through JSON maps per call site.
    pub fn put_secret_bytes(&self, namespace: &str, name: &str, key: &str, value: &[u8]) {
        let b64 = base64::engine::general_purpose::STANDARD;
        self.put(
            "secrets",
            "Secret",
            namespace,
            name,
            json!({"type": "Opaque", "data": {key: b64.encode(value)}}),
        );
    }

    fn put(&self, plural: &str, kind: &str, namespace: &str, name: &str, body: Value) {
        let mut state = self.state.lock().expect("state");
        state.resource_version += 1;
        let mut object = json!({
            "apiVersion": "v1", "kind": kind,
            "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}"),
                "resourceVersion": state.resource_version.to_string(),
                "creationTimestamp": "2026-11-22T00:00:00Z",
                "managedFields": [{"manager": "kubectl", "operation": "Apply", "apiVersion": "v1",
                    "time": "2026-11-22T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {}}}]}
        });
        if let (Some(object), Some(body)) = (object.as_object_mut(), body.as_object()) {
            object.extend(body.clone());
        }
        state.objects.insert(path_of(plural, namespace, name), object);
    }

    pub fn delete(&self, plural: &str, namespace: &str, name: &str) {
        self.state.lock().expect("state").objects.remove(&path_of(plural, namespace, name));
    }

    /// Sets (or clears) the fault for requests to `path`.
    pub fn fault(&self, path: &str, fault: Option<Fault>) {
        let mut state = self.state.lock().expect("state");
        match fault {
            Some(fault) => state.faults.insert(path.to_owned(), fault),
            None => state.faults.remove(path),
        };
    }

    pub fn secret_path(namespace: &str, name: &str) -> String {
        path_of("secrets", namespace, name)
    }

    pub fn config_map_path(namespace: &str, name: &str) -> String {
        path_of("configmaps", namespace, name)
    }

    /// Requests seen for `path`.
    pub fn requests(&self, path: &str) -> usize {
        self.state.lock().expect("state").counts.get(path).copied().unwrap_or(0)
    }

    pub fn total_requests(&self) -> usize {
        self.state.lock().expect("state").counts.values().sum()
    }

    pub fn most_in_flight(&self) -> usize {
        self.most_in_flight.load(Ordering::SeqCst)
    }

    async fn answer(
        &self,
        request: Request<Incoming>,
    ) -> Result<Response<Full<Bytes>>, std::io::Error> {
        let path = request.uri().path().to_owned();
        let (fault, object) = {
            let mut state = self.state.lock().expect("state");
            *state.counts.entry(path.clone()).or_default() += 1;
            (state.faults.get(&path).cloned(), state.objects.get(&path).cloned())
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
        if request.method() == hyper::Method::POST {
            return Ok(self.create(&path, request).await);
        }
        if request.method() != hyper::Method::GET {
            return Ok(status(405, "method not allowed"));
        }
        if path == "/version" {
            return Ok(json_response(
                StatusCode::OK,
                &json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0"}),
            ));
        }
        Ok(match object {
            Some(object) => json_response(StatusCode::OK, &object),
            None => status(404, "not found"),
        })
    }
}

impl FakeApiServer {
    /// POST to a collection: 201 with the stored object, or 409 if it exists.
    async fn create(&self, collection: &str, request: Request<Incoming>) -> Response<Full<Bytes>> {
        use http_body_util::BodyExt as _;
        let Ok(body) = request.into_body().collect().await else {
            return status(400, "unreadable body");
        };
        let Ok(mut object) = serde_json::from_slice::<Value>(&body.to_bytes()) else {
            return status(400, "not JSON");
        };
        let Some(name) = object["metadata"]["name"].as_str().map(str::to_owned) else {
            return status(422, "metadata.name is required");
        };
        let path = format!("{collection}/{name}");
        let mut state = self.state.lock().expect("state");
        if state.objects.contains_key(&path) {
            return status(409, "already exists");
        }
        state.resource_version += 1;
        object["metadata"]["resourceVersion"] = json!(state.resource_version.to_string());
        object["metadata"]["uid"] = json!(format!("uid-{name}"));
        state.objects.insert(path, object.clone());
        json_response(StatusCode::CREATED, &object)
    }

    /// The stored object at `path`, if any.
    pub fn object(&self, path: &str) -> Option<Value> {
        self.state.lock().expect("state").objects.get(path).cloned()
    }
}

struct Decrement(Arc<AtomicUsize>);

impl Drop for Decrement {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn json_response(code: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = code;
    response.headers_mut().insert("content-type", "application/json".parse().expect("header"));
    response
}

/// A `Status` body as the API server sends with errors.
fn status(code: u16, message: &str) -> Response<Full<Bytes>> {
    let reason = match code {
        404 => "NotFound",
        409 => "AlreadyExists",
        403 => "Forbidden",
        401 => "Unauthorized",
        429 => "TooManyRequests",
        _ => "InternalError",
    };
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code});
    json_response(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), &body)
}
