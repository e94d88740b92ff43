//! The serving certificate: PEM loading (full chains; PKCS#8, PKCS#1 and SEC1
//! keys) and a rustls resolver whose certificate can be swapped without a lock
//! on the handshake path.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

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
}

/// Loads a certificate chain (leaf first) and its private key.
pub fn load_certified_key(
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError::Certificate { path: cert.to_owned(), message: e.to_string() })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate { path: cert.to_owned() });
    }
    // Accepts PKCS#8, PKCS#1 (RSA) and SEC1 (EC, cert-manager's default) PEM blocks.
    let private_key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| TlsError::Key { path: key.to_owned(), message: e.to_string() })?;
    CertifiedKey::from_der(chain, private_key, provider).map_err(|e| TlsError::Mismatch {
        cert: cert.to_owned(),
        key: key.to_owned(),
        message: e.to_string(),
    })
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

/// TLS 1.2 and 1.3 with the ring provider, HTTP/2 and HTTP/1.1 by ALPN.
pub fn server_config(
    store: Arc<CertificateStore>,
    provider: Arc<CryptoProvider>,
) -> Result<ServerConfig, rustls::Error> {
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_cert_resolver(store);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}
