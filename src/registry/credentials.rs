//! Registry credentials from Kubernetes pull secrets, and which of them apply to an image.
//!
//! Two secret types carry them: `kubernetes.io/dockerconfigjson` (key `.dockerconfigjson`,
//! `{"auths": {"<registry>": {...}}}`) and the older `kubernetes.io/dockercfg` (key `.dockercfg`,
//! the same map without the `auths` wrapper). An entry holds either `auth`, base64 of
//! `user:password` (it wins when both are present, as in the kubelet), or `username` and
//! `password`. Other fields (`email`, `identitytoken`) and `credsStore`/`credHelpers` are
//! ignored: a pull secret never makes this process run a credential helper.
//!
//! Registry keys are matched to an image as the kubelet does: the scheme is dropped, a leading
//! `/v1/` or `/v2/` path too (`https://index.docker.io/v1/` is `index.docker.io`), the port must
//! be equal, the host must match label by label (`*` and `?` wildcards, `*.example.com`), and a
//! key's path must prefix the image's repository path (`quay.io/coreos` applies to
//! `quay.io/coreos/etcd` only). `docker.io`, `index.docker.io` and `registry-1.docker.io` all
//! mean Docker Hub (the kubelet accepts the first two). More specific keys come first.
//!
//! Nothing here prints what a secret holds: [`PullCredential`] and [`Secret`] redact themselves
//! in `Debug`, and [`CredentialError`] says where a secret is malformed, never with what.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::OnceLock;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use hmac::{Hmac, Mac};
use hyper::header::HeaderValue;
use k8s_openapi::api::core::v1::Secret as KubeSecret;
use serde::Deserialize;
use sha2::Sha256;

use super::reference::{DOCKER_HUB, ImageRef, is_docker_hub, split_port};

/// The Secret type of `.dockerconfigjson` pull secrets.
pub const DOCKER_CONFIG_JSON_TYPE: &str = "kubernetes.io/dockerconfigjson";
/// The data key of `.dockerconfigjson` pull secrets.
pub const DOCKER_CONFIG_JSON_KEY: &str = ".dockerconfigjson";
/// The Secret type of the older `.dockercfg` pull secrets.
pub const DOCKER_CFG_TYPE: &str = "kubernetes.io/dockercfg";
/// The data key of `.dockercfg` pull secrets.
pub const DOCKER_CFG_KEY: &str = ".dockercfg";

/// A string that is never printed: `Debug` and `Display` show `<redacted>`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Self {
        Secret(value)
    }

    /// The value, for the one place that sends it to a registry.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The registries a credential applies to, read from a pull secret's key as the kubelet reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegistryKey {
    /// Lower-case host, possibly with `*`/`?` wildcards; `docker.io` for every Docker Hub alias.
    host: String,
    port: Option<String>,
    /// Empty, or a path such as `/coreos` that the image's `/<repository>` must start with.
    path: String,
}

