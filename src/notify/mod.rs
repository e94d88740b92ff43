//! Notifications (`configsum controller --notify-config`): the moments the controller
//! records as Events — a roll, a would-be roll, a hold and its release, a halt, a resume, a
//! wait for a window — posted to webhook targets as CloudEvents, JSON or chat messages.
//!
//! Pure: `notice` (what is told), `format` (a notice as each format posts it), `config` (the
//! notify file), `retry` (when a failure is tried again). The shell: `delivery` (a bounded
//! queue and a task per target, never blocking the controller's loop) and `metrics`. The
//! controller builds notices where it builds the Events and hands them over only while it
//! leads.

pub mod config;
pub mod delivery;
pub mod format;
#[cfg(test)]
mod loopback_tests;
pub mod metrics;
pub mod notice;
pub mod retry;

pub use config::{NotifyConfigError, Target};
pub use delivery::{DeliveryLimits, Notifier};
pub use metrics::NotificationMetrics;
pub use notice::{Named, Notice, NoticeKind, NoticeWorkload};
