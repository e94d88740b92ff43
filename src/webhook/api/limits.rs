//! The bounds of a `/mutate` body: its size, its deadline and the bytes all
//! bodies of a replica may hold at once. Error messages and the body reader
//! both name them.

use std::time::Duration;

/// Largest AdmissionReview body accepted: an UPDATE carries `object` and
/// `oldObject`, each up to the API server's 3 MiB request limit, plus the envelope.
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// A body must arrive within this long of its headers.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// Bytes of request bodies held at once per replica, from the first byte read
/// to the answer sent: two of the largest reviews (an UPDATE of the API
/// server's largest object is about 6 MiB), or hundreds of ordinary ones.
/// Deciding a review can take up to about 12 times its body in memory
/// (tests/fuzz_review.rs), so this is what bounds the worst case
/// (benches/hostile.rs) within the manifests' memory limit.
pub const BODY_BYTES_IN_FLIGHT: usize = 2 * MAX_BODY_BYTES;
