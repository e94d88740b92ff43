//! A real OCI registry for tests: the CNCF distribution registry v2.8
//! (Debian's `docker-registry`, installed by scripts/install-test-deps.sh),
//! started as a child process on an ephemeral 127.0.0.1 port with filesystem
//! storage in a temporary directory, and killed on drop.
//!
//! What is real: the registry binary and everything it does — the v2 HTTP API,
//! manifest validation and digests, tags, deletes, TLS (with a certificate
//! from a throwaway test CA, so a client can be tested with a private CA
//! file), htpasswd Basic auth (bcrypt file made with `htpasswd -B`) and
//! token auth (`auth.token`: the registry itself answers 401 with the
//! `WWW-Authenticate: Bearer realm=..,service=..,scope=..` challenge and
//! verifies the JWTs: issuer, audience, expiry and an ES256 signature whose
//! `x5c` chain must lead to `rootcertbundle`).
//!
//! What is a fixture: the token service ([`TokenService`]), a small hyper
//! server inside the test process. It reproduces what a client of Docker
//! Hub's or GHCR's token service relies on:
//! - `GET realm?service=..&scope=repository:<name>:<actions>` (several `scope`
//!   parameters, or space-separated scopes, allowed), anonymous or with Basic
//!   credentials;
//! - the answer `{"token", "access_token", "expires_in", "issued_at"}` with
//!   the same token in both fields, `expires_in` chosen by the test;
//! - granted actions are the requested ones the caller may have (anonymous
//!   callers at most `pull`), as Docker Hub does; wrong credentials get 401
//!   `{"details":"incorrect username or password"}`; anonymous callers can be
//!   allowed to pull, given a token that grants nothing (Docker Hub for a
//!   private repository: the registry then answers 401 `insufficient_scope`),
//!   or refused with 401 ([`AnonymousAccess`]).
//!
//! And what it does not: the OAuth2 `POST` form (password or refresh-token
//! grant, as containerd tries first) answers 405, which makes containerd fall
//! back to `GET`; no `offline_token`/refresh tokens; tokens are JWTs as Docker
//! Hub's are, where GHCR's are opaque (a client must not parse them either
//! way); a `service` other than the registry's is refused with 400 where the
//! real services are laxer; and the registry accepts a token for 60 s past its
//! `exp` (distribution's leeway), so a test of a client's token caching counts
//! the tokens issued ([`TokenService::tokens_issued`]) rather than waiting for
//! the registry to refuse an expired one.
//!
//! Distribution 2.8's own ways, asserted in tests/registry_fixture.rs: a
//! manifest is served only to an `Accept` that names its media type (an OCI
//! manifest or index otherwise gives 404 `MANIFEST_UNKNOWN`, even for
//! `*/*`), except that a Docker manifest list asked for as a single Docker
//! manifest gives its linux/amd64 entry and that entry's digest; HEAD sets
//! `Docker-Content-Digest` for every type, indexes included; an unknown
//! repository is `MANIFEST_UNKNOWN` on the manifests endpoint (`NAME_UNKNOWN`
//! only from tags/list); DELETE by tag is refused, so
//! [`Registry::delete_tag`] edits the storage.
//!
//! The pushes made by the helpers below ([`Registry::push_image`] and the
//! rest) authenticate with the fixture's own credentials; in token mode they
//! use tokens minted in-process, which are not counted as issued.
//!
//! The child process is killed on drop, which also runs when a test panics,
//! and it gets `PR_SET_PDEATHSIG`, so it dies with the thread that started it
//! even if the test process is killed: start a registry from the test's own
//! task (not from a `spawn_blocking` thread, which may exit while idle).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::header::HeaderMap;
use hyper_util::rt::TokioIo;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::server::{TempDir, install_crypto_provider, make_certs, make_certs_for, tls_connector};

pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const DOCKER_MANIFEST_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const OCI_LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
pub const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
pub const DOCKER_LAYER: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";
/// An `Accept` header for every manifest type the helpers push.
pub const ACCEPT_ALL: &str = "application/vnd.oci.image.index.v1+json, \
     application/vnd.docker.distribution.manifest.list.v2+json, \
     application/vnd.oci.image.manifest.v1+json, \
     application/vnd.docker.distribution.manifest.v2+json";

/// The `service` the registry names in its challenges (the JWT audience).
pub const TOKEN_SERVICE: &str = "configsum-test-registry";
/// The `iss` of the fixture's tokens, which the registry trusts.
pub const TOKEN_ISSUER: &str = "configsum-test-token-service";

/// How long a request (connect, send, read the whole answer) may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the registry may take to answer `/v2/` after it is started.
const START_TIMEOUT: Duration = Duration::from_secs(15);

/// How the registry authenticates.
#[derive(Clone, Debug)]
pub enum Auth {
    Anonymous,
    /// htpasswd (bcrypt) Basic auth with this one user.
    Basic {
        user: String,
        password: String,
    },
    /// `auth.token` with an in-process [`TokenService`].
    Token(TokenOptions),
}

/// What the token service gives a caller without credentials.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnonymousAccess {
    /// A token granting `pull` (a public repository).
    Pull,
    /// A token granting nothing, as Docker Hub answers for a private
    /// repository: the registry then refuses it with `insufficient_scope`.
    EmptyToken,
    /// 401 from the token service itself.
    Refused,
}

