//! Where registry requests may go. Image references, token realms and redirects are tenant input
//! (anyone who can write a workload, or reach the webhook's port, chooses them), so every URL the
//! client is about to contact passes through here first (docs/security.md, "Registries"):
//!
//! - plain HTTP only to a host named by `--insecure-registry`; a realm or a redirect to `http://`
//!   anywhere else is refused, never followed;
//! - no connection to a loopback, link-local (cloud metadata) or unspecified address, whether the
//!   reference, a realm or a redirect names it, unless its host is named by `--insecure-registry`
//!   or `--registry-allow` (checked on the addresses a name resolves to, see `connect.rs`);
//! - with `--registry-allow`, only the registries it names are resolved at all.

use std::fmt;
use std::net::IpAddr;

use super::reference::{DOCKER_HUB, DOCKER_HUB_ENDPOINT, ImageRef, is_docker_hub};

/// `--insecure-registry` and `--registry-allow`, parsed once.
#[derive(Clone, Debug, Default)]
pub struct RegistryPolicy {
    /// Spoken to over plain HTTP: exactly these `host[:port]`.
    insecure: Vec<HostPattern>,
    /// When non-empty, the only registries resolved.
    allow: Vec<HostPattern>,
}

/// Why a request was not sent. Carries the host only: it is the operator's configuration that
/// refused it, and the host is what they need to change it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Refusal {
    #[error("plain HTTP to a registry not named by --insecure-registry")]
    PlainHttp,
    #[error("a loopback, link-local or unspecified address not named by --registry-allow")]
    InternalAddress,
    #[error("a registry not named by --registry-allow")]
    NotAllowed,
    #[error("a URL that is not http or https")]
    Scheme,
}

/// A `host[:port]` from a flag; the host may start with `*.` (any one or more labels).
#[derive(Clone, PartialEq, Eq)]
struct HostPattern {
    host: String,
    port: Option<u16>,
}

impl fmt::Debug for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}:{port}", self.host),
            None => f.write_str(&self.host),
        }
    }
}

/// A flag value that is not `HOST[:PORT]`.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{flag} {value:?}: expected HOST[:PORT], such as registry.example.com:5000 or *.example.com"
)]
pub struct PatternError {
    pub flag: &'static str,
    pub value: String,
}

impl HostPattern {
    fn parse(flag: &'static str, value: &str) -> Result<Self, PatternError> {
        let error = || PatternError { flag, value: value.to_owned() };
        let value = value.trim().to_ascii_lowercase();
        let (host, port) = split_host_port(&value).ok_or_else(error)?;
        let port = match port {
            Some(port) => Some(port.parse::<u16>().map_err(|_| error())?),
            None => None,
        };
        let name = host.strip_prefix("*.").unwrap_or(host);
        let valid = !name.is_empty()
            && name.len() <= 253
            && (name.parse::<IpAddr>().is_ok()
                || name.split('.').all(|label| {
                    !label.is_empty()
                        && label.len() <= 63
                        && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                }));
        if !valid {
            return Err(error());
        }
        // Docker Hub is contacted at its API host; an entry for any of its names means that host.
        let host =
            if is_docker_hub(host) { DOCKER_HUB_ENDPOINT.to_owned() } else { host.to_owned() };
        Ok(HostPattern { host, port })
    }

    /// Whether `host` (lower case, Docker Hub as its API host) and `port` are named. Without a
    /// port the entry names every port when `any_port`, else only the scheme's default.
    fn matches(&self, host: &str, port: Option<u16>, any_port: bool) -> bool {
        let host_ok = match self.host.strip_prefix("*.") {
            Some(suffix) => {
                host.len() > suffix.len() + 1
                    && host.ends_with(suffix)
                    && host.as_bytes()[host.len() - suffix.len() - 1] == b'.'
            }
            None => self.host == host,
        };
        host_ok
            && match self.port {
                Some(wanted) => port == Some(wanted),
                None => any_port || port.is_none(),
            }
    }
}

