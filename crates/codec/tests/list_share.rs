//! Issue 27 item 2: concurrent protobuf LISTs and watch-lists of one snapshot share the
//! items one of them transcodes, send exactly the bytes a lone response sends, and hold
//! nothing once the last of them ends; a whole collection's protobuf length is summed once
//! per snapshot.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use listwatch_codec::Sharing;
use listwatch_codec::shared::SharedStats;
use listwatch_codec::{ListEncoder, Rendering, WatchEncoder, WatchSpec, WatchStep};
use listwatch_core::builtin_resource;
use listwatch_store::{Filter, Record, SnapshotReader, Store, StoreConfig};

const OBJECTS: u64 = 3_000;

fn store() -> Arc<Store> {
    store_with_unencodable(None)
}

/// The test's objects; object `bad`, if any, has a member the protobuf encoder refuses
/// (an escaped name).
fn store_with_unencodable(bad: Option<u64>) -> Arc<Store> {
    let info = builtin_resource("configmaps").expect("configmaps");
    let records = (0..OBJECTS).map(|i| {
        let extra = if Some(i) == bad { r#","x\u0041":1"# } else { "" };
        let json = format!(
            r#"{{"metadata":{{"name":"cm-{i:05}","namespace":"ns{}","labels":{{"i":"{i}"}}}},"data":{{"k":"{}"}}{extra}}}"#,
            i % 7,
            "v".repeat(100 + (i % 50) as usize)
        );
        Record::ingest(json.as_bytes(), &info, 2 + i).expect("ingest")
    });
    let records: Vec<_> = records.collect();
    Store::new(Arc::new(info), 2 + OBJECTS, records, StoreConfig::default())
}

fn list(sh: &Sharing, store: &Store, metadata: bool) -> ListEncoder {
    let reader = SnapshotReader::new(store.current(), Arc::new(Filter::everything()), None, None);
    let writer = Rendering::protobuf(metadata)
        .writer(store.info(), sh)
        .expect("writer");
    ListEncoder::new(reader, writer, String::new(), false, 16 * 1024)
}

fn watch_list(sh: &Sharing, store: &Arc<Store>, metadata: bool) -> WatchEncoder {
    watch_list_through(sh, store, metadata, &Arc::new(Filter::everything()))
}

/// A watch-list of what `filter` selects, from the store's current snapshot.
fn watch_list_through(
    sh: &Sharing,
    store: &Arc<Store>,
    metadata: bool,
    filter: &Arc<Filter>,
) -> WatchEncoder {
    let now = Instant::now();
    let snap = store.current();
    let rv = snap.rv();
    let spec = WatchSpec {
        initial: Some(Box::new(SnapshotReader::new(
            snap,
            filter.clone(),
            None,
            None,
        ))),
        initial_events_end: true,
        initial_rv: rv,
        bookmarks: true,
        bookmark_every: Duration::from_secs(60),
        deadline: now + Duration::from_secs(3600),
        chunk: 16 * 1024,
    };
    let writer = Rendering::protobuf(metadata)
        .writer(store.info(), sh)
        .expect("writer");
    let cursor = store.watch_matching(rv, filter).expect("cursor");
    WatchEncoder::new(cursor, filter.clone(), writer, spec, now)
}

/// Bodies of `n` encoders driven chunk by chunk in turn (as a storm's responses go).
fn interleaved<E>(
    mut encoders: Vec<E>,
    mut next: impl FnMut(&mut E) -> Option<Vec<u8>>,
) -> Vec<Vec<u8>> {
    let mut bodies = vec![Vec::new(); encoders.len()];
    let mut open = vec![true; encoders.len()];
    while open.iter().any(|o| *o) {
        for (i, e) in encoders.iter_mut().enumerate() {
            if !open[i] {
                continue;
            }
            match next(e) {
                Some(c) => bodies[i].extend_from_slice(&c),
                None => open[i] = false,
            }
        }
    }
    bodies
}

fn list_bodies(sh: &Sharing, store: &Store, metadata: bool, n: usize) -> Vec<Vec<u8>> {
    let encoders = (0..n).map(|_| list(sh, store, metadata)).collect();
    interleaved(encoders, |e: &mut ListEncoder| {
        e.next_chunk().map(|c| c.to_vec())
    })
}

fn watch_bodies(sh: &Sharing, store: &Arc<Store>, metadata: bool, n: usize) -> Vec<Vec<u8>> {
    let encoders = (0..n).map(|_| watch_list(sh, store, metadata)).collect();
    let now = Instant::now();
    // Up to the initial-events-end bookmark: the watch then idles.
    interleaved(encoders, |e: &mut WatchEncoder| match e.step(now) {
        WatchStep::Chunk(c) => Some(c.to_vec()),
        _ => None,
    })
}

/// Whether a protobuf LIST body's stated list length is the length it has: `k8s\0`,
/// `typeMeta` (field 1), then `raw` (field 2, the list) and the empty fields 3 and 4.
fn states_its_length(body: &[u8]) -> bool {
    let varint = |at: &mut usize| {
        let (mut v, mut shift) = (0usize, 0);
        loop {
            let b = body[*at];
            *at += 1;
            v |= ((b & 0x7f) as usize) << shift;
            if b < 0x80 {
                return v;
            }
            shift += 7;
        }
    };
    let mut at = 4;
    assert_eq!(body[at], 0x0a);
    at += 1;
    at += varint(&mut at);
    assert_eq!(body[at], 0x12);
    at += 1;
    let raw = varint(&mut at);
    at + raw + 4 == body.len()
}

fn delta(before: SharedStats, after: SharedStats) -> (u64, u64) {
    (after.hits - before.hits, after.kept - before.kept)
}

/// Sends the responses of `at_once` together, asserts that each is `lone`'s bytes (`what`
/// names them), and returns the items they found shared and kept ([`delta`]).
fn all_as_lone(
    sh: &Sharing,
    lone: &[u8],
    what: &str,
    at_once: impl FnOnce() -> Vec<Vec<u8>>,
) -> (u64, u64) {
    let before = sh.stats();
    let bodies = at_once();
    let counts = delta(before, sh.stats());
    for body in &bodies {
        assert!(body == lone, "{what} differs from a lone one");
    }
    counts
}

/// LISTs and watch-lists of one node's pods (read by the pods' node index) neither look up
/// nor keep items: a node's pods are read by that node alone, and a kubelet storm filled
/// the shared window's budget with items nobody took. Two of one namespace still share.
#[test]
fn node_scoped_responses_share_nothing() {
    // The app's window: each test has its own, so they run in parallel.
    let sh = &Sharing::default();
    use listwatch_core::fields::FieldSelector;
    use listwatch_core::labels::LabelSelector;
    let info = builtin_resource("pods").expect("pods");
    let records: Vec<_> = (0..400u64)
        .map(|i| {
            let json = format!(
                r#"{{"metadata":{{"name":"pod-{i:04}","namespace":"ns{}"}},"spec":{{"nodeName":"node-{}","containers":[{{"name":"c","image":"{}"}}]}}}}"#,
                i % 3,
                i % 4,
                "i".repeat(200)
            );
            Record::ingest(json.as_bytes(), &info, 2 + i).expect("ingest")
        })
        .collect();
    let store = Store::new(Arc::new(info), 402, records, StoreConfig::default());
    let info = store.info();
    let filter = |fields: &str, namespace: Option<&str>| {
        let fields = FieldSelector::parse(fields).expect("selector");
        Arc::new(Filter::from_parts(
            info,
            namespace,
            LabelSelector::default(),
            &fields,
        ))
    };
    let reader = |f: &Arc<Filter>| SnapshotReader::new(store.current(), f.clone(), None, None);
    let by_node = filter("spec.nodeName=node-1", None);
    let by_namespace = filter("", Some("ns1"));
    assert!(reader(&by_node).reads_by_index() && !reader(&by_namespace).reads_by_index());
    let list_of = |f: &Arc<Filter>| {
        let writer = Rendering::protobuf(false).writer(info, sh).expect("writer");
        ListEncoder::new(reader(f), writer, String::new(), false, 16 * 1024)
    };
    let now = Instant::now();
    let initial = |e: &mut WatchEncoder| match e.step(now) {
        WatchStep::Chunk(c) => Some(c),
        _ => None,
    };
    for (f, shares) in [(&by_node, false), (&by_namespace, true)] {
        let s0 = sh.stats();
        let (lists, _) = chunks_of(sh, vec![list_of(f), list_of(f)], ListEncoder::next_chunk);
        let watch_list_of = || watch_list_through(sh, &store, false, f);
        let (watches, _) = chunks_of(sh, vec![watch_list_of(), watch_list_of()], initial);
        let (hits, kept) = delta(s0, sh.stats());
        assert_eq!(joined(&lists[0]), joined(&lists[1]));
        assert_eq!(joined(&watches[0]), joined(&watches[1]));
        assert!(joined(&watches[0]).len() > 100 * 200, "the node's 100 pods");
        assert_eq!(
            (hits > 0, kept > 0),
            (shares, shares),
            "node-scoped: {}, hits {hits}, kept {kept}",
            !shares
        );
    }
    assert_eq!(sh.stats().held, 0);
}

/// A watch-list that fails in the middle of a run it claimed (an object it cannot encode)
/// and whose client then never reads again gives the claim up: a watch-list level with it
/// is never left waiting for that run (it hung there, woken by nothing).
#[test]
fn a_failed_watch_list_holds_up_no_other() {
    // The app's window: each test has its own, so they run in parallel.
    let sh = &Sharing::default();
    use std::sync::atomic::{AtomicU64, Ordering};
    let store = store_with_unencodable(Some(1_500));
    let now = Instant::now();
    let woken = Arc::new(Counter(AtomicU64::new(0)));
    let waker = std::task::Waker::from(woken.clone());
    let (mut failing, mut other) = (watch_list(sh, &store, false), watch_list(sh, &store, false));
    assert!(matches!(
        other.step_waiting(now, Some(&waker)),
        WatchStep::Chunk(_)
    ));
    loop {
        match failing.step_waiting(now, Some(&waker)) {
            WatchStep::Chunk(c) if c.windows(5).any(|w| w == b"ERROR") => break,
            WatchStep::Chunk(_) => {}
            s => panic!("the failing watch-list: {s:?}"),
        }
    }
    // `failing` is neither polled nor dropped again: its client stalled.
    let mut ended_with_error = false;
    loop {
        let before = woken.0.load(Ordering::Relaxed);
        match other.step_waiting(now, Some(&waker)) {
            WatchStep::Chunk(c) => ended_with_error |= c.windows(5).any(|w| w == b"ERROR"),
            WatchStep::Wait => assert!(
                woken.0.load(Ordering::Relaxed) > before,
                "waits for a run of the failed watch-list, which will never come"
            ),
            WatchStep::Idle { .. } | WatchStep::End => break,
        }
    }
    assert!(ended_with_error, "the other meets the object too");
    drop(failing);
    assert_eq!(sh.stats().held, 0);
}

/// Two watch-lists of one whole snapshot in step: the second sends the first's runs of
/// ADDED events as they are (the same allocations), as LISTs do, and each body is a lone
/// watch-list's; a watch-list and a LIST in step share no runs (their framing differs).
#[test]
fn level_watch_lists_send_one_response_s_runs_of_events() {
    // The app's window: each test has its own, so they run in parallel.
    let sh = &Sharing::default();
    let store = store();
    let now = Instant::now();
    let initial = |e: &mut WatchEncoder| match e.step(now) {
        WatchStep::Chunk(c) => Some(c),
        _ => None,
    };
    for metadata in [false, true] {
        let lone = watch_bodies(sh, &store, metadata, 1).remove(0);
        // A lone watch-list's runs are the ADDED events the general path encodes whole,
        // in key order, then the initial-events-end bookmark.
        let mut whole = Rendering::protobuf(metadata)
            .writer(store.info(), sh)
            .expect("writer");
        let mut events = listwatch_codec::ChunkWriter::new(1 << 30);
        let mut reader =
            SnapshotReader::new(store.current(), Arc::new(Filter::everything()), None, None);
        while reader.next_batch(usize::MAX, |r| {
            whole
                .event(&mut events, listwatch_store::EventType::Added, r, None, 0)
                .expect("event");
            true
        }) {}
        let events = events.into_vec();
        assert!(
            lone.len() > events.len() && lone.starts_with(&events),
            "a watch-list's runs are not its ADDED events (metadata={metadata})"
        );
        let s0 = sh.stats();
        let encoders = vec![
            watch_list(sh, &store, metadata),
            watch_list(sh, &store, metadata),
        ];
        let (chunks, held) = chunks_of(sh, encoders, initial);
        assert!(
            chunks.iter().all(|cs| joined(cs) == lone),
            "metadata={metadata}"
        );
        let shared = shared_bytes(&chunks[1], &chunks[0]);
        assert!(
            shared > lone.len() * 9 / 10,
            "{shared} of {} bytes sent from the other watch-list's runs (metadata={metadata})",
            lone.len()
        );
        let (hits, kept) = delta(s0, sh.stats());
        assert_eq!((hits, kept), (OBJECTS, OBJECTS), "metadata={metadata}");
        assert!(held < 4 * 32 * 1024, "the window held {held} bytes");
        assert_eq!(sh.stats().held, 0);
    }
    let s0 = sh.stats();
    let mut watch = watch_list(sh, &store, false);
    let mut list = list(sh, &store, false);
    let mut watch_chunks = Vec::new();
    loop {
        let l = list.next_chunk();
        if let Some(c) = initial(&mut watch) {
            watch_chunks.push(c);
        }
        if l.is_none() {
            break;
        }
    }
    while let Some(c) = initial(&mut watch) {
        watch_chunks.push(c);
    }
    assert_eq!(delta(s0, sh.stats()), (0, 0), "a LIST and a watch-list");
    assert!(joined(&watch_chunks) == watch_bodies(sh, &store, false, 1).remove(0));
}

/// Chunks of `n` LISTs driven in turn, as they are handed out, and the most the shared
/// window held meanwhile.
fn list_chunks(sh: &Sharing, encoders: Vec<ListEncoder>) -> (Vec<Vec<Bytes>>, usize) {
    chunks_of(sh, encoders, ListEncoder::next_chunk)
}

/// Chunks of encoders driven in turn with `next` until it gives `None`, and the most the
/// shared window held meanwhile.
fn chunks_of<E>(
    sh: &Sharing,
    mut encoders: Vec<E>,
    mut next: impl FnMut(&mut E) -> Option<Bytes>,
) -> (Vec<Vec<Bytes>>, usize) {
    let mut chunks = vec![Vec::new(); encoders.len()];
    let mut open = vec![true; encoders.len()];
    let mut held = 0;
    while open.iter().any(|o| *o) {
        for (i, e) in encoders.iter_mut().enumerate() {
            if open[i] {
                match next(e) {
                    Some(c) => chunks[i].push(c),
                    None => open[i] = false,
                }
            }
            held = held.max(sh.stats().held);
        }
    }
    (chunks, held)
}

/// Bytes of `chunks` sent by reference from one of `from` (the same allocation).
fn shared_bytes(chunks: &[Bytes], from: &[Bytes]) -> usize {
    chunks
        .iter()
        .filter(|c| from.iter().any(|l| l.as_ptr() == c.as_ptr()))
        .map(Bytes::len)
        .sum()
}

fn joined(chunks: &[Bytes]) -> Vec<u8> {
    chunks.iter().flat_map(|c| c.iter().copied()).collect()
}

/// Two LISTs of one whole snapshot in step: the second sends the first's runs of items as
/// they are (the same allocations), not copies, and a run goes as soon as both passed it.
/// LISTs of a newer snapshot take the runs whose records they share with an older one's,
/// write the rest themselves and keep those for each other: each sends its own snapshot's
/// body.
#[test]
fn level_lists_send_one_response_s_runs_and_other_snapshots_do_not_mix() {
    // The app's window: each test has its own, so they run in parallel.
    let sh = &Sharing::default();
    let store = store();
    let lone = list_bodies(sh, &store, false, 1).remove(0);
    let (chunks, held) = list_chunks(sh, vec![list(sh, &store, false), list(sh, &store, false)]);
    assert!(chunks.iter().all(|cs| joined(cs) == lone));
    let shared = shared_bytes(&chunks[1], &chunks[0]);
    assert!(
        shared > lone.len() * 9 / 10,
        "{shared} of {} bytes sent from the other LIST's runs",
        lone.len()
    );
    assert!(
        held < 4 * 32 * 1024,
        "the window held {held} bytes of runs for two level LISTs"
    );

    // An older snapshot's LIST beside two of a newer one (the lone bodies taken while no
    // other LIST reads, so that they share nothing). Two objects change, one near the
    // start and one (grown) in the middle, and the last one is deleted.
    let old_lone = list_bodies(sh, &store, false, 1).remove(0);
    let old = list(sh, &store, false);
    let info = store.info().clone();
    for (name, ns, value) in [
        ("cm-00000", 0, "a".to_string()),
        ("cm-01501", 3, "b".repeat(4000)),
    ] {
        let json = format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"ns{ns}"}},"data":{{"k":"{value}"}}}}"#
        );
        let rv = store.rv() + 1;
        store
            .apply([listwatch_store::Change::Put(
                Record::ingest(json.as_bytes(), &info, rv).expect("ingest"),
            )])
            .expect("apply");
    }
    let key = info.key("ns6", "cm-02995");
    assert!(store.current().get(&key).is_some(), "the last object");
    let rv = store.rv() + 1;
    store
        .apply([listwatch_store::Change::Delete { key, rv }])
        .expect("delete");
    let (chunks, _) = list_chunks(
        sh,
        vec![old, list(sh, &store, false), list(sh, &store, false)],
    );
    let new_lone = list_bodies(sh, &store, false, 1).remove(0);
    assert_ne!(old_lone, new_lone);
    assert!(joined(&chunks[0]) == old_lone, "the older snapshot's LIST");
    assert!(joined(&chunks[1]) == new_lone, "the newer snapshot's LIST");
    assert!(joined(&chunks[2]) == new_lone, "the second newer LIST");
    let shared = shared_bytes(&chunks[1], &chunks[0]);
    assert!(
        shared > new_lone.len() * 3 / 4,
        "{shared} of {} bytes of the newer LIST from the older one's runs",
        new_lone.len()
    );
    // The second newer LIST writes nothing itself: the runs the first wrote where the
    // older ones were not theirs are kept for it (all but the head and the tail).
    let from_others: Vec<Bytes> = chunks[0].iter().chain(&chunks[1]).cloned().collect();
    let own = new_lone.len() - shared_bytes(&chunks[2], &from_others);
    assert!(own < 200, "the second newer LIST wrote {own} bytes itself");
    assert_eq!(sh.stats().held, 0);
}

