//! An image reference as a container spec writes it, split by the OCI
//! distribution grammar: `[host[:port]/]path[:tag][@algorithm:hex]`. The
//! repository is kept as written (`nginx` stays `nginx`); expanding it to
//! `docker.io/library/nginx` is the registry client's business, which builds
//! its reference from this parse (`crate::registry::ImageRef::from_name`).

/// The parts of an image reference, borrowed from the text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageName<'a> {
    /// Everything before the tag and digest, as written.
    pub repository: &'a str,
    pub tag: Option<&'a str>,
    /// `sha256:<64 hex>` or another `algorithm:hex` digest.
    pub digest: Option<&'a str>,
}

/// The tag the registry serves when a reference names none.
pub const DEFAULT_TAG: &str = "latest";

const MAX_TAG: usize = 128;

impl<'a> ImageName<'a> {
    /// Splits `image`; `None` if it is not a valid reference.
    pub fn parse(image: &'a str) -> Option<Self> {
        let (rest, digest) = match image.split_once('@') {
            Some((rest, digest)) => (rest, Some(digest)),
            None => (image, None),
        };
        if digest.is_some_and(|d| !is_digest(d)) {
            return None;
        }
        // A ':' after the last '/' starts the tag; before it, it is a port.
        let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (repository, tag) = match rest[last_slash..].rfind(':') {
            Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
            None => (rest, None),
        };
        if tag.is_some_and(|t| !is_tag(t)) || !is_repository(repository) {
            return None;
        }
        Some(ImageName { repository, tag, digest })
    }

    /// The registry host as written (`ghcr.io`, `localhost:5000`), or `None`
    /// when the repository names none (Docker Hub's short form).
    pub fn host(&self) -> Option<&'a str> {
        split_host(self.repository).0
    }

    /// The repository's path inside its registry, as written (`org/app`, `nginx`).
    pub fn path(&self) -> &'a str {
        split_host(self.repository).1
    }

    /// The tag, or `latest` when none is written.
    pub fn tag_or_default(&self) -> &'a str {
        self.tag.unwrap_or(DEFAULT_TAG)
    }

    /// `<repository>:<tag>`: what is resolved, and what a pin is undone to.
    pub fn tagged(&self) -> String {
        format!("{}:{}", self.repository, self.tag_or_default())
    }

    /// `<repository>:<tag>@<digest>`: the tag stays for readers.
    pub fn pinned(&self, digest: &str) -> String {
        format!("{}:{}@{digest}", self.repository, self.tag_or_default())
    }
}

/// `algorithm:hex`, as the grammar allows: `sha256:` with 64 lower-case hex
/// digits, or another registered algorithm with at least 32 hex digits.
pub fn is_digest(digest: &str) -> bool {
    let Some((algorithm, hex)) = digest.split_once(':') else { return false };
    let hex_ok =
        hex.len() >= 32 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let algorithm_ok = !algorithm.is_empty()
        && algorithm
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+.-_".contains(&b));
    algorithm_ok && hex_ok && (algorithm != "sha256" || hex.len() == 64)
}

/// `[\w][\w.-]{0,127}`.
fn is_tag(tag: &str) -> bool {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let bytes = tag.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_TAG
        && word(bytes[0])
        && bytes.iter().all(|&b| word(b) || b == b'.' || b == b'-')
}

/// `[host[:port]/]component(/component)*`, components lower-case alphanumerics
/// joined by `.`, `_`, `__` or runs of `-`. A host may have upper case, a path may not.
fn is_repository(repository: &str) -> bool {
    let (host, path) = split_host(repository);
    host.is_none_or(is_host) && path.split('/').all(is_path_component)
}

/// Splits off the host: the first component is one when more follow and it
/// has a `.` or `:` or is `localhost`, as `docker pull` decides.
fn split_host(repository: &str) -> (Option<&str>, &str) {
    match repository.split_once('/') {
        Some((first, path))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            (Some(first), path)
        }
        _ => (None, repository),
    }
}

