//! A value at a field path inside a JSON document, read in the one pass that reads the document:
//! [`AtPath`] walks down the path's maps and hands the value to a seed, skipping every other
//! field unbuilt. A kind's pod template is data (a path in its row of `kinds.rs`), so every
//! reader of a template, its containers or its annotations goes through here.

use std::fmt;
use std::marker::PhantomData;

use std::collections::BTreeMap;

use serde::Deserialize as _;
use serde::de::{
    DeserializeSeed, Deserializer, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor,
};

use super::model::path_segment::Segment;

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
/// exist: a patch must create the missing ones, and must not replace those that exist. One
/// pass, as every other read of the object.
pub fn map_at(
    json: &str,
    path: &[&str],
) -> Result<(Option<BTreeMap<String, String>>, usize), serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_str(json);
    let found = MapSeed { path }.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(found.unwrap_or((None, 0)))
}

/// The annotations map at `path` below a value, and how many of `path`'s segments exist
/// below it; `None` when the value itself is absent (`null`).
struct MapSeed<'p> {
    path: &'p [&'p str],
}

type MapFound = (Option<BTreeMap<String, String>>, usize);

impl<'de> DeserializeSeed<'de> for MapSeed<'_> {
    type Value = Option<MapFound>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for MapSeed<'_> {
    type Value = Option<MapFound>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map on the annotations path")
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        match self.path.split_first() {
            None => {
                let map = super::model::pod_spec::bounded_annotations(deserializer)?;
                Ok(Some((map, 0)))
            }
            Some(_) => deserializer.deserialize_map(self),
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<MapFound>, A::Error> {
        let Some((field, rest)) = self.path.split_first() else { return Ok(Some((None, 0))) };
        let mut found = None;
        while let Some(key) = map.next_key::<Key<'de>>()? {
            // The first occurrence wins, as in every other field configsum reads.
            if found.is_none() && key.as_str() == *field {
                found = Some(map.next_value_seed(MapSeed { path: rest })?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(Some(match found.flatten() {
            Some((values, below)) => (values, below + 1),
            None => (None, 0),
        }))
    }
}

/// `null` is no value; anything else is read by `S`. For the fields configsum reads that
/// the API allows to be `null`.
pub struct OrNull<S>(pub S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for OrNull<S> {
    type Value = Option<S::Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de, S: DeserializeSeed<'de>> Visitor<'de> for OrNull<S> {
    type Value = Option<S::Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a value or null")
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        self.0.deserialize(deserializer).map(Some)
    }
}

/// `None` for a number or a bool: a [`Visitor`] of lenient reads, where a value of the wrong
/// type is no value rather than an error.
macro_rules! none_for_numbers_and_bools {
    () => {
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok(None)
        }
    };
}

/// The string map at `path`, read leniently: `None` wherever a value on the way is not what an
/// annotations map is, and for a map beyond the 256 KiB Kubernetes allows, instead of an
/// error. For `oldObject`, the stored object: a custom resource without a schema may hold
/// anything there, and a digest's fallback must not make the whole review unreadable. Only a
/// syntax error ends the pass.
#[derive(Clone, Copy)]
pub struct LenientMapAt<'p> {
    pub path: &'p [&'p str],
}

impl<'de> DeserializeSeed<'de> for LenientMapAt<'_> {
    type Value = Option<BTreeMap<String, String>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for LenientMapAt<'_> {
    type Value = Option<BTreeMap<String, String>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let Some((field, rest)) = self.path.split_first() else {
            return string_map(map);
        };
        let (mut found, mut seen) = (None, false);
        while let Some(key) = map.next_key::<Key<'de>>()? {
            // The first occurrence wins, as in every other field configsum reads.
            if !seen && key.as_str() == *field {
                seen = true;
                found = map.next_value_seed(LenientMapAt { path: rest })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    none_for_numbers_and_bools!();

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// The map at the end of a [`LenientMapAt`]: every value a string and all within the bound,
/// or nothing.
fn string_map<'de, A: MapAccess<'de>>(
    mut map: A,
) -> Result<Option<BTreeMap<String, String>>, A::Error> {
    let mut values = Some(BTreeMap::new());
    let mut total = 0usize;
    while let Some(key) = map.next_key::<Key<'de>>()? {
        let value = map.next_value_seed(StringValue)?;
        let (Some(entries), Some(value)) = (values.as_mut(), value) else {
            values = None;
            continue;
        };
        total += key.as_str().len() + value.len();
        if total > super::model::annotations::MAX_ANNOTATIONS_BYTES {
            values = None;
            continue;
        }
        entries.insert(key.0.into_owned(), value);
    }
    Ok(values)
}

