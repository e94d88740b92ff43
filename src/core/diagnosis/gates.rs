//! Why the controller would not roll a stale input yet (docs/behaviour.md, "Rolling safely"),
//! asked in the order its gates ask: the workload's pause, then its maintenance window, then a
//! halted change of the source; the first that holds is the answer. The workload whose
//! rollout halted a change reads `halted` on that input too, though its digest is current.
//!
//! A halt is told by the controller's `RolloutHalted` Events ([`Halts`]), which are never
//! withdrawn, so it is judged again here as the controller judges it: it holds unless the
//! failing workload is gone or has completed its rollout, the source says `<domain>/resume`
//! with the halt's id, or the source has moved on to a newer change.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::halts::{Halt, Halts, id_of};
use super::namespace::{NamespaceView, ReadWorkload};
use crate::core::field_path::read_at;
use crate::core::model::warnings::shorten_middle;
use crate::core::roll_window::{RollWindows, effective};
use crate::core::rollout_health::{Health, health};
use crate::core::verdict::Verdict;

/// Characters of a tenant's `roll-window` an answer quotes at most, as the controller's
/// `RollWaiting` Event does.
const MAX_WINDOW_ECHO: usize = 200;

/// What the gates read besides the workloads: the halts, the namespace's window, the sources'
/// `resume`, and the time they are judged at.
#[derive(Debug, Default)]
pub struct Gates {
    pub halts: Halts,
    /// The namespace's `<domain>/roll-window`, if it has one (and it could be read).
    pub namespace_window: Option<String>,
    /// `<domain>/resume` of each ConfigMap and Secret read that has one, by source
    /// (`secret/db`). The controller reads it on no other source.
    pub resumes: BTreeMap<String, String>,
    /// Seconds since the epoch: when windows are judged (Events are judged when read).
    pub now: i64,
}

/// Why an input reads `paused`, `waiting-window` or `halted`: a sentence for people, and for
/// a window or a halt what scripts need. Flattened into an input's JSON; empty otherwise.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Why {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub because: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub halt: Option<HaltSaid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowSaid>,
}

/// A halt as an answer names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HaltSaid {
    /// `secret/db`, `image ghcr.io/x:1`, `deployment/db`.
    pub source: String,
    /// The halt's id, 12 hex digits: what `<domain>/resume` takes.
    pub change: String,
    /// `Deployment shop/web`.
    pub failing: String,
    /// Workloads waiting behind it, when the controller recorded it.
    pub waiting: usize,
}

/// A closed maintenance window as an answer names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WindowSaid {
    /// Whose annotation applies: `workload` or `namespace`.
    pub from: &'static str,
    /// When it next opens (RFC 3339, UTC); `None` when it never does.
    pub opens: Option<String>,
    /// Why it does not parse: it never opens until fixed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invalid: Option<String>,
}

/// One input line as the gates see it.
pub(super) struct Line<'a> {
    /// As the controller names the source (`secret/db`, `image <repository>:<tag>`).
    pub source: &'a str,
    /// Another name the source goes by (an image as written), if any.
    pub alias: Option<&'a str>,
    pub recorded: Option<&'a str>,
}

