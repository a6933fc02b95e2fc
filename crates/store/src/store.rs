//! `Store`: one resource's cache — the current snapshot, retained snapshots, the event log
//! and the clock — and `WatchCursor`, a watcher's position in the log.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use listwatch_core::ResourceInfo;
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::beacon::{Beacon, BeaconReceiver};
use crate::event_log::{Event, EventLog, EventType, LogLimits};
use crate::record::{EncodedForm, Record};
use crate::snapshot::{FieldIndex, Filter, RecordMap, Snapshot};

/// Tunables of a store.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// Event window limits.
    pub log: LogLimits,
    /// How long retained snapshots (for `Exact` RVs and continue tokens) are kept.
    pub snapshot_retention: Duration,
    /// Keep a snapshot every this many events, so reconstructing any RV in the window
    /// undoes at most this many events.
    pub checkpoint_every: usize,
    /// Upper bound on retained snapshots.
    pub max_checkpoints: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            log: LogLimits::default(),
            snapshot_retention: Duration::from_secs(75),
            checkpoint_every: 128,
            max_checkpoints: 4096,
        }
    }
}

/// Errors of the store's read and write paths.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The requested RV is older than the history the store holds.
    #[error("too old resource version: {requested} ({oldest})")]
    TooOld {
        /// What was asked for.
        requested: u64,
        /// All changes after this RV are held.
        oldest: u64,
    },
    /// A LIST asked for a collection exactly at an RV older than the history held.
    #[error("snapshot at {requested} is gone (oldest {oldest})")]
    SnapshotGone {
        /// What was asked for.
        requested: u64,
        /// The oldest RV a snapshot can still be rebuilt at.
        oldest: u64,
    },
    /// The requested RV is newer than the store has reached.
    #[error("Too large resource version: {requested}, current: {current}")]
    TooNew {
        /// What was asked for.
        requested: u64,
        /// The store's current RV.
        current: u64,
    },
    /// A change arrived with an RV not after the current one (the source is inconsistent).
    #[error("resourceVersion {rv} is not after the store's {current}")]
    Backwards {
        /// The change's RV.
        rv: u64,
        /// The store's current RV.
        current: u64,
    },
    /// A delete named an object the store does not have (an event was lost).
    #[error("delete of unknown object {0}")]
    UnknownDelete(String),
}

/// The open cursors' log positions. Ended cursors leave dead entries, dropped whenever the
/// list has doubled since the last pruning, so it stays within about twice the open
/// watches even when nobody reads the stats.
#[derive(Default)]
struct CursorPositions {
    live: Vec<Weak<AtomicU64>>,
    prune_at: usize,
}

impl CursorPositions {
    fn add(&mut self, position: &Arc<AtomicU64>) {
        if self.live.len() >= self.prune_at {
            self.prune();
        }
        self.live.push(Arc::downgrade(position));
    }

    fn prune(&mut self) {
        self.live.retain(|c| c.strong_count() > 0);
        self.prune_at = (2 * self.live.len()).max(64);
    }
}

/// Wake-up channels of watchers selecting one value of the indexed field (kube cacher's
/// triggers): an event wakes only the channels of its object's and previous object's
/// values. Each holds a log end sequence at or after the last event for its value, so a
/// cursor knows whether events trimmed before it read them could have concerned it.
#[derive(Default)]
struct Triggers {
    by_value: HashMap<Arc<str>, ValueTrigger>,
    prune_at: usize,
}

/// One watched value: its wake-up channel and where its events are in the log, so that its
/// cursors read those events alone instead of every event since they last read (a node's
/// kubelet woken every few seconds would otherwise match thousands of other nodes' events).
struct ValueTrigger {
    beacon: Arc<Beacon>,
    /// Log sequence numbers of this value's events from `since` on, ascending.
    seqs: VecDeque<u64>,
    /// Events before this sequence number were not recorded (no one watched the value).
    since: u64,
}

impl Triggers {
    /// A receiver for `value` and the value's key; a new channel starts at `end` (events
    /// before it may be for this value: a cursor behind it is never told otherwise).
    fn subscribe(&mut self, value: &str, end: u64) -> (Arc<str>, BeaconReceiver) {
        if self.by_value.len() >= self.prune_at {
            self.by_value.retain(|_, t| t.beacon.receiver_count() > 0);
            self.prune_at = (2 * self.by_value.len()).max(64);
        }
        if let Some((key, t)) = self.by_value.get_key_value(value) {
            return (key.clone(), t.beacon.subscribe());
        }
        let key: Arc<str> = value.into();
        let t = ValueTrigger {
            beacon: Beacon::new(end),
            seqs: VecDeque::new(),
            since: end,
        };
        let rx = t.beacon.subscribe();
        self.by_value.insert(key.clone(), t);
        (key, rx)
    }

