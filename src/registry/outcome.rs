//! What one resolution gives, and how a registry's answers map onto it: the three outcomes
//! callers act on are a digest, [`Resolution::Unknown`] (404,
//! `MANIFEST_UNKNOWN`, `NAME_UNKNOWN`: the tag or repository does not exist, recorded as absent)
//! and [`Resolution::Failed`] (anything else: keep what was recorded). A [`Failure`] says what
//! went wrong in a few words from a fixed set; it never carries a URL, a header, a body or any
//! credential.

use std::error::Error as StdError;
use std::fmt;

use super::policy::Refusal;

/// A manifest digest as recorded in annotations: `sha256:` and 64 lower-case hex digits.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ImageDigest(String);

impl ImageDigest {
    /// Accepts exactly `sha256:<64 lower-case hex>`; anything else a registry sends is refused.
    pub fn parse(digest: &str) -> Option<Self> {
        let hex = digest.strip_prefix("sha256:")?;
        let valid = hex.len() == 64
            && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        valid.then(|| ImageDigest(digest.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ImageDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ImageDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ImageDigest({})", self.0)
    }
}

/// The answer to "what digest does the registry give for this reference now?".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// The digest behind the tag (for a multi-arch image, the index's).
    Digest(ImageDigest),
    /// The image names a digest already; nothing was asked of the registry. Holds that digest as
    /// written (it may use another algorithm than sha256).
    Pinned(String),
    /// The registry does not know the tag or the repository.
    Unknown,
    /// Anything else: keep what was recorded.
    Failed(Failure),
}

impl Resolution {
    /// The `outcome` label of `configsum_registry_requests_total`: `digest`, `unknown`, `pinned`
    /// or the failure's kind.
    pub fn outcome(&self) -> &'static str {
        match self {
            Resolution::Digest(_) => "digest",
            Resolution::Pinned(_) => "pinned",
            Resolution::Unknown => "unknown",
            Resolution::Failed(failure) => failure.kind.as_str(),
        }
    }

    /// Whether the answer came from the registry and may be reused for a few seconds. Timeouts
    /// and connection or TLS failures are not answers: the next resolution asks again.
    pub fn is_registry_answer(&self) -> bool {
        match self {
            Resolution::Digest(_) | Resolution::Unknown | Resolution::Pinned(_) => true,
            Resolution::Failed(failure) => failure.kind.is_registry_answer(),
        }
    }

    pub fn failed(kind: FailureKind, status: Option<u16>) -> Self {
        Resolution::Failed(Failure { kind, status })
    }
}

/// Why a resolution failed: a kind from a fixed set, and the HTTP status when there was one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure {
    pub kind: FailureKind,
    pub status: Option<u16>,
}

