//! `configsum serve`: start-up checks, the TLS listener beside the admin
//! listener, and the graceful shutdown on SIGTERM.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio_rustls::TlsAcceptor;
use tracing::{info, warn};

use super::api::{AppState, router};
use super::connection::{IDLE_TIMEOUT, serve_connection};
use super::metrics::WebhookMetrics;
use super::tls::{
    CertificateStore, TlsError, expiry_unix_seconds, load_certified_key, load_client_roots,
    reload_on_change, server_config,
};
use crate::config::ServeArgs;
use crate::core::{Digester, Settings};
use crate::lookup::{FileSource, FileSourceError, KubeSource, ObjectSource};
use crate::process::{
    BindError, KeyFileError, MetricsRegistry, Readiness, ShutdownSignals, admin_router, bind,
    load_digest_keys, own_namespace, raise_open_file_limit, serve_admin,
};
use crate::registry::{ClientError, RegistryClient};

/// Connections open at once per replica; more wait to be accepted.
pub const MAX_CONNECTIONS: usize = 1024;
/// How often the certificate files are compared with the pair in use.
const CERTIFICATE_POLL_INTERVAL: Duration = Duration::from_secs(2);
/// How long in-flight requests may take to finish after SIGTERM.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(25);

/// Why `configsum serve` did not start. Never carries key material.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    DigestKeys(#[from] KeyFileError),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("TLS configuration: {0}")]
    TlsConfig(#[from] rustls::Error),
    #[error(transparent)]
    Objects(#[from] FileSourceError),
    #[error("cannot find the Kubernetes API (in-cluster, KUBECONFIG or ~/.kube/config): {0}")]
    Kube(#[source] kube::Error),
    #[error(transparent)]
    Bind(#[from] BindError),
    #[error(transparent)]
    Registry(ClientError),
}

/// Runs the webhook until SIGTERM or SIGINT.
pub async fn serve(args: ServeArgs) -> Result<(), StartupError> {
    let keys = load_digest_keys(
        args.keys.digest_key_file.as_deref(),
        args.keys.allow_plain_secret_digests,
    )?;
    let digester = Digester::new(keys);
    let mut metrics_registry = MetricsRegistry::new();
    let metrics = WebhookMetrics::register(&mut metrics_registry);
    let registry = RegistryClient::new(args.registries.config(), metrics.registries.clone())
        .map_err(StartupError::Registry)?;
    let metrics_registry = Arc::new(metrics_registry);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certificate = load_certified_key(&args.tls_cert, &args.tls_key, &provider)?;
    metrics.set_certificate_expiry(expiry_unix_seconds(&certificate));
    let store = Arc::new(CertificateStore::new(certificate));
    let client_roots = args.client_ca_file.as_deref().map(load_client_roots).transpose()?;
    let tls = server_config(store.clone(), provider.clone(), client_roots)?;
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
            run(args, source, digester, registry, tls, metrics, metrics_registry).await
        }
        None => {
            let source = KubeSource::infer().await.map_err(StartupError::Kube)?;
            run(args, source, digester, registry, tls, metrics, metrics_registry).await
        }
    }
}

async fn run<S: ObjectSource>(
    args: ServeArgs,
    source: S,
    digester: Digester,
    registry: RegistryClient,
    tls: rustls::ServerConfig,
    metrics: WebhookMetrics,
    metrics_registry: Arc<MetricsRegistry>,
) -> Result<(), StartupError> {
    let signals = ShutdownSignals::register();
    let settings = Settings {
        domain: args.annotations.annotation_domain.clone(),
        on_lookup_error: args.on_lookup_error.into(),
        own_namespace: Some(own_namespace()),
    };
    let ready = Readiness::new(false);
    let state = AppState::new(
        source,
        digester,
        settings,
        args.lookup_timeout,
        metrics.clone(),
        ready.clone(),
    )
    .with_registry(registry);
    let state = Arc::new(if args.client_ca_file.is_some() {
        state.requiring_client_certificates()
    } else {
        state
    });
    let open_files = raise_open_file_limit();
    if open_files.is_some_and(|limit| limit < MAX_CONNECTIONS as u64 + 256) {
        warn!(limit = open_files, "the open-file limit is below the connection cap; raise it");
    }
    let listener = bind(args.listen).await?;
    let metrics_listener = bind(args.admin.metrics_listen).await?;
    // The bound addresses, so that port 0 (tests) can be found from the log.
    let local = |l: &TcpListener| l.local_addr().map(|a| a.to_string()).unwrap_or_default();
    info!(listen = %local(&listener), metrics_listen = %local(&metrics_listener), "configsum serve started");

    let (stop, stopped) = watch::channel(false);
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    let webhook = tokio::spawn(serve_tls(
        listener,
        acceptor,
        router(state.clone()),
        metrics.clone(),
        stopped.clone(),
    ));
    let metrics_server = tokio::spawn(serve_admin(
        metrics_listener,
        admin_router(metrics_registry, ready.clone()),
        stopped.clone(),
    ));
    let readiness = tokio::spawn(become_ready(state.clone()));

    signals.received().await;
    info!("shutting down: no longer ready, finishing in-flight requests");
    readiness.abort();
    ready.set(false);
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
    state.ready.set(true);
    info!("ready");
}

/// Accepts TLS connections until `stop`, at most [`MAX_CONNECTIONS`] at once,
/// then lets open connections finish their requests (bounded by [`DRAIN_TIMEOUT`]).
async fn serve_tls(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    app: Router,
    metrics: WebhookMetrics,
    mut stop: watch::Receiver<bool>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // hyper's header timeout also runs while an HTTP/1 connection waits for
    // its next request, so it is the idle timeout there.
    builder.http1().timer(TokioTimer::new()).header_read_timeout(IDLE_TIMEOUT);
    // One permit per open connection; all of them back means all closed.
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        // At the cap, further connections wait in the kernel's backlog.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            _ = stop.changed() => break,
        };
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
        let connection = serve_connection(
            tcp,
            peer,
            acceptor.clone(),
            app.clone(),
            builder.clone(),
            stop.clone(),
        );
        let metrics = metrics.clone();
        tokio::spawn(async move {
            metrics.connection_opened();
            connection.await;
            metrics.connection_closed();
            drop(slot);
        });
    }
    drop(listener);
    let all = u32::try_from(MAX_CONNECTIONS).unwrap_or(u32::MAX);
    if tokio::time::timeout(DRAIN_TIMEOUT, slots.acquire_many(all)).await.is_err() {
        warn!("some connections were still open after the drain timeout");
    }
}
