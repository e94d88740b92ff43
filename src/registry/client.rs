//! The registry client: "what digest does the registry give for this image reference now?".
//!
//! [`RegistryClient::resolve`] picks the credentials that apply to the image, shares the
//! resolution with concurrent callers for the same reference and credentials, reuses its answer
//! for up to 10 s, bounds it by the registry timeout end to end, and records it in
//! [`RegistryMetrics`]. The requests themselves are `distribution.rs`'s, under the policy of
//! `policy.rs` (where requests may go) and over the connections of `connect.rs`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hyper::header::HeaderValue;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject as _;
use tokio::time::Instant;

use super::cache::{Reusable, SingleFlight};
use super::connect::tls_config;
use super::credentials::{CredentialId, PullCredential, select_credentials};
use super::digest_source::DigestSource;
use super::distribution::Distribution;
use super::metrics::RegistryMetrics;
use super::outcome::{FailureKind, Resolution};
use super::policy::{PatternError, RegistryPolicy};
use super::reference::ImageRef;
use crate::user_agent::PRODUCT;

/// The longest a registry's answer may be reused.
pub const MAX_REUSE: Duration = Duration::from_secs(10);
/// `--registry-timeout`'s default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// How the client reaches registries.
#[derive(Clone, Debug)]
pub struct RegistryConfig {
    /// `--insecure-registry`: `host[:port]` spoken to over plain HTTP.
    pub insecure_registries: Vec<String>,
    /// `--registry-allow`: when not empty, the only registries resolved (and hosts that may be
    /// internal addresses).
    pub allowed_registries: Vec<String>,
    /// `--registry-ca-file`: PEM certificates trusted in addition to Mozilla's roots.
    pub ca_file: Option<PathBuf>,
    /// `--registry-timeout`: the bound on one resolution, token handshake and retries with other
    /// credentials included.
    pub timeout: Duration,
    /// How long an answer is reused; at most [`MAX_REUSE`].
    pub reuse_for: Duration,
    /// The User-Agent of every request: the command's, as the API server gets it.
    pub user_agent: HeaderValue,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            insecure_registries: Vec::new(),
            allowed_registries: Vec::new(),
            ca_file: None,
            timeout: DEFAULT_TIMEOUT,
            reuse_for: MAX_REUSE,
            user_agent: HeaderValue::from_static(PRODUCT),
        }
    }
}

/// Why the client could not be built (at start-up, from flags).
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot read the registry CA file {}: {reason}", path.display())]
    CaFile { path: PathBuf, reason: String },
    #[error("the registry CA file {} holds no usable PEM certificate", path.display())]
    NoCertificate { path: PathBuf },
    #[error("cannot build the registry HTTP client: {0}")]
    Build(String),
    #[error(transparent)]
    Flag(#[from] PatternError),
}

/// See the module docs. Cheap to clone; clones share the cache, the token caches and the
/// connection pools.
#[derive(Clone)]
pub struct RegistryClient {
    inner: Arc<Inner>,
}

struct Inner {
    source: Arc<dyn DigestSource>,
    cache: SingleFlight<CacheKey, Resolution>,
    timeout: Duration,
    metrics: RegistryMetrics,
}

/// A reference and the identity of the credentials tried for it; never the credentials.
#[derive(Clone, PartialEq, Eq, Hash)]
struct CacheKey {
    image: ImageRef,
    credentials: Option<CredentialId>,
}

impl Reusable for Resolution {
    fn reusable(&self) -> bool {
        self.is_registry_answer()
    }

    fn lost() -> Self {
        Resolution::failed(FailureKind::Internal, None)
    }
}

impl RegistryClient {
    /// Builds the client from its flags; fails on a bad `host[:port]`, an unreadable CA file or
    /// a TLS set-up error. Needs no system trust store: Mozilla's roots are compiled in.
    pub fn new(config: RegistryConfig, metrics: RegistryMetrics) -> Result<Self, ClientError> {
        let policy = RegistryPolicy::new(&config.insecure_registries, &config.allowed_registries)?;
        let roots = match &config.ca_file {
            Some(path) => load_roots(path)?,
            None => Vec::new(),
        };
        let tls = tls_config(&roots).map_err(ClientError::Build)?;
        let source = Distribution::new(policy, tls, config.timeout, config.user_agent);
        Ok(Self::with_source(Arc::new(source), config.timeout, config.reuse_for, metrics))
    }

    pub(crate) fn with_source(
        source: Arc<dyn DigestSource>,
        timeout: Duration,
        reuse_for: Duration,
        metrics: RegistryMetrics,
    ) -> Self {
        RegistryClient {
            inner: Arc::new(Inner {
                source,
                cache: SingleFlight::new(reuse_for.min(MAX_REUSE)),
                timeout,
                metrics,
            }),
        }
    }

