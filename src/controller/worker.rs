//! The worker: reconciles due workloads one at a time, through the token
//! bucket, and reports each outcome to the event loop, which schedules any
//! retry. Work of an earlier leadership term is dropped unread.

use std::collections::BTreeSet;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::queue::TokenBucket;
use super::reconcile::{ReconcileError, Reconciled, Reconciler};
use super::trigger::Trigger;
use super::watches::Message;
use super::workload::WorkloadKey;

/// A workload to reconcile, for the leadership term it was queued in.
#[derive(Clone, Debug)]
pub struct Work {
    pub key: WorkloadKey,
    /// The objects and images whose change made it due, for the Event.
    pub triggers: BTreeSet<Trigger>,
    /// When its coalescing window opened (for the reaction-time metric).
    pub opened: std::time::Instant,
    pub term: u64,
}

pub type Done = Result<Reconciled, ReconcileError>;

pub async fn run(
    reconciler: Arc<Reconciler>,
    mut bucket: TokenBucket,
    mut work: mpsc::UnboundedReceiver<Work>,
    done: mpsc::Sender<Message>,
) {
    while let Some(item) = work.recv().await {
        let leading = reconciler.leadership.borrow().remaining(item.term, Instant::now()).is_some();
        let result = if leading {
            reconciler.reconcile(&item.key, &item.triggers, item.term, &mut bucket).await
        } else {
            Ok(Reconciled::NotLeading)
        };
        if done.send(Message::Done(Box::new((item, result)))).await.is_err() {
            break;
        }
    }
}
