//! Model-based property tests: random creates, updates, deletes and progress marks against
//! a plain BTreeMap model, checking snapshots, cursors (with filter transitions), too-old /
//! too-new, and paging with continue tokens while writes continue.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use listwatch_core::{ContinueToken, FieldSelector, LabelSelector, ResourceInfo, builtin_resource};
use listwatch_store::{
    Change, EventType, Filter, LogLimits, Record, SnapshotReader, Store, StoreConfig, StoreError,
};
use proptest::prelude::*;

const NS: [&str; 3] = ["ns0", "ns1", "ns2"];
const TIERS: [&str; 3] = ["t0", "t1", "t2"];
const PHASES: [&str; 2] = ["Running", "Pending"];

#[derive(Clone, Debug)]
enum Op {
    Put {
        ns: usize,
        name: usize,
        tier: usize,
        phase: usize,
    },
    Delete {
        ns: usize,
        name: usize,
    },
    Progress,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..3usize, 0..6usize, 0..3usize, 0..2usize)
            .prop_map(|(ns, name, tier, phase)| Op::Put { ns, name, tier, phase }),
        2 => (0..3usize, 0..6usize).prop_map(|(ns, name)| Op::Delete { ns, name }),
        1 => Just(Op::Progress),
    ]
}

type Obj = (u64, usize, usize); // (rv, tier, phase)
type State = BTreeMap<String, Obj>;

struct ModelEvent {
    rv: u64,
    kind: EventType,
    key: String,
    new: Option<Obj>,
    prev: Option<Obj>,
}

fn pods() -> Arc<ResourceInfo> {
    Arc::new(builtin_resource("pods").expect("pods"))
}

fn record(info: &ResourceInfo, key: &str, tier: usize, phase: usize, rv: u64) -> Record {
    let (ns, name) = key.split_once('/').expect("key");
    let json = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"{ns}","labels":{{"tier":"{}"}}}},"status":{{"phase":"{}"}}}}"#,
        TIERS[tier], PHASES[phase]
    );
    Record::ingest(json.as_bytes(), info, rv).expect("ingest")
}

/// The model: current state, state at every RV, and the event list.
struct Model {
    rv: u64,
    state: State,
    history: BTreeMap<u64, State>,
    events: Vec<ModelEvent>,
}

impl Model {
    fn new(rv: u64) -> Self {
        Model {
            rv,
            state: State::new(),
            history: BTreeMap::from([(rv, State::new())]),
            events: vec![],
        }
    }

    /// Applies `op` to the model and the store.
    fn step(&mut self, store: &Store, info: &ResourceInfo, op: &Op) {
        let rv = self.rv + 1;
        match *op {
            Op::Put {
                ns,
                name,
                tier,
                phase,
            } => {
                let key = format!("{}/p{name}", NS[ns]);
                let prev = self.state.insert(key.clone(), (rv, tier, phase));
                let kind = if prev.is_some() {
                    EventType::Modified
                } else {
                    EventType::Added
                };
                self.events.push(ModelEvent {
                    rv,
                    kind,
                    key: key.clone(),
                    new: Some((rv, tier, phase)),
                    prev,
                });
                store
                    .apply([Change::Put(record(info, &key, tier, phase, rv))])
                    .expect("apply put");
            }
            Op::Delete { ns, name } => {
                let key = format!("{}/p{name}", NS[ns]);
                let Some(prev) = self.state.remove(&key) else {
                    assert_eq!(
                        store.apply([Change::Delete {
                            key: key.clone(),
                            rv
                        }]),
                        Err(StoreError::UnknownDelete(key))
                    );
                    return;
                };
                self.events.push(ModelEvent {
                    rv,
                    kind: EventType::Deleted,
                    key: key.clone(),
                    new: None,
                    prev: Some(prev),
                });
                store
                    .apply([Change::Delete { key, rv }])
                    .expect("apply delete");
            }
            Op::Progress => store.progress(rv),
        }
        self.rv = rv;
        self.history.insert(rv, self.state.clone());
    }
}

#[derive(Clone, Debug)]
struct Sel {
    namespace: Option<usize>,
    label: &'static str,
    field: &'static str,
}

