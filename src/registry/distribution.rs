//! The OCI distribution API, as much of it as "which digest does this tag name now" needs:
//! `HEAD /v2/<name>/manifests/<tag>` with the four manifest media types and the digest from
//! `Docker-Content-Digest`, else a `GET` and the SHA-256 of the body; the Bearer token handshake
//! of a `WWW-Authenticate` challenge (anonymous or with Basic credentials to the realm) and
//! plain Basic.
//!
//! Every request goes through [`Distribution::send`], which applies the policy of `policy.rs` to
//! each URL (the reference's, the realm's and every redirect's), follows at most
//! [`MAX_REDIRECTS`] redirects itself, and sends `Authorization` only to the origin it was meant
//! for. Bodies are read up to a bound ([`MAX_MANIFEST`], [`token::MAX_TOKEN_RESPONSE`],
//! [`MAX_ERROR_BODY`]) and never logged.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use http_body_util::{BodyExt as _, Empty, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use sha2::{Digest as _, Sha256};
use tokio::time::Instant;
use url::Url;

use super::challenge::Challenge;
use super::connect::{ConnectError, GuardedConnector};
use super::credentials::PullCredential;
use super::digest_source::DigestSource;
use super::outcome::{FailureKind, ImageDigest, Resolution, classify_envelope, classify_status};
use super::policy::{Destination, RegistryPolicy};
use super::reference::{ImageRef, split_port};
use super::token::{self, Token, TokenCache, TokenKey};

/// The largest manifest or index read for the GET fallback.
pub const MAX_MANIFEST: usize = 4 * 1024 * 1024;
/// The largest error body read (for its error codes).
pub const MAX_ERROR_BODY: usize = 64 * 1024;
/// Redirects followed per request.
pub const MAX_REDIRECTS: usize = 5;
/// Response header bytes read per response.
const MAX_HEADER_BYTES: usize = 64 * 1024;

/// Every manifest type a tag may name; no platform is chosen, so a multi-arch tag gives its
/// index's digest.
const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
     application/vnd.oci.image.manifest.v1+json, \
     application/vnd.docker.distribution.manifest.list.v2+json, \
     application/vnd.docker.distribution.manifest.v2+json";

/// A request that did not get an answer to act on; becomes a failed [`Resolution`].
type Failed = Resolution;

/// [`DigestSource`] over the distribution API. Cheap to clone: clones share the connection pool
/// and the token cache.
#[derive(Clone)]
pub(crate) struct Distribution {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client<HttpsConnector<GuardedConnector>, Empty<Bytes>>,
    policy: Arc<RegistryPolicy>,
    tokens: Mutex<TokenCache>,
    /// [`crate::user_agent`]'s, for the command that built the client.
    user_agent: HeaderValue,
}

impl Distribution {
    pub fn new(
        policy: RegistryPolicy,
        tls: rustls::ClientConfig,
        timeout: Duration,
        user_agent: HeaderValue,
    ) -> Self {
        let policy = Arc::new(policy);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(GuardedConnector::new(Arc::clone(&policy), timeout));
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(4)
            .http1_max_buf_size(MAX_HEADER_BYTES)
            .build(connector);
        Distribution {
            inner: Arc::new(Inner {
                client,
                policy,
                tokens: Mutex::new(TokenCache::default()),
                user_agent,
            }),
        }
    }
}

impl DigestSource for Distribution {
    fn fetch(
        &self,
        image: &ImageRef,
        credential: Option<&PullCredential>,
    ) -> BoxFuture<'static, Resolution> {
        let inner = Arc::clone(&self.inner);
        let image = image.clone();
        let credential = credential.cloned();
        async move { inner.resolve(&image, credential.as_ref()).await.unwrap_or_else(|f| f) }
            .boxed()
    }
}

