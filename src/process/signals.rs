//! SIGTERM and SIGINT, registered at once so that a signal arriving right
//! after start-up is already handled gracefully.

use tokio::signal::unix::{Signal, SignalKind, signal};
use tracing::warn;

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

    /// Resolves at the first SIGTERM or SIGINT.
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
