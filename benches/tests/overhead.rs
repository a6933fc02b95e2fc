//! Heap overhead per stored record beyond its JSON, for realistic ~4.5 KiB pods, measured
//! with dhat: the store's index (map nodes, Arc, key, label and field spans).

use listwatch_benches::{pod_records, pods};
use listwatch_store::{Store, StoreConfig};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

#[test]
fn bytes_of_overhead_per_record() {
    let _profiler = dhat::Profiler::builder().testing().build();
    const N: usize = 20_000;
    let records = pod_records(N);
    let json: usize = records.iter().map(|r| r.bytes().len()).sum();
    let before = dhat::HeapStats::get().curr_bytes;
    let store = Store::new(pods(), N as u64 + 1, records, StoreConfig::default());
    let after = dhat::HeapStats::get().curr_bytes;
    // `records` was moved into the store, so `after` holds the JSON plus every index byte.
    // What building the map (nodes, Arc headers) added on top of the ingested records.
    let per_record = (after as f64 - before as f64) / N as f64;
    let total_per_record = after as f64 / N as f64;
    let json_per_record = json as f64 / N as f64;
    let overhead = total_per_record - json_per_record;
    println!(
        "{N} pods: {json_per_record:.0} B JSON each, {total_per_record:.0} B heap each, overhead {overhead:.0} B/record ({:.3}x); map build added {per_record:.0} B/record",
        total_per_record / json_per_record
    );
    assert!(overhead < 1024.0, "overhead {overhead:.0} B per record");
    assert_eq!(store.current().len(), N);
}