fn sel() -> impl Strategy<Value = Sel> {
    (
        prop::option::of(0..3usize),
        prop::sample::select(vec!["", "tier=t0", "tier!=t1", "tier in (t1,t2)", "!tier"]),
        prop::sample::select(vec![
            "",
            "status.phase=Running",
            "status.phase!=Running",
            "metadata.name=p1",
        ]),
    )
        .prop_map(|(namespace, label, field)| Sel {
            namespace,
            label,
            field,
        })
}

impl Sel {
    fn filter(&self, info: &ResourceInfo) -> Filter {
        Filter::from_parts(
            info,
            self.namespace.map(|n| NS[n]),
            LabelSelector::parse(self.label).expect("label"),
            &FieldSelector::parse(self.field).expect("field"),
        )
    }

    fn matches(&self, key: &str, o: &Obj) -> bool {
        let (ns, name) = key.split_once('/').expect("key");
        let tier = TIERS[o.1];
        let phase = PHASES[o.2];
        let ns_ok = self.namespace.is_none_or(|n| NS[n] == ns);
        let label_ok = match self.label {
            "" => true,
            "tier=t0" => tier == "t0",
            "tier!=t1" => tier != "t1",
            "tier in (t1,t2)" => tier == "t1" || tier == "t2",
            "!tier" => false,
            other => panic!("{other}"),
        };
        let field_ok = match self.field {
            "" => true,
            "status.phase=Running" => phase == "Running",
            "status.phase!=Running" => phase != "Running",
            "metadata.name=p1" => name == "p1",
            other => panic!("{other}"),
        };
        ns_ok && label_ok && field_ok
    }

    /// What a watcher with this selector must see of `e` (cacheWatcher rules).
    fn expect(&self, e: &ModelEvent) -> Option<(EventType, String, u64)> {
        let now = e.new.as_ref().is_some_and(|o| self.matches(&e.key, o));
        let before = e.prev.as_ref().is_some_and(|o| self.matches(&e.key, o));
        let kind = match (e.kind, before, now) {
            (EventType::Deleted, true, _) => EventType::Deleted,
            (EventType::Deleted, false, _) => return None,
            (_, true, true) => EventType::Modified,
            (_, false, true) => EventType::Added,
            (_, true, false) => EventType::Deleted,
            (_, false, false) => return None,
        };
        Some((kind, e.key.clone(), e.rv))
    }
}

fn config(keep_events: usize, checkpoint_every: usize) -> StoreConfig {
    StoreConfig {
        log: LogLimits {
            min_age: Duration::ZERO,
            min_events: keep_events,
            max_bytes: usize::MAX,
        },
        snapshot_retention: Duration::from_secs(3600),
        checkpoint_every,
        max_checkpoints: 1 << 20,
    }
}

/// RV of the oldest event the store may still hold: all events after it are kept.
fn model_start_rv(m: &Model, initial: u64, keep: usize) -> u64 {
    if m.events.len() > keep {
        m.events[m.events.len() - keep - 1].rv
    } else {
        initial
    }
}

