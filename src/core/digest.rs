//! The v1 digest (docs/behaviour.md, "Digest"). Its bytes are a compatibility promise: changing
//! anything here rolls every workload in every cluster on upgrade.

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::digest::Update;
use sha2::{Digest as _, Sha256};

use super::model::digest_mode::DigestMode;
use super::model::hex::prefixed_hex;
use super::model::object_content::ObjectContent;
use super::model::object_ref::ObjectRef;
use super::refs::ConsumedKeys;

const SHA256_PREFIX: &str = "sha256:";
const HMAC_PREFIX: &str = "hmac-sha256:";
const MIN_KEY_LEN: usize = 16;

/// Keys for Secret digests, read from `--digest-key-file`. The first signs;
/// the others only confirm existing digests, so a key rotates without rolling.
#[derive(Clone, Default)]
pub struct DigestKeys {
    keys: Vec<Vec<u8>>,
}

/// Why a digest key file was refused. Never carries key material.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DigestKeyError {
    #[error("the digest key file holds no key")]
    Empty,
    #[error(
        "the digest key on line {line} is {len} bytes long; each key needs at least {MIN_KEY_LEN}"
    )]
    TooShort { line: usize, len: usize },
}

impl DigestKeys {
    /// One key per line, surrounding ASCII whitespace trimmed, blank lines ignored.
    pub fn parse(text: &[u8]) -> Result<Self, DigestKeyError> {
        let mut keys = Vec::new();
        for (index, line) in text.split(|b| *b == b'\n').enumerate() {
            let key = line.trim_ascii();
            if key.is_empty() {
                continue;
            }
            if key.len() < MIN_KEY_LEN {
                return Err(DigestKeyError::TooShort { line: index + 1, len: key.len() });
            }
            keys.push(key.to_vec());
        }
        if keys.is_empty() {
            return Err(DigestKeyError::Empty);
        }
        Ok(DigestKeys { keys })
    }

    /// No keys: Secrets get plain SHA-256 digests.
    pub fn none() -> Self {
        DigestKeys::default()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

impl fmt::Debug for DigestKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DigestKeys({} keys)", self.keys.len())
    }
}

/// Where an object lives; bound into the digest input so equal data in two
/// places gives unrelated digests.
#[derive(Clone, Copy, Debug)]
pub struct ObjectId<'a> {
    pub namespace: &'a str,
    pub object: &'a ObjectRef,
}

/// Computes annotation values for ConfigMaps and Secrets.
#[derive(Clone, Debug, Default)]
pub struct Digester {
    keys: DigestKeys,
}

impl Digester {
    pub fn new(keys: DigestKeys) -> Self {
        Digester { keys }
    }

    /// The annotation value for `content`, consumed as `consumed`.
    ///
    /// For a Secret whose `existing` value is the digest of this same content under
    /// any configured key, `existing` is returned unchanged: rotating the signing key
    /// rolls nothing until the content changes.
    pub fn digest(
        &self,
        id: ObjectId<'_>,
        content: &ObjectContent,
        consumed: &ConsumedKeys,
        existing: Option<&str>,
    ) -> String {
        let signing_key = match (id.object.kind.input().digest, self.keys.keys.first()) {
            (DigestMode::Keyed, Some(key)) => key,
            _ => {
                let mut hasher = Sha256::new();
                write_input(id, content, consumed, &mut hasher);
                return prefixed_hex(SHA256_PREFIX, &hasher.finalize());
            }
        };
        let signed = hmac_value(signing_key, id, content, consumed);
        let Some(existing) = existing.filter(|e| *e != signed && e.starts_with(HMAC_PREFIX)) else {
            return signed;
        };
        let confirmed = self.keys.keys[1..]
            .iter()
            .any(|key| hmac_value(key, id, content, consumed) == existing);
        if confirmed { existing.to_owned() } else { signed }
    }
}

fn hmac_value(
    key: &[u8],
    id: ObjectId<'_>,
    content: &ObjectContent,
    consumed: &ConsumedKeys,
) -> String {
    // HMAC accepts keys of any length; `new_from_slice` cannot fail for it.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
    write_input(id, content, consumed, &mut mac);
    prefixed_hex(HMAC_PREFIX, &mac.finalize().into_bytes())
}

