//! The Kubernetes Event on a patched workload, naming the changed objects
//! and, for a moved tag, the container, its image reference and both
//! digests (never any content). A core/v1 Event created once per patch:
//! kube's `Recorder` writes events.k8s.io Events and patches series, which
//! needs a `patch` grant the controller's RBAC does not give.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::trigger::Trigger;
use super::trigger::WaveMark;
use super::workload::WorkloadKey;
use crate::core::ObjectKey;
use crate::core::diagnosis::{halts, holds};
use crate::lookup::api_object::workload_resource;

const COMPONENT: &str = "configsum-controller";

/// The most bytes in a message: the API server refuses longer events.k8s.io
/// notes, and its own components cut core/v1 messages to the same length.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// The Event for a patch of `key` because `changed` changed.
pub fn rolled(key: &WorkloadKey, uid: Option<String>, changed: &BTreeSet<Trigger>) -> Event {
    on_workload(key, uid, "ConfigurationChanged", message(&Subject::of(key), changed))
}

/// The Event a dry run records where it would have patched `key`, naming the waves it would
/// roll in.
pub fn would_roll(
    key: &WorkloadKey,
    uid: Option<String>,
    changed: &BTreeSet<Trigger>,
    waves: &[WaveMark],
) -> Event {
    let rolled = message(&Subject::of(key), changed);
    let waves: Vec<String> = waves
        .iter()
        .map(|m| {
            format!("wave {} of {}'s change {}", m.wave, m.change.source.record_name(), m.change.id)
        })
        .collect();
    let message = if waves.is_empty() {
        format!("dry run, nothing patched: {rolled}")
    } else {
        format!("dry run, nothing patched, in {}: {rolled}", waves.join(", "))
    };
    on_workload(key, uid, "WouldRoll", truncate_bytes(message, MAX_MESSAGE_BYTES))
}

/// The Event when the flap guard stops `source` from rolling `key` (again every period while
/// it holds: `configsum explain` reads holds from these Events).
pub fn flap_guard(
    key: &WorkloadKey,
    uid: Option<String>,
    source: &str,
    limit: u32,
    period: Duration,
) -> Event {
    let message = holds::hold_message(source, limit, period);
    let event =
        on_workload(key, uid, holds::HOLD_REASON, truncate_bytes(message, MAX_MESSAGE_BYTES));
    Event { type_: Some("Warning".to_owned()), ..event }
}

/// The Event when `source` has been quiet for a period and rolls `key` again.
pub fn flap_guard_released(
    key: &WorkloadKey,
    uid: Option<String>,
    source: &str,
    period: Duration,
) -> Event {
    let message = holds::release_message(source, period);
    on_workload(key, uid, holds::RELEASE_REASON, truncate_bytes(message, MAX_MESSAGE_BYTES))
}

/// What a gate's Event is about (the router fills in its uid).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Involved {
    Workload(WorkloadKey),
    /// A ConfigMap or Secret whose change a gate holds.
    Object(ObjectKey),
}

/// The `Warning` Event `RolloutHalted`, on the failing workload and on the source object:
/// what halted (`explain` reads it back, [`halts`]), `cause` (why the rollout failed) and
/// how to go on; `resume_key` is `<domain>/resume` where the source is a ConfigMap or Secret.
pub fn rollout_halted(
    on: &Involved,
    halt: &halts::Halt,
    cause: &str,
    resume_key: Option<&str>,
) -> Event {
    let message = truncate_bytes(halt.message(cause, resume_key), MAX_MESSAGE_BYTES);
    let event = match on {
        Involved::Workload(key) => on_workload(key, None, halts::HALT_REASON, message),
        Involved::Object(key) => on_object(key, halts::HALT_REASON, message),
    };
    Event { type_: Some("Warning".to_owned()), ..event }
}