/// A LIST whose client stops reading leaves nothing claimed between two of its chunks: a
/// LIST level with it goes on (it would wait for the stalled one's next poll otherwise).
/// What it exercises is a run ended at a boundary record; one ended at its size (about one
/// in 150) hands itself out before the next is claimed the same way (`RunStep::Later`),
/// which this test caught when the size was made small.
#[test]
fn a_stalled_list_holds_up_no_other() {
    // The app's window: each test has its own, so they run in parallel.
    let sh = &Sharing::default();
    let store = store();
    let lone = list_bodies(sh, &store, false, 1).remove(0);
    let woken = Arc::new(Counter(std::sync::atomic::AtomicU64::new(0)));
    let waker = std::task::Waker::from(woken.clone());
    let (mut stalled, mut other) = (list(sh, &store, false), list(sh, &store, false));
    // Both take their head and first run; then the first is never polled again.
    let mut body = Vec::new();
    for _ in 0..2 {
        let c = stalled.poll_chunk(Some(&waker));
        assert!(matches!(c, std::task::Poll::Ready(Some(_))));
        match other.poll_chunk(Some(&waker)) {
            std::task::Poll::Ready(Some(c)) => body.extend_from_slice(&c),
            _ => panic!("the level LIST has its first chunks"),
        }
    }
    loop {
        let before = woken.0.load(std::sync::atomic::Ordering::Relaxed);
        match other.poll_chunk(Some(&waker)) {
            std::task::Poll::Ready(Some(c)) => body.extend_from_slice(&c),
            std::task::Poll::Ready(None) => break,
            std::task::Poll::Pending => assert!(
                woken.0.load(std::sync::atomic::Ordering::Relaxed) > before,
                "waits for the stalled LIST"
            ),
        }
    }
    assert!(body == lone);
    drop(stalled);
    assert_eq!(sh.stats().held, 0);
}