    /// The digest the registry gives for `image` now. `credentials` are every credential the
    /// workload's pull secrets hold; those that apply to the image are tried in turn (the next
    /// after a 401 or 403), none means an anonymous pull. A pinned image is answered without a
    /// request. Never takes longer than the configured timeout, plus waiting for a lock.
    pub async fn resolve(&self, image: &ImageRef, credentials: &[PullCredential]) -> Resolution {
        if let Some(digest) = image.digest() {
            return Resolution::Pinned(digest.to_owned());
        }
        let chosen: Vec<PullCredential> =
            select_credentials(image, credentials).into_iter().cloned().collect();
        let key = CacheKey {
            image: image.clone(),
            credentials: (!chosen.is_empty()).then(|| CredentialId::of_list(&chosen)),
        };
        let source = Arc::clone(&self.inner.source);
        let timeout = self.inner.timeout;
        let metrics = self.inner.metrics.clone();
        let image = image.clone();
        let fetch = move || async move {
            let started = Instant::now();
            let resolution = tokio::time::timeout(timeout, try_each(&*source, &image, &chosen))
                .await
                .unwrap_or_else(|_| Resolution::failed(FailureKind::Timeout, None));
            metrics.observe(image.registry(), resolution.outcome(), started.elapsed());
            if let Resolution::Failed(failure) = &resolution {
                tracing::debug!(image = %image, %failure, "registry resolution failed");
            }
            resolution
        };
        self.inner.cache.get_or_fetch(key, fetch).await
    }
}

/// Anonymous, or each credential in turn until one is not refused.
async fn try_each(
    source: &dyn DigestSource,
    image: &ImageRef,
    credentials: &[PullCredential],
) -> Resolution {
    let Some((last, before)) = credentials.split_last() else {
        return source.fetch(image, None).await;
    };
    for credential in before {
        let resolution = source.fetch(image, Some(credential)).await;
        match &resolution {
            Resolution::Failed(failure) if failure.kind.is_auth() => continue,
            _ => return resolution,
        }
    }
    source.fetch(image, Some(last)).await
}

