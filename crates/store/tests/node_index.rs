//! Issue 27 item 3: a `spec.nodeName=` selector on pods is answered from the snapshot's
//! node index, with exactly the pages, order and continue points a scan of the whole
//! collection gives — at the current RV and at older ones rebuilt from the log.

use std::sync::Arc;

use listwatch_core::builtin_resources;
use listwatch_core::fields::FieldSelector;
use listwatch_core::labels::LabelSelector;
use listwatch_store::{Change, Filter, Record, Snapshot, SnapshotReader, Store, StoreConfig};

fn pod(i: usize, node: Option<&str>, rv: u64) -> Record {
    let info = builtin_resources()
        .into_iter()
        .find(|r| r.resource == "pods")
        .expect("pods");
    let spec = node.map_or(String::from("{}"), |n| format!(r#"{{"nodeName":"{n}"}}"#));
    let json = format!(
        r#"{{"metadata":{{"name":"p-{i:04}","namespace":"ns-{}"}},"spec":{spec}}}"#,
        i % 3
    );
    Record::ingest(json.as_bytes(), &info, rv).expect("ingest")
}

/// Keys of every page of a LIST (pages of `limit`), following continue points.
fn pages(snap: &Snapshot, filter: &Arc<Filter>, limit: Option<u64>) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut start: Option<String> = None;
    loop {
        let mut r = SnapshotReader::new(snap.clone(), filter.clone(), start.as_deref(), limit);
        let mut keys = Vec::new();
        while r.next_batch(7, |rec| {
            keys.push(rec.key().to_string());
            true
        }) {}
        out.push(keys);
        match r.continue_after() {
            // The next page starts just after the last key.
            Some(k) => start = Some(format!("{k}\0")),
            None => return out,
        }
    }
}

/// The same selection by a plain scan (the filter without the index's help).
fn scanned(snap: &Snapshot, filter: &Filter) -> Vec<String> {
    snap.range("", false, filter.prefix())
        .filter(|r| filter.matches(r))
        .map(|r| r.key().to_string())
        .collect()
}

#[test]
fn node_selector_lists_from_the_index_as_a_scan_would() {
    let info = Arc::new(
        builtin_resources()
            .into_iter()
            .find(|r| r.resource == "pods")
            .expect("pods"),
    );
    let node = |i: usize| format!("node-{}", i % 4);
    let records: Vec<Record> = (0..60)
        .map(|i| pod(i, (i % 10 != 0).then(|| node(i)).as_deref(), 1))
        .collect();
    let store = Store::new(info.clone(), 1, records, StoreConfig::default());
    // Moves between nodes, deletes, binds an unscheduled pod.
    let mut rv = 1;
    for i in 0..30 {
        rv += 1;
        let change = if i % 5 == 4 {
            Change::Delete {
                key: format!("ns-{}/p-{i:04}", i % 3),
                rv,
            }
        } else {
            Change::Put(pod(i, Some(&node(i + 1)), rv))
        };
        store.apply([change]).expect("apply");
    }
    for at in [1, 7, 16, rv] {
        let snap = store.snapshot_at(at).expect("snapshot");
        for (ns, n) in [
            (None, "node-1"),
            (Some("ns-2"), "node-2"),
            (None, ""),
            (None, "none"),
        ] {
            let sel = FieldSelector::parse(&format!("spec.nodeName={n}")).expect("selector");
            let filter = Arc::new(Filter::from_parts(
                &info,
                ns,
                LabelSelector::default(),
                &sel,
            ));
            let want = scanned(&snap, &filter);
            assert_eq!(pages(&snap, &filter, None).concat(), want, "rv {at} {n}");
            let paged = pages(&snap, &filter, Some(2));
            assert!(paged.iter().all(|p| p.len() <= 2));
            assert_eq!(paged.concat(), want, "paged, rv {at} {n}");
        }
    }
    assert!(
        store.current().index().is_some(),
        "pods are indexed by node"
    );
}
