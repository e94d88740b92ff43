//! The maintenance-window gate (docs/behaviour.md, "Rolling safely"): outside its window a
//! due workload waits, and at the opening it rolls with the state of that moment. The window
//! is the workload's `<domain>/roll-window`, else its namespace's, else `--roll-window`
//! ([`crate::core::roll_window::effective`]). One that does not parse never opens (fail
//! closed). Windows are wall-clock: the gate reads the wall clock through an anchor taken
//! once, so that the caller's clock drives it (and tests control it).

use std::collections::{BTreeSet, HashMap};
use std::time::SystemTime;

use k8s_openapi::api::core::v1::Event;
use tokio::time::Instant;
use tracing::{info, warn};

use super::gate::{Gate, Gating, Involved, Released};
use crate::controller::model::trigger::{SourceChange, Trigger};
use crate::controller::model::workload::{RolloutFacts, WorkloadKey};
use crate::controller::model::{event, notice};
use crate::core::roll_window::{RollWindows, effective};
use crate::core::verdict::Verdict;
use crate::notify::{Notice, NoticeKind};

/// A workload waiting for its window, with what made it due.
#[derive(Debug)]
struct Waiting {
    triggers: BTreeSet<Trigger>,
    /// When it opens, on the caller's clock; `None`: it never does (does not parse).
    opens: Option<Instant>,
    /// Its window changed since it was judged.
    changed: bool,
}

#[derive(Debug, Default)]
pub struct Windows {
    /// `--roll-window`.
    flag: Option<Box<str>>,
    workloads: HashMap<WorkloadKey, Box<str>>,
    namespaces: HashMap<String, Box<str>>,
    waiting: HashMap<WorkloadKey, Waiting>,
    /// An instant of the caller's clock and the wall-clock time at it.
    anchor: Option<(Instant, SystemTime)>,
    events: Vec<(Involved, Event)>,
    /// Notices of waits begun, for the next tick.
    notices: Vec<Notice>,
}

impl Windows {
    /// The gate for `--roll-window` (none: only annotations set windows). `anchor` ties the
    /// caller's clock to the wall clock; `None`: the wall clock at the first use.
    pub fn new(flag: Option<&str>, anchor: Option<(Instant, SystemTime)>) -> Self {
        Windows { flag: flag.map(Into::into), anchor, ..Windows::default() }
    }

    /// `namespace`'s `<domain>/roll-window`, as written (`None`: it has none).
    fn namespace_window(&mut self, namespace: &str, window: Option<&str>) {
        if self.namespaces.get(namespace).map(AsRef::as_ref) == window {
            return;
        }
        match window {
            Some(window) => self.namespaces.insert(namespace.to_owned(), window.into()),
            None => self.namespaces.remove(namespace),
        };
        for (workload, waiting) in &mut self.waiting {
            waiting.changed |= *workload.namespace == *namespace;
        }
    }

    fn window_text(&self, workload: &WorkloadKey) -> Option<&str> {
        effective(
            self.workloads.get(workload).map(AsRef::as_ref),
            self.namespaces.get(&*workload.namespace).map(AsRef::as_ref),
            self.flag.as_deref(),
        )
    }

    fn wall(&mut self, now: Instant) -> SystemTime {
        let (instant, wall) = *self.anchor.get_or_insert_with(|| (now, SystemTime::now()));
        match now.checked_duration_since(instant) {
            Some(later) => wall + later,
            None => wall - instant.saturating_duration_since(now),
        }
    }

    fn instant_of(&mut self, at: SystemTime, now: Instant) -> Instant {
        let wall = self.wall(now);
        match at.duration_since(wall) {
            Ok(ahead) => now + ahead,
            Err(_) => now,
        }
    }

    /// Whether `workload` may roll at `now`: `Ok(None)` yes; `Ok(Some(opening))` at that
    /// instant; `Err(reason)` never (its window does not parse).
    fn judge(&mut self, workload: &WorkloadKey, now: Instant) -> Result<Option<Instant>, String> {
        let Some(text) = self.window_text(workload) else { return Ok(None) };
        let windows = RollWindows::parse(text).map_err(|e| e.to_string())?;
        let wall = self.wall(now);
        if windows.is_open(wall) {
            return Ok(None);
        }
        let opening = windows.next_opening(wall).ok_or("it never opens")?;
        Ok(Some(self.instant_of(opening, now)))
    }
}

