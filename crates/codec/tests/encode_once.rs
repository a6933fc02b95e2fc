//! Issue 27: a logged watch event is encoded at most once per protobuf form, however many
//! watchers receive it. dhat counts the heap blocks a fan-out allocates: adding watchers
//! adds their chunks, never an allocation per (watcher, event) — which an encoding per
//! watcher would need for its bytes. Each event's cache must hold exactly one encoding per
//! (form, object) its watchers were sent, and the frames must be the bytes the per-watcher
//! encoder writes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use listwatch_codec::{ChunkWriter, Rendering, WatchEncoder, WatchSpec, WatchStep};
use listwatch_core::builtin_resource;
use listwatch_core::fields::FieldSelector;
use listwatch_core::labels::LabelSelector;
use listwatch_store::{Change, Event, Filter, Record, Store};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

const EVENTS: u64 = 60;
const WATCHERS: usize = 24;

fn configmap(i: u64, team: &str, rv: u64) -> Record {
    let info = builtin_resource("configmaps").expect("configmaps");
    let json = format!(
        r#"{{"metadata":{{"name":"cm-{}","namespace":"ns","labels":{{"team":"{team}"}}}},"data":{{"k":"{}"}}}}"#,
        i % 20,
        "v".repeat(200 + i as usize)
    );
    Record::ingest(json.as_bytes(), &info, rv).expect("ingest")
}

/// A store at RV 1 and its log's events after it: creates, updates (some moving an
/// object out of team `a`, which a filtered watcher sees as a stamped DELETED) and deletes.
fn store_with_events() -> Arc<Store> {
    let store = listwatch_testkit::store::empty_store("configmaps", 1);
    for rv in 2..2 + EVENTS {
        let i = rv - 2;
        let change = if i >= 20 && i % 7 == 0 {
            Change::Delete {
                key: format!("ns/cm-{}", i % 20),
                rv,
            }
        } else {
            let team = if i % 3 == 0 { "b" } else { "a" };
            Change::Put(configmap(i, team, rv))
        };
        // Deleting an object already deleted: make it again instead.
        if store.apply([change]).is_err() {
            store
                .apply([Change::Put(configmap(i, "a", rv))])
                .expect("apply");
        }
    }
    store
}

fn filters(store: &Store) -> Vec<Arc<Filter>> {
    let team_a = LabelSelector::parse("team=a").expect("selector");
    vec![
        Arc::new(Filter::everything()),
        Arc::new(Filter::from_parts(
            store.info(),
            Some("ns"),
            team_a,
            &FieldSelector::default(),
        )),
    ]
}

/// Delivers the whole log to `per_filter` watchers of each filter in each protobuf form;
/// each watcher's body and its number of chunks.
fn deliver(store: &Arc<Store>, per_filter: usize) -> Vec<(Vec<u8>, usize)> {
    let now = Instant::now();
    let mut bodies = Vec::new();
    for metadata in [false, true] {
        for filter in filters(store) {
            for _ in 0..per_filter {
                let spec = WatchSpec {
                    initial: None,
                    initial_events_end: false,
                    initial_rv: 1,
                    bookmarks: false,
                    bookmark_every: Duration::from_secs(60),
                    deadline: now + Duration::from_secs(3600),
                    chunk: 16 * 1024,
                };
                let writer = Rendering::protobuf(metadata)
                    .writer(store.info(), &listwatch_codec::Sharing::default())
                    .expect("writer");
                let cursor = store.watch_from(1).expect("cursor");
                let mut w = WatchEncoder::new(cursor, filter.clone(), writer, spec, now);
                let (mut body, mut chunks) = (Vec::new(), 0);
                while let WatchStep::Chunk(c) = w.step(now) {
                    body.extend_from_slice(&c);
                    chunks += 1;
                }
                bodies.push((body, chunks));
            }
        }
    }
    bodies
}

fn logged(store: &Arc<Store>) -> Vec<Arc<Event>> {
    let mut events = Vec::new();
    store
        .watch_from(1)
        .expect("cursor")
        .poll(usize::MAX, &mut events)
        .expect("poll");
    assert_eq!(events.len() as u64, EVENTS);
    events
}

