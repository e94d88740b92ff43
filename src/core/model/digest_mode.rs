//! Whether a kind of tracked object gets a plain or a keyed digest. A leaf: the tracked kinds'
//! table (`inputs`) declares it per kind and the digest reads it, and neither imports the other.

/// Which digest an object's annotation carries (docs/behaviour.md, "Digest").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DigestMode {
    /// `sha256:` always.
    Plain,
    /// `hmac-sha256:` under `--digest-key-file` when one is given, else `sha256:`.
    Keyed,
}
