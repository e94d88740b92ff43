//! The delivery shell: each target has its own bounded queue and its own task, so that a
//! slow or hanging target delays no other, and the controller's loop only ever `try_send`s
//! (a full queue drops the notice and counts it). A task posts each notice with a timeout
//! per attempt and retries with backoff ([`super::retry`]); several notices are in flight
//! at once, so one being retried does not hold back the next.
//!
//! Logs name a target by its name and a failure by a bounded kind (a status code, a
//! timeout, a refused connection): hyper's and url's errors can carry the URL, which may
//! carry a token, so they are never printed.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{CONTENT_TYPE, HeaderValue, USER_AGENT};
use hyper::{Method, Request, StatusCode};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::sync::{Semaphore, mpsc};
use tracing::{debug, warn};

use super::config::{NotifyConfigError, Target};
use super::format::{Body, body};
use super::metrics::{NotificationMetrics, Outcome};
use super::notice::{Notice, NoticeKind};
use super::retry::{random_jitter, retry_delay};

/// The limits of delivery; [`DeliveryLimits::default`] is what the controller runs with,
/// tests shrink the times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeliveryLimits {
    /// Notices waiting per target; more are dropped.
    pub queue: usize,
    /// One attempt, from connecting to the response's status.
    pub timeout: Duration,
    /// The first retry's delay; each next one doubles it.
    pub retry_unit: Duration,
    /// Notices one target's task posts at once.
    pub in_flight: usize,
}

impl Default for DeliveryLimits {
    fn default() -> Self {
        DeliveryLimits {
            queue: 1_000,
            timeout: Duration::from_secs(5),
            retry_unit: Duration::from_secs(1),
            in_flight: 8,
        }
    }
}

type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// One target's end of the loop: what it wants and its queue.
struct Queue {
    name: String,
    events: BTreeSet<NoticeKind>,
    notices: mpsc::Sender<Arc<Notice>>,
    /// Dropping: warned once until a notice is queued again.
    dropping: AtomicBool,
}

/// Hands notices to the targets that want them, never waiting. Cheap to clone; with no
/// target ([`Notifier::default`]) it does nothing.
#[derive(Clone, Default)]
pub struct Notifier {
    queues: Arc<Vec<Queue>>,
    metrics: NotificationMetrics,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.queues.iter().map(|q| q.name.as_str()).collect();
        f.debug_struct("Notifier").field("targets", &names).finish()
    }
}

/// A target's receiving end, before its task starts.
type Pending = (Target, mpsc::Receiver<Arc<Notice>>);

impl Notifier {
    /// Starts one task per target (on the current tokio runtime).
    pub fn start(
        targets: Vec<Target>,
        limits: DeliveryLimits,
        metrics: NotificationMetrics,
    ) -> Result<Notifier, NotifyConfigError> {
        let (notifier, pending) = Notifier::queued(targets, limits, metrics.clone());
        if pending.is_empty() {
            return Ok(notifier);
        }
        let client = http_client(limits.timeout).map_err(NotifyConfigError::Tls)?;
        for (target, notices) in pending {
            tokio::spawn(drain(target, notices, client.clone(), limits, metrics.clone()));
        }
        Ok(notifier)
    }

    /// The queues, without their tasks.
    fn queued(
        targets: Vec<Target>,
        limits: DeliveryLimits,
        metrics: NotificationMetrics,
    ) -> (Notifier, Vec<Pending>) {
        let mut queues = Vec::new();
        let mut pending = Vec::new();
        for target in targets {
            let (tx, rx) = mpsc::channel(limits.queue.max(1));
            metrics.declare(&target.name);
            queues.push(Queue {
                name: target.name.clone(),
                events: target.events.clone(),
                notices: tx,
                dropping: AtomicBool::new(false),
            });
            pending.push((target, rx));
        }
        (Notifier { queues: Arc::new(queues), metrics }, pending)
    }

    /// Whether any target is configured.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// Queues `notice` for every target that wants its kind; a full queue drops it.
    pub fn notify(&self, notice: Notice) {
        let notice = Arc::new(notice);
        for queue in self.queues.iter().filter(|q| q.events.contains(&notice.kind)) {
            match queue.notices.try_send(notice.clone()) {
                Ok(()) => queue.dropping.store(false, Ordering::Relaxed),
                Err(_) => {
                    self.metrics.count(&queue.name, Outcome::Dropped);
                    if !queue.dropping.swap(true, Ordering::Relaxed) {
                        warn!(target = %queue.name, "notify target's queue is full: dropping notices");
                    }
                }
            }
        }
    }
}

/// hyper-util's pooled client over rustls with Mozilla's roots, for http and https URLs.
fn http_client(timeout: Duration) -> Result<HttpClient, String> {
    let tls = crate::registry::tls_config(&[])?;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(timeout));
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(2)
        .build(connector))
}

/// One target's task: takes notices while fewer than `in_flight` are being posted.
async fn drain(
    target: Target,
    mut notices: mpsc::Receiver<Arc<Notice>>,
    client: HttpClient,
    limits: DeliveryLimits,
    metrics: NotificationMetrics,
) {
    let target = Arc::new(target);
    let slots = Arc::new(Semaphore::new(limits.in_flight.max(1)));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        let Some(notice) = notices.recv().await else { return };
        let (target, client, metrics) = (target.clone(), client.clone(), metrics.clone());
        tokio::spawn(async move {
            let outcome = deliver(&client, &target, &notice, limits).await;
            metrics.count(&target.name, outcome);
            drop(slot);
        });
    }
}

