//! A value at a field path inside a JSON document, read in the one pass that reads the document:
//! [`AtPath`] walks down the path's maps and hands the value to a seed, skipping every other
//! field unbuilt. A kind's pod template is data (a path in its row of `kinds.rs`), so every
//! reader of a template, its containers or its annotations goes through here.

use std::fmt;
use std::marker::PhantomData;

use std::collections::BTreeMap;

use serde::Deserialize as _;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

pub use super::kinds::Segment;

/// Deserializes the value at `path` with `seed`; `None` when a field on the way is absent or
/// `null`. A map on the way that is not a map is an error, as a wrongly typed field is.
pub struct AtPath<'p, S> {
    pub path: &'p [&'p str],
    pub seed: S,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for AtPath<'_, S> {
    type Value = Option<S::Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        match self.path.split_first() {
            None => self.seed.deserialize(deserializer).map(Some),
            Some((field, rest)) => {
                deserializer.deserialize_option(Walk { field, rest, seed: self.seed })
            }
        }
    }
}

/// One step of the walk: the map that should hold `field`.
struct Walk<'p, S> {
    field: &'p str,
    rest: &'p [&'p str],
    seed: S,
}

impl<'de, S: DeserializeSeed<'de>> Visitor<'de> for Walk<'_, S> {
    type Value = Option<S::Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a map holding {}", self.field)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut seed = Some(self.seed);
        let mut found = None;
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match seed.take() {
                // The first occurrence wins, as in every other field configsum reads.
                Some(next) if key.0 == self.field => {
                    found = map.next_value_seed(AtPath { path: self.rest, seed: next })?;
                }
                unused => {
                    seed = unused;
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(found)
    }
}

/// A map key, borrowed from the text when it holds no escape.
pub struct Key<'de>(std::borrow::Cow<'de, str>);

impl Key<'_> {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor<'de>(PhantomData<&'de ()>);
        impl<'de> Visitor<'de> for KeyVisitor<'de> {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(v.into()))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(v.to_owned().into()))
            }
        }
        deserializer.deserialize_str(KeyVisitor(PhantomData))
    }
}

/// The value at `path` in `json`, deserialized as `T`.
pub fn read_at<'de, T: serde::Deserialize<'de>>(
    json: &'de str,
    path: &[&str],
) -> Result<Option<T>, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_str(json);
    let value = AtPath { path, seed: PhantomData::<T> }.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

/// A string map at `path` (an annotations map), and how many leading segments of `path`
/// exist: a patch must create the missing ones, and must not replace those that exist. Probes
/// one prefix per pass: only kinds whose digests go somewhere of their own come here.
pub fn map_at(
    json: &str,
    path: &[&str],
) -> Result<(Option<BTreeMap<String, String>>, usize), serde_json::Error> {
    let mut present = 0;
    while present < path.len() {
        let found: Option<Option<IgnoredAny>> = read_at(json, &path[..=present])?;
        if found.flatten().is_none() {
            return Ok((None, present));
        }
        present += 1;
    }
    #[derive(serde::Deserialize)]
    struct Annotations(
        #[serde(deserialize_with = "super::pod_spec::bounded_annotations")]
        Option<BTreeMap<String, String>>,
    );
    let map = read_at::<Annotations>(json, path)?.and_then(|a| a.0);
    Ok((map, present))
}

/// What is found at a reference path: a name, or a map that reads like a selector.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(untagged)]
pub enum Named {
    Name(String),
    Selector(Selector),
    /// Anything else (a number, a list, null): names nothing.
    #[default]
    #[serde(skip)]
    Nothing,
}

/// `{name, key}` or `{name, items: [{key}]}`, as Kubernetes' own references are written.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize)]
pub struct Selector {
    pub name: Option<String>,
    pub key: Option<String>,
    #[serde(default, deserialize_with = "super::pod_spec::item_keys")]
    pub items: Option<super::pod_spec::ItemKeys>,
    pub optional: Option<bool>,
}

/// At most this many values are collected at reference paths of one object; the selection
/// digests at most 128 objects anyway, and a hostile object must not cost more than a pod spec.
pub const MAX_NAMED: usize = 4096;

/// Every value at `path` (`[]` for every element of a list) in one pass, at most
/// [`MAX_NAMED`]; the count of those beyond is returned too.
pub fn collect_at(
    json: &str,
    path: &[Segment<'_>],
) -> Result<(Vec<Named>, usize), serde_json::Error> {
    let mut out = Collected::default();
    let mut deserializer = serde_json::Deserializer::from_str(json);
    CollectSeed { path, out: &mut out }.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok((out.values, out.beyond))
}

#[derive(Default)]
struct Collected {
    values: Vec<Named>,
    beyond: usize,
}

struct CollectSeed<'p, 'o> {
    path: &'p [Segment<'p>],
    out: &'o mut Collected,
}

impl<'de> DeserializeSeed<'de> for CollectSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        match self.path.first() {
            None => {
                let value = Option::<Named>::deserialize(deserializer).unwrap_or(None);
                if let Some(value) = value {
                    if self.out.values.len() < MAX_NAMED {
                        self.out.values.push(value);
                    } else {
                        self.out.beyond += 1;
                    }
                }
                Ok(())
            }
            Some(_) => deserializer.deserialize_any(self),
        }
    }
}

impl<'de> Visitor<'de> for CollectSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map or a list on a reference path")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let field = match self.path.first() {
            Some(Segment::Field(field)) => Some(*field),
            _ => None,
        };
        let mut done = false;
        while let Some(key) = map.next_key::<Key<'de>>()? {
            if !done && Some(key.as_str()) == field {
                done = true;
                map.next_value_seed(CollectSeed { path: &self.path[1..], out: &mut *self.out })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        if self.path.first() == Some(&Segment::Each) {
            let rest = &self.path[1..];
            while seq.next_element_seed(CollectSeed { path: rest, out: &mut *self.out })?.is_some()
            {
            }
        } else {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
        }
        Ok(())
    }

    // Scalars on the way name nothing.
    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_value_and_skips_the_rest() {
        let json = r#"{"a": {"x": [1, 2], "b": {"c": "here"}, "y": {"b": 1}}, "z": null}"#;
        assert_eq!(read_at::<String>(json, &["a", "b", "c"]).ok(), Some(Some("here".into())));
        assert_eq!(read_at::<Vec<u8>>(json, &["a", "x"]).ok(), Some(Some(vec![1, 2])));
        assert_eq!(read_at::<String>(json, &["a", "missing"]).ok(), Some(None));
        assert_eq!(read_at::<String>(json, &["z", "c"]).ok(), Some(None), "null on the way");
        assert!(read_at::<String>(json, &["a", "x", "c"]).is_err(), "a list on the way");
        assert!(read_at::<String>(json, &["a", "b", "c", "d"]).is_err());
        assert_eq!(read_at::<u8>("7", &[]).ok(), Some(Some(7)), "the empty path is the document");
        assert!(read_at::<String>(r#"{"a": {"b": "x"}} trailing"#, &["a", "b"]).is_err());
    }

    #[test]
    fn escaped_keys_match_and_the_first_duplicate_wins() {
        let json = r#"{"sp\u0065c": {"t": 1}, "spec": {"t": 2}}"#;
        assert_eq!(read_at::<u8>(json, &["spec", "t"]).ok(), Some(Some(1)));
    }

    #[test]
    fn deep_hostile_nesting_elsewhere_costs_a_skip() {
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        let json = format!(r#"{{"other": {deep}, "a": "x"}}"#);
        assert_eq!(read_at::<String>(&json, &["a"]).ok(), Some(Some("x".into())));
    }
}