    /// Forgets positions of events the log no longer holds.
    fn forget_before(&mut self, first: u64) {
        for t in self.by_value.values_mut() {
            let gone = t.seqs.partition_point(|s| *s < first);
            t.seqs.drain(..gone);
        }
    }
}

/// The one mapping of store errors to API errors (kube-apiserver's wording for each).
impl From<StoreError> for listwatch_core::ApiError {
    fn from(e: StoreError) -> Self {
        use listwatch_core::ApiError;
        match e {
            // A watch (or a cursor) whose history is gone: the message is the error's own.
            StoreError::TooOld { .. } => ApiError::Expired(e.to_string()),
            StoreError::SnapshotGone { .. } => {
                ApiError::Expired(listwatch_core::status::LIST_TOO_OLD_MESSAGE.into())
            }
            StoreError::TooNew { requested, current } => {
                ApiError::ResourceVersionTooLarge { requested, current }
            }
            StoreError::Backwards { .. } | StoreError::UnknownDelete(_) => {
                ApiError::Internal(e.to_string())
            }
        }
    }
}

/// A change to apply, at the RV the source committed it at.
#[derive(Debug)]
pub enum Change {
    /// Create or update (the record carries its RV).
    Put(Record),
    /// Delete the object at `key`, committed at `rv`.
    Delete {
        /// Store key.
        key: String,
        /// Deletion revision.
        rv: u64,
    },
}

impl Change {
    fn rv(&self) -> u64 {
        match self {
            Change::Put(r) => r.rv(),
            Change::Delete { rv, .. } => *rv,
        }
    }
}

/// Figures describing a store's memory and history.
#[derive(Clone, Debug, Default)]
pub struct StoreStats {
    /// Objects in the current snapshot.
    pub objects: usize,
    /// Bytes of serialized objects in the current snapshot.
    pub object_bytes: usize,
    /// Events held.
    pub events: usize,
    /// Bytes the event log keeps alive.
    pub event_bytes: usize,
    /// Oldest RV a watch can start from.
    pub oldest_rv: u64,
    /// Current RV.
    pub rv: u64,
    /// Retained snapshots.
    pub snapshots: usize,
    /// Open watch cursors.
    pub watchers: usize,
    /// Events the slowest cursor has yet to read (0 with no cursors): a pull cursor only
    /// records where it is, so a stalled client shows here instead of in memory.
    pub watcher_lag: u64,
}

struct Inner {
    current: Snapshot,
    object_bytes: usize,
    log: EventLog,
    checkpoints: VecDeque<(Instant, Snapshot)>,
    since_checkpoint: usize,
}

/// [`Store`]'s drain value when no drain is asked for.
const NOT_DRAINING: u64 = u64::MAX;

/// One resource's cache. Writers call [`Store::apply`] and [`Store::progress`]; readers take
/// snapshots and cursors. The lock is held only to swap pointers, never while serving.
pub struct Store {
    info: Arc<ResourceInfo>,
    config: StoreConfig,
    inner: Mutex<Inner>,
    /// Current RV (events and progress marks); LIST waiters watch this.
    clock: watch::Sender<u64>,
    /// End sequence of the event log; watchers wait on this, so progress marks on idle
    /// resources wake nobody.
    head: Arc<Beacon>,
    /// Whether the source vouches for this cache. A source clears it the moment it finds
    /// the cache may be stale (a lost event, a compaction) and sets it after a relist;
    /// readers refuse an unready store instead of serving stale data.
    ready: AtomicBool,
    /// Set when the resource stops being served (removed from the registry at runtime).
    retired: AtomicBool,
    /// `Some(grace)` once open watches must end, each at a random moment within `grace`
    /// (server shutdown or this resource's removal). Read by watches when their cursor
    /// wakes, so no channel: `drain_watches` wakes the cursors. The grace in nanoseconds,
    /// [`NOT_DRAINING`] when none: every woken watch reads it, so no lock.
    drain: AtomicU64,
    /// Where each open cursor is in the log (its next sequence number).
    cursors: Mutex<CursorPositions>,
    /// The selectable field snapshots index and watchers are woken by (pods: node).
    index_field: Option<usize>,
    /// Locked after `inner` when both are held (and a beacon's wakers after both).
    triggers: Mutex<Triggers>,
    /// The protobuf forms ([`EncodedForm`] bits) LISTs have asked of this resource: the
    /// housekeeping loop keeps only their lengths measured as objects change.
    listed_forms: AtomicU8,
}

