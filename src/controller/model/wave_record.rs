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

use super::trigger::SourceChange;

/// At most this many sources are recorded; the oldest entries go first.
pub const MAX_ENTRIES: usize = 32;
/// A longer annotation is not read at all.
pub const MAX_BYTES: usize = 16 * 1024;

/// What a roll records: it rolls in `wave` of `change`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaveMark {
    pub change: SourceChange,
    pub wave: u32,
}

/// One source's last roll of this workload in a fan-out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaveEntry {
    /// The change's id (12 hex digits).
    pub change: String,
    pub wave: u32,
    /// When the roll was patched, to the second.
    pub at: SystemTime,
    /// The first 12 hex digits of the workload's new digest for the source, where it differs
    /// from the change's id (a ConfigMap or Secret of which it consumes some keys): the id
    /// of the change if this workload's rollout halts it (`<domain>/resume` takes it).
    pub digest: Option<String>,
}

impl WaveEntry {
    /// The id `<domain>/resume` takes if this workload's rollout halts the change.
    pub fn halt_id(&self) -> &str {
        self.digest.as_deref().unwrap_or(&self.change)
    }
}

/// Whether `id` is 12 hex digits, as every id in a record is.
fn is_id(id: &str) -> bool {
    id.len() == 12 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Every source's entry, by the source's name (`secret/db`, `image ghcr.io/acme/web:1`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WaveRecord {
    entries: BTreeMap<String, WaveEntry>,
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
        let entries = wire
            .into_iter()
            .filter_map(|(source, value)| {
                let wire: Wire = serde_json::from_value(value).ok()?;
                let change = wire.change;
                let digest = wire.digest.filter(|d| is_id(d));
                let at = wire.at.parse::<jiff::Timestamp>().ok()?;
                let at = SystemTime::UNIX_EPOCH
                    .checked_add(Duration::from_secs(u64::try_from(at.as_second()).ok()?))?;
                (is_id(&change) && wire.wave > 0)
                    .then_some((source, WaveEntry { change, wave: wire.wave, at, digest }))
            })
            .take(MAX_ENTRIES)
            .collect();
        WaveRecord { entries }
    }

    /// The annotation's value.
    pub fn render(&self) -> String {
        let wire: BTreeMap<&str, Wire> = self
            .entries
            .iter()
            .map(|(source, entry)| {
                let seconds = entry
                    .at
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
                let at =
                    jiff::Timestamp::from_second(seconds).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
                let wire = Wire {
                    change: entry.change.clone(),
                    wave: entry.wave,
                    at: at.to_string(),
                    digest: entry.digest.clone(),
                };
                (source.as_str(), wire)
            })
            .collect();
        serde_json::to_string(&wire).unwrap_or_default()
    }

    pub fn get(&self, source: &str) -> Option<&WaveEntry> {
        self.entries.get(source)
    }

    pub fn entries(&self) -> impl Iterator<Item = (&str, &WaveEntry)> {
        self.entries.iter().map(|(source, entry)| (source.as_str(), entry))
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Records `entry` for `source`, replacing its last one; past [`MAX_ENTRIES`] the oldest
    /// entries go.
    pub fn record(&mut self, source: &str, entry: WaveEntry) {
        self.entries.insert(source.to_owned(), entry);
        while self.entries.len() > MAX_ENTRIES {
            let oldest = self.entries.iter().min_by_key(|(_, e)| e.at).map(|(s, _)| s.clone());
            let Some(oldest) = oldest else { break };
            self.entries.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)
    }

    fn entry(change: &str, wave: u32, seconds: u64) -> WaveEntry {
        WaveEntry { change: change.into(), wave, at: at(seconds), digest: None }
    }

    #[test]
    fn a_record_reads_back_what_it_wrote() {
        let mut record = WaveRecord::default();
        record.record("secret/db", entry("0123456789ab", 2, 1_795_881_600));
        record.record("image ghcr.io/acme/web:1", entry("fedcba987654", 1, 1_795_881_660));
        let some_keys = WaveEntry {
            digest: Some("aaaaaaaaaaaa".into()),
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
        let g = record.get("secret/g").map(|e| (e.digest.clone(), e.halt_id().to_owned()));
        assert_eq!(g, Some((None, "0123456789ab".to_owned())), "a digest that is no id is dropped");
        for junk in ["", "null", "[]", "{", "\"x\"", &"x".repeat(MAX_BYTES + 1)] {
            assert!(WaveRecord::parse(junk).is_empty(), "{junk:.20}");
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