#[derive(Clone, Debug)]
pub struct TokenOptions {
    pub anonymous: AnonymousAccess,
    /// The one user with credentials; granted `pull`, `push` and `delete`.
    pub user: String,
    pub password: String,
    /// `expires_in` of the answers and the tokens' `exp - iat`.
    pub expires_in: u64,
    /// Serve the realm over HTTPS (with the registry's test CA; needs `tls`).
    pub https_realm: bool,
}

impl Default for TokenOptions {
    fn default() -> Self {
        TokenOptions {
            anonymous: AnonymousAccess::Pull,
            user: "fixture-user".to_owned(),
            password: "fixture-password".to_owned(),
            expires_in: 300,
            https_realm: false,
        }
    }
}

#[derive(Clone, Debug)]
pub struct RegistryOptions {
    /// HTTPS with a serving certificate for 127.0.0.1 and localhost from a
    /// test CA ([`Registry::ca_file`]).
    pub tls: bool,
    pub auth: Auth,
}

/// A running `docker-registry serve`. Dropping it kills the process, stops
/// the token service and removes the storage.
pub struct Registry {
    child: ChildGuard,
    port: u16,
    tls: Option<TlsConnector>,
    ca: Option<PathBuf>,
    basic: Option<(String, String)>,
    token: Option<TokenService>,
    dir: TempDir,
}