impl Store {
    /// A store holding `records` at `rv`.
    pub fn new(
        info: Arc<ResourceInfo>,
        rv: u64,
        records: impl IntoIterator<Item = impl Into<Arc<Record>>>,
        config: StoreConfig,
    ) -> Arc<Store> {
        let (items, bytes) = build_map(records);
        let index_field = indexed_field(&info);
        let index = index_field.map(|f| FieldIndex::build(f, &items));
        let current = Snapshot::indexed(rv, items, index);
        let inner = Inner {
            checkpoints: VecDeque::from([(Instant::now(), current.clone())]),
            current,
            object_bytes: bytes,
            log: EventLog::new(rv, config.log.clone()),
            since_checkpoint: 0,
        };
        Arc::new(Store {
            info,
            config,
            inner: Mutex::new(inner),
            clock: watch::Sender::new(rv),
            head: Beacon::new(0),
            ready: AtomicBool::new(true),
            retired: AtomicBool::new(false),
            drain: AtomicU64::new(NOT_DRAINING),
            cursors: Mutex::new(CursorPositions::default()),
            index_field,
            triggers: Mutex::new(Triggers::default()),
            listed_forms: AtomicU8::new(0),
        })
    }

    /// The resource this store serves.
    pub fn info(&self) -> &Arc<ResourceInfo> {
        &self.info
    }

    /// Whether the source currently vouches for this cache (see [`Store::set_ready`]).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Marks the cache trusted (`true`, after a load or relist) or untrusted (`false`).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    /// Ends every open watch on this store, each at a random moment within `grace`, so
    /// their clients reconnect spread out. Every cursor is woken to read the signal: a
    /// watch waits on its cursor alone, not on a second channel it would carry for life.
    pub fn drain_watches(&self, grace: Duration) {
        let nanos =
            u64::try_from(grace.as_nanos()).map_or(NOT_DRAINING - 1, |n| n.min(NOT_DRAINING - 1));
        self.drain.store(nanos, Ordering::Release);
        self.head.touch();
        for t in self.triggers.lock().by_value.values() {
            t.beacon.touch();
        }
    }

    /// Takes back [`Store::drain_watches`] (the cause passed: a source answers again), so
    /// new watches run normally; watches already ending still end. A retired store stays
    /// drained.
    pub fn cancel_drain(&self) {
        if !self.is_retired() {
            self.drain.store(NOT_DRAINING, Ordering::Release);
        }
    }

    /// `Some(grace)` once open watches must end ([`Store::drain_watches`]); a watch reads it
    /// when its cursor wakes.
    pub fn draining(&self) -> Option<Duration> {
        match self.drain.load(Ordering::Acquire) {
            NOT_DRAINING => None,
            nanos => Some(Duration::from_nanos(nanos)),
        }
    }

    /// Stops serving this resource: new requests see it as unknown (404) and open watches
    /// end within `grace`.
    pub fn retire(&self, grace: Duration) {
        self.retired.store(true, Ordering::Release);
        self.drain_watches(grace);
    }

    /// Notes that a LIST asked for this resource's items in protobuf `form`.
    pub fn note_listed_form(&self, form: EncodedForm) {
        self.listed_forms
            .fetch_or(1 << form as u8, Ordering::Relaxed);
    }

    /// Whether a LIST has asked for this resource's items in protobuf `form` since start.
    pub fn listed_form(&self, form: EncodedForm) -> bool {
        self.listed_forms.load(Ordering::Relaxed) & (1 << form as u8) != 0
    }

    /// Whether [`Store::retire`] was called.
    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// The current RV.
    pub fn rv(&self) -> u64 {
        *self.clock.borrow()
    }

    /// The current snapshot (O(1)).
    pub fn current(&self) -> Snapshot {
        self.inner.lock().current.clone()
    }

