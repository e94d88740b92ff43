//! The controller's vocabulary: the values that travel between the shell (watches, reads,
//! worker, poller) and the pure state — the inbox's [`message::Message`], a workload's key
//! and snapshot, a read's result, a reconciliation's [`work::Work`], what triggered it, the
//! leadership it belongs to, the Events it records. Nothing here imports the state or the
//! shell, so both can import it.

pub mod backoff;
pub mod event;
pub mod leadership;
pub mod message;
pub mod polled_image;
pub mod reading;
pub mod trigger;
pub mod work;
pub mod workload;