/// Kills and reaps the child process on drop.
struct ChildGuard(std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Registry {
    /// Anonymous, plain HTTP.
    pub async fn anonymous() -> Registry {
        Registry::start(RegistryOptions { tls: false, auth: Auth::Anonymous }).await
    }

    /// Anonymous over HTTPS; clients need [`Registry::ca_file`].
    pub async fn anonymous_tls() -> Registry {
        Registry::start(RegistryOptions { tls: true, auth: Auth::Anonymous }).await
    }

    /// htpasswd Basic auth for `user`, plain HTTP.
    pub async fn basic(user: &str, password: &str) -> Registry {
        let auth = Auth::Basic { user: user.to_owned(), password: password.to_owned() };
        Registry::start(RegistryOptions { tls: false, auth }).await
    }

    /// Token auth against an in-process token service, plain HTTP.
    pub async fn token(options: TokenOptions) -> Registry {
        Registry::start(RegistryOptions { tls: false, auth: Auth::Token(options) }).await
    }

    /// As GHCR serves a public image: HTTPS, a 401 whose challenge names a token realm on
    /// another host:port (HTTPS too), and anonymous pull tokens.
    pub async fn ghcr_like() -> Registry {
        let token = TokenOptions {
            anonymous: AnonymousAccess::Pull,
            https_realm: true,
            ..TokenOptions::default()
        };
        Registry::start(RegistryOptions { tls: true, auth: Auth::Token(token) }).await
    }

    pub async fn start(options: RegistryOptions) -> Registry {
        install_crypto_provider();
        let dir = TempDir::new("registry");
        let (mut tls, mut ca) = (None, None);
        if options.tls {
            let certs = dir.path("tls");
            make_certs(&certs, "ec-sec1");
            tls = Some(tls_connector(&certs.join("ca.crt"), None));
            ca = Some(certs.join("ca.crt"));
        }
        let (mut basic, mut token) = (None, None);
        let auth_config = match &options.auth {
            Auth::Anonymous => String::new(),
            Auth::Basic { user, password } => {
                let htpasswd = dir.path("htpasswd");
                write_htpasswd(&htpasswd, user, password);
                basic = Some((user.clone(), password.clone()));
                format!(
                    "auth:\n  htpasswd:\n    realm: configsum-test\n    path: {}\n",
                    quote(&htpasswd)
                )
            }
            Auth::Token(token_options) => {
                let serving = token_options.https_realm.then(|| {
                    assert!(options.tls, "an HTTPS realm needs the registry's test CA (tls: true)");
                    (dir.path("tls/tls.crt"), dir.path("tls/tls.key"))
                });
                let service =
                    TokenService::start(&dir.path("token"), serving, token_options.clone()).await;
                let config = format!(
                    "auth:\n  token:\n    realm: {}\n    service: {}\n    issuer: {}\n    rootcertbundle: {}\n",
                    json!(service.realm()),
                    json!(TOKEN_SERVICE),
                    json!(TOKEN_ISSUER),
                    quote(&service.root_cert_bundle()),
                );
                token = Some(service);
                config
            }
        };
        let tls_config = match options.tls {
            true => format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                quote(&dir.path("tls/tls.crt")),
                quote(&dir.path("tls/tls.key"))
            ),
            false => String::new(),
        };
        let config_path = dir.path("config.yml");
        let log_path = dir.path("registry.log");
        // Sent on every answer, so that start-up knows the registry on the
        // port is this one (another may have bound the port first).
        let instance = dir.0.file_name().expect("temp dir name").to_string_lossy().into_owned();
        for attempt in 1.. {
            let port = free_port();
            let config = format!(
                "version: 0.1\n\
                 log:\n  level: error\n  accesslog:\n    disabled: true\n\
                 storage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n  \
                 maintenance:\n    uploadpurging:\n      enabled: false\n\
                 http:\n  addr: 127.0.0.1:{port}\n  secret: configsum-test-http-secret\n  \
                 headers:\n    {INSTANCE_HEADER}: [{instance}]\n{tls_config}{auth_config}",
                quote(&dir.path("storage")),
            );
            std::fs::write(&config_path, config).expect("write registry config");
            let mut child = ChildGuard(spawn_registry(&config_path, &log_path));
            let endpoint =
                Endpoint { addr: SocketAddr::from(([127, 0, 0, 1], port)), tls: tls.clone() };
            match wait_ready(&mut child.0, &endpoint, &instance).await {
                Ok(()) => {
                    return Registry { child, port, tls, ca, basic, token, dir };
                }
                Err(why) => {
                    drop(child);
                    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                    // Something else may have taken the port between
                    // free_port() and the registry's bind: try another.
                    let taken = why == PORT_TAKEN || log.contains("address already in use");
                    if attempt < 5 && taken {
                        continue;
                    }
                    panic!(
                        "docker-registry did not start ({why}); config:\n{}\nlog:\n{log}",
                        std::fs::read_to_string(&config_path).unwrap_or_default()
                    );
                }
            }
        }
        unreachable!()
    }

    /// `127.0.0.1:PORT`, the registry host as it appears in image references.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT` or `https://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.host())
    }

    /// `HOST/repo:tag`.
    pub fn image(&self, repo: &str, tag: &str) -> String {
        format!("{}/{repo}:{tag}", self.host())
    }

    /// The test CA (PEM) that signed the serving certificate, when HTTPS.
    pub fn ca_file(&self) -> Option<&Path> {
        self.ca.as_deref()
    }

    /// The user and password the registry (Basic mode) or its token service
    /// (token mode) accepts.
    pub fn credentials(&self) -> Option<(&str, &str)> {
        if let Some((user, password)) = &self.basic {
            return Some((user, password));
        }
        self.token.as_ref().map(|token| {
            let options = &token.state.options;
            (options.user.as_str(), options.password.as_str())
        })
    }

    pub fn token_service(&self) -> Option<&TokenService> {
        self.token.as_ref()
    }

    /// The registry's filesystem storage root.
    pub fn storage_dir(&self) -> PathBuf {
        self.dir.path("storage")
    }

    /// What the registry printed (stdout and stderr) so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path("registry.log")).unwrap_or_default()
    }

    /// Where to connect, verifying the test CA in HTTPS mode.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint { addr: SocketAddr::from(([127, 0, 0, 1], self.port)), tls: self.tls.clone() }
    }

    /// A request with exactly `headers` (no credentials unless given).
    pub async fn request(&self, method: &str, target: &str, headers: &[(&str, &str)]) -> Response {
        send(&self.endpoint(), method, target, headers, Vec::new())
            .await
            .unwrap_or_else(|e| panic!("{method} {target}: {e}"))
    }

    /// An `Authorization` value with the fixture's credentials that allows
    /// pull, push and delete on `repo`: Basic in Basic mode, a Bearer token
    /// minted in-process (not counted as issued) in token mode.
    pub fn authorization(&self, repo: &str) -> Option<String> {
        if let Some((user, password)) = &self.basic {
            return Some(basic_authorization(user, password));
        }
        let token = self.token.as_ref()?;
        let subject = token.state.options.user.clone();
        Some(format!("Bearer {}", token.mint(&subject, repo, &["pull", "push", "delete"])))
    }

    /// A request to `/v2/<repo>/...` with the fixture's credentials.
    pub async fn authorized(
        &self,
        repo: &str,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Response {
        let authorization = self.authorization(repo);
        let mut all = headers.to_vec();
        if let Some(value) = &authorization {
            all.push(("authorization", value));
        }
        send(&self.endpoint(), method, target, &all, body)
            .await
            .unwrap_or_else(|e| panic!("{method} {target}: {e}"))
    }

    /// `HEAD /v2/<repo>/manifests/<reference>` with the fixture's credentials.
    pub async fn head_manifest(&self, repo: &str, reference: &str, accept: &str) -> Response {
        let target = format!("/v2/{repo}/manifests/{reference}");
        self.authorized(repo, "HEAD", &target, &[("accept", accept)], Vec::new()).await
    }

    /// `GET /v2/<repo>/manifests/<reference>` with the fixture's credentials.
    pub async fn get_manifest(&self, repo: &str, reference: &str, accept: &str) -> Response {
        let target = format!("/v2/{repo}/manifests/{reference}");
        self.authorized(repo, "GET", &target, &[("accept", accept)], Vec::new()).await
    }

    /// A monolithic blob upload (`POST /v2/<repo>/blobs/uploads/`, then `PUT
    /// <location>&digest=`); the blob's digest.
    pub async fn push_blob(&self, repo: &str, bytes: &[u8]) -> String {
        let digest = sha256_digest(bytes);
        let started = self
            .authorized(repo, "POST", &format!("/v2/{repo}/blobs/uploads/"), &[], Vec::new())
            .await;
        assert_eq!(started.status, 202, "start upload to {repo}: {}", started.text());
        let location = started.header("location").expect("upload Location");
        let location = path_and_query(location);
        let separator = if location.contains('?') { '&' } else { '?' };
        let target = format!("{location}{separator}digest={digest}");
        let headers = [("content-type", "application/octet-stream")];
        let put = self.authorized(repo, "PUT", &target, &headers, bytes.to_vec()).await;
        assert_eq!(put.status, 201, "finish upload to {repo}: {}", put.text());
        assert_eq!(put.header("docker-content-digest"), Some(digest.as_str()));
        digest
    }

    /// PUTs manifest `bytes` of `media_type` under `reference` (a tag or its
    /// digest); the digest of `bytes`, checked against the registry's.
    pub async fn push_manifest(
        &self,
        repo: &str,
        reference: &str,
        media_type: &str,
        bytes: &[u8],
    ) -> String {
        let digest = sha256_digest(bytes);
        let target = format!("/v2/{repo}/manifests/{reference}");
        let headers = [("content-type", media_type)];
        let put = self.authorized(repo, "PUT", &target, &headers, bytes.to_vec()).await;
        assert_eq!(put.status, 201, "PUT {target}: {}", put.text());
        assert_eq!(put.header("docker-content-digest"), Some(digest.as_str()), "PUT {target}");
        digest
    }

    /// An OCI image (config blob, one layer blob, OCI manifest) for
    /// linux/amd64 whose content is `content`, tagged `tag`: the manifest
    /// digest. Different `content` gives different digests.
    pub async fn push_image(&self, repo: &str, tag: &str, content: &str) -> String {
        self.push_image_as(repo, Some(tag), content, "linux/amd64", Format::Oci).await.digest
    }

    /// The same with Docker media types (`manifest.v2+json`).
    pub async fn push_docker_v2(&self, repo: &str, tag: &str, content: &str) -> String {
        self.push_image_as(repo, Some(tag), content, "linux/amd64", Format::Docker).await.digest
    }

    /// An image for `platform` (`os/arch[/variant]`), pushed by digest
    /// (untagged), to go into an index or manifest list.
    pub async fn push_platform_image(
        &self,
        repo: &str,
        platform: &str,
        content: &str,
        format: Format,
    ) -> Descriptor {
        self.push_image_as(repo, None, content, platform, format).await
    }

    /// An image: (untagged when `tag` is None) its manifest's descriptor.
    pub async fn push_image_as(
        &self,
        repo: &str,
        tag: Option<&str>,
        content: &str,
        platform: &str,
        format: Format,
    ) -> Descriptor {
        let (os, architecture, variant) = split_platform(platform);
        let (manifest_type, config_type, layer_type) = match format {
            Format::Oci => (OCI_MANIFEST, OCI_CONFIG, OCI_LAYER),
            Format::Docker => (DOCKER_MANIFEST, DOCKER_CONFIG, DOCKER_LAYER),
        };
        let file = format!("{content}\n{platform}\n");
        let tar = tar_one_file("configsum-fixture.txt", file.as_bytes());
        let layer = gzip_stored(&tar);
        let mut config = json!({
            "architecture": architecture,
            "os": os,
            "config": {"Labels": {"org.configsum.fixture": content}},
            "rootfs": {"type": "layers", "diff_ids": [sha256_digest(&tar)]},
        });
        if let Some(variant) = variant {
            config["variant"] = json!(variant);
        }
        let config = serde_json::to_vec(&config).expect("config JSON");
        let config_digest = self.push_blob(repo, &config).await;
        let layer_digest = self.push_blob(repo, &layer).await;
        let manifest = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": manifest_type,
            "config": {"mediaType": config_type, "digest": config_digest, "size": config.len()},
            "layers": [{"mediaType": layer_type, "digest": layer_digest, "size": layer.len()}],
        }))
        .expect("manifest JSON");
        let digest = sha256_digest(&manifest);
        let reference = tag.unwrap_or(&digest);
        self.push_manifest(repo, reference, manifest_type, &manifest).await;
        Descriptor {
            media_type: manifest_type,
            digest,
            size: manifest.len(),
            platform: Some(platform.to_owned()),
        }
    }

    /// An OCI image index of `manifests` (already in `repo`), tagged `tag`:
    /// its digest.
    pub async fn push_index(&self, repo: &str, tag: &str, manifests: &[Descriptor]) -> String {
        let index = index_json(OCI_INDEX, manifests);
        self.push_manifest(repo, tag, OCI_INDEX, &index).await
    }

    /// A Docker manifest list of `manifests` (already in `repo`), tagged
    /// `tag`: its digest.
    pub async fn push_docker_manifest_list(
        &self,
        repo: &str,
        tag: &str,
        manifests: &[Descriptor],
    ) -> String {
        let list = index_json(DOCKER_MANIFEST_LIST, manifests);
        self.push_manifest(repo, tag, DOCKER_MANIFEST_LIST, &list).await
    }

    /// linux/amd64 and linux/arm64 images of `content` and an index of them
    /// (OCI index for [`Format::Oci`], Docker manifest list for
    /// [`Format::Docker`]) tagged `tag`: (the index digest, the images).
    pub async fn push_multi_platform(
        &self,
        repo: &str,
        tag: &str,
        content: &str,
        format: Format,
    ) -> (String, Vec<Descriptor>) {
        let mut images = Vec::new();
        for platform in ["linux/amd64", "linux/arm64"] {
            images.push(self.push_platform_image(repo, platform, content, format).await);
        }
        let digest = match format {
            Format::Oci => self.push_index(repo, tag, &images).await,
            Format::Docker => self.push_docker_manifest_list(repo, tag, &images).await,
        };
        (digest, images)
    }

    /// Points `to` at the manifest `from` (a tag or digest) names: GETs it
    /// and PUTs the same bytes with the same media type. Its digest.
    pub async fn retag(&self, repo: &str, from: &str, to: &str) -> String {
        let got = self.get_manifest(repo, from, ACCEPT_ALL).await;
        assert_eq!(got.status, 200, "GET {repo} manifest {from}: {}", got.text());
        let media_type = got.header("content-type").expect("manifest Content-Type").to_owned();
        self.push_manifest(repo, to, &media_type, &got.body).await
    }

    /// `DELETE /v2/<repo>/manifests/<digest>`: removes the manifest and every
    /// tag pointing at it.
    pub async fn delete_manifest(&self, repo: &str, digest: &str) {
        let target = format!("/v2/{repo}/manifests/{digest}");
        let deleted = self.authorized(repo, "DELETE", &target, &[], Vec::new()).await;
        assert_eq!(deleted.status, 202, "DELETE {target}: {}", deleted.text());
    }

    /// Removes one tag, leaving the manifest and other tags. Distribution 2.8
    /// has no API for it (DELETE by tag is refused), so this removes the tag
    /// from the filesystem storage, which the registry reads on every request.
    pub fn delete_tag(&self, repo: &str, tag: &str) {
        let path = self
            .storage_dir()
            .join("docker/registry/v2/repositories")
            .join(repo)
            .join("_manifests/tags")
            .join(tag);
        std::fs::remove_dir_all(&path)
            .unwrap_or_else(|e| panic!("remove tag {repo}:{tag} at {}: {e}", path.display()));
    }

    /// Follows a token challenge as a client would: GETs the challenge's
    /// realm with its service and scope (and Basic `credentials` if any).
    /// The token service's answer.
    pub async fn fetch_token(
        &self,
        challenge: &str,
        credentials: Option<(&str, &str)>,
    ) -> Response {
        let (scheme, params) = parse_challenge(challenge);
        assert!(scheme.eq_ignore_ascii_case("bearer"), "not a Bearer challenge: {challenge}");
        let realm = params.get("realm").expect("realm");
        let mut query = Vec::new();
        if let Some(service) = params.get("service") {
            query.push(format!("service={}", url_encode(service)));
        }
        if let Some(scope) = params.get("scope") {
            query.push(format!("scope={}", url_encode(scope)));
        }
        let token = self.token.as_ref().expect("a token-auth registry");
        let target = format!("{}?{}", path_and_query(realm), query.join("&"));
        let authorization = credentials.map(|(user, password)| basic_authorization(user, password));
        let mut headers = Vec::new();
        if let Some(value) = &authorization {
            headers.push(("authorization", value.as_str()));
        }
        assert!(realm.starts_with(&token.realm()), "realm {realm} is not the fixture's");
        send(&token.endpoint(), "GET", &target, &headers, Vec::new())
            .await
            .unwrap_or_else(|e| panic!("GET {realm}: {e}"))
    }
}