fn list_keys(snap_state: &State, sel: &Sel) -> Vec<String> {
    snap_state
        .iter()
        .filter(|(k, o)| sel.matches(k, o))
        .map(|(k, _)| k.clone())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, .. ProptestConfig::default() })]

    #[test]
    fn snapshots_and_cursors_follow_the_model(
        ops in prop::collection::vec(op(), 1..60),
        keep in 2usize..40,
        checkpoint_every in 1usize..12,
        sels in prop::collection::vec(sel(), 1..4),
    ) {
        let info = pods();
        let initial = 10;
        let store = Store::new(info.clone(), initial, Vec::<listwatch_store::Record>::new(), config(keep, checkpoint_every));
        let mut m = Model::new(initial);
        for o in &ops {
            m.step(&store, &info, o);
        }
        let start = model_start_rv(&m, initial, keep);
        prop_assert_eq!(store.rv(), m.rv);

        // Every snapshot in the window equals the model's state at that RV.
        for (rv, state) in &m.history {
            match store.snapshot_at(*rv) {
                Ok(s) => {
                    let got: Vec<(String, u64)> = s.items().iter().map(|(k, r)| (k.to_string(), r.rv())).collect();
                    let want: Vec<(String, u64)> = state.iter().map(|(k, o)| (k.clone(), o.0)).collect();
                    prop_assert_eq!(got, want, "snapshot at {}", rv);
                }
                Err(StoreError::SnapshotGone { .. }) => prop_assert!(*rv < start, "rv {} >= start {}", rv, start),
                Err(e) => prop_assert!(false, "unexpected {e:?}"),
            }
        }
        let too_new = matches!(store.snapshot_at(m.rv + 1), Err(StoreError::TooNew { .. }));
        prop_assert!(too_new);

        // A cursor from every RV yields exactly the model's filtered events after it.
        for sel in &sels {
            let filter = sel.filter(&info);
            for from in initial..=m.rv {
                match store.watch_from(from) {
                    Err(StoreError::TooOld { requested, oldest }) => {
                        prop_assert!(from < start);
                        prop_assert_eq!((requested, oldest), (from, start));
                    }
                    Err(e) => prop_assert!(false, "unexpected {e:?}"),
                    Ok(mut cursor) => {
                        prop_assert!(from >= start, "from {} < start {}", from, start);
                        let mut raw = Vec::new();
                        // Small batches exercise resumption inside the log.
                        loop {
                            let before = raw.len();
                            cursor.poll(2, &mut raw).expect("poll");
                            if raw.len() == before { break; }
                        }
                        let got: Vec<_> = raw.iter().filter_map(|e| {
                            filter.view(e).map(|v| (v.kind, v.object.key().to_string(), v.stamp_rv.unwrap_or(v.object.rv())))
                        }).collect();
                        let want: Vec<_> = m.events.iter().filter(|e| e.rv > from).filter_map(|e| sel.expect(e)).collect();
                        prop_assert_eq!(got, want);
                        prop_assert_eq!(cursor.rv(), m.rv);
                    }
                }
            }
        }
    }

    #[test]
    fn paging_with_continue_tokens_is_a_consistent_snapshot(
        before in prop::collection::vec(op(), 0..40),
        during in prop::collection::vec(op(), 0..40),
        limit in 1u64..6,
        sel in sel(),
        checkpoint_every in 1usize..12,
    ) {
        let info = pods();
        let store = Store::new(info.clone(), 1, Vec::<listwatch_store::Record>::new(), config(1 << 20, checkpoint_every));
        let mut m = Model::new(1);
        for o in &before {
            m.step(&store, &info, o);
        }
        let list_rv = m.rv;
        let filter = Arc::new(sel.filter(&info));
        let prefix = filter.prefix().to_string();
        let mut pages: Vec<String> = Vec::new();
        let mut snap = store.current();
        let mut start: Option<String> = None;
        let mut writes = during.iter();
        loop {
            let mut reader = SnapshotReader::new(snap.clone(), filter.clone(), start.as_deref(), Some(limit));
            let mut page = Vec::new();
            while reader.next_batch(3, |r| { page.push(r.key().to_string()); true }) {}
            prop_assert!(page.len() as u64 <= limit);
            pages.extend(page);
            let Some(last) = reader.continue_after() else { break };
            if sel.label.is_empty() && sel.field.is_empty() {
                let remaining = reader.remaining().expect("exact count");
                let want = list_keys(&m.history[&list_rv], &sel).iter().filter(|k| k.as_str() > last.as_ref()).count();
                prop_assert_eq!(remaining as usize, want);
            }
            let token = ContinueToken::encode(snap.rv() as i64, &prefix, last);
            // Writes continue between pages.
            for o in writes.by_ref().take(3) {
                m.step(&store, &info, o);
            }
            let decoded = ContinueToken::decode(&token, &prefix).expect("decode");
            prop_assert_eq!(decoded.rv as u64, list_rv);
            snap = store.snapshot_at(decoded.rv as u64).expect("snapshot in window");
            start = Some(decoded.start_key);
        }
        prop_assert_eq!(pages, list_keys(&m.history[&list_rv], &sel));
    }
}

