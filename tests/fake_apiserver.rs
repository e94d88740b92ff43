//! The fake API server's fidelity: one test per real kube-apiserver
//! behaviour it reproduces (see the list in tests/support/fake_apiserver.rs),
//! over raw HTTP and through the real kube client and watcher.

#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;
#[path = "support/server.rs"]
mod server;

use std::time::{Duration, Instant};

use fake_apiserver::{FakeApiServer, Fault};
use futures_util::StreamExt as _;
use http_body_util::{BodyExt as _, Full};
use hyper::body::{Bytes, Incoming};
use serde_json::{Value, json};

const NS: &str = "team-a";
const TOKEN: &str = "tester";

/// An answer to one request.
struct Reply {
    status: u16,
    headers: hyper::HeaderMap,
    body: Vec<u8>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
}

/// Sends one request on a fresh connection; `token` `None` sends no Authorization.
async fn request(
    api: &FakeApiServer,
    method: &str,
    path: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let (response, _) = start_request(api, method, path, token, headers, body).await;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = tokio::time::timeout(Duration::from_secs(10), response.into_body().collect())
        .await
        .expect("a body within 10 s")
        .expect("body")
        .to_bytes()
        .to_vec();
    Reply { status, headers, body }
}

async fn start_request(
    api: &FakeApiServer,
    method: &str,
    path: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (hyper::Response<Incoming>, tokio::task::JoinHandle<()>) {
    let tcp = tokio::net::TcpStream::connect(api.addr).await.expect("connect");
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .expect("handshake");
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut builder = hyper::Request::builder().method(method).uri(path).header("host", "fake");
    if let Some(token) = token {
        builder = builder.header("authorization", format!("Bearer {token}"));
    }
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let request = builder.body(Full::new(Bytes::from(body.to_vec()))).expect("request");
    let response = tokio::time::timeout(Duration::from_secs(10), sender.send_request(request))
        .await
        .expect("an answer within 10 s")
        .expect("response");
    (response, driver)
}

async fn get(api: &FakeApiServer, path: &str) -> Reply {
    request(api, "GET", path, Some(TOKEN), &[], b"").await
}

async fn get_meta(api: &FakeApiServer, path: &str, list: bool) -> Reply {
    let accept = if list {
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
    } else {
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
    };
    request(api, "GET", path, Some(TOKEN), &[("accept", accept)], b"").await
}

async fn send_json(
    api: &FakeApiServer,
    method: &str,
    path: &str,
    content_type: &str,
    body: &Value,
) -> Reply {
    let body = serde_json::to_vec(body).expect("json");
    request(api, method, path, Some(TOKEN), &[("content-type", content_type)], &body).await
}

/// A watch stream read line by line.
struct Watch {
    status: u16,
    body: Incoming,
    buf: Vec<u8>,
    _driver: tokio::task::JoinHandle<()>,
}

impl Watch {
    async fn open(api: &FakeApiServer, path: &str, accept: Option<&str>) -> Watch {
        let headers: Vec<(&str, &str)> = accept.map(|a| ("accept", a)).into_iter().collect();
        let (response, driver) = start_request(api, "GET", path, Some(TOKEN), &headers, b"").await;
        let status = response.status().as_u16();
        Watch { status, body: response.into_body(), buf: Vec::new(), _driver: driver }
    }

    /// The next event, or `None` at the end of the stream; `Err` if nothing within `within`.
    async fn next_within(
        &mut self,
        within: Duration,
    ) -> Result<Option<Value>, tokio::time::error::Elapsed> {
        let (body, buf) = (&mut self.body, &mut self.buf);
        tokio::time::timeout(within, async move {
            loop {
                if let Some(end) = buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=end).collect();
                    return Some(serde_json::from_slice(&line).expect("a JSON watch event"));
                }
                match body.frame().await {
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            buf.extend_from_slice(&data);
                        }
                    }
                    _ => return None,
                }
            }
        })
        .await
    }

    async fn next(&mut self) -> Value {
        self.next_within(Duration::from_secs(5))
            .await
            .expect("a watch event within 5 s")
            .expect("the stream goes on")
    }

    /// True if no event (bookmarks aside) arrives for `quiet`.
    async fn stays_quiet(&mut self, quiet: Duration) -> bool {
        let until = Instant::now() + quiet;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.next_within(left).await {
                Err(_) => return true,
                Ok(Some(event)) if event["type"] == "BOOKMARK" => continue,
                Ok(_) => return false,
            }
        }
    }

    async fn ends_within(&mut self, within: Duration) -> bool {
        matches!(self.next_within(within).await, Ok(None))
    }
}

fn rv_of(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"].as_str().and_then(|v| v.parse().ok()).expect("an RV")
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["metadata"]["name"].as_str().expect("name").to_owned())
        .collect()
}