/// Posts `notice` to `target`: the first attempt now, then up to [`super::retry::RETRIES`] more while the
/// failure may pass.
async fn deliver(
    client: &HttpClient,
    target: &Target,
    notice: &Notice,
    limits: DeliveryLimits,
) -> Outcome {
    let body = body(target.format, notice);
    let mut attempt = 0;
    loop {
        let failure = match tokio::time::timeout(limits.timeout, post(client, target, &body)).await
        {
            Ok(Ok(())) => return Outcome::Sent,
            Ok(Err(failure)) => failure,
            Err(_) => Failure::Timeout,
        };
        attempt += 1;
        let delay =
            retry_delay(attempt, limits.retry_unit, random_jitter()).filter(|_| failure.may_pass());
        let Some(delay) = delay else {
            warn!(target = %target.name, event = %notice.kind, error = %failure, attempts = attempt,
                "notice not delivered");
            return Outcome::Failed;
        };
        debug!(target = %target.name, error = %failure, attempt, "notice not delivered yet: retrying");
        tokio::time::sleep(delay).await;
    }
}

/// Why one attempt failed, in words that never carry the URL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failure {
    Status(StatusCode),
    Timeout,
    Refused,
    Tls,
    /// Could not connect otherwise (no such host, unreachable).
    Connect,
    /// The connection closed, or what came back was no HTTP response.
    Response,
}

impl Failure {
    /// Whether trying again may help: not for a request the receiver refuses as such (a 4xx
    /// other than 408 and 429, a redirect, which is not followed).
    fn may_pass(self) -> bool {
        match self {
            Failure::Status(status) => {
                status.is_server_error()
                    || status == StatusCode::REQUEST_TIMEOUT
                    || status == StatusCode::TOO_MANY_REQUESTS
            }
            _ => true,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Status(status) => write!(f, "status {}", status.as_u16()),
            Failure::Timeout => f.write_str("timeout"),
            Failure::Refused => f.write_str("connection refused"),
            Failure::Tls => f.write_str("TLS handshake failed"),
            Failure::Connect => f.write_str("cannot connect"),
            Failure::Response => f.write_str("connection closed or not an HTTP response"),
        }
    }
}

async fn post(client: &HttpClient, target: &Target, body: &Body) -> Result<(), Failure> {
    let request = Request::builder()
        .method(Method::POST)
        .uri(target.url.clone())
        .header(CONTENT_TYPE, HeaderValue::from_static(body.content_type))
        .header(USER_AGENT, HeaderValue::from_static("configsum-controller"))
        .body(Full::new(Bytes::from(body.bytes.clone())))
        .map_err(|_| Failure::Connect)?;
    let response = client.request(request).await.map_err(|e| classify(&e))?;
    let status = response.status();
    // The body is not read: nothing in it matters, and dropping it closes the connection.
    if status.is_success() { Ok(()) } else { Err(Failure::Status(status)) }
}

/// A client error as a bounded kind, found in its chain of causes.
fn classify(error: &hyper_util::client::legacy::Error) -> Failure {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(cause) = next {
        if cause.is::<rustls::Error>() {
            return Failure::Tls;
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::ConnectionRefused {
                return Failure::Refused;
            }
            if io.get_ref().is_some_and(|inner| inner.is::<rustls::Error>()) {
                return Failure::Tls;
            }
        }
        next = cause.source();
    }
    if error.is_connect() { Failure::Connect } else { Failure::Response }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::format::Format;
    use crate::notify::notice::NoticeWorkload;

    pub(crate) fn notice(kind: NoticeKind) -> Notice {
        let workload = NoticeWorkload {
            kind: "Deployment".into(),
            resource: "deployments".into(),
            namespace: "ns".into(),
            name: "web".into(),
        };
        Notice::new(kind, workload, "changed secret/db".into())
    }

    fn target(name: &str, events: &[NoticeKind]) -> Target {
        Target {
            name: name.into(),
            url: "http://127.0.0.1:9/".parse().expect("uri"),
            format: Format::CloudEvents,
            events: events.iter().copied().collect(),
        }
    }

    #[test]
    fn a_full_queue_drops_and_counts_never_waiting() {
        let metrics = NotificationMetrics::default();
        let limits = DeliveryLimits::default();
        let targets = vec![target("all", &NoticeKind::ALL), target("halts", &[NoticeKind::Halted])];
        // No task drains the queues: the 1,001st notice finds a full queue.
        let (notifier, mut pending) = Notifier::queued(targets, limits, metrics.clone());
        for _ in 0..1_005 {
            notifier.notify(notice(NoticeKind::Rolled));
        }
        notifier.notify(notice(NoticeKind::Halted));
        assert_eq!(metrics.get("all", Outcome::Dropped), 6);
        assert_eq!(metrics.get("halts", Outcome::Dropped), 0);
        assert_eq!(metrics.get("all", Outcome::Sent), 0);
        let (_, all) = &mut pending[0];
        assert_eq!(all.len(), 1_000);
        // Once there is room, notices queue again.
        let _ = all.try_recv();
        notifier.notify(notice(NoticeKind::Rolled));
        assert_eq!(metrics.get("all", Outcome::Dropped), 6);
        assert_eq!(pending[1].1.len(), 1, "the halt went to the target that wants halts");
    }

    #[test]
    fn failures_that_may_pass_are_retried_and_are_said_without_the_url() {
        assert!(Failure::Status(StatusCode::INTERNAL_SERVER_ERROR).may_pass());
        assert!(Failure::Status(StatusCode::TOO_MANY_REQUESTS).may_pass());
        assert!(!Failure::Status(StatusCode::NOT_FOUND).may_pass());
        assert!(!Failure::Status(StatusCode::MOVED_PERMANENTLY).may_pass());
        assert!(Failure::Timeout.may_pass() && Failure::Response.may_pass());
        assert_eq!(Failure::Status(StatusCode::BAD_GATEWAY).to_string(), "status 502");
    }
}
