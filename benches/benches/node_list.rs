//! The kubelet's LIST: `spec.nodeName=<node>` over 150,000 pods on 5,000 nodes, answered
//! from the snapshot's node index, against a full LIST of the same snapshot (issue 27
//! item 3: a node LIST must cost ≤ 1 % of a full one).

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use listwatch_benches::{pods, snapshot_list_encoder};
use listwatch_codec::Encoding;
use listwatch_core::fields::FieldSelector;
use listwatch_core::labels::LabelSelector;
use listwatch_store::{Filter, Record, Snapshot, Store, StoreConfig};

listwatch_benches::jemalloc!();

const PODS: usize = 150_000;
const NODES: usize = 5_000;

fn store() -> Arc<Store> {
    let info = pods();
    let records: Vec<Record> = (0..PODS).map(|i| {
        let json = format!(
            r#"{{"metadata":{{"name":"pod-{i:06}","namespace":"ns-{}","labels":{{"app":"a-{}"}}}},"spec":{{"nodeName":"node-{:04}","containers":[{{"name":"c","image":"registry.example/app:v1"}}]}},"status":{{"phase":"Running"}}}}"#,
            i % 50,
            i % 7,
            i % NODES
        );
        Record::ingest(json.as_bytes(), &info, 1 + i as u64).expect("ingest")
    }).collect();
    Store::new(info, PODS as u64 + 1, records, StoreConfig::default())
}

/// The JSON LIST body's size for `filter` over `snap`.
fn list(store: &Store, snap: &Snapshot, filter: &Arc<Filter>) -> usize {
    let mut e = snapshot_list_encoder(store.info(), snap.clone(), filter.clone(), Encoding::Json);
    std::iter::from_fn(|| e.next_chunk()).map(|c| c.len()).sum()
}

fn node_list(c: &mut Criterion) {
    let store = store();
    let info = store.info().clone();
    let all = Arc::new(Filter::everything());
    let on_node = |n: usize| {
        let sel = FieldSelector::parse(&format!("spec.nodeName=node-{n:04}")).expect("sel");
        Arc::new(Filter::from_parts(
            &info,
            None,
            LabelSelector::default(),
            &sel,
        ))
    };
    let snap = store.current();
    // The same items without the index: what a node LIST cost before (a scan).
    let unindexed = Snapshot::new(snap.rv(), snap.items().clone());
    assert_eq!(
        list(&store, &snap, &on_node(17)),
        list(&store, &unindexed, &on_node(17))
    );
    assert!(list(&store, &snap, &on_node(17)) < list(&store, &snap, &all) / 1000);
    let mut g = c.benchmark_group("node_list");
    g.sample_size(10);
    g.bench_function("full_list_150k_pods", |b| {
        b.iter(|| list(&store, &snap, &all))
    });
    let mut n = 0;
    g.bench_function("node_list_30_of_150k_pods", |b| {
        b.iter(|| {
            n = (n + 1) % NODES;
            list(&store, &snap, &on_node(n))
        })
    });
    g.bench_function("node_list_by_scan_30_of_150k_pods", |b| {
        b.iter(|| {
            n = (n + 1) % NODES;
            list(&store, &unindexed, &on_node(n))
        })
    });
    g.finish();
}

criterion_group!(benches, node_list);
criterion_main!(benches);
