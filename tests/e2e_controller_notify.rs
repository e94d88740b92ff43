//! Notifications (`--notify-config`), the real binary against the fake API server and a
//! receiver on loopback: a Secret's change rolls a Deployment and the receiver gets exactly
//! one `dev.configsum.rolled` CloudEvent naming the Deployment, the Secret and the new
//! digest's prefix, with no Secret byte; a dry run posts `would-roll`; a standby posts
//! nothing; the events are valid against the CloudEvents 1.0 JSON schema (vendored in
//! tests/data/cloudevents); a mistake in the notify file stops the start, naming the target
//! and not its URL.

#[path = "support/cloudevents_schema.rs"]
mod cloudevents_schema;
#[path = "support/controller.rs"]
mod controller;
#[path = "support/digests.rs"]
mod digests;
#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;
#[path = "support/fixtures.rs"]
mod fixtures;
#[path = "support/server.rs"]
mod server;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use configsum::notify::format::{Format, body};
use configsum::notify::{Named, Notice, NoticeKind, NoticeWorkload};
use controller::{Cluster, Controller, NS, SECRET_KEY};
use serde_json::Value;
use tokio::net::TcpListener;

/// Planted in the Secret: it must never reach a receiver.
const PASSWORD: &str = "hunter2-SECRET-BYTES";

type Received = Arc<Mutex<Vec<(Option<String>, Value, String)>>>;

/// A receiver that answers 200 and keeps each request's content type, body and raw text.
async fn receiver() -> (SocketAddr, Received) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let received: Received = Arc::default();
    let handler = |State(received): State<Received>, headers: HeaderMap, body: Bytes| async move {
        let content_type =
            headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let text = String::from_utf8_lossy(&body).into_owned();
        let value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        received.lock().expect("lock").push((content_type, value, text));
        StatusCode::OK
    };
    let app = Router::new().fallback(handler).with_state(received.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, received)
}

/// A notify file in the cluster's directory naming one CloudEvents target at `addr`.
fn notify_file(cluster: &Cluster, file: &str, addr: SocketAddr, events: &str) -> String {
    let path = cluster.dir.path(file);
    let text = format!(
        "targets:\n- name: bus\n  url: http://{addr}/hooks/token-in-the-path\n  format: cloudevents\n  events: {events}\n"
    );
    std::fs::write(&path, text).expect("notify file");
    path.display().to_string()
}

fn received(receiver: &Received) -> Vec<(Option<String>, Value, String)> {
    receiver.lock().expect("lock").clone()
}

/// The first 12 hex digits of an annotation's digest (`hmac-sha256:<hex>`).
fn prefix(digest: &Value) -> String {
    let digest = digest.as_str().expect("a digest");
    digest.rsplit(':').next().unwrap_or_default()[..12].to_owned()
}