    /// Applies changes in order; events become visible to readers together at the end.
    /// Each change's RV must be after the store's RV (changes of one batch may share one).
    pub fn apply(&self, changes: impl IntoIterator<Item = Change>) -> Result<(), StoreError> {
        let mut g = self.inner.lock();
        let start_rv = g.current.rv();
        let mut batch_rv = None;
        let mut items = g.current.items().clone();
        let mut index = g.current.index().cloned();
        // Objects whose field values the batch's events touch (to wake their watchers).
        let mut touched: Vec<(u64, Arc<Record>)> = Vec::new();
        let mut n = 0;
        let mut result = Ok(());
        for change in changes {
            let rv = change.rv();
            let ok = rv > start_rv.max(batch_rv.unwrap_or(0)) || batch_rv == Some(rv);
            if !ok {
                result = Err(StoreError::Backwards {
                    rv,
                    current: batch_rv.unwrap_or(start_rv),
                });
                break;
            }
            let event = match change {
                Change::Put(record) => {
                    let record = Arc::new(record);
                    let prev = items.insert(record.key().clone(), record.clone());
                    if let Some(ix) = &mut index {
                        if let Some(p) = &prev {
                            ix.remove(p);
                        }
                        ix.insert(&record);
                    }
                    g.object_bytes += record.bytes().len();
                    if let Some(p) = &prev {
                        g.object_bytes -= p.bytes().len();
                    }
                    let kind = if prev.is_some() {
                        EventType::Modified
                    } else {
                        EventType::Added
                    };
                    Event {
                        kind,
                        rv,
                        object: record,
                        prev,
                        at: Instant::now(),
                        encoded: g.log.encodings(),
                    }
                }
                Change::Delete { key, rv } => match items.remove(key.as_str()) {
                    Some(prev) => {
                        g.object_bytes -= prev.bytes().len();
                        if let Some(ix) = &mut index {
                            ix.remove(&prev);
                        }
                        Event {
                            kind: EventType::Deleted,
                            rv,
                            object: prev.clone(),
                            prev: Some(prev),
                            at: Instant::now(),
                            encoded: g.log.encodings(),
                        }
                    }
                    None => {
                        result = Err(StoreError::UnknownDelete(key));
                        break;
                    }
                },
            };
            batch_rv = Some(rv);
            if self.index_field.is_some() {
                let seq = g.log.end_seq();
                touched.push((seq, event.object.clone()));
                touched.extend(event.prev.clone().map(|p| (seq, p)));
            }
            g.log.push(Arc::new(event));
            n += 1;
        }
        if let Some(rv) = batch_rv {
            g.current = Snapshot::indexed(rv, items, index);
            g.since_checkpoint += n;
            if g.since_checkpoint >= self.config.checkpoint_every {
                let snap = g.current.clone();
                self.push_checkpoint(&mut g, snap);
            }
            self.publish(g, rv, Some(&touched));
        }
        result
    }

    /// Wakes the watchers of the touched objects' field values (all of them when
    /// `touched` is `None`: a relist), still under the lock so a trigger is never behind
    /// the log; then releases it and wakes LIST waiters (clock) and watchers (log head).
    fn publish(
        &self,
        g: parking_lot::MutexGuard<'_, Inner>,
        rv: u64,
        touched: Option<&[(u64, Arc<Record>)]>,
    ) {
        let end = g.log.end_seq();
        if let Some(f) = self.index_field {
            let mut triggers = self.triggers.lock();
            match touched {
                _ if triggers.by_value.is_empty() => {}
                None => triggers.by_value.values().for_each(|t| t.beacon.send(end)),
                Some(records) => {
                    let first = g.log.first_seq();
                    for (seq, r) in records {
                        if let Some(t) = triggers.by_value.get_mut(r.field(f).unwrap_or("")) {
                            // Bounded by the log without `maintain`: positions it trimmed go.
                            while t.seqs.front().is_some_and(|s| *s < first) {
                                t.seqs.pop_front();
                            }
                            // An update within one value is both its object and its previous.
                            if t.seqs.back() != Some(seq) {
                                t.seqs.push_back(*seq);
                            }
                            t.beacon.send(end);
                        }
                    }
                }
            }
        }
        drop(g);
        self.clock.send_replace(rv);
        self.head.send(end);
    }

