//! `ObjectRef`: a tracked object (a ConfigMap or Secret) as a workload names it — in its own
//! namespace, or in another one that consents (`secret/<namespace>/<name>`) — and
//! [`ObjectKey`]: an object with its namespace, for what spans namespaces (the controller).

use std::fmt;

/// The kinds of object configsum digests, each declared in `core::inputs`.
/// The derived order puts ConfigMaps before Secrets, which is the order the
/// "Limits" in docs/behaviour.md gives for the 128-object limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ObjectKind {
    ConfigMap,
    Secret,
}

impl ObjectKind {
    /// The Kubernetes kind, as bound into the digest input.
    pub fn as_str(self) -> &'static str {
        self.input().api_kind
    }

    /// The lower-case word used in refs (`configmap/x`) and annotation keys.
    pub fn prefix(self) -> &'static str {
        self.input().word
    }
}

/// A ConfigMap or Secret by name, as a workload names it. The derived order puts the
/// workload's own objects before other namespaces' (`None` first).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    pub kind: ObjectKind,
    /// Another namespace's object, read only with its owner's consent; `None`: the
    /// workload's own namespace.
    pub namespace: Option<Box<str>>,
    pub name: String,
}

impl ObjectRef {
    pub fn new(kind: ObjectKind, name: impl Into<String>) -> Self {
        ObjectRef { kind, namespace: None, name: name.into() }
    }

    pub fn config_map(name: impl Into<String>) -> Self {
        ObjectRef::new(ObjectKind::ConfigMap, name)
    }

    pub fn secret(name: impl Into<String>) -> Self {
        ObjectRef::new(ObjectKind::Secret, name)
    }

    /// Object `name` of `kind` in namespace `namespace`, named from another one.
    pub fn across(kind: ObjectKind, namespace: &str, name: impl Into<String>) -> Self {
        ObjectRef { kind, namespace: Some(namespace.into()), name: name.into() }
    }

    /// Parses `<word>/<name>`, such as `configmap/app` (the `track`/`ignore` syntax).
    /// The name is not validated here; see [`is_valid_object_name`].
    pub fn parse(token: &str) -> Option<Self> {
        let (word, name) = token.split_once('/')?;
        Some(ObjectRef::new(ObjectKind::from_word(word)?, name))
    }

    /// The namespace the object lives in, named from a workload of `namespace`.
    pub fn namespace_from<'a>(&'a self, namespace: &'a str) -> &'a str {
        self.namespace.as_deref().unwrap_or(namespace)
    }
}

impl fmt::Display for ObjectRef {
    /// `secret/db`, or `secret/<namespace>/db` for another namespace's.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(namespace) => write!(f, "{}/{namespace}/{}", self.kind.prefix(), self.name),
            None => write!(f, "{}/{}", self.kind.prefix(), self.name),
        }
    }
}

/// A tracked object and its namespace (as kube's `ObjectRef::within` names one); `object`
/// never names a namespace of its own.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub namespace: String,
    pub object: ObjectRef,
}

impl ObjectRef {
    /// This object, named from a workload of `namespace`: in its own namespace if it names
    /// one, else in `namespace`.
    pub fn within(self, namespace: impl Into<String>) -> ObjectKey {
        let ObjectRef { kind, namespace: own, name } = self;
        let namespace = own.map_or_else(|| namespace.into(), String::from);
        ObjectKey { namespace, object: ObjectRef::new(kind, name) }
    }

    /// Whether this reference, written in a workload of `namespace`, names `object`.
    pub fn names(&self, object: &ObjectKey, namespace: &str) -> bool {
        self.kind == object.object.kind
            && self.name == object.object.name
            && self.namespace_from(namespace) == object.namespace
    }
}

impl ObjectKey {
    /// How a workload of `namespace` names this object: `secret/db`, or
    /// `secret/<namespace>/db` from another namespace.
    pub fn seen_from(&self, namespace: &str) -> ObjectRef {
        let ObjectRef { kind, name, .. } = &self.object;
        if self.namespace == namespace {
            ObjectRef::new(*kind, name.clone())
        } else {
            ObjectRef::across(*kind, &self.namespace, name.clone())
        }
    }
}

impl fmt::Display for ObjectKey {
    /// `team-a/secret/db`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.object)
    }
}

/// Whether `name` can name a ConfigMap or Secret: an RFC 1123 DNS subdomain of at
/// most 253 characters (lower-case alphanumerics, `-` and `.`, each dot-separated
/// label starting and ending alphanumeric). Empty is invalid.
pub fn is_valid_object_name(name: &str) -> bool {
    is_dns_subdomain(name, 253)
}

/// Whether `name` can name a namespace: an RFC 1123 DNS label (at most 63 characters, no dot).
pub fn is_namespace_name(name: &str) -> bool {
    is_dns_subdomain(name, 63) && !name.contains('.')
}

/// RFC 1123 subdomain check with a caller-chosen length limit.
pub fn is_dns_subdomain(name: &str, max_len: usize) -> bool {
    if name.is_empty() || name.len() > max_len {
        return false;
    }
    name.split('.').all(|label| {
        let bytes = label.as_bytes();
        let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        match (bytes.first(), bytes.last()) {
            (Some(first), Some(last)) => {
                alnum(first) && alnum(last) && bytes.iter().all(|b| alnum(b) || *b == b'-')
            }
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_refs() {
        assert_eq!(ObjectRef::parse("configmap/app"), Some(ObjectRef::config_map("app")));
        assert_eq!(ObjectRef::parse("secret/db"), Some(ObjectRef::secret("db")));
        assert_eq!(ObjectRef::parse("ConfigMap/app"), None);
        assert_eq!(ObjectRef::parse("cm/app"), None);
        assert_eq!(ObjectRef::parse("app"), None);
        assert_eq!(ObjectRef::secret("db").to_string(), "secret/db");
    }

    #[test]
    fn another_namespaces_object_is_named_with_it_and_keyed_in_it() {
        let remote = ObjectRef::across(ObjectKind::Secret, "shared", "ca");
        assert_eq!(remote.to_string(), "secret/shared/ca");
        let key = remote.clone().within("app");
        assert_eq!(key, ObjectRef::secret("ca").within("shared"));
        assert!(remote.names(&key, "app"));
        assert!(!ObjectRef::secret("ca").names(&key, "app"));
        assert!(ObjectRef::secret("ca").names(&key, "shared"));
        assert_eq!(key.seen_from("app"), remote);
        assert_eq!(key.seen_from("shared"), ObjectRef::secret("ca"));
        // The workload's own objects first, then other namespaces', each by name.
        let mut refs = vec![remote.clone(), ObjectRef::secret("z")];
        refs.sort();
        assert_eq!(refs, vec![ObjectRef::secret("z"), remote]);
    }

    #[test]
    fn configmaps_sort_before_secrets_then_by_name() {
        let mut refs =
            vec![ObjectRef::secret("a"), ObjectRef::config_map("z"), ObjectRef::config_map("b")];
        refs.sort();
        assert_eq!(
            refs,
            vec![ObjectRef::config_map("b"), ObjectRef::config_map("z"), ObjectRef::secret("a")]
        );
    }

    #[test]
    fn validates_dns_subdomains() {
        for ok in ["a", "app-config", "app.config", "0a", "a.b-c.d", &"a".repeat(253)] {
            assert!(is_valid_object_name(ok), "{ok} should be valid");
        }
        for bad in ["", "A", "a_b", "-a", "a-", "a..b", ".a", "a.", "a.-b", "ä", &"a".repeat(254)]
        {
            assert!(!is_valid_object_name(bad), "{bad} should be invalid");
        }
    }
}