fn is_host(host: &str) -> bool {
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port)) => (name, Some(port)),
        None => (host, None),
    };
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    name.split('.').all(label_ok)
        && port.is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

fn is_path_component(component: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = component.as_bytes();
    if bytes.is_empty() || !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return false;
    }
    // Separators: `.`, `_`, `__`, or any run of `-`, always between alphanumerics.
    let mut i = 0;
    while i < bytes.len() {
        if alnum(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let separator = &component[start..i];
        let ok = matches!(separator, "." | "_" | "__") || separator.bytes().all(|b| b == b'-');
        if !ok {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn parts(image: &str) -> Option<(&str, Option<&str>, Option<&str>)> {
        ImageName::parse(image).map(|n| (n.repository, n.tag, n.digest))
    }

    #[test]
    fn splits_repository_tag_and_digest_as_written() {
        assert_eq!(parts("nginx"), Some(("nginx", None, None)));
        assert_eq!(parts("nginx:1.27"), Some(("nginx", Some("1.27"), None)));
        assert_eq!(parts("library/nginx:latest"), Some(("library/nginx", Some("latest"), None)));
        assert_eq!(parts("localhost:5000/team/app"), Some(("localhost:5000/team/app", None, None)));
        assert_eq!(
            parts("localhost:5000/app:prod"),
            Some(("localhost:5000/app", Some("prod"), None))
        );
        assert_eq!(parts("ghcr.io/org/app:prod"), Some(("ghcr.io/org/app", Some("prod"), None)));
        assert_eq!(parts(&format!("app@{D}")), Some(("app", None, Some(D))));
        assert_eq!(parts(&format!("r.io/app:1@{D}")), Some(("r.io/app", Some("1"), Some(D))));
        assert_eq!(
            parts("my_app/a__b/c--d/e.f:v1.0-rc_1"),
            Some(("my_app/a__b/c--d/e.f", Some("v1.0-rc_1"), None))
        );
        assert_eq!(
            parts("Registry.Example.com/app"),
            Some(("Registry.Example.com/app", None, None))
        );
    }

    #[test]
    fn refuses_what_the_grammar_refuses() {
        for bad in [
            "",
            "Nginx",
            "nginx:",
            "nginx:-x",
            ":tag",
            "a//b",
            "a/",
            "/a",
            "a_-b",
            "a..b",
            "app@sha256:abc",
            "app@sha256:",
            "app@",
            "host:port/app",
            "a b",
            &format!("app:{}", "t".repeat(129)),
            &format!("app@SHA256:{}", &D[7..]),
        ] {
            assert_eq!(ImageName::parse(bad), None, "{bad:?}");
        }
        assert!(ImageName::parse(&format!("app:{}", "t".repeat(128))).is_some());
    }

    #[test]
    fn the_host_is_split_off_as_docker_pull_splits_it() {
        let split = |image| ImageName::parse(image).map(|n| (n.host(), n.path()));
        assert_eq!(split("nginx"), Some((None, "nginx")));
        assert_eq!(split("library/nginx"), Some((None, "library/nginx")));
        assert_eq!(split("localhost/app"), Some((Some("localhost"), "app")));
        assert_eq!(split("localhost:5000/a/b:1"), Some((Some("localhost:5000"), "a/b")));
        assert_eq!(split("Registry.Example.com/app"), Some((Some("Registry.Example.com"), "app")));
        assert_eq!(split("localhost"), Some((None, "localhost")), "a host needs a path");
    }

    #[test]
    fn tagged_and_pinned_keep_the_repository_as_written() {
        let name = ImageName::parse("nginx").expect("valid");
        assert_eq!(name.tagged(), "nginx:latest");
        assert_eq!(name.pinned(D), format!("nginx:latest@{D}"));
        let pinned = format!("localhost:5000/app:prod@{D}");
        let name = ImageName::parse(&pinned).expect("valid");
        assert_eq!(name.tagged(), "localhost:5000/app:prod");
        assert_eq!(ImageName::parse(&name.pinned(D)), Some(name));
    }
}