impl RegistryKey {
    /// Reads a key such as `https://index.docker.io/v1/`, `ghcr.io`, `localhost:5000`,
    /// `https://harbor.example.com/v2/`, `quay.io/coreos`. `None` when it names no host.
    pub fn parse(key: &str) -> Option<RegistryKey> {
        let key = key.trim();
        let lower = key.to_ascii_lowercase();
        let rest = if lower.starts_with("https://") {
            &key[8..]
        } else if lower.starts_with("http://") {
            &key[7..]
        } else {
            key
        };
        let (host_port, path) = match rest.find('/') {
            Some(slash) => (&rest[..slash], &rest[slash..]),
            None => (rest, ""),
        };
        // `/v1/…` and `/v2/…` stand for the host itself, as in Docker's own lookup.
        let path =
            if path.starts_with("/v1/") || path.starts_with("/v2/") { &path[3..] } else { path };
        let path = if path == "/" { "" } else { path };
        let (host, port) = split_port(host_port);
        if host.is_empty()
            || port.is_some_and(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
        {
            return None;
        }
        let host =
            if is_docker_hub(host) { DOCKER_HUB.to_owned() } else { host.to_ascii_lowercase() };
        Some(RegistryKey { host, port: port.map(str::to_owned), path: path.to_owned() })
    }

    /// Whether a credential under this key applies to `image`: the same number of host labels,
    /// each matched by [`glob`], the same port, and the path a prefix of the repository's.
    pub fn matches(&self, image: &ImageRef) -> bool {
        let (host, port) = image.host_and_port();
        if self.port.as_deref() != port || host.len() > MAX_HOST {
            return false;
        }
        let (mut keys, mut hosts) = (self.host.split('.'), host.split('.'));
        loop {
            match (keys.next(), hosts.next()) {
                (None, None) => break,
                (Some(k), Some(h)) if glob(k.as_bytes(), h.as_bytes()) => {}
                _ => return false,
            }
        }
        match self.path.strip_prefix('/') {
            Some(path) => image.repository().starts_with(path),
            None => self.path.is_empty(),
        }
    }

    /// How specific the key is: a longer path is preferred, as the kubelet's ordering does.
    fn specificity(&self) -> usize {
        self.path.len()
    }
}

/// Longest host matched; a DNS name has at most 253 characters.
const MAX_HOST: usize = 253;
/// Longest label matched; a DNS label has at most 63 characters. Keys with longer labels match
/// nothing, which bounds [`glob`]'s work per label to 63 × 63 steps.
const MAX_LABEL: usize = 63;

/// Shell-style match of one host label, as Go's `filepath.Match` does for the kubelet: `*` any
/// run of characters, `?` one character. Greedy with one backtrack point (the last `*`), so the
/// work is at most pattern × text, never exponential: a pull secret's key is tenant input and
/// is matched on the webhook's request path.
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    if pattern.len() > MAX_LABEL || text.len() > MAX_LABEL {
        return false;
    }
    let (mut p, mut t) = (0, 0);
    // Where the last `*` was, and where in the text it started matching.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                // Let the last `*` swallow one more character and retry after it.
                Some((star_p, star_t)) => {
                    star = Some((star_p, star_t + 1));
                    p = star_p + 1;
                    t = star_t + 1;
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// One username and password from a pull secret, with the registries it applies to.
/// `Debug` shows the registry key only.
#[derive(Clone, PartialEq, Eq)]
pub struct PullCredential {
    key: RegistryKey,
    username: Secret,
    password: Secret,
}

impl fmt::Debug for PullCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PullCredential")
            .field("key", &self.key)
            .field("username", &self.username)
            .field("password", &self.password)
            .finish()
    }
}

impl PullCredential {
    /// A credential for the registries `key` names (see [`RegistryKey::parse`]).
    pub fn new(key: RegistryKey, username: String, password: String) -> Self {
        PullCredential { key, username: Secret(username), password: Secret(password) }
    }

    pub fn key(&self) -> &RegistryKey {
        &self.key
    }

    /// `Authorization: Basic …` for the registry, or for a Bearer challenge's token realm; marked
    /// sensitive, so no HTTP library prints it.
    pub fn basic_authorization(&self) -> HeaderValue {
        let pair = format!("{}:{}", self.username.expose(), self.password.expose());
        let encoded = STANDARD.encode(pair);
        // Base64 is always a valid header value.
        let mut value = HeaderValue::from_str(&format!("Basic {encoded}"))
            .unwrap_or_else(|_| HeaderValue::from_static("Basic"));
        value.set_sensitive(true);
        value
    }

    /// The user name, for tests that check which credential was tried.
    #[cfg(test)]
    pub fn username(&self) -> &str {
        self.username.expose()
    }

    /// The credential's identity: an HMAC of username and password under a key drawn at start-up,
    /// so equal credentials share cache entries and the secret never appears in a key or a log.
    pub fn identity(&self) -> CredentialId {
        let mut mac = keyed_mac();
        mac.update(&(self.username.0.len() as u64).to_be_bytes());
        mac.update(self.username.0.as_bytes());
        mac.update(self.password.0.as_bytes());
        CredentialId(mac.finalize().into_bytes().into())
    }
}

/// A credential's (or an ordered list of credentials') identity; see [`PullCredential::identity`].
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CredentialId([u8; 32]);

impl CredentialId {
    /// The identity of trying `credentials` in that order.
    pub fn of_list<'a>(credentials: impl IntoIterator<Item = &'a PullCredential>) -> CredentialId {
        let mut mac = keyed_mac();
        for credential in credentials {
            mac.update(&credential.identity().0);
        }
        CredentialId(mac.finalize().into_bytes().into())
    }
}

impl fmt::Debug for CredentialId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CredentialId(")?;
        for byte in &self.0[..4] {
            write!(f, "{byte:02x}")?;
        }
        write!(f, "…)")
    }
}

