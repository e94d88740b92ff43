//! The registry fixture (tests/support/registry.rs) is a real distribution
//! registry: pushes land and are served back with the digests of the bytes
//! sent, tags move, and each auth mode (none, HTTPS with a test CA, htpasswd
//! Basic, token) refuses and admits as the real thing does.
//!
//! Also recorded here, as asserted, is what distribution 2.8 answers where
//! registries differ: unknown tags and repositories, `Accept` headers that
//! leave out the stored manifest's type, and deletes by tag.

#[path = "support/registry.rs"]
mod registry;
#[path = "support/server.rs"]
mod server;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use registry::*;
use server::{TempDir, make_certs, tls_connector};

const REPO: &str = "team/app";

/// Every test here finishes well within this, or fails.
async fn bounded<F: Future<Output = ()>>(test: F) {
    tokio::time::timeout(Duration::from_secs(20), test).await.expect("test took over 20 s");
}

fn manifest_path(repo: &str, reference: &str) -> String {
    format!("/v2/{repo}/manifests/{reference}")
}

/// `HEAD` a manifest with `accept` and these extra headers.
async fn head(
    registry: &Registry,
    repo: &str,
    reference: &str,
    accept: &str,
    headers: &[(&str, &str)],
) -> Response {
    let mut all = vec![("accept", accept)];
    all.extend_from_slice(headers);
    registry.request("HEAD", &manifest_path(repo, reference), &all).await
}

fn digest(response: &Response) -> Option<&str> {
    response.header("docker-content-digest")
}

#[tokio::test]
async fn anonymous_registry_serves_what_was_pushed_and_moves_tags() {
    bounded(async {
        let registry = Registry::anonymous().await;
        assert!(registry.base_url().starts_with("http://127.0.0.1:"));

        let v1 = registry.push_image(REPO, "v1", "one").await;
        let v2 = registry.push_image(REPO, "v2", "two").await;
        assert_ne!(v1, v2, "distinct content, distinct digests");
        assert_eq!(v1.len(), "sha256:".len() + 64);

        let answer = head(&registry, REPO, "v1", OCI_MANIFEST, &[]).await;
        assert_eq!(answer.status, 200);
        assert_eq!(digest(&answer), Some(v1.as_str()));
        assert_eq!(answer.header("content-type"), Some(OCI_MANIFEST));
        assert!(answer.body.is_empty());

        // The manifest's bytes are the ones whose digest was computed, and its
        // layer is a real tar+gzip.
        let manifest = registry.get_manifest(REPO, &v1, OCI_MANIFEST).await;
        assert_eq!(manifest.status, 200);
        assert_eq!(sha256_digest(&manifest.body), v1);
        let layer_digest = manifest.json()["layers"][0]["digest"].as_str().unwrap().to_owned();
        let layer = registry.request("GET", &format!("/v2/{REPO}/blobs/{layer_digest}"), &[]).await;
        assert_eq!(layer.status, 200);
        assert_eq!(sha256_digest(&layer.body), layer_digest);
        assert_eq!(untar(&layer.body), "one\nlinux/amd64\n");

        // Retagging moves the tag.
        assert_eq!(registry.retag(REPO, "v1", "stable").await, v1);
        assert_eq!(digest(&head(&registry, REPO, "stable", OCI_MANIFEST, &[]).await), Some(&*v1));
        assert_eq!(registry.retag(REPO, "v2", "stable").await, v2);
        assert_eq!(digest(&head(&registry, REPO, "stable", OCI_MANIFEST, &[]).await), Some(&*v2));
        // Pushing new content under a tag moves it as well.
        let v3 = registry.push_image(REPO, "stable", "three").await;
        assert_eq!(digest(&head(&registry, REPO, "stable", OCI_MANIFEST, &[]).await), Some(&*v3));

        // Docker media types.
        let docker = registry.push_docker_v2(REPO, "docker", "four").await;
        let answer = head(&registry, REPO, "docker", DOCKER_MANIFEST, &[]).await;
        assert_eq!((answer.status, digest(&answer)), (200, Some(docker.as_str())));
        assert_eq!(answer.header("content-type"), Some(DOCKER_MANIFEST));

        // 2.8 will not serve an OCI manifest to an Accept without its type,
        // not even */*: 404 MANIFEST_UNKNOWN "OCI manifest found, but accept
        // header does not support OCI manifests".
        for accept in [DOCKER_MANIFEST, "*/*", ""] {
            let answer = registry.get_manifest(REPO, "v1", accept).await;
            assert_eq!(answer.status, 404, "Accept {accept:?}");
            assert_eq!(answer.error_codes(), ["MANIFEST_UNKNOWN"], "Accept {accept:?}");
        }
        let answer = head(&registry, REPO, "v1", DOCKER_MANIFEST, &[]).await;
        assert_eq!((answer.status, digest(&answer)), (404, None));

        // Unknown tag or digest: 404 MANIFEST_UNKNOWN. An unknown repository
        // is MANIFEST_UNKNOWN as well on the manifests endpoint (2.8 checks
        // the tag, not the name); NAME_UNKNOWN only comes from tags/list.
        // HEAD answers 404 with no body and no digest.
        let unknown_digest = format!("sha256:{}", "0".repeat(64));
        for (repo, reference) in [
            (REPO, "no-such-tag"),
            (REPO, unknown_digest.as_str()),
            ("team/no-such-app", "v1"),
            ("team/no-such-app", unknown_digest.as_str()),
        ] {
            let answer = registry.get_manifest(repo, reference, ACCEPT_ALL).await;
            assert_eq!(answer.status, 404, "{repo}:{reference}");
            assert_eq!(answer.error_codes(), ["MANIFEST_UNKNOWN"], "{repo}:{reference}");
            let answer = head(&registry, repo, reference, ACCEPT_ALL, &[]).await;
            assert_eq!((answer.status, digest(&answer)), (404, None), "{repo}:{reference}");
            assert!(answer.body.is_empty());
        }
        let tags = registry.request("GET", "/v2/team/no-such-app/tags/list", &[]).await;
        assert_eq!((tags.status, tags.error_codes()), (404, vec!["NAME_UNKNOWN".to_owned()]));

        // Deletes: 2.8 refuses DELETE by tag (it parses the tag as a digest),
        // so delete_tag edits the storage; delete_manifest removes the
        // manifest and its tags.
        let by_tag = registry.request("DELETE", &manifest_path(REPO, "v2"), &[]).await;
        assert_eq!((by_tag.status, by_tag.error_codes()), (400, vec!["DIGEST_INVALID".to_owned()]));
        registry.delete_tag(REPO, "v2");
        assert_eq!(head(&registry, REPO, "v2", OCI_MANIFEST, &[]).await.status, 404);
        assert_eq!(head(&registry, REPO, &v2, OCI_MANIFEST, &[]).await.status, 200);
        registry.delete_manifest(REPO, &v1).await;
        assert_eq!(head(&registry, REPO, &v1, OCI_MANIFEST, &[]).await.status, 404);
        let tags = registry.request("GET", &format!("/v2/{REPO}/tags/list"), &[]).await.json();
        assert_eq!(tags["tags"], serde_json::json!(["docker", "stable"]));
    })
    .await;
}

