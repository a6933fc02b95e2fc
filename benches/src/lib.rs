//! Shared fixtures for the benches: realistic pods in a store.

use std::sync::Arc;

use listwatch_core::{ResourceInfo, builtin_resource};
use listwatch_sources::demo::demo_pod;
use listwatch_store::{Record, Store, StoreConfig};

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
pub fn list_encoder(store: &Store, protobuf: bool) -> listwatch_codec::ListEncoder {
    let info = store.info();
    let reader = listwatch_store::SnapshotReader::new(
        store.current(),
        Arc::new(listwatch_store::Filter::everything()),
        None,
        None,
    );
    let encoding = if protobuf {
        listwatch_codec::Encoding::Protobuf
    } else {
        listwatch_codec::Encoding::Json
    };
    let rendering = listwatch_codec::Rendering::objects(encoding);
    let writer = rendering
        .writer(info, &listwatch_codec::Sharing::default())
        .expect("the kind has a protobuf form");
    listwatch_codec::ListEncoder::new(
        reader,
        writer,
        String::new(),
        false,
        listwatch_codec::DEFAULT_CHUNK,
    )
}
