//! The worker: reconciles due workloads one at a time, through the token
//! bucket, and reports each result to the event loop, which schedules any
//! retry. Work of an earlier leadership term is dropped unread.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::api::ControllerApi;
use super::message::Message;
use super::queue::TokenBucket;
use super::reconcile::{Reconciled, Reconciler};
use super::schedule::Work;

pub async fn run<A: ControllerApi>(
    reconciler: Arc<Reconciler<A>>,
    mut bucket: TokenBucket,
    mut work: mpsc::UnboundedReceiver<Work>,
    done: mpsc::Sender<Message>,
) {
    while let Some(item) = work.recv().await {
        let leading = reconciler.leadership.borrow().remaining(item.term, Instant::now()).is_some();
        let result = if leading {
            reconciler.reconcile(&item, &mut bucket).await
        } else {
            Ok(Reconciled::NotLeading)
        };
        if done.send(Message::Reconciled(Box::new((item, result)))).await.is_err() {
            break;
        }
    }
}
