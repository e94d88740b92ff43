//! Annotation names (README, "Annotations"): the digest keys configsum owns and the
//! workload annotations it reads, all under one configurable domain.

use std::borrow::Cow;
use std::collections::BTreeMap;

use sha2::{Digest as _, Sha256};

use super::hex::hex;
use super::kinds::WorkloadKind;
use super::object_ref::{ObjectKind, ObjectRef, is_dns_subdomain};

/// The API server's limit on the total size of one object's annotations.
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// The annotation value of a referenced object that does not exist.
pub const ABSENT: &str = "absent";

pub const DEFAULT_DOMAIN: &str = "configsum.dev";

/// The namespace label that opts a namespace in (docs/install.md). It does not move
/// with `--annotation-domain`: the webhook configuration selects on it.
pub const NAMESPACE_LABEL: &str = "configsum.dev/enabled";

/// The controller's default `--namespace-selector`: the opt-in label.
pub const DEFAULT_NAMESPACE_SELECTOR: &str = "configsum.dev/enabled=true";

/// The word of a SecretProviderClass's annotation prefix (`core::inputs::secret_provider_class`
/// says what it digests).
pub const PROVIDER_CLASS_WORD: &str = "secretproviderclass";

/// Longest name used as is in a key; longer names are shortened and hashed.
const MAX_NAME_PART: usize = 63;
const SHORTENED_PREFIX: usize = 52;
const NAME_HASH_DIGITS: usize = 10;

/// The annotation domain (`--annotation-domain`), and the names derived from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnnotationDomain {
    domain: String,
    /// `<word>.<domain>/` of each tracked kind, indexed by `ObjectKind`.
    prefixes: Vec<String>,
    /// `image.<domain>/`.
    image_prefix: String,
    /// `secretproviderclass.<domain>/`.
    provider_class_prefix: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "annotation domain {0:?} is not a valid DNS subdomain of at most 243 characters \
     (`configmap.<domain>` must stay a valid annotation prefix)"
)]
pub struct InvalidDomain(pub String);

impl AnnotationDomain {
    /// The names under the domain a workload's own annotations are read for, for
    /// [`Self::value_in`].
    pub const ENABLED: &'static str = "enabled";
    pub const TRACK: &'static str = "track";
    pub const IGNORE: &'static str = "ignore";
    pub const IMAGES: &'static str = "images";
    pub const IMAGE_POLICY: &'static str = "image-policy";
    pub const IMAGE_ENV: &'static str = "image-env";

    pub fn new(domain: &str) -> Result<Self, InvalidDomain> {
        // The whole prefix, `<word>.<domain>`, may be 253 characters.
        let longest_word = ObjectKind::all().map(|kind| kind.prefix().len()).max().unwrap_or(0);
        if !is_dns_subdomain(domain, 253 - longest_word - 1) {
            return Err(InvalidDomain(domain.to_owned()));
        }
        let prefixes = ObjectKind::all().map(|kind| format!("{}.{domain}/", kind.prefix()));
        Ok(AnnotationDomain {
            domain: domain.to_owned(),
            prefixes: prefixes.collect(),
            image_prefix: format!("image.{domain}/"),
            provider_class_prefix: format!("{PROVIDER_CLASS_WORD}.{domain}/"),
        })
    }

    /// `<domain>/<name>`, sized at once: `format!` grows its buffer for these, two
    /// allocations where one does.
    fn under(&self, name: &str) -> String {
        let mut key = String::with_capacity(self.domain.len() + 1 + name.len());
        key.push_str(&self.domain);
        key.push('/');
        key.push_str(name);
        key
    }

