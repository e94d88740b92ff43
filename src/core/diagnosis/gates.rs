//! Why the controller would not roll a stale input yet (docs/behaviour.md, "Rolling safely"),
//! asked in the order its gates ask: the workload's pause, then its maintenance window, then a
//! halted change of the source; the first that holds is the answer. The workload whose
//! rollout halted a change reads `halted` on that input too, though its digest is current.
//!
//! A halt is told by the controller's `RolloutHalted` Events ([`super::halts::Halts`]), which are never
//! withdrawn, so it is judged again here as the controller judges it: it holds unless the
//! failing workload is gone or has completed its rollout, the source says `<domain>/resume`
//! with the halt's id, or the source has moved on to a newer change.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::halts::{Halt, id_of};
use super::namespace::{NamespaceView, ReadWorkload};
use crate::core::field_path::read_at;
use crate::core::model::warnings::shorten_middle;
use crate::core::roll_window::{RollWindows, effective};
use crate::core::rollout_health::{Health, health};
use crate::core::verdict::Verdict;

/// Characters of a tenant's `roll-window` an answer quotes at most, as the controller's
/// `RollWaiting` Event does.
const MAX_WINDOW_ECHO: usize = 200;

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
