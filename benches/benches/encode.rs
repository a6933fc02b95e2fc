//! Encoding benches: a LIST of a 100k-record snapshot and watch-list initial events into a
//! sink, in MB/s.

use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use listwatch_benches::{list_encoder, pod_store};
use listwatch_codec::{ChunkWriter, DEFAULT_CHUNK, watch};
use listwatch_store::{EventType, Filter, SnapshotReader};

listwatch_benches::jemalloc!();

const N: usize = 100_000;

fn encode(c: &mut Criterion) {
    let store = pod_store(N);
    // A whole LIST encoded (JSON or protobuf): its length in bytes.
    let encoded = |protobuf: bool| -> usize {
        let mut e = list_encoder(&store, protobuf);
        std::iter::from_fn(|| e.next_chunk()).map(|c| c.len()).sum()
    };
    let total = encoded(false);
    let mut g = c.benchmark_group("encode");
    g.throughput(Throughput::Bytes(total as u64));
    g.sample_size(10);
    g.bench_function("list_100k_pods", |b| b.iter(|| encoded(false)));
    // Protobuf transcoded per request (lengths memoized by the first run, as on a server
    // after its first protobuf LIST).
    g.bench_function("list_100k_pods_protobuf", |b| b.iter(|| encoded(true)));
    // The alternative of storing both encodings: the same protobuf items, encoded once,
    // copied into chunks as the JSON LIST copies its stored bytes.
    let stored: Vec<Vec<u8>> = {
        let mut proto = listwatch_codec::protobuf::ProtoObjects::new(store.info(), false, None)
            .expect("pods have protobuf");
        let mut reader =
            SnapshotReader::new(store.current(), Arc::new(Filter::everything()), None, None);
        let mut v = Vec::with_capacity(N);
        while reader.next_batch(4096, |r| {
            let mut item = Vec::new();
            proto.write_item(r, None, &mut item).expect("encode");
            v.push(item);
            true
        }) {}
        v
    };
    g.bench_function("list_100k_pods_protobuf_stored", |b| {
        b.iter(|| {
            let mut out = ChunkWriter::new(DEFAULT_CHUNK);
            let mut sum = 0;
            for item in &stored {
                out.put_slice(&[0x12]);
                out.put_slice(item);
                while let Some(c) = out.pop() {
                    sum += c.len();
                }
            }
            sum
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