impl Inner {
    async fn resolve(
        &self,
        image: &ImageRef,
        credential: Option<&PullCredential>,
    ) -> Result<Resolution, Failed> {
        if !self.policy.allows_registry(image) {
            return Err(Resolution::failed(FailureKind::NotAllowed, None));
        }
        let endpoint = image.endpoint();
        let (host, port) = split_port(endpoint);
        let port = port.and_then(|p| p.parse::<u16>().ok());
        let scheme = if self.policy.is_insecure(host, port) { "http" } else { "https" };
        let origin = format!("{scheme}://{endpoint}");
        let reference = image.tag().or(image.digest()).unwrap_or("latest");
        let manifest =
            parse_url(&format!("{origin}/v2/{}/manifests/{reference}", image.repository()))?;
        let key = TokenKey {
            registry: origin.clone(),
            repository: image.repository().to_owned(),
            credentials: credential.map(PullCredential::identity),
        };

        let mut authorization = self.cached_token(&key);
        let mut challenged = false;
        loop {
            let response = self.send(Method::HEAD, &manifest, authorization.as_ref()).await?;
            let status = response.status();
            if status == StatusCode::UNAUTHORIZED && !challenged {
                challenged = true;
                self.forget_token(&key);
                let challenge = Challenge::parse(
                    response
                        .headers()
                        .get_all(header::WWW_AUTHENTICATE)
                        .iter()
                        .map(|v| v.as_bytes()),
                )
                .ok_or(Resolution::failed(FailureKind::Unauthorized, Some(401)))?;
                authorization =
                    Some(self.authorize(&challenge, &manifest, &key, credential).await?);
                continue;
            }
            if status.is_success() {
                let header = response.headers().get("docker-content-digest");
                if let Some(digest) = header.and_then(|v| v.to_str().ok()) {
                    return Ok(ImageDigest::parse(digest).map_or(
                        Resolution::failed(FailureKind::InvalidResponse, None),
                        Resolution::Digest,
                    ));
                }
                return self.digest_of_body(&manifest, authorization.as_ref()).await;
            }
            // A HEAD answer has no body: the status decides.
            return Ok(classify_status(status.as_u16()));
        }
    }

    /// The GET fallback: the SHA-256 of the manifest as served.
    async fn digest_of_body(
        &self,
        manifest: &Url,
        authorization: Option<&HeaderValue>,
    ) -> Result<Resolution, Failed> {
        let response = self.send(Method::GET, manifest, authorization).await?;
        let status = response.status();
        if !status.is_success() {
            let body = read_body(response, MAX_ERROR_BODY).await.unwrap_or_default();
            return Ok(classify_envelope(&body).unwrap_or_else(|| classify_status(status.as_u16())));
        }
        let body = read_body(response, MAX_MANIFEST).await?;
        let digest = format!("sha256:{:x}", Sha256::digest(&body));
        Ok(ImageDigest::parse(&digest)
            .map_or(Resolution::failed(FailureKind::Internal, None), Resolution::Digest))
    }

    /// The `Authorization` that answers `challenge`: a token from the realm (cached), or Basic.
    async fn authorize(
        &self,
        challenge: &Challenge,
        manifest: &Url,
        key: &TokenKey,
        credential: Option<&PullCredential>,
    ) -> Result<HeaderValue, Failed> {
        let unauthorized = || Resolution::failed(FailureKind::Unauthorized, Some(401));
        let Challenge::Bearer { realm, service } = challenge else {
            // Basic goes to the registry itself, never anywhere else.
            return credential.map(PullCredential::basic_authorization).ok_or_else(unauthorized);
        };
        let mut realm = parse_url(realm)?;
        {
            let mut query = realm.query_pairs_mut();
            if let Some(service) = service {
                query.append_pair("service", service);
            }
            query.append_pair("scope", &format!("repository:{}:pull", key.repository));
        }
        // Credentials go to the realm over HTTPS, or to the registry's own origin.
        let same_origin = realm.origin() == manifest.origin();
        let basic = credential
            .filter(|_| realm.scheme() == "https" || same_origin)
            .map(PullCredential::basic_authorization);
        let response = self.send(Method::GET, &realm, basic.as_ref()).await?;
        let status = response.status();
        if !status.is_success() {
            return Err(Resolution::failed(
                match status.as_u16() {
                    429 => FailureKind::RateLimited,
                    500..=599 => FailureKind::ServerError,
                    _ => FailureKind::Unauthorized,
                },
                Some(status.as_u16()),
            ));
        }
        let body = read_body(response, token::MAX_TOKEN_RESPONSE).await?;
        let token = Token::parse(&body)
            .map_err(|_| Resolution::failed(FailureKind::InvalidResponse, None))?;
        let authorization = token.authorization.clone();
        if let Ok(mut tokens) = self.tokens.lock() {
            tokens.insert(key.clone(), token, Instant::now());
        }
        Ok(authorization)
    }

