//! The gates' answers end to end (`gates.rs`), through the answers that ask them: who tracks a
//! Secret (`object.rs`) and a workload's every input (`workload.rs`). Apart from `gates.rs`
//! so that it may import those two, which import it.

use std::time::Duration;

use super::halts::{Halt, Halts, id_of};
use super::namespace::{Gates, NamespaceView, ReadWorkload};
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
use crate::core::verdict::Verdict;
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
        message: halt
            .message("its rollout failed (ProgressDeadlineExceeded)", Some("configsum.dev/resume")),
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
