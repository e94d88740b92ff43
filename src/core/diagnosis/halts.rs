//! Which changes the controller's waves halted, told from its `RolloutHalted` Events (on the
//! failing workload and on the source object), which outlive its memory. The message is
//! written here and read here, so the two cannot drift apart.

use std::collections::BTreeMap;

use super::holds::ControllerEvent;

pub const HALT_REASON: &str = "RolloutHalted";

/// How long a `RolloutHalted` Event tells of a halt, in seconds. The controller records it
/// again every 30 minutes while the halt lasts (to outlive the API server's one-hour Event
/// TTL), so an older one is a halt that ended, or one a restarted controller has not found
/// again yet.
pub const HALT_MEMORY: i64 = 2 * 60 * 60;

const HALTED_AT: &str = " halted at ";
const CHANGE: &str = ": change ";
const WAIT: &str = " workload(s) wait";

/// What a `RolloutHalted` Event says: `source`'s change `change` (12 hex digits, the id
/// `<domain>/resume` takes) halted at the rollout of `failing` (`Deployment shop/web`), and
/// `waiting` workloads wait.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Halt {
    pub source: String,
    pub change: String,
    pub failing: String,
    pub waiting: usize,
}

impl Halt {
    /// The Event's message; `cause` says why the rollout failed, `resume_key` is
    /// `<domain>/resume` where an operator can resume it on the source (a ConfigMap or
    /// Secret), `None` where the source is no such object (an image tag, a tracked workload).
    pub fn message(&self, cause: &str, resume_key: Option<&str>) -> String {
        let Halt { source, change, failing, waiting } = self;
        let halted =
            format!("{source}{CHANGE}{change}{HALTED_AT}{failing}, {cause}; {waiting}{WAIT}");
        match resume_key {
            Some(key) => format!(
                "{halted}. It goes on when that rollout completes, or with {key}: \"{change}\" on \
                 {source}"
            ),
            None => format!(
                "{halted}. It goes on when that rollout completes, or when {source} changes again"
            ),
        }
    }

    /// Reads a message [`Halt::message`] wrote; anything else is `None`.
    pub fn parse(message: &str) -> Option<Halt> {
        let (source, rest) = message.split_once(CHANGE)?;
        let (change, rest) = rest.split_once(HALTED_AT)?;
        let (failing, rest) = rest.split_once(", ")?;
        let (_, rest) = rest.split_once("; ")?;
        let (waiting, _) = rest.split_once(WAIT)?;
        let hex = change.len() == 12 && change.bytes().all(|b| b.is_ascii_hexdigit());
        hex.then(|| Halt {
            source: source.to_owned(),
            change: change.to_owned(),
            failing: failing.to_owned(),
            waiting: waiting.parse().unwrap_or_default(),
        })
    }
}

impl Halt {
    /// The failing workload as the message names it: (`Deployment`, `shop`, `web`).
    pub fn failing_workload(&self) -> Option<(&str, &str, &str)> {
        let (kind, rest) = self.failing.split_once(' ')?;
        let (namespace, name) = rest.split_once('/')?;
        Some((kind, namespace, name))
    }
}

/// The id a digest gives a change or a halt: its first 12 hex digits (`sha256:<hex>`,
/// `hmac-sha256:<hex>` or bare hex), as the controller names them.
pub fn id_of(digest: &str) -> String {
    let hex = digest.rsplit(':').next().unwrap_or(digest);
    hex.chars().filter(char::is_ascii_hexdigit).take(12).collect()
}

/// The halts the controller's `RolloutHalted` Events tell of, by source (`secret/db`,
/// `image ghcr.io/x:1`, `deployment/db`). Whether one still holds is judged against the
/// namespace as it is now (`super::gates`): an Event is never withdrawn.
#[derive(Debug, Default)]
pub struct Halts {
    by_source: BTreeMap<String, Halt>,
}