    /// The value of `<domain>/<name>` in `annotations`, its key built on the stack: a review
    /// looks several up, and building each key was an allocation.
    pub fn value_in<'m>(
        &self,
        annotations: Option<&'m BTreeMap<String, String>>,
        name: &str,
    ) -> Option<&'m str> {
        let annotations = annotations?;
        let mut buffer = [0u8; 320];
        let len = self.domain.len() + 1 + name.len();
        let Some(key) = buffer.get_mut(..len) else {
            return annotations.get(&self.under(name)).map(String::as_str);
        };
        key[..self.domain.len()].copy_from_slice(self.domain.as_bytes());
        key[self.domain.len()] = b'/';
        key[self.domain.len() + 1..].copy_from_slice(name.as_bytes());
        // Two strings joined by an ASCII byte are UTF-8.
        let key = std::str::from_utf8(key).ok()?;
        annotations.get(key).map(String::as_str)
    }

    /// `<domain>/enabled`: `"false"` leaves the object untouched.
    pub fn enabled(&self) -> String {
        self.under(Self::ENABLED)
    }

    /// `<domain>/track`: the refs to track (default `*`).
    pub fn track(&self) -> String {
        self.under(Self::TRACK)
    }

    /// `<domain>/ignore`: refs never to track.
    pub fn ignore(&self) -> String {
        self.under(Self::IGNORE)
    }

    /// `<domain>/readable-from`, on a ConfigMap or Secret: the namespaces whose workloads may
    /// track it (`secret/<namespace>/<name>`).
    pub fn readable_from(&self) -> String {
        self.under("readable-from")
    }

    /// `<domain>/images`: `*` or the containers whose image digests are tracked.
    pub fn images(&self) -> String {
        self.under(Self::IMAGES)
    }

    /// `<domain>/image-policy`: `record` (the default) or `pin`.
    pub fn image_policy(&self) -> String {
        self.under(Self::IMAGE_POLICY)
    }

    /// `<domain>/image-env`: `<container>/<VAR>=<image>` entries, digests handed on.
    pub fn image_env(&self) -> String {
        self.under(Self::IMAGE_ENV)
    }

    /// `<domain>/canary`: `"true"` on a workload puts it in the first wave of every change.
    pub fn canary(&self) -> String {
        self.under("canary")
    }

    /// `<domain>/fan-out`: `"all"` on a ConfigMap or Secret skips waves for its changes.
    pub fn fan_out(&self) -> String {
        self.under("fan-out")
    }

    /// `<domain>/resume`: on a source, the id of a halted change to go on with.
    pub fn resume(&self) -> String {
        self.under("resume")
    }

    /// `<domain>/roll-window`: when the controller may roll a workload (or a namespace's).
    pub fn roll_window(&self) -> String {
        self.under("roll-window")
    }

    /// `<domain>/shard`: a label on the Events of a sharded controller, `<I>-of-<N>`.
    pub fn shard(&self) -> String {
        format!("{}/shard", self.domain)
    }

    /// `<domain>/paused`: `"true"` on a workload: the controller never rolls it.
    pub fn paused(&self) -> String {
        self.under("paused")
    }

    /// `<domain>/waves`: on a workload's own metadata, the waves it rolled in, per source —
    /// what a new leader needs to go on with a fan-out where it stood.
    pub fn waves(&self) -> String {
        self.under("waves")
    }

    /// `image.<domain>/<container>`: the digest behind a container's tag.
    pub fn image_key(&self, container: &str) -> String {
        joined(&self.image_prefix, &name_part(container))
    }

    /// Whether `key` is an image digest annotation.
    pub fn is_image_key(&self, key: &str) -> bool {
        key.starts_with(&self.image_prefix)
    }

    /// The digest annotation key for `object`, whose name must already be valid.
    pub fn key_for(&self, object: &ObjectRef) -> String {
        let prefix = &self.prefixes[object.kind as usize];
        match &object.namespace {
            // `_` is in no namespace or object name: never the key of a local object.
            Some(namespace) => joined(prefix, &name_part(&format!("{namespace}_{}", object.name))),
            None => joined(prefix, &name_part(&object.name)),
        }
    }

    /// `<word>.<domain>/<name>`: the digest of a tracked workload's pod template; `None`
    /// when the prefix would be longer than an annotation prefix may be (a long kind name
    /// under a long domain).
    pub fn workload_key(&self, kind: WorkloadKind, name: &str) -> Option<String> {
        let prefix = format!("{}.{}", kind.word(), self.domain);
        (prefix.len() <= 253).then(|| format!("{prefix}/{}", name_part(name)))
    }

    /// `<word>.<domain>/` of every trackable workload kind: the annotations a tracked
    /// workload's template digest leaves out.
    pub fn workload_prefixes(&self) -> Vec<String> {
        let trackable = WorkloadKind::all().filter(|kind| kind.trackable());
        trackable.map(|kind| format!("{}.{}/", kind.word(), self.domain)).collect()
    }

    /// Whether `key` is a tracked workload's digest annotation.
    pub fn is_workload_key(&self, key: &str) -> bool {
        let Some((prefix, _)) = key.split_once('/') else { return false };
        let word = prefix.strip_suffix(self.domain.as_str()).and_then(|p| p.strip_suffix('.'));
        word.is_some_and(|word| WorkloadKind::trackable_from_word(word).is_some())
    }

    /// `secretproviderclass.<domain>/<class>`: the digest of a SecretProviderClass's object
    /// versions; `None` when the prefix would be longer than an annotation prefix may be (a
    /// domain close to its limit).
    pub fn provider_class_key(&self, class: &str) -> Option<String> {
        (self.provider_class_prefix.len() <= 254)
            .then(|| joined(&self.provider_class_prefix, &name_part(class)))
    }

    /// Whether `key` is a SecretProviderClass's digest annotation.
    pub fn is_provider_class_key(&self, key: &str) -> bool {
        key.starts_with(&self.provider_class_prefix)
    }

    /// Whether configsum owns `key`: it adds, updates and removes exactly these.
    pub fn owns(&self, key: &str) -> bool {
        self.prefixes.iter().any(|prefix| key.starts_with(prefix.as_str()))
            || self.is_image_key(key)
            || self.is_workload_key(key)
            || self.is_provider_class_key(key)
    }
}

