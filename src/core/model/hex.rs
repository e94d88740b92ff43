//! Lowercase hexadecimal, as every digest and hashed name configsum writes spells bytes.

/// `bytes` as lowercase hexadecimal, two digits a byte.
pub fn hex(bytes: &[u8]) -> String {
    prefixed_hex("", bytes)
}

/// `prefix` then `bytes` as [`hex`] spells them, in one allocation: a digest's value
/// (`sha256:…`) without a second string for its digits.
pub fn prefixed_hex(prefix: &str, bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(prefix.len() + bytes.len() * 2);
    out.push_str(prefix);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 0xf) as usize] as char);
    }
    out
}
