//! Many cursors polling concurrently while events are applied: every cursor sees every
//! event exactly once, in strictly increasing RV order.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use listwatch_store::{Change, Record};

#[test]
fn concurrent_cursors_see_every_event_in_order() {
    let store = listwatch_testkit::store::empty_store("configmaps", 1);
    let info = store.info().clone();
    const EVENTS: u64 = 20_000;
    const CURSORS: usize = 400;
    let done = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for t in 0..4 {
        let (store, done) = (store.clone(), done.clone());
        readers.push(std::thread::spawn(move || {
            let mut cursors: Vec<_> = (0..CURSORS / 4)
                .map(|_| store.watch_from(1).expect("cursor"))
                .collect();
            let mut last = vec![1u64; cursors.len()];
            let mut count = vec![0u64; cursors.len()];
            let mut out = Vec::new();
            // A cursor that stops seeing events fails the test instead of spinning forever.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
            loop {
                assert!(
                    std::time::Instant::now() < deadline,
                    "cursors did not see every event within 120 s: {count:?}"
                );
                let finished = done.load(Ordering::Acquire);
                for (i, c) in cursors.iter_mut().enumerate() {
                    out.clear();
                    // Small, varying batches exercise resumption at every position.
                    c.poll(1 + (i + t) % 7, &mut out).expect("poll");
                    for e in &out {
                        assert!(e.rv > last[i], "cursor {i}: rv {} after {}", e.rv, last[i]);
                        last[i] = e.rv;
                        count[i] += 1;
                    }
                }
                if finished && count.iter().all(|c| *c == EVENTS) {
                    break;
                }
            }
        }));
    }
    for rv in 2..EVENTS + 2 {
        let name = format!("c{}", rv % 50);
        let change = if rv % 3 == 1 && store.current().get(&format!("ns/{name}")).is_some() {
            Change::Delete {
                key: format!("ns/{name}"),
                rv,
            }
        } else {
            let json = format!(
                r#"{{"metadata":{{"name":"{name}","namespace":"ns"}},"data":{{"rv":"{rv}"}}}}"#
            );
            Change::Put(Record::ingest(json.as_bytes(), &info, rv).expect("ingest"))
        };
        store.apply([change]).expect("apply");
    }
    done.store(true, Ordering::Release);
    for r in readers {
        r.join().expect("reader thread");
    }
}
