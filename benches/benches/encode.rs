//! Encoding benches: a LIST of a 100k-record snapshot and watch-list initial events into a
//! sink, in MB/s.

use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use listwatch_benches::{list_encoder, pod_store};
use listwatch_codec::{ChunkWriter, DEFAULT_CHUNK, watch};
use listwatch_store::{EventType, Filter, SnapshotReader};

#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const N: usize = 100_000;

fn encode(c: &mut Criterion) {
    let store = pod_store(N);
    let total: usize = {
        let mut e = list_encoder(&store);
        std::iter::from_fn(|| e.next_chunk()).map(|c| c.len()).sum()
    };
    let mut g = c.benchmark_group("encode");
    g.throughput(Throughput::Bytes(total as u64));
    g.sample_size(10);
    g.bench_function("list_100k_pods", |b| {
        b.iter(|| {
            let mut e = list_encoder(&store);
            std::iter::from_fn(|| e.next_chunk())
                .map(|c| c.len())
                .sum::<usize>()
        })
    });
    g.bench_function("watchlist_initial_100k_pods", |b| {
        b.iter(|| {
            let mut reader =
                SnapshotReader::new(store.current(), Arc::new(Filter::everything()), None, None);
            let mut out = ChunkWriter::new(DEFAULT_CHUNK);
            let mut sum = 0;
            while reader.next_batch(4096, |r| {
                watch::write_event(&mut out, EventType::Added, r, None);
                while let Some(c) = out.pop() {
                    sum += c.len();
                }
                true
            }) {}
            sum
        })
    });
    g.finish();
}

criterion_group!(benches, encode);
criterion_main!(benches);
