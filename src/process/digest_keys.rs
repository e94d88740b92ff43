//! Loading the Secret-digest keys at start-up: a key file, or plain digests
//! only when the operator accepted them explicitly.

use std::path::{Path, PathBuf};

use tracing::warn;

use crate::core::DigestKeys;
use crate::core::digest::DigestKeyError;

/// Why the digest keys could not be loaded. Never carries key material.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error(
        "no --digest-key-file given: refusing to digest Secrets with plain SHA-256 \
         (pass --allow-plain-secret-digests to accept that)"
    )]
    NoDigestKey,
    #[error("cannot read digest key file {path}: {source}")]
    Unreadable { path: PathBuf, source: std::io::Error },
    #[error("digest key file {path}: {source}")]
    Invalid { path: PathBuf, source: DigestKeyError },
}

/// The digest keys from `file`; without one, plain digests only if `allow_plain`.
pub fn load_digest_keys(
    file: Option<&Path>,
    allow_plain: bool,
) -> Result<DigestKeys, KeyFileError> {
    let Some(path) = file else {
        if !allow_plain {
            return Err(KeyFileError::NoDigestKey);
        }
        warn!(
            "Secret digests are plain SHA-256: anyone who can read a workload can test guesses of a \
             low-entropy Secret offline; configure --digest-key-file"
        );
        return Ok(DigestKeys::none());
    };
    let text = std::fs::read(path)
        .map_err(|source| KeyFileError::Unreadable { path: path.to_owned(), source })?;
    DigestKeys::parse(&text)
        .map_err(|source| KeyFileError::Invalid { path: path.to_owned(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_key_rules_at_start_up() {
        assert!(matches!(load_digest_keys(None, false), Err(KeyFileError::NoDigestKey)));
        assert!(load_digest_keys(None, true).is_ok_and(|k| k.is_empty()));
        let dir = std::env::temp_dir().join(format!("configsum-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("keys");
        std::fs::write(&file, "0123456789abcdef0123456789abcdef\n").expect("key file");
        // A key file given with --allow-plain-secret-digests is used as usual.
        assert!(load_digest_keys(Some(&file), true).is_ok_and(|k| !k.is_empty()));
        std::fs::write(&file, "short\n").expect("key file");
        assert!(matches!(load_digest_keys(Some(&file), false), Err(KeyFileError::Invalid { .. })));
        let missing = dir.join("missing");
        assert!(matches!(
            load_digest_keys(Some(&missing), false),
            Err(KeyFileError::Unreadable { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