fn deployment(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {"selector": {"matchLabels": {"app": name}}, "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "app", "image": "app:1"}]}}}})
}

async fn started() -> FakeApiServer {
    let api = FakeApiServer::start().await;
    api.put_namespace(NS, &[("configsum.dev/enabled", "true")]);
    api
}

#[tokio::test]
async fn list_items_carry_no_kind_and_the_list_is_typed() {
    let api = started().await;
    api.put_secret(NS, "db", &[("password", "one")]);
    api.put(&FakeApiServer::deployment_path(NS, "web"), deployment("web", json!({})));

    let secrets = get(&api, &format!("/api/v1/namespaces/{NS}/secrets")).await.json();
    assert_eq!((&secrets["kind"], &secrets["apiVersion"]), (&json!("SecretList"), &json!("v1")));
    assert_eq!(secrets["metadata"]["resourceVersion"], api.resource_version().to_string());
    let item = &secrets["items"][0];
    assert!(item.get("kind").is_none() && item.get("apiVersion").is_none(), "{item}");
    assert_eq!(item["metadata"]["name"], "db");
    assert_eq!(item["type"], "Opaque", "the rest of the object is there");

    let deployments = get(&api, "/apis/apps/v1/deployments").await.json();
    assert_eq!(deployments["kind"], "DeploymentList");
    assert_eq!(deployments["apiVersion"], "apps/v1");
    assert!(deployments["items"][0].get("kind").is_none());
    let namespaces = get(&api, "/api/v1/namespaces").await.json();
    assert_eq!(namespaces["kind"], "NamespaceList");

    // One object, by contrast, says what it is.
    let one = get(&api, &FakeApiServer::deployment_path(NS, "web")).await.json();
    assert_eq!((&one["kind"], &one["apiVersion"]), (&json!("Deployment"), &json!("apps/v1")));
    // `watch=1` on an object's path is that GET, not a watch.
    let path = format!("{}?watch=1", FakeApiServer::deployment_path(NS, "web"));
    assert_eq!(get(&api, &path).await.json(), one);

    // What Go's omitempty drops is not stored: empty labels, empty data.
    let collection = format!("/api/v1/namespaces/{NS}/configmaps");
    let empty =
        json!({"metadata": {"name": "empty", "labels": {}, "annotations": null}, "data": {}});
    let created = send_json(&api, "POST", &collection, "application/json", &empty).await.json();
    assert!(
        created["metadata"].get("labels").is_none()
            && created["metadata"].get("annotations").is_none()
    );
    assert!(created.get("data").is_none(), "{created}");

    // A custom resource's list is unstructured: its last page has an empty continue.
    api.serve_rollouts();
    let rollouts = get(&api, &format!("/apis/argoproj.io/v1alpha1/namespaces/{NS}/rollouts")).await;
    assert_eq!(rollouts.json()["metadata"]["continue"], "");
}

#[tokio::test]
async fn lists_page_with_continue_from_the_first_pages_snapshot() {
    let api = started().await;
    for i in 0..25 {
        api.put_secret(NS, &format!("s{i:02}"), &[("v", "original")]);
    }
    let collection = format!("/api/v1/namespaces/{NS}/secrets");
    let first = get(&api, &format!("{collection}?limit=10")).await.json();
    let snapshot = first["metadata"]["resourceVersion"].clone();
    assert_eq!(names(&first).len(), 10);
    let token = first["metadata"]["continue"].as_str().expect("a continue token").to_owned();
    // The real format: the start key relative to the listed prefix.
    let decode = |token: &str| -> Value {
        let bytes =
            base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, token)
                .expect("base64");
        serde_json::from_slice(&bytes).expect("JSON")
    };
    assert_eq!(
        decode(&token),
        json!({"v": "meta.k8s.io/v1", "rv": rv_of(&first), "start": "/s09\u{0}"})
    );
    let across = get(&api, "/api/v1/secrets?limit=1").await.json();
    let across_token = across["metadata"]["continue"].as_str().expect("a token");
    assert_eq!(decode(across_token)["start"], format!("/{NS}/s00\u{0}"));

    // Writes between pages are not seen by the rest of this list.
    api.delete("secrets", NS, "s15");
    api.put_secret(NS, "s20", &[("v", "changed")]);
    api.put_secret(NS, "s30", &[("v", "new")]);
    let mut all = names(&first);
    let mut token = Some(token);
    let mut pages = 1;
    while let Some(t) = token.take() {
        let page = get(&api, &format!("{collection}?limit=10&continue={t}")).await.json();
        assert_eq!(page["metadata"]["resourceVersion"], snapshot, "one snapshot for every page");
        if let Some(item) =
            page["items"].as_array().expect("items").iter().find(|i| i["metadata"]["name"] == "s20")
        {
            assert_eq!(item["data"]["v"], "b3JpZ2luYWw=", "s20 as it was at the snapshot");
        }
        all.extend(names(&page));
        token = page["metadata"]["continue"].as_str().map(str::to_owned);
        pages += 1;
    }
    assert_eq!(pages, 3);
    let expected: Vec<String> = (0..25).map(|i| format!("s{i:02}")).collect();
    assert_eq!(all, expected, "s15 (deleted since) is listed, s30 (created since) is not");

    let fresh = get(&api, &collection).await.json();
    assert!(fresh["metadata"].get("continue").is_none());
    assert!(
        names(&fresh).contains(&"s30".to_owned()) && !names(&fresh).contains(&"s15".to_owned())
    );

    // A token whose snapshot has been compacted away is 410; a resourceVersion with it is 400.
    let next = get(&api, &format!("{collection}?limit=5")).await.json();
    let token = next["metadata"]["continue"].as_str().expect("token").to_owned();
    let with_rv =
        get(&api, &format!("{collection}?limit=5&continue={token}&resourceVersion=1")).await;
    assert_eq!(with_rv.status, 400);
    api.put_secret(NS, "s00", &[("v", "moved on")]);
    api.compact();
    let expired = get(&api, &format!("{collection}?limit=5&continue={token}")).await;
    assert_eq!(expired.status, 410);
    assert_eq!(expired.json()["reason"], "Expired");

    // Invalid list options are 422 ListOptions errors, with causes.
    let refused = get(&api, &format!("{collection}?resourceVersionMatch=Exact")).await;
    assert_eq!(
        refused.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: \
                resourceVersionMatch is forbidden unless resourceVersion is provided",
            "reason": "Invalid", "code": 422, "details": {"group": "meta.k8s.io",
                "kind": "ListOptions", "causes": [{"reason": "FieldValueForbidden",
                "message": "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
                "field": "resourceVersionMatch"}]}})
    );
    for query in ["resourceVersionMatch=Foo&resourceVersion=1", "sendInitialEvents=true"] {
        assert_eq!(get(&api, &format!("{collection}?{query}")).await.status, 422, "{query}");
    }
}

#[tokio::test]
async fn label_and_field_selectors_filter_lists() {
    let api = started().await;
    for (name, labels) in
        [("a", json!({"tier": "web", "team": "x"})), ("b", json!({"tier": "db"})), ("c", json!({}))]
    {
        api.put(&FakeApiServer::deployment_path(NS, name), deployment(name, labels));
    }
    let select = |selector: &'static str| {
        let api = api.clone();
        async move {
            let path = format!("/apis/apps/v1/deployments?{selector}");
            let reply = get(&api, &path).await;
            assert_eq!(reply.status, 200, "{selector}");
            names(&reply.json()).join(",")
        }
    };
    assert_eq!(select("labelSelector=tier%3Dweb").await, "a");
    assert_eq!(select("labelSelector=tier%3D%3Dweb").await, "a");
    assert_eq!(select("labelSelector=tier%21%3Dweb").await, "b,c", "!= matches the unlabelled");
    assert_eq!(select("labelSelector=tier").await, "a,b");
    assert_eq!(select("labelSelector=%21tier").await, "c");
    assert_eq!(select("labelSelector=tier+in+%28web%2Cdb%29").await, "a,b");
    assert_eq!(select("labelSelector=tier+notin+%28web%29").await, "b,c");
    assert_eq!(select("labelSelector=tier%3Dweb%2Cteam%3Dx").await, "a");
    assert_eq!(select("fieldSelector=metadata.name%3Db").await, "b");
    assert_eq!(select(&*format!("fieldSelector=metadata.namespace%21%3D{NS}").leak()).await, "");
    assert_eq!(
        get(&api, "/apis/apps/v1/deployments?labelSelector=a%3D%3D%3D%28").await.status,
        400
    );
    let unsupported = get(&api, "/apis/apps/v1/deployments?fieldSelector=spec.replicas%3D1").await;
    assert_eq!(unsupported.status, 400);
    assert_eq!(unsupported.json()["reason"], "BadRequest");
    assert_eq!(
        unsupported.json()["message"],
        "\"spec.replicas\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
    );
}