/// Splits `host[:port]`, an IPv6 literal in brackets allowed; the brackets are dropped.
fn split_host_port(value: &str) -> Option<(&str, Option<&str>)> {
    if let Some(rest) = value.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after {
            "" => Some((host, None)),
            _ => Some((host, Some(after.strip_prefix(':')?))),
        };
    }
    Some(match value.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (value, None),
    })
}

/// The scheme, host and port a request is about to go to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Destination<'a> {
    pub https: bool,
    /// Lower case, without brackets for an IPv6 literal.
    pub host: &'a str,
    /// As written in the URL; `None` for the scheme's default.
    pub port: Option<u16>,
}

impl RegistryPolicy {
    /// Parses the flags' values.
    pub fn new(insecure: &[String], allow: &[String]) -> Result<Self, PatternError> {
        let parse = |flag, values: &[String]| {
            values.iter().map(|v| HostPattern::parse(flag, v)).collect::<Result<Vec<_>, _>>()
        };
        let insecure = parse("--insecure-registry", insecure)?;
        if let Some(wild) = insecure.iter().find(|p| p.host.starts_with("*.")) {
            return Err(PatternError { flag: "--insecure-registry", value: format!("{wild:?}") });
        }
        Ok(RegistryPolicy { insecure, allow: parse("--registry-allow", allow)? })
    }

    /// Whether the registry of `image` may be resolved: every registry unless `--registry-allow`
    /// is given.
    pub fn allows_registry(&self, image: &ImageRef) -> bool {
        if self.allow.is_empty() {
            return true;
        }
        let (host, port) = endpoint_parts(image.endpoint());
        self.allow.iter().any(|p| p.matches(host, port, true))
            || (image.registry() == DOCKER_HUB
                && self.allow.iter().any(|p| p.matches(DOCKER_HUB_ENDPOINT, None, true)))
    }

    /// Whether requests to the registry `endpoint` (`host[:port]`) are plain HTTP.
    pub fn is_insecure(&self, host: &str, port: Option<u16>) -> bool {
        self.insecure.iter().any(|p| p.matches(host, port, false))
    }

    /// Whether `host` may resolve to loopback, link-local or unspecified addresses.
    pub fn may_be_internal(&self, host: &str, port: Option<u16>) -> bool {
        self.is_insecure(host, port) || self.allow.iter().any(|p| p.matches(host, port, true))
    }

    /// Whether a request may be sent to `to`: plain HTTP only to an `--insecure-registry` host,
    /// and an IP literal that is internal only when listed. Names are checked again on their
    /// addresses when connecting.
    pub fn check(&self, to: &Destination<'_>) -> Result<(), Refusal> {
        if !to.https && !self.is_insecure(to.host, to.port) {
            return Err(Refusal::PlainHttp);
        }
        match to.host.parse::<IpAddr>() {
            Ok(ip) if is_internal(ip) && !self.may_be_internal(to.host, to.port) => {
                Err(Refusal::InternalAddress)
            }
            _ => Ok(()),
        }
    }
}

/// `host[:port]` of a registry endpoint, the port parsed.
fn endpoint_parts(endpoint: &str) -> (&str, Option<u16>) {
    match split_host_port(endpoint) {
        Some((host, Some(port))) => (host, port.parse().ok()),
        Some((host, None)) => (host, None),
        None => (endpoint, None),
    }
}

