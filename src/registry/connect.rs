//! Connections to registries: name resolution that drops addresses the policy forbids, TCP with a
//! connect timeout, and TLS that trusts Mozilla's roots compiled into the binary plus
//! `--registry-ca-file`, never the platform's store (a FROM-scratch image has none, and an empty
//! `/etc/ssl` must not stop the webhook from starting).
//!
//! The address check is here, on the addresses a name resolves to at the moment of connecting,
//! so a name that resolves to loopback or to the cloud metadata address (or is re-pointed there
//! between two requests) is refused like an IP literal.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::Uri;
use hyper_util::rt::TokioIo;
use rustls_pki_types::CertificateDer;
use tokio::net::TcpStream;

use super::policy::{Destination, Refusal, RegistryPolicy, is_internal};

/// Addresses tried per connection: a name with more is cut, so a hostile resolver cannot make one
/// connection attempt last for hundreds of timeouts.
const MAX_ADDRESSES: usize = 4;

/// Why no connection was made. The request path finds it in hyper-util's error chain, so that a
/// refusal reads as the policy's decision rather than a network fault.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("refused: {0}")]
    Refused(Refusal),
    #[error("the URL has no host")]
    NoHost,
    #[error("connecting timed out")]
    Timeout,
    #[error("cannot connect: {0}")]
    Io(#[from] io::Error),
}

/// The `tower::Service<Uri>` hyper-util's client connects through (under hyper-rustls for TLS).
#[derive(Clone)]
pub struct GuardedConnector {
    policy: Arc<RegistryPolicy>,
    timeout: Duration,
}

impl GuardedConnector {
    pub fn new(policy: Arc<RegistryPolicy>, timeout: Duration) -> Self {
        GuardedConnector { policy, timeout }
    }
}

impl tower::Service<Uri> for GuardedConnector {
    type Response = TokioIo<TcpStream>;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, ConnectError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ConnectError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let policy = Arc::clone(&self.policy);
        let timeout = self.timeout;
        Box::pin(async move {
            let stream = tokio::time::timeout(timeout, connect(&policy, &uri))
                .await
                .map_err(|_| ConnectError::Timeout)??;
            // Requests are small and answered at once: do not wait to fill segments.
            let _ = stream.set_nodelay(true);
            Ok(TokioIo::new(stream))
        })
    }
}

async fn connect(policy: &RegistryPolicy, uri: &Uri) -> Result<TcpStream, ConnectError> {
    let https = uri.scheme_str() == Some("https");
    let host = uri.host().ok_or(ConnectError::NoHost)?;
    let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
    let destination = Destination { https, host: &host, port: uri.port_u16() };
    // Checked before every request too; again here, the one place every connection passes.
    policy.check(&destination).map_err(ConnectError::Refused)?;
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let resolved: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((host.as_str(), port)).await?.collect(),
    };
    let internal_ok = policy.may_be_internal(&host, destination.port);
    let permitted: Vec<SocketAddr> = resolved
        .iter()
        .filter(|a| internal_ok || !is_internal(a.ip()))
        .take(MAX_ADDRESSES)
        .copied()
        .collect();
    if permitted.is_empty() && !resolved.is_empty() {
        return Err(ConnectError::Refused(Refusal::InternalAddress));
    }
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the name has no address");
    for address in permitted {
        match TcpStream::connect(address).await {
            Ok(stream) => return Ok(stream),
            Err(error) => last = error,
        }
    }
    Err(ConnectError::Io(last))
}

/// The client's TLS configuration: TLS 1.2 and 1.3 with rustls' safe defaults (no CBC suites, no
/// TLS 1.0/1.1), Mozilla's roots and the `extra` trusted roots.
pub fn tls_config(extra: &[CertificateDer<'static>]) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    for certificate in extra {
        roots.add(certificate.clone()).map_err(|e| e.to_string())?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(insecure: &[&str], allow: &[&str]) -> Arc<RegistryPolicy> {
        let owned = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        Arc::new(RegistryPolicy::new(&owned(insecure), &owned(allow)).unwrap_or_default())
    }

    async fn try_connect(policy: Arc<RegistryPolicy>, uri: &str) -> Result<(), ConnectError> {
        let uri: Uri = uri.parse().map_err(|_| ConnectError::NoHost)?;
        let mut connector = GuardedConnector::new(policy, Duration::from_secs(2));
        tower::Service::call(&mut connector, uri).await.map(|_| ())
    }

    #[tokio::test]
    async fn names_resolving_to_loopback_are_refused_unless_listed() {
        let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
            Ok(listener) => listener,
            Err(error) => panic!("bind: {error}"),
        };
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
        let url = format!("https://localhost:{port}/v2/");
        let refused = try_connect(policy(&[], &[]), &url).await;
        assert!(
            matches!(refused, Err(ConnectError::Refused(Refusal::InternalAddress))),
            "{refused:?}"
        );
        let literal = try_connect(policy(&[], &[]), &format!("https://127.0.0.1:{port}/")).await;
        assert!(matches!(literal, Err(ConnectError::Refused(Refusal::InternalAddress))));
        let plain = try_connect(policy(&[], &[]), &format!("http://example.com:{port}/")).await;
        assert!(matches!(plain, Err(ConnectError::Refused(Refusal::PlainHttp))));
        let listed = policy(&[], &[&format!("localhost:{port}")]);
        let allowed = try_connect(listed, &url).await;
        assert!(allowed.is_ok(), "{allowed:?}");
    }

    #[test]
    fn tls_config_builds_without_any_system_store() {
        assert!(tls_config(&[]).is_ok());
    }
}