/// The Event when a due workload waits for its maintenance window `window`, which opens at
/// `opens`.
pub fn roll_waiting(
    key: &WorkloadKey,
    uid: Option<String>,
    window: &str,
    opens: std::time::SystemTime,
) -> Event {
    let seconds =
        opens.duration_since(std::time::SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let opens = i64::try_from(seconds)
        .ok()
        .and_then(|s| k8s_openapi::jiff::Timestamp::from_second(s).ok())
        .map_or_else(|| "later".to_owned(), |t| t.to_string());
    let window = crate::core::model::warnings::shorten_middle(window, 200);
    let message = format!("outside its maintenance window ({window}): it rolls at {opens}");
    on_workload(key, uid, "RollWaiting", truncate_bytes(message, MAX_MESSAGE_BYTES))
}

/// The Event when a workload's maintenance window does not parse: it never rolls (fail
/// closed) until the window is fixed. `reason` is the grammar's, already bounded.
pub fn invalid_roll_window(key: &WorkloadKey, uid: Option<String>, reason: &str) -> Event {
    let message =
        format!("its roll-window does not parse, so it never rolls until fixed: {reason}");
    let event =
        on_workload(key, uid, "InvalidRollWindow", truncate_bytes(message, MAX_MESSAGE_BYTES));
    Event { type_: Some("Warning".to_owned()), ..event }
}

/// A `Normal` core/v1 Event on the workload, from configsum's controller.
fn on_workload(key: &WorkloadKey, uid: Option<String>, reason: &str, message: String) -> Event {
    let resource = workload_resource(key.kind);
    let involved = ObjectReference {
        api_version: Some(resource.api_version),
        kind: Some(resource.kind),
        name: Some(key.name.to_string()),
        namespace: Some(key.namespace.to_string()),
        uid,
        ..ObjectReference::default()
    };
    normal(involved, reason, message)
}

/// A `Normal` core/v1 Event on a ConfigMap or Secret (the router fills in its uid).
fn on_object(key: &ObjectKey, reason: &str, message: String) -> Event {
    let involved = ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some(key.object.kind.as_str().to_owned()),
        name: Some(key.object.name.clone()),
        namespace: Some(key.namespace.clone()),
        ..ObjectReference::default()
    };
    normal(involved, reason, message)
}

fn normal(involved: ObjectReference, reason: &str, message: String) -> Event {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let name = involved.name.clone().unwrap_or_default();
    Event {
        metadata: ObjectMeta { generate_name: Some(format!("{name}.")), ..ObjectMeta::default() },
        involved_object: involved,
        reason: Some(reason.to_owned()),
        message: Some(message),
        type_: Some("Normal".to_owned()),
        source: Some(EventSource {
            component: Some(COMPONENT.to_owned()),
            ..EventSource::default()
        }),
        reporting_component: Some(COMPONENT.to_owned()),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        count: Some(1),
        ..Event::default()
    }
}

/// Where the digests went: a pod template (which rolls), or the annotations
/// map of a kind without one (an operator's resource, `spec.podAnnotations`).
enum Subject {
    PodTemplate,
    Map(String),
}

impl Subject {
    fn of(key: &WorkloadKey) -> Subject {
        if key.kind.pod_spec_path().is_some() {
            Subject::PodTemplate
        } else {
            Subject::Map(key.kind.annotations_path().join("."))
        }
    }
}

/// What changed, in order, within [`MAX_MESSAGE_BYTES`]: as many triggers as
/// fit whole, then `and N more`.
fn message(subject: &Subject, changed: &BTreeSet<Trigger>) -> String {
    let mut message = match (subject, changed.is_empty()) {
        (Subject::PodTemplate, true) => {
            return "configsum brought the pod template's configuration digests up to date"
                .to_owned();
        }
        (Subject::Map(path), true) => {
            return format!("configsum brought the configuration digests in {path} up to date");
        }
        (Subject::PodTemplate, false) => {
            String::from("configsum rolled the pod template: changed ")
        }
        (Subject::Map(path), false) => format!("configsum updated the digests in {path}: changed "),
    };
    let mut listed = 0;
    for (i, trigger) in changed.iter().enumerate() {
        let item = trigger.to_string();
        let separator = if listed == 0 { "" } else { ", " };
        let left = changed.len() - i - 1;
        let count = if left == 0 { 0 } else { format!(" and {left} more").len() };
        // The first is always named: a trigger is bounded well within the limit.
        if listed > 0 && message.len() + separator.len() + item.len() + count > MAX_MESSAGE_BYTES {
            break;
        }
        message.push_str(separator);
        message.push_str(&item);
        listed += 1;
    }
    if listed < changed.len() {
        message.push_str(&format!(" and {} more", changed.len() - listed));
    }
    truncate_bytes(message, MAX_MESSAGE_BYTES)
}

