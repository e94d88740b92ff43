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

use super::connection::{DRAIN_TIMEOUT, IDLE_TIMEOUT, serve_connection};
use super::tls::{
    CertificateStore, TlsError, expiry_unix_seconds, load_certified_key, load_client_roots,
    reload_on_change, server_config,
};
use crate::config::ServeArgs;
use crate::core::{Digester, Settings};
use crate::lookup::{Coalescing, FileSource, FileSourceError, KubeSource, ObjectSource};
use crate::process::{
    self, MetricsRegistry, Running, StartupError, bind, local_address, raise_open_file_limit,
};
use crate::registry::RegistryClient;
use crate::user_agent::Caller;
use crate::webhook::api::{AppState, router};
use crate::webhook::metrics::WebhookMetrics;

/// Connections open at once per replica; more wait to be accepted.
pub const MAX_CONNECTIONS: usize = 1024;
/// How often the certificate files are compared with the pair in use.
const CERTIFICATE_POLL_INTERVAL: Duration = Duration::from_secs(2);

/// Why `configsum serve` did not start. Never carries key material.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Startup(#[from] StartupError),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("TLS configuration: {0}")]
    TlsConfig(#[from] rustls::Error),
    #[error(transparent)]
    Objects(#[from] FileSourceError),
}

/// Runs the webhook until SIGTERM or SIGINT.
pub async fn serve(args: ServeArgs) -> Result<(), ServeError> {
    let digester = process::digester(&args.keys)?;
    let mut metrics_registry = MetricsRegistry::new();
    let metrics = WebhookMetrics::register(&mut metrics_registry);
    let registry =
        process::registry_client(args.registries.config(Caller::Serve), &metrics.registries)?;
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
    let settings = process::settings(&args.annotations, &args.scope, args.on_lookup_error.into());
    let scope = settings.object_scope();
    let webhook = Webhook { digester, registry, tls, metrics, metrics_registry, settings };
    match &args.objects_from {
        Some(path) => {
            let source = FileSource::load(path, &scope)?;
            info!(objects = source.len(), file = %path.display(), "serving ConfigMaps and Secrets from a file");
            webhook.run(args, source).await
        }
        None => {
            let client = process::api_client(Caller::Serve, None).await?;
            // Reviews of workloads that share objects share their reads (lookup::coalesce).
            let reads = webhook.metrics.reads.clone();
            let source = Coalescing::new(KubeSource::new(client, scope), reads);
            webhook.run(args, source).await
        }
    }
}

/// What `serve` built before it knows its object source.
struct Webhook {
    digester: Digester,
    registry: RegistryClient,
    tls: rustls::ServerConfig,
    metrics: WebhookMetrics,
    metrics_registry: MetricsRegistry,
    /// The core's settings; the object source judges objects by their scope.
    settings: Settings,
}

impl Webhook {
    async fn run<S: ObjectSource>(self, args: ServeArgs, source: S) -> Result<(), ServeError> {
        let open_files = raise_open_file_limit();
        if open_files.is_some_and(|limit| limit < MAX_CONNECTIONS as u64 + 256) {
            warn!(limit = open_files, "the open-file limit is below the connection cap; raise it");
        }
        let (running, signals) =
            Running::start(args.admin.metrics_listen, self.metrics_registry).await?;
        let listener = bind(args.listen).await.map_err(StartupError::from)?;
        // The bound addresses, so that port 0 (tests) can be found from the log.
        info!(listen = %local_address(&listener), metrics_listen = %running.admin_address,
            "configsum serve started");

        let settings = self.settings;
        let state = AppState::new(
            source,
            self.digester,
            settings,
            args.lookup_timeout,
            self.metrics.clone(),
            running.readiness.clone(),
        )
        .with_registry(self.registry);
        let state = Arc::new(if args.client_ca_file.is_some() {
            state.requiring_client_certificates()
        } else {
            state
        });
        let acceptor = TlsAcceptor::from(Arc::new(self.tls));
        let app = router(state.clone());
        let webhook =
            tokio::spawn(serve_tls(listener, acceptor, app, self.metrics, running.stopping()));
        let readiness = tokio::spawn(become_ready(state));

        signals.received().await;
        info!("shutting down: no longer ready, finishing in-flight requests");
        readiness.abort();
        running.begin_shutdown();
        let _ = webhook.await;
        running.finished().await;
        info!("stopped");
        Ok(())
    }
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
    let open = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        // At the cap, further connections wait in the kernel's backlog.
        let permit = tokio::select! {
            permit = open.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
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
            drop(permit);
        });
    }
    drop(listener);
    let all = u32::try_from(MAX_CONNECTIONS).unwrap_or(u32::MAX);
    if tokio::time::timeout(DRAIN_TIMEOUT, open.acquire_many(all)).await.is_err() {
        warn!("some connections were still open after the drain timeout");
    }
}