    /// Declares that nothing happened up to `rv` (a source progress mark): readers waiting
    /// for `rv` proceed and bookmarks may report it.
    pub fn progress(&self, rv: u64) {
        let mut g = self.inner.lock();
        if rv > g.current.rv() {
            g.current = g.current.at(rv);
            drop(g);
            self.clock.send_replace(rv);
        }
    }

    /// [`Self::progress`] only while the store is still at `from` (nothing applied or
    /// replaced since a source compared the cache at `from` with its truth); whether it did.
    pub fn progress_from(&self, from: u64, rv: u64) -> bool {
        let mut g = self.inner.lock();
        if g.current.rv() != from {
            return false;
        }
        if rv > from {
            g.current = g.current.at(rv);
            drop(g);
            self.clock.send_replace(rv);
        }
        true
    }

    /// Replaces the whole content at `rv` (after a relist). History is dropped, so every
    /// open watch ends with 410 and clients relist, as after a kube-apiserver cache reset.
    pub fn replace(&self, rv: u64, records: impl IntoIterator<Item = impl Into<Arc<Record>>>) {
        let (items, bytes) = build_map(records);
        let index = self.index_field.map(|f| FieldIndex::build(f, &items));
        let mut g = self.inner.lock();
        g.current = Snapshot::indexed(rv, items, index);
        g.object_bytes = bytes;
        g.log.reset(rv);
        g.checkpoints.clear();
        let snap = g.current.clone();
        self.push_checkpoint(&mut g, snap);
        self.publish(g, rv, None);
    }

