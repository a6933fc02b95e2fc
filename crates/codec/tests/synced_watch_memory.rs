//! Issue 27 (kubelet storm): what a watch-list keeps once its initial events are out and it
//! waits. A node's watch-list sends its pods (protobuf, a few KiB each), then sits idle for
//! the rest of its life; 5,000 of them must not each keep the buffers the initial events
//! grew (before: the rest of a 64 KiB chunk allocation and eight transcoding buffers, about
//! 90 KiB a watch). dhat measures the heap the encoder holds while it waits.

use std::sync::Arc;
use std::time::{Duration, Instant};

use listwatch_codec::{Rendering, WatchEncoder, WatchSpec, WatchStep};
use listwatch_core::builtin_resource;
use listwatch_store::{Filter, Record, SnapshotReader, Store, StoreConfig};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// Objects the watch-list sends first, each ~6 KiB of JSON.
const OBJECTS: u64 = 30;

fn store() -> Arc<Store> {
    let info = Arc::new(builtin_resource("configmaps").expect("configmaps"));
    let records: Vec<Record> = (0..OBJECTS).map(|i| {
        let data: Vec<String> = (0..40)
            .map(|k| format!(r#""key-{k}":"{}""#, "v".repeat(120 + k)))
            .collect();
        let json = format!(
            r#"{{"metadata":{{"name":"cm-{i}","namespace":"ns","labels":{{"node":"n-{i}"}}}},"data":{{{}}}}}"#,
            data.join(",")
        );
        Record::ingest(json.as_bytes(), &info, 1 + i).expect("ingest")
    }).collect();
    Store::new(info, OBJECTS + 1, records, StoreConfig::default())
}

#[test]
fn a_synced_watch_list_keeps_no_buffers_while_it_waits() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let store = store();
    for metadata in [false, true] {
        let now = Instant::now();
        let filter = Arc::new(Filter::everything());
        let reader = SnapshotReader::new(store.current(), filter.clone(), None, None);
        let cursor = store.watch_from(OBJECTS + 1).expect("cursor");
        let writer = Rendering::protobuf(metadata)
            .writer(store.info(), &listwatch_codec::Sharing::default())
            .expect("writer");
        let spec = WatchSpec {
            initial: Some(Box::new(reader)),
            initial_events_end: true,
            initial_rv: OBJECTS + 1,
            bookmarks: true,
            bookmark_every: Duration::from_secs(60),
            deadline: now + Duration::from_secs(3600),
            chunk: 64 * 1024,
        };
        let before = dhat::HeapStats::get();
        let mut w = Box::new(WatchEncoder::new(cursor, filter, writer, spec, now));
        let mut sent = 0;
        loop {
            match w.step(now) {
                WatchStep::Chunk(c) => sent += c.len(),
                WatchStep::Idle { .. } => break,
                WatchStep::End => panic!("the watch ended"),
                WatchStep::Wait => panic!("waited without a waker"),
            }
        }
        let waiting = dhat::HeapStats::get();
        let held = waiting.curr_bytes.saturating_sub(before.curr_bytes);
        println!("metadata only {metadata}: {sent} bytes sent, {held} bytes held while waiting");
        assert!(sent > OBJECTS as usize * 1000 || metadata, "{sent}");
        assert!(
            held <= 2048,
            "a waiting watch-list holds {held} bytes of heap (metadata only: {metadata})"
        );
        drop(w);
    }
}
