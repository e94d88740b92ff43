//! `configsum serve`: start-up checks, the TLS and metrics listeners, and the
//! graceful shutdown on SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, info, warn};

use crate::app::{AppState, metrics_router, router};
use crate::config::ServeArgs;
use crate::core::digest::DigestKeyError;
use crate::core::{DigestKeys, Digester, Settings};
use crate::lookup::{FileSource, FileSourceError, KubeSource, ObjectSource};
use crate::metrics::Metrics;
use crate::tls::{
    CertificateStore, TlsError, expiry_unix_seconds, load_certified_key, reload_on_change,
    server_config,
};

/// How long a client may take for the TLS handshake or the request headers.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the certificate files are compared with the pair in use.
const CERTIFICATE_POLL_INTERVAL: Duration = Duration::from_secs(2);
/// How long in-flight requests may take to finish after SIGTERM.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(25);

/// Why `configsum serve` did not start. Never carries key material.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(
        "no --digest-key-file given: refusing to digest Secrets with plain SHA-256 \
         (pass --allow-plain-secret-digests to accept that)"
    )]
    NoDigestKey,
    #[error("cannot read digest key file {path}: {source}")]
    DigestKeyFile { path: PathBuf, source: std::io::Error },
    #[error("digest key file {path}: {source}")]
    DigestKey { path: PathBuf, source: DigestKeyError },
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("TLS configuration: {0}")]
    TlsConfig(#[from] rustls::Error),
    #[error(transparent)]
    Objects(#[from] FileSourceError),
    #[error("cannot find the Kubernetes API (in-cluster, KUBECONFIG or ~/.kube/config): {0}")]
    Kube(#[source] kube::Error),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
}

/// Reads the digest keys, or refuses to start without them (SPEC §4).
pub fn load_digest_keys(args: &ServeArgs) -> Result<DigestKeys, StartupError> {
    digest_keys(args.digest_key_file.as_deref(), args.allow_plain_secret_digests)
}

/// The digest keys from `file`; without one, plain digests only if `allow_plain`.
pub fn digest_keys(
    file: Option<&std::path::Path>,
    allow_plain: bool,
) -> Result<DigestKeys, StartupError> {
    let Some(path) = file else {
        if !allow_plain {
            return Err(StartupError::NoDigestKey);
        }
        warn!(
            "Secret digests are plain SHA-256: anyone who can read a workload can test guesses of a \
             low-entropy Secret offline; configure --digest-key-file"
        );
        return Ok(DigestKeys::none());
    };
    let text = std::fs::read(path)
        .map_err(|source| StartupError::DigestKeyFile { path: path.to_owned(), source })?;
    DigestKeys::parse(&text)
        .map_err(|source| StartupError::DigestKey { path: path.to_owned(), source })
}

/// Runs the webhook until SIGTERM or SIGINT.
pub async fn serve(args: ServeArgs) -> Result<(), StartupError> {
    let digester = Digester::new(load_digest_keys(&args)?);
    let metrics = Arc::new(Metrics::new());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certificate = load_certified_key(&args.tls_cert, &args.tls_key, &provider)?;
    metrics.set_certificate_expiry(expiry_unix_seconds(&certificate));
    let store = Arc::new(CertificateStore::new(certificate));
    let tls = server_config(store.clone(), provider.clone())?;
    let files = (args.tls_cert.clone(), args.tls_key.clone());
    tokio::spawn(reload_on_change(
        store,
        files,
        provider,
        metrics.clone(),
        CERTIFICATE_POLL_INTERVAL,
    ));
    match &args.objects_from {
        Some(path) => {
            let source = FileSource::load(path)?;
            info!(objects = source.len(), file = %path.display(), "serving ConfigMaps and Secrets from a file");
            run(args, source, digester, tls, metrics).await
        }
        None => {
            let source = KubeSource::infer().await.map_err(StartupError::Kube)?;
            run(args, source, digester, tls, metrics).await
        }
    }
}

async fn run<S: ObjectSource>(
    args: ServeArgs,
    source: S,
    digester: Digester,
    tls: rustls::ServerConfig,
    metrics: Arc<Metrics>,
) -> Result<(), StartupError> {
    let signals = ShutdownSignals::register();
    let settings = Settings {
        domain: args.annotation_domain.clone(),
        on_lookup_error: args.on_lookup_error.into(),
    };
    let state = Arc::new(AppState {
        source,
        digester,
        settings,
        lookup_timeout: args.lookup_timeout,
        metrics: metrics.clone(),
        ready: AtomicBool::new(false),
    });
    let listener = bind(args.listen).await?;
    let metrics_listener = bind(args.metrics_listen).await?;
    // The bound addresses, so that port 0 (tests) can be found from the log.
    let local = |l: &TcpListener| l.local_addr().map(|a| a.to_string()).unwrap_or_default();
    info!(listen = %local(&listener), metrics_listen = %local(&metrics_listener), "configsum serve started");

    let (stop, stopped) = watch::channel(false);
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    let webhook =
        tokio::spawn(serve_tls(listener, acceptor, router(state.clone()), stopped.clone()));
    let mut metrics_stopped = stopped.clone();
    let metrics_server = tokio::spawn(async move {
        let shutdown = async move {
            let _ = metrics_stopped.changed().await;
        };
        if let Err(e) = axum::serve(metrics_listener, metrics_router(metrics))
            .with_graceful_shutdown(shutdown)
            .await
        {
            warn!(error = %e, "metrics listener failed");
        }
    });
    let readiness = tokio::spawn(become_ready(state.clone()));

    signals.received().await;
    info!("shutting down: no longer ready, finishing in-flight requests");
    readiness.abort();
    state.ready.store(false, Ordering::Relaxed);
    let _ = stop.send(true);
    let _ = webhook.await;
    let _ = metrics_server.await;
    info!("stopped");
    Ok(())
}

/// Ready once the object source answers (the certificate is loaded already).
async fn become_ready<S: ObjectSource>(state: Arc<AppState<S>>) {
    let mut wait = Duration::from_millis(200);
    loop {
        match state.source.check_ready().await {
            Ok(()) => break,
            Err(e) => warn!(error = %e, "the Kubernetes API server does not answer yet; not ready"),
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(5));
    }
    state.ready.store(true, Ordering::Relaxed);
    info!("ready");
}

pub async fn bind(addr: SocketAddr) -> Result<TcpListener, StartupError> {
    TcpListener::bind(addr).await.map_err(|source| StartupError::Bind { addr, source })
}

/// Accepts TLS connections until `stop`, then lets open connections finish
/// their requests (bounded by [`DRAIN_TIMEOUT`]).
async fn serve_tls(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    app: Router,
    mut stop: watch::Receiver<bool>,
) {
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(HANDSHAKE_TIMEOUT);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            // The only change ever sent is the stop.
            _ = stop.changed() => break,
        };
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(app.clone());
        let builder = builder.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => return debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => return debug!(%peer, "TLS handshake timed out"),
            };
            let connection = builder.serve_connection(TokioIo::new(tls), service).into_owned();
            if let Err(e) = watcher.watch(connection).await {
                debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown()).await.is_err() {
        warn!("some connections were still open after the drain timeout");
    }
}

