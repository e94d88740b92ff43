//! Whether this replica leads, as the elector (`lease.rs`) reports it: the term a piece of
//! work belongs to, and the moment leadership lapses by the clock.

use std::time::Duration;

use tokio::time::Instant;

/// Whether this replica leads, in which term, and until when.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Leadership {
    /// Counts up each time this replica becomes the leader.
    pub term: u64,
    /// When leadership lapses unless renewed; `None` when following.
    pub until: Option<Instant>,
}

impl Leadership {
    pub fn is_leading(&self, now: Instant) -> bool {
        self.until.is_some_and(|until| now < until)
    }

    /// How long this replica may still act for `term`, if it leads in it.
    pub fn remaining(&self, term: u64, now: Instant) -> Option<Duration> {
        let until = self.until.filter(|_| self.term == term)?;
        (now < until).then(|| until - now)
    }
}