#[tokio::test]
async fn a_watch_replays_every_change_after_its_resource_version_in_order() {
    let api = started().await;
    api.put_secret(NS, "db", &[("password", "one")]);
    let list = get(&api, "/api/v1/secrets").await.json();
    let from = list["metadata"]["resourceVersion"].as_str().expect("rv").to_owned();

    // All of these happen before the watch starts: the race between LIST and WATCH.
    api.put_secret(NS, "db", &[("password", "two")]);
    api.put_secret(NS, "db", &[("password", "three")]);
    api.put_secret(NS, "cache", &[("url", "redis")]);
    api.delete("secrets", NS, "cache");

    let mut watch =
        Watch::open(&api, &format!("/api/v1/secrets?watch=1&resourceVersion={from}"), None).await;
    assert_eq!(watch.status, 200);
    let two = watch.next().await;
    assert_eq!(two["type"], "MODIFIED");
    assert_eq!(two["object"]["data"]["password"], "dHdv", "the object right after that change");
    let three = watch.next().await;
    assert_eq!(three["type"], "MODIFIED");
    assert_eq!(three["object"]["data"]["password"], "dGhyZWU=");
    assert!(rv_of(&three["object"]) > rv_of(&two["object"]));
    let added = watch.next().await;
    assert_eq!(
        (&added["type"], &added["object"]["metadata"]["name"]),
        (&json!("ADDED"), &json!("cache"))
    );
    let deleted = watch.next().await;
    assert_eq!(deleted["type"], "DELETED");
    assert_eq!(rv_of(&deleted["object"]), api.resource_version(), "deleted at its own RV");

    // And live changes follow.
    api.put_secret(NS, "db", &[("password", "four")]);
    let live = watch.next().await;
    assert_eq!(live["object"]["data"]["password"], "Zm91cg==");
}

#[tokio::test]
async fn watch_event_objects_carry_api_version_and_kind() {
    let api = started().await;
    let mut watch =
        Watch::open(&api, "/apis/apps/v1/namespaces/team-a/deployments?watch=true", None).await;
    api.put(&FakeApiServer::deployment_path(NS, "web"), deployment("web", json!({})));
    let event = watch.next().await;
    assert_eq!(event["type"], "ADDED");
    assert_eq!(event["object"]["kind"], "Deployment");
    assert_eq!(event["object"]["apiVersion"], "apps/v1");
}

#[tokio::test]
async fn a_watch_without_resource_version_starts_with_synthetic_added_events() {
    let api = started().await;
    api.put_config_map(NS, "a", &[("k", "1")]);
    api.put_config_map(NS, "b", &[("k", "2")]);
    for rv in ["", "&resourceVersion=0"] {
        let mut watch =
            Watch::open(&api, &format!("/api/v1/namespaces/{NS}/configmaps?watch=1{rv}"), None)
                .await;
        for name in ["a", "b"] {
            let event = watch.next().await;
            assert_eq!(
                (&event["type"], &event["object"]["metadata"]["name"]),
                (&json!("ADDED"), &json!(name))
            );
            assert_eq!(event["object"]["kind"], "ConfigMap");
        }
        assert!(watch.stays_quiet(Duration::from_millis(200)).await);
    }
}

#[tokio::test]
async fn a_watch_from_a_compacted_resource_version_is_one_410_error_event_in_a_200_stream() {
    let api = started().await;
    api.put_secret(NS, "db", &[("password", "one")]);
    let old = api.resource_version();
    api.put_secret(NS, "db", &[("password", "two")]);
    api.compact();
    let mut watch =
        Watch::open(&api, &format!("/api/v1/secrets?watch=1&resourceVersion={old}"), None).await;
    assert_eq!(watch.status, 200, "the real server has already sent 200 when it finds out");
    let error = watch.next().await;
    assert_eq!(error["type"], "ERROR");
    assert_eq!(error["object"]["kind"], "Status");
    assert_eq!(error["object"]["code"], 410);
    assert_eq!(error["object"]["reason"], "Expired");
    let message = error["object"]["message"].as_str().expect("message");
    assert!(message.starts_with(&format!("too old resource version: {old} (")), "{message}");
    assert!(watch.ends_within(Duration::from_secs(2)).await, "then the stream ends");

    // The bounded history does the same to anything older than its window.
    api.set_history_limit(3);
    let before = api.resource_version();
    for i in 0..5 {
        api.put_secret(NS, "db", &[("password", &format!("v{i}"))]);
    }
    let mut watch =
        Watch::open(&api, &format!("/api/v1/secrets?watch=1&resourceVersion={before}"), None).await;
    assert_eq!(watch.next().await["object"]["code"], 410);
    let recent = api.resource_version() - 2;
    let mut watch =
        Watch::open(&api, &format!("/api/v1/secrets?watch=1&resourceVersion={recent}"), None).await;
    assert_eq!(watch.next().await["type"], "MODIFIED", "inside the window");

    // expire_watches ends open watches the same way.
    let mut open = Watch::open(&api, "/api/v1/secrets?watch=1&resourceVersion=0", None).await;
    assert_eq!(open.next().await["type"], "ADDED");
    api.expire_watches("secrets");
    assert_eq!(open.next().await["object"]["code"], 410);
    assert!(open.ends_within(Duration::from_secs(2)).await);
}

#[tokio::test]
async fn bookmarks_have_the_watched_kind_and_only_a_resource_version() {
    let api = started().await;
    api.set_bookmark_interval(Duration::from_millis(100));
    api.put_secret(NS, "db", &[("password", "one")]);
    let from = api.resource_version();
    let mut watch = Watch::open(
        &api,
        &format!("/api/v1/secrets?watch=1&resourceVersion={from}&allowWatchBookmarks=true"),
        None,
    )
    .await;
    api.put_secret(NS, "db", &[("password", "two")]);
    assert_eq!(watch.next().await["type"], "MODIFIED");
    let bookmark = loop {
        let event = watch.next().await;
        if event["type"] == "BOOKMARK" {
            break event;
        }
    };
    assert_eq!(
        bookmark["object"],
        json!({"kind": "Secret", "apiVersion": "v1",
            "metadata": {"resourceVersion": api.resource_version().to_string()}})
    );
    // None without asking.
    let mut plain =
        Watch::open(&api, &format!("/api/v1/secrets?watch=1&resourceVersion={from}"), None).await;
    assert_eq!(plain.next().await["type"], "MODIFIED");
    assert!(plain.next_within(Duration::from_millis(400)).await.is_err(), "no bookmark");
}

