//! Allocation proof with dhat: encoding a LIST of 100,000 records allocates per chunk, not
//! per record, and the output is the exact JSON list; the same for the protobuf LIST, whose
//! objects are transcoded per request into reused scratch buffers.

use std::sync::Arc;

use listwatch_codec::ListEncoder;
use listwatch_core::builtin_resource;
use listwatch_store::{Filter, Record, SnapshotReader, Store, StoreConfig};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

const N: usize = 100_000;
const CHUNK: usize = 64 * 1024;

#[test]
fn list_encoding_allocates_per_chunk_not_per_record() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let info = Arc::new(builtin_resource("configmaps").expect("cm"));
    let records = (0..N).map(|i| {
        let json = format!(
            r#"{{"metadata":{{"name":"cm-{i:06}","namespace":"ns"}},"data":{{"k":"{}"}}}}"#,
            "x".repeat(i % 300)
        );
        Record::ingest(json.as_bytes(), &info, 1 + i as u64).expect("ingest")
    });
    let store = Store::new(info.clone(), N as u64 + 1, records, StoreConfig::default());
    // (label, protobuf, the body's first bytes): JSON, then protobuf twice — the first
    // protobuf LIST also measures every item (memoized in the records), the second only
    // transcodes. None may allocate per record.
    for (label, protobuf, head) in [
        (
            "JSON",
            false,
            &br#"{"kind":"ConfigMapList","apiVersion":"v1""#[..],
        ),
        ("protobuf, first", true, b"k8s\0\n\x13\n\x02v1\x12\rConfigM"),
        (
            "protobuf, second",
            true,
            b"k8s\0\n\x13\n\x02v1\x12\rConfigM",
        ),
    ] {
        let reader =
            SnapshotReader::new(store.current(), Arc::new(Filter::everything()), None, None);
        let encoding = if protobuf {
            listwatch_codec::Encoding::Protobuf
        } else {
            listwatch_codec::Encoding::Json
        };
        let rendering = listwatch_codec::Rendering::objects(encoding);
        let writer = rendering
            .writer(&info, &listwatch_codec::Sharing::default())
            .expect("writer");
        let mut enc = ListEncoder::new(reader, writer, String::new(), false, CHUNK);
        let before = dhat::HeapStats::get();
        let (mut total, mut chunks, mut first) = (0usize, 0usize, None);
        while let Some(c) = enc.next_chunk() {
            total += c.len();
            chunks += 1;
            if first.is_none() {
                first = Some(c.slice(..head.len()));
            }
        }
        let after = dhat::HeapStats::get();
        let blocks = after.total_blocks - before.total_blocks;
        println!(
            "{label}: {N} records, {total} bytes in {chunks} chunks: {blocks} allocations, max live {} bytes",
            after.max_bytes
        );
        assert!(
            blocks <= (chunks as u64) * 3 + 64,
            "{label}: {blocks} allocations for {chunks} chunks"
        );
        assert_eq!(&first.expect("chunk")[..], head, "{label}");
    }
}