/// `base`, the line's verdict by its digests, with the gates' word on it: a stale input that
/// waits for a gate says which; the failing workload's own current line says `halted`.
/// `failing_current` is a workload's current digest for the line's source (`None`: cannot be
/// told), to tell whether the source moved on past a halt.
pub(super) fn judge(
    view: &NamespaceView<'_>,
    workload: &ReadWorkload<'_>,
    base: Verdict,
    line: &Line<'_>,
    failing_current: &dyn Fn(&ReadWorkload<'_>) -> Option<String>,
) -> (Verdict, Why) {
    match base {
        Verdict::Stale => {
            if let Some(why) = paused(view, workload) {
                return (Verdict::Paused, why);
            }
            if let Some(why) = window(view, workload) {
                return (Verdict::WaitingWindow, why);
            }
            match active_halt(view, line, failing_current) {
                Some((halt, failing)) => (Verdict::Halted, halted(view, halt, &failing, false)),
                None => (base, Why::default()),
            }
        }
        Verdict::Current => {
            let at_failing = active_halt(view, line, failing_current).filter(|(halt, failing)| {
                same_workload(failing, workload)
                    && line.recorded.map(id_of) == Some(halt.change.clone())
            });
            match at_failing {
                Some((halt, failing)) => (Verdict::Halted, halted(view, halt, &failing, true)),
                None => (base, Why::default()),
            }
        }
        _ => (base, Why::default()),
    }
}

/// `<domain>/paused: "true"` on the workload's own metadata.
fn paused(view: &NamespaceView<'_>, workload: &ReadWorkload<'_>) -> Option<Why> {
    let key = view.settings.domain.paused();
    (annotation(workload.json, &key).as_deref() == Some("true")).then(|| Why {
        because: Some(format!(
            "{key}: \"true\" on it: the controller does not roll it; removing the annotation \
             rolls it once, to the state of that moment"
        )),
        ..Why::default()
    })
}

/// The workload's effective maintenance window, if it is closed now or does not parse.
fn window(view: &NamespaceView<'_>, workload: &ReadWorkload<'_>) -> Option<Why> {
    let own = annotation(workload.json, &view.settings.domain.roll_window());
    let namespace = view.gates.namespace_window.as_deref();
    let text = effective(own.as_deref(), namespace, None)?;
    let (from, whose) = match own {
        Some(_) => ("workload", "its".to_owned()),
        None => ("namespace", format!("namespace {}'s", view.namespace)),
    };
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(view.gates.now).ok()?);
    let said = match RollWindows::parse(text) {
        Err(invalid) => {
            let reason = invalid.to_string();
            let because = format!(
                "{whose} roll-window does not parse, so it never rolls until fixed: {reason}"
            );
            (because, WindowSaid { from, opens: None, invalid: Some(reason) })
        }
        Ok(windows) if windows.is_open(now) => return None,
        Ok(windows) => {
            let opens = windows.next_opening(now).and_then(rfc3339);
            let at = opens.as_deref().unwrap_or("no opening it can name");
            let shown = shorten_middle(text, MAX_WINDOW_ECHO);
            let because = format!("outside {whose} maintenance window ({shown}): it rolls at {at}");
            (because, WindowSaid { from, opens, invalid: None })
        }
    };
    Some(Why { because: Some(said.0), window: Some(said.1), halt: None })
}

/// The halt of the line's source, if it still holds, with its failing workload.
fn active_halt<'v>(
    view: &'v NamespaceView<'_>,
    line: &Line<'_>,
    failing_current: &dyn Fn(&ReadWorkload<'_>) -> Option<String>,
) -> Option<(&'v Halt, ReadWorkload<'v>)> {
    let halts = &view.gates.halts;
    let halt = halts.of_source(line.source).or_else(|| halts.of_source(line.alias?))?;
    // Gone from the namespace, or its rollout complete after all: the change goes on.
    let (kind, namespace, name) = halt.failing_workload()?;
    let failing = *view
        .workloads
        .iter()
        .find(|w| w.kind.as_str() == kind && namespace == view.namespace && w.name() == name)?;
    let object: serde_json::Value = serde_json::from_str(failing.json).ok()?;
    if health(failing.kind, &object) == Health::Complete {
        return None;
    }
    // An operator resumed it.
    if view.gates.resumes.get(&halt.source) == Some(&halt.change) {
        return None;
    }
    // A newer change of the source replaced it (a digest that cannot be told moves nothing).
    if failing_current(&failing).is_some_and(|current| id_of(&current) != halt.change) {
        return None;
    }
    Some((halt, failing))
}

fn halted(
    view: &NamespaceView<'_>,
    halt: &Halt,
    failing: &ReadWorkload<'_>,
    at_failing: bool,
) -> Why {
    let Halt { source, change, waiting, .. } = halt;
    let failing = format!("{} {}/{}", failing.kind.as_str(), view.namespace, failing.name());
    // The controller reads `resume` on ConfigMaps and Secrets only.
    let resumable = ["configmap/", "secret/"].iter().any(|kind| source.starts_with(kind));
    let or = if resumable {
        let key = view.settings.domain.resume();
        format!("or with: kubectl annotate {source} {key}={change} -n {}", view.namespace)
    } else {
        format!("or when {source} changes again")
    };
    let because = if at_failing {
        format!(
            "its rollout halted {source}'s change {change} ({waiting} workload(s) wait): it goes \
             on when this rollout completes, {or}"
        )
    } else {
        format!(
            "{source}'s change {change} halted at {failing} ({waiting} workload(s) wait): it \
             goes on when that rollout completes, {or}"
        )
    };
    let halt =
        HaltSaid { source: source.clone(), change: change.clone(), failing, waiting: *waiting };
    Why { because: Some(because), halt: Some(halt), window: None }
}

fn same_workload(a: &ReadWorkload<'_>, b: &ReadWorkload<'_>) -> bool {
    a.kind == b.kind && a.name() == b.name()
}