#[tokio::test]
async fn streaming_lists_end_their_initial_events_with_an_annotated_bookmark() {
    let api = started().await;
    api.put_secret(NS, "db", &[("password", "one")]);
    let mut watch = Watch::open(
        &api,
        "/api/v1/secrets?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
        None,
    )
    .await;
    assert_eq!(watch.next().await["type"], "ADDED");
    let end = watch.next().await;
    assert_eq!(end["type"], "BOOKMARK");
    assert_eq!(end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
    let refused = get(&api, "/api/v1/secrets?watch=1&sendInitialEvents=true").await;
    assert_eq!(refused.status, 422, "needs resourceVersionMatch=NotOlderThan");
    assert_eq!(
        refused.json()["message"],
        "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: \
         sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
    );
    let refused = get(&api, "/api/v1/secrets?watch=1&resourceVersionMatch=NotOlderThan").await;
    assert_eq!(refused.status, 422, "resourceVersionMatch needs sendInitialEvents");

    // Without bookmarks: the initial events, and no bookmark.
    let mut quiet = Watch::open(
        &api,
        "/api/v1/secrets?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
        None,
    )
    .await;
    assert_eq!(quiet.next().await["type"], "ADDED");
    assert!(quiet.stays_quiet(Duration::from_millis(300)).await);

    // A watch from "" or "0" is a watch-list by default (the WatchList feature, on in 1.37).
    for rv in ["", "&resourceVersion=0"] {
        let mut watch = Watch::open(
            &api,
            &format!("/api/v1/secrets?watch=1&allowWatchBookmarks=true{rv}"),
            None,
        )
        .await;
        assert_eq!(watch.next().await["type"], "ADDED");
        let end = watch.next().await;
        assert_eq!(end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
    }
}

#[tokio::test]
async fn timeout_seconds_ends_the_stream_cleanly() {
    let api = started().await;
    let started = Instant::now();
    let mut watch = Watch::open(&api, "/api/v1/secrets?watch=1&timeoutSeconds=1", None).await;
    assert!(watch.ends_within(Duration::from_secs(3)).await);
    assert!(started.elapsed() >= Duration::from_millis(900), "{:?}", started.elapsed());
}

#[tokio::test]
async fn objects_entering_and_leaving_a_selector_arrive_as_added_and_deleted() {
    let api = started().await;
    let path = FakeApiServer::deployment_path(NS, "web");
    api.put(&path, deployment("web", json!({"tier": "db"})));
    let mut watch = Watch::open(
        &api,
        "/apis/apps/v1/deployments?watch=1&labelSelector=tier%3Dweb&resourceVersion=1",
        None,
    )
    .await;
    api.set_labels(&path, json!({"tier": "web"}));
    let entered = watch.next().await;
    assert_eq!(entered["type"], "ADDED");
    api.set_labels(&path, json!({"tier": "web", "extra": "x"}));
    assert_eq!(watch.next().await["type"], "MODIFIED");
    api.set_labels(&path, json!({"tier": "db"}));
    let left = watch.next().await;
    assert_eq!(left["type"], "DELETED");
    assert_eq!(left["object"]["metadata"]["labels"]["tier"], "web", "its last matching state");
    assert_eq!(rv_of(&left["object"]), api.resource_version(), "at the new resourceVersion");
    api.set_labels(&path, json!({"tier": "db", "other": "y"}));
    assert!(watch.stays_quiet(Duration::from_millis(200)).await, "not matching: nothing");
}

#[tokio::test]
async fn metadata_only_get_list_and_watch_have_the_partial_object_metadata_shapes() {
    let api = started().await;
    api.put_secret(NS, "db", &[("password", "hunter2")]);
    let path = FakeApiServer::secret_path(NS, "db");

    let one = get_meta(&api, &path, false).await.json();
    assert_eq!(
        (&one["kind"], &one["apiVersion"]),
        (&json!("PartialObjectMetadata"), &json!("meta.k8s.io/v1"))
    );
    assert_eq!(one["metadata"]["name"], "db");
    assert!(one.get("data").is_none(), "metadata only");

    let list = get_meta(&api, "/api/v1/secrets", true).await.json();
    assert_eq!(
        (&list["kind"], &list["apiVersion"]),
        (&json!("PartialObjectMetadataList"), &json!("meta.k8s.io/v1"))
    );
    assert_eq!(list["items"][0], json!({"metadata": one["metadata"]}), "items: metadata, no kind");

    let mut watch = Watch::open(
        &api,
        "/api/v1/secrets?watch=1&resourceVersion=0",
        Some("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"),
    )
    .await;
    let event = watch.next().await;
    assert_eq!(event["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(event["object"]["apiVersion"], "meta.k8s.io/v1");
    assert!(event["object"].get("data").is_none());

    // The list form for one object, or the single form for a list, is 406.
    assert_eq!(
        get_meta(&api, &path, true).await.json()["message"],
        "you requested PartialObjectMetadataList, but the requested object is not a list (*core.Secret)"
    );
    assert_eq!(
        get_meta(&api, "/apis/apps/v1/deployments", false).await.json()["message"],
        "you requested PartialObjectMetadata, but the requested object is a list (*apps.DeploymentList)"
    );
    let table = "application/json;as=Table;g=meta.k8s.io;v=v1";
    assert_eq!(
        request(&api, "GET", &path, Some(TOKEN), &[("accept", table)], b"").await.status,
        406
    );
    let fallback = format!("{table}, application/json");
    let reply = request(&api, "GET", &path, Some(TOKEN), &[("accept", &fallback)], b"").await;
    assert_eq!(reply.json()["kind"], "Secret", "falls back to plain JSON");
}

#[tokio::test]
async fn put_and_patch_with_a_stale_resource_version_are_409_conflict() {
    let api = started().await;
    let path = FakeApiServer::deployment_path(NS, "web");
    api.put(&path, deployment("web", json!({})));
    let stale = api.object(&path).expect("web");
    api.set_labels(&path, json!({"moved": "on"}));

    let put = send_json(&api, "PUT", &path, "application/json", &stale).await;
    assert_eq!(put.status, 409);
    assert_eq!(
        put.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Operation cannot be fulfilled on deployments.apps \"web\": the object has been modified; please apply your changes to the latest version and try again",
            "reason": "Conflict", "details": {"name": "web", "group": "apps", "kind": "deployments"},
            "code": 409})
    );
    let patch = json!({"metadata": {"resourceVersion": stale["metadata"]["resourceVersion"],
        "annotations": {"a": "b"}}});
    let reply = send_json(&api, "PATCH", &path, "application/merge-patch+json", &patch).await;
    assert_eq!((reply.status, reply.json()["reason"].clone()), (409, json!("Conflict")));
    let json_patch = json!([{"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}},
        {"op": "replace", "path": "/metadata/resourceVersion", "value": stale["metadata"]["resourceVersion"]}]);
    let reply = send_json(&api, "PATCH", &path, "application/json-patch+json", &json_patch).await;
    assert_eq!(reply.status, 409);

    // With the current resourceVersion, or none, they go through.
    let current = api.object(&path).expect("web");
    let patch = json!({"metadata": {"resourceVersion": current["metadata"]["resourceVersion"],
        "annotations": {"a": "b"}}});
    let reply = send_json(&api, "PATCH", &path, "application/merge-patch+json", &patch).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json()["metadata"]["annotations"]["a"], "b");
    let mut unconditional = api.object(&path).expect("web");
    unconditional["metadata"].as_object_mut().expect("meta").remove("resourceVersion");
    unconditional["spec"]["replicas"] = json!(3);
    let reply = send_json(&api, "PUT", &path, "application/json", &unconditional).await;
    assert_eq!(reply.status, 200);
}

#[tokio::test]
async fn a_write_that_changes_nothing_keeps_the_resource_version_and_sends_no_event() {
    let api = started().await;
    let path = FakeApiServer::secret_path(NS, "db");
    api.put_secret(NS, "db", &[("password", "one")]);
    let rv = api.resource_version();
    let mut watch =
        Watch::open(&api, &format!("/api/v1/secrets?watch=1&resourceVersion={rv}"), None).await;

    let current = api.object(&path).expect("db");
    let put = send_json(&api, "PUT", &path, "application/json", &current).await;
    assert_eq!((put.status, rv_of(&put.json())), (200, rv));
    let same = json!({"data": {"password": "b25l"}});
    let patch = send_json(&api, "PATCH", &path, "application/merge-patch+json", &same).await;
    assert_eq!((patch.status, rv_of(&patch.json())), (200, rv));
    api.put_secret(NS, "db", &[("password", "one")]);
    assert_eq!(api.resource_version(), rv, "the test helper too");
    assert!(watch.stays_quiet(Duration::from_millis(300)).await, "no event for a no-op");

    api.put_secret(NS, "db", &[("password", "two")]);
    assert_eq!(rv_of(&watch.next().await["object"]), rv + 1);
}

/// Built-in workloads keep a generation as the real server does: 1 at creation, +1 per spec
/// change (and, for a Deployment, per annotations change), never for labels or status, and a
/// client cannot set it; kinds without one get none.
#[tokio::test]
async fn built_in_workloads_count_their_spec_changes_in_metadata_generation() {
    let api = started().await;
    let deployments = format!("/apis/apps/v1/namespaces/{NS}/deployments");
    let path = format!("{deployments}/web");
    let mut body = deployment("web", json!({"app": "web"}));
    body["metadata"]["generation"] = json!(9);
    let created = send_json(&api, "POST", &deployments, "application/json", &body).await;
    assert_eq!((created.status, created.json()["metadata"]["generation"].clone()), (201, json!(1)));
    let generation = || api.object(&path).expect("web")["metadata"]["generation"].clone();
    let merge = "application/merge-patch+json";

    let steps = [
        ("a spec change", json!({"spec": {"replicas": 3}}), 2),
        ("labels only", json!({"metadata": {"labels": {"tier": "web"}}}), 2),
        ("status only", json!({"status": {"observedGeneration": 2, "replicas": 3}}), 2),
        ("a Deployment's annotations", json!({"metadata": {"annotations": {"a": "b"}}}), 3),
        ("a generation sent", json!({"metadata": {"generation": 40}}), 3),
        (
            "the pod template",
            json!({"spec": {"template": {"metadata": {"annotations": {"x": "1"}}}}}),
            4,
        ),
    ];
    for (what, patch, expected) in steps {
        let reply = send_json(&api, "PATCH", &path, merge, &patch).await;
        assert_eq!(reply.status, 200, "{what}");
        assert_eq!(generation(), json!(expected), "{what}");
    }
    let mut replaced = api.object(&path).expect("web");
    replaced["spec"]["replicas"] = json!(1);
    replaced["metadata"]["generation"] = json!(1);
    let reply = send_json(&api, "PUT", &path, "application/json", &replaced).await;
    assert_eq!((reply.status, generation()), (200, json!(5)), "a PUT's spec change");

    // A StatefulSet's annotations are metadata like its labels.
    let sets = format!("/apis/apps/v1/namespaces/{NS}/statefulsets");
    let mut db = deployment("db", json!({}));
    db["kind"] = json!("StatefulSet");
    let reply = send_json(&api, "POST", &sets, "application/json", &db).await;
    assert_eq!(reply.json()["metadata"]["generation"], 1);
    let db_path = format!("{sets}/db");
    let patch = json!({"metadata": {"annotations": {"a": "b"}}});
    let reply = send_json(&api, "PATCH", &db_path, merge, &patch).await;
    assert_eq!(reply.json()["metadata"]["generation"], 1, "a StatefulSet's annotations");
    let patch = json!({"spec": {"replicas": 2}});
    let reply = send_json(&api, "PATCH", &db_path, merge, &patch).await;
    assert_eq!(reply.json()["metadata"]["generation"], 2, "a StatefulSet's spec");

    // No generation on kinds without a spec to count.
    api.put_secret(NS, "db", &[("password", "one")]);
    api.put_config_map(NS, "app", &[("level", "info")]);
    for path in [FakeApiServer::secret_path(NS, "db"), FakeApiServer::config_map_path(NS, "app")] {
        let object = get(&api, &path).await.json();
        assert_eq!(object["metadata"].get("generation"), None, "{path}");
    }

    // A test staging history in process keeps the generation it gives.
    let mut staged = api.object(&path).expect("web");
    staged["metadata"]["generation"] = json!(7);
    api.put(&path, staged);
    assert_eq!(generation(), json!(7));
}

#[tokio::test]
async fn json_patch_and_strategic_merge_patch_apply() {
    let api = started().await;
    let path = FakeApiServer::deployment_path(NS, "web");
    api.put(&path, deployment("web", json!({})));
    let ops = json!([{"op": "add", "path": "/spec/replicas", "value": 2},
        {"op": "test", "path": "/metadata/name", "value": "web"}]);
    let reply = send_json(&api, "PATCH", &path, "application/json-patch+json", &ops).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json()["spec"]["replicas"], 2);
    let failing = json!([{"op": "test", "path": "/spec/replicas", "value": 9}]);
    let reply = send_json(&api, "PATCH", &path, "application/json-patch+json", &failing).await;
    assert_eq!((reply.status, reply.json()["reason"].clone()), (422, json!("Invalid")));
    assert_eq!(
        reply.json()["message"],
        "the server rejected our request due to an error in our request",
        "the real server says no more"
    );
    let not_a_patch =
        send_json(&api, "PATCH", &path, "application/json-patch+json", &json!({})).await;
    assert_eq!(not_a_patch.status, 400);

    let strategic = json!({"spec": {"replicas": 4}});
    let reply =
        send_json(&api, "PATCH", &path, "application/strategic-merge-patch+json", &strategic).await;
    assert_eq!(reply.json()["spec"]["replicas"], 4);
    // Custom resources take no strategic merge patch.
    api.serve_rollouts();
    let rollout = "/apis/argoproj.io/v1alpha1/namespaces/team-a/rollouts/web";
    api.put(rollout, json!({"spec": {"replicas": 1}}));
    let reply =
        send_json(&api, "PATCH", rollout, "application/strategic-merge-patch+json", &strategic)
            .await;
    assert_eq!(reply.status, 415);
    let reply = send_json(&api, "PATCH", rollout, "application/merge-patch+json", &strategic).await;
    assert_eq!(reply.json()["spec"]["replicas"], 4);
}

#[tokio::test]
async fn other_patch_types_are_415_unsupported_media_type() {
    let api = started().await;
    let path = FakeApiServer::secret_path(NS, "db");
    api.put_secret(NS, "db", &[("password", "one")]);
    for content_type in ["text/plain", "application/json"] {
        let reply = send_json(&api, "PATCH", &path, content_type, &json!({})).await;
        assert_eq!(reply.status, 415, "{content_type}");
        assert_eq!(
            reply.json(),
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "415: Unsupported Media Type", "reason": "UnsupportedMediaType",
                "details": {}, "code": 415}),
            "go-restful's answer for a type outside the route's Consumes"
        );
    }
    // Server-side apply is not reproduced.
    let apply = send_json(&api, "PATCH", &path, "application/apply-patch+yaml", &json!({})).await;
    assert_eq!(apply.status, 415);
    // A custom resource's patch handler lists what it takes.
    api.serve_rollouts();
    let rollout = "/apis/argoproj.io/v1alpha1/namespaces/team-a/rollouts/web";
    api.put(rollout, json!({"spec": {"replicas": 1}}));
    let reply = send_json(&api, "PATCH", rollout, "text/plain", &json!({})).await;
    assert_eq!(
        reply.json()["message"],
        "the body of the request was in an unknown format - accepted media types include: \
         application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    );
    // POST and PUT bodies must be JSON (or have no Content-Type).
    let collection = format!("/api/v1/namespaces/{NS}/secrets");
    let body = json!({"metadata": {"name": "other"}});
    let reply = send_json(&api, "POST", &collection, "application/yaml", &body).await;
    assert_eq!(
        (reply.status, reply.json()["reason"].clone()),
        (415, json!("UnsupportedMediaType"))
    );
    let bytes = serde_json::to_vec(&body).expect("json");
    let reply = request(&api, "POST", &collection, Some(TOKEN), &[], &bytes).await;
    assert_eq!(reply.status, 201, "no Content-Type: JSON");
}