/// Which media types an image is pushed with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Oci,
    Docker,
}

/// A pushed manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Descriptor {
    pub media_type: &'static str,
    pub digest: String,
    pub size: usize,
    /// `os/arch[/variant]`.
    pub platform: Option<String>,
}

fn index_json(media_type: &str, manifests: &[Descriptor]) -> Vec<u8> {
    let manifests: Vec<Value> = manifests
        .iter()
        .map(|m| {
            let mut entry = json!({"mediaType": m.media_type, "digest": m.digest, "size": m.size});
            if let Some(platform) = &m.platform {
                let (os, architecture, variant) = split_platform(platform);
                entry["platform"] = json!({"architecture": architecture, "os": os});
                if let Some(variant) = variant {
                    entry["platform"]["variant"] = json!(variant);
                }
            }
            entry
        })
        .collect();
    serde_json::to_vec(
        &json!({"schemaVersion": 2, "mediaType": media_type, "manifests": manifests}),
    )
    .expect("index JSON")
}

fn split_platform(platform: &str) -> (&str, &str, Option<&str>) {
    let mut parts = platform.split('/');
    let os = parts.next().expect("os");
    let architecture = parts.next().unwrap_or_else(|| panic!("{platform}: os/arch[/variant]"));
    (os, architecture, parts.next())
}

