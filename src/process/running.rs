//! A long-running command once started, written once for `serve` and
//! `controller`: the admin listener serving the metrics registry and
//! readiness, the shutdown signals, and the stop every task watches. Shutdown
//! is in two steps, so that a command can finish its own work in between:
//! [`Running::begin_shutdown`] (not ready, every task told to stop), then
//! [`Running::finished`] (the admin listener closed last, so probes and
//! metrics answer while the rest drains).

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::admin::{admin_router, bind, serve_admin};
use super::{MetricsRegistry, Readiness, ShutdownSignals, StartupError};

pub struct Running {
    /// Not ready until the command says so; not ready again once shutdown begins.
    pub readiness: Readiness,
    /// Where the admin listener is bound (port 0 is chosen in tests and logged).
    pub admin_address: String,
    stop: watch::Sender<bool>,
    admin: JoinHandle<()>,
}

impl Running {
    /// Registers SIGTERM and SIGINT, then binds `admin_listen` and serves
    /// `/metrics` from `metrics` and `/healthz` and `/readyz` there. The
    /// signals are registered first, so that one arriving during start-up is
    /// handled gracefully too.
    pub async fn start(
        admin_listen: SocketAddr,
        metrics: MetricsRegistry,
    ) -> Result<(Running, ShutdownSignals), StartupError> {
        let signals = ShutdownSignals::register();
        let listener = bind(admin_listen).await?;
        let admin_address = local_address(&listener);
        let readiness = Readiness::new(false);
        let (stop, stopping) = watch::channel(false);
        let router = admin_router(Arc::new(metrics), readiness.clone());
        let admin = tokio::spawn(serve_admin(listener, router, stopping));
        Ok((Running { readiness, admin_address, stop, admin }, signals))
    }

    /// Changes once shutdown begins; every task that must stop with the command watches it.
    pub fn stopping(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// Not ready, so that endpoints drain, and every [`Running::stopping`] told.
    pub fn begin_shutdown(&self) {
        self.readiness.set(false);
        let _ = self.stop.send(true);
    }

    /// Waits for the admin listener to close, after [`Running::begin_shutdown`].
    pub async fn finished(self) {
        let _ = self.admin.await;
    }
}

/// The bound address of `listener`, for the start-up log line.
pub fn local_address(listener: &TcpListener) -> String {
    listener.local_addr().map(|a| a.to_string()).unwrap_or_default()
}
