//! Shared fixtures for the benches: realistic pods in a store.

use std::sync::Arc;

use listwatch_codec::{DEFAULT_CHUNK, Encoding, ListEncoder, Rendering, Sharing};
use listwatch_core::{ResourceInfo, builtin_resource};
use listwatch_sources::demo::demo_pod;
use listwatch_store::{Filter, Record, Snapshot, SnapshotReader, Store, StoreConfig};

#[doc(hidden)]
pub use tikv_jemallocator;

/// Makes jemalloc the bench's global allocator, the one `listwatch serve` runs with, so a
/// bench's allocations cost what the server's do. A macro, not a `#[global_allocator]` here:
/// the heap-overhead test links this crate too and counts with dhat's allocator.
#[macro_export]
macro_rules! jemalloc {
    () => {
        #[global_allocator]
        static ALLOC: $crate::tikv_jemallocator::Jemalloc = $crate::tikv_jemallocator::Jemalloc;
    };
}

/// The built-in pods resource.
pub fn pods() -> Arc<ResourceInfo> {
    Arc::new(builtin_resource("pods").expect("pods"))
}

/// `n` ingested demo pods (~4.5 KiB each) at RVs 1..=n.
pub fn pod_records(n: usize) -> Vec<Record> {
    let info = pods();
    (0..n)
        .map(|i| Record::ingest(&demo_pod(i, 40), &info, 1 + i as u64).expect("ingest"))
        .collect()
}

/// A store holding `n` demo pods.
pub fn pod_store(n: usize) -> Arc<Store> {
    Store::new(pods(), n as u64 + 1, pod_records(n), StoreConfig::default())
}

/// A LIST encoder over the whole current snapshot of `store` (no selectors, no limit), in
/// protobuf when `protobuf`.
pub fn list_encoder(store: &Store, protobuf: bool) -> ListEncoder {
    let encoding = if protobuf {
        Encoding::Protobuf
    } else {
        Encoding::Json
    };
    snapshot_list_encoder(
        store.info(),
        store.current(),
        Arc::new(Filter::everything()),
        encoding,
    )
}

/// A LIST encoder over what `filter` selects of `snapshot` (objects of `info`; no limit),
/// in `encoding`, chunked as the server chunks.
pub fn snapshot_list_encoder(
    info: &ResourceInfo,
    snapshot: Snapshot,
    filter: Arc<Filter>,
    encoding: Encoding,
) -> ListEncoder {
    let reader = SnapshotReader::new(snapshot, filter, None, None);
    let writer = Rendering::objects(encoding)
        .writer(info, &Sharing::default())
        .expect("the kind has this encoding's form");
    ListEncoder::new(reader, writer, String::new(), false, DEFAULT_CHUNK)
}
