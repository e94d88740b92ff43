//! A tracked object's read, outside the event loop: through the API,
//! bounded in time, digested at once for every workload tracking it; the
//! data is dropped before the result is reported. And a tracked workload's
//! template, read when the watch cannot be waited for.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::api::ControllerApi;
use super::model::message::Message;
use super::model::work::CALL_TIMEOUT;
use super::model::workload::WorkloadKey;
use super::state::objects::{ReadRequest, judge};
use crate::core::Digester;

pub async fn read<A: ControllerApi>(
    api: Arc<A>,
    digester: Digester,
    request: ReadRequest,
    report: mpsc::Sender<Message>,
) {
    let ReadRequest { object, trackers } = request;
    let result = match tokio::time::timeout(CALL_TIMEOUT, api.read(&object)).await {
        Ok(Ok(found)) => {
            let (content, version) = match found {
                Some((content, version)) => (Some(content), version),
                None => (None, None),
            };
            Ok(judge(&object, content.as_ref(), version, &digester, &trackers))
        }
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("timeout".to_owned()),
    };
    let _ = report.send(Message::Read(Box::new((object, result)))).await;
}

/// A tracked workload's pod template, read once when a tracker first names it and the watch
/// has not delivered it since (at start-up, the catch-up of what changed meanwhile).
pub async fn read_template<A: ControllerApi>(
    api: Arc<A>,
    workload: WorkloadKey,
    report: mpsc::Sender<Message>,
) {
    let result = match tokio::time::timeout(CALL_TIMEOUT, api.read_template(&workload)).await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(_) => Err("timeout".to_owned()),
    };
    let _ = report.send(Message::Template(Box::new((workload, result)))).await;
}
