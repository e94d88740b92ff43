//! One image reference the poller resolves, with the credentials it is resolved with.

/// One reference to resolve, with the credentials it is resolved with: the
/// workload's namespace, its pod's pull secrets and ServiceAccount.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PolledImage {
    pub namespace: String,
    pub reference: String,
    pub pull_secrets: Vec<String>,
    pub service_account: String,
}