fn keyed_mac() -> Hmac<Sha256> {
    static KEY: OnceLock<[u8; 32]> = OnceLock::new();
    let key = KEY.get_or_init(|| {
        let mut key = [0u8; 32];
        if getrandom::getrandom(&mut key).is_err() {
            // No OS randomness: std's per-process random hash keys are the next best thing.
            use std::hash::{BuildHasher, Hasher};
            let state = std::collections::hash_map::RandomState::new();
            for (i, chunk) in key.chunks_mut(8).enumerate() {
                let mut hasher = state.build_hasher();
                hasher.write_usize(i);
                chunk.copy_from_slice(&hasher.finish().to_be_bytes());
            }
        }
        key
    });
    // HMAC takes keys of any length.
    match Hmac::<Sha256>::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC accepts a 32-byte key"),
    }
}

/// Why a pull secret gave no credentials. Never includes any of the secret's data.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    #[error("not a pull secret (type {0})")]
    NotAPullSecret(String),
    #[error("the secret has no {0} key")]
    MissingKey(&'static str),
    #[error("the {key} key is not a JSON registry map (line {line}, column {column})")]
    Malformed { key: &'static str, line: usize, column: usize },
    #[error("entry {entry} of {key} has an auth field that is not base64 of user:password")]
    BadAuth { key: &'static str, entry: usize },
}

#[derive(Deserialize)]
struct DockerConfigJson {
    #[serde(default)]
    auths: BTreeMap<String, DockerConfigEntry>,
}

#[derive(Deserialize)]
struct DockerConfigEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

/// Reads the credentials of a pull secret of either type. Entries whose key names no host, and
/// entries with neither user nor password (an anonymous pull), are left out.
pub fn credentials_from_secret(
    secret: &KubeSecret,
) -> Result<Vec<PullCredential>, CredentialError> {
    let secret_type = secret.type_.as_deref().unwrap_or("Opaque");
    let key = match secret_type {
        DOCKER_CONFIG_JSON_TYPE => DOCKER_CONFIG_JSON_KEY,
        DOCKER_CFG_TYPE => DOCKER_CFG_KEY,
        other => return Err(CredentialError::NotAPullSecret(other.to_owned())),
    };
    let data = secret
        .data
        .as_ref()
        .and_then(|data| data.get(key))
        .ok_or(CredentialError::MissingKey(key))?;
    if key == DOCKER_CONFIG_JSON_KEY {
        parse_docker_config_json(&data.0)
    } else {
        parse_docker_cfg(&data.0)
    }
}

/// Reads a `.dockerconfigjson` document: `{"auths": {"<registry>": {...}}}`.
pub fn parse_docker_config_json(bytes: &[u8]) -> Result<Vec<PullCredential>, CredentialError> {
    let key = DOCKER_CONFIG_JSON_KEY;
    let config: DockerConfigJson = serde_json::from_slice(bytes).map_err(|e| malformed(key, &e))?;
    entries(key, config.auths)
}

/// Reads a `.dockercfg` document: `{"<registry>": {...}}`.
pub fn parse_docker_cfg(bytes: &[u8]) -> Result<Vec<PullCredential>, CredentialError> {
    let key = DOCKER_CFG_KEY;
    let auths: BTreeMap<String, DockerConfigEntry> =
        serde_json::from_slice(bytes).map_err(|e| malformed(key, &e))?;
    entries(key, auths)
}

/// serde_json's message can quote the offending value (a password in the wrong place): keep only
/// where it went wrong.
fn malformed(key: &'static str, error: &serde_json::Error) -> CredentialError {
    CredentialError::Malformed { key, line: error.line(), column: error.column() }
}

fn entries(
    key: &'static str,
    auths: BTreeMap<String, DockerConfigEntry>,
) -> Result<Vec<PullCredential>, CredentialError> {
    let mut credentials = Vec::new();
    for (index, (registry, entry)) in auths.into_iter().enumerate() {
        let (username, password) =
            match entry.auth.as_deref().map(str::trim).filter(|a| !a.is_empty()) {
                Some(auth) => {
                    decode_auth(auth).ok_or(CredentialError::BadAuth { key, entry: index + 1 })?
                }
                None => (entry.username.unwrap_or_default(), entry.password.unwrap_or_default()),
            };
        if username.is_empty() && password.is_empty() {
            continue;
        }
        if let Some(registry_key) = RegistryKey::parse(&registry) {
            credentials.push(PullCredential::new(registry_key, username, password));
        }
    }
    Ok(credentials)
}

/// `base64(user:password)`, padded or not; the password may itself hold colons.
fn decode_auth(auth: &str) -> Option<(String, String)> {
    let bytes = STANDARD.decode(auth).or_else(|_| STANDARD_NO_PAD.decode(auth)).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (username, password) = text.split_once(':')?;
    Some((username.to_owned(), password.to_owned()))
}

/// The credentials to try for `image`, in order: those whose key matches, more specific keys
/// first, otherwise in the order given (a pod's own pull secrets before its service account's),
/// duplicates dropped. Empty means an anonymous pull.
pub fn select_credentials<'a>(
    image: &ImageRef,
    credentials: &'a [PullCredential],
) -> Vec<&'a PullCredential> {
    let mut chosen: Vec<&PullCredential> = Vec::new();
    for credential in credentials.iter().filter(|c| c.key.matches(image)) {
        if !chosen
            .iter()
            .any(|c| c.username == credential.username && c.password == credential.password)
        {
            chosen.push(credential);
        }
    }
    // Stable: equal specificity keeps the given order.
    chosen.sort_by_key(|c| std::cmp::Reverse(c.key.specificity()));
    chosen
}

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;

    use super::*;

    fn image(s: &str) -> ImageRef {
        match ImageRef::parse(s) {
            Ok(image) => image,
            Err(error) => panic!("{s}: {error}"),
        }
    }

    fn b64(s: &str) -> String {
        STANDARD.encode(s)
    }

    fn key(s: &str) -> RegistryKey {
        match RegistryKey::parse(s) {
            Some(key) => key,
            None => panic!("{s} should parse"),
        }
    }

    fn cred(k: &str, user: &str) -> PullCredential {
        PullCredential::new(key(k), user.to_owned(), format!("{user}-password"))
    }

    fn users(chosen: &[&PullCredential]) -> Vec<String> {
        chosen.iter().map(|c| c.username.expose().to_owned()).collect()
    }

    #[test]
    fn dockerconfigjson_with_auth_and_with_username_password() {
        let json = format!(
            r#"{{"auths": {{
                "ghcr.io": {{"auth": "{}"}},
                "registry.example.com:5000": {{"username": "bob", "password": "b:c", "email": "x@y"}},
                "quay.io": {{"auth": "{}", "username": "ignored", "password": "ignored"}},
                "empty.example.com": {{}}
            }}, "credsStore": "desktop"}}"#,
            b64("alice:pa:ss"),
            b64("carol:pw"),
        );
        let creds = match parse_docker_config_json(json.as_bytes()) {
            Ok(creds) => creds,
            Err(error) => panic!("{error}"),
        };
        let got: Vec<(String, String, String)> = creds
            .iter()
            .map(|c| {
                (c.key.host.clone(), c.username.expose().to_owned(), c.password.expose().to_owned())
            })
            .collect();
        assert_eq!(
            got,
            [
                ("ghcr.io".into(), "alice".into(), "pa:ss".into()),
                ("quay.io".into(), "carol".into(), "pw".into()),
                ("registry.example.com".into(), "bob".into(), "b:c".into()),
            ]
        );
        assert_eq!(creds[2].key.port.as_deref(), Some("5000"));
    }

    #[test]
    fn dockercfg_is_the_map_without_auths() {
        let cfg = format!(
            r#"{{"https://index.docker.io/v1/": {{"auth": "{}", "email": "a@b"}}}}"#,
            b64("u:p")
        );
        let creds = parse_docker_cfg(cfg.as_bytes()).unwrap_or_default();
        assert_eq!(creds.len(), 1);
        assert!(creds[0].key.matches(&image("nginx")));
        // The same document as a dockerconfigjson has no `auths`: no credentials, no error.
        assert_eq!(parse_docker_config_json(cfg.as_bytes()).map(|c| c.len()), Ok(0));
    }

    #[test]
    fn secrets_of_both_types() {
        let secret = |type_: &str, key: &str, value: String| KubeSecret {
            type_: Some(type_.to_owned()),
            data: Some(BTreeMap::from([(key.to_owned(), ByteString(value.into_bytes()))])),
            ..KubeSecret::default()
        };
        let json = format!(r#"{{"auths":{{"ghcr.io":{{"auth":"{}"}}}}}}"#, b64("a:b"));
        let cfg = format!(r#"{{"ghcr.io":{{"auth":"{}"}}}}"#, b64("a:b"));
        let from_json =
            credentials_from_secret(&secret(DOCKER_CONFIG_JSON_TYPE, DOCKER_CONFIG_JSON_KEY, json));
        let from_cfg = credentials_from_secret(&secret(DOCKER_CFG_TYPE, DOCKER_CFG_KEY, cfg));
        assert_eq!(from_json.as_ref().map(Vec::len), Ok(1));
        assert_eq!(from_json, from_cfg);
        assert_eq!(
            credentials_from_secret(&secret("Opaque", DOCKER_CFG_KEY, String::new())),
            Err(CredentialError::NotAPullSecret("Opaque".into()))
        );
        assert_eq!(
            credentials_from_secret(&secret(DOCKER_CFG_TYPE, "other", String::new())),
            Err(CredentialError::MissingKey(DOCKER_CFG_KEY))
        );
    }

    #[test]
    fn errors_never_carry_the_secret() {
        for bad in [
            r#"{"auths": {"ghcr.io": "hunter2-password"}}"#.to_owned(),
            r#"{"auths": {"ghcr.io": {"auth": ["hunter2-password"]}}}"#.to_owned(),
            r#"{"auths": {"ghcr.io": {"username": 7, "password": "hunter2-password"}}}"#.to_owned(),
            r#"{"auths": {"ghcr.io": {"auth": "hunter2-password!"}}}"#.to_owned(),
            format!(
                r#"{{"auths": {{"ghcr.io": {{"auth": "{}"}}}}}}"#,
                b64("hunter2-password-without-colon")
            ),
            r#"hunter2-password"#.to_owned(),
        ] {
            let error = match parse_docker_config_json(bad.as_bytes()) {
                Ok(creds) => panic!("{} credentials from a malformed secret", creds.len()),
                Err(error) => error,
            };
            for shown in [error.to_string(), format!("{error:?}")] {
                assert!(!shown.contains("hunter2") && !shown.contains("ghcr"), "{shown}");
            }
        }
    }

    #[test]
    fn debug_redacts_credentials() {
        let c = cred("ghcr.io", "alice");
        let shown = format!("{c:?} {:?}", c.identity());
        assert!(!shown.contains("alice"), "{shown}");
        assert!(shown.contains("ghcr.io") && shown.contains("<redacted>"), "{shown}");
        let auth = format!("{:?}", c.basic_authorization());
        assert!(!auth.contains("YWxpY2U"), "{auth}");
        assert!(c.basic_authorization().is_sensitive());
    }

    #[test]
    fn keys_drop_scheme_and_api_path() {
        for (raw, host, port, path) in [
            ("https://index.docker.io/v1/", "docker.io", None, ""),
            ("index.docker.io", "docker.io", None, ""),
            ("registry-1.docker.io", "docker.io", None, ""),
            ("docker.io", "docker.io", None, ""),
            ("https://harbor.example.com/v2/", "harbor.example.com", None, ""),
            ("http://LOCALHOST:5000", "localhost", Some("5000"), ""),
            ("quay.io/coreos", "quay.io", None, "/coreos"),
            ("https://quay.io/v2/coreos", "quay.io", None, "/coreos"),
            ("*.azurecr.io", "*.azurecr.io", None, ""),
        ] {
            assert_eq!(
                RegistryKey::parse(raw),
                Some(RegistryKey {
                    host: host.into(),
                    port: port.map(Into::into),
                    path: path.into()
                }),
                "{raw}"
            );
        }
        for raw in ["", "https://", "/v2/", "host:", "host:abc"] {
            assert_eq!(RegistryKey::parse(raw), None, "{raw}");
        }
    }

    #[test]
    fn docker_hub_aliases_match_docker_hub_images() {
        for raw in
            ["https://index.docker.io/v1/", "docker.io", "index.docker.io", "registry-1.docker.io"]
        {
            let k = key(raw);
            for img in ["nginx", "library/nginx:1", "docker.io/bitnami/redis", "index.docker.io/x"]
            {
                assert!(k.matches(&image(img)), "{raw} should match {img}");
            }
            assert!(!k.matches(&image("ghcr.io/o/a")), "{raw}");
        }
    }

    #[test]
    fn hosts_ports_wildcards_and_paths() {
        let local = image("localhost:5000/a/b:1");
        assert!(key("localhost:5000").matches(&local));
        assert!(key("http://localhost:5000/v2/").matches(&local));
        assert!(!key("localhost").matches(&local), "the port must match");
        assert!(!key("localhost:5001").matches(&local));
        assert!(!key("localhost:5000").matches(&image("localhost/a/b")));

        let acr = image("team.azurecr.io/app:prod");
        assert!(key("*.azurecr.io").matches(&acr));
        assert!(key("team.azurecr.i?").matches(&acr));
        assert!(!key("*.azurecr.io").matches(&image("azurecr.io/app")), "labels are counted");
        assert!(!key("*.io").matches(&acr));

        let etcd = image("quay.io/coreos/etcd:v3");
        assert!(key("quay.io/coreos").matches(&etcd));
        assert!(!key("quay.io/other").matches(&etcd));
        assert!(key("quay.io").matches(&etcd));
        assert!(key("GHCR.IO").matches(&image("ghcr.io/o/a:prod")));
    }

    #[test]
    fn globs_match_as_go_filepath_match_does() {
        for (pattern, text, expected) in [
            ("*", "", true),
            ("*", "abc", true),
            ("a*c", "abbbc", true),
            ("a*c", "abbbd", false),
            ("*b*", "abc", true),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("**", "x", true),
            ("*a", "bbba", true),
            ("*ab*ab", "xabyabab", true),
            ("*ab*ab", "xabyaba", false),
            ("", "", true),
            ("", "a", false),
            ("abc", "abc", true),
            ("ab", "abc", false),
        ] {
            assert_eq!(glob(pattern.as_bytes(), text.as_bytes()), expected, "{pattern} {text}");
        }
    }

    /// A key such as `*0*0*0…*9.0.0.1:P` made the old recursive match backtrack exponentially
    /// against a long host, on the webhook's request path: one review held a core forever. Run
    /// on a thread with a deadline, so that the old code fails the test instead of hanging it.
    #[test]
    fn hostile_keys_match_in_bounded_time() {
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let label = format!("{}9", "*0".repeat(30));
            let key = key(&format!("{label}.0.0.1:5000"));
            let host = format!("{}.0.0.1:5000/app", "0".repeat(62));
            let image = image(&host);
            let started = std::time::Instant::now();
            let mut matched = false;
            for _ in 0..1000 {
                matched |= key.matches(&image);
                matched |= glob(label.as_bytes(), "0".repeat(200).as_bytes());
            }
            let _ = done.send((matched, started.elapsed()));
        });
        match finished.recv_timeout(std::time::Duration::from_secs(20)) {
            Ok((matched, elapsed)) => {
                assert!(!matched);
                println!("1,000 hostile matches in {elapsed:?}");
            }
            Err(_) => panic!("matching a hostile key did not finish within 20 s"),
        }
    }

    #[test]
    fn selection_orders_by_specificity_then_given_order_and_drops_duplicates() {
        let creds = [
            cred("quay.io", "broad"),
            cred("ghcr.io", "elsewhere"),
            cred("quay.io/coreos", "specific"),
            cred("https://quay.io/v1/", "second-broad"),
            cred("quay.io", "broad"),
        ];
        assert_eq!(
            users(&select_credentials(&image("quay.io/coreos/etcd"), &creds)),
            ["specific", "broad", "second-broad"]
        );
        assert_eq!(
            users(&select_credentials(&image("quay.io/other/x"), &creds)),
            ["broad", "second-broad"]
        );
        assert!(select_credentials(&image("nginx"), &creds).is_empty());
    }

    #[test]
    fn identities_depend_on_the_secret_only() {
        let a = cred("ghcr.io", "alice");
        let same = cred("https://ghcr.io/v2/", "alice");
        let b = cred("ghcr.io", "bob");
        assert_eq!(a.identity(), same.identity());
        assert_ne!(a.identity(), b.identity());
        assert_ne!(CredentialId::of_list([&a, &b]), CredentialId::of_list([&b, &a]));
        // "ab" + "c" and "a" + "bc" must differ.
        let split1 = PullCredential::new(key("x.io"), "ab".into(), "c".into());
        let split2 = PullCredential::new(key("x.io"), "a".into(), "bc".into());
        assert_ne!(split1.identity(), split2.identity());
    }
}
