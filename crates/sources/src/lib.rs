//! listwatch-sources: what fills the stores.
//!
//! - [`Source`]: the seam the server reads through (revisions, progress, readiness, writes).
//! - [`Registry`]: served resource types and their stores.
//! - [`embedded::EmbeddedSource`]: the default in-process MVCC store with the write verbs.
//! - [`host::HostFedSource`]: changes pushed by an embedding host (reads only).
//! - [`objects`]: write checks shared by every writable source; [`writes`]: PATCH and
//!   `scale` on top of any source's writer, and the consistent read they start from.
//! - [`views::Views`]: resources served as conversions of stored ones (events.k8s.io/v1
//!   Events, autoscaling/v1 HPAs), wrapping any source.
//! - [`follower`]: the one follower state machine (load, follow, resume, relist) that the
//!   etcd and apiserver sources drive with their own backend.
//! - [`demo`]: realistic demo pods; [`load`]: objects from JSON/NDJSON files.

pub mod crd;
pub mod demo;
pub mod embedded;
pub mod follower;
pub mod host;
pub mod load;
pub mod objects;
mod registry;
pub mod source;
pub mod views;
pub mod writes;

pub use embedded::EmbeddedSource;
pub use host::{FeedError, HostChange, HostFedSource, Relisted};
pub use registry::Registry;
pub use source::{BoxFuture, Source, SourceWriter, WriteOp, WriteRequest, WriteResult};
pub use views::Views;
