//! What the loop must do now, handed out by [`State::tick`]: reads to start, work for the
//! worker — each with everything its reconciliation needs, so the worker shares nothing
//! with the loop —, a round of image polls, Events, template reads.

use k8s_openapi::api::core::v1::Event;
use tokio::time::Instant;

use super::State;
use super::gate::WaveOutcome;
use super::objects::ReadRequest;
use crate::controller::model::polled_image::PolledImage;
use crate::controller::model::work::{Due, Work};
use crate::controller::model::workload::WorkloadKey;
use crate::notify::Notice;

/// Content reads in flight at once (they also share the lookup cap).
const READS_IN_FLIGHT: usize = 16;

/// What the loop must do now.
#[derive(Debug, Default)]
pub struct Effects {
    pub reads: Vec<ReadRequest>,
    pub work: Vec<Work>,
    /// A round of every tracked image for the poller.
    pub poll: Option<Vec<PolledImage>>,
    /// Events to record (the gates').
    pub events: Vec<Event>,
    /// Notices for `--notify-config`'s targets (the gates'), while leading.
    pub notices: Vec<Notice>,
    /// Tracked workloads whose pod template must be read.
    pub template_reads: Vec<WorkloadKey>,
    /// How waves ended (the waves' metrics).
    pub wave_outcomes: Vec<WaveOutcome>,
}

impl State {
    /// When the loop must wake up next for due work.
    pub fn next_due(&self) -> Option<Instant> {
        [
            self.queue.next_due(),
            self.objects.next_retry(),
            self.images.next_poll(),
            self.gates.iter().filter_map(|gate| gate.next_release()).min(),
            self.together.next_retry(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// What is due at `now`: reads (due retries among them), reconciliations
    /// for the worker, and a poll round.
    pub fn tick(&mut self, now: Instant) -> Effects {
        self.objects.request_due_retries(now);
        // Leadership lapses by the clock, even before the elector says so.
        if !self.leadership.is_leading(now) {
            self.set_term(None);
        }
        for at in 0..self.gates.len() {
            for released in self.gates[at].release(now) {
                if let Some(event) = released.event.filter(|_| self.queue.term().is_some()) {
                    self.record(event, &released.workload);
                }
                // Released by a gate, it rolls on its own: no fan-out waits for it.
                self.pass_gates(released.workload, released.trigger, None, now, Some(at));
            }
            for (involved, event) in self.gates[at].events() {
                if self.queue.term().is_some() {
                    self.record_on(event, involved);
                }
            }
            for notice in self.gates[at].notices() {
                if self.queue.term().is_some() {
                    self.notices.push(notice);
                }
            }
        }
        let work = self.work_due(now);
        let poll = self.images.poll_due(now, self.leadership.is_leading(now));
        let mut reads = Vec::new();
        while let Some(object) = self.objects.start_next(READS_IN_FLIGHT) {
            let trackers = self.trackers(&object);
            reads.push(ReadRequest { object, trackers });
        }
        let events = std::mem::take(&mut self.events);
        let notices = std::mem::take(&mut self.notices);
        let template_reads = self.together.take_reads(now);
        let wave_outcomes = self.gates.iter_mut().flat_map(|g| g.take_wave_outcomes()).collect();
        Effects { reads, work, poll, events, notices, template_reads, wave_outcomes }
    }

    /// The queue's due work, each with what its reconciliation needs. Work on a snapshot
    /// that this replica's own patch made outdated first waits for the watch to deliver the
    /// patched version, rather than judge the one the patch replaced.
    fn work_due(&mut self, now: Instant) -> Vec<Work> {
        let mut ready = Vec::new();
        for due in self.queue.take_due(now) {
            match self.workloads.unseen_patch(&due.key) {
                Some(from) => {
                    let from = from.clone();
                    self.queue.hold(due, from, now);
                }
                None => ready.push(due),
            }
        }
        let workloads = &self.workloads;
        let version = |key: &WorkloadKey| Some(workloads.snapshot(key)?.resource_version.clone());
        ready.extend(self.queue.take_released(now, version));
        ready.into_iter().map(|due| self.work_for(due)).collect()
    }

    fn work_for(&mut self, due: Due) -> Work {
        let fresh = self.objects.take_fresh(&due.key);
        let snapshot = self.workloads.snapshot(&due.key).cloned();
        let (images, workloads, classes) = match &snapshot {
            Some(snapshot) => (
                self.images.observations(&due.key, &snapshot.mutation),
                self.together.observations(&snapshot.mutation),
                self.classes.observations(&snapshot.mutation),
            ),
            None => (Vec::new(), Vec::new(), Vec::new()),
        };
        let waves = self.gates.iter().flat_map(|gate| gate.marks(&due.key)).collect();
        Work { due, snapshot, fresh, images, workloads, classes, waves }
    }
}
