//! Which sources the controller's flap guard holds, told from its Events, which are all that
//! outlives the controller's memory: a `FlapGuard` Event when it stops rolling a workload for a
//! source (recorded again every period while the source keeps flapping), a `FlapGuardReleased`
//! Event when the source has been quiet for a period. The messages are written here and read
//! here, so the two cannot drift apart.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::core::model::kinds::WorkloadKind;

pub const HOLD_REASON: &str = "FlapGuard";
pub const RELEASE_REASON: &str = "FlapGuardReleased";

const HOLD_PREFIX: &str = "configsum stopped rolling it for ";
const QUIET_FOR: &str = " has been quiet for ";
const RELEASE_PREFIX: &str = "configsum rolls it again for ";

/// The `FlapGuard` Event's message.
pub fn hold_message(source: &str, limit: u32, period: Duration) -> String {
    let period = humantime::format_duration(period);
    format!(
        "{HOLD_PREFIX}{source}: {limit} rolls within {period}; it rolls again once {source}{QUIET_FOR}{period}"
    )
}

/// The `FlapGuardReleased` Event's message.
pub fn release_message(source: &str, period: Duration) -> String {
    let period = humantime::format_duration(period);
    format!("{RELEASE_PREFIX}{source}: it{QUIET_FOR}{period}")
}

/// An Event configsum's controller recorded on a workload, as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerEvent {
    /// The involved object's `apiVersion` and `kind`, and its name.
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub reason: String,
    pub message: String,
    /// When it was last recorded, in seconds since the epoch.
    pub at: i64,
}

/// What one Event says about a hold.
enum Said<'a> {
    Held { source: &'a str, period: Duration },
    Released { source: &'a str },
}

impl ControllerEvent {
    fn said(&self) -> Option<Said<'_>> {
        let (prefix, held) = match self.reason.as_str() {
            HOLD_REASON => (HOLD_PREFIX, true),
            RELEASE_REASON => (RELEASE_PREFIX, false),
            _ => return None,
        };
        let (source, rest) = self.message.strip_prefix(prefix)?.split_once(": ")?;
        if !held {
            return Some(Said::Released { source });
        }
        let (_, period) = rest.rsplit_once(QUIET_FOR)?;
        let period = humantime::parse_duration(period).ok()?;
        Some(Said::Held { source, period })
    }
}

/// The (workload, source) pairs held.
#[derive(Debug, Default)]
pub struct Holds {
    /// (apiVersion, kind, name, source).
    held: BTreeSet<(String, String, String, String)>,
}

impl Holds {
    /// The pairs held at `now` (seconds since the epoch): the newest Event about a pair is a
    /// hold, and it is younger than two periods. The controller records a hold again every
    /// period while it lasts, so an older one is a hold a restarted controller forgot.
    pub fn from_events(events: &[ControllerEvent], now: i64) -> Holds {
        let mut ordered: Vec<&ControllerEvent> = events.iter().collect();
        ordered.sort_by_key(|e| e.at);
        let mut held = BTreeSet::new();
        for event in ordered {
            let pair = |source: &str| {
                (
                    event.api_version.clone(),
                    event.kind.clone(),
                    event.name.clone(),
                    source.to_owned(),
                )
            };
            match event.said() {
                Some(Said::Held { source, period }) => {
                    let lasts = 2 * i64::try_from(period.as_secs()).unwrap_or(i64::MAX / 2);
                    if now.saturating_sub(event.at) < lasts {
                        held.insert(pair(source));
                    } else {
                        held.remove(&pair(source));
                    }
                }
                Some(Said::Released { source }) => {
                    held.remove(&pair(source));
                }
                None => {}
            }
        }
        Holds { held }
    }

    /// Whether `source` (`secret/db`) is held for the workload.
    pub fn holds(&self, kind: WorkloadKind, name: &str, source: &str) -> bool {
        self.held.iter().any(|(api_version, k, n, s)| {
            api_version == kind.api_version() && k == kind.as_str() && n == name && s == source
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    fn event(reason: &str, message: String, at: i64) -> ControllerEvent {
        ControllerEvent {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "web".into(),
            reason: reason.into(),
            message,
            at,
        }
    }

    fn held(events: &[ControllerEvent], now: i64, source: &str) -> bool {
        Holds::from_events(events, now).holds(WorkloadKind::Deployment, "web", source)
    }

    #[test]
    fn a_hold_lasts_until_its_release_or_two_periods_without_news() {
        let hold = event(HOLD_REASON, hold_message("secret/db", 5, 10 * MINUTE), 1000);
        assert!(held(std::slice::from_ref(&hold), 1000, "secret/db"));
        assert!(held(std::slice::from_ref(&hold), 1000 + 1199, "secret/db"));
        assert!(!held(std::slice::from_ref(&hold), 1000 + 1200, "secret/db"), "forgotten");
        assert!(!held(std::slice::from_ref(&hold), 1000, "secret/other"), "per source");
        assert!(
            !Holds::from_events(std::slice::from_ref(&hold), 1000).holds(
                WorkloadKind::StatefulSet,
                "web",
                "secret/db"
            ),
            "per workload"
        );

        let release = event(RELEASE_REASON, release_message("secret/db", 10 * MINUTE), 1700);
        assert!(!held(&[release.clone(), hold.clone()], 1700, "secret/db"), "released");
        let again = event(HOLD_REASON, hold_message("secret/db", 5, 10 * MINUTE), 2000);
        assert!(held(&[again, release, hold], 2000, "secret/db"), "held again");
    }

    #[test]
    fn images_are_sources_too_and_other_events_say_nothing() {
        let source = "image ghcr.io:443/org/app:prod";
        let hold = event(HOLD_REASON, hold_message(source, 5, MINUTE), 10);
        assert!(held(std::slice::from_ref(&hold), 10, source));
        let other = event("ConfigurationChanged", "configsum rolled it".into(), 20);
        let garbled = event(HOLD_REASON, "someone else's words".into(), 30);
        assert!(held(&[hold, other, garbled], 30, source));
    }
}
