//! Issue 27 item 5: what one idle watch's response body holds for life (10,000 idle
//! watchers ≤ 2 KiB each, HTTP/2's per-stream share included: docs/memory.md). dhat
//! measures the heap of watch bodies that have polled once and wait: the body with its
//! encoder, its timer and its cursor's wake-up slot. Before the body was hand-written it was
//! ~900 B (an `async` state machine with a select over the cursor and a timer, boxed twice).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use http_body::Body;
use listwatch_codec::{Rendering, WatchEncoder, WatchSpec};
use listwatch_core::builtin_resource;
use listwatch_server::body::StreamedBody;
use listwatch_store::{Change, Filter, Record, Store, StoreConfig};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

const WATCHES: usize = 200;

#[tokio::test]
async fn an_idle_watch_body_holds_at_most_768_bytes() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let info = Arc::new(builtin_resource("configmaps").expect("configmaps"));
    let records: Vec<Record> = (0..10)
        .map(|i| {
            let json = format!(r#"{{"metadata":{{"name":"cm-{i}","namespace":"ns"}}}}"#);
            Record::ingest(json.as_bytes(), &info, 1 + i).expect("ingest")
        })
        .collect();
    let store = Store::new(info, 11, records, StoreConfig::default());
    // One filter for all (the handler makes one per request; its size is the request's).
    let filter = Arc::new(Filter::everything());
    let mut cx = Context::from_waker(Waker::noop());
    let mut bodies = Vec::with_capacity(WATCHES);
    let sharing = listwatch_codec::Sharing::default();
    // Process-wide tables loaded on first use (the protobuf schema a writer consults to
    // tell custom resources apart) are no watch's cost: load them before measuring.
    drop(
        Rendering::objects(listwatch_codec::Encoding::Json)
            .writer(store.info(), &sharing)
            .expect("writer"),
    );
    let before = dhat::HeapStats::get();
    for _ in 0..WATCHES {
        let now = Instant::now();
        let spec = WatchSpec {
            initial: None,
            initial_events_end: false,
            initial_rv: 11,
            bookmarks: true,
            bookmark_every: Duration::from_secs(60),
            deadline: now + Duration::from_secs(3600),
            chunk: 64 * 1024,
        };
        let cursor = store.watch_matching(11, &filter).expect("cursor");
        let writer = Rendering::objects(listwatch_codec::Encoding::Json)
            .writer(store.info(), &sharing)
            .expect("writer");
        let encoder = WatchEncoder::new(cursor, filter.clone(), writer, spec, now);
        let mut body = Box::new(StreamedBody::watch(encoder, None, false));
        assert!(
            matches!(Pin::new(&mut *body).poll_frame(&mut cx), Poll::Pending),
            "an idle watch has nothing to send"
        );
        bodies.push(body);
    }
    let held = dhat::HeapStats::get().curr_bytes - before.curr_bytes;
    let per_watch = held / WATCHES;
    println!("{per_watch} bytes of heap per idle watch body");
    assert!(per_watch <= 768, "an idle watch body holds {per_watch} B");
    // Still a watch: a write wakes it and it sends the event.
    let new = Record::ingest(
        br#"{"metadata":{"name":"new","namespace":"ns"}}"#,
        store.info(),
        12,
    )
    .expect("ingest");
    store.apply([Change::Put(new)]).expect("apply");
    // The first poll may end the body's turn on the worker (it began at its last poll).
    let polled = (0..2)
        .map(|_| Pin::new(&mut *bodies[0]).poll_frame(&mut cx))
        .find(Poll::is_ready);
    let Some(Poll::Ready(Some(Ok(frame)))) = polled else {
        panic!("the write did not reach the watch");
    };
    let data = frame.into_data().expect("data");
    assert!(
        std::str::from_utf8(&data).is_ok_and(|s| s.contains(r#""type":"ADDED""#)),
        "{data:?}"
    );
}