    /// Waits (without polling) until the store reaches `rv`, at most `timeout`.
    pub async fn wait_for(&self, rv: u64, timeout: Duration) -> Result<(), StoreError> {
        let mut rx = self.clock.subscribe();
        match tokio::time::timeout(timeout, rx.wait_for(|v| *v >= rv)).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(StoreError::TooNew {
                requested: rv,
                current: self.rv(),
            }),
        }
    }

    /// The collection exactly as it was at `rv`: from a retained snapshot, or rebuilt by
    /// undoing the logged events between `rv` and the next retained snapshot.
    pub fn snapshot_at(&self, rv: u64) -> Result<Snapshot, StoreError> {
        let g = self.inner.lock();
        let current = g.current.rv();
        if rv > current {
            return Err(StoreError::TooNew {
                requested: rv,
                current,
            });
        }
        if rv == current {
            return Ok(g.current.clone());
        }
        let idx = g.checkpoints.partition_point(|(_, s)| s.rv() < rv);
        if let Some((_, s)) = g.checkpoints.get(idx).filter(|(_, s)| s.rv() == rv) {
            return Ok(s.clone());
        }
        if rv < g.log.start_rv() {
            return Err(StoreError::SnapshotGone {
                requested: rv,
                oldest: g.log.start_rv(),
            });
        }
        let base = g
            .checkpoints
            .get(idx)
            .map(|(_, s)| s.clone())
            .unwrap_or_else(|| g.current.clone());
        let events = g.log.between(rv, base.rv());
        drop(g);
        let mut items = base.items().clone();
        let mut index = base.index().cloned();
        for e in events.iter().rev() {
            if let Some(ix) = &mut index {
                ix.remove(&e.object);
            }
            match (&e.kind, &e.prev) {
                (EventType::Added, _) | (_, None) => {
                    items.remove(e.object.key().as_ref());
                }
                (_, Some(prev)) => {
                    items.insert(prev.key().clone(), prev.clone());
                    if let Some(ix) = &mut index {
                        ix.insert(prev);
                    }
                }
            }
        }
        Ok(Snapshot::indexed(rv, items, index))
    }

    /// Keeps `snap` for the retention window so later pages of a paged LIST (continue
    /// tokens) are served from it directly.
    pub fn retain(&self, snap: &Snapshot) {
        let mut g = self.inner.lock();
        let idx = g.checkpoints.partition_point(|(_, s)| s.rv() < snap.rv());
        if g.checkpoints
            .get(idx)
            .is_some_and(|(_, s)| s.rv() == snap.rv())
        {
            return;
        }
        g.checkpoints.insert(idx, (Instant::now(), snap.clone()));
        self.trim_checkpoints(&mut g, Instant::now());
    }

    fn push_checkpoint(&self, g: &mut Inner, snap: Snapshot) {
        g.since_checkpoint = 0;
        if g.checkpoints
            .back()
            .is_some_and(|(_, s)| s.rv() >= snap.rv())
        {
            return;
        }
        g.checkpoints.push_back((Instant::now(), snap));
        self.trim_checkpoints(g, Instant::now());
    }

    fn trim_checkpoints(&self, g: &mut Inner, now: Instant) {
        let retention = self.config.snapshot_retention;
        while g.checkpoints.len() > self.config.max_checkpoints
            || g.checkpoints
                .front()
                .is_some_and(|(at, _)| now.duration_since(*at) > retention)
        {
            g.checkpoints.pop_front();
        }
    }

    /// A cursor delivering every event with RV > `rv`, or `TooOld` if some are gone.
    pub fn watch_from(self: &Arc<Self>, rv: u64) -> Result<WatchCursor, StoreError> {
        self.watch_cursor(rv, None)
    }

    /// A cursor for a watch through `filter`: as [`Store::watch_from`], but one selecting a
    /// single value of the indexed field (a kubelet's node) is woken only by events whose
    /// object, new or previous, has that value.
    pub fn watch_matching(
        self: &Arc<Self>,
        rv: u64,
        filter: &Filter,
    ) -> Result<WatchCursor, StoreError> {
        let value = self.index_field.and_then(|f| filter.field_equals(f));
        self.watch_cursor(rv, value)
    }

    fn watch_cursor(
        self: &Arc<Self>,
        rv: u64,
        trigger_value: Option<&str>,
    ) -> Result<WatchCursor, StoreError> {
        let g = self.inner.lock();
        if rv < g.log.start_rv() {
            return Err(StoreError::TooOld {
                requested: rv,
                oldest: g.log.start_rv(),
            });
        }
        let seq = g.log.seq_after(rv);
        let (value, trigger) = match trigger_value {
            Some(v) => {
                let (key, rx) = self.triggers.lock().subscribe(v, g.log.end_seq());
                (Some(key), Some(rx))
            }
            None => (None, None),
        };
        drop(g);
        let position = Arc::new(AtomicU64::new(seq));
        self.cursors.lock().add(&position);
        Ok(WatchCursor {
            store: self.clone(),
            seq,
            rv,
            signal: trigger.unwrap_or_else(|| self.head.subscribe()),
            value,
            position,
            behind: false,
        })
    }

    /// Time-based housekeeping: trims the event window and retained snapshots.
    pub fn maintain(&self) {
        let now = Instant::now();
        let mut g = self.inner.lock();
        g.log.trim(now);
        self.triggers.lock().forget_before(g.log.first_seq());
        self.trim_checkpoints(&mut g, now);
    }

    /// Current figures.
    pub fn stats(&self) -> StoreStats {
        let (watchers, slowest) = {
            let mut cursors = self.cursors.lock();
            cursors.prune();
            let slowest = cursors
                .live
                .iter()
                .filter_map(Weak::upgrade)
                .map(|p| p.load(Ordering::Relaxed))
                .min();
            (cursors.live.len(), slowest)
        };
        let g = self.inner.lock();
        let end = g.log.end_seq();
        StoreStats {
            watchers,
            watcher_lag: slowest.map_or(0, |s| end.saturating_sub(s)),
            objects: g.current.len(),
            object_bytes: g.object_bytes,
            events: g.log.len(),
            event_bytes: g.log.bytes(),
            oldest_rv: g.log.start_rv(),
            rv: g.current.rv(),
            snapshots: g.checkpoints.len(),
        }
    }
}

/// The selectable field a resource's snapshots index: pods' `spec.nodeName`, which every
/// kubelet lists and watches by.
fn indexed_field(info: &ResourceInfo) -> Option<usize> {
    if info.group.is_empty() && info.resource == "pods" {
        info.field_selectors
            .iter()
            .position(|f| f == "spec.nodeName")
    } else {
        None
    }
}

fn build_map(records: impl IntoIterator<Item = impl Into<Arc<Record>>>) -> (RecordMap, usize) {
    let mut bytes = 0;
    let items: RecordMap = records
        .into_iter()
        .map(|r| {
            let r: Arc<Record> = r.into();
            bytes += r.bytes().len();
            (r.key().clone(), r)
        })
        .collect();
    (items, bytes)
}

