//! Store benches: snapshot take, iteration, apply, exact-RV reconstruction.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use listwatch_benches::{pod_records, pod_store, pods};
use listwatch_store::{Change, Store, StoreConfig};

listwatch_benches::jemalloc!();

const N: usize = 100_000;

fn store(c: &mut Criterion) {
    let store = pod_store(N);
    c.bench_function("snapshot_take", |b| {
        b.iter(|| std::hint::black_box(store.current()))
    });

    let mut g = c.benchmark_group("iterate");
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("iterate_100k", |b| {
        b.iter(|| {
            let snap = store.current();
            snap.range("", false, "")
                .map(|r| r.bytes().len())
                .sum::<usize>()
        })
    });
    g.finish();

    // Ingest: validate (simd-json), splice the RV, index — per object, as a relist or a
    // watch event from etcd does.
    let mut g = c.benchmark_group("ingest");
    let raw: Vec<_> = pod_records(10_000)
        .into_iter()
        .map(|r| r.bytes().clone())
        .collect();
    g.throughput(Throughput::Elements(raw.len() as u64));
    g.sample_size(10);
    g.bench_function("ingest_10k_pods", |b| {
        let info = pods();
        b.iter(|| {
            for (i, json) in raw.iter().enumerate() {
                let r = listwatch_store::Record::ingest(json, &info, i as u64 + 1).expect("ingest");
                std::hint::black_box(r);
            }
        })
    });
    g.finish();

    // Apply: 100k MODIFIED events onto a 100k store (records pre-ingested; this measures the
    // store, not JSON parsing).
    let mut g = c.benchmark_group("apply");
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(10);
    g.bench_function("apply_100k_events", |b| {
        b.iter_batched(
            || {
                let base = pod_records(N);
                let s = Store::new(pods(), N as u64, base, StoreConfig::default());
                let updates: Vec<_> = pod_records(N)
                    .into_iter()
                    .enumerate()
                    .map(|(i, r)| {
                        // Re-stamp each update at a fresh RV after the base.
                        listwatch_store::Record::ingest(r.bytes(), &pods(), (N + 1 + i) as u64)
                            .expect("ingest")
                    })
                    .collect();
                (s, updates)
            },
            |(s, updates)| {
                for r in updates {
                    s.apply([Change::Put(r)]).expect("apply");
                }
                s
            },
            criterion::BatchSize::PerIteration,
        )
    });
    g.finish();

    // Exact RV between checkpoints: rebuild by undoing up to checkpoint_every events.
    let s = pod_store(20_000);
    let base = s.rv();
    for (i, r) in pod_records(1000).into_iter().enumerate() {
        let r = listwatch_store::Record::ingest(r.bytes(), &pods(), base + 1 + i as u64)
            .expect("ingest");
        s.apply([Change::Put(r)]).expect("apply");
    }
    c.bench_function("snapshot_at_between_checkpoints", |b| {
        b.iter(|| s.snapshot_at(base + 500 + 63).expect("in window"))
    });
}

criterion_group!(benches, store);
criterion_main!(benches);
