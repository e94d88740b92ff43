//! Delivery driven for real against receivers on loopback: one that answers 200 (its body
//! and content type checked), one that answers 500 twice then 200, one that hangs, one that
//! answers garbage, one that closes the connection, one that is slow. The timeout and the
//! retry unit are shrunk so that the tests take about a second. A hanging target delays no
//! other, and handing a notice over never waits.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;
use tokio::time::Instant;

use super::config::Target;
use super::delivery::{DeliveryLimits, Notifier};
use super::format::Format;
use super::metrics::{NotificationMetrics, Outcome};
use super::notice::{Named, Notice, NoticeKind, NoticeWorkload};

const LIMITS: DeliveryLimits = DeliveryLimits {
    queue: 1_000,
    timeout: Duration::from_millis(250),
    retry_unit: Duration::from_millis(20),
    in_flight: 8,
};

#[derive(Clone, Copy)]
enum Behaviour {
    Ok,
    /// 500 for the first `n` requests, then 200.
    FailFirst(usize),
    Hang,
    Slow(Duration),
}

#[derive(Default)]
struct Seen {
    requests: Vec<(Option<String>, Bytes)>,
}

struct Receiver {
    addr: SocketAddr,
    seen: Arc<Mutex<Seen>>,
}

impl Receiver {
    fn requests(&self) -> usize {
        self.seen.lock().map(|s| s.requests.len()).unwrap_or(0)
    }
}

async fn receiver(behaviour: Behaviour) -> Receiver {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let handler = move |State(seen): State<Arc<Mutex<Seen>>>, headers: HeaderMap, body: Bytes| async move {
        let count = {
            let mut seen = seen.lock().expect("lock");
            let content_type =
                headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
            seen.requests.push((content_type, body));
            seen.requests.len()
        };
        match behaviour {
            Behaviour::Ok => StatusCode::OK,
            Behaviour::FailFirst(n) if count <= n => StatusCode::INTERNAL_SERVER_ERROR,
            Behaviour::FailFirst(_) => StatusCode::NO_CONTENT,
            Behaviour::Hang => std::future::pending().await,
            Behaviour::Slow(wait) => {
                tokio::time::sleep(wait).await;
                StatusCode::ACCEPTED
            }
        }
    };
    let app = Router::new().fallback(handler).with_state(seen.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Receiver { addr, seen }
}

/// A port that reads the request, then writes `answer` (nothing: it just closes).
async fn raw(answer: &'static [u8]) -> (SocketAddr, Arc<Mutex<usize>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepted = Arc::new(Mutex::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            *count.lock().expect("lock") += 1;
            let mut buffer = [0u8; 4096];
            let _ = stream.read(&mut buffer).await;
            let _ = stream.write_all(answer).await;
        }
    });
    (addr, accepted)
}

fn target(name: &str, addr: SocketAddr, format: Format) -> Target {
    Target {
        name: name.into(),
        url: format!("http://{addr}/hooks/secrettoken").parse().expect("uri"),
        format,
        events: NoticeKind::ALL.into_iter().collect(),
    }
}

fn rolled() -> Notice {
    let workload = NoticeWorkload {
        kind: "Deployment".into(),
        resource: "deployments".into(),
        namespace: "shop".into(),
        name: "web".into(),
    };
    let mut notice = Notice::new(NoticeKind::Rolled, workload, "changed secret/db".into());
    notice.sources =
        vec![Named { kind: "Secret".into(), namespace: Some("shop".into()), name: "db".into() }];
    notice.digest = Some("0123456789ab".into());
    notice
}