/// Loopback, link-local (169.254.0.0/16 holds cloud metadata services; fe80::/10) or
/// unspecified, IPv4-mapped IPv6 included; and 0.0.0.0/8, which Linux connects to the local host.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback() || v4.is_link_local() || v4.octets()[0] == 0,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_internal(IpAddr::V4(v4)),
            None => {
                v6.is_loopback() || v6.is_unspecified() || (v6.segments()[0] & 0xffc0) == 0xfe80
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(insecure: &[&str], allow: &[&str]) -> RegistryPolicy {
        let owned = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        match RegistryPolicy::new(&owned(insecure), &owned(allow)) {
            Ok(policy) => policy,
            Err(error) => panic!("{error}"),
        }
    }

    fn image(s: &str) -> ImageRef {
        match ImageRef::parse(s) {
            Ok(image) => image,
            Err(error) => panic!("{s}: {error}"),
        }
    }

    fn to(https: bool, host: &str, port: Option<u16>) -> Destination<'_> {
        Destination { https, host, port }
    }

    #[test]
    fn internal_addresses() {
        for ip in [
            "127.0.0.1",
            "127.9.9.9",
            "169.254.169.254",
            "0.0.0.0",
            "0.1.2.3",
            "::1",
            "::",
            "fe80::1",
            "febf::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
        ] {
            assert!(is_internal(ip.parse().unwrap_or(IpAddr::from([1, 1, 1, 1]))), "{ip}");
        }
        for ip in ["10.0.0.1", "192.168.1.1", "172.16.0.1", "8.8.8.8", "fec0::1", "2001:db8::1"] {
            assert!(!is_internal(ip.parse().unwrap_or(IpAddr::from([127, 0, 0, 1]))), "{ip}");
        }
    }

    #[test]
    fn plain_http_only_to_insecure_registries() {
        let p = policy(&["registry.local:5000", "127.0.0.1:5001"], &[]);
        assert_eq!(p.check(&to(false, "registry.local", Some(5000))), Ok(()));
        assert_eq!(p.check(&to(false, "registry.local", None)), Err(Refusal::PlainHttp));
        assert_eq!(p.check(&to(false, "registry.local", Some(80))), Err(Refusal::PlainHttp));
        assert_eq!(p.check(&to(false, "ghcr.io", None)), Err(Refusal::PlainHttp));
        assert_eq!(p.check(&to(true, "ghcr.io", None)), Ok(()));
        // A listed loopback registry is reachable; another port on loopback is not.
        assert_eq!(p.check(&to(false, "127.0.0.1", Some(5001))), Ok(()));
        assert_eq!(p.check(&to(true, "127.0.0.1", Some(5002))), Err(Refusal::InternalAddress));
        assert_eq!(p.check(&to(true, "169.254.169.254", None)), Err(Refusal::InternalAddress));
        assert_eq!(p.check(&to(true, "::1", Some(443))), Err(Refusal::InternalAddress));
    }

    #[test]
    fn allowed_hosts_may_be_internal_and_are_the_only_registries() {
        let p = policy(&[], &["127.0.0.1", "*.example.com", "docker.io", "quay.io:8443"]);
        assert_eq!(p.check(&to(true, "127.0.0.1", Some(5000))), Ok(()));
        assert!(p.allows_registry(&image("127.0.0.1:5000/a:1")));
        assert!(p.allows_registry(&image("r.example.com/a:1")));
        assert!(p.allows_registry(&image("a.b.example.com:444/a:1")));
        assert!(!p.allows_registry(&image("example.com/a:1")), "*. needs a label");
        assert!(!p.allows_registry(&image("badexample.com/a:1")));
        assert!(p.allows_registry(&image("nginx")));
        assert!(p.allows_registry(&image("quay.io:8443/a:1")));
        assert!(!p.allows_registry(&image("quay.io/a:1")));
        assert!(!p.allows_registry(&image("ghcr.io/o/a:1")));
        assert!(policy(&[], &[]).allows_registry(&image("ghcr.io/o/a:1")), "no list: all");
    }

    #[test]
    fn flags_are_validated() {
        for bad in ["", "a b", "host:port", "host:99999", "*.", "[::1", "x/y", "*.a:1x"] {
            assert!(RegistryPolicy::new(&[], &[bad.to_owned()]).is_err(), "{bad:?}");
        }
        assert!(RegistryPolicy::new(&["*.example.com".to_owned()], &[]).is_err());
        let p = policy(&["[::1]:5000"], &["[fe80::1]"]);
        assert_eq!(p.check(&to(false, "::1", Some(5000))), Ok(()));
        assert_eq!(p.check(&to(true, "fe80::1", Some(1))), Ok(()));
        let upper = policy(&["LocalHost:5000"], &[]);
        assert!(upper.is_insecure("localhost", Some(5000)));
        let hub = policy(&["docker.io"], &[]);
        assert!(hub.is_insecure("registry-1.docker.io", None));
    }
}
