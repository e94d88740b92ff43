//! Bearer tokens: the token service's answer, and the cache that keeps tokens until they expire.
//!
//! The cache is bounded in entries and bytes, drops expired tokens whenever one is added, and
//! keys every token by registry, repository and the identity of the credentials that obtained
//! it, so that one namespace's token never serves another namespace's images.

use std::collections::HashMap;
use std::time::Duration;

use hyper::header::HeaderValue;
use tokio::time::Instant;

use super::credentials::CredentialId;

/// The longest token answer read; a larger one fails the resolution.
pub const MAX_TOKEN_RESPONSE: usize = 1024 * 1024;
/// Tokens kept at most.
const MAX_ENTRIES: usize = 1024;
/// Bytes of tokens kept at most.
const MAX_BYTES: usize = 16 * 1024 * 1024;
/// The lifetime of a token whose answer names none (the token specification's default).
const DEFAULT_LIFETIME: Duration = Duration::from_secs(60);
/// The longest a token is kept, whatever it claims: a revoked token is not used for longer.
const MAX_LIFETIME: Duration = Duration::from_secs(3600);
/// Tokens are dropped this long before they expire, so none is sent as it runs out.
const MARGIN: Duration = Duration::from_secs(5);

/// A token service's answer: `token` or `access_token` (the OAuth2 name), and `expires_in`.
pub struct Token {
    pub authorization: HeaderValue,
    pub lifetime: Duration,
}

/// Why an answer is not a usable token. Carries nothing from the answer.
#[derive(Debug, PartialEq, Eq)]
pub struct InvalidToken;

impl Token {
    /// Reads the answer's body. A token that cannot be sent in a header (control characters,
    /// line breaks) is invalid, never a panic.
    pub fn parse(body: &[u8]) -> Result<Token, InvalidToken> {
        #[derive(serde::Deserialize)]
        struct Answer {
            token: Option<String>,
            access_token: Option<String>,
            expires_in: Option<u64>,
        }
        let answer: Answer = serde_json::from_slice(body).map_err(|_| InvalidToken)?;
        let token = answer.token.or(answer.access_token).filter(|t| !t.is_empty());
        let token = token.ok_or(InvalidToken)?;
        let mut authorization =
            HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| InvalidToken)?;
        authorization.set_sensitive(true);
        let lifetime = answer.expires_in.map_or(DEFAULT_LIFETIME, Duration::from_secs);
        Ok(Token { authorization, lifetime: lifetime.min(MAX_LIFETIME) })
    }
}

/// Whose token: the registry (scheme and authority), the repository, and the credentials.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TokenKey {
    pub registry: String,
    pub repository: String,
    pub credentials: Option<CredentialId>,
}

impl TokenKey {
    fn size(&self) -> usize {
        self.registry.len() + self.repository.len() + 64
    }
}

struct Entry {
    authorization: HeaderValue,
    expires: Instant,
    size: usize,
}

/// See the module docs.
#[derive(Default)]
pub struct TokenCache {
    entries: HashMap<TokenKey, Entry>,
    bytes: usize,
}

impl TokenCache {
    /// The token for `key`, unless it has expired.
    pub fn get(&mut self, key: &TokenKey, now: Instant) -> Option<HeaderValue> {
        match self.entries.get(key) {
            Some(entry) if entry.expires > now => Some(entry.authorization.clone()),
            Some(_) => {
                self.remove(key);
                None
            }
            None => None,
        }
    }

    /// Keeps `token` until shortly before it expires. Expired tokens go first; then, while the
    /// cache is over its bounds, those that expire soonest.
    pub fn insert(&mut self, key: TokenKey, token: Token, now: Instant) {
        let lifetime = token.lifetime.saturating_sub(MARGIN);
        let size = key.size() + token.authorization.len();
        if lifetime.is_zero() || size > MAX_BYTES {
            return;
        }
        self.remove(&key);
        self.entries.retain(|_, entry| entry.expires > now);
        self.bytes = self.entries.values().map(|e| e.size).sum();
        while self.entries.len() >= MAX_ENTRIES || self.bytes + size > MAX_BYTES {
            let soonest =
                self.entries.iter().min_by_key(|(_, entry)| entry.expires).map(|(k, _)| k.clone());
            match soonest {
                Some(soonest) => self.remove(&soonest),
                None => break,
            }
        }
        let entry = Entry { authorization: token.authorization, expires: now + lifetime, size };
        self.bytes += size;
        self.entries.insert(key, entry);
    }