/// At most `max` bytes, cut at a character boundary, ending in `…` if cut.
fn truncate_bytes(mut s: String, max: usize) -> String {
    if s.len() <= max {
        return s;
    }
    let mut end = max - '…'.len_utf8();
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    s.push('…');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ObjectRef;
    use crate::core::model::kinds::WorkloadKind;

    #[test]
    fn the_event_names_the_objects_and_the_workload() {
        let key = WorkloadKey {
            kind: WorkloadKind::StatefulSet,
            namespace: "ns".into(),
            name: "db".into(),
        };
        let changed = BTreeSet::from([
            Trigger::Object(ObjectRef::secret("creds")),
            Trigger::Object(ObjectRef::config_map("app")),
        ]);
        let event = rolled(&key, Some("u1".into()), &changed);
        assert_eq!(
            event.message.as_deref(),
            Some("configsum rolled the pod template: changed configmap/app, secret/creds")
        );
        assert_eq!(event.involved_object.api_version.as_deref(), Some("apps/v1"));
        assert_eq!(event.involved_object.kind.as_deref(), Some("StatefulSet"));
        assert_eq!(event.involved_object.uid.as_deref(), Some("u1"));
        assert_eq!(event.metadata.generate_name.as_deref(), Some("db."));
    }

    fn digest(c: char) -> String {
        format!("sha256:{}", c.to_string().repeat(64))
    }

    #[test]
    fn a_moved_tag_names_the_container_the_reference_and_both_digests() {
        let changed = BTreeSet::from([
            Trigger::Object(ObjectRef::config_map("app")),
            Trigger::Image {
                container: "app".into(),
                variable: None,
                image: "ghcr.io/org/app:prod".into(),
                old: digest('1'),
                new: digest('2'),
            },
        ]);
        assert_eq!(
            message(&Subject::PodTemplate, &changed),
            format!(
                "configsum rolled the pod template: changed configmap/app, container app (ghcr.io/org/app:prod) from {} to {}",
                digest('1'),
                digest('2')
            )
        );
    }

    #[test]
    fn messages_stay_within_1_kib_however_long_the_names() {
        // 128 objects of 253 characters, and images with 384-character
        // references and a hostile "digest" from the template's annotation.
        let mut changed: BTreeSet<Trigger> = (0..128)
            .map(|i| Trigger::Object(ObjectRef::secret(format!("{i:03}{}", "s".repeat(250)))))
            .collect();
        for i in 0..3 {
            changed.insert(Trigger::Image {
                container: format!("c{i}"),
                variable: None,
                image: format!("r.example/{}:{}", "p".repeat(245), "t".repeat(128)),
                old: "x".repeat(100_000),
                new: digest('2'),
            });
        }
        let sent = message(&Subject::PodTemplate, &changed);
        assert!(sent.len() <= MAX_MESSAGE_BYTES, "{} bytes", sent.len());
        // The first three are named whole, then counted with the rest.
        assert!(sent.contains(&format!("secret/001{}, ", "s".repeat(250))), "{sent}");
        assert!(sent.ends_with(&format!("secret/002{} and 128 more", "s".repeat(250))), "{sent}");

        // One image alone: its reference shortened in the middle, both digests readable.
        let image = format!("r.example/{}:prod", "p".repeat(400));
        let one = BTreeSet::from([Trigger::Image {
            container: "app".into(),
            variable: None,
            image: image.clone(),
            old: "x".repeat(100_000),
            new: digest('2'),
        }]);
        let sent = message(&Subject::PodTemplate, &one);
        assert!(sent.len() <= MAX_MESSAGE_BYTES, "{} bytes", sent.len());
        assert!(sent.contains("container app (r.example/ppp") && sent.contains("…"));
        assert!(sent.contains("pp:prod) from xxx"), "{sent}");
        assert!(sent.ends_with(&format!(" to {}", digest('2'))), "{sent}");

        // A kind without a pod template says where its digests went.
        let map = Subject::Map("spec.podAnnotations".into());
        let s3 = BTreeSet::from([Trigger::Object(ObjectRef::secret("s3"))]);
        assert_eq!(
            message(&map, &s3),
            "configsum updated the digests in spec.podAnnotations: changed secret/s3"
        );
        assert_eq!(
            message(&map, &BTreeSet::new()),
            "configsum brought the configuration digests in spec.podAnnotations up to date"
        );

        // Multibyte content is cut at a character boundary.
        let cut = truncate_bytes("é".repeat(600), MAX_MESSAGE_BYTES);
        assert!(cut.len() <= MAX_MESSAGE_BYTES && cut.ends_with('…'));
    }
}
