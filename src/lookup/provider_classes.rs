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
use serde::Deserialize;
use tokio::time::Instant;

use super::{LookupError, ObjectSource};
use crate::core::inputs::secret_provider_class::{ClassVersions, fold_into};
use crate::core::model::provider_class_status::{
    GROUP, KIND, ProviderClassStatus, RESOURCE, VERSION,
};
use crate::core::{Mutation, Observation};

/// Statuses per LIST page: one per pod and mount, a few hundred bytes each.
pub const PAGE_SIZE: u32 = 100;
/// Pages read at most; a namespace with more statuses is unreadable here (its annotations
/// are kept), since a partial list could take an old version for the latest.
pub const MAX_PAGES: usize = 20;

/// One page of a namespace's statuses, and the token of the next page, if any.
#[derive(Debug, Default, Deserialize)]
pub struct StatusPage {
    #[serde(default)]
    pub items: Vec<ProviderClassStatus>,
    #[serde(default)]
    metadata: ListMeta,
}

#[derive(Debug, Default, Deserialize)]
struct ListMeta {
    #[serde(rename = "continue")]
    next: Option<String>,
}

impl StatusPage {
    /// The `continue` token of the next page, if there is one.
    pub fn next(&self) -> Option<&str> {
        self.metadata.next.as_deref().filter(|t| !t.is_empty())
    }

    pub fn new(items: Vec<ProviderClassStatus>, next: Option<String>) -> Self {
        StatusPage { items, metadata: ListMeta { next } }
    }
}

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
    if mutation.classes.is_empty() {
        return Vec::new();
    }
    let read = tokio::time::timeout_at(deadline, list_classes(source, mutation));
    let folded = match read.await {
        Ok(Ok(folded)) => folded,
        Ok(Err(NotRead::Lookup(LookupError::Status(403 | 404) | LookupError::Unsupported))) => {
            return vec![None; mutation.classes.len()];
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
    mutation.classes.iter().map(|class| Some(observation(&class.name))).collect()
}

fn unreadable(mutation: &Mutation, reason: &str) -> Vec<Option<Observation>> {
    vec![Some(Observation::Unreadable(reason.to_owned())); mutation.classes.len()]
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
    let wanted: BTreeSet<&str> = mutation.classes.iter().map(|c| c.name.as_str()).collect();
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