/// Reads the PEM certificates of `--registry-ca-file`, each checked to be a usable trust anchor.
fn load_roots(path: &std::path::Path) -> Result<Vec<CertificateDer<'static>>, ClientError> {
    let bytes = std::fs::read(path)
        .map_err(|e| ClientError::CaFile { path: path.to_owned(), reason: e.kind().to_string() })?;
    let mut roots = Vec::new();
    let mut store = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(&bytes) {
        let certificate =
            certificate.map_err(|_| ClientError::NoCertificate { path: path.to_owned() })?;
        store
            .add(certificate.clone())
            .map_err(|_| ClientError::NoCertificate { path: path.to_owned() })?;
        roots.push(certificate);
    }
    if roots.is_empty() {
        return Err(ClientError::NoCertificate { path: path.to_owned() });
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use std::sync::Mutex;

    use futures_util::FutureExt as _;
    use futures_util::future::BoxFuture;

    use super::*;
    use crate::registry::credentials::RegistryKey;
    use crate::registry::outcome::{Failure, ImageDigest};

    const D1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

    fn image(s: &str) -> ImageRef {
        match ImageRef::parse(s) {
            Ok(image) => image,
            Err(error) => panic!("{s}: {error}"),
        }
    }

    fn cred(key: &str, user: &str) -> PullCredential {
        match RegistryKey::parse(key) {
            Some(key) => PullCredential::new(key, user.to_owned(), format!("{user}-pw")),
            None => panic!("{key}"),
        }
    }

    fn digest() -> Resolution {
        match ImageDigest::parse(D1) {
            Some(digest) => Resolution::Digest(digest),
            None => panic!("D1 is a digest"),
        }
    }

    /// Answers from a script: `accept` is the one user the registry lets in (anonymous if None).
    struct Scripted {
        calls: AtomicUsize,
        tried: Mutex<Vec<String>>,
        accept: Option<&'static str>,
        delay: Duration,
    }

    impl Scripted {
        fn new(accept: Option<&'static str>, delay: Duration) -> Arc<Self> {
            Arc::new(Scripted {
                calls: AtomicUsize::new(0),
                tried: Mutex::default(),
                accept,
                delay,
            })
        }

        fn calls(&self) -> usize {
            self.calls.load(Ordering::SeqCst)
        }

        fn tried(&self) -> Vec<String> {
            self.tried.lock().map(|t| t.clone()).unwrap_or_default()
        }
    }

    impl DigestSource for Scripted {
        fn fetch(
            &self,
            image: &ImageRef,
            credential: Option<&PullCredential>,
        ) -> BoxFuture<'static, Resolution> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let name = credential.map_or("anonymous", PullCredential::username).to_owned();
            if let Ok(mut tried) = self.tried.lock() {
                tried.push(name.clone());
            }
            let accepted = self.accept.unwrap_or("anonymous") == name;
            let missing = image.tag() == Some("missing");
            let delay = self.delay;
            async move {
                tokio::time::sleep(delay).await;
                match (accepted, missing) {
                    (false, _) => Resolution::failed(FailureKind::Unauthorized, Some(401)),
                    (true, true) => Resolution::Unknown,
                    (true, false) => digest(),
                }
            }
            .boxed()
        }
    }

    fn client(source: &Arc<Scripted>, timeout: Duration) -> RegistryClient {
        RegistryClient::with_source(source.clone(), timeout, MAX_REUSE, RegistryMetrics::default())
    }

    #[tokio::test(start_paused = true)]
    async fn pinned_images_are_not_resolved() {
        let source = Scripted::new(None, Duration::ZERO);
        let pinned = image(&format!("nginx:1@{D1}"));
        assert_eq!(
            client(&source, DEFAULT_TIMEOUT).resolve(&pinned, &[]).await,
            Resolution::Pinned(D1.to_owned())
        );
        assert_eq!(source.calls(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_resolutions_share_one_request_per_credential_set() {
        let source = Scripted::new(Some("alice"), Duration::from_millis(200));
        let client = client(&source, DEFAULT_TIMEOUT);
        let creds = [cred("ghcr.io", "alice")];
        let other_creds = [cred("ghcr.io", "bob"), cred("ghcr.io", "alice")];
        let app = image("ghcr.io/o/app:prod");
        let mut waiters = Vec::new();
        for i in 0..10 {
            let client = client.clone();
            let app = app.clone();
            let creds = if i % 2 == 0 { creds.to_vec() } else { other_creds.to_vec() };
            waiters.push(tokio::spawn(async move { client.resolve(&app, &creds).await }));
        }
        for waiter in waiters {
            assert_eq!(waiter.await.ok(), Some(digest()));
        }
        // One request for [alice]; two (bob refused, then alice) for [bob, alice].
        assert_eq!(source.calls(), 3);
        // Reused within 10 s of the answer, asked again after.
        tokio::time::advance(Duration::from_secs(9)).await;
        assert_eq!(client.resolve(&app, &creds).await, digest());
        assert_eq!(source.calls(), 3);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(client.resolve(&app, &creds).await, digest());
        assert_eq!(source.calls(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn credentials_that_do_not_apply_are_not_sent() {
        let source = Scripted::new(None, Duration::ZERO);
        let client = client(&source, DEFAULT_TIMEOUT);
        let creds = [cred("ghcr.io", "alice"), cred("quay.io", "carol")];
        assert_eq!(client.resolve(&image("nginx"), &creds).await, digest());
        assert_eq!(source.tried(), ["anonymous"]);
    }

    #[tokio::test(start_paused = true)]
    async fn refused_credentials_fall_through_to_the_next_and_the_last_refusal_is_reported() {
        let source = Scripted::new(Some("carol"), Duration::ZERO);
        let client = client(&source, DEFAULT_TIMEOUT);
        let creds =
            [cred("quay.io", "alice"), cred("quay.io/team", "bob"), cred("quay.io", "carol")];
        assert_eq!(
            client.resolve(&image("quay.io/team/app:missing"), &creds).await,
            Resolution::Unknown
        );
        assert_eq!(source.tried(), ["bob", "alice", "carol"]);
        let refused = client.resolve(&image("quay.io/team/app:1"), &creds[..2]).await;
        assert_eq!(refused, Resolution::failed(FailureKind::Unauthorized, Some(401)));
    }

    #[tokio::test(start_paused = true)]
    async fn the_timeout_bounds_the_whole_resolution_and_is_not_reused() {
        let source = Scripted::new(Some("carol"), Duration::from_millis(800));
        let metrics = RegistryMetrics::default();
        let client =
            RegistryClient::with_source(source.clone(), DEFAULT_TIMEOUT, MAX_REUSE, metrics);
        // Three attempts of 800 ms do not fit in 2 s.
        let creds = [cred("quay.io", "alice"), cred("quay.io", "bob"), cred("quay.io", "carol")];
        let started = Instant::now();
        let resolution = client.resolve(&image("quay.io/team/app:1"), &creds).await;
        assert_eq!(
            resolution,
            Resolution::Failed(Failure { kind: FailureKind::Timeout, status: None })
        );
        assert!(
            started.elapsed() >= DEFAULT_TIMEOUT
                && started.elapsed() < DEFAULT_TIMEOUT + Duration::from_millis(50)
        );
        client.resolve(&image("quay.io/team/app:1"), &creds).await;
        assert_eq!(source.calls(), 6, "a timeout is asked again");
    }

    #[test]
    fn ca_files_must_hold_certificates() {
        let dir =
            std::env::temp_dir().join(format!("configsum-registry-ca-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let missing = dir.join("missing.pem");
        assert!(matches!(load_roots(&missing), Err(ClientError::CaFile { .. })));
        let garbage = dir.join("garbage.pem");
        let _ = std::fs::write(&garbage, "not a certificate\n");
        assert!(matches!(load_roots(&garbage), Err(ClientError::NoCertificate { .. })));
        let bad_der = dir.join("bad.pem");
        let _ = std::fs::write(
            &bad_der,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        );
        assert!(matches!(load_roots(&bad_der), Err(ClientError::NoCertificate { .. })));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