#[tokio::test]
async fn errors_are_status_bodies_like_the_real_servers() {
    let api = started().await;
    let missing = get(&api, &FakeApiServer::secret_path(NS, "db")).await;
    assert_eq!(missing.status, 404);
    assert_eq!(
        missing.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "secrets \"db\" not found", "reason": "NotFound",
            "details": {"name": "db", "kind": "secrets"}, "code": 404})
    );
    let missing = get(&api, &FakeApiServer::deployment_path(NS, "web")).await.json();
    assert_eq!(missing["message"], "deployments.apps \"web\" not found");
    assert_eq!(missing["details"]["group"], "apps");

    let collection = format!("/api/v1/namespaces/{NS}/configmaps");
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app"}});
    assert_eq!(send_json(&api, "POST", &collection, "application/json", &body).await.status, 201);
    let again = send_json(&api, "POST", &collection, "application/json", &body).await.json();
    assert_eq!((&again["code"], &again["reason"]), (&json!(409), &json!("AlreadyExists")));
    assert_eq!(again["message"], "configmaps \"app\" already exists");

    let wrong_kind = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}});
    let reply = send_json(&api, "POST", &collection, "application/json", &wrong_kind).await;
    assert_eq!(reply.status, 400);
    let method = request(&api, "PUT", &collection, Some(TOKEN), &[], b"{}").await;
    assert_eq!((method.status, method.json()["reason"].clone()), (405, json!("MethodNotAllowed")));
    for (code, reason) in [(403, "Forbidden"), (429, "TooManyRequests"), (500, "InternalError")] {
        api.fault(&collection, Some(Fault::Status(code)));
        let reply = get(&api, &collection).await;
        let body = reply.json();
        assert_eq!(
            (reply.status, &body["kind"], &body["reason"]),
            (code, &json!("Status"), &json!(reason))
        );
        if code == 429 {
            assert_eq!(reply.headers.get("retry-after").and_then(|v| v.to_str().ok()), Some("1"));
        }
    }
}