    /// Forgets the token for `key` (the registry refused it).
    pub fn remove(&mut self, key: &TokenKey) {
        if let Some(entry) = self.entries.remove(key) {
            self.bytes -= entry.size;
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(repository: &str) -> TokenKey {
        TokenKey {
            registry: "https://r.example".into(),
            repository: repository.into(),
            credentials: None,
        }
    }

    fn token(text: &str, seconds: u64) -> Token {
        let body = serde_json::json!({"token": text, "expires_in": seconds}).to_string();
        match Token::parse(body.as_bytes()) {
            Ok(token) => token,
            Err(_) => panic!("a valid token"),
        }
    }

    #[test]
    fn answers_name_the_token_either_way() {
        let t = Token::parse(br#"{"access_token":"abc","expires_in":300}"#);
        assert!(t.as_ref().is_ok_and(|t| t.authorization == "Bearer abc"));
        assert_eq!(t.map(|t| t.lifetime).ok(), Some(Duration::from_secs(300)));
        let t = Token::parse(br#"{"token":"abc"}"#);
        assert_eq!(t.map(|t| t.lifetime).ok(), Some(DEFAULT_LIFETIME));
        let t = Token::parse(br#"{"token":"abc","expires_in":99999999}"#);
        assert_eq!(t.map(|t| t.lifetime).ok(), Some(MAX_LIFETIME));
    }

    #[test]
    fn malformed_tokens_are_errors_not_panics() {
        for body in [
            &br#"{"token":"a\nb"}"#[..],
            br#"{"token":"a\u0000b"}"#,
            br#"{"token":""}"#,
            br#"{"expires_in":5}"#,
            br#"{"token":5}"#,
            b"not json",
            b"",
        ] {
            assert!(Token::parse(body).is_err(), "{}", String::from_utf8_lossy(body));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_expire() {
        let mut cache = TokenCache::default();
        let now = Instant::now();
        cache.insert(key("a"), token("t", 60), now);
        assert!(cache.get(&key("a"), now + Duration::from_secs(54)).is_some());
        assert!(cache.get(&key("a"), now + Duration::from_secs(55)).is_none(), "5 s margin");
        assert_eq!(cache.len(), 0, "an expired token is dropped when read");
        cache.insert(key("short"), token("t", 3), now);
        assert_eq!(cache.len(), 0, "a token that expires within the margin is not kept");
    }

    #[tokio::test(start_paused = true)]
    async fn the_cache_is_bounded_in_entries_and_bytes_and_drops_expired_tokens() {
        let mut cache = TokenCache::default();
        let now = Instant::now();
        for i in 0..(MAX_ENTRIES * 3) {
            cache.insert(key(&format!("repo-{i}")), token("t", 600 + i as u64), now);
        }
        assert_eq!(cache.len(), MAX_ENTRIES);
        assert!(cache.get(&key("repo-0"), now).is_none(), "the soonest to expire went first");
        assert!(cache.get(&key(&format!("repo-{}", MAX_ENTRIES * 3 - 1)), now).is_some());

        // 2 MiB tokens for new repositories: the bytes stay bounded.
        let big = "x".repeat(2 * 1024 * 1024);
        for i in 0..40 {
            cache.insert(key(&format!("big-{i}")), token(&big, 600), now);
            assert!(cache.bytes <= MAX_BYTES, "{} bytes after {i}", cache.bytes);
        }
        // Expired tokens are dropped when another is added.
        let later = now + Duration::from_secs(7200);
        cache.insert(key("fresh"), token("t", 600), later);
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.bytes, key("fresh").size() + "Bearer t".len());
    }
}