/// `sha256:<64 hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

/// A ustar archive holding one regular file.
fn tar_one_file(name: &str, data: &[u8]) -> Vec<u8> {
    let mut header = [0u8; 512];
    header[..name.len()].copy_from_slice(name.as_bytes());
    let mut field = |offset: usize, value: &str| {
        header[offset..offset + value.len()].copy_from_slice(value.as_bytes());
    };
    field(100, "0000644\0"); // mode
    field(108, "0000000\0"); // uid
    field(116, "0000000\0"); // gid
    field(124, &format!("{:011o}\0", data.len())); // size
    field(136, "00000000000\0"); // mtime
    field(156, "0"); // regular file
    field(257, "ustar\0");
    field(263, "00");
    // The checksum is computed with its own field as spaces.
    header[148..156].copy_from_slice(b"        ");
    let sum: u32 = header.iter().map(|&b| u32::from(b)).sum();
    header[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    let mut tar = header.to_vec();
    tar.extend_from_slice(data);
    tar.resize(tar.len().div_ceil(512) * 512, 0);
    tar.resize(tar.len() + 1024, 0); // two zero blocks end the archive
    tar
}

/// A gzip member holding `data` in stored (uncompressed) deflate blocks: a
/// valid `tar+gzip` layer without a compression library.
fn gzip_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    let mut chunks = data.chunks(0xffff).peekable();
    if chunks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(chunk) = chunks.next() {
        out.push(u8::from(chunks.peek().is_none())); // BFINAL, BTYPE=00
        let len = chunk.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(chunk);
    }
    out.extend_from_slice(&crc32(data).to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

fn quote(path: &Path) -> String {
    json!(path.to_str().expect("UTF-8 path")).to_string()
}

fn write_htpasswd(path: &Path, user: &str, password: &str) {
    // -B: bcrypt, the only hash distribution accepts; -C 4: its cheapest cost.
    let output = std::process::Command::new("htpasswd")
        .args(["-n", "-b", "-B", "-C", "4", user, password])
        .output()
        .expect("run htpasswd (apache2-utils; scripts/install-test-deps.sh installs it)");
    assert!(output.status.success(), "htpasswd: {}", String::from_utf8_lossy(&output.stderr));
    std::fs::write(path, output.stdout).expect("write htpasswd");
}

/// A port that was free a moment ago (the registry cannot report the port it
/// bound, so it is given one).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

fn spawn_registry(config: &Path, log: &Path) -> std::process::Child {
    use std::os::unix::process::CommandExt as _;
    let log = std::fs::File::create(log).expect("create registry log");
    let mut command = std::process::Command::new("docker-registry");
    command
        .arg("serve")
        .arg(config)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("clone log file"))
        .stderr(log);
    // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
                .map_err(std::io::Error::from)
        });
    }
    command
        .spawn()
        .expect("spawn docker-registry (scripts/install-test-deps.sh installs Debian's package)")
}

