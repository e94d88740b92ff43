//! Image references, parsed by the distribution grammar (the one `docker pull` and the kubelet
//! use) through [`oci_client::Reference`], and normalised: `nginx` is
//! `docker.io/library/nginx:latest`, `index.docker.io/x` is `docker.io/library/x:latest`.
//!
//! What this adds to `oci_client::Reference`: a lower-cased registry host (host names are
//! case-insensitive, so `GHCR.io/o/a` and `ghcr.io/o/a` share one cache entry and one set of
//! credentials), the grammar's rule that a repository path is lower case (which
//! `oci_client::Reference` lets through for `UPPER/case`), "is this pinned", and the host to
//! contact, which for Docker Hub is `registry-1.docker.io` (oci-client would contact
//! `index.docker.io`).

use std::fmt;

use oci_client::Reference;

/// The registry name Docker Hub images carry once normalised.
pub const DOCKER_HUB: &str = "docker.io";
/// The host that serves Docker Hub's distribution API.
pub const DOCKER_HUB_ENDPOINT: &str = "registry-1.docker.io";
/// Other names that mean Docker Hub in references and in pull secrets' registry keys.
const DOCKER_HUB_ALIASES: [&str; 3] = [DOCKER_HUB, "index.docker.io", DOCKER_HUB_ENDPOINT];

/// Whether `host` (without a port) is one of Docker Hub's names.
pub fn is_docker_hub(host: &str) -> bool {
    DOCKER_HUB_ALIASES.iter().any(|alias| alias.eq_ignore_ascii_case(host))
}

/// A parsed, normalised image reference: registry, repository, tag and/or digest.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ImageRef {
    registry: String,
    repository: String,
    tag: Option<String>,
    digest: Option<String>,
}

/// Why an image string is not a reference. The variants carry no part of the input.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    #[error("invalid image reference: {0}")]
    Invalid(oci_client::ParseError),
}

impl ImageRef {
    /// Parses `image` as a container's `image` field. A reference with neither tag nor digest
    /// gets the tag `latest`.
    pub fn parse(image: &str) -> Result<Self, ReferenceError> {
        let parsed = Reference::try_from(image).map_err(ReferenceError::Invalid)?;
        // oci-spec's pattern lets `UPPER/case` through as a Docker Hub repository; the
        // distribution grammar (and `docker pull`) rejects upper case in the path.
        if parsed.repository().bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(ReferenceError::Invalid(oci_client::ParseError::NameContainsUppercase));
        }
        let mut registry = parsed.registry().to_ascii_lowercase();
        // oci-spec folds `index.docker.io` into `docker.io`; do the same for the API host, which
        // the kubelet also pulls from, so all three spellings share a cache entry.
        let mut repository = parsed.repository().to_owned();
        if registry == DOCKER_HUB_ENDPOINT {
            registry = DOCKER_HUB.to_owned();
            if !repository.contains('/') {
                repository = format!("library/{repository}");
            }
        }
        Ok(ImageRef {
            registry,
            repository,
            tag: parsed.tag().map(str::to_owned),
            digest: parsed.digest().map(str::to_owned),
        })
    }

    /// The registry as normalised: `docker.io` for Docker Hub, otherwise `host[:port]`, lower case.
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// The repository inside the registry: `library/nginx`, `org/app`.
    pub fn repository(&self) -> &str {
        &self.repository
    }

    /// The tag, if any (`latest` when the image named neither tag nor digest).
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// The digest the author pinned (`sha256:…`), if any.
    pub fn digest(&self) -> Option<&str> {
        self.digest.as_deref()
    }

    /// Whether the image names a digest (`name@sha256:…` or `name:tag@sha256:…`): it runs exactly
    /// that manifest whatever its tag points at, so there is nothing to resolve.
    pub fn is_pinned(&self) -> bool {
        self.digest.is_some()
    }

    /// The same image by its tag alone, for an image pinned as `name:tag@sha256:…` that is to be
    /// re-resolved through its tag. `None` when there is no tag to resolve (`name@sha256:…`).
    pub fn without_digest(&self) -> Option<ImageRef> {
        self.tag.as_ref()?;
        Some(ImageRef { digest: None, ..self.clone() })
    }

    /// Whether the image is on Docker Hub.
    pub fn is_docker_hub(&self) -> bool {
        self.registry == DOCKER_HUB
    }

    /// The `host[:port]` to send requests to: `registry-1.docker.io` for Docker Hub, the
    /// registry itself otherwise.
    pub fn endpoint(&self) -> &str {
        if self.is_docker_hub() { DOCKER_HUB_ENDPOINT } else { &self.registry }
    }

    /// The registry's host without its port, for matching pull secrets' keys.
    pub fn host_and_port(&self) -> (&str, Option<&str>) {
        split_port(&self.registry)
    }

    /// `registry/repository`, the name without tag or digest.
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// The reference oci-client is given: addressed to [`ImageRef::endpoint`], so Docker Hub is
    /// reached at `registry-1.docker.io`.
    pub fn to_oci(&self) -> Reference {
        let registry = self.endpoint().to_owned();
        let repository = self.repository.clone();
        match (&self.tag, &self.digest) {
            (Some(tag), Some(digest)) => {
                Reference::with_tag_and_digest(registry, repository, tag.clone(), digest.clone())
            }
            (None, Some(digest)) => Reference::with_digest(registry, repository, digest.clone()),
            (tag, None) => Reference::with_tag(
                registry,
                repository,
                tag.clone().unwrap_or_else(|| "latest".to_owned()),
            ),
        }
    }
}

