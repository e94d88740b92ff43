//! The serving certificate: PEM loading (full chains; PKCS#8, PKCS#1 and SEC1
//! keys) and a rustls resolver whose certificate can be swapped without a lock
//! on the handshake path.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tracing::{info, warn};

use crate::webhook::WebhookMetrics;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read certificate chain {path}: {message}")]
    Certificate { path: PathBuf, message: String },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("cannot read private key {path}: {message}")]
    Key { path: PathBuf, message: String },
    #[error("the key {key} does not fit the certificate {cert}: {message}")]
    Mismatch { cert: PathBuf, key: PathBuf, message: String },
    #[error("client CA file {path}: {message}")]
    ClientCa { path: PathBuf, message: String },
}

/// The CA certificates of `--client-ca-file`: at least one, every one usable
/// as a trust anchor.
pub fn load_client_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let error = |message: String| TlsError::ClientCa { path: path.to_owned(), message };
    let bytes = std::fs::read(path).map_err(|e| error(e.to_string()))?;
    let mut roots = RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(&bytes) {
        let certificate = certificate.map_err(|e| error(e.to_string()))?;
        roots.add(certificate).map_err(|e| error(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(error("holds no PEM certificate".to_owned()));
    }
    Ok(roots)
}

/// Loads a certificate chain (leaf first) and its private key from files.
pub fn load_certified_key(
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let pair = CertificatePair::read(cert, key)?;
    pair.certified_key(cert, key, provider)
}

/// The bytes of a certificate file and a key file, as last read.
#[derive(Clone, PartialEq, Eq)]
pub struct CertificatePair {
    cert: Vec<u8>,
    key: Vec<u8>,
}

impl CertificatePair {
    pub fn read(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let read = |path: &Path| std::fs::read(path);
        let cert_bytes = read(cert)
            .map_err(|e| TlsError::Certificate { path: cert.to_owned(), message: e.to_string() })?;
        let key_bytes = read(key)
            .map_err(|e| TlsError::Key { path: key.to_owned(), message: e.to_string() })?;
        Ok(CertificatePair { cert: cert_bytes, key: key_bytes })
    }

    /// Parses the pair; `cert` and `key` name the files in errors.
    pub fn certified_key(
        &self,
        cert: &Path,
        key: &Path,
        provider: &CryptoProvider,
    ) -> Result<CertifiedKey, TlsError> {
        let chain = CertificateDer::pem_slice_iter(&self.cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::Certificate { path: cert.to_owned(), message: e.to_string() })?;
        if chain.is_empty() {
            return Err(TlsError::NoCertificate { path: cert.to_owned() });
        }
        // Accepts PKCS#8, PKCS#1 (RSA) and SEC1 (EC, cert-manager's default) PEM blocks.
        let private_key = PrivateKeyDer::from_pem_slice(&self.key)
            .map_err(|e| TlsError::Key { path: key.to_owned(), message: e.to_string() })?;
        CertifiedKey::from_der(chain, private_key, provider).map_err(|e| TlsError::Mismatch {
            cert: cert.to_owned(),
            key: key.to_owned(),
            message: e.to_string(),
        })
    }
}

/// The leaf certificate's notAfter, in seconds since the Unix epoch.
pub fn expiry_unix_seconds(key: &CertifiedKey) -> Option<i64> {
    use x509_cert::der::Decode as _;
    let leaf = key.cert.first()?;
    let cert = x509_cert::Certificate::from_der(leaf.as_ref()).ok()?;
    i64::try_from(cert.tbs_certificate.validity.not_after.to_unix_duration().as_secs()).ok()
}

/// Serves whatever certificate was stored last.
#[derive(Debug)]
pub struct CertificateStore {
    current: ArcSwap<CertifiedKey>,
}

impl CertificateStore {
    pub fn new(initial: CertifiedKey) -> Self {
        CertificateStore { current: ArcSwap::from_pointee(initial) }
    }

    /// New handshakes use `key` from now on; established connections are unaffected.
    pub fn replace(&self, key: CertifiedKey) {
        self.current.store(Arc::new(key));
    }
}

impl ResolvesServerCert for CertificateStore {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// Re-reads the certificate and key every `interval` and swaps in a changed,
/// valid pair. Comparing contents (not watching inotify events on the files)
/// catches the kubelet's `..data` symlink swap for mounted Secrets, and our own
/// reads cannot trigger a reload. A bad pair is reported once and the old one kept.
pub async fn reload_on_change(
    store: Arc<CertificateStore>,
    files: (PathBuf, PathBuf),
    provider: Arc<CryptoProvider>,
    metrics: WebhookMetrics,
    interval: Duration,
) {
    let (cert, key) = files;
    let mut seen = CertificatePair::read(&cert, &key).ok();
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let (cert_file, key_file) = (cert.clone(), key.clone());
        let read = tokio::task::spawn_blocking(move || {
            let pair = CertificatePair::read(&cert_file, &key_file);
            // A swap between the two reads would pair old and new: read the certificate again.
            let settled = pair
                .as_ref()
                .ok()
                .map(|p| std::fs::read(&cert_file).is_ok_and(|again| again == p.cert));
            (pair, settled.unwrap_or(true))
        })
        .await;
        let Ok((pair, true)) = read else { continue };
        let pair = match pair {
            Ok(pair) if seen.as_ref() == Some(&pair) => continue,
            Ok(pair) => pair,
            Err(e) => {
                if seen.is_some() {
                    warn!(error = %e, "cannot read the new certificate; serving the old one");
                    metrics.count_certificate_reload(false);
                }
                seen = None;
                continue;
            }
        };
        match pair.certified_key(&cert, &key, &provider) {
            Ok(certified) => {
                metrics.set_certificate_expiry(expiry_unix_seconds(&certified));
                store.replace(certified);
                metrics.count_certificate_reload(true);
                info!("loaded a new serving certificate");
            }
            Err(e) => {
                metrics.count_certificate_reload(false);
                warn!(error = %e, "the new certificate is not usable; serving the old one");
            }
        }
        seen = Some(pair);
    }
}

/// TLS 1.2 and 1.3 with the ring provider, HTTP/2 and HTTP/1.1 by ALPN.
pub fn server_config(
    store: Arc<CertificateStore>,
    provider: Arc<CryptoProvider>,
    client_roots: Option<RootCertStore>,
) -> Result<ServerConfig, rustls::Error> {
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?;
    let builder = match client_roots {
        None => builder.with_no_client_auth(),
        // Certificates are optional in the handshake, so that kubelet probes
        // (which carry none) reach /healthz; one presented must verify, and
        // /mutate refuses callers without one.
        Some(roots) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| rustls::Error::General(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(store);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}