const INSTANCE_HEADER: &str = "X-Configsum-Fixture";
const PORT_TAKEN: &str = "another server answered on the port";

/// Polls `/v2/` until the registry answers (200 or 401) with its `instance`
/// header, exits, or [`START_TIMEOUT`] passes.
async fn wait_ready(
    child: &mut std::process::Child,
    endpoint: &Endpoint,
    instance: &str,
) -> Result<(), String> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Err(format!("exited with {status}"));
        }
        if let Ok(answer) = send(endpoint, "GET", "/v2/", &[], Vec::new()).await {
            if answer.header(INSTANCE_HEADER) != Some(instance) {
                return Err(PORT_TAKEN.to_owned());
            }
            if answer.status == 200 || answer.status == 401 {
                return Ok(());
            }
            return Err(format!("/v2/ answered {}: {}", answer.status, answer.text()));
        }
        if Instant::now() > deadline {
            return Err(format!("/v2/ did not answer within {START_TIMEOUT:?}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------------------
// A minimal HTTP/1.1 client: one connection per request.

/// Where to send a request: a loopback address, over TLS when `tls` is set.
#[derive(Clone)]
pub struct Endpoint {
    pub addr: SocketAddr,
    pub tls: Option<TlsConnector>,
}

/// A whole answer.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    /// The `code`s of a registry error answer (`{"errors": [{"code": ..}]}`).
    pub fn error_codes(&self) -> Vec<String> {
        let body: Value = serde_json::from_slice(&self.body).unwrap_or(Value::Null);
        body["errors"]
            .as_array()
            .map(|errors| {
                errors.iter().filter_map(|e| e["code"].as_str().map(str::to_owned)).collect()
            })
            .unwrap_or_default()
    }
}

/// Sends one request on a new connection; `target` is a path and query. The
/// `host` header is the endpoint's address. Errors (connect, TLS, HTTP) are
/// returned as text so that tests can expect them.
pub async fn send(
    endpoint: &Endpoint,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Result<Response, String> {
    let mut request = hyper::Request::builder()
        .method(method)
        .uri(target)
        .header("host", endpoint.addr.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Full::new(Bytes::from(body))).map_err(|e| e.to_string())?;
    let exchange = async {
        let tcp = TcpStream::connect(endpoint.addr).await.map_err(|e| format!("connect: {e}"))?;
        match &endpoint.tls {
            None => exchange(TokioIo::new(tcp), request).await,
            Some(connector) => {
                let name = ServerName::IpAddress(endpoint.addr.ip().into());
                let tls = connector
                    .connect(name, tcp)
                    .await
                    .map_err(|e| format!("TLS handshake: {e}"))?;
                exchange(TokioIo::new(tls), request).await
            }
        }
    };
    tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("{method} {target}: no answer within {REQUEST_TIMEOUT:?}"))?
}

async fn exchange<T>(io: T, request: hyper::Request<Full<Bytes>>) -> Result<Response, String>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(io).await.map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok(Response { status, headers, body: body.to_vec() })
}

/// The path and query of `url` (an absolute URL or already a path).
fn path_and_query(url: &str) -> &str {
    match url.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("/", |slash| &rest[slash..]),
        None => url,
    }
}

pub fn basic_authorization(user: &str, password: &str) -> String {
    format!("Basic {}", STANDARD.encode(format!("{user}:{password}")))
}

/// The scheme and parameters of a `WWW-Authenticate` challenge such as
/// `Bearer realm="https://..",service="..",scope="repository:a/b:pull"`.
pub fn parse_challenge(header: &str) -> (String, BTreeMap<String, String>) {
    let (scheme, rest) = header.trim().split_once(' ').unwrap_or((header.trim(), ""));
    let mut params = BTreeMap::new();
    let mut rest = rest.trim();
    while !rest.is_empty() {
        let Some((key, after)) = rest.split_once('=') else { break };
        let key = key.trim().trim_start_matches(',').trim().to_ascii_lowercase();
        let (value, after) = if let Some(quoted) = after.strip_prefix('"') {
            // Quoted string; backslash escapes a character.
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let mut end = quoted.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next().map(|(_, c)| c)),
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    c => value.push(c),
                }
            }
            (value, &quoted[end..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (after[..end].trim().to_owned(), &after[end..])
        };
        params.insert(key, value);
        rest = after.trim_start().trim_start_matches(',').trim_start();
    }
    (scheme.to_owned(), params)
}

/// Percent-encodes everything but unreserved characters.
pub fn url_encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}