    fn cached_token(&self, key: &TokenKey) -> Option<HeaderValue> {
        self.tokens.lock().ok()?.get(key, Instant::now())
    }

    fn forget_token(&self, key: &TokenKey) {
        if let Ok(mut tokens) = self.tokens.lock() {
            tokens.remove(key);
        }
    }

    /// Sends one request and follows redirects itself: each URL is checked against the policy,
    /// and `authorization` goes only to the origin of `url`.
    async fn send(
        &self,
        method: Method,
        url: &Url,
        authorization: Option<&HeaderValue>,
    ) -> Result<Response<Incoming>, Failed> {
        let origin = url.origin();
        let mut url = url.clone();
        for _ in 0..=MAX_REDIRECTS {
            self.check(&url)?;
            let mut request = Request::builder()
                .method(method.clone())
                .uri(url.as_str())
                .header(header::USER_AGENT, self.user_agent.clone())
                .header(header::ACCEPT, ACCEPT);
            if let Some(authorization) = authorization.filter(|_| url.origin() == origin) {
                request = request.header(header::AUTHORIZATION, authorization.clone());
            }
            let request = request
                .body(Empty::new())
                .map_err(|_| Resolution::failed(FailureKind::InvalidResponse, None))?;
            let response = self.client.request(request).await.map_err(|e| transport(&e))?;
            if !response.status().is_redirection() {
                return Ok(response);
            }
            let location = response.headers().get(header::LOCATION).and_then(|v| v.to_str().ok());
            let Some(next) = location.and_then(|l| url.join(l).ok()) else {
                return Ok(response);
            };
            url = next;
        }
        Err(Resolution::failed(FailureKind::InvalidResponse, None))
    }

    /// Whether `url` may be contacted: http(s) only, and the policy's rules.
    fn check(&self, url: &Url) -> Result<(), Failed> {
        let https = match url.scheme() {
            "https" => true,
            "http" => false,
            _ => return Err(refused(super::policy::Refusal::Scheme)),
        };
        let host = match url.host() {
            Some(url::Host::Domain(domain)) => domain.to_ascii_lowercase(),
            Some(url::Host::Ipv4(ip)) => ip.to_string(),
            Some(url::Host::Ipv6(ip)) => ip.to_string(),
            None => return Err(Resolution::failed(FailureKind::InvalidResponse, None)),
        };
        let destination = Destination { https, host: &host, port: url.port() };
        self.policy.check(&destination).map_err(refused)
    }
}

fn refused(refusal: super::policy::Refusal) -> Failed {
    Resolution::failed(FailureKind::Refused(refusal), None)
}

/// A URL from the registry (a realm, a redirect) or built from a reference; invalid is a failure.
fn parse_url(text: &str) -> Result<Url, Failed> {
    if text.len() > 4096 {
        return Err(Resolution::failed(FailureKind::InvalidResponse, None));
    }
    Url::parse(text).map_err(|_| Resolution::failed(FailureKind::InvalidResponse, None))
}

/// Reads at most `limit` bytes of the body; more is a failure (the rest is not read).
async fn read_body(response: Response<Incoming>, limit: usize) -> Result<Bytes, Failed> {
    let body = Limited::new(response.into_body(), limit);
    match body.collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => {
            Err(Resolution::failed(FailureKind::TooLarge, None))
        }
        Err(_) => Err(Resolution::failed(FailureKind::Connection, None)),
    }
}

/// A request that got no response: refused by the policy on connecting, a connect timeout, TLS,
/// or the network.
fn transport(error: &hyper_util::client::legacy::Error) -> Failed {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = next {
        match error.downcast_ref::<ConnectError>() {
            Some(ConnectError::Refused(refusal)) => return refused(*refusal),
            Some(ConnectError::Timeout) => return Resolution::failed(FailureKind::Timeout, None),
            _ => next = error.source(),
        }
    }
    let kind = if super::outcome::contains_tls_error(error) {
        FailureKind::Tls
    } else {
        FailureKind::Connection
    };
    Resolution::failed(kind, None)
}