/// SIGTERM and SIGINT, registered at once so that a signal arriving right
/// after start-up is already handled gracefully.
pub struct ShutdownSignals {
    terminate: Option<Signal>,
    interrupt: Option<Signal>,
}

impl ShutdownSignals {
    pub fn register() -> Self {
        let register = |kind: SignalKind| {
            signal(kind).map_err(|e| warn!(error = %e, "cannot listen for a shutdown signal")).ok()
        };
        ShutdownSignals {
            terminate: register(SignalKind::terminate()),
            interrupt: register(SignalKind::interrupt()),
        }
    }

    pub async fn received(mut self) {
        async fn recv(signal: Option<&mut Signal>) {
            match signal {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            _ = recv(self.terminate.as_mut()) => {}
            _ = recv(self.interrupt.as_mut()) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Cli, Command};
    use clap::Parser as _;

    fn args(extra: &[&str]) -> ServeArgs {
        let argv = ["configsum", "serve", "--tls-cert", "c", "--tls-key", "k"];
        match Cli::parse_from(argv.iter().chain(extra)).command {
            Command::Serve(args) => args,
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn digest_key_rules_at_start_up() {
        assert!(matches!(load_digest_keys(&args(&[])), Err(StartupError::NoDigestKey)));
        assert!(
            load_digest_keys(&args(&["--allow-plain-secret-digests"])).is_ok_and(|k| k.is_empty())
        );
        let dir = std::env::temp_dir().join(format!("configsum-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("keys");
        std::fs::write(&file, "0123456789abcdef0123456789abcdef\n").expect("key file");
        let file = file.display().to_string();
        // A key file given with --allow-plain-secret-digests is used as usual.
        let keys =
            load_digest_keys(&args(&["--digest-key-file", &file, "--allow-plain-secret-digests"]));
        assert!(keys.is_ok_and(|k| !k.is_empty()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
