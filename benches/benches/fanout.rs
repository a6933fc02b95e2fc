//! Fan-out: events delivered from the shared log to many watch cursors (deliveries/s),
//! including each watcher's filter view, as the watch path does per event.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use listwatch_benches::{pod_records, pods};
use listwatch_store::{Change, Filter, Record, Store, StoreConfig};

listwatch_benches::jemalloc!();

const CURSORS: usize = 1_000;
const EVENTS: usize = 1_000;

fn fanout(c: &mut Criterion) {
    let info = pods();
    let updates: Vec<Record> = pod_records(EVENTS);
    let filter = Filter::everything();
    let mut g = c.benchmark_group("fanout");
    g.throughput(Throughput::Elements((CURSORS * EVENTS) as u64));
    g.sample_size(10);
    g.bench_function("1000_events_to_1000_cursors", |b| {
        b.iter_batched(
            || {
                let store = Store::new(
                    info.clone(),
                    1,
                    Vec::<Record>::new(),
                    StoreConfig::default(),
                );
                let cursors: Vec<_> = (0..CURSORS)
                    .map(|_| store.watch_from(1).expect("cursor"))
                    .collect();
                for (i, r) in updates.iter().enumerate() {
                    let r = Record::ingest(r.bytes(), &info, 2 + i as u64).expect("ingest");
                    store.apply([Change::Put(r)]).expect("apply");
                }
                (store, cursors)
            },
            |(_store, mut cursors)| {
                let mut out = Vec::with_capacity(256);
                let mut delivered = 0usize;
                for c in &mut cursors {
                    loop {
                        out.clear();
                        c.poll(256, &mut out).expect("poll");
                        if out.is_empty() {
                            break;
                        }
                        delivered += out.iter().filter(|e| filter.view(e).is_some()).count();
                    }
                }
                assert_eq!(delivered, CURSORS * EVENTS);
                delivered
            },
            criterion::BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, fanout);
criterion_main!(benches);
