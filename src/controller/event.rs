//! The Kubernetes Event on a patched workload, naming the changed objects
//! (never their contents). A core/v1 Event created once per patch: kube's
//! `Recorder` writes events.k8s.io Events and patches series, which needs a
//! `patch` grant the controller's RBAC does not give.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::{Api, Client};

use super::trigger::Trigger;
use super::workload::{WorkloadKey, api_resource};

const COMPONENT: &str = "configsum-controller";

/// The Event for a patch of `key` because `changed` changed.
pub fn rolled(key: &WorkloadKey, uid: Option<String>, changed: &BTreeSet<Trigger>) -> Event {
    let names: Vec<String> = changed.iter().map(ToString::to_string).collect();
    let message = if names.is_empty() {
        "configsum brought the pod template's configuration digests up to date".to_owned()
    } else {
        format!("configsum rolled the pod template: changed {}", names.join(", "))
    };
    let resource = api_resource(key.kind);
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}.", key.name)),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some(resource.api_version),
            kind: Some(resource.kind),
            name: Some(key.name.clone()),
            namespace: Some(key.namespace.clone()),
            uid,
            ..ObjectReference::default()
        },
        reason: Some("ConfigurationChanged".to_owned()),
        message: Some(message),
        type_: Some("Normal".to_owned()),
        source: Some(EventSource {
            component: Some(COMPONENT.to_owned()),
            ..EventSource::default()
        }),
        reporting_component: Some(COMPONENT.to_owned()),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        count: Some(1),
        ..Event::default()
    }
}

/// Creates the Event; a failure is logged, never retried (the patch happened).
pub async fn record(client: &Client, event: Event, timeout: Duration) {
    let namespace = event.involved_object.namespace.clone().unwrap_or_default();
    let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
    match tokio::time::timeout(timeout, api.create(&super::post_params(), &event)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "cannot record an Event"),
        Err(_) => tracing::warn!("recording an Event timed out"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ObjectRef;
    use crate::core::workload::WorkloadKind;

    #[test]
    fn the_event_names_the_objects_and_the_workload() {
        let key = WorkloadKey {
            kind: WorkloadKind::StatefulSet,
            namespace: "ns".into(),
            name: "db".into(),
        };
        let changed = BTreeSet::from([
            Trigger::from(ObjectRef::secret("creds")),
            Trigger::from(ObjectRef::config_map("app")),
        ]);
        let event = rolled(&key, Some("u1".into()), &changed);
        assert_eq!(
            event.message.as_deref(),
            Some("configsum rolled the pod template: changed configmap/app, secret/creds")
        );
        assert_eq!(event.involved_object.api_version.as_deref(), Some("apps/v1"));
        assert_eq!(event.involved_object.kind.as_deref(), Some("StatefulSet"));
        assert_eq!(event.involved_object.uid.as_deref(), Some("u1"));
        assert_eq!(event.metadata.generate_name.as_deref(), Some("db."));
    }
}