/// A string, or `None` for any other value (skipped unbuilt).
struct StringValue;

impl<'de> DeserializeSeed<'de> for StringValue {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StringValue {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Some(v.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Some(v))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    none_for_numbers_and_bools!();

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
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
    #[serde(default, deserialize_with = "super::model::pod_spec::item_keys")]
    pub items: Option<super::model::pod_spec::ItemKeys>,
    pub optional: Option<bool>,
}

/// At most this many values are collected at reference paths of one object; the selection
/// digests at most 128 objects anyway, and a hostile object must not cost more than a pod spec.
pub const MAX_NAMED: usize = 4096;

/// Every value at each of `paths` (`[]` for every element of a list), all in one pass over
/// `json`: at most [`MAX_NAMED`] per path, with the count of those beyond.
pub fn collect_all(
    json: &str,
    paths: &[&[Segment<'_>]],
) -> Result<Vec<(Vec<Named>, usize)>, serde_json::Error> {
    if paths.is_empty() {
        // A kind without reference paths (every built-in one): nothing to read again.
        return Ok(Vec::new());
    }
    let mut out: Vec<Collected> = paths.iter().map(|_| Collected::default()).collect();
    let walking: Vec<(usize, &[Segment<'_>])> = paths.iter().copied().enumerate().collect();
    let mut deserializer = serde_json::Deserializer::from_str(json);
    CollectSeed { paths: walking, out: &mut out }.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(out.into_iter().map(|c| (c.values, c.beyond)).collect())
}

#[derive(Default)]
struct Collected {
    values: Vec<Named>,
    beyond: usize,
}

impl Collected {
    fn push(&mut self, value: Named) {
        if self.values.len() < MAX_NAMED {
            self.values.push(value);
        } else {
            self.beyond += 1;
        }
    }
}

/// The paths still being walked below the current value (by their index in `out`), and what
/// they found so far.
struct CollectSeed<'p, 'o> {
    paths: Vec<(usize, &'p [Segment<'p>])>,
    out: &'o mut [Collected],
}

impl<'p> CollectSeed<'p, '_> {
    /// The paths that go on through `step`, one segment further.
    fn through(&self, step: impl Fn(&Segment<'_>) -> bool) -> Vec<(usize, &'p [Segment<'p>])> {
        self.paths
            .iter()
            .filter(|(_, path)| path.first().is_some_and(&step))
            .map(|(i, path)| (*i, &path[1..]))
            .collect()
    }
}

impl<'de> DeserializeSeed<'de> for CollectSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        let ending = self.paths.iter().filter(|(_, path)| path.is_empty()).count();
        if ending == 0 {
            return deserializer.deserialize_any(self);
        }
        if ending == self.paths.len() {
            // Every path ends here (one, or the same path declared twice).
            let value = Option::<Named>::deserialize(deserializer).unwrap_or(None);
            if let Some(value) = value {
                for (i, _) in &self.paths {
                    self.out[*i].push(value.clone());
                }
            }
            return Ok(());
        }
        // One path ends here and another goes on below (`spec.a` and `spec.a.b`): the value
        // is read once, then each path walks it.
        let value = serde_json::Value::deserialize(deserializer).map_err(D::Error::custom)?;
        for (i, path) in self.paths {
            let seed = CollectSeed { paths: vec![(i, path)], out: &mut *self.out };
            seed.deserialize(&value).map_err(D::Error::custom)?;
        }
        Ok(())
    }
}

impl<'de> Visitor<'de> for CollectSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map or a list on a reference path")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        // Each path takes the first occurrence of its field.
        let mut taken = vec![false; self.paths.len()];
        while let Some(key) = map.next_key::<Key<'de>>()? {
            let key = key.as_str();
            let mut below = Vec::new();
            for (at, (i, path)) in self.paths.iter().enumerate() {
                if !taken[at] && path.first() == Some(&Segment::Field(key)) {
                    taken[at] = true;
                    below.push((*i, &path[1..]));
                }
            }
            if below.is_empty() {
                map.next_value::<IgnoredAny>()?;
            } else {
                map.next_value_seed(CollectSeed { paths: below, out: &mut *self.out })?;
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let each = self.through(|segment| *segment == Segment::Each);
        if each.is_empty() {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(());
        }
        while seq
            .next_element_seed(CollectSeed { paths: each.clone(), out: &mut *self.out })?
            .is_some()
        {}
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

    use Segment::{Each, Field};

    fn names(found: &(Vec<Named>, usize)) -> Vec<String> {
        let name = |n: &Named| match n {
            Named::Name(name) => name.clone(),
            Named::Selector(s) => {
                format!("{}:{}", s.name.as_deref().unwrap_or(""), s.key.as_deref().unwrap_or(""))
            }
            Named::Nothing => "-".into(),
        };
        found.0.iter().map(name).collect()
    }

    #[test]
    fn every_reference_path_is_collected_in_one_pass() {
        let json = r#"{"components": [{"configRef": {"name": "a", "key": "k"}, "secretRef": "s1"},
            {"configRef": "b", "other": 1}, 7, {"secretRef": "s2", "secretRef": "dup"}],
            "storage": {"s3": {"secretRef": "keys"}}, "x": {"y": "z"}}"#;
        let config: &[Segment<'_>] = &[Field("components"), Each, Field("configRef")];
        let secret: &[Segment<'_>] = &[Field("components"), Each, Field("secretRef")];
        let s3: &[Segment<'_>] = &[Field("storage"), Field("s3"), Field("secretRef")];
        let missing: &[Segment<'_>] = &[Field("storage"), Each, Field("name")];
        let found = collect_all(json, &[config, secret, s3, config, missing]).expect("reads");
        assert_eq!(names(&found[0]), ["a:k", "b"]);
        assert_eq!(names(&found[1]), ["s1", "s2"], "the first occurrence of a field wins");
        assert_eq!(names(&found[2]), ["keys"]);
        assert_eq!(names(&found[3]), names(&found[0]), "a path declared twice finds the same");
        assert!(found[4].0.is_empty(), "[] over a map names nothing");
        // One path ends where another goes on.
        let (x, xy): (&[Segment<'_>], &[Segment<'_>]) = (&[Field("x")], &[Field("x"), Field("y")]);
        let found = collect_all(json, &[x, xy]).expect("reads");
        assert_eq!(
            (names(&found[0]), names(&found[1])),
            (vec![":".to_owned()], vec!["z".to_owned()])
        );
        assert_eq!(collect_all(json, &[s3]).expect("reads")[0].0.len(), 1);
        assert!(collect_all("{\"a\": ", &[s3]).is_err(), "broken JSON is an error");
    }

    #[test]
    fn values_beyond_the_cap_are_counted_not_kept() {
        let items: Vec<String> = (0..MAX_NAMED + 5).map(|i| format!("\"n{i}\"")).collect();
        let json = format!(r#"{{"l": [{}]}}"#, items.join(","));
        let found = collect_all(&json, &[&[Field("l"), Each]]).expect("reads");
        let (values, beyond) = &found[0];
        assert_eq!((values.len(), *beyond), (MAX_NAMED, 5));
    }

    #[test]
    fn map_at_finds_the_map_and_counts_the_segments_that_exist() {
        let path = ["spec", "podAnnotations"];
        let map = |json: &str| map_at(json, &path).map_err(|e| e.to_string());
        let full = map(r#"{"spec": {"x": 1, "podAnnotations": {"a": "1"}}}"#).expect("reads");
        assert_eq!(full, (Some([("a".to_owned(), "1".to_owned())].into()), 2));
        assert_eq!(map(r#"{"spec": {"podAnnotations": null}}"#), Ok((None, 1)));
        assert_eq!(map(r#"{"spec": {}}"#), Ok((None, 1)));
        assert_eq!(map(r#"{"spec": null}"#), Ok((None, 0)));
        assert_eq!(map("{}"), Ok((None, 0)));
        assert!(map(r#"{"spec": []}"#).is_err(), "a list where a map must be");
        assert!(map(r#"{"spec": {"podAnnotations": {"a": 1}}}"#).is_err(), "values are strings");
        let whole = map_at(r#"{"a": "b"}"#, &[]).expect("reads");
        assert_eq!(whole, (Some([("a".to_owned(), "b".to_owned())].into()), 0), "the document");
    }
}
