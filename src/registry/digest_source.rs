//! [`DigestSource`]: one request for an image's digest, the seam between the
//! client (`client.rs`: credentials, sharing, reuse, metrics) and the requests
//! (`distribution.rs`), which the client's tests replace.

use futures_util::future::BoxFuture;

use super::credentials::PullCredential;
use super::outcome::Resolution;
use super::reference::ImageRef;

/// One request for a digest, with one credential or none. The seam the tests replace.
pub(crate) trait DigestSource: Send + Sync + 'static {
    fn fetch(
        &self,
        image: &ImageRef,
        credential: Option<&PullCredential>,
    ) -> BoxFuture<'static, Resolution>;
}
