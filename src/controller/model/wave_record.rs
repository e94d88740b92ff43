//! What a rolled workload records of the waves it rolled in (`<domain>/waves` on its own
//! metadata, written in the same patch as the roll): per source, the change, the wave, and
//! when. A new leader reads it back and goes on with each fan-out where it stood (docs/
//! behaviour.md, "Rolling safely"). It lives on the workloads because they are what the
//! controller already patches: no other object, no other permission, and never a record
//! without its roll or a roll without its record.
//!
//! The annotation is on an object tenants can write, so reading it is bounded and forgiving:
//! an entry that does not parse is dropped, never an error.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

/// At most this many sources are recorded; the oldest entries go first.
pub const MAX_ENTRIES: usize = 32;
/// A longer annotation is not read at all.
pub const MAX_BYTES: usize = 16 * 1024;

/// A change's or a halt's id, 12 hex digits, kept inline: every workload that rolled in a wave
/// keeps its record, so its size counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Id([u8; 12]);

impl Id {
    /// `text` if it is 12 hex digits, as every id in a record is.
    pub fn parse(text: &str) -> Option<Id> {
        let bytes: [u8; 12] = text.as_bytes().try_into().ok()?;
        bytes.iter().all(u8::is_ascii_hexdigit).then_some(Id(bytes))
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII hex digits get in.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// One source's last roll of this workload in a fan-out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaveEntry {
    /// The change's id.
    pub change: Id,
    pub wave: u32,
    /// When the roll was patched, to the second.
    pub at: SystemTime,
    /// The first 12 hex digits of the workload's new digest for the source, where it differs
    /// from the change's id (a ConfigMap or Secret of which it consumes some keys): the id
    /// of the change if this workload's rollout halts it (`<domain>/resume` takes it).
    pub digest: Option<Id>,
}

impl WaveEntry {
    /// The id `<domain>/resume` takes if this workload's rollout halts the change.
    pub fn halt_id(&self) -> &str {
        self.digest.as_ref().unwrap_or(&self.change).as_str()
    }
}

/// Every source's entry, by the source's name (`secret/db`, `image ghcr.io/acme/web:1`), in
/// that order: a short sorted list rather than a map, whose every node would hold room for
/// eleven entries on each workload that rolled. Every workload that rolled keeps one, so it
/// is two allocations of exactly its size, whatever its length: the names one after another,
/// and the entries, each with where its name ends (a list and a name apiece took twice the
/// memory, the list's room for four entries included).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WaveRecord {
    names: Box<str>,
    entries: Box<[(u32, WaveEntry)]>,
}

#[derive(Serialize, Deserialize)]
struct Wire {
    change: String,
    wave: u32,
    at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    digest: Option<String>,
}

impl WaveRecord {
    /// Reads the annotation's value; whatever does not parse is left out.
    pub fn parse(text: &str) -> WaveRecord {
        if text.len() > MAX_BYTES {
            return WaveRecord::default();
        }
        let Ok(wire) = serde_json::from_str::<BTreeMap<String, serde_json::Value>>(text) else {
            return WaveRecord::default();
        };
        let entries: Vec<(String, WaveEntry)> = wire
            .into_iter()
            .filter_map(|(source, value)| {
                let wire: Wire = serde_json::from_value(value).ok()?;
                let change = Id::parse(&wire.change)?;
                let digest = wire.digest.as_deref().and_then(Id::parse);
                let at = wire.at.parse::<jiff::Timestamp>().ok()?;
                let at = SystemTime::UNIX_EPOCH
                    .checked_add(Duration::from_secs(u64::try_from(at.as_second()).ok()?))?;
                let entry = WaveEntry { change, wave: wire.wave, at, digest };
                (wire.wave > 0).then_some((source, entry))
            })
            .take(MAX_ENTRIES)
            .collect();
        // A JSON object's keys come sorted from the map it was read into.
        WaveRecord::packed(entries.iter().map(|(source, entry)| (source.as_str(), entry.clone())))
    }

