//! Allocation proofs with dhat: taking and iterating a snapshot of 100,000 records allocates
//! O(1) bytes (not O(n)), and paging through it with a reader allocates per batch, not per
//! record.

use std::sync::Arc;

use listwatch_core::builtin_resource;
use listwatch_store::{Filter, Record, SnapshotReader, Store, StoreConfig};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

const N: usize = 100_000;

#[test]
fn snapshot_take_and_iterate_allocate_constant_bytes() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let info = Arc::new(builtin_resource("configmaps").expect("cm"));
    let records = (0..N).map(|i| {
        let json = format!(r#"{{"metadata":{{"name":"cm-{i:06}","namespace":"ns-{}","labels":{{"app":"a{}"}}}},"data":{{"k":"v"}}}}"#, i % 10, i % 3);
        Record::ingest(json.as_bytes(), &info, 1 + i as u64).expect("ingest")
    });
    let store = Store::new(info.clone(), N as u64 + 1, records, StoreConfig::default());

    let before = dhat::HeapStats::get();
    let snap = store.current();
    let mut bytes = 0usize;
    let mut count = 0usize;
    for r in snap.range("", false, "") {
        bytes += r.bytes().len();
        count += 1;
    }
    let after = dhat::HeapStats::get();
    assert_eq!(count, N);
    assert!(bytes > N * 50);
    let allocated = after.total_bytes - before.total_bytes;
    println!(
        "take + iterate {N} records: {} allocations, {allocated} bytes",
        after.total_blocks - before.total_blocks
    );
    assert!(
        allocated < 4096,
        "snapshot take + iteration allocated {allocated} bytes for {N} records"
    );

    // Paging the whole snapshot through a reader with a selector: per-batch cost only.
    let before = dhat::HeapStats::get();
    let filter = Arc::new(Filter::everything());
    let mut reader = SnapshotReader::new(store.current(), filter, None, None);
    let mut seen = 0usize;
    while reader.next_batch(4096, |_| {
        seen += 1;
        true
    }) {}
    let after = dhat::HeapStats::get();
    assert_eq!(seen, N);
    let blocks = after.total_blocks - before.total_blocks;
    println!(
        "reader over {N} records: {blocks} allocations, {} bytes",
        after.total_bytes - before.total_bytes
    );
    assert!(
        blocks < (N / 4096 + 1) as u64 * 8,
        "reader allocated {blocks} blocks for {N} records"
    );
}