#[tokio::test]
async fn posts_get_server_names_uids_and_resource_versions() {
    let api = started().await;
    let events = format!("/api/v1/namespaces/{NS}/events");
    let body = json!({"metadata": {"generateName": "web."}, "reason": "Test"});
    let created = send_json(&api, "POST", &events, "application/json", &body).await;
    assert_eq!(created.status, 201);
    let created = created.json();
    let name = created["metadata"]["name"].as_str().expect("name");
    assert!(name.starts_with("web.") && name.len() == "web.".len() + 5, "{name}");
    assert_eq!((&created["kind"], &created["apiVersion"]), (&json!("Event"), &json!("v1")));
    assert!(
        created["metadata"]["uid"].is_string()
            && created["metadata"]["creationTimestamp"].is_string()
    );
    let with_rv = json!({"metadata": {"name": "x", "resourceVersion": "5"}});
    let refused = send_json(&api, "POST", &events, "application/json", &with_rv).await;
    assert_eq!(
        refused.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "resourceVersion should not be set on objects to be created", "code": 500}),
        "the real server's reason-less 500"
    );
    let nameless = json!({"metadata": {}});
    let refused = send_json(&api, "POST", &events, "application/json", &nameless).await;
    assert_eq!(refused.status, 422);
    assert_eq!(
        refused.json()["message"],
        "Event \"\" is invalid: metadata.name: Required value: name or generateName is required"
    );
    assert_eq!(refused.json()["details"]["causes"][0]["field"], "metadata.name");

    // Delete preconditions: the UID first, then the resourceVersion; the Conflict names the kind.
    let object = format!("{events}/{name}");
    let both = json!({"preconditions": {"uid": "wrong", "resourceVersion": "1"}});
    let refused = send_json(&api, "DELETE", &object, "application/json", &both).await.json();
    assert_eq!(
        refused["message"],
        format!(
            "Operation cannot be fulfilled on Event \"{name}\": the UID in the precondition (wrong) \
             does not match the UID in record ({}). The object might have been deleted and then recreated",
            created["metadata"]["uid"].as_str().expect("uid")
        )
    );
    assert_eq!(refused["details"], json!({"name": name, "kind": "Event"}));
    let stale = json!({"preconditions": {"resourceVersion": "1"}});
    let refused = send_json(&api, "DELETE", &object, "application/json", &stale).await.json();
    assert!(
        refused["message"].as_str().is_some_and(|m| m.contains(
            "the ResourceVersion in the precondition (1) does not match the ResourceVersion in record"
        )),
        "{refused}"
    );
    let deleted =
        request(&api, "DELETE", &format!("{events}/{name}"), Some(TOKEN), &[], b"").await.json();
    assert_eq!((&deleted["kind"], &deleted["status"]), (&json!("Status"), &json!("Success")));
    assert!(api.list(&events).is_empty());
}