/// Splits `host:port`; an IPv6 literal is not valid in an image reference, so the last colon
/// is the port's.
pub fn split_port(host_port: &str) -> (&str, Option<&str>) {
    match host_port.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (host_port, None),
    }
}

impl fmt::Display for ImageRef {
    /// The canonical form: `docker.io/library/nginx:latest`, `ghcr.io/o/a:prod@sha256:…`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ImageRef({self})")
    }
}

impl std::str::FromStr for ImageRef {
    type Err = ReferenceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ImageRef::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn parse(image: &str) -> ImageRef {
        match ImageRef::parse(image) {
            Ok(reference) => reference,
            Err(error) => panic!("{image}: {error}"),
        }
    }

    #[test]
    fn docker_hub_short_names_are_normalised() {
        for image in [
            "nginx",
            "nginx:latest",
            "library/nginx",
            "docker.io/nginx",
            "docker.io/library/nginx",
            "index.docker.io/nginx",
            "index.docker.io/library/nginx:latest",
            "registry-1.docker.io/nginx",
            "registry-1.docker.io/library/nginx",
        ] {
            let reference = parse(image);
            assert_eq!(reference.to_string(), "docker.io/library/nginx:latest", "{image}");
            assert!(reference.is_docker_hub());
            assert_eq!(reference.endpoint(), "registry-1.docker.io");
            assert!(!reference.is_pinned());
        }
        let user = parse("index.docker.io/x");
        assert_eq!(user.to_string(), "docker.io/library/x:latest");
        let user = parse("bitnami/redis:7");
        assert_eq!(
            (user.registry(), user.repository(), user.tag()),
            ("docker.io", "bitnami/redis", Some("7"))
        );
    }

    #[test]
    fn other_registries_keep_their_host_and_port() {
        let local = parse("localhost:5000/a/b:1");
        assert_eq!(
            (local.registry(), local.repository(), local.tag()),
            ("localhost:5000", "a/b", Some("1"))
        );
        assert_eq!(local.endpoint(), "localhost:5000");
        assert_eq!(local.host_and_port(), ("localhost", Some("5000")));
        let localhost = parse("localhost/app");
        assert_eq!(localhost.registry(), "localhost");
        let ghcr = parse("ghcr.io/o/a:prod");
        assert_eq!(ghcr.to_string(), "ghcr.io/o/a:prod");
        assert_eq!(ghcr.endpoint(), "ghcr.io");
        assert_eq!(ghcr.name(), "ghcr.io/o/a");
        assert!(!ghcr.is_docker_hub());
        let upper = parse("GHCR.io/o/a:prod");
        assert_eq!(upper, ghcr, "host names are case-insensitive");
    }

    #[test]
    fn digests_pin_with_or_without_a_tag() {
        let pinned = parse(&format!("x@{D}"));
        assert!(pinned.is_pinned());
        assert_eq!((pinned.tag(), pinned.digest()), (None, Some(D)));
        assert_eq!(pinned.to_string(), format!("docker.io/library/x@{D}"));
        let tagged = parse(&format!("ghcr.io/o/x:prod@{D}"));
        assert!(tagged.is_pinned());
        assert_eq!((tagged.tag(), tagged.digest()), (Some("prod"), Some(D)));
        assert_eq!(tagged.to_oci().to_string(), format!("ghcr.io/o/x:prod@{D}"));
        let floating = tagged.without_digest();
        assert_eq!(floating.as_ref().map(ToString::to_string).as_deref(), Some("ghcr.io/o/x:prod"));
        assert!(floating.is_some_and(|f| !f.is_pinned()));
        assert_eq!(pinned.without_digest(), None);
    }

    #[test]
    fn oci_reference_goes_to_the_endpoint() {
        let oci = parse("nginx:1.27").to_oci();
        assert_eq!(oci.resolve_registry(), "registry-1.docker.io");
        assert_eq!(oci.repository(), "library/nginx");
        assert_eq!(oci.tag(), Some("1.27"));
        assert_eq!(parse("localhost:5000/a/b:1").to_oci().resolve_registry(), "localhost:5000");
    }

    #[test]
    fn invalid_references_are_rejected() {
        for image in [
            "",
            "UPPER/case",
            "nginx:",
            "nginx@sha256:abc",
            "nginx@sha256:0123",
            "nginx@md5:0123456789abcdef0123456789abcdef",
            "https://ghcr.io/o/a",
            "ghcr.io/o/a:tag with space",
            "/leading/slash",
            "a//b",
            ":tag",
        ] {
            assert!(ImageRef::parse(image).is_err(), "{image:?} should not parse");
        }
    }

    #[test]
    fn errors_do_not_echo_the_input() {
        let error = ImageRef::parse("secret-looking:@@@").err().map(|e| e.to_string());
        assert!(error.as_deref().is_some_and(|e| !e.contains("secret-looking")), "{error:?}");
    }
}
