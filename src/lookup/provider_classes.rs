//! Reading what the Secrets Store CSI driver reports for a review's SecretProviderClasses: one
//! namespaced LIST of its `SecretProviderClassPodStatus` objects, paged ([`PAGE_SIZE`] per
//! page, at most [`MAX_PAGES`]), folded page by page into the latest version per object id of
//! the classes the workload mounts (`core::inputs::secret_provider_class`), within the
//! review's deadline. The statuses themselves are dropped as each page is folded.
//!
//! The permission and the CRD are optional (the chart's `csi.enabled`): a LIST the API server
//! forbids (403) or does not serve (404) keeps every annotation as it is, silently; any other
//! failure keeps them with a warning. Neither ever denies.

use std::collections::{BTreeMap, BTreeSet};

use kube::api::ApiResource;
use tokio::time::Instant;

use super::{LookupError, ObjectSource};
use crate::core::inputs::secret_provider_class::{ClassVersions, fold_into};
use crate::core::model::provider_class_status::{GROUP, KIND, RESOURCE, VERSION};
use crate::core::{Mutation, Observation};

/// Statuses per LIST page: one per pod and mount, a few hundred bytes each.
pub const PAGE_SIZE: u32 = 100;
/// Pages read at most; a namespace with more statuses is unreadable here (its annotations
/// are kept), since a partial list could take an old version for the latest.
pub const MAX_PAGES: usize = 20;

/// The API resource of the driver's statuses.
pub fn status_resource() -> ApiResource {
    super::api_object::resource(GROUP, VERSION, KIND, RESOURCE)
}

/// The LIST of one page of `namespace`'s statuses: its path and query.
pub fn page_request(
    namespace: &str,
    limit: u32,
    next: Option<&str>,
) -> Result<hyper::Request<Vec<u8>>, LookupError> {
    use kube::Resource as _;
    let path = kube::api::DynamicObject::url_path(&status_resource(), Some(namespace));
    let mut params = kube::api::ListParams::default().limit(limit);
    if let Some(token) = next {
        params = params.continue_token(token);
    }
    kube::core::Request::new(path).list(&params).map_err(|_| LookupError::Decode)
}

/// One observation per tracked class of `mutation`, in order: `None` for every class when the
/// statuses cannot be listed here (not served, not allowed, or a source without them).
pub async fn observe_classes<S: ObjectSource>(
    source: &S,
    mutation: &Mutation,
    deadline: Instant,
) -> Vec<Option<Observation>> {
    if mutation.classes().is_empty() {
        return Vec::new();
    }
    let read = tokio::time::timeout_at(deadline, list_classes(source, mutation));
    let folded = match read.await {
        Ok(Ok(folded)) => folded,
        Ok(Err(NotRead::Lookup(LookupError::Status(403 | 404) | LookupError::Unsupported))) => {
            return vec![None; mutation.classes().len()];
        }
        Ok(Err(NotRead::Lookup(error))) => return unreadable(mutation, &error.to_string()),
        Ok(Err(NotRead::TooMany)) => {
            let reason = format!("more than {} statuses", PAGE_SIZE as usize * MAX_PAGES);
            return unreadable(mutation, &reason);
        }
        Err(_) => return unreadable(mutation, &LookupError::Timeout.to_string()),
    };
    observations(mutation, &folded)
}

/// What the folded versions say of each class: its digest, or `Absent` (no status reports it).
pub fn observations(
    mutation: &Mutation,
    folded: &BTreeMap<String, ClassVersions>,
) -> Vec<Option<Observation>> {
    let observation = |name: &str| match folded.get(name).and_then(ClassVersions::digest) {
        Some(digest) => Observation::Digest(digest),
        None => Observation::Absent,
    };
    mutation.classes().iter().map(|class| Some(observation(&class.name))).collect()
}

fn unreadable(mutation: &Mutation, reason: &str) -> Vec<Option<Observation>> {
    vec![Some(Observation::Unreadable(reason.to_owned())); mutation.classes().len()]
}

/// Why the statuses were not all read.
enum NotRead {
    Lookup(LookupError),
    /// More than [`MAX_PAGES`] pages.
    TooMany,
}