#[tokio::test]
async fn indexes_and_manifest_lists() {
    bounded(async {
        let registry = Registry::anonymous().await;

        let (index, images) = registry.push_multi_platform(REPO, "multi", "m1", Format::Oci).await;
        assert_eq!(images.len(), 2);
        assert_eq!(images[1].platform.as_deref(), Some("linux/arm64"));
        // HEAD of an OCI index sets Docker-Content-Digest (and Content-Type,
        // Content-Length) when Accept names the index type.
        for accept in [OCI_INDEX, ACCEPT_ALL] {
            let answer = head(&registry, REPO, "multi", accept, &[]).await;
            assert_eq!((answer.status, digest(&answer)), (200, Some(index.as_str())), "{accept}");
            assert_eq!(answer.header("content-type"), Some(OCI_INDEX));
        }
        // Without it: 404 MANIFEST_UNKNOWN ("OCI index found, but accept
        // header does not support OCI indexes"), even for a client that
        // accepts Docker manifest lists.
        for accept in [OCI_MANIFEST, DOCKER_MANIFEST_LIST] {
            let answer = registry.get_manifest(REPO, "multi", accept).await;
            assert_eq!(
                (answer.status, answer.error_codes()),
                (404, vec!["MANIFEST_UNKNOWN".into()])
            );
        }
        let got = registry.get_manifest(REPO, "multi", OCI_INDEX).await;
        assert_eq!(sha256_digest(&got.body), index);
        let children: Vec<_> = got.json()["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["digest"].clone())
            .collect();
        assert_eq!(children, [images[0].digest.as_str(), images[1].digest.as_str()]);

        // A new build of one platform moves the index's digest.
        let arm = registry.push_platform_image(REPO, "linux/arm64", "m2", Format::Oci).await;
        let moved = registry.push_index(REPO, "multi", &[images[0].clone(), arm]).await;
        assert_ne!(moved, index);
        assert_eq!(digest(&head(&registry, REPO, "multi", OCI_INDEX, &[]).await), Some(&*moved));

        let (list, images) =
            registry.push_multi_platform(REPO, "docker-multi", "d1", Format::Docker).await;
        let answer = head(&registry, REPO, "docker-multi", DOCKER_MANIFEST_LIST, &[]).await;
        assert_eq!((answer.status, digest(&answer)), (200, Some(list.as_str())));
        assert_eq!(answer.header("content-type"), Some(DOCKER_MANIFEST_LIST));
        // 2.8 answers a client that accepts only single Docker manifests with
        // the list's linux/amd64 manifest and *its* digest...
        let answer = head(&registry, REPO, "docker-multi", DOCKER_MANIFEST, &[]).await;
        assert_eq!((answer.status, digest(&answer)), (200, Some(images[0].digest.as_str())));
        // ...and one that accepts only OCI indexes with 400 MANIFEST_INVALID.
        let answer = registry.get_manifest(REPO, "docker-multi", OCI_INDEX).await;
        assert_eq!((answer.status, answer.error_codes()), (400, vec!["MANIFEST_INVALID".into()]));

        // Retagging an index keeps its media type and digest.
        assert_eq!(registry.retag(REPO, "docker-multi", "floating").await, list);
        let answer = head(&registry, REPO, "floating", ACCEPT_ALL, &[]).await;
        assert_eq!(answer.header("content-type"), Some(DOCKER_MANIFEST_LIST));
        assert_eq!(registry.retag(REPO, "multi", "floating").await, moved);
        assert_eq!(
            digest(&head(&registry, REPO, "floating", ACCEPT_ALL, &[]).await),
            Some(&*moved)
        );
    })
    .await;
}

#[tokio::test]
async fn https_registry_is_reachable_with_the_test_ca_only() {
    bounded(async {
        let registry = Registry::anonymous_tls().await;
        assert!(registry.base_url().starts_with("https://127.0.0.1:"));
        let ca = registry.ca_file().expect("a CA file").to_owned();
        assert!(std::fs::read_to_string(&ca).unwrap().contains("BEGIN CERTIFICATE"));

        let pushed = registry.push_image(REPO, "v1", "tls").await;
        let answer = head(&registry, REPO, "v1", OCI_MANIFEST, &[]).await;
        assert_eq!((answer.status, digest(&answer)), (200, Some(pushed.as_str())));

        // Refused by a client that trusts no CA (UnknownIssuer), or another
        // CA of the same name (BadSignature).
        let nothing = rustls::ClientConfig::builder()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let other = TempDir::new("registry-other-ca");
        make_certs(&other.0, "ec-sec1");
        for tls in [
            tokio_rustls::TlsConnector::from(Arc::new(nothing)),
            tls_connector(&other.path("ca.crt"), None),
        ] {
            let endpoint = Endpoint { addr: registry.endpoint().addr, tls: Some(tls) };
            let error = send(&endpoint, "GET", "/v2/", &[], Vec::new()).await.unwrap_err();
            assert!(error.contains("TLS handshake: invalid peer certificate"), "{error}");
        }
        // Plain HTTP to the HTTPS port: Go's 400.
        let plain = Endpoint { addr: registry.endpoint().addr, tls: None };
        let answer = send(&plain, "GET", "/v2/", &[], Vec::new()).await.unwrap();
        assert_eq!(answer.status, 400);
    })
    .await;
}

#[tokio::test]
async fn basic_auth_registry_wants_the_right_password() {
    bounded(async {
        let registry = Registry::basic("fixture-user", "correct horse").await;
        // The helpers push with the credentials.
        let v1 = registry.push_image(REPO, "v1", "basic-1").await;

        let anonymous = head(&registry, REPO, "v1", OCI_MANIFEST, &[]).await;
        assert_eq!(anonymous.status, 401);
        assert_eq!(anonymous.header("www-authenticate"), Some(r#"Basic realm="configsum-test""#));
        let anonymous = registry.request("GET", &manifest_path(REPO, "v1"), &[]).await;
        assert_eq!((anonymous.status, anonymous.error_codes()), (401, vec!["UNAUTHORIZED".into()]));

        for (user, password) in [("fixture-user", "wrong"), ("someone", "correct horse")] {
            let wrong = basic_authorization(user, password);
            let answer =
                head(&registry, REPO, "v1", OCI_MANIFEST, &[("authorization", &wrong)]).await;
            assert_eq!(answer.status, 401, "{user}:{password}");
            assert!(answer.header("www-authenticate").unwrap().starts_with("Basic "));
        }

        let (user, password) = registry.credentials().unwrap();
        let right = basic_authorization(user, password);
        let answer = head(&registry, REPO, "v1", OCI_MANIFEST, &[("authorization", &right)]).await;
        assert_eq!((answer.status, digest(&answer)), (200, Some(v1.as_str())));

        let v2 = registry.push_image(REPO, "v2", "basic-2").await;
        assert_eq!(registry.retag(REPO, "v2", "v1").await, v2);
        let answer = head(&registry, REPO, "v1", OCI_MANIFEST, &[("authorization", &right)]).await;
        assert_eq!(digest(&answer), Some(v2.as_str()));
    })
    .await;
}

#[tokio::test]
async fn token_auth_with_anonymous_pull() {
    bounded(async {
        let options = TokenOptions { expires_in: 120, ..TokenOptions::default() };
        let registry = Registry::token(options).await;
        let tokens = registry.token_service().unwrap();
        let v1 = registry.push_image(REPO, "v1", "token-1").await;
        assert_eq!(tokens.tokens_issued(), 0, "the helpers' pushes mint tokens in-process");

        // The registry's own challenge.
        let anonymous = head(&registry, REPO, "v1", OCI_MANIFEST, &[]).await;
        assert_eq!(anonymous.status, 401);
        let challenge = anonymous.header("www-authenticate").unwrap().to_owned();
        let (scheme, params) = parse_challenge(&challenge);
        assert_eq!(scheme, "Bearer");
        assert_eq!(params["realm"], tokens.realm());
        assert_eq!(params["service"], TOKEN_SERVICE);
        assert_eq!(params["scope"], "repository:team/app:pull");

        // Follow it.
        let answer = registry.fetch_token(&challenge, None).await;
        assert_eq!(answer.status, 200, "{}", answer.text());
        let body = answer.json();
        let token = body["token"].as_str().unwrap().to_owned();
        assert_eq!(body["access_token"], token.as_str());
        assert_eq!(body["expires_in"], 120);
        humantime::parse_rfc3339(body["issued_at"].as_str().unwrap()).expect("RFC 3339 issued_at");
        assert_eq!(token.split('.').count(), 3, "a JWT");
        assert_eq!(tokens.tokens_issued(), 1);
        let request = tokens.requests().pop().unwrap();
        assert_eq!(request.user, None);
        assert_eq!(request.scopes, ["repository:team/app:pull"]);
        assert_eq!(request.granted, ["repository:team/app:pull"]);

        let bearer = format!("Bearer {token}");
        let answer = head(&registry, REPO, "v1", OCI_MANIFEST, &[("authorization", &bearer)]).await;
        assert_eq!((answer.status, digest(&answer)), (200, Some(v1.as_str())));

        // The same token sees the tag move, and no new token was issued.
        let v2 = registry.push_image(REPO, "v2", "token-2").await;
        registry.retag(REPO, "v2", "v1").await;
        let answer = head(&registry, REPO, "v1", OCI_MANIFEST, &[("authorization", &bearer)]).await;
        assert_eq!(digest(&answer), Some(v2.as_str()));
        assert_eq!(tokens.tokens_issued(), 1);

        // The registry checks the token's scope and signature.
        let auth = [("authorization", bearer.as_str())];
        let other = head(&registry, "team/other", "v1", OCI_MANIFEST, &auth).await;
        assert_eq!(other.status, 401);
        let (_, params) = parse_challenge(other.header("www-authenticate").unwrap());
        assert_eq!(params["error"], "insufficient_scope");
        assert_eq!(params["scope"], "repository:team/other:pull");
        // The same token with its claims edited to name team/other.
        let parts: Vec<&str> = token.split('.').collect();
        let claims = String::from_utf8(URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
        let claims = URL_SAFE_NO_PAD.encode(claims.replace("team/app", "team/other"));
        let forged = format!("Bearer {}.{claims}.{}", parts[0], parts[2]);
        let auth = [("authorization", forged.as_str())];
        let answer = head(&registry, "team/other", "v1", OCI_MANIFEST, &auth).await;
        assert_eq!(answer.status, 401);
        let (_, params) = parse_challenge(answer.header("www-authenticate").unwrap());
        assert_eq!(params["error"], "invalid_token");

        // Anonymous callers get pull and nothing more: a push is refused.
        let push_challenge = format!(
            r#"Bearer realm="{}",service="{TOKEN_SERVICE}",scope="repository:team/app:pull,push""#,
            tokens.realm()
        );
        let answer = registry.fetch_token(&push_challenge, None).await;
        assert_eq!(tokens.requests().pop().unwrap().granted, ["repository:team/app:pull"]);
        let bearer = format!("Bearer {}", answer.json()["token"].as_str().unwrap());
        let upload = registry
            .request("POST", &format!("/v2/{REPO}/blobs/uploads/"), &[("authorization", &bearer)])
            .await;
        assert_eq!(upload.status, 401);

        // The test chooses expires_in; the realm refuses other services and POST.
        tokens.set_expires_in(7);
        let answer = registry.fetch_token(&challenge, None).await;
        assert_eq!(answer.json()["expires_in"], 7);
        let wrong_service = challenge.replace(TOKEN_SERVICE, "elsewhere");
        assert_eq!(registry.fetch_token(&wrong_service, None).await.status, 400);
        let post = send(&tokens.endpoint(), "POST", "/token", &[], Vec::new()).await.unwrap();
        assert_eq!(post.status, 405);
        assert_eq!(tokens.tokens_issued(), 3);
    })
    .await;
}

#[tokio::test]
async fn token_auth_with_credentials_required_over_https() {
    bounded(async {
        let options = TokenOptions {
            anonymous: AnonymousAccess::EmptyToken,
            https_realm: true,
            ..TokenOptions::default()
        };
        let registry =
            Registry::start(RegistryOptions { tls: true, auth: Auth::Token(options) }).await;
        let tokens = registry.token_service().unwrap();
        let v1 = registry.push_image(REPO, "v1", "private").await;

        let anonymous = head(&registry, REPO, "v1", OCI_MANIFEST, &[]).await;
        assert_eq!(anonymous.status, 401);
        let challenge = anonymous.header("www-authenticate").unwrap().to_owned();
        assert!(parse_challenge(&challenge).1["realm"].starts_with("https://127.0.0.1:"));

        // Docker Hub's answer for a private repository: a token that grants
        // nothing, which the registry refuses.
        let empty = registry.fetch_token(&challenge, None).await;
        assert_eq!(empty.status, 200);
        assert!(tokens.requests().pop().unwrap().granted.is_empty());
        let bearer = format!("Bearer {}", empty.json()["token"].as_str().unwrap());
        let answer = head(&registry, REPO, "v1", OCI_MANIFEST, &[("authorization", &bearer)]).await;
        assert_eq!(answer.status, 401);
        let (_, params) = parse_challenge(answer.header("www-authenticate").unwrap());
        assert_eq!(params["error"], "insufficient_scope");

        // Wrong credentials: the token service's 401.
        let wrong = registry.fetch_token(&challenge, Some(("fixture-user", "wrong"))).await;
        assert_eq!(wrong.status, 401);
        assert_eq!(wrong.json()["details"], "incorrect username or password");

        // The right ones.
        let credentials = registry.credentials().unwrap();
        let answer = registry.fetch_token(&challenge, Some(credentials)).await;
        assert_eq!(answer.status, 200);
        let request = tokens.requests().pop().unwrap();
        assert_eq!(request.user.as_deref(), Some("fixture-user"));
        let bearer = format!("Bearer {}", answer.json()["token"].as_str().unwrap());
        let answer = head(&registry, REPO, "v1", OCI_MANIFEST, &[("authorization", &bearer)]).await;
        assert_eq!((answer.status, digest(&answer)), (200, Some(v1.as_str())));

        // Or the token service refuses anonymous callers itself.
        tokens.set_anonymous(AnonymousAccess::Refused);
        assert_eq!(registry.fetch_token(&challenge, None).await.status, 401);
        assert_eq!(tokens.tokens_issued(), 2);
    })
    .await;
}

/// The one file in a tar+gzip layer, read by the system's tar.
fn untar(layer: &[u8]) -> String {
    use std::io::Write as _;
    let mut tar = std::process::Command::new("tar")
        .args(["-xzO", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("tar");
    tar.stdin.take().unwrap().write_all(layer).unwrap();
    let output = tar.wait_with_output().unwrap();
    assert!(output.status.success(), "tar rejected the layer");
    String::from_utf8(output.stdout).unwrap()
}