impl Gate for Windows {
    fn admit(
        &mut self,
        workload: &WorkloadKey,
        trigger: &Trigger,
        _change: Option<&SourceChange>,
        now: Instant,
    ) -> Gating {
        if let Some(waiting) = self.waiting.get_mut(workload) {
            waiting.triggers.insert(trigger.clone());
            return Gating::Hold { event: None };
        }
        let opens = match self.judge(workload, now) {
            Ok(None) => return Gating::Pass,
            Ok(Some(opens)) => {
                let at = self.wall(now) + opens.saturating_duration_since(now);
                info!(workload = %workload, opens_in = ?opens.saturating_duration_since(now),
                    "outside its maintenance window: waiting");
                let window = self.window_text(workload).unwrap_or_default().to_owned();
                let event = event::roll_waiting(workload, None, &window, at);
                let reason = event.message.clone().unwrap_or_default();
                let source = trigger.source();
                let kind = NoticeKind::WaitingWindow;
                self.notices.push(notice::about(kind, workload, Some(&source), reason));
                self.events.push((Involved::Workload(workload.clone()), event));
                Some(opens)
            }
            Err(reason) => {
                warn!(workload = %workload, %reason, "its maintenance window does not parse: never rolling it");
                let event = event::invalid_roll_window(workload, None, &reason);
                self.events.push((Involved::Workload(workload.clone()), event));
                None
            }
        };
        let triggers = BTreeSet::from([trigger.clone()]);
        self.waiting.insert(workload.clone(), Waiting { triggers, opens, changed: false });
        Gating::Hold { event: None }
    }

    fn namespace_observed(&mut self, namespace: &str, roll_window: Option<&str>) {
        self.namespace_window(namespace, roll_window);
    }

    fn observed(&mut self, workload: &WorkloadKey, facts: &RolloutFacts) {
        if self.workloads.get(workload) == facts.roll_window.as_ref() {
            return;
        }
        match &facts.roll_window {
            Some(window) => self.workloads.insert(workload.clone(), window.clone()),
            None => self.workloads.remove(workload),
        };
        if let Some(waiting) = self.waiting.get_mut(workload) {
            waiting.changed = true;
        }
    }

    fn release(&mut self, now: Instant) -> Vec<Released> {
        let mut released = Vec::new();
        // Only those whose window opened or changed: the others' judgement stands.
        let due = |w: &Waiting| w.changed || w.opens.is_some_and(|opens| opens <= now);
        let keys: Vec<WorkloadKey> =
            self.waiting.iter().filter(|(_, w)| due(w)).map(|(k, _)| k.clone()).collect();
        for workload in keys {
            // The window may have changed, or been removed, since it began to wait.
            match self.judge(&workload, now) {
                Ok(None) => {
                    let Some(waiting) = self.waiting.remove(&workload) else { continue };
                    info!(workload = %workload, "its maintenance window is open: rolling");
                    for trigger in waiting.triggers {
                        released.push(Released {
                            workload: workload.clone(),
                            trigger,
                            event: None,
                        });
                    }
                }
                judged => {
                    if let Some(waiting) = self.waiting.get_mut(&workload) {
                        waiting.opens = judged.ok().flatten();
                        waiting.changed = false;
                    }
                }
            }
        }
        released
    }

    fn next_release(&self) -> Option<Instant> {
        self.waiting.values().filter_map(|w| w.opens).min()
    }

    fn verdict(&self, workload: &WorkloadKey) -> Option<Verdict> {
        self.waiting.contains_key(workload).then_some(Verdict::WaitingWindow)
    }

    fn events(&mut self) -> Vec<(Involved, Event)> {
        std::mem::take(&mut self.events)
    }

    fn notices(&mut self) -> Vec<Notice> {
        std::mem::take(&mut self.notices)
    }

    fn forget(&mut self, workload: &WorkloadKey) {
        self.workloads.remove(workload);
        self.waiting.remove(workload);
    }
}