#[tokio::test]
async fn requests_without_a_bearer_token_are_anonymous_and_forbidden_but_for_the_version() {
    let api = started().await;
    let forbidden = |message: &str, details: Value| {
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": "Forbidden", "details": details, "code": 403})
    };
    let anonymous = "User \"system:anonymous\" cannot";
    for (method, path, message, details) in [
        (
            "GET",
            "/api/v1/secrets".to_owned(),
            format!(
                "secrets is forbidden: {anonymous} list resource \"secrets\" in API group \"\" at the cluster scope"
            ),
            json!({"kind": "secrets"}),
        ),
        (
            "GET",
            FakeApiServer::deployment_path(NS, "web"),
            format!(
                "deployments.apps \"web\" is forbidden: {anonymous} get resource \"deployments\" in API group \"apps\" in the namespace \"{NS}\""
            ),
            json!({"name": "web", "group": "apps", "kind": "deployments"}),
        ),
        (
            "GET",
            format!("/api/v1/namespaces/{NS}/configmaps?watch=1&fieldSelector=metadata.name%3Dapp"),
            format!(
                "configmaps \"app\" is forbidden: {anonymous} watch resource \"configmaps\" in API group \"\" in the namespace \"{NS}\""
            ),
            json!({"name": "app", "kind": "configmaps"}),
        ),
        (
            "DELETE",
            format!("/api/v1/namespaces/{NS}/configmaps"),
            format!(
                "configmaps is forbidden: {anonymous} deletecollection resource \"configmaps\" in API group \"\" in the namespace \"{NS}\""
            ),
            json!({"kind": "configmaps"}),
        ),
        (
            "GET",
            "/apis/apps/v1/namespaces/x/deployments/web/status".to_owned(),
            format!(
                "deployments.apps \"web\" is forbidden: {anonymous} get resource \"deployments/status\" in API group \"apps\" in the namespace \"x\""
            ),
            json!({"name": "web", "group": "apps", "kind": "deployments"}),
        ),
        ("GET", "/api".to_owned(), format!("forbidden: {anonymous} get path \"/api\""), json!({})),
        (
            "POST",
            "/version".to_owned(),
            format!("forbidden: {anonymous} post path \"/version\""),
            json!({}),
        ),
    ] {
        let reply = request(&api, method, &path, None, &[], b"").await;
        assert_eq!(reply.json(), forbidden(&message, details), "{method} {path}");
    }
    let version = request(&api, "GET", "/version", None, &[], b"").await;
    assert_eq!(version.status, 200, "system:public-info-viewer");
    // A scheme other than Bearer, or an empty token, is anonymous too.
    for header in ["Basic eDp5", "Bearer "] {
        let reply = request(&api, "GET", "/version", None, &[("authorization", header)], b"").await;
        assert_eq!(reply.status, 200, "{header}");
        let secrets =
            request(&api, "GET", "/api/v1/secrets", None, &[("authorization", header)], b"").await;
        assert_eq!(secrets.status, 403, "{header}");
    }
    assert_eq!(get(&api, "/api/v1/secrets").await.status, 200);

    let dir = server::TempDir::new("fake-kubeconfig");
    let default = std::fs::read_to_string(api.kubeconfig(&dir.0)).expect("kubeconfig");
    assert!(default.contains("token: fake-token"));
    let path = api.kubeconfig_for(&dir.0, "controller");
    assert_eq!(path.file_name().and_then(|n| n.to_str()), Some("kubeconfig-controller"));
    assert!(std::fs::read_to_string(path).expect("kubeconfig").contains("token: controller"));
}

#[tokio::test]
async fn faults_apply_per_token_and_method_and_to_a_collections_list_and_watch() {
    let api = started().await;
    let path = FakeApiServer::secret_path(NS, "db");
    api.put_secret(NS, "db", &[("password", "one")]);
    api.fault_for(Some("alice"), None, &path, Some(Fault::Status(503)));
    let as_user = |user: &'static str| {
        let (api, path) = (api.clone(), path.clone());
        async move { request(&api, "GET", &path, Some(user), &[], b"").await.status }
    };
    assert_eq!(as_user("alice").await, 503);
    assert_eq!(as_user("bob").await, 200);

    api.fault_for(None, Some("PATCH"), &path, Some(Fault::Status(500)));
    assert_eq!(as_user("bob").await, 200, "GET is not PATCH");
    let patch = send_json(&api, "PATCH", &path, "application/merge-patch+json", &json!({})).await;
    assert_eq!(patch.status, 500);
    api.fault_for(Some("alice"), Some("GET"), &path, Some(Fault::Status(403)));
    assert_eq!(as_user("alice").await, 403, "the most specific rule wins");
    api.fault_for(Some("alice"), Some("GET"), &path, None);
    assert_eq!(as_user("alice").await, 503, "cleared: the token rule again");

    let collection = format!("/api/v1/namespaces/{NS}/secrets");
    api.fault(&collection, Some(Fault::Status(429)));
    assert_eq!(get(&api, &collection).await.status, 429, "LIST");
    let watch = Watch::open(&api, &format!("{collection}?watch=1"), None).await;
    assert_eq!(watch.status, 429, "WATCH");
    api.fault(&collection, Some(Fault::Delay(Duration::from_millis(300))));
    let started = Instant::now();
    assert_eq!(get(&api, &collection).await.status, 200);
    assert!(started.elapsed() >= Duration::from_millis(300));

    api.clear_faults();
    assert_eq!(as_user("alice").await, 200);
    assert_eq!(get(&api, &collection).await.status, 200);
}

#[tokio::test]
async fn a_hanging_request_is_answered_never_until_the_client_gives_up() {
    let api = started().await;
    let path = FakeApiServer::secret_path(NS, "db");
    api.fault(&path, Some(Fault::Hang));
    let attempt = tokio::time::timeout(
        Duration::from_millis(500),
        request(&api, "GET", &path, Some(TOKEN), &[], b""),
    )
    .await;
    assert!(attempt.is_err(), "no answer");
    let logged = api.log().into_iter().find(|l| l.path == path).expect("logged");
    assert_eq!(logged.status, 0, "nothing was sent");
    api.fault(&path, None);
    assert_eq!(get(&api, &path).await.status, 404, "answered again");
}

#[tokio::test]
async fn discovery_serves_rollouts_only_once_the_crd_is_there() {
    let api = started().await;
    // An unserved group is Go's plain-text 404, not a Status.
    for path in [
        "/apis/argoproj.io/v1alpha1",
        "/apis/argoproj.io/v1alpha1/rollouts",
        "/apis/example.com/v1/widgets",
    ] {
        let reply = get(&api, path).await;
        assert_eq!(reply.status, 404, "{path}");
        assert_eq!(reply.body, b"404 page not found\n", "{path}");
        assert_eq!(
            reply.headers.get("content-type").and_then(|v| v.to_str().ok()),
            Some("text/plain; charset=utf-8")
        );
    }
    // An unserved resource of a served group is a Status.
    assert_eq!(get(&api, "/api/v1/widgets").await.json()["reason"], "NotFound");
    let groups = get(&api, "/apis").await.json();
    assert!(!groups.to_string().contains("argoproj.io"));
    let core = get(&api, "/api/v1").await.json();
    assert!(
        core["resources"].as_array().expect("resources").iter().any(|r| r["name"] == "secrets")
    );
    assert!(core.get("apiVersion").is_none(), "the core group's list has none");
    assert_eq!(get(&api, "/apis/apps/v1").await.json()["apiVersion"], "v1");

    api.serve_rollouts();
    let served = get(&api, "/apis/argoproj.io/v1alpha1").await;
    assert_eq!(served.status, 200);
    let list = served.json();
    assert_eq!(
        (&list["kind"], &list["groupVersion"]),
        (&json!("APIResourceList"), &json!("argoproj.io/v1alpha1"))
    );
    let rollouts = &list["resources"][0];
    assert_eq!(
        (&rollouts["name"], &rollouts["kind"], &rollouts["namespaced"]),
        (&json!("rollouts"), &json!("Rollout"), &json!(true))
    );
    let empty = get(&api, "/apis/argoproj.io/v1alpha1/rollouts").await.json();
    assert_eq!((&empty["kind"], &empty["items"]), (&json!("RolloutList"), &json!([])));
    assert_eq!(get(&api, "/version").await.json()["major"], "1");
    // Subresources are not served.
    api.put(&FakeApiServer::deployment_path(NS, "web"), deployment("web", json!({})));
    assert_eq!(
        get(&api, &format!("{}/status", FakeApiServer::deployment_path(NS, "web"))).await.status,
        404
    );
}

