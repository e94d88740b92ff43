//! The worker: reconciles due workloads one at a time, through the token
//! bucket, and reports each result to the event loop, which schedules any
//! retry. Each work item carries what its reconciliation needs; the worker shares
//! no state with the loop. Work of an earlier leadership term is dropped unread.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::api::ControllerApi;
use super::model::message::Message;
use super::model::work::{Reconciled, Work};
use super::reconcile::Reconciler;
use super::state::pacing::TokenBucket;

pub async fn run<A: ControllerApi>(
    reconciler: Arc<Reconciler<A>>,
    mut bucket: TokenBucket,
    mut work: mpsc::UnboundedReceiver<Work>,
    done: mpsc::Sender<Message>,
) {
    while let Some(item) = work.recv().await {
        let term = item.due.term;
        let leading = reconciler.leadership.borrow().remaining(term, Instant::now()).is_some();
        let result = if leading {
            reconciler.reconcile(&item, &mut bucket).await
        } else {
            Ok(Reconciled::NotLeading)
        };
        if done.send(Message::Reconciled(Box::new((item.due, result)))).await.is_err() {
            break;
        }
    }
}