/// A watcher's position in a store's event log. Costs a sequence number and an RV however
/// far behind the watcher is; if the log drops events the cursor still needs, reading
/// returns `TooOld`.
pub struct WatchCursor {
    store: Arc<Store>,
    seq: u64,
    rv: u64,
    /// What the cursor waits on: its value's trigger (see [`Triggers`]) or the log head.
    signal: BeaconReceiver,
    /// The indexed field's value whose trigger `signal` is (its value: the log end at the
    /// value's last event); the cursor reads that value's events alone.
    value: Option<Arc<str>>,
    /// `seq`, published for the store's watcher-lag figure.
    position: Arc<AtomicU64>,
    /// The last poll stopped short of the log's end (its `max`): there is more to read
    /// though no channel will say so (the poll marked them seen).
    behind: bool,
}

impl WatchCursor {
    /// Every change up to this RV has been delivered.
    pub fn rv(&self) -> u64 {
        self.rv
    }

    /// The store this cursor reads.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Appends available events (about `max`, never splitting one RV) to `out` without
    /// waiting. When the cursor catches up, its RV advances to the store's RV.
    pub fn poll(&mut self, max: usize, out: &mut Vec<Arc<Event>>) -> Result<(), StoreError> {
        let g = self.store.inner.lock();
        // Read under the store lock, which trigger sends hold: the value then matches this
        // log (read before it, a relist or trim in between was checked against the old
        // value and skipped silently instead of ending with 410).
        let signalled = self.signal.borrow_and_update();
        let last_relevant = self.value.is_some().then_some(signalled);
        if !g.log.holds(self.seq) {
            // A value-triggered cursor sleeps through other values' events; those trimmed
            // meanwhile are skipped when none of its value's came after its position.
            if last_relevant.is_none_or(|end| end > self.seq) {
                return Err(StoreError::TooOld {
                    requested: self.rv,
                    oldest: g.log.start_rv(),
                });
            }
            self.seq = g.log.first_seq();
            self.rv = self.rv.max(g.log.start_rv());
        }
        let before = out.len();
        self.seq = match &self.value {
            Some(value) => self.read_value(&g.log, value, before, max, out),
            None => g.log.read_from(self.seq, max, out),
        };
        self.position.store(self.seq, Ordering::Relaxed);
        let caught_up = self.seq == g.log.end_seq();
        self.behind = !caught_up;
        let current = g.current.rv();
        drop(g);
        // A cursor opened at a future RV skips events up to that RV.
        let floor = self.rv;
        let mut kept = before;
        for i in before..out.len() {
            if out[i].rv > floor {
                out.swap(kept, i);
                kept += 1;
            }
        }
        out.truncate(kept);
        if let Some(last) = out.last().filter(|_| kept > before) {
            self.rv = self.rv.max(last.rv);
        }
        if caught_up {
            self.rv = self.rv.max(current);
        }
        Ok(())
    }

    /// Reads from `seq` on the events of the cursor's value only, by the positions its
    /// trigger recorded (all events before the trigger recorded any); returns where the
    /// next read starts (the log's end once nothing of the value is left).
    fn read_value(
        &self,
        log: &crate::event_log::EventLog,
        value: &str,
        before: usize,
        max: usize,
        out: &mut Vec<Arc<Event>>,
    ) -> u64 {
        let triggers = self.store.triggers.lock();
        let Some(t) = triggers.by_value.get(value) else {
            // Not reachable while this cursor holds the trigger's receiver; read it all.
            return log.read_from(self.seq, max, out);
        };
        let mut seq = self.seq.max(log.first_seq());
        if seq < t.since {
            if let Some(stop) = log.read_positions(seq..t.since, before, max, out) {
                return stop;
            }
            seq = t.since;
        }
        let from = t.seqs.partition_point(|s| *s < seq);
        log.read_positions(t.seqs.range(from..).copied(), before, max, out)
            .unwrap_or(log.end_seq())
    }

    /// Whether the log may have news for this cursor since it last polled.
    pub fn has_news(&self) -> bool {
        if self.behind {
            return true;
        }
        self.signal.has_changed()
    }

    /// Ready when the log may have new events for this cursor; otherwise the task is woken
    /// when it may (polled, so a waiting watch holds no future: see [`Beacon`]). Unlike
    /// tokio's `changed()` it marks nothing seen: [`WatchCursor::poll`] does.
    pub fn poll_changed(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        if self.behind {
            return std::task::Poll::Ready(());
        }
        self.signal.poll_changed(cx)
    }

    /// Waits until the log may have new events for this cursor.
    pub async fn changed(&mut self) {
        std::future::poll_fn(|cx| self.poll_changed(cx)).await
    }
}
