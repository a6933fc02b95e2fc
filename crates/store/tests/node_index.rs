//! Issue 27 item 3: a `spec.nodeName=` selector on pods is answered from the snapshot's
//! node index, with exactly the pages, order and continue points a scan of the whole
//! collection gives — at the current RV and at older ones rebuilt from the log.

use std::sync::Arc;

use listwatch_core::builtin_resources;
use listwatch_core::fields::FieldSelector;
use listwatch_core::labels::LabelSelector;
use listwatch_store::{Change, Filter, Record, Snapshot, SnapshotReader, Store, StoreConfig};

fn pods() -> Arc<listwatch_core::ResourceInfo> {
    Arc::new(
        builtin_resources()
            .into_iter()
            .find(|r| r.resource == "pods")
            .expect("pods"),
    )
}

fn pod(i: usize, node: Option<&str>, rv: u64) -> Record {
    let info = pods();
    let spec = node.map_or(String::from("{}"), |n| format!(r#"{{"nodeName":"{n}"}}"#));
    let json = format!(
        r#"{{"metadata":{{"name":"p-{i:04}","namespace":"ns-{}"}},"spec":{spec}}}"#,
        i % 3
    );
    Record::ingest(json.as_bytes(), &info, rv).expect("ingest")
}

/// The filter of `spec.nodeName=<node>` on pods.
fn node_filter(node: &str) -> Filter {
    let sel = FieldSelector::parse(&format!("spec.nodeName={node}")).expect("selector");
    Filter::from_parts(&pods(), None, LabelSelector::default(), &sel)
}

/// An empty pods store whose log trims to its last `min_events` events at once.
fn store_keeping(min_events: usize) -> Arc<Store> {
    let config = StoreConfig {
        log: listwatch_store::LogLimits {
            min_age: std::time::Duration::ZERO,
            min_events,
            max_bytes: usize::MAX,
        },
        ..StoreConfig::default()
    };
    Store::new(pods(), 1, Vec::<Record>::new(), config)
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
    let info = pods();
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

#[test]
fn a_node_watcher_wakes_only_for_its_nodes_events() {
    let info = pods();
    const NODES: usize = 8;
    let store = Store::new(
        info.clone(),
        1,
        Vec::<Record>::new(),
        StoreConfig::default(),
    );
    let node_filter = |n: usize| node_filter(&format!("node-{n}"));
    let mut cursors: Vec<_> = (0..NODES)
        .map(|n| store.watch_matching(1, &node_filter(n)).expect("cursor"))
        .collect();
    let mut all = store
        .watch_matching(1, &Filter::everything())
        .expect("cursor");
    // Events: pod i created on node i % NODES, then every third pod moved to the next
    // node (it concerns both), then some deleted.
    let mut expected = [0usize; NODES];
    let mut woken = [0usize; NODES];
    let mut delivered = [0usize; NODES];
    let mut read = [0usize; NODES];
    let (mut all_woken, mut rv) = (0, 1);
    let mut out = Vec::new();
    let mut step = |change: Change, concerns: &[usize], expected: &mut [usize; NODES]| {
        store.apply([change]).expect("apply");
        for &n in concerns {
            expected[n] += 1;
        }
        for (n, c) in cursors.iter_mut().enumerate() {
            if c.has_news() {
                woken[n] += 1;
                out.clear();
                c.poll(usize::MAX, &mut out).expect("poll");
                read[n] += out.len();
                delivered[n] += out
                    .iter()
                    .filter(|e| node_filter(n).view(e).is_some())
                    .count();
            }
        }
        if all.has_news() {
            all_woken += 1;
            out.clear();
            all.poll(usize::MAX, &mut out).expect("poll");
        }
    };
    for i in 0..40 {
        rv += 1;
        step(
            Change::Put(pod(i, Some(&format!("node-{}", i % NODES)), rv)),
            &[i % NODES],
            &mut expected,
        );
    }
    for i in (0..40).step_by(3) {
        rv += 1;
        let (from, to) = (i % NODES, (i + 1) % NODES);
        step(
            Change::Put(pod(i, Some(&format!("node-{to}")), rv)),
            &[from, to],
            &mut expected,
        );
    }
    for i in (1..40).step_by(5) {
        rv += 1;
        let node = if i % 3 == 0 {
            (i + 1) % NODES
        } else {
            i % NODES
        };
        let key = format!("ns-{}/p-{i:04}", i % 3);
        step(Change::Delete { key, rv }, &[node], &mut expected);
    }
    assert_eq!(
        woken, expected,
        "each node's watcher woken once per event of its node"
    );
    assert_eq!(delivered, expected, "and every such event delivered");
    assert_eq!(
        read, expected,
        "reading its node's events alone, not every event since it last read"
    );
    assert_eq!(
        all_woken,
        (rv - 1) as usize,
        "an unselective watcher sees every event"
    );
}

#[test]
fn a_sleeping_node_watcher_survives_trimming_of_other_nodes_events_but_not_a_relist() {
    let store = store_keeping(4);
    let quiet = node_filter("quiet");
    let mut c = store.watch_matching(1, &quiet).expect("cursor");
    let mut plain = store.watch_from(1).expect("cursor");
    for rv in 2..40 {
        store
            .apply([Change::Put(pod(rv as usize, Some("busy"), rv))])
            .expect("apply");
    }
    assert!(!c.has_news());
    let mut out = Vec::new();
    assert!(
        plain.poll(100, &mut out).is_err(),
        "an unselective cursor fell behind"
    );
    // The quiet node's watcher missed nothing of its own: it carries on.
    c.poll(100, &mut out)
        .expect("nothing of its node was trimmed");
    store
        .apply([Change::Put(pod(1, Some("quiet"), 40))])
        .expect("apply");
    assert!(c.has_news());
    out.clear();
    c.poll(100, &mut out).expect("poll");
    assert_eq!(out.len(), 1);
    assert_eq!(c.rv(), 40);
    // A relist ends it like every watch.
    store.replace(41, Vec::<Record>::new());
    assert!(c.has_news());
    assert!(c.poll(100, &mut out).is_err());
}

/// A node watcher polling while the store relists (`replace`) must end with 410 or see the
/// relist's effects, never go on past it: the cursor reads its trigger's value under the
/// store lock, so it never checks the new log against a value from before the relist
/// (found by review: read before the lock, 20 of 20 rounds went on silently).
#[test]
fn a_node_cursor_polling_through_a_relist_ends_with_410() {
    let info = pods();
    let records = |rv: u64| -> Vec<Record> {
        (0..100_000)
            .map(|i| {
                let json = format!(
                    r#"{{"metadata":{{"name":"p-{i:06}","namespace":"ns"}},"spec":{{"nodeName":"node-{}"}}}}"#,
                    i % 500
                );
                Record::ingest(json.as_bytes(), &info, rv).expect("ingest")
            })
            .collect()
    };
    let store = Store::new(info.clone(), 1, records(1), StoreConfig::default());
    let filter = node_filter("node-7");
    for round in 0..10u64 {
        let rv = store.rv();
        let relisted = rv + 1;
        let mut cursor = store.watch_matching(rv, &filter).expect("cursor");
        let next = records(relisted);
        let poller = std::thread::spawn(move || {
            let mut out = Vec::new();
            loop {
                out.clear();
                match cursor.poll(256, &mut out) {
                    Err(_) => return false,
                    Ok(()) if cursor.rv() >= relisted => return true,
                    Ok(()) => {}
                }
            }
        });
        std::thread::sleep(std::time::Duration::from_millis(5));
        store.replace(relisted, next);
        let went_on = poller.join().expect("poller");
        assert!(
            !went_on,
            "round {round}: the node cursor went past the relist without 410"
        );
    }
}

/// A node's watch may start from an RV before anyone watched the node: its trigger did
/// not record those events, so the cursor reads that stretch whole, then its node's events
/// alone; a small `max` splits the reads without losing or repeating any.
#[test]
fn a_node_watch_from_before_its_trigger_misses_nothing() {
    let info = pods();
    let store = Store::new(
        info.clone(),
        1,
        Vec::<Record>::new(),
        StoreConfig::default(),
    );
    let node = node_filter;
    let mut rv = 1;
    let mut put = |i: usize, n: &str| {
        rv += 1;
        store
            .apply([Change::Put(pod(i, Some(n), rv))])
            .expect("apply");
    };
    // Before any watch of node "a": 3 of its pods among 6 of node "b".
    for i in 0..9 {
        put(i, if i % 3 == 0 { "a" } else { "b" });
    }
    let first = store.watch_matching(1, &node("a")).expect("cursor");
    // After: 4 more of "a" among 8 of "b"; then a second cursor, also from RV 1.
    for i in 9..21 {
        put(i, if i % 3 == 0 { "a" } else { "b" });
    }
    let second = store.watch_matching(1, &node("a")).expect("cursor");
    for (name, mut c) in [("first", first), ("second", second)] {
        let mut names = Vec::new();
        let mut out = Vec::new();
        for _ in 0..20 {
            out.clear();
            c.poll(2, &mut out).expect("poll");
            names.extend(
                out.iter()
                    .filter(|e| node("a").view(e).is_some())
                    .map(|e| e.object.name().to_string()),
            );
            assert!(out.len() <= 2, "{name}: at most max events a poll");
        }
        let want: Vec<String> = (0..21).step_by(3).map(|i| format!("p-{i:04}")).collect();
        assert_eq!(names, want, "{name}: every event of node a, in order, once");
        assert_eq!(c.rv(), store.rv(), "{name}: caught up");
    }
}

/// A node cursor behind by whole batches (several changes at one RV) when
/// housekeeping forgets trimmed positions reads every held event of its node, a batch at a
/// time however small `max`.
#[test]
fn a_node_cursor_behind_reads_its_events_of_one_rv_together_after_maintenance() {
    let store = store_keeping(9);
    let a = node_filter("a");
    let mut c = store.watch_matching(1, &a).expect("cursor");
    let batch = |rv: u64| {
        let i = rv as usize * 10;
        store
            .apply([
                Change::Put(pod(i, Some("a"), rv)),
                Change::Put(pod(i + 1, Some("b"), rv)),
                Change::Put(pod(i + 2, Some("a"), rv)),
            ])
            .expect("apply");
    };
    batch(2);
    let mut out = Vec::new();
    c.poll(usize::MAX, &mut out).expect("poll");
    assert_eq!(out.len(), 2);
    for rv in 3..=5 {
        batch(rv);
    }
    store.maintain();
    for rv in 3..=5 {
        out.clear();
        c.poll(1, &mut out).expect("poll");
        let got: Vec<_> = out
            .iter()
            .map(|e| (e.rv, e.object.name().to_string()))
            .collect();
        let i = rv as usize * 10;
        assert_eq!(
            got,
            [(rv, format!("p-{i:04}")), (rv, format!("p-{:04}", i + 2))],
            "batch at {rv}: both of node a's events, together"
        );
    }
    assert_eq!(c.rv(), store.rv());
}