/// One annotation of the object's own metadata.
fn annotation(json: &str, key: &str) -> Option<String> {
    let annotations: Option<HashMap<String, String>> =
        read_at(json, &["metadata", "annotations"]).ok().flatten();
    annotations?.remove(key)
}

fn rfc3339(at: SystemTime) -> Option<String> {
    jiff::Timestamp::try_from(at).ok().map(|t| t.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::diagnosis::halts::HALT_REASON;
    use crate::core::diagnosis::holds::{ControllerEvent, HOLD_REASON, Holds, hold_message};
    use crate::core::diagnosis::object::trackers;
    use crate::core::diagnosis::workload::explain_workload;
    use crate::core::digest::{DigestKeys, Digester, ObjectId};
    use crate::core::model::kinds::WorkloadKind;
    use crate::core::model::object_content::ObjectContent;
    use crate::core::model::object_ref::ObjectRef;
    use crate::core::mutate::{Found, Settings};
    use crate::core::refs::ConsumedKeys;
    use serde_json::{Value, json};

    const NS: &str = "shop";

    /// Monday 2026-11-30, 12:00 UTC.
    fn noon() -> i64 {
        "2026-11-30T12:00:00Z".parse::<jiff::Timestamp>().expect("time").as_second()
    }

    fn digester() -> Digester {
        Digester::new(DigestKeys::parse(b"0123456789abcdef0123456789abcdef").expect("key"))
    }

    fn content(password: &str) -> ObjectContent {
        ObjectContent::from_entries([("password".to_owned(), password.as_bytes().to_vec())].into())
    }

    fn digest_of(password: &str) -> String {
        let object = ObjectRef::secret("db");
        let id = ObjectId { namespace: NS, object: &object };
        digester().digest(id, &content(password), &ConsumedKeys::All, None)
    }

    /// A Deployment reading Secret db whole, recording `password`'s digest, with these
    /// annotations and status.
    fn deployment(name: &str, password: &str, annotations: Value, status: Value) -> String {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": NS, "generation": 2, "annotations": annotations},
            "spec": {"replicas": 1, "template": {
                "metadata": {"annotations": {"secret.configsum.dev/db": digest_of(password)}},
                "spec": {"containers": [{"name": "c", "image": "app:1",
                    "envFrom": [{"secretRef": {"name": "db"}}]}]}}},
            "status": status})
        .to_string()
    }

    fn failed() -> Value {
        json!({"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 0,
            "conditions": [{"type": "Progressing", "status": "False",
                "reason": "ProgressDeadlineExceeded", "message": "too slow"}]})
    }

    fn complete() -> Value {
        json!({"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1})
    }

    /// The halt web's rollout made of the change to password "new", recorded `ago` seconds
    /// before noon.
    fn halt_event(ago: i64) -> ControllerEvent {
        let halt = Halt {
            source: "secret/db".into(),
            change: id_of(&digest_of("new")),
            failing: "Deployment shop/web".into(),
            waiting: 3,
        };
        ControllerEvent {
            api_version: "v1".into(),
            kind: "Secret".into(),
            name: "db".into(),
            reason: HALT_REASON.into(),
            message: halt.message(
                "its rollout failed (ProgressDeadlineExceeded)",
                Some("configsum.dev/resume"),
            ),
            at: noon() - ago,
        }
    }

    struct Namespace {
        workloads: Vec<String>,
        gates: Gates,
        holds: Holds,
        secret: ObjectContent,
    }

    impl Namespace {
        /// web failed at password "new"; api waits; the Secret says "new".
        fn halted() -> Namespace {
            Namespace {
                workloads: vec![
                    deployment("web", "new", json!({}), failed()),
                    deployment("api", "old", json!({}), complete()),
                ],
                gates: Gates {
                    halts: Halts::from_events(&[halt_event(60)], noon()),
                    now: noon(),
                    ..Gates::default()
                },
                holds: Holds::default(),
                secret: content("new"),
            }
        }

        /// Each tracker's (name, verdict, because).
        fn verdicts(&self) -> Vec<(String, Verdict, Option<String>)> {
            let read: Vec<ReadWorkload<'_>> = self
                .workloads
                .iter()
                .map(|json| ReadWorkload { kind: WorkloadKind::Deployment, json })
                .collect();
            let (digester, settings) = (digester(), Settings::default());
            let view = NamespaceView {
                namespace: NS,
                workloads: &read,
                digester: Some(&digester),
                holds: &self.holds,
                gates: &self.gates,
                settings: &settings,
            };
            let answer = trackers(&view, &ObjectRef::secret("db"), None, Ok(Some(&self.secret)));
            answer.into_iter().map(|t| (t.name, t.verdict, t.why.because)).collect()
        }

        fn verdict_of(&self, name: &str) -> Verdict {
            let found = self.verdicts().into_iter().find(|(n, _, _)| n == name);
            found.map(|(_, verdict, _)| verdict).expect("listed")
        }
    }

    #[test]
    fn a_halt_holds_those_waiting_and_names_the_failing_workload() {
        let ns = Namespace::halted();
        let id = id_of(&digest_of("new"));
        let verdicts = ns.verdicts();
        assert_eq!(verdicts[0].1, Verdict::Halted, "api waits behind it");
        assert_eq!(
            verdicts[0].2.as_deref(),
            Some(
                format!(
                    "secret/db's change {id} halted at Deployment shop/web (3 workload(s) wait): \
                     it goes on when that rollout completes, or with: kubectl annotate secret/db \
                     configsum.dev/resume={id} -n shop"
                )
                .as_str()
            )
        );
        assert_eq!(verdicts[1].1, Verdict::Halted, "web, the failing one, is current yet halted");
        let failing = verdicts[1].2.as_deref().unwrap_or_default();
        assert!(
            failing.starts_with(&format!("its rollout halted secret/db's change {id}")),
            "{failing}"
        );
    }

    #[test]
    fn a_halt_ends_as_the_controller_ends_it() {
        // (a) The failing workload is gone, or its rollout completed after all.
        let mut gone = Namespace::halted();
        gone.workloads.remove(0);
        assert_eq!(gone.verdict_of("api"), Verdict::Stale);
        let mut done = Namespace::halted();
        done.workloads[0] = deployment("web", "new", json!({}), complete());
        assert_eq!(done.verdict_of("api"), Verdict::Stale);
        assert_eq!(done.verdict_of("web"), Verdict::Current);

        // (b) An operator resumed it by its id; another id resumes nothing.
        let mut resumed = Namespace::halted();
        resumed.gates.resumes.insert("secret/db".into(), "000000000000".into());
        assert_eq!(resumed.verdict_of("api"), Verdict::Halted);
        resumed.gates.resumes.insert("secret/db".into(), id_of(&digest_of("new")));
        assert_eq!(resumed.verdict_of("api"), Verdict::Stale);
        assert_eq!(resumed.verdict_of("web"), Verdict::Current);

        // (c) The Secret moved on: a newer change, which web's digest no longer names.
        let mut newer = Namespace::halted();
        newer.secret = content("newer");
        assert_eq!(newer.verdict_of("api"), Verdict::Stale);
        assert_eq!(newer.verdict_of("web"), Verdict::Stale);

        // An Event older than two hours tells of no halt.
        let mut forgotten = Namespace::halted();
        forgotten.gates.halts = Halts::from_events(&[halt_event(2 * 3600)], noon());
        assert_eq!(forgotten.verdict_of("api"), Verdict::Stale);
    }

    #[test]
    fn windows_closed_open_and_invalid() {
        let stale = |annotations: Value| {
            let mut ns = Namespace::halted();
            ns.gates.halts = Halts::default();
            ns.workloads = vec![deployment("api", "old", annotations, complete())];
            ns
        };
        let closed = stale(json!({"configsum.dev/roll-window": "Mon 22:00-23:00 UTC"}));
        let (_, verdict, because) = closed.verdicts().remove(0);
        assert_eq!(verdict, Verdict::WaitingWindow);
        assert_eq!(
            because.as_deref(),
            Some(
                "outside its maintenance window (Mon 22:00-23:00 UTC): it rolls at 2026-11-30T22:00:00Z"
            )
        );
        let open = stale(json!({"configsum.dev/roll-window": "Mon 11:00-13:00 UTC"}));
        assert_eq!(open.verdict_of("api"), Verdict::Stale);
        let invalid = stale(json!({"configsum.dev/roll-window": "Mnn 22:00-23:00 UTC"}));
        let (_, verdict, because) = invalid.verdicts().remove(0);
        assert_eq!(verdict, Verdict::WaitingWindow, "fail closed");
        assert_eq!(
            because.as_deref(),
            Some(
                "its roll-window does not parse, so it never rolls until fixed: window 1: \
                 unknown day \"Mnn\" (days are Mon Tue Wed Thu Fri Sat Sun, or *)"
            )
        );

        // The namespace's window applies to a workload without its own; its own wins.
        let mut by_namespace = stale(json!({}));
        by_namespace.gates.namespace_window = Some("Tue 01:00-02:00 Europe/Berlin".into());
        let (_, verdict, because) = by_namespace.verdicts().remove(0);
        assert_eq!(verdict, Verdict::WaitingWindow);
        assert_eq!(
            because.as_deref(),
            Some(
                "outside namespace shop's maintenance window (Tue 01:00-02:00 Europe/Berlin): it \
                 rolls at 2026-12-01T00:00:00Z"
            )
        );
        let mut own = stale(json!({"configsum.dev/roll-window": "* 11:00-13:00 UTC"}));
        own.gates.namespace_window = Some("broken".into());
        assert_eq!(own.verdict_of("api"), Verdict::Stale);

        // A window judges only what is stale: a current workload is current.
        let mut current = stale(json!({"configsum.dev/roll-window": "Mon 22:00-23:00 UTC"}));
        current.secret = content("old");
        assert_eq!(current.verdict_of("api"), Verdict::Current);
    }

    #[test]
    fn held_then_paused_then_window_then_halted() {
        let everything = json!({"configsum.dev/paused": "true",
            "configsum.dev/roll-window": "Mon 22:00-23:00 UTC"});
        let mut ns = Namespace::halted();
        ns.workloads[1] = deployment("api", "old", everything, complete());
        let (_, verdict, because) = ns.verdicts().remove(0);
        assert_eq!(verdict, Verdict::Paused);
        assert_eq!(
            because.as_deref(),
            Some(
                "configsum.dev/paused: \"true\" on it: the controller does not roll it; removing \
                 the annotation rolls it once, to the state of that moment"
            )
        );
        // Only "true" pauses, as for the controller.
        let window = json!({"configsum.dev/paused": "yes",
            "configsum.dev/roll-window": "Mon 22:00-23:00 UTC"});
        ns.workloads[1] = deployment("api", "old", window, complete());
        assert_eq!(ns.verdict_of("api"), Verdict::WaitingWindow);

        let hold = ControllerEvent {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "api".into(),
            reason: HOLD_REASON.into(),
            message: hold_message("secret/db", 5, Duration::from_secs(600)),
            at: noon(),
        };
        ns.holds = Holds::from_events(&[hold], noon());
        assert_eq!(ns.verdict_of("api"), Verdict::Held);
    }

    /// The failing workload's own answer, and its overall verdict: a paused one says paused,
    /// as the controller's gauge does.
    #[test]
    fn the_failing_workload_reads_halted_on_that_input() {
        let ns = Namespace::halted();
        let read: Vec<ReadWorkload<'_>> = ns
            .workloads
            .iter()
            .map(|json| ReadWorkload { kind: WorkloadKind::Deployment, json })
            .collect();
        let (digester, settings) = (digester(), Settings::default());
        let view = NamespaceView {
            namespace: NS,
            workloads: &read,
            digester: Some(&digester),
            holds: &ns.holds,
            gates: &ns.gates,
            settings: &settings,
        };
        let objects = |_: &ObjectRef| -> Found<'_> { Ok(Some(&ns.secret)) };
        let web = explain_workload(&view, &read[0], &objects, &[]);
        assert_eq!(web.verdict, Verdict::Halted);
        let halt = web.inputs[0].why.halt.clone().expect("the halt");
        assert_eq!(
            (halt.source.as_str(), halt.failing.as_str(), halt.waiting),
            ("secret/db", "Deployment shop/web", 3)
        );
        assert_eq!(halt.change, id_of(&digest_of("new")));
        let json = serde_json::to_value(&web.inputs[0]).expect("json");
        assert_eq!(json["halt"]["change"], json!(halt.change));
        assert!(json["because"].is_string() && json.get("window").is_none(), "{json}");

        let api = explain_workload(&view, &read[1], &objects, &[]);
        assert_eq!(api.verdict, Verdict::Halted);
        let closed = deployment(
            "api",
            "old",
            json!({"configsum.dev/roll-window": "Mon 22:00-23:00 UTC"}),
            complete(),
        );
        let closed = ReadWorkload { kind: WorkloadKind::Deployment, json: &closed };
        let api = explain_workload(&view, &closed, &objects, &[]);
        assert_eq!(api.verdict, Verdict::WaitingWindow);
        let window = serde_json::to_value(&api.inputs[0]).expect("json")["window"].clone();
        assert_eq!(window, json!({"from": "workload", "opens": "2026-11-30T22:00:00Z"}));
    }
}