#[test]
fn a_protobuf_watch_event_is_encoded_once_per_form() {
    let _profiler = dhat::Profiler::builder().testing().build();

    // Warm-up: the schema and other lazily built tables are allocated once per process.
    deliver(&store_with_events(), 1);
    // One watcher per (form, filter), then WATCHERS of each on a fresh log.
    let one = store_with_events();
    let before = dhat::HeapStats::get();
    let single = deliver(&one, 1);
    let mid = dhat::HeapStats::get();
    let many = store_with_events();
    let built = dhat::HeapStats::get();
    let fanned = deliver(&many, WATCHERS);
    let after = dhat::HeapStats::get();

    let blocks_one = mid.total_blocks - before.total_blocks;
    let blocks_many = after.total_blocks - built.total_blocks;
    let extra_watchers = (fanned.len() - single.len()) as u64;
    let extra_chunks: u64 = fanned.iter().map(|(_, c)| *c as u64).sum::<u64>()
        - single.iter().map(|(_, c)| *c as u64).sum::<u64>();
    println!(
        "{} watchers: {blocks_one} blocks; {} watchers: {blocks_many} blocks ({extra_chunks} more chunks)",
        single.len(),
        fanned.len()
    );
    // An extra watcher may allocate its encoder, cursor and chunks — not one block per
    // event it is sent (an encoding of its own would be one at least).
    let per_watcher = 40;
    const { assert!(EVENTS > 40) };
    assert!(
        blocks_many <= blocks_one + extra_watchers * per_watcher + extra_chunks * 2,
        "fan-out allocates per event: {blocks_one} blocks for {} watchers, {blocks_many} for {}",
        single.len(),
        fanned.len()
    );
    // Every watcher of a (form, filter) got the same bytes.
    for (i, (body, _)) in fanned.iter().enumerate() {
        assert_eq!(body, &single[i / WATCHERS].0, "watcher {i}");
    }

    // Each event holds one encoding per (form, object) some watcher was sent, and the log
    // counts their bytes.
    let events = logged(&many);
    let mut expected = 0;
    let mut held = 0;
    for e in &events {
        let mut views = std::collections::HashSet::new();
        for f in filters(&many) {
            if let Some(v) = f.view(e) {
                views.insert(v.stamp_rv.is_some());
            }
        }
        // Both forms (objects, metadata) were delivered for each distinct view.
        assert_eq!(e.encoded.encodings(), 2 * views.len(), "event at {}", e.rv);
        expected += 2 * views.len();
        held += e.encoded.bytes();
    }
    assert!(expected > EVENTS as usize * 2, "some views are stamped");
    assert_eq!(many.stats().event_bytes, {
        let untouched = store_with_events();
        untouched.stats().event_bytes + held
    });
    // (In this test: one dhat profiler per process, and parallel tests would count here.)
    shared_frames_are_the_per_watcher_bytes();
}

/// The frames of shared encodings are the bytes a per-watcher encoding writes.
fn shared_frames_are_the_per_watcher_bytes() {
    let store = store_with_events();
    deliver(&store, 1);
    for metadata in [false, true] {
        for f in filters(&store) {
            let mut shared = Rendering::protobuf(metadata)
                .writer(store.info(), &listwatch_codec::Sharing::default())
                .expect("writer");
            let mut own = Rendering::protobuf(metadata)
                .writer(store.info(), &listwatch_codec::Sharing::default())
                .expect("writer");
            for e in logged(&store) {
                let Some(v) = f.view(&e) else { continue };
                let (mut a, mut b) = (ChunkWriter::new(1 << 20), ChunkWriter::new(1 << 20));
                shared.logged_event(&mut a, &e, &v, 0).expect("encode");
                own.event(&mut b, v.kind, v.object, v.stamp_rv, 0)
                    .expect("encode");
                assert_eq!(a.into_vec(), b.into_vec(), "event at {}", e.rv);
            }
        }
    }
}
