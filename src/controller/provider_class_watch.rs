//! The watch of the Secrets Store CSI driver's `SecretProviderClassPodStatus` objects, started
//! once discovery serves their CRD: asked at start-up and then every `--discovery-interval`,
//! as for workload CRDs not served yet. Each status is decoded to the little the digest needs
//! (`core::model::provider_class_status`); the rest is skipped unbuilt.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use serde::Deserialize;
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::model::message::{Message, Partition};
use super::watches::{forward, resource_served};
use crate::core::model::provider_class_status::{GROUP, ProviderClassStatus, RESOURCE, VERSION};
use crate::lookup::provider_classes::status_resource;

/// Statuses per LIST page: a few hundred bytes each.
const PAGE_SIZE: u32 = 250;
const WATCH_TIMEOUT_SECONDS: u32 = 50;

/// A status as the watch decodes it: the metadata kube's watcher reads, and the status.
#[derive(Clone, Debug, Deserialize)]
#[serde(from = "ProviderClassStatus")]
struct WatchedStatus {
    meta: ObjectMeta,
    status: ProviderClassStatus,
}

impl From<ProviderClassStatus> for WatchedStatus {
    fn from(status: ProviderClassStatus) -> Self {
        let meta = ObjectMeta {
            name: status.name.clone(),
            namespace: status.namespace.clone(),
            resource_version: status.resource_version_text.clone(),
            ..ObjectMeta::default()
        };
        WatchedStatus { meta, status }
    }
}

super::model::dynamic_resource!(WatchedStatus, metadata: false);

/// Waits until the statuses are served (namespaced) and this controller may list and watch
/// them, then watches them into `tx` for good. Under `--namespaces`, one watch per listed
/// namespace (`partitions`), as for objects. Permission is asked, not assumed: a cluster runs
/// the CSI driver whether or not configsum was granted its statuses (the chart grants them only
/// with `csi.enabled`), and a watch refused would retry, and log, for ever.
pub async fn watch_when_served(
    client: Client,
    every: Duration,
    timeout: Duration,
    partitions: Vec<Partition>,
    tx: mpsc::Sender<Message>,
) {
    let api_version = format!("{GROUP}/{VERSION}");
    let mut refused_said = false;
    loop {
        match resource_served(&client, &api_version, RESOURCE, timeout).await {
            Some(true) if permitted(&client, &partitions, timeout).await => break,
            Some(true) => {
                if !refused_said {
                    info!(
                        resource = RESOURCE,
                        "served, but this controller may not list and watch it; \
                         SecretProviderClass rotations are not tracked until it may"
                    );
                    refused_said = true;
                }
                tokio::time::sleep(every).await;
            }
            Some(false) => {
                warn!(
                    resource = RESOURCE,
                    "served cluster-scoped; SecretProviderClasses are not tracked"
                );
                return;
            }
            None => tokio::time::sleep(every).await,
        }
        if tx.is_closed() {
            return;
        }
    }
    info!(resource = RESOURCE, "served; watching SecretProviderClass rotations");
    let mut tasks = Vec::new();
    for partition in partitions {
        let api: Api<WatchedStatus> = match &partition {
            Some(namespace) => Api::namespaced_with(client.clone(), namespace, &status_resource()),
            None => Api::all_with(client.clone(), &status_resource()),
        };
        let config = watcher::Config::default().timeout(WATCH_TIMEOUT_SECONDS).page_size(PAGE_SIZE);
        tasks.push(forward(watcher::watcher(api, config), tx.clone(), move |event| {
            Message::ProviderClassStatus(partition.clone(), Box::new(status_event(event)))
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
}

fn status_event(event: Event<WatchedStatus>) -> Event<ProviderClassStatus> {
    match event {
        Event::Apply(o) => Event::Apply(o.status),
        Event::Delete(o) => Event::Delete(o.status),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(o.status),
        Event::InitDone => Event::InitDone,
    }
}

/// Whether the API server lets this controller list and watch the statuses in every
/// partition: a SelfSubjectAccessReview per verb and namespace, which any authenticated user
/// may create. No answer counts as no.
async fn permitted(client: &Client, partitions: &[Partition], timeout: Duration) -> bool {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    for partition in partitions {
        for verb in ["list", "watch"] {
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        group: Some(GROUP.to_owned()),
                        version: Some(VERSION.to_owned()),
                        resource: Some(RESOURCE.to_owned()),
                        namespace: partition.as_deref().map(str::to_owned),
                        verb: Some(verb.to_owned()),
                        ..ResourceAttributes::default()
                    }),
                    ..SelfSubjectAccessReviewSpec::default()
                },
                ..SelfSubjectAccessReview::default()
            };
            let post = kube::api::PostParams::default();
            let asked = reviews.create(&post, &review);
            let allowed = match tokio::time::timeout(timeout, asked).await {
                Ok(Ok(answer)) => answer.status.is_some_and(|s| s.allowed),
                _ => false,
            };
            if !allowed {
                return false;
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each access review is a POST with no query at all (no field manager: nothing is stored).
    #[tokio::test]
    async fn the_access_reviews_are_posted_with_no_query() {
        use crate::lookup::well_formed_query::recording;
        let allowed = r#"{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview",
            "spec":{},"status":{"allowed":true}}"#;
        let (client, sent) = recording::client_answering(|_| (200, allowed.to_owned()));
        assert!(permitted(&client, &[Some("shop".into())], Duration::from_secs(1)).await);
        let review = "POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
        assert_eq!(recording::sent(&sent), [review, review]);
    }

    #[test]
    fn a_watched_status_carries_what_the_watcher_reads() {
        let watched: WatchedStatus = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p-shop-vault", "namespace": "shop", "resourceVersion": "7"},
            "status": {"secretProviderClassName": "vault", "objects": [{"id": "a", "version": "1"}]}
        }))
        .expect("decodes");
        assert_eq!(watched.meta.resource_version.as_deref(), Some("7"));
        assert_eq!(watched.meta.namespace.as_deref(), Some("shop"));
        assert_eq!(watched.status.class.as_deref(), Some("vault"));
        let Event::Apply(status) = status_event(Event::Apply(watched)) else { panic!("apply") };
        assert_eq!(status.objects, [("a".to_owned(), "1".to_owned())]);
    }
}