#[tokio::test]
async fn the_request_log_records_method_path_query_token_and_status() {
    let api = started().await;
    get(&api, "/api/v1/secrets?limit=500").await;
    request(&api, "GET", "/api/v1/secrets", None, &[], b"").await;
    let log = api.log();
    assert_eq!(log.len(), 2);
    assert_eq!((log[0].method.as_str(), log[0].path.as_str()), ("GET", "/api/v1/secrets"));
    assert_eq!(
        (log[0].query.as_str(), log[0].token.as_str(), log[0].status),
        ("limit=500", TOKEN, 200)
    );
    assert_eq!((log[1].token.as_str(), log[1].status), ("", 403));
    assert!(log[0].at <= log[1].at);
    let watch = Watch::open(&api, "/api/v1/secrets?watch=1", None).await;
    assert_eq!(watch.status, 200);
    assert_eq!(api.log().last().map(|l| l.status), Some(200), "streams: the status at the start");
    api.clear_log();
    assert!(api.log().is_empty());
    get(&api, "/version").await;
    assert_eq!(api.log().len(), 1);
    assert_eq!(api.calls("GET", "/api/v1/secrets"), 3, "the counters are kept");
}

#[tokio::test]
async fn a_future_resource_version_is_a_504_list_and_a_watch_that_waits_for_it() {
    let api = started().await;
    let future = api.resource_version() + 3;
    let started_at = Instant::now();
    let list = get(&api, &format!("/api/v1/secrets?resourceVersion={future}")).await;
    assert!(started_at.elapsed() >= Duration::from_millis(2900), "waits 3 s first");
    let body = list.json();
    assert_eq!((list.status, &body["reason"]), (504, &json!("Timeout")));
    assert_eq!(
        body["message"],
        format!("Timeout: Too large resource version: {future}, current: {}", future - 3)
    );
    assert_eq!(body["details"]["causes"][0]["reason"], "ResourceVersionTooLarge");

    // A watch from it gets no error: what comes after it, once the server is there.
    let mut watch =
        Watch::open(&api, &format!("/api/v1/secrets?watch=1&resourceVersion={future}"), None).await;
    assert_eq!(watch.status, 200);
    for password in ["one", "two", "three"] {
        api.put_secret(NS, "db", &[("password", password)]);
    }
    assert!(watch.stays_quiet(Duration::from_millis(300)).await, "nothing up to {future}");
    api.put_secret(NS, "db", &[("password", "four")]);
    let event = watch.next().await;
    assert_eq!((&event["type"], rv_of(&event["object"])), (&json!("MODIFIED"), future + 1));
}

#[tokio::test]
async fn twenty_thousand_secrets_list_in_pages_of_five_hundred_quickly() {
    let api = FakeApiServer::start().await;
    let filled = Instant::now();
    let value = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, [b'x'; 200]);
    for i in 0..20_000 {
        api.put_secret_encoded(&format!("ns-{:03}", i % 100), &format!("s-{i:06}"), "k", &value);
    }
    let filled = filled.elapsed();
    let listed = Instant::now();
    let (mut token, mut count, mut pages) = (String::new(), 0, 0);
    loop {
        let path = if token.is_empty() {
            "/api/v1/secrets?limit=500".to_owned()
        } else {
            format!("/api/v1/secrets?limit=500&continue={token}")
        };
        let page = get_meta(&api, &path, true).await.json();
        count += page["items"].as_array().expect("items").len();
        pages += 1;
        match page["metadata"]["continue"].as_str() {
            Some(next) => token = next.to_owned(),
            None => break,
        }
    }
    let listed = listed.elapsed();
    eprintln!(
        "20,000 Secrets (debug build; benches/controller.rs holds 100,000): stored in {filled:?}, listed in {pages} pages in {listed:?}"
    );
    // Speed is the benchmark's to show; this checks the paging.
    assert_eq!((count, pages), (20_000, 40));
}

async fn kube_client(api: &FakeApiServer, dir: &std::path::Path, user: &str) -> kube::Client {
    server::install_crypto_provider();
    let path = api.kubeconfig_for(dir, user);
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).expect("kubeconfig");
    let options = kube::config::KubeConfigOptions::default();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options).await.expect("config");
    kube::Client::try_from(config).expect("client")
}

#[tokio::test]
async fn the_kube_watcher_sees_list_items_without_types_and_watch_events_with_them() {
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
    use kube::runtime::watcher::{self, Event};

    let api = started().await;
    api.put(&FakeApiServer::deployment_path(NS, "existing"), deployment("existing", json!({})));
    let dir = server::TempDir::new("fake-kube");
    let client = kube_client(&api, &dir.0, "watcher").await;
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apps", "v1", "Deployment"),
        "deployments",
    );
    let deployments: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let stream = watcher::watcher(deployments, watcher::Config::default());
    tokio::pin!(stream);
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("a watcher event within 5 s")
            .expect("the stream goes on")
            .expect("no watcher error")
    };
    assert!(matches!(next().await, Event::Init));
    let Event::InitApply(listed) = next().await else { panic!("the pre-existing Deployment") };
    assert_eq!(listed.metadata.name.as_deref(), Some("existing"));
    assert!(listed.types.is_none(), "a list item has no apiVersion/kind: {:?}", listed.types);
    assert!(matches!(next().await, Event::InitDone));

    api.put(&FakeApiServer::deployment_path(NS, "created"), deployment("created", json!({})));
    let Event::Apply(watched) = next().await else { panic!("the created Deployment") };
    assert_eq!(watched.metadata.name.as_deref(), Some("created"));
    let types = watched.types.expect("a watch event's object has apiVersion/kind");
    assert_eq!((types.api_version.as_str(), types.kind.as_str()), ("apps/v1", "Deployment"));
    eprintln!(
        "kube watcher: list item types {:?}, watch event types {}/{}",
        listed.types, types.api_version, types.kind
    );

    // What it asked: a paged LIST, then a WATCH from the list's resourceVersion, as itself.
    let log: Vec<_> =
        api.log().into_iter().filter(|l| l.path == "/apis/apps/v1/deployments").collect();
    assert!(log.iter().all(|l| l.token == "watcher" && l.status == 200));
    assert!(log[0].query.contains("limit=500"), "{}", log[0].query);
    assert!(
        log[1].query.contains("watch=true") && log[1].query.contains("allowWatchBookmarks=true")
    );

    // The metadata-only watcher (as the controller runs it for Secrets) works too.
    api.put_secret(NS, "db", &[("password", "one")]);
    let secrets: Api<kube::api::PartialObjectMeta<k8s_openapi::api::core::v1::Secret>> =
        Api::all(client);
    let meta = watcher::watcher(secrets, watcher::Config::default());
    tokio::pin!(meta);
    let mut seen = Vec::new();
    while seen.len() < 2 {
        match tokio::time::timeout(Duration::from_secs(5), meta.next()).await {
            Ok(Some(Ok(Event::InitApply(o)))) => seen.push(o.metadata.name.unwrap_or_default()),
            Ok(Some(Ok(Event::InitDone))) => {
                api.put_secret(NS, "later", &[("k", "v")]);
            }
            Ok(Some(Ok(Event::Apply(o)))) => seen.push(o.metadata.name.unwrap_or_default()),
            Ok(Some(Ok(_))) => {}
            other => panic!("metadata watcher: {:?}", other.map(|o| o.map(|r| r.is_ok()))),
        }
    }
    assert_eq!(seen, ["db", "later"]);
}
