//! A scripted [`ControllerApi`] for unit tests, after controller-rs's API
//! verifier: the objects it serves, the answers its patches give in turn, and
//! a log of every call to assert on.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use kube::api::Patch;
use serde_json::Value;

use super::api::{ControllerApi, PatchError, ReadResult};
use super::model::workload::WorkloadKey;
use crate::core::{ObjectContent, ObjectKey};
use crate::lookup::LookupError;

/// How the next patch is answered.
#[derive(Clone, Copy, Debug)]
pub enum Answer {
    Ok,
    Conflict,
    NotFound,
    Fail,
    /// Never answers (the caller's timeout must end it).
    Hang,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    Read(ObjectKey),
    Patch(WorkloadKey, Value),
    Event(String),
}

#[derive(Default)]
pub struct FakeApi {
    objects: Mutex<HashMap<ObjectKey, BTreeMap<String, Vec<u8>>>>,
    /// Answers to the next patches, in order; `Ok` once they run out.
    answers: Mutex<VecDeque<Answer>>,
    calls: Mutex<Vec<Call>>,
}

impl FakeApi {
    pub fn put(&self, object: ObjectKey, data: &[(&str, &str)]) {
        let entries = data.iter().map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec())).collect();
        self.objects.lock().expect("objects").insert(object, entries);
    }

    pub fn answer(&self, answers: &[Answer]) {
        self.answers.lock().expect("answers").extend(answers);
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().expect("calls").clone()
    }

    pub fn reads(&self) -> usize {
        self.calls().iter().filter(|c| matches!(c, Call::Read(_))).count()
    }

    pub fn patches(&self) -> Vec<Value> {
        let calls = self.calls();
        calls
            .into_iter()
            .filter_map(|c| if let Call::Patch(_, p) = c { Some(p) } else { None })
            .collect()
    }

    fn log(&self, call: Call) {
        self.calls.lock().expect("calls").push(call);
    }
}

impl ControllerApi for FakeApi {
    async fn read(&self, object: &ObjectKey) -> ReadResult {
        self.log(Call::Read(object.clone()));
        let objects = self.objects.lock().map_err(|_| LookupError::Connection)?;
        let content = objects.get(object).cloned().map(ObjectContent::from_entries);
        Ok(content.map(|c| (c, Some("1".to_owned()))))
    }

    async fn patch(&self, workload: &WorkloadKey, patch: &Patch<Value>) -> Result<(), PatchError> {
        let body = match patch {
            Patch::Merge(v) => v.clone(),
            Patch::Json(p) => serde_json::to_value(p).unwrap_or_default(),
            _ => Value::Null,
        };
        self.log(Call::Patch(workload.clone(), body));
        let answer = self.answers.lock().expect("answers").pop_front().unwrap_or(Answer::Ok);
        match answer {
            Answer::Ok => Ok(()),
            Answer::Conflict => Err(PatchError::Conflict),
            Answer::NotFound => Err(PatchError::NotFound),
            Answer::Fail => Err(PatchError::Failed("HTTP 500".into())),
            Answer::Hang => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok(())
            }
        }
    }

    async fn record(&self, event: Event, _: Duration) {
        self.log(Call::Event(event.message.unwrap_or_default()));
    }

    async fn read_template(&self, _: &WorkloadKey) -> Result<Option<Value>, LookupError> {
        Ok(None)
    }
}
