//! One accepted connection of the TLS listener, from the TCP accept to the
//! close: the TLS handshake, HTTP/1 or HTTP/2, the idle close and the drain.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;
use tracing::debug;

use crate::webhook::api::ClientCertificate;

/// How long a client may take for the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection with no request running and none begun for this long is
/// closed: HTTP/1 keep-alive or headers that never end (hyper's header
/// timeout), an HTTP/2 preface and nothing more, or a handshake and silence.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long in-flight requests may take to finish after SIGTERM: the server
/// waits this long for its connections, each connection this long for its own.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(25);

/// How long an idle connection being closed may take to say goodbye (the
/// HTTP/2 GOAWAY and PING a live client answers at once) before it is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Serves one accepted TCP connection until the client closes it, it has been
/// idle for [`IDLE_TIMEOUT`], or `stop` says the server is shutting down.
pub async fn serve_connection(
    tcp: TcpStream,
    peer: SocketAddr,
    acceptor: TlsAcceptor,
    app: Router,
    builder: auto::Builder<TokioExecutor>,
    mut stop: watch::Receiver<bool>,
) {
    let activity = Activity::new();
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => return debug!(%peer, error = %e, "TLS handshake failed"),
        Err(_) => return debug!(%peer, "TLS handshake timed out"),
    };
    // With `--client-ca-file` rustls has verified any certificate presented.
    let certificate =
        ClientCertificate(tls.get_ref().1.peer_certificates().is_some_and(|c| !c.is_empty()));
    let requests = activity.clone();
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        let running = requests.begin();
        request.extensions_mut().insert(certificate);
        let response = app.clone().oneshot(request);
        async move {
            let response = response.await;
            drop(running);
            response
        }
    });
    let connection = builder.serve_connection(TokioIo::new(tls), service);
    tokio::pin!(connection);
    let grace = loop {
        let check_at = activity.idle_since().unwrap_or_else(Instant::now) + IDLE_TIMEOUT;
        tokio::select! {
            ended = connection.as_mut() => {
                if let Err(e) = ended {
                    debug!(%peer, error = %e, "connection ended with an error");
                }
                return;
            }
            _ = stop.changed() => break DRAIN_TIMEOUT,
            () = tokio::time::sleep_until(check_at) => {
                if activity.idle_since().is_some_and(|since| since.elapsed() >= IDLE_TIMEOUT) {
                    debug!(%peer, "closing a connection idle for {} s", IDLE_TIMEOUT.as_secs());
                    break CLOSE_GRACE;
                }
            }
        }
    };
    // HTTP/1: close once the running request is answered; HTTP/2: GOAWAY.
    connection.as_mut().graceful_shutdown();
    if tokio::time::timeout(grace, connection).await.is_err() {
        debug!(%peer, "dropped a connection that did not close in time");
    }
}

/// The requests running on one connection, and since when none has run.
struct Activity(Mutex<(usize, Instant)>);

impl Activity {
    /// Idle since now: the clock starts at the TCP accept.
    fn new() -> Arc<Self> {
        Arc::new(Activity(Mutex::new((0, Instant::now()))))
    }

    fn begin(self: &Arc<Self>) -> Running {
        self.update(|state| state.0 += 1);
        Running(self.clone())
    }

    /// When the last request ended, or `None` while one runs.
    fn idle_since(&self) -> Option<Instant> {
        let state = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        (state.0 == 0).then_some(state.1)
    }

    fn update(&self, change: impl FnOnce(&mut (usize, Instant))) {
        change(&mut self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
    }
}

/// A running request; dropping it marks its end.
struct Running(Arc<Activity>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.update(|state| {
            state.0 = state.0.saturating_sub(1);
            state.1 = Instant::now();
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn idle_time_counts_from_the_end_of_the_last_request() {
        let activity = Activity::new();
        let opened = Instant::now();
        assert_eq!(activity.idle_since(), Some(opened));
        tokio::time::advance(Duration::from_secs(20)).await;
        let first = activity.begin();
        let second = activity.begin();
        assert_eq!(activity.idle_since(), None, "busy while a request runs");
        drop(first);
        assert_eq!(activity.idle_since(), None, "busy while any request runs");
        tokio::time::advance(Duration::from_secs(5)).await;
        drop(second);
        assert_eq!(activity.idle_since(), Some(opened + Duration::from_secs(25)));
    }
}