#[tokio::test]
async fn a_rolled_deployment_is_one_cloud_event_from_the_leader_and_none_from_the_standby() {
    let mut cluster = Cluster::new("ctl-notify").await;
    cluster.deployment(NS, "web", &["app"], &["db"], true);
    let (leader_addr, leader_got) = receiver().await;
    let (standby_addr, standby_got) = receiver().await;
    let leader_file = notify_file(&cluster, "leader.yaml", leader_addr, "[rolled, would-roll]");
    let standby_file = notify_file(&cluster, "standby.yaml", standby_addr, "[rolled, would-roll]");
    let a = Controller::start(&cluster.api, &cluster.dir, "a", &["--notify-config", &leader_file])
        .await;
    let b = Controller::start(&cluster.api, &cluster.dir, "b", &["--notify-config", &standby_file])
        .await;

    cluster.secret("db", &[("password", PASSWORD)]);
    cluster.wait_for("patched", Duration::from_secs(5), |c| c.patches(NS, "web") == 1).await;
    let sent = r#"configsum_controller_notifications_total{target="bus",outcome="sent"} 1"#;
    let metrics = a.metrics_with(&[sent], Duration::from_secs(5)).await;
    assert!(metrics.contains(sent), "{metrics}");
    a.idle().await;
    b.idle().await;
    // Time for a second post, if there were one.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let got = received(&leader_got);
    assert_eq!(got.len(), 1, "exactly one: {got:?}");
    let (content_type, event, text) = &got[0];
    assert_eq!(content_type.as_deref(), Some("application/cloudevents+json"));
    assert_eq!(event["type"], "dev.configsum.rolled");
    assert_eq!(event["specversion"], "1.0");
    assert_eq!(event["source"], format!("/namespaces/{NS}/deployments/web"));
    let data = &event["data"];
    assert_eq!(
        data["workload"],
        serde_json::json!({"kind": "Deployment", "namespace": NS, "name": "web"})
    );
    let sources = data["sources"].as_array().expect("sources");
    assert!(
        sources.contains(&serde_json::json!({"kind": "Secret", "namespace": NS, "name": "db"})),
        "{sources:?}"
    );
    let annotation = &cluster.annotations(NS, "web")[SECRET_KEY];
    assert_eq!(data["digest"], prefix(annotation), "the new digest's first 12 hex digits");
    assert!(!text.contains(PASSWORD) && !text.contains("hunter2"), "no Secret byte: {text}");
    let violations = cloudevents_schema::violations(&cloudevents_schema::schema(), event);
    assert!(violations.is_empty(), "{violations:?}\n{event}");

    assert!(received(&standby_got).is_empty(), "the standby posts nothing");
    let standby_metrics = b.metrics().await;
    assert!(
        standby_metrics
            .contains(r#"configsum_controller_notifications_total{target="bus",outcome="sent"} 0"#),
        "{standby_metrics}"
    );
    let logs = a.logged(|l| l.contains("notifying webhook targets")).await;
    assert!(!logs.contains("token-in-the-path"), "no URL in the log: {logs}");
    assert_eq!(a.stop().await, Some(0));
    assert_eq!(b.stop().await, Some(0));
}

#[tokio::test]
async fn a_dry_run_posts_would_roll() {
    let mut cluster = Cluster::new("ctl-notify-dry").await;
    cluster.deployment(NS, "web", &["app"], &["db"], true);
    let (addr, got) = receiver().await;
    let file = notify_file(&cluster, "notify.yaml", addr, "[would-roll, halted]");
    let controller = Controller::start(
        &cluster.api,
        &cluster.dir,
        "a",
        &["--dry-run", "--notify-config", &file],
    )
    .await;
    cluster.secret("db", &[("password", PASSWORD)]);
    let sent = r#"configsum_controller_notifications_total{target="bus",outcome="sent"} 1"#;
    let metrics = controller.metrics_with(&[sent], Duration::from_secs(5)).await;
    assert!(metrics.contains(sent), "{metrics}");
    let got = received(&got);
    assert_eq!(got.len(), 1, "{got:?}");
    let event = &got[0].1;
    assert_eq!(event["type"], "dev.configsum.would-roll");
    assert_eq!(event["data"]["workload"]["name"], "web");
    let digest = event["data"]["digest"].as_str().unwrap_or_default();
    assert!(digest.len() == 12 && digest.chars().all(|c| c.is_ascii_hexdigit()), "{event}");
    assert!(!got[0].2.contains(PASSWORD), "no Secret byte");
    assert_eq!(cluster.patches(NS, "web"), 0);
    assert_eq!(controller.stop().await, Some(0));
}

#[tokio::test]
async fn a_mistake_in_the_notify_file_stops_the_start_naming_the_target_not_its_url() {
    let cluster = Cluster::new("ctl-notify-bad").await;
    let path = cluster.dir.path("bad.yaml");
    std::fs::write(
        &path,
        "targets:\n- name: chat\n  url: https://hooks.example/services/T0/B0/token-xyz\n  format: discord\n",
    )
    .expect("file");
    let kubeconfig = cluster.api.kubeconfig_for(&cluster.dir.0, "a");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_configsum"))
        .args(["controller", "--allow-plain-secret-digests", "--metrics-listen", "127.0.0.1:0"])
        .arg("--notify-config")
        .arg(&path)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .await
        .expect("run the controller");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("target chat: unknown format `discord`"), "{stderr}");
    assert!(!stderr.contains("token-xyz"), "{stderr}");
}

#[test]
fn every_kind_of_cloud_event_is_valid_against_the_cloudevents_schema() {
    let schema = cloudevents_schema::schema();
    for kind in NoticeKind::ALL {
        let workload = NoticeWorkload {
            kind: "StatefulSet".into(),
            resource: "statefulsets".into(),
            namespace: "shop".into(),
            name: "db".into(),
        };
        let mut notice = Notice::new(kind, workload, "why, in words".into());
        notice.sources =
            vec![Named { kind: "Image".into(), namespace: None, name: "ghcr.io/a/b:1".into() }];
        let sent = body(Format::CloudEvents, &notice);
        let event: Value = serde_json::from_slice(&sent.bytes).expect("JSON");
        let violations = cloudevents_schema::violations(&schema, &event);
        assert!(violations.is_empty(), "{kind}: {violations:?}\n{event}");
    }
    // The checker can fail: what the schema requires, missing or of the wrong type.
    let broken = serde_json::json!({"specversion": "1.0", "id": "", "source": "a b", "time": "yesterday", "type": 3});
    let violations = cloudevents_schema::violations(&schema, &broken);
    for expected in [
        "$.id: shorter than 1",
        "$.source: not a uri-reference",
        "$.time: not a date-time",
        "$.type: a number",
    ] {
        assert!(violations.iter().any(|v| v.starts_with(expected)), "{expected}: {violations:?}");
    }
    let missing = cloudevents_schema::violations(&schema, &serde_json::json!({}));
    assert_eq!(missing.len(), 4, "{missing:?}");
}
