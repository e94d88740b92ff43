//! [`ReviewBody`], a `/mutate` body read whole, and [`BodyBudget`], the
//! replica-wide budget of bytes held by bodies at once that it is read within:
//! at most [`MAX_BODY_BYTES`], within [`BODY_TIMEOUT`] of its headers. The
//! budget is what bounds the webhook's memory.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, header};
use http_body_util::BodyExt as _;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::error::AdmissionError;
use super::limits::{BODY_BYTES_IN_FLIGHT, BODY_TIMEOUT, MAX_BODY_BYTES};

/// The replica-wide budget of body bytes, one permit per byte.
pub struct BodyBudget(Arc<Semaphore>);

impl Default for BodyBudget {
    fn default() -> Self {
        BodyBudget(Arc::new(Semaphore::new(BODY_BYTES_IN_FLIGHT)))
    }
}

/// A review's body, read whole, and its share of the budget until dropped.
pub struct ReviewBody {
    pub bytes: Bytes,
    _held: OwnedSemaphorePermit,
}

impl BodyBudget {
    /// Reads `body`, taking budget for the buffer as it grows. A body that
    /// would exceed the budget is refused at once rather than queued: waiting
    /// would let stalled senders hold the API server's calls too.
    pub async fn read(
        &self,
        headers: &HeaderMap,
        body: Body,
    ) -> Result<ReviewBody, AdmissionError> {
        // The declared length sizes the buffer at once. One over the limit is
        // still read up to the limit, so that the client gets the 413 instead
        // of a broken pipe while it writes.
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&length| length <= MAX_BODY_BYTES)
            .unwrap_or(0);
        let mut held = self.take(declared)?;
        let mut buffer = Vec::with_capacity(declared);
        let read = async {
            let mut body = body;
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|_| AdmissionError::BodyRead)?;
                let Ok(data) = frame.into_data() else { continue };
                let needed = buffer.len() + data.len();
                if needed > MAX_BODY_BYTES {
                    return Err(AdmissionError::TooLarge);
                }
                if needed > buffer.capacity() {
                    let grown = needed.max(buffer.capacity() * 2).min(MAX_BODY_BYTES);
                    held.merge(self.take(grown - buffer.capacity())?);
                    buffer.reserve_exact(grown - buffer.len());
                }
                buffer.extend_from_slice(&data);
            }
            Ok(())
        };
        tokio::time::timeout(BODY_TIMEOUT, read)
            .await
            .map_err(|_| AdmissionError::BodyTimeout)??;
        Ok(ReviewBody { bytes: Bytes::from(buffer), _held: held })
    }

    fn take(&self, bytes: usize) -> Result<OwnedSemaphorePermit, AdmissionError> {
        let bytes = u32::try_from(bytes).map_err(|_| AdmissionError::TooLarge)?;
        self.0.clone().try_acquire_many_owned(bytes).map_err(|_| AdmissionError::Overloaded)
    }

    /// Bytes not held by any body now.
    pub fn available(&self) -> usize {
        self.0.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(length: Option<usize>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(length) = length {
            headers.insert(header::CONTENT_LENGTH, length.into());
        }
        headers
    }

    /// A body of `size` bytes in 1 KiB frames and no declared length.
    fn chunked(size: usize) -> Body {
        let frames = (0..size.div_ceil(1024))
            .map(move |i| Ok::<_, std::io::Error>(vec![b'x'; (size - i * 1024).min(1024)]));
        Body::from_stream(futures_util::stream::iter(frames))
    }

    #[tokio::test]
    async fn holds_budget_for_the_buffer_until_the_body_is_dropped() {
        let budget = BodyBudget::default();
        let body = budget.read(&headers(Some(5000)), Body::from(vec![1u8; 5000])).await;
        let body = body.expect("read");
        assert_eq!(body.bytes.len(), 5000);
        assert_eq!(budget.available(), BODY_BYTES_IN_FLIGHT - 5000, "exactly the declared length");
        drop(body);
        assert_eq!(budget.available(), BODY_BYTES_IN_FLIGHT);

        let body = budget.read(&headers(None), chunked(300_000)).await.expect("read");
        assert_eq!(body.bytes.len(), 300_000);
        let held = BODY_BYTES_IN_FLIGHT - budget.available();
        assert!((300_000..600_000).contains(&held), "the buffer's capacity: {held}");
        drop(body);
        assert_eq!(budget.available(), BODY_BYTES_IN_FLIGHT);
    }

    #[tokio::test]
    async fn refuses_bodies_beyond_the_budget_and_the_size_limit() {
        let budget = BodyBudget::default();
        let mut held = Vec::new();
        for _ in 0..BODY_BYTES_IN_FLIGHT / MAX_BODY_BYTES {
            let declared = headers(Some(MAX_BODY_BYTES));
            let body = budget.read(&declared, Body::from(vec![0u8; MAX_BODY_BYTES])).await;
            held.push(body.expect("within the budget"));
        }
        let refused = budget.read(&headers(Some(10)), Body::from(vec![0u8; 10])).await;
        assert!(matches!(refused, Err(AdmissionError::Overloaded)));
        let refused = budget.read(&headers(None), chunked(10)).await;
        assert!(matches!(refused, Err(AdmissionError::Overloaded)), "also without a length");
        held.pop();
        assert!(budget.read(&headers(None), chunked(10)).await.is_ok(), "budget back");
        drop(held);

        for declared in [Some(MAX_BODY_BYTES + 1), None] {
            let refused = budget.read(&headers(declared), chunked(MAX_BODY_BYTES + 1)).await;
            assert!(matches!(refused, Err(AdmissionError::TooLarge)), "{declared:?}");
        }
        assert_eq!(budget.available(), BODY_BYTES_IN_FLIGHT, "nothing leaks");
    }
}