    /// The record of `entries`, sorted by source, packed.
    fn packed<'a>(entries: impl Iterator<Item = (&'a str, WaveEntry)>) -> WaveRecord {
        let mut names = String::new();
        let mut packed = Vec::new();
        for (source, entry) in entries {
            names.push_str(source);
            // Within MAX_BYTES, and at most MAX_ENTRIES names of a source each.
            let Ok(end) = u32::try_from(names.len()) else { break };
            packed.push((end, entry));
        }
        WaveRecord { names: names.into_boxed_str(), entries: packed.into_boxed_slice() }
    }

    /// The name of the source of entry `at`.
    fn source(&self, at: usize) -> &str {
        let start = at.checked_sub(1).map_or(0, |before| self.entries[before].0 as usize);
        self.names.get(start..self.entries[at].0 as usize).unwrap_or_default()
    }

    fn find(&self, source: &str) -> Result<usize, usize> {
        let (mut low, mut high) = (0, self.entries.len());
        while low < high {
            let middle = low + (high - low) / 2;
            match self.source(middle).cmp(source) {
                std::cmp::Ordering::Less => low = middle + 1,
                std::cmp::Ordering::Greater => high = middle,
                std::cmp::Ordering::Equal => return Ok(middle),
            }
        }
        Err(low)
    }

    /// The annotation's value.
    pub fn render(&self) -> String {
        let wire: BTreeMap<&str, Wire> = self
            .entries()
            .map(|(source, entry)| {
                let seconds = entry
                    .at
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
                let at =
                    jiff::Timestamp::from_second(seconds).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
                let wire = Wire {
                    change: entry.change.as_str().to_owned(),
                    wave: entry.wave,
                    at: at.to_string(),
                    digest: entry.digest.map(|d| d.as_str().to_owned()),
                };
                (source, wire)
            })
            .collect();
        serde_json::to_string(&wire).unwrap_or_default()
    }

    pub fn get(&self, source: &str) -> Option<&WaveEntry> {
        let at = self.find(source).ok()?;
        Some(&self.entries[at].1)
    }

    pub fn entries(&self) -> impl Iterator<Item = (&str, &WaveEntry)> {
        self.entries.iter().enumerate().map(|(at, (_, entry))| (self.source(at), entry))
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Records `entry` for `source`, replacing its last one; past [`MAX_ENTRIES`] the oldest
    /// entries go.
    pub fn record(&mut self, source: &str, entry: WaveEntry) {
        let mut entries: Vec<(&str, WaveEntry)> =
            self.entries().map(|(s, e)| (s, e.clone())).collect();
        match self.find(source) {
            Ok(at) => entries[at].1 = entry,
            Err(at) => entries.insert(at, (source, entry)),
        }
        while entries.len() > MAX_ENTRIES {
            let oldest = entries.iter().enumerate().min_by_key(|(_, (_, e))| e.at);
            let Some((at, _)) = oldest else { break };
            entries.remove(at);
        }
        *self = WaveRecord::packed(entries.into_iter());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)
    }

    fn entry(change: &str, wave: u32, seconds: u64) -> WaveEntry {
        let change = Id::parse(change).expect("an id");
        WaveEntry { change, wave, at: at(seconds), digest: None }
    }

    #[test]
    fn a_record_reads_back_what_it_wrote() {
        let mut record = WaveRecord::default();
        record.record("secret/db", entry("0123456789ab", 2, 1_795_881_600));
        record.record("image ghcr.io/acme/web:1", entry("fedcba987654", 1, 1_795_881_660));
        let some_keys = WaveEntry {
            digest: Id::parse("aaaaaaaaaaaa"),
            ..entry("0123456789ab", 1, 1_795_881_600)
        };
        record.record("configmap/app", some_keys);
        let text = record.render();
        assert_eq!(
            text,
            r#"{"configmap/app":{"change":"0123456789ab","wave":1,"at":"2026-11-28T16:00:00Z","digest":"aaaaaaaaaaaa"},"image ghcr.io/acme/web:1":{"change":"fedcba987654","wave":1,"at":"2026-11-28T16:01:00Z"},"secret/db":{"change":"0123456789ab","wave":2,"at":"2026-11-28T16:00:00Z"}}"#
        );
        assert_eq!(WaveRecord::parse(&text), record);
        let halt_ids: Vec<&str> = record.entries().map(|(_, e)| e.halt_id()).collect();
        assert_eq!(halt_ids, ["aaaaaaaaaaaa", "fedcba987654", "0123456789ab"]);
    }

    #[test]
    fn what_a_tenant_wrote_wrong_is_left_out_and_never_fails() {
        let text = r#"{"secret/a":{"change":"0123456789ab","wave":1,"at":"2026-11-28T16:00:00Z"},
            "secret/b":{"change":"short","wave":1,"at":"2026-11-28T16:00:00Z"},
            "secret/c":{"change":"0123456789ab","wave":0,"at":"2026-11-28T16:00:00Z"},
            "secret/d":{"change":"0123456789ab","wave":1,"at":"yesterday"},
            "secret/e":"0123456789ab 1",
            "secret/f":{"change":"0123456789ab","wave":-1,"at":"2026-11-28T16:00:00Z"},
            "secret/g":{"change":"0123456789ab","wave":1,"at":"2026-11-28T16:00:00Z","digest":"<b>"}}"#;
        let record = WaveRecord::parse(text);
        let sources: Vec<&str> = record.entries().map(|(s, _)| s).collect();
        assert_eq!(sources, ["secret/a", "secret/g"]);
        let g = record.get("secret/g").map(|e| (e.digest, e.halt_id().to_owned()));
        assert_eq!(g, Some((None, "0123456789ab".to_owned())), "a digest that is no id is dropped");
        for junk in ["", "null", "[]", "{", "\"x\"", &"x".repeat(MAX_BYTES + 1)] {
            assert!(WaveRecord::parse(junk).is_empty(), "{junk:.20}");
        }
    }

    #[test]
    fn an_entry_is_small_and_kept_without_a_map() {
        // Every workload that rolled in a wave keeps one: ids inline, its names in one string.
        assert!(std::mem::size_of::<(u32, WaveEntry)>() <= 56);
        assert_eq!(
            Id::parse("0123456789AB").map(|id| id.as_str().to_owned()).as_deref(),
            Some("0123456789AB")
        );
        for junk in ["0123456789a", "0123456789abc", "0123456789ag", "éé0123456789"] {
            assert_eq!(Id::parse(junk), None, "{junk}");
        }
    }

    #[test]
    fn the_oldest_entries_go_past_the_limit() {
        let mut record = WaveRecord::default();
        for i in 0..(MAX_ENTRIES as u64 + 3) {
            record.record(&format!("secret/s{i:02}"), entry("0123456789ab", 1, 1_000 + i));
        }
        assert_eq!(record.entries().count(), MAX_ENTRIES);
        assert!(record.get("secret/s00").is_none() && record.get("secret/s02").is_none());
        assert!(record.get("secret/s03").is_some());
        // Recording a source again replaces its entry.
        record.record("secret/s03", entry("fedcba987654", 3, 5_000));
        assert_eq!(record.get("secret/s03").map(|e| e.wave), Some(3));
        assert_eq!(record.entries().count(), MAX_ENTRIES);
    }
}
