//! An object's `metadata.uid`, kept for each tracked ConfigMap and Secret so that an Event
//! about one names it (`kubectl describe` finds Events by uid). The API server's uids are
//! UUIDs: kept as their 16 bytes, without an allocation each; anything else is kept as written.

use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Uid {
    Uuid([u8; 16]),
    Other(Box<str>),
}

impl Uid {
    pub fn new(text: &str) -> Uid {
        parse_uuid(text).map_or_else(|| Uid::Other(text.into()), Uid::Uuid)
    }
}

/// The canonical form only (8-4-4-4-12 lowercase hex digits), which formats back the same.
fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let bytes = text.as_bytes();
    if bytes.len() != 36 || [8, 13, 18, 23].iter().any(|&i| bytes[i] != b'-') {
        return None;
    }
    let mut out = [0u8; 16];
    let mut digits = bytes.iter().filter(|&&b| b != b'-');
    for byte in &mut out {
        let high = hex_value(*digits.next()?)?;
        let low = hex_value(*digits.next()?)?;
        *byte = high << 4 | low;
    }
    Some(out)
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    }
}

impl fmt::Display for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Uid::Other(text) => f.write_str(text),
            Uid::Uuid(bytes) => {
                for (i, byte) in bytes.iter().enumerate() {
                    if [4, 6, 8, 10].contains(&i) {
                        f.write_str("-")?;
                    }
                    write!(f, "{byte:02x}")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uuid_is_kept_compact_and_reads_back_as_written() {
        let text = "ac4d4d02-0000-4000-8000-00000000000f";
        let uid = Uid::new(text);
        assert!(matches!(uid, Uid::Uuid(_)));
        assert_eq!(uid.to_string(), text);
        for other in
            ["u-1", "AC4D4D02-0000-4000-8000-00000000000F", "ac4d4d02000040008000000000000000", ""]
        {
            let uid = Uid::new(other);
            assert_eq!(uid, Uid::Other(other.into()), "{other}");
            assert_eq!(uid.to_string(), other);
        }
        assert_eq!(std::mem::size_of::<Option<Uid>>(), 24, "no larger than a String");
    }
}
