//! Tracked images in the controller: the pure [`index`] of which workloads
//! run which reference and what each tag last resolved to, and the [`poller`]
//! that asks the registries. A workload without the image's annotation gets
//! none from the controller.

pub mod index;
pub mod poller;

pub use index::{
    ImageIndex, LatestDigests, PolledImage, Tracking, digest_of, observations, tracked_images,
};
pub use poller::{PollRate, poll};
