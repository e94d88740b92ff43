//! Image references as the registry client addresses them, built from the core's parse of the
//! distribution grammar ([`ImageName`], the one `docker pull` and the kubelet use), so that what
//! the webhook tracks and what the registry client asks for are read by one grammar. Normalised:
//! `nginx` is `docker.io/library/nginx:latest`, `index.docker.io/x` is `docker.io/library/x:latest`.
//!
//! What this adds to [`ImageName`]: the registry host, lower-cased (host names are
//! case-insensitive, so `GHCR.io/o/a` and `ghcr.io/o/a` share one cache entry and one set of
//! credentials) and Docker Hub's three spellings folded into `docker.io`; the repository inside
//! it; the limits a registry imposes beyond the grammar (a repository of at most 255 characters,
//! digests of a registered algorithm at its length); "is this pinned"; and the host to contact,
//! which for Docker Hub is `registry-1.docker.io`.

use std::fmt;

use crate::core::inputs::image::ImageName;
use crate::core::inputs::image::reference::DEFAULT_TAG;

/// The registry name Docker Hub images carry once normalised.
pub const DOCKER_HUB: &str = "docker.io";
/// The host that serves Docker Hub's distribution API.
pub const DOCKER_HUB_ENDPOINT: &str = "registry-1.docker.io";
/// Other names that mean Docker Hub in references and in pull secrets' registry keys.
const DOCKER_HUB_ALIASES: [&str; 3] = [DOCKER_HUB, "index.docker.io", DOCKER_HUB_ENDPOINT];
/// Docker Hub's namespace of official images, implied by a one-component repository.
const DOCKER_HUB_OFFICIAL: &str = "library";

/// The longest repository a registry accepts (the distribution reference's `NameTotalLengthMax`).
const MAX_REPOSITORY: usize = 255;

/// The digest algorithms registries serve, with the hex length of each (the OCI image spec's
/// registered algorithms).
const DIGEST_ALGORITHMS: [(&str, usize); 3] = [("sha256", 64), ("sha384", 96), ("sha512", 128)];

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

/// Why an image string is not a reference a registry can be asked for. The variants carry no
/// part of the input.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    #[error("invalid image reference: invalid reference format")]
    Invalid,
    #[error(
        "invalid image reference: repository name must not be more than {MAX_REPOSITORY} characters"
    )]
    NameTooLong,
    #[error("invalid image reference: unsupported digest algorithm or length")]
    DigestUnsupported,
}

impl ImageRef {
    /// Parses `image` as a container's `image` field. A reference with neither tag nor digest
    /// gets the tag `latest`.
    pub fn parse(image: &str) -> Result<Self, ReferenceError> {
        let name = ImageName::parse(image).ok_or(ReferenceError::Invalid)?;
        ImageRef::from_name(&name)
    }

    /// The reference the registry client asks for `name`, as the core parsed it.
    pub fn from_name(name: &ImageName<'_>) -> Result<Self, ReferenceError> {
        let mut registry =
            name.host().map_or_else(|| DOCKER_HUB.to_owned(), str::to_ascii_lowercase);
        // All three spellings of Docker Hub, which the kubelet pulls from alike, share a cache
        // entry; its one-component repositories are official images.
        let mut repository = name.path().to_owned();
        if is_docker_hub(&registry) {
            registry = DOCKER_HUB.to_owned();
            if !repository.contains('/') {
                repository = format!("{DOCKER_HUB_OFFICIAL}/{repository}");
            }
        }
        if repository.len() > MAX_REPOSITORY {
            return Err(ReferenceError::NameTooLong);
        }
        if let Some(digest) = name.digest {
            let supported = digest.split_once(':').is_some_and(|(algorithm, hex)| {
                DIGEST_ALGORITHMS.iter().any(|&(a, length)| a == algorithm && hex.len() == length)
            });
            if !supported {
                return Err(ReferenceError::DigestUnsupported);
            }
        }
        let tag = match (name.tag, name.digest) {
            (None, None) => Some(DEFAULT_TAG),
            (tag, _) => tag,
        };
        Ok(ImageRef {
            registry,
            repository,
            tag: tag.map(str::to_owned),
            digest: name.digest.map(str::to_owned),
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
        assert_eq!(tagged.to_string(), format!("ghcr.io/o/x:prod@{D}"));
        let floating = tagged.without_digest();
        assert_eq!(floating.as_ref().map(ToString::to_string).as_deref(), Some("ghcr.io/o/x:prod"));
        assert!(floating.is_some_and(|f| !f.is_pinned()));
        assert_eq!(pinned.without_digest(), None);
    }

    #[test]
    fn requests_go_to_the_endpoint() {
        let hub = parse("nginx:1.27");
        assert_eq!(hub.endpoint(), "registry-1.docker.io");
        assert_eq!(hub.repository(), "library/nginx");
        assert_eq!(hub.tag(), Some("1.27"));
        assert_eq!(parse("localhost:5000/a/b:1").endpoint(), "localhost:5000");
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
    fn what_registries_refuse_beyond_the_grammar_is_refused() {
        let long = |n: usize| format!("ghcr.io/{}", "a".repeat(n));
        assert!(ImageRef::parse(&long(255)).is_ok());
        assert_eq!(ImageRef::parse(&long(256)), Err(ReferenceError::NameTooLong));
        // Docker Hub's implied `library/` counts.
        assert_eq!(ImageRef::parse(&"a".repeat(250)), Err(ReferenceError::NameTooLong));
        for (algorithm, length) in [("sha256", 64), ("sha384", 96), ("sha512", 128)] {
            let digest = format!("{algorithm}:{}", "0".repeat(length));
            assert_eq!(parse(&format!("x@{digest}")).digest(), Some(digest.as_str()));
            let short = format!("x@{algorithm}:{}", "0".repeat(length - 2));
            assert!(ImageRef::parse(&short).is_err(), "{short}");
        }
    }

    #[test]
    fn every_spelling_of_docker_hub_is_folded_whatever_its_case() {
        for image in ["Docker.IO/nginx", "INDEX.docker.io/nginx", "Registry-1.Docker.io/nginx"] {
            assert_eq!(parse(image).to_string(), "docker.io/library/nginx:latest", "{image}");
        }
    }

    #[test]
    fn errors_do_not_echo_the_input() {
        let error = ImageRef::parse("secret-looking:@@@").err().map(|e| e.to_string());
        assert!(error.as_deref().is_some_and(|e| !e.contains("secret-looking")), "{error:?}");
    }
}
