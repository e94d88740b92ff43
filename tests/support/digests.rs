//! The v1 digest (docs/behaviour.md, "Digest") computed from its published format, for tests
//! that check what the real binaries wrote without asking the code under test.
#![allow(dead_code)]

use hmac::Mac as _;
use sha2::Digest as _;

/// The digest of a ConfigMap whose every key is consumed: `sha256:…`.
pub fn config_map(namespace: &str, name: &str, data: &[(&str, &str)]) -> String {
    format!("sha256:{:x}", sha2::Sha256::digest(input("ConfigMap", namespace, name, data)))
}

/// The digest of a Secret whose every key is consumed, keyed with `key` (a digest key file's
/// text; surrounding whitespace is trimmed as the file's reader does): `hmac-sha256:…`.
pub fn secret(key: &str, namespace: &str, name: &str, data: &[(&str, &str)]) -> String {
    let mut mac =
        hmac::Hmac::<sha2::Sha256>::new_from_slice(key.trim().as_bytes()).expect("an HMAC key");
    mac.update(&input("Secret", namespace, name, data));
    let hex: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
    format!("hmac-sha256:{hex}")
}

/// The digest of a Secret of which only `keys` are consumed (present or not), keyed with `key`.
pub fn secret_keys(
    key: &str,
    namespace: &str,
    name: &str,
    data: &[(&str, &str)],
    keys: &[&str],
) -> String {
    let mut mac =
        hmac::Hmac::<sha2::Sha256>::new_from_slice(key.trim().as_bytes()).expect("an HMAC key");
    mac.update(&input_keys("Secret", namespace, name, data, keys));
    let hex: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
    format!("hmac-sha256:{hex}")
}

/// The digest of a ConfigMap of which only `keys` are consumed (present or not).
pub fn config_map_keys(
    namespace: &str,
    name: &str,
    data: &[(&str, &str)],
    keys: &[&str],
) -> String {
    let input = input_keys("ConfigMap", namespace, name, data, keys);
    format!("sha256:{:x}", sha2::Sha256::digest(input))
}

fn input_keys(
    kind: &str,
    namespace: &str,
    name: &str,
    data: &[(&str, &str)],
    keys: &[&str],
) -> Vec<u8> {
    let mut input = format!("configsum/v1\n{kind}\n").into_bytes();
    for part in [namespace, name] {
        input.extend((part.len() as u32).to_be_bytes());
        input.extend(part.as_bytes());
    }
    let mut keys = keys.to_vec();
    keys.sort();
    keys.dedup();
    for key in keys {
        input.extend((key.len() as u32).to_be_bytes());
        input.extend(key.as_bytes());
        match data.iter().find(|(k, _)| *k == key) {
            Some((_, value)) => {
                input.push(1);
                input.extend((value.len() as u64).to_be_bytes());
                input.extend(value.as_bytes());
            }
            None => input.push(0),
        }
    }
    input
}

fn input(kind: &str, namespace: &str, name: &str, data: &[(&str, &str)]) -> Vec<u8> {
    let mut input = format!("configsum/v1\n{kind}\n").into_bytes();
    for part in [namespace, name] {
        input.extend((part.len() as u32).to_be_bytes());
        input.extend(part.as_bytes());
    }
    let mut data = data.to_vec();
    data.sort();
    for (key, value) in data {
        input.extend((key.len() as u32).to_be_bytes());
        input.extend(key.as_bytes());
        input.push(1);
        input.extend((value.len() as u64).to_be_bytes());
        input.extend(value.as_bytes());
    }
    input
}

/// The helpers agree with the format's published test vectors.
#[test]
fn the_published_vectors() {
    assert_eq!(
        config_map("default", "c", &[("k", "v")]),
        "sha256:26168d429f573bf8c4dab0d9f8eafed2679ab5e988f5f3c90a9c0edac60bc2ba"
    );
    assert_eq!(
        secret(
            "0123456789abcdef0123456789abcdef\n",
            "team-a",
            "db",
            &[("password", "hunter2"), ("username", "admin")]
        ),
        "hmac-sha256:ee8d3eae330430830554df0f8b303d6ed3b252aacea417363027e8c638c575d2"
    );
    assert_eq!(
        secret_keys(
            "0123456789abcdef0123456789abcdef",
            "team-a",
            "db",
            &[("password", "hunter2"), ("username", "admin")],
            &["password"]
        ),
        "hmac-sha256:b34f55c60ab5dbd04dde48bd135a5a7d81eb5029225e55611b80e884789b704e"
    );
}