fn url_decode(value: &str) -> String {
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).map(|d| d as u8)
    }
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(high), Some(low)) => {
                    out.push(high << 4 | low);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

// ---------------------------------------------------------------------------
// The token service fixture.

/// One request the token service answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenRequest {
    pub method: String,
    /// The Basic user, if credentials were sent (right or wrong).
    pub user: Option<String>,
    pub service: Option<String>,
    /// Every scope asked for, in order.
    pub scopes: Vec<String>,
    pub status: u16,
    /// The granted access (`repository:<name>:<actions>`), when a token was issued.
    pub granted: Vec<String>,
}

/// An in-process Docker token service (see the module documentation): a
/// hyper server on 127.0.0.1 signing ES256 JWTs with a certificate from its
/// own test CA, whose CA file is the registry's `rootcertbundle`. Stops on drop.
pub struct TokenService {
    state: Arc<TokenState>,
    addr: SocketAddr,
    https: bool,
    client_tls: Option<TlsConnector>,
    dir: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

struct TokenState {
    options: TokenOptions,
    anonymous: Mutex<AnonymousAccess>,
    expires_in: Mutex<u64>,
    key: EcdsaKeyPair,
    rng: ring::rand::SystemRandom,
    /// The signing certificate, base64 DER, for the JWT `x5c` header.
    x5c: String,
    issued: AtomicUsize,
    requests: Mutex<Vec<TokenRequest>>,
}

impl Drop for TokenService {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TokenService {
    /// Starts on a free loopback port; signing keys go into `dir`. With
    /// `serving` (certificate chain and key PEM files) the realm is HTTPS.
    pub async fn start(
        dir: &Path,
        serving: Option<(PathBuf, PathBuf)>,
        options: TokenOptions,
    ) -> TokenService {
        install_crypto_provider();
        // A signing certificate from a CA of its own: distribution verifies the
        // x5c chain against rootcertbundle (the CA). ring reads PKCS#8 keys.
        make_certs_for(dir, "ec-pkcs8", &["configsum-test-token-signer"]);
        let key = PrivatePkcs8KeyDer::from_pem_file(dir.join("tls.key")).expect("signing key");
        let rng = ring::rand::SystemRandom::new();
        let key = EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_FIXED_SIGNING,
            key.secret_pkcs8_der(),
            &rng,
        )
        .expect("P-256 signing key");
        let leaf = CertificateDer::pem_file_iter(dir.join("tls.crt"))
            .expect("signing certificate")
            .next()
            .expect("a certificate")
            .expect("PEM certificate");
        let acceptor = serving.as_ref().map(|(cert, key)| {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                .expect("serving certificate")
                .collect::<Result<_, _>>()
                .expect("PEM certificates");
            let key = PrivateKeyDer::from_pem_file(key).expect("serving key");
            let config = rustls::ServerConfig::builder()
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .expect("token service TLS config");
            TlsAcceptor::from(Arc::new(config))
        });
        let client_tls = serving.as_ref().map(|(cert, _)| {
            let ca = cert.parent().expect("certificate directory").join("ca.crt");
            tls_connector(&ca, None)
        });
        let state = Arc::new(TokenState {
            anonymous: Mutex::new(options.anonymous),
            expires_in: Mutex::new(options.expires_in),
            options,
            key,
            rng,
            x5c: STANDARD.encode(leaf.as_ref()),
            issued: AtomicUsize::new(0),
            requests: Mutex::new(Vec::new()),
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind token service");
        let addr = listener.local_addr().expect("token service addr");
        let serving_state = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { continue };
                let state = serving_state.clone();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(state.answer(request)) }
                    });
                    let builder = hyper::server::conn::http1::Builder::new();
                    match acceptor {
                        None => {
                            let _ = builder.serve_connection(TokioIo::new(tcp), service).await;
                        }
                        Some(acceptor) => {
                            if let Ok(tls) = acceptor.accept(tcp).await {
                                let _ = builder.serve_connection(TokioIo::new(tls), service).await;
                            }
                        }
                    }
                });
            }
        });
        TokenService {
            state,
            addr,
            https: serving.is_some(),
            client_tls,
            dir: dir.to_owned(),
            task,
        }
    }

    /// The realm URL the registry puts in its challenges.
    pub fn realm(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}/token", self.addr)
    }

    pub fn service(&self) -> &'static str {
        TOKEN_SERVICE
    }

    pub fn issuer(&self) -> &'static str {
        TOKEN_ISSUER
    }

    pub fn endpoint(&self) -> Endpoint {
        Endpoint { addr: self.addr, tls: self.client_tls.clone() }
    }

    /// The CA that signed the token-signing certificate.
    pub fn root_cert_bundle(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// How many tokens the realm issued over HTTP (not counting [`Self::mint`]).
    pub fn tokens_issued(&self) -> usize {
        self.state.issued.load(Ordering::SeqCst)
    }

    /// Every request the realm answered, oldest first.
    pub fn requests(&self) -> Vec<TokenRequest> {
        self.state.requests.lock().expect("requests lock").clone()
    }

    /// `expires_in` (and `exp - iat`) of the tokens issued from now on.
    pub fn set_expires_in(&self, seconds: u64) {
        *self.state.expires_in.lock().expect("expires_in lock") = seconds;
    }

    /// What anonymous callers get from now on.
    pub fn set_anonymous(&self, access: AnonymousAccess) {
        *self.state.anonymous.lock().expect("anonymous lock") = access;
    }

    /// A token for `subject` granting `actions` on repository `repo`, signed
    /// like the realm's but not counted as issued.
    pub fn mint(&self, subject: &str, repo: &str, actions: &[&str]) -> String {
        let access = vec![json!({"type": "repository", "name": repo, "actions": actions})];
        let expires_in = *self.state.expires_in.lock().expect("expires_in lock");
        self.state.sign(subject, access, expires_in)
    }
}