/// The kinds of failure; [`FailureKind::as_str`] is the metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// 401, or a token the realm would not grant.
    Unauthorized,
    /// 403, `DENIED`.
    Forbidden,
    /// 429, `TOOMANYREQUESTS`.
    RateLimited,
    /// 5xx.
    ServerError,
    /// Another 4xx, or another registry error code.
    Rejected,
    /// A digest or an answer that breaks the distribution spec.
    InvalidResponse,
    /// The resolution did not finish within its time.
    Timeout,
    /// No connection, or it broke.
    Connection,
    /// The TLS handshake failed (an untrusted certificate, or plain HTTP spoken to).
    Tls,
    /// A fault in this process (the resolution panicked, a client could not be built).
    Internal,
    /// A body over its bound: a manifest over 4 MiB, a token answer over 1 MiB.
    TooLarge,
    /// `--registry-allow` does not name the registry.
    NotAllowed,
    /// Where the request would have gone is not allowed: plain HTTP, or an internal address.
    Refused(Refusal),
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Unauthorized => "unauthorized",
            FailureKind::Forbidden => "forbidden",
            FailureKind::RateLimited => "rate_limited",
            FailureKind::ServerError => "server_error",
            FailureKind::Rejected => "rejected",
            FailureKind::InvalidResponse => "invalid_response",
            FailureKind::Timeout => "timeout",
            FailureKind::Connection => "connection",
            FailureKind::Tls => "tls",
            FailureKind::Internal => "internal",
            FailureKind::TooLarge => "too_large",
            FailureKind::NotAllowed => "not_allowed",
            FailureKind::Refused(_) => "refused",
        }
    }

    fn is_registry_answer(self) -> bool {
        !matches!(
            self,
            FailureKind::Timeout
                | FailureKind::Connection
                | FailureKind::Tls
                | FailureKind::Internal
                | FailureKind::NotAllowed
                | FailureKind::Refused(_)
        )
    }

    /// Whether another credential might do better.
    pub fn is_auth(self) -> bool {
        matches!(self, FailureKind::Unauthorized | FailureKind::Forbidden)
    }

    fn describe(self) -> &'static str {
        match self {
            FailureKind::TooLarge => "the registry's answer was too large",
            FailureKind::NotAllowed => "the registry is not in --registry-allow",
            FailureKind::Refused(Refusal::PlainHttp) => {
                "refused plain HTTP to a host not in --insecure-registry"
            }
            FailureKind::Refused(Refusal::InternalAddress) => {
                "refused an internal address not in --registry-allow"
            }
            FailureKind::Refused(Refusal::NotAllowed) => "the registry is not in --registry-allow",
            FailureKind::Refused(Refusal::Scheme) => "refused a URL that is not http(s)",
            FailureKind::Unauthorized => "the registry wants credentials it was not given",
            FailureKind::Forbidden => "the registry denied access",
            FailureKind::RateLimited => "the registry's rate limit was hit",
            FailureKind::ServerError => "the registry failed",
            FailureKind::Rejected => "the registry rejected the request",
            FailureKind::InvalidResponse => "the registry's answer was invalid",
            FailureKind::Timeout => "the registry did not answer in time",
            FailureKind::Connection => "could not connect to the registry",
            FailureKind::Tls => "TLS with the registry failed",
            FailureKind::Internal => "internal error",
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.describe())?;
        if let Some(status) = self.status {
            write!(f, " (HTTP {status})")?;
        }
        Ok(())
    }
}

/// The error codes of an OCI error envelope (`{"errors":[{"code":..}]}`), if the body is one:
/// `MANIFEST_UNKNOWN`, `NAME_UNKNOWN` and `NOT_FOUND` mean unknown.
pub fn classify_envelope(body: &[u8]) -> Option<Resolution> {
    #[derive(serde::Deserialize)]
    struct Envelope {
        errors: Vec<Code>,
    }
    #[derive(serde::Deserialize)]
    struct Code {
        code: String,
    }
    let envelope: Envelope = serde_json::from_slice(body).ok()?;
    let codes = || envelope.errors.iter().map(|e| e.code.as_str());
    if codes().any(|c| matches!(c, "MANIFEST_UNKNOWN" | "NAME_UNKNOWN" | "NOT_FOUND")) {
        return Some(Resolution::Unknown);
    }
    let kind = codes()
        .find_map(|code| match code {
            "UNAUTHORIZED" => Some(FailureKind::Unauthorized),
            "DENIED" => Some(FailureKind::Forbidden),
            "TOOMANYREQUESTS" => Some(FailureKind::RateLimited),
            _ => None,
        })
        .unwrap_or(FailureKind::Rejected);
    Some(Resolution::failed(kind, None))
}

/// A status without an OCI error envelope.
pub fn classify_status(status: u16) -> Resolution {
    let kind = match status {
        404 => return Resolution::Unknown,
        401 => FailureKind::Unauthorized,
        403 => FailureKind::Forbidden,
        429 => FailureKind::RateLimited,
        500..=599 => FailureKind::ServerError,
        400..=499 => FailureKind::Rejected,
        _ => FailureKind::InvalidResponse,
    };
    Resolution::failed(kind, Some(status))
}