/// Counts its wake-ups.
struct Counter(std::sync::atomic::AtomicU64);

impl std::task::Wake for Counter {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A watch-list's initial event (framed around a shared message) is byte for byte the
/// ADDED event the general path encodes whole.
#[test]
fn initial_events_are_the_bytes_of_added_events() {
    // The app's window: each test has its own, so they run in parallel.
    let sh = &Sharing::default();
    use listwatch_codec::ChunkWriter;
    use listwatch_store::EventType;
    let store = store();
    let mut records = Vec::new();
    let mut reader = SnapshotReader::new(
        store.current(),
        Arc::new(Filter::everything()),
        None,
        Some(50),
    );
    while reader.next_batch(usize::MAX, |r| {
        records.push(r.clone());
        true
    }) {}
    for metadata in [false, true] {
        let writer = || {
            Rendering::protobuf(metadata)
                .writer(store.info(), sh)
                .expect("writer")
        };
        // Two sharing writers: the first transcodes and keeps, the second copies.
        let (mut first, mut second, mut whole) = (writer(), writer(), writer());
        first.start_sharing();
        second.start_sharing();
        for r in &records {
            let mut bodies = Vec::new();
            for w in [&mut first, &mut second] {
                let mut out = ChunkWriter::new(1 << 20);
                assert!(
                    w.initial_event(&mut out, r, 0, None)
                        .expect("initial event")
                );
                bodies.push(out.into_vec());
            }
            let mut out = ChunkWriter::new(1 << 20);
            whole
                .event(&mut out, EventType::Added, r, None, 0)
                .expect("event");
            let want = out.into_vec();
            assert!(bodies.iter().all(|b| *b == want), "metadata={metadata}");
        }
    }
}

/// What the maintenance loop measures ahead is what a LIST then states without a pass.
#[test]
fn measuring_ahead_sets_what_a_list_states() {
    // The app's window: each test has its own, so they run in parallel.
    let sh = &Sharing::default();
    use listwatch_store::record::EncodedForm;
    let store = store();
    let snap = store.current();
    assert_eq!(snap.encoded_total(EncodedForm::Object), None);
    let measured = listwatch_codec::protobuf::measure_lengths(store.info(), &snap, |_| true);
    assert_eq!(measured as u64, 2 * OBJECTS, "both forms of every record");
    assert_eq!(
        listwatch_codec::protobuf::measure_lengths(store.info(), &snap, |_| true),
        0
    );
    for (metadata, form) in [(false, EncodedForm::Object), (true, EncodedForm::Metadata)] {
        let total = snap.encoded_total(form).expect("summed ahead");
        let body = list_bodies(sh, &store, metadata, 1).remove(0);
        assert!(states_its_length(&body));
        // The list is ListMeta and the items: the items are the total.
        assert!(
            body.len() > total && body.len() < total + 200,
            "metadata={metadata}"
        );
    }
}

#[test]
fn concurrent_protobuf_responses_share_items_and_send_the_same_bytes() {
    // The app's window: each test has its own, so they run in parallel.
    let sh = &Sharing::default();
    let store = store();
    for metadata in [false, true] {
        // A lone LIST neither keeps nor finds anything.
        let s0 = sh.stats();
        let lone = list_bodies(sh, &store, metadata, 1).remove(0);
        assert_eq!(delta(s0, sh.stats()), (0, 0), "metadata={metadata}");
        assert!(lone.len() > OBJECTS as usize * 20);

        // Four at once: every object is transcoded about once and copied three times.
        let (hits, kept) = all_as_lone(
            sh,
            &lone,
            &format!("a shared LIST (metadata={metadata})"),
            || list_bodies(sh, &store, metadata, 4),
        );
        assert!(
            (OBJECTS..OBJECTS + OBJECTS / 10).contains(&kept),
            "kept {kept}"
        );
        assert!(hits >= 3 * OBJECTS - OBJECTS / 10, "hits {hits}");
        assert_eq!(sh.stats().held, 0, "items outlived the last response");

        // Watch-lists share the same items.
        let lone_watch = watch_bodies(sh, &store, metadata, 1).remove(0);
        let (hits, _) = all_as_lone(
            sh,
            &lone_watch,
            &format!("a shared watch-list (metadata={metadata})"),
            || watch_bodies(sh, &store, metadata, 3),
        );
        assert!(hits >= 2 * OBJECTS - OBJECTS / 10, "watch-list hits {hits}");
        assert_eq!(sh.stats().held, 0);
    }
}

/// Wakes a parked thread.
struct Unpark(std::thread::Thread);

impl std::task::Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Bodies of encoders each driven on a thread of its own (as a runtime's workers run
/// responses), started together so that they are level at the first items; `step` gives a
/// chunk, `Ready(None)` at the end, `Pending` to park until the waker is woken.
fn on_threads<E: Send>(
    encoders: Vec<E>,
    step: impl Fn(&mut E, &std::task::Waker) -> std::task::Poll<Option<Bytes>> + Sync,
) -> Vec<Vec<u8>> {
    let start = std::sync::Barrier::new(encoders.len());
    std::thread::scope(|scope| {
        let running: Vec<_> = encoders
            .into_iter()
            .map(|mut e| {
                let (start, step) = (&start, &step);
                scope.spawn(move || {
                    start.wait();
                    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
                    let mut body = Vec::new();
                    loop {
                        match step(&mut e, &waker) {
                            std::task::Poll::Ready(Some(c)) => body.extend_from_slice(&c),
                            std::task::Poll::Ready(None) => return body,
                            // A lost wake-up would hang here: the test's timeout catches it.
                            std::task::Poll::Pending => std::thread::park(),
                        }
                    }
                })
            })
            .collect();
        running
            .into_iter()
            .map(|t| t.join().expect("response thread"))
            .collect()
    })
}

/// LISTs and watch-lists running at once on threads of their own: one that reaches an item
/// another is transcoding waits for it, so each object is transcoded exactly once (without
/// the claims two level LISTs both transcoded it: 1.43 transcodes a pod for 8 LISTs of
/// 40,000 pods on 2 workers).
#[test]
fn responses_on_parallel_threads_transcode_each_object_once() {
    // The app's window: each test has its own, so they run in parallel.
    let sh = &Sharing::default();
    const THREADS: usize = 4;
    let store = store();
    let check = |bodies: Vec<Vec<u8>>, lone: &[u8], s0: SharedStats, what: &str| {
        let after = sh.stats();
        assert!(
            bodies.iter().all(|b| *b == lone),
            "a waiting {what} differs"
        );
        assert_eq!(
            after.kept - s0.kept,
            OBJECTS,
            "{what}: each object transcoded once"
        );
        assert_eq!(
            after.hits - s0.hits,
            (THREADS as u64 - 1) * OBJECTS,
            "{what}"
        );
        assert_eq!(after.held, 0);
        println!("{what}: {} waits", after.waits - s0.waits);
    };
    let lone = list_bodies(sh, &store, false, 1).remove(0);
    let s0 = sh.stats();
    let encoders: Vec<_> = (0..THREADS).map(|_| list(sh, &store, false)).collect();
    let bodies = on_threads(encoders, |e: &mut ListEncoder, w| e.poll_chunk(Some(w)));
    check(bodies, &lone, s0, "LIST");

    let lone = watch_bodies(sh, &store, false, 1).remove(0);
    let s0 = sh.stats();
    let encoders: Vec<_> = (0..THREADS)
        .map(|_| watch_list(sh, &store, false))
        .collect();
    let now = Instant::now();
    let bodies = on_threads(encoders, |e: &mut WatchEncoder, w| {
        match e.step_waiting(now, Some(w)) {
            WatchStep::Chunk(c) => std::task::Poll::Ready(Some(c)),
            WatchStep::Wait => std::task::Poll::Pending,
            // Up to the initial-events-end bookmark: the watch then idles.
            WatchStep::Idle { .. } | WatchStep::End => std::task::Poll::Ready(None),
        }
    });
    check(bodies, &lone, s0, "watch-list");
}

#[test]
fn a_whole_collection_s_summed_length_is_the_snapshot_s_own() {
    // The app's window: each test has its own, so they run in parallel.
    let sh = &Sharing::default();
    let store = store();
    for metadata in [false, true] {
        // Summed by the first LIST, read by the second (the same snapshot).
        let first = list_bodies(sh, &store, metadata, 1).remove(0);
        let second = list_bodies(sh, &store, metadata, 1).remove(0);
        assert!(states_its_length(&first) && first == second);
    }
    // A write makes a new snapshot whose sum is taken anew: an object grows.
    let info = store.info().clone();
    let json = format!(
        r#"{{"metadata":{{"name":"cm-00001","namespace":"ns1"}},"data":{{"k":"{}"}}}}"#,
        "w".repeat(5000)
    );
    let rv = store.rv() + 1;
    store
        .apply([listwatch_store::Change::Put(
            Record::ingest(json.as_bytes(), &info, rv).expect("ingest"),
        )])
        .expect("apply");
    for metadata in [false, true] {
        let after = list_bodies(sh, &store, metadata, 1).remove(0);
        assert!(states_its_length(&after), "metadata={metadata}");
    }
}
