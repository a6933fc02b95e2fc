//! Watch encoding fan-out: N watchers of one store each receive the same M logged events,
//! framed for the socket in each form (JSON, protobuf, JSON and protobuf
//! PartialObjectMetadata) — the server's CPU per delivered event (issue 27).

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use listwatch_benches::{pod_records, pods};
use listwatch_codec::{Encoding, Form, Rendering, WatchEncoder, WatchSpec, WatchStep};
use listwatch_store::{Change, Filter, Record, Store, StoreConfig};

listwatch_benches::jemalloc!();

const WATCHERS: usize = 100;
const EVENTS: usize = 200;

/// A store whose log holds `EVENTS` MODIFIED pod events after RV `EVENTS + 1`.
fn store_with_events() -> Arc<Store> {
    let info = pods();
    let base = pod_records(EVENTS);
    let store = Store::new(
        info.clone(),
        EVENTS as u64 + 1,
        base,
        StoreConfig::default(),
    );
    for (i, r) in pod_records(EVENTS).iter().enumerate() {
        let r = Record::ingest(r.bytes(), &info, EVENTS as u64 + 2 + i as u64).expect("ingest");
        store.apply([Change::Put(r)]).expect("apply");
    }
    store
}

/// Delivers every logged event to `WATCHERS` watchers rendered as `rendering`; the bytes
/// sent in all.
fn deliver(store: &Arc<Store>, rendering: &Rendering) -> usize {
    let now = Instant::now();
    let mut sent = 0;
    for _ in 0..WATCHERS {
        let writer = rendering
            .writer(store.info(), &listwatch_codec::Sharing::default())
            .expect("writer");
        let spec = WatchSpec {
            initial: None,
            initial_events_end: false,
            initial_rv: EVENTS as u64 + 1,
            bookmarks: false,
            bookmark_every: Duration::from_secs(60),
            deadline: now + Duration::from_secs(3600),
            chunk: listwatch_codec::DEFAULT_CHUNK,
        };
        let cursor = store.watch_from(EVENTS as u64 + 1).expect("cursor");
        let mut w = WatchEncoder::new(cursor, Arc::new(Filter::everything()), writer, spec, now);
        while let WatchStep::Chunk(c) = w.step(now) {
            sent += c.len();
        }
    }
    sent
}

fn watch_encode(c: &mut Criterion) {
    let mut g = c.benchmark_group("watch_encode");
    g.throughput(Throughput::Elements((WATCHERS * EVENTS) as u64));
    g.sample_size(10);
    for (name, encoding, form) in [
        ("json", Encoding::Json, Form::Objects),
        ("protobuf", Encoding::Protobuf, Form::Objects),
        ("json_metadata", Encoding::Json, Form::Metadata),
        ("protobuf_metadata", Encoding::Protobuf, Form::Metadata),
    ] {
        let rendering = Rendering {
            encoding,
            form,
            gzip: false,
        };
        // A fresh log per iteration: the first watcher of an event pays its encoding.
        g.bench_function(
            format!("{WATCHERS}_watchers_x_{EVENTS}_events_{name}"),
            |b| {
                b.iter_batched(
                    store_with_events,
                    |store| deliver(&store, &rendering),
                    criterion::BatchSize::PerIteration,
                )
            },
        );
    }
    g.finish();
}

criterion_group!(benches, watch_encode);
criterion_main!(benches);
