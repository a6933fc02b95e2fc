//! A filtered watch reads the log in batches (`EVENTS_PER_STEP`): when a whole batch is other
//! objects' events (a kubelet's watch while the cluster's other pods churn), it must read on
//! to its own event rather than go idle on it — its wake-up channel was already marked seen.
//! Found by the full-size kubelet storm: 5,000 node watches missed most churn events.

use std::sync::Arc;
use std::time::{Duration, Instant};

use listwatch_codec::{Encoding, Rendering, WatchEncoder, WatchSpec, WatchStep};
use listwatch_core::builtin_resource;
use listwatch_core::fields::FieldSelector;
use listwatch_core::labels::LabelSelector;
use listwatch_store::{Change, Filter, Record};

fn pod(name: &str, node: &str, rv: u64) -> Record {
    let info = builtin_resource("pods").expect("pods");
    let json = format!(
        r#"{{"metadata":{{"name":"{name}","namespace":"ns"}},"spec":{{"nodeName":"{node}"}}}}"#
    );
    Record::ingest(json.as_bytes(), &info, rv).expect("ingest")
}

/// The bytes a watch on `node` sends until it goes idle.
fn drain(w: &mut WatchEncoder) -> Vec<u8> {
    let mut body = Vec::new();
    while let WatchStep::Chunk(c) = w.step(Instant::now()) {
        body.extend_from_slice(&c);
    }
    body
}

#[test]
fn a_filtered_watch_reads_past_a_batch_of_other_objects_events() {
    let store = listwatch_testkit::store::empty_store("pods", 1);
    let info = store.info().clone();
    for trigger in [false, true] {
        let fields = FieldSelector::parse("spec.nodeName=node-a").expect("selector");
        let filter = Arc::new(Filter::from_parts(
            &info,
            None,
            LabelSelector::default(),
            &fields,
        ));
        let rv = store.rv();
        let cursor = if trigger {
            store.watch_matching(rv, &filter).expect("cursor")
        } else {
            store.watch_from(rv).expect("cursor")
        };
        let spec = WatchSpec {
            initial: None,
            initial_events_end: false,
            initial_rv: rv,
            bookmarks: false,
            bookmark_every: Duration::from_secs(60),
            deadline: Instant::now() + Duration::from_secs(3600),
            chunk: 16 * 1024,
        };
        let writer = Rendering::objects(Encoding::Json)
            .writer(&info, &listwatch_codec::Sharing::default())
            .expect("writer");
        let mut w = WatchEncoder::new(cursor, filter, writer, spec, Instant::now());
        // A thousand events of another node, then one of this watch's.
        for i in 0..1000 {
            let rv = store.rv() + 1;
            store
                .apply([Change::Put(pod(&format!("b-{trigger}-{i}"), "node-b", rv))])
                .expect("apply");
        }
        let rv = store.rv() + 1;
        store
            .apply([Change::Put(pod(&format!("a-{trigger}"), "node-a", rv))])
            .expect("apply");
        let body = String::from_utf8(drain(&mut w)).expect("json");
        assert!(
            body.contains(&format!("\"a-{trigger}\"")),
            "the watch went idle before its own event (trigger={trigger})"
        );
        assert!(!body.contains("node-b"));
    }
}