/// Streams the v1 digest input into `out`, so no copy of the data is made.
pub fn write_input(
    id: ObjectId<'_>,
    content: &ObjectContent,
    consumed: &ConsumedKeys,
    out: &mut impl Update,
) {
    out.update(b"configsum/v1\n");
    out.update(id.object.kind.as_str().as_bytes());
    out.update(b"\n");
    write_str(out, id.namespace);
    write_str(out, &id.object.name);
    let mut write_entry = |key: &str, value: Option<&[u8]>| {
        write_str(out, key);
        match value {
            Some(value) => {
                out.update(&[1]);
                out.update(&(value.len() as u64).to_be_bytes());
                out.update(value);
            }
            None => out.update(&[0]),
        }
    };
    // BTreeMap and BTreeSet order `String`s by their UTF-8 bytes, as the format requires.
    match consumed {
        ConsumedKeys::All => content.entries().for_each(|(k, v)| write_entry(k, Some(v))),
        ConsumedKeys::Keys(keys) => keys.iter().for_each(|k| write_entry(k, content.get(k))),
    }
}

fn write_str(out: &mut impl Update, s: &str) {
    // Names and keys are far below 4 GiB; the API server caps objects at a few MiB.
    out.update(&(s.len() as u32).to_be_bytes());
    out.update(s.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::hex::hex;
    use crate::core::model::object_ref::ObjectKind;
    use std::collections::BTreeSet;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn content(entries: &[(&str, &[u8])]) -> ObjectContent {
        ObjectContent::from_entries(
            entries.iter().map(|(k, v)| (k.to_string(), v.to_vec())).collect(),
        )
    }

    fn keys(list: &[&str]) -> ConsumedKeys {
        ConsumedKeys::Keys(list.iter().map(|k| k.to_string()).collect::<BTreeSet<_>>())
    }

    /// An object as the API returns it, decoded as its kind declares.
    fn decoded(kind: ObjectKind, object: serde_json::Value) -> ObjectContent {
        let field = |name: &str| serde_json::from_value(object.get(name)?.clone()).ok();
        kind.input().content(field).expect("valid data")
    }

    fn config_map_a() -> ObjectContent {
        decoded(
            ObjectKind::ConfigMap,
            serde_json::json!({
                "metadata": {"name": "app-config", "namespace": "team-a"},
                "data": {"log-level": "debug", "app.properties": "a=1\nb=2\n"},
                "binaryData": {"logo.png": "iVBORw0K"}
            }),
        )
    }

    fn secret_s() -> ObjectContent {
        decoded(
            ObjectKind::Secret,
            serde_json::json!({
                "metadata": {"name": "db", "namespace": "team-a"},
                "data": {"password": "aHVudGVyMg==", "username": "YWRtaW4="}
            }),
        )
    }

    fn digest(
        keyed: bool,
        ns: &str,
        object: ObjectRef,
        c: &ObjectContent,
        consumed: &ConsumedKeys,
    ) -> String {
        let keys = if keyed { DigestKeys::parse(KEY).expect("key") } else { DigestKeys::none() };
        Digester::new(keys).digest(ObjectId { namespace: ns, object: &object }, c, consumed, None)
    }

    #[test]
    fn input_bytes_for_default_c() {
        struct Collect(Vec<u8>);
        impl Update for Collect {
            fn update(&mut self, data: &[u8]) {
                self.0.extend_from_slice(data);
            }
        }
        let mut out = Collect(Vec::new());
        let object = ObjectRef::config_map("c");
        let id = ObjectId { namespace: "default", object: &object };
        write_input(id, &content(&[("k", b"v")]), &ConsumedKeys::All, &mut out);
        assert_eq!(
            hex(&out.0),
            "636f6e66696773756d2f76310a436f6e6669674d61700a0000000764656661756c740000000163000000016b01000000000000000176"
        );
    }

    #[test]
    fn spec_test_vectors() {
        let all = ConsumedKeys::All;
        let cm = ObjectRef::config_map;
        let s = || ObjectRef::secret("db");
        let cases = [
            (
                digest(false, "default", cm("c"), &content(&[("k", b"v")]), &all),
                "sha256:26168d429f573bf8c4dab0d9f8eafed2679ab5e988f5f3c90a9c0edac60bc2ba",
            ),
            (
                digest(false, "team-a", cm("app-config"), &config_map_a(), &all),
                "sha256:6aa84d86725084df4dd56c66212d1b00c3fcb3145f0eb4e0e7ecf0336ab38df5",
            ),
            (
                digest(false, "team-a", cm("app-config"), &config_map_a(), &keys(&["log-level"])),
                "sha256:ae0ce9e1a354a9cf4fe1be0dadc77d4a1e1f972409004e0ad0e5813a6062c866",
            ),
            (
                digest(
                    false,
                    "team-a",
                    cm("app-config"),
                    &config_map_a(),
                    &keys(&["log-level", "missing"]),
                ),
                "sha256:6975a42cfadfa81044545a3e672dd964b1cbab14ec0d09749dfbd67ed9733167",
            ),
            (
                digest(false, "default", cm("empty"), &ObjectContent::default(), &all),
                "sha256:f731b95b9367f78f9990c0f698fce3fe208ca784c29a1e500054e73c971c833c",
            ),
            (
                digest(false, "team-a", s(), &secret_s(), &all),
                "sha256:ce9453749df7a28f03dd7450a871546b6f0aa2dca98802812835eac969b0a5da",
            ),
            (
                digest(true, "team-a", s(), &secret_s(), &all),
                "hmac-sha256:ee8d3eae330430830554df0f8b303d6ed3b252aacea417363027e8c638c575d2",
            ),
            (
                digest(true, "team-a", s(), &secret_s(), &keys(&["password"])),
                "hmac-sha256:b34f55c60ab5dbd04dde48bd135a5a7d81eb5029225e55611b80e884789b704e",
            ),
            (
                digest(true, "team-b", s(), &secret_s(), &all),
                "hmac-sha256:2034a3b244e25d41ea4f35f3fca23c8e077ad291fd75ee4cadb956bf3f53307c",
            ),
        ];
        for (index, (got, want)) in cases.iter().enumerate() {
            assert_eq!(got, want, "test vector {}", index + 1);
        }
    }

    #[test]
    fn config_maps_ignore_the_digest_key() {
        let c = content(&[("k", b"v")]);
        assert_eq!(
            digest(true, "default", ObjectRef::config_map("c"), &c, &ConsumedKeys::All),
            digest(false, "default", ObjectRef::config_map("c"), &c, &ConsumedKeys::All)
        );
    }

    #[test]
    fn string_data_is_folded_over_data() {
        let folded = decoded(
            ObjectKind::Secret,
            serde_json::json!({
                "data": {"password": "b2xk"}, "stringData": {"password": "hunter2", "username": "admin"}
            }),
        );
        let s = ObjectRef::secret("db");
        assert_eq!(
            digest(true, "team-a", s.clone(), &folded, &ConsumedKeys::All),
            digest(true, "team-a", s, &secret_s(), &ConsumedKeys::All)
        );
    }

    #[test]
    fn rotation_keeps_digests_made_with_an_older_listed_key() {
        let old = Digester::new(DigestKeys::parse(KEY).expect("key"));
        let rotated = Digester::new(
            DigestKeys::parse(b"  new-key-new-key-new-key\n\n0123456789abcdef0123456789abcdef  \n")
                .expect("keys"),
        );
        let object = ObjectRef::secret("db");
        let id = ObjectId { namespace: "team-a", object: &object };
        let all = ConsumedKeys::All;
        let old_value = old.digest(id, &secret_s(), &all, None);
        let new_value = rotated.digest(id, &secret_s(), &all, None);
        assert_ne!(old_value, new_value, "the first key signs");
        assert_eq!(rotated.digest(id, &secret_s(), &all, Some(&old_value)), old_value);
        // New content is signed with the new key, whatever was there before.
        let changed = content(&[("password", b"changed")]);
        assert_eq!(
            rotated.digest(id, &changed, &all, Some(&old_value)),
            rotated.digest(id, &changed, &all, None)
        );
        // A digest from an unlisted key, or a plain one, is replaced.
        let plain = Digester::default().digest(id, &secret_s(), &all, None);
        assert_eq!(rotated.digest(id, &secret_s(), &all, Some(&plain)), new_value);
        let foreign = Digester::new(DigestKeys::parse(b"another-key-entirely").expect("key"))
            .digest(id, &secret_s(), &all, None);
        assert_eq!(rotated.digest(id, &secret_s(), &all, Some(&foreign)), new_value);
    }

    #[test]
    fn key_file_rules() {
        assert_eq!(DigestKeys::parse(b"\n  \n").err(), Some(DigestKeyError::Empty));
        assert_eq!(
            DigestKeys::parse(b"0123456789abcdef\nshort\n").err(),
            Some(DigestKeyError::TooShort { line: 2, len: 5 })
        );
        let keys = DigestKeys::parse(b"\r\n\t0123456789abcdef \r\n").expect("trimmed key");
        assert_eq!(keys.keys, vec![b"0123456789abcdef".to_vec()]);
        let message =
            DigestKeys::parse(b"secret-ish\n").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(!message.contains("secret-ish"), "{message}");
    }

    #[test]
    fn debug_output_hides_values() {
        let shown = format!("{:?} {:?}", secret_s(), DigestKeys::parse(KEY).expect("key"));
        assert!(!shown.contains("hunter2") && !shown.contains("0123456789abcdef"), "{shown}");
    }
}