impl TokenState {
    fn sign(&self, subject: &str, access: Vec<Value>, expires_in: u64) -> String {
        static JTI: AtomicUsize = AtomicUsize::new(0);
        let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs();
        let header = json!({"typ": "JWT", "alg": "ES256", "x5c": [self.x5c]});
        let claims = json!({
            "iss": TOKEN_ISSUER,
            "sub": subject,
            // distribution 2.8 reads `aud` as one string.
            "aud": TOKEN_SERVICE,
            "exp": now + expires_in,
            "nbf": now,
            "iat": now,
            "jti": format!("{}-{}", std::process::id(), JTI.fetch_add(1, Ordering::Relaxed)),
            "access": access,
        });
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        // ES256 in JWS form: r || s, 64 bytes.
        let signature = self.key.sign(&self.rng, signing_input.as_bytes()).expect("sign token");
        format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(signature.as_ref()))
    }

    fn answer(
        &self,
        request: hyper::Request<hyper::body::Incoming>,
    ) -> hyper::Response<Full<Bytes>> {
        let method = request.method().as_str().to_owned();
        let mut record = TokenRequest {
            method: method.clone(),
            user: None,
            service: None,
            scopes: Vec::new(),
            status: 0,
            granted: Vec::new(),
        };
        let (status, body) = self.decide(&request, &mut record);
        record.status = status;
        self.requests.lock().expect("requests lock").push(record);
        let mut response =
            hyper::Response::builder().status(status).header("content-type", "application/json");
        if status == 405 {
            response = response.header("allow", "GET");
        }
        response.body(Full::new(Bytes::from(body.to_string()))).expect("response")
    }

    fn decide(
        &self,
        request: &hyper::Request<hyper::body::Incoming>,
        record: &mut TokenRequest,
    ) -> (u16, Value) {
        if request.uri().path() != "/token" {
            return (404, json!({"details": "not found"}));
        }
        if request.method() != hyper::Method::GET {
            // The OAuth2 form (POST) is not implemented: 405 makes containerd
            // fall back to GET, as it does for registries without it.
            return (405, json!({"details": "only GET is supported"}));
        }
        for (key, value) in request.uri().query().unwrap_or("").split('&').filter_map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (!key.is_empty()).then(|| (url_decode(key), url_decode(value)))
        }) {
            match key.as_str() {
                "service" => record.service = Some(value),
                "scope" => record
                    .scopes
                    .extend(value.split(' ').filter(|s| !s.is_empty()).map(str::to_owned)),
                _ => {}
            }
        }
        let credentials =
            request.headers().get("authorization").and_then(|value| value.to_str().ok()).and_then(
                |value| {
                    let (scheme, encoded) = value.split_once(' ')?;
                    scheme.eq_ignore_ascii_case("basic").then_some(())?;
                    let decoded = String::from_utf8(STANDARD.decode(encoded.trim()).ok()?).ok()?;
                    let (user, password) = decoded.split_once(':')?;
                    Some((user.to_owned(), password.to_owned()))
                },
            );
        let authenticated = match &credentials {
            Some((user, password)) => {
                record.user = Some(user.clone());
                if *user != self.options.user || *password != self.options.password {
                    return (401, json!({"details": "incorrect username or password"}));
                }
                true
            }
            None => false,
        };
        if record.service.as_deref() != Some(TOKEN_SERVICE) {
            return (400, json!({"details": format!("unknown service {:?}", record.service)}));
        }
        let anonymous = *self.anonymous.lock().expect("anonymous lock");
        if !authenticated && anonymous == AnonymousAccess::Refused {
            return (401, json!({"details": "authentication required"}));
        }
        let allowed: &[&str] = match (authenticated, anonymous) {
            (true, _) => &["pull", "push", "delete"],
            (false, AnonymousAccess::Pull) => &["pull"],
            (false, _) => &[],
        };
        let mut access = Vec::new();
        for scope in &record.scopes {
            // repository:<name>:<actions>; the name has no ':' (no host part).
            let mut parts = scope.splitn(2, ':');
            let kind = parts.next().unwrap_or("");
            let Some((name, actions)) = parts.next().and_then(|rest| rest.rsplit_once(':')) else {
                continue;
            };
            if kind != "repository" {
                continue;
            }
            let granted: Vec<&str> = actions
                .split(',')
                .flat_map(|action| match action {
                    "*" => allowed.to_vec(),
                    action if allowed.contains(&action) => vec![action],
                    _ => vec![],
                })
                .collect();
            if granted.is_empty() {
                continue;
            }
            record.granted.push(format!("repository:{name}:{}", granted.join(",")));
            access.push(json!({"type": "repository", "name": name, "actions": granted}));
        }
        let expires_in = *self.expires_in.lock().expect("expires_in lock");
        let subject = credentials.map(|(user, _)| user).unwrap_or_default();
        let token = self.sign(&subject, access, expires_in);
        self.issued.fetch_add(1, Ordering::SeqCst);
        let issued_at = humantime::format_rfc3339_nanos(SystemTime::now()).to_string();
        (
            200,
            json!({"token": token, "access_token": token, "expires_in": expires_in, "issued_at": issued_at}),
        )
    }
}