/// Every page of the namespace's statuses, folded as they arrive.
async fn list_classes<S: ObjectSource>(
    source: &S,
    mutation: &Mutation,
) -> Result<BTreeMap<String, ClassVersions>, NotRead> {
    let wanted: BTreeSet<&str> = mutation.classes().iter().map(|c| c.name.as_str()).collect();
    let mut folded: BTreeMap<String, ClassVersions> = BTreeMap::new();
    let mut next: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let page =
            source.list_provider_class_statuses(&mutation.namespace, PAGE_SIZE, next.as_deref());
        let page = page.await.map_err(NotRead::Lookup)?;
        // Pages come in name order: a later page may hold an earlier report; the
        // resourceVersions decide, whatever the order.
        fold_into(&mut folded, &page.items, &mutation.namespace, &wanted);
        match page.next() {
            Some(token) => next = Some(token.to_owned()),
            None => return Ok(folded),
        }
    }
    Err(NotRead::TooMany)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::core::inputs::secret_provider_class::digest;
    use crate::core::model::kinds::WorkloadKind;
    use crate::core::model::provider_class_status::{ProviderClassStatus, StatusPage};
    use crate::core::{ObjectContent, ObjectRef, Plan, Settings, plan};

    /// Pages of statuses, or an answer for every LIST.
    struct Statuses {
        pages: Vec<Vec<ProviderClassStatus>>,
        fail: Option<LookupError>,
        lists: AtomicUsize,
    }

    impl ObjectSource for Statuses {
        async fn fetch(
            &self,
            _: &str,
            _: &ObjectRef,
        ) -> Result<Option<Arc<ObjectContent>>, LookupError> {
            Ok(None)
        }

        async fn list_provider_class_statuses(
            &self,
            namespace: &str,
            limit: u32,
            next: Option<&str>,
        ) -> Result<StatusPage, LookupError> {
            assert_eq!((namespace, limit), ("shop", PAGE_SIZE));
            self.lists.fetch_add(1, Ordering::SeqCst);
            if let Some(error) = &self.fail {
                return Err(error.clone());
            }
            let at: usize = next.map_or(0, |n| n.parse().expect("a page token"));
            let more = (at + 1 < self.pages.len()).then(|| (at + 1).to_string());
            Ok(StatusPage::new(self.pages[at].clone(), more))
        }
    }

    fn source(pages: Vec<Vec<ProviderClassStatus>>, fail: Option<LookupError>) -> Statuses {
        Statuses { pages, fail, lists: AtomicUsize::new(0) }
    }

    fn status(class: &str, rv: u64, version: &str) -> ProviderClassStatus {
        ProviderClassStatus {
            namespace: Some("shop".into()),
            name: Some(format!("pod-{rv}")),
            resource_version: rv,
            resource_version_text: Some(rv.to_string()),
            class: Some(class.into()),
            objects: vec![("secret/db".into(), version.into())],
        }
    }

    /// A Pod of shop mounting the classes `classes`.
    fn mounting(classes: &[&str]) -> Mutation {
        let volumes: Vec<_> = classes
            .iter()
            .map(|c| {
                serde_json::json!({"name": c, "csi": {"driver": "secrets-store.csi.k8s.io",
                "volumeAttributes": {"secretProviderClass": c}}})
            })
            .collect();
        let object = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "shop"},
            "spec": {"containers": [{"name": "c"}], "volumes": volumes}})
        .to_string();
        let workload = WorkloadKind::Pod.parse(&object).expect("a Pod");
        match plan(workload, &Default::default(), &Settings::default()) {
            Plan::Mutate(mutation) => mutation,
            other => panic!("expected a mutation, got {other:?}"),
        }
    }

    fn deadline() -> Instant {
        Instant::now() + Duration::from_secs(1)
    }

    #[tokio::test]
    async fn every_page_is_folded_and_the_latest_report_wins_across_pages() {
        // The newest report of vault comes first, on page one; an older one on page two.
        let pages = vec![
            vec![status("vault", 30, "2"), status("aws", 5, "9")],
            vec![status("vault", 10, "1")],
        ];
        let source = source(pages, None);
        let observed = observe_classes(&source, &mounting(&["vault", "gcp"]), deadline()).await;
        assert_eq!(
            observed,
            [Some(Observation::Absent), Some(Observation::Digest(digest([("secret/db", "2")])))],
            "gcp (first in name order) has no status; vault's version 2 is the latest"
        );
        assert_eq!(source.lists.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn forbidden_or_not_served_keeps_silently_and_other_failures_say_so() {
        let mutation = mounting(&["vault"]);
        for code in [403, 404] {
            let source = source(Vec::new(), Some(LookupError::Status(code)));
            assert_eq!(observe_classes(&source, &mutation, deadline()).await, [None]);
        }
        let source = source(Vec::new(), Some(LookupError::Status(503)));
        let observed = observe_classes(&source, &mutation, deadline()).await;
        assert_eq!(observed, [Some(Observation::Unreadable("HTTP 503".into()))]);
        // No class mounted: nothing is listed.
        let quiet = self::source(Vec::new(), Some(LookupError::Status(503)));
        assert!(observe_classes(&quiet, &mounting(&[]), deadline()).await.is_empty());
        assert_eq!(quiet.lists.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn more_pages_than_the_cap_is_unreadable() {
        let pages = (0..MAX_PAGES as u64 + 1).map(|i| vec![status("vault", i, "1")]).collect();
        let source = source(pages, None);
        let observed = observe_classes(&source, &mounting(&["vault"]), deadline()).await;
        assert_eq!(observed, [Some(Observation::Unreadable("more than 2000 statuses".into()))]);
        assert_eq!(source.lists.load(Ordering::SeqCst), MAX_PAGES);
    }
}