impl Halts {
    /// The halts at `now` (seconds since the epoch): per source, the newest `RolloutHalted`
    /// Event, if it is younger than [`HALT_MEMORY`]. The Event on the failing workload and the
    /// one on the source say the same; a newer halt of the source replaces an older one.
    pub fn from_events(events: &[ControllerEvent], now: i64) -> Halts {
        let mut newest: BTreeMap<String, (i64, Halt)> = BTreeMap::new();
        for event in events.iter().filter(|e| e.reason == HALT_REASON) {
            let Some(halt) = Halt::parse(&event.message) else { continue };
            match newest.get(&halt.source) {
                Some((at, _)) if *at >= event.at => {}
                _ => {
                    newest.insert(halt.source.clone(), (event.at, halt));
                }
            }
        }
        let by_source = newest
            .into_iter()
            .filter(|(_, (at, _))| now.saturating_sub(*at) < HALT_MEMORY)
            .map(|(source, (_, halt))| (source, halt))
            .collect();
        Halts { by_source }
    }

    /// The halt of a change of `source`, as its newest Event tells it.
    pub fn of_source(&self, source: &str) -> Option<&Halt> {
        self.by_source.get(source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_halt_reads_back_as_it_was_written() {
        let halt = Halt {
            source: "secret/db".into(),
            change: "0123456789ab".into(),
            failing: "Deployment shop/web".into(),
            waiting: 7,
        };
        let message = halt
            .message("its rollout failed (ProgressDeadlineExceeded)", Some("configsum.dev/resume"));
        assert_eq!(
            message,
            "secret/db: change 0123456789ab halted at Deployment shop/web, its rollout failed \
             (ProgressDeadlineExceeded); 7 workload(s) wait. It goes on when that rollout \
             completes, or with configsum.dev/resume: \"0123456789ab\" on secret/db"
        );
        assert_eq!(Halt::parse(&message), Some(halt));
        let image = Halt { source: "image ghcr.io:443/acme/web:1".into(), ..halt_of("a") };
        let said = image.message("x", None);
        assert!(said.ends_with("or when image ghcr.io:443/acme/web:1 changes again"), "{said}");
        assert_eq!(Halt::parse(&said), Some(image), "no resume on an image tag, read all the same");
    }

    fn halt_of(failing: &str) -> Halt {
        Halt {
            source: "secret/db".into(),
            change: "fedcba987654".into(),
            failing: failing.into(),
            waiting: 0,
        }
    }

    #[test]
    fn other_words_are_no_halt() {
        assert_eq!(Halt::parse("configsum rolled it"), None);
        assert_eq!(
            Halt::parse("secret/db: change <script> halted at x, y; 1 workload(s) wait"),
            None
        );
    }

    fn halted(message: String, at: i64) -> ControllerEvent {
        ControllerEvent {
            api_version: "v1".into(),
            kind: "Secret".into(),
            name: "db".into(),
            reason: HALT_REASON.into(),
            message,
            at,
        }
    }

    #[test]
    fn the_newest_halt_of_a_source_tells_for_two_hours() {
        let old = Halt { change: "aaaaaaaaaaaa".into(), ..halt_of("Deployment shop/web") };
        let new = Halt { change: "bbbbbbbbbbbb".into(), ..halt_of("Deployment shop/api") };
        let events = [
            halted(new.message("x", Some("configsum.dev/resume")), 2000),
            halted(old.message("x", Some("configsum.dev/resume")), 1000),
            ControllerEvent { reason: "FlapGuard".into(), ..halted("x".into(), 3000) },
        ];
        let halts = Halts::from_events(&events, 2000);
        assert_eq!(halts.of_source("secret/db"), Some(&new), "the newest wins, in any order");
        assert_eq!(halts.of_source("secret/other"), None);
        assert_eq!(
            Halts::from_events(&events, 2000 + HALT_MEMORY - 1).of_source("secret/db"),
            Some(&new)
        );
        assert_eq!(
            Halts::from_events(&events, 2000 + HALT_MEMORY).of_source("secret/db"),
            None,
            "older than two hours: the controller would have recorded it again"
        );
        assert_eq!(new.failing_workload(), Some(("Deployment", "shop", "api")));
    }

    #[test]
    fn ids_are_the_first_twelve_hex_digits() {
        assert_eq!(id_of("sha256:0123456789abcdef"), "0123456789ab");
        assert_eq!(id_of("hmac-sha256:fedcba9876543210"), "fedcba987654");
        assert_eq!(id_of("0123456789abcdef"), "0123456789ab");
    }
}
