//! listwatch-store: the versioned snapshot store.
//!
//! - [`Record`]: one object's final JSON bytes plus the spans filtering needs; built by
//!   [`Record::ingest`] (where `metadata.resourceVersion` is spliced in).
//! - [`Snapshot`]: an immutable, structurally shared collection at one RV (O(1) to take).
//! - [`EventLog`]: the shared change history; [`WatchCursor`] is a watcher's position in it.
//! - [`Store`]: one resource's cache tying these together, with its clock.
//! - [`Filter`]: namespace + selectors, and the watch filter transitions.

pub mod beacon;
pub mod event_log;
pub mod reader;
pub mod record;
pub mod snapshot;
pub mod store;

pub use event_log::{EncodedEvent, Event, EventForm, EventLog, EventType, LogLimits};
pub use reader::SnapshotReader;
pub use record::{IngestError, Record};
pub use snapshot::{FieldIndex, Filter, FilteredEvent, RecordMap, Snapshot};
pub use store::{Change, Store, StoreConfig, StoreError, StoreStats, WatchCursor};