/// Whether a rustls error is somewhere in `error`'s chain. `io::Error` hides the error it wraps
/// from `source()`, so look inside it explicitly.
pub(crate) fn contains_tls_error(error: &(dyn StdError + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if error.is::<rustls::Error>() {
            return true;
        }
        if error
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .is_some_and(|inner| contains_tls_error(inner))
        {
            return true;
        }
        next = error.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(json: &str) -> Option<Resolution> {
        classify_envelope(json.as_bytes())
    }

    #[test]
    fn digests_must_be_sha256_lower_hex() {
        let good = format!("sha256:{}", "ab12".repeat(16));
        assert_eq!(ImageDigest::parse(&good).map(|d| d.to_string()), Some(good.clone()));
        for bad in [
            format!("sha256:{}", "AB12".repeat(16)),
            format!("sha256:{}", "ab12".repeat(15)),
            format!("sha512:{}", "ab12".repeat(32)),
            format!("sha256:{}g", "ab12".repeat(15) + "abc"),
            format!(" {good}"),
            String::new(),
        ] {
            assert_eq!(ImageDigest::parse(&bad), None, "{bad}");
        }
    }

    #[test]
    fn unknown_tag_or_repository() {
        for json in [
            r#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}"#,
            r#"{"errors":[{"code":"NAME_UNKNOWN","message":"repository name not known to registry"}]}"#,
            r#"{"errors":[{"code":"NOT_FOUND"}]}"#,
            r#"{"errors":[{"code":"HARBOR_SPECIFIC"},{"code":"MANIFEST_UNKNOWN"}]}"#,
        ] {
            assert_eq!(envelope(json), Some(Resolution::Unknown), "{json}");
        }
        assert_eq!(classify_status(404), Resolution::Unknown);
    }

    #[test]
    fn other_answers_are_failures() {
        let failed = |kind, status| Resolution::failed(kind, status);
        assert_eq!(
            envelope(r#"{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}"#),
            Some(failed(FailureKind::Unauthorized, None))
        );
        assert_eq!(
            envelope(r#"{"errors":[{"code":"DENIED"}]}"#),
            Some(failed(FailureKind::Forbidden, None))
        );
        assert_eq!(
            envelope(r#"{"errors":[{"code":"TOOMANYREQUESTS"}]}"#),
            Some(failed(FailureKind::RateLimited, None))
        );
        assert_eq!(
            envelope(r#"{"errors":[{"code":"UNSUPPORTED"}]}"#),
            Some(failed(FailureKind::Rejected, None))
        );
        assert_eq!(envelope("<html>busy</html>"), None, "not an envelope: the status decides");
        assert_eq!(classify_status(401), failed(FailureKind::Unauthorized, Some(401)));
        assert_eq!(classify_status(403), failed(FailureKind::Forbidden, Some(403)));
        assert_eq!(classify_status(429), failed(FailureKind::RateLimited, Some(429)));
        assert_eq!(classify_status(503), failed(FailureKind::ServerError, Some(503)));
        assert_eq!(classify_status(400), failed(FailureKind::Rejected, Some(400)));
        assert_eq!(classify_status(302), failed(FailureKind::InvalidResponse, Some(302)));
    }

    #[test]
    fn tls_errors_are_found_inside_io_errors() {
        let tls = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        assert!(contains_tls_error(&tls));
        assert!(!contains_tls_error(&std::io::Error::from(std::io::ErrorKind::TimedOut)));
    }

    #[test]
    fn failures_read_shortly_and_carry_nothing_from_the_answer() {
        let Resolution::Failed(failure) = classify_status(503) else {
            panic!("a 503 is a failure")
        };
        assert_eq!(failure.to_string(), "the registry failed (HTTP 503)");
        let refused = Failure { kind: FailureKind::Refused(Refusal::PlainHttp), status: None };
        assert_eq!(refused.to_string(), "refused plain HTTP to a host not in --insecure-registry");
        assert_eq!(refused.kind.as_str(), "refused");
    }

    #[test]
    fn only_registry_answers_are_reused() {
        assert!(Resolution::Unknown.is_registry_answer());
        assert!(Resolution::failed(FailureKind::ServerError, Some(500)).is_registry_answer());
        assert!(Resolution::failed(FailureKind::Unauthorized, Some(401)).is_registry_answer());
        for kind in [
            FailureKind::Timeout,
            FailureKind::Connection,
            FailureKind::Tls,
            FailureKind::Internal,
            FailureKind::NotAllowed,
            FailureKind::Refused(Refusal::InternalAddress),
        ] {
            assert!(!Resolution::failed(kind, None).is_registry_answer(), "{kind:?}");
        }
    }
}