/// An empty store for `info` at RV 5, default config.
fn empty_at_5(info: &Arc<ResourceInfo>) -> Arc<Store> {
    Store::new(
        info.clone(),
        5,
        Vec::<Record>::new(),
        StoreConfig::default(),
    )
}

#[tokio::test]
async fn waits_for_future_rv_and_times_out() {
    let info = pods();
    let store = empty_at_5(&info);
    let s2 = store.clone();
    let waiter = tokio::spawn(async move { s2.wait_for(7, Duration::from_secs(5)).await });
    tokio::task::yield_now().await;
    store.progress(6);
    store
        .apply([Change::Put(record(&info, "ns0/a", 0, 0, 7))])
        .expect("apply");
    assert_eq!(waiter.await.expect("join"), Ok(()));
    assert_eq!(
        store.wait_for(100, Duration::from_millis(50)).await,
        Err(StoreError::TooNew {
            requested: 100,
            current: 7
        })
    );
}

#[tokio::test]
async fn cursor_from_future_rv_skips_until_then_and_wakes_on_events() {
    let info = pods();
    let store = empty_at_5(&info);
    let mut cursor = store.watch_from(7).expect("cursor");
    let s2 = store.clone();
    let i2 = info.clone();
    tokio::spawn(async move {
        for rv in 6..=8 {
            tokio::time::sleep(Duration::from_millis(5)).await;
            s2.apply([Change::Put(record(&i2, &format!("ns0/p{rv}"), 0, 0, rv))])
                .expect("apply");
        }
    });
    let mut got = Vec::new();
    let waited = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while got.is_empty() {
            cursor.changed().await;
            cursor.poll(10, &mut got).expect("poll");
        }
    })
    .await;
    assert!(waited.is_ok(), "no event reached the cursor within 10 s");
    assert_eq!(got.iter().map(|e| e.rv).collect::<Vec<_>>(), vec![8]);
    assert_eq!(cursor.rv(), 8);
}

#[test]
fn backwards_rv_is_rejected_and_relist_expires_cursors() {
    let info = pods();
    let store = empty_at_5(&info);
    store
        .apply([Change::Put(record(&info, "ns0/a", 0, 0, 6))])
        .expect("apply");
    assert_eq!(
        store.apply([Change::Put(record(&info, "ns0/b", 0, 0, 6))]),
        Err(StoreError::Backwards { rv: 6, current: 6 })
    );
    let mut cursor = store.watch_from(6).expect("cursor");
    store.replace(20, [record(&info, "ns0/z", 0, 0, 20)]);
    let mut out = Vec::new();
    assert!(matches!(
        cursor.poll(10, &mut out),
        Err(StoreError::TooOld { .. })
    ));
    assert_eq!(store.current().len(), 1);
    assert!(matches!(
        store.watch_from(6),
        Err(StoreError::TooOld {
            requested: 6,
            oldest: 20
        })
    ));
}

#[test]
fn watcher_lag_follows_the_slowest_cursor() {
    let info = pods();
    let store = empty_at_5(&info);
    assert_eq!((store.stats().watchers, store.stats().watcher_lag), (0, 0));
    let mut slow = store.watch_from(5).expect("cursor");
    let mut fast = store.watch_from(5).expect("cursor");
    for rv in 6..=10 {
        store
            .apply([Change::Put(record(&info, &format!("ns0/p{rv}"), 0, 0, rv))])
            .expect("apply");
    }
    let mut out = Vec::new();
    fast.poll(100, &mut out).expect("poll");
    assert_eq!(out.len(), 5);
    let st = store.stats();
    assert_eq!(
        (st.watchers, st.watcher_lag),
        (2, 5),
        "the slow cursor read nothing"
    );
    out.clear();
    slow.poll(2, &mut out).expect("poll");
    assert_eq!(store.stats().watcher_lag, 5 - out.len() as u64);
    drop(slow);
    let st = store.stats();
    assert_eq!(
        (st.watchers, st.watcher_lag),
        (1, 0),
        "only the caught-up cursor is left"
    );
    drop(fast);
    assert_eq!(store.stats().watchers, 0);
}