impl Default for AnnotationDomain {
    fn default() -> Self {
        AnnotationDomain::new(DEFAULT_DOMAIN).unwrap_or_else(|_| unreachable!())
    }
}

/// The name itself up to 63 characters; else its first 52 characters, `-` and
/// the first 10 hex digits of SHA-256(name), which keeps the key a valid
/// qualified name. Valid object names are ASCII, so byte slicing is safe.
/// `prefix` and `rest` in one allocation of the right size.
fn joined(prefix: &str, rest: &str) -> String {
    let mut key = String::with_capacity(prefix.len() + rest.len());
    key.push_str(prefix);
    key.push_str(rest);
    key
}

fn name_part(name: &str) -> Cow<'_, str> {
    if name.len() <= MAX_NAME_PART {
        return Cow::Borrowed(name);
    }
    let hash = hex(&Sha256::digest(name.as_bytes()));
    let prefix = name.get(..SHORTENED_PREFIX).unwrap_or(name);
    Cow::Owned(format!("{prefix}-{}", &hash[..NAME_HASH_DIGITS]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_for_each_kind() {
        let domain = AnnotationDomain::default();
        assert_eq!(domain.key_for(&ObjectRef::config_map("app")), "configmap.configsum.dev/app");
        assert_eq!(domain.key_for(&ObjectRef::secret("db.creds")), "secret.configsum.dev/db.creds");
    }

    #[test]
    fn provider_class_keys_move_with_the_domain_and_are_owned() {
        let domain = AnnotationDomain::default();
        let key = domain.provider_class_key("vault").expect("fits");
        assert_eq!(key, "secretproviderclass.configsum.dev/vault");
        assert!(domain.owns(&key) && domain.is_provider_class_key(&key));
        let other = AnnotationDomain::new("example.com").expect("valid");
        assert_eq!(
            other.provider_class_key("vault").as_deref(),
            Some("secretproviderclass.example.com/vault")
        );
        assert!(!other.owns(&key));
        let long = "v".repeat(80);
        let shortened = domain.provider_class_key(&long).expect("fits");
        assert_eq!(shortened, format!("secretproviderclass.configsum.dev/{}", name_part(&long)));
        assert_eq!(shortened.split_once('/').map(|(_, n)| n.len()), Some(63));
        // A domain at its limit leaves no room for the longer word.
        let longest = format!("{}.dev", "a".repeat(243 - 4));
        let longest = AnnotationDomain::new(&longest).expect("valid");
        assert_eq!(longest.provider_class_key("vault"), None);
    }

    #[test]
    fn long_names_are_shortened_with_a_hash() {
        let domain = AnnotationDomain::default();
        assert_eq!(
            domain.key_for(&ObjectRef::config_map("a".repeat(70))),
            "configmap.configsum.dev/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-6bd5e50348"
        );
        let at_limit = "b".repeat(63);
        assert_eq!(
            domain.key_for(&ObjectRef::secret(&at_limit)),
            format!("secret.configsum.dev/{at_limit}")
        );
        let name_part_len = |n: usize| {
            let key = domain.key_for(&ObjectRef::secret("c".repeat(n)));
            key.len() - "secret.configsum.dev/".len()
        };
        assert_eq!(name_part_len(64), 63);
        assert_eq!(name_part_len(253), 63);
    }

    #[test]
    fn custom_domain_moves_every_name() {
        let domain = AnnotationDomain::new("example.com").expect("valid domain");
        assert_eq!(domain.key_for(&ObjectRef::config_map("x")), "configmap.example.com/x");
        assert_eq!(domain.key_for(&ObjectRef::secret("x")), "secret.example.com/x");
        assert_eq!(domain.enabled(), "example.com/enabled");
        assert_eq!(domain.track(), "example.com/track");
        assert_eq!(domain.canary(), "example.com/canary");
        assert_eq!(domain.fan_out(), "example.com/fan-out");
        assert_eq!(domain.resume(), "example.com/resume");
        assert_eq!(domain.roll_window(), "example.com/roll-window");
        assert_eq!(domain.paused(), "example.com/paused");
        assert_eq!(domain.waves(), "example.com/waves");
        assert_eq!(domain.ignore(), "example.com/ignore");
        assert_eq!(DEFAULT_NAMESPACE_SELECTOR, format!("{NAMESPACE_LABEL}=true"));
        assert!(domain.owns("secret.example.com/x"));
        assert!(!domain.owns("secret.configsum.dev/x"));
        assert!(!domain.owns("example.com/track"));
    }

    #[test]
    fn owns_only_digest_keys() {
        let domain = AnnotationDomain::default();
        assert!(domain.owns("configmap.configsum.dev/a"));
        assert!(domain.owns("secret.configsum.dev/a"));
        for other in
            ["configsum.dev/track", "configmap.configsum.devx/a", "app/configmap.configsum.dev/a"]
        {
            assert!(!domain.owns(other), "{other}");
        }
    }

    #[test]
    fn tracked_workloads_have_keys_of_their_own_kind() {
        let domain = AnnotationDomain::new("example.com").expect("valid domain");
        let key = domain.workload_key(WorkloadKind::StatefulSet, "keycloak-db");
        assert_eq!(key.as_deref(), Some("statefulset.example.com/keycloak-db"));
        assert!(domain.owns("deployment.example.com/db") && domain.owns("rollout.example.com/r"));
        assert!(domain.is_workload_key("daemonset.example.com/x"));
        for other in ["job.example.com/x", "pod.example.com/x", "deployment.example.org/x"] {
            assert!(!domain.owns(other), "{other}: not a trackable kind of this domain");
        }
        assert!(domain.workload_prefixes().contains(&"replicaset.example.com/".to_owned()));
        let longest = AnnotationDomain::new(&"a".repeat(243)).expect("valid domain");
        assert_eq!(longest.workload_key(WorkloadKind::StatefulSet, "db"), None, "too long");
        assert!(longest.workload_key(WorkloadKind::Rollout, "db").is_some());
    }

    #[test]
    fn rejects_invalid_domains() {
        for bad in ["", "Configsum.dev", "a/b", "-x.dev", &"a".repeat(244)] {
            assert!(AnnotationDomain::new(bad).is_err(), "{bad}");
        }
        assert!(AnnotationDomain::new(&"a".repeat(243)).is_ok());
    }
}