/// Waits until `target` has an `outcome` counted, at most `within`.
async fn counted(metrics: &NotificationMetrics, target: &str, outcome: Outcome, within: Duration) {
    let deadline = Instant::now() + within;
    while metrics.get(target, outcome) == 0 {
        assert!(Instant::now() < deadline, "{target}: no {outcome:?} within {within:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_receiver_that_answers_gets_the_cloud_event_once() {
    let ok = receiver(Behaviour::Ok).await;
    let metrics = NotificationMetrics::default();
    let notifier =
        Notifier::start(vec![target("bus", ok.addr, Format::CloudEvents)], LIMITS, metrics.clone())
            .expect("notifier");
    let notice = rolled();
    let id = notice.id.clone();
    notifier.notify(notice);
    counted(&metrics, "bus", Outcome::Sent, Duration::from_secs(2)).await;
    let seen = ok.seen.lock().expect("lock");
    assert_eq!(seen.requests.len(), 1);
    let (content_type, body) = &seen.requests[0];
    assert_eq!(content_type.as_deref(), Some("application/cloudevents+json"));
    let event: serde_json::Value = serde_json::from_slice(body).expect("JSON");
    assert_eq!(event["type"], "dev.configsum.rolled");
    assert_eq!(event["id"], id.as_str());
    assert_eq!(event["source"], "/namespaces/shop/deployments/web");
    assert_eq!(event["data"]["digest"], "0123456789ab");
    assert_eq!(metrics.get("bus", Outcome::Failed), 0);
}

#[tokio::test]
async fn a_receiver_that_fails_twice_gets_it_on_the_third_attempt() {
    let flaky = receiver(Behaviour::FailFirst(2)).await;
    let metrics = NotificationMetrics::default();
    let targets = vec![target("flaky", flaky.addr, Format::Slack)];
    let notifier = Notifier::start(targets, LIMITS, metrics.clone()).expect("notifier");
    let started = Instant::now();
    notifier.notify(rolled());
    counted(&metrics, "flaky", Outcome::Sent, Duration::from_secs(2)).await;
    assert_eq!(flaky.requests(), 3);
    // The two retries waited about 20 and 40 ms (each within a fifth).
    assert!(started.elapsed() >= Duration::from_millis(48), "{:?}", started.elapsed());
    let seen = flaky.seen.lock().expect("lock");
    let bodies: Vec<&Bytes> = seen.requests.iter().map(|(_, b)| b).collect();
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "every attempt posts the same body");
    let text: serde_json::Value = serde_json::from_slice(bodies[0]).expect("JSON");
    assert!(
        text["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("configsum: Deployment shop/web rolled"))
    );
}

#[tokio::test]
async fn a_hanging_receiver_times_out_each_attempt_and_delays_no_other() {
    let hang = receiver(Behaviour::Hang).await;
    let ok = receiver(Behaviour::Ok).await;
    let slow = receiver(Behaviour::Slow(Duration::from_millis(150))).await;
    let metrics = NotificationMetrics::default();
    let targets = vec![
        target("hang", hang.addr, Format::CloudEvents),
        target("slow", slow.addr, Format::Json),
        target("ok", ok.addr, Format::Teams),
    ];
    let notifier = Notifier::start(targets, LIMITS, metrics.clone()).expect("notifier");
    let started = Instant::now();
    for _ in 0..20 {
        notifier.notify(rolled());
    }
    // Handing over never waits, however the targets answer.
    assert!(started.elapsed() < Duration::from_millis(50), "{:?}", started.elapsed());
    let deadline = started + Duration::from_secs(2);
    while metrics.get("ok", Outcome::Sent) < 20 {
        assert!(Instant::now() < deadline, "ok got {}", metrics.get("ok", Outcome::Sent));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Well before the hanging target's first attempt even timed out.
    assert!(started.elapsed() < LIMITS.timeout, "{:?}", started.elapsed());
    assert_eq!(metrics.get("hang", Outcome::Sent) + metrics.get("hang", Outcome::Failed), 0);
    counted(&metrics, "slow", Outcome::Sent, Duration::from_secs(2)).await;
    // Four attempts of 250 ms and three waits of about 20, 40 and 80 ms.
    counted(&metrics, "hang", Outcome::Failed, Duration::from_secs(5)).await;
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(4 * 250 + 100), "{took:?}");
    assert!(hang.requests() >= 4, "{}", hang.requests());
    assert_eq!(metrics.get("hang", Outcome::Sent), 0);
}

#[tokio::test]
async fn garbage_and_closed_connections_fail_after_every_retry() {
    let (garbage, garbage_hits) = raw(b"this is no HTTP\r\n\r\n").await;
    let (closes, closes_hits) = raw(b"").await;
    let metrics = NotificationMetrics::default();
    let targets = vec![
        target("garbage", garbage, Format::GoogleChat),
        target("closes", closes, Format::CloudEvents),
    ];
    let notifier = Notifier::start(targets, LIMITS, metrics.clone()).expect("notifier");
    notifier.notify(rolled());
    counted(&metrics, "garbage", Outcome::Failed, Duration::from_secs(3)).await;
    counted(&metrics, "closes", Outcome::Failed, Duration::from_secs(3)).await;
    assert_eq!(*garbage_hits.lock().expect("lock"), 4, "the first attempt and three retries");
    assert_eq!(*closes_hits.lock().expect("lock"), 4);
    assert_eq!(metrics.get("garbage", Outcome::Sent), 0);
}

#[tokio::test]
async fn a_refused_port_fails_and_a_4xx_is_not_retried() {
    // A port bound then closed: connecting is refused.
    let closed = TcpListener::bind("127.0.0.1:0").await.expect("bind").local_addr().expect("addr");
    let metrics = NotificationMetrics::default();
    let notifier =
        Notifier::start(vec![target("gone", closed, Format::Json)], LIMITS, metrics.clone())
            .expect("notifier");
    notifier.notify(rolled());
    counted(&metrics, "gone", Outcome::Failed, Duration::from_secs(3)).await;

    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let hits = Arc::new(Mutex::new(0usize));
    let count = hits.clone();
    let app = Router::new().fallback(move || {
        let count = count.clone();
        async move {
            *count.lock().expect("lock") += 1;
            StatusCode::NOT_FOUND
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    let notifier =
        Notifier::start(vec![target("typo", addr, Format::Json)], LIMITS, metrics.clone())
            .expect("notifier");
    notifier.notify(rolled());
    counted(&metrics, "typo", Outcome::Failed, Duration::from_secs(3)).await;
    assert_eq!(*hits.lock().expect("lock"), 1);
}
