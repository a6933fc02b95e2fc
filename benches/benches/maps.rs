//! Persistent ordered maps for `Snapshot`: imbl::OrdMap (chosen) against rpds' red-black
//! tree, on what the store does: clone, one insert into a 100k map (the per-event cost),
//! full iteration, and a range seek.

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};

listwatch_benches::jemalloc!();

const N: usize = 100_000;

fn keys() -> Vec<Arc<str>> {
    (0..N)
        .map(|i| Arc::from(format!("ns-{}/pod-{i:07}", i % 40)))
        .collect()
}

fn maps(c: &mut Criterion) {
    let ks = keys();
    let val = Arc::new(0u64);
    let imbl_map: imbl::OrdMap<Arc<str>, Arc<u64>> =
        ks.iter().map(|k| (k.clone(), val.clone())).collect();
    let mut rpds_map: rpds::RedBlackTreeMapSync<Arc<str>, Arc<u64>> =
        rpds::RedBlackTreeMapSync::new_sync();
    for k in &ks {
        rpds_map.insert_mut(k.clone(), val.clone());
    }
    let probe: Arc<str> = Arc::from("ns-7/pod-0050007");
    // Both maps seek the same range: every key from namespace ns-7's first on.
    let namespace_7 = (
        std::ops::Bound::Included("ns-7/"),
        std::ops::Bound::Unbounded,
    );

    let mut g = c.benchmark_group("maps");
    g.bench_function("imbl_clone", |b| b.iter(|| imbl_map.clone()));
    g.bench_function("rpds_clone", |b| b.iter(|| rpds_map.clone()));
    g.bench_function("imbl_insert_into_shared_100k", |b| {
        b.iter_batched(
            || imbl_map.clone(),
            |mut m| m.insert(probe.clone(), val.clone()),
            criterion::BatchSize::SmallInput,
        )
    });
    g.bench_function("rpds_insert_into_shared_100k", |b| {
        b.iter_batched(
            || rpds_map.clone(),
            |m| m.insert(probe.clone(), val.clone()),
            criterion::BatchSize::SmallInput,
        )
    });
    g.bench_function("imbl_iterate_100k", |b| b.iter(|| imbl_map.iter().count()));
    g.bench_function("rpds_iterate_100k", |b| b.iter(|| rpds_map.iter().count()));
    g.bench_function("imbl_range_seek_take_500", |b| {
        b.iter(|| imbl_map.range::<_, str>(namespace_7).take(500).count())
    });
    g.bench_function("rpds_range_seek_take_500", |b| {
        b.iter(|| rpds_map.range::<str, _>(namespace_7).take(500).count())
    });
    g.finish();
}

criterion_group!(benches, maps);
criterion_main!(benches);
