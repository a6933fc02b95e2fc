//! `EventLog`: the shared history of changes. Watchers read it through cursors (a sequence
//! number), so a slow watcher holds a position, not a private queue.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use std::time::{Duration, Instant};

use crate::record::Record;

/// The type of a watch event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    /// The object was created (or, after a filter transition, started to match).
    Added,
    /// The object changed.
    Modified,
    /// The object was deleted (or stopped matching).
    Deleted,
}

impl EventType {
    /// The wire name (`ADDED`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, shared by every watcher that reads it.
#[derive(Debug)]
pub struct Event {
    /// What happened.
    pub kind: EventType,
    /// The revision the change was committed at.
    pub rv: u64,
    /// The object after the change; for DELETED, its last state (served with `rv` stamped).
    pub object: Arc<Record>,
    /// The object before the change (MODIFIED and DELETED).
    pub prev: Option<Arc<Record>>,
    /// When the event entered the log (drives the time-based window).
    pub at: Instant,
    /// This event's encodings, made by the first watcher that needs each and shared by
    /// every later one (see [`EventLog::encodings`]).
    pub encoded: EncodedEvent,
}

impl Event {
    fn weight(&self) -> usize {
        // The new object is usually also held by the snapshot; what the log alone keeps
        // alive is the previous version. Count both to stay conservative.
        self.object.weight()
            + self.prev.as_ref().map_or(0, |p| p.weight())
            + std::mem::size_of::<Event>()
    }
}

/// The encoded forms an event keeps once made (the JSON forms need none: they are slices
/// of the record's bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventForm {
    /// The protobuf object's `k8s\0` envelope.
    Protobuf = 0,
    /// The protobuf PartialObjectMetadata's envelope.
    ProtobufMetadata = 1,
}

/// Set in [`EncodedEvent::held`] once the event has left the log: later encodings are no
/// longer the log's to count.
const DETACHED: usize = 1 << (usize::BITS - 1);

/// One event's encodings per [`EventForm`], each made at most once (`OnceLock`: a second
/// watcher arriving meanwhile waits for the first's bytes rather than encoding again) and
/// freed with the event. Two objects per form: the new object as it is, and the previous
/// object stamped with the event's RV (what a watcher whose filter it stopped matching, or
/// any watcher of a DELETED, is sent). Their bytes count in the log's byte bound.
#[derive(Debug, Default)]
pub struct EncodedEvent {
    slots: [OnceLock<Option<Bytes>>; 4],
    /// Bytes of the slots filled (plus [`DETACHED`] once out of the log).
    held: AtomicUsize,
    /// The log's count of encoded bytes, `None` for an event built outside a log.
    ledger: Option<Arc<AtomicUsize>>,
}

impl EncodedEvent {
    /// The encoding of this event's object in `form` (`stamped`: the previous object at
    /// the event's RV), made by `encode` only if no one made it before; `None` when it
    /// cannot be encoded.
    pub fn get_or_encode(
        &self,
        form: EventForm,
        stamped: bool,
        encode: impl FnOnce() -> Option<Bytes>,
    ) -> Option<Bytes> {
        let slot = &self.slots[form as usize * 2 + stamped as usize];
        slot.get_or_init(|| {
            let b = encode()?;
            self.count(b.len());
            Some(b)
        })
        .clone()
    }

    /// How many encodings this event holds.
    pub fn encodings(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.get().is_some_and(Option::is_some))
            .count()
    }

    /// Bytes of the encodings held.
    pub fn bytes(&self) -> usize {
        self.held.load(Ordering::Relaxed) & !DETACHED
    }

    /// Adds `n` encoded bytes: to the log's ledger first, then to this event, so a
    /// concurrent [`Self::detach`] either sees them (and takes them off the ledger) or
    /// makes this call take them back.
    fn count(&self, n: usize) {
        let Some(ledger) = &self.ledger else { return };
        ledger.fetch_add(n, Ordering::Relaxed);
        if self.held.fetch_add(n, Ordering::AcqRel) & DETACHED != 0 {
            ledger.fetch_sub(n, Ordering::Relaxed);
        }
    }

    /// The event leaves the log: its encodings stop counting there.
    fn detach(&self) {
        let Some(ledger) = &self.ledger else { return };
        let before = self.held.fetch_or(DETACHED, Ordering::AcqRel);
        if before & DETACHED == 0 {
            ledger.fetch_sub(before, Ordering::Relaxed);
        }
    }
}

/// Limits of the event window.
#[derive(Clone, Debug)]
pub struct LogLimits {
    /// Keep at least this much history by age.
    pub min_age: Duration,
    /// Keep at least this many events regardless of age.
    pub min_events: usize,
    /// Never keep more than this many bytes of records alive (overrides the two above).
    pub max_bytes: usize,
}

impl Default for LogLimits {
    fn default() -> Self {
        LogLimits {
            min_age: Duration::from_secs(75),
            min_events: 1024,
            max_bytes: 512 << 20,
        }
    }
}

/// The history window. Events are numbered by a sequence (`seq`) that only grows; all events
/// with `rv > start_rv` are present.
#[derive(Debug)]
pub struct EventLog {
    events: VecDeque<Arc<Event>>,
    base_seq: u64,
    start_rv: u64,
    bytes: usize,
    /// Bytes of the encodings the held events made since they were logged.
    encoded: Arc<AtomicUsize>,
    limits: LogLimits,
}

impl EventLog {
    /// An empty log whose history starts after `rv`.
    pub fn new(rv: u64, limits: LogLimits) -> Self {
        EventLog {
            events: VecDeque::new(),
            base_seq: 0,
            start_rv: rv,
            bytes: 0,
            encoded: Arc::new(AtomicUsize::new(0)),
            limits,
        }
    }

    /// Every event with RV greater than this is in the log.
    pub fn start_rv(&self) -> u64 {
        self.start_rv
    }

    /// Number of events held.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether the log holds no events.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Bytes the log keeps alive: records, events and their cached encodings.
    pub fn bytes(&self) -> usize {
        self.bytes + self.encoded_bytes()
    }

    /// Bytes of the held events' cached encodings.
    pub fn encoded_bytes(&self) -> usize {
        self.encoded.load(Ordering::Relaxed)
    }

    /// An empty encoding cache whose bytes count in this log, for an event about to be
    /// pushed.
    pub fn encodings(&self) -> EncodedEvent {
        EncodedEvent {
            ledger: Some(self.encoded.clone()),
            ..EncodedEvent::default()
        }
    }

    /// RV of the newest event, if any.
    pub fn last_rv(&self) -> Option<u64> {
        self.events.back().map(|e| e.rv)
    }

    /// The sequence number the next appended event will get.
    pub fn end_seq(&self) -> u64 {
        self.base_seq + self.events.len() as u64
    }

    /// Sequence number of the first event with RV > `rv` (or `end_seq`).
    pub fn seq_after(&self, rv: u64) -> u64 {
        self.base_seq + self.events.partition_point(|e| e.rv <= rv) as u64
    }

    /// The sequence number of the oldest event held.
    pub fn first_seq(&self) -> u64 {
        self.base_seq
    }

    /// Whether events from `seq` on are still held.
    pub fn holds(&self, seq: u64) -> bool {
        seq >= self.base_seq
    }

    /// Appends an event and trims the window.
    pub fn push(&mut self, e: Arc<Event>) {
        self.bytes += e.weight();
        self.events.push_back(e);
        self.trim(Instant::now());
    }

    /// Drops events that are outside every limit (called on push and periodically).
    pub fn trim(&mut self, now: Instant) {
        while let Some(front) = self.events.front() {
            let over_bytes = self.bytes() > self.limits.max_bytes && self.events.len() > 1;
            let old = now.duration_since(front.at) >= self.limits.min_age
                && self.events.len() > self.limits.min_events;
            if !(over_bytes || old) {
                break;
            }
            let e = self.events.pop_front().expect("front exists");
            self.bytes -= e.weight();
            e.encoded.detach();
            self.base_seq += 1;
            self.start_rv = self.start_rv.max(e.rv);
        }
    }

    /// Events from `seq` on, at most `max` (but never splitting events that share an RV).
    pub fn read_from(&self, seq: u64, max: usize, out: &mut Vec<Arc<Event>>) -> u64 {
        let end = self.end_seq();
        self.read_positions(seq.max(self.base_seq)..end, out.len(), max, out)
            .unwrap_or(end)
    }

    /// Appends the events at the given sequence numbers (ascending; those the log no longer
    /// holds are skipped), stopping when `out` has taken `max` past `counted_from` and the
    /// next event's RV differs from the last one's: then returns `Some` of the first
    /// sequence number not read.
    pub fn read_positions(
        &self,
        seqs: impl IntoIterator<Item = u64>,
        counted_from: usize,
        max: usize,
        out: &mut Vec<Arc<Event>>,
    ) -> Option<u64> {
        for seq in seqs {
            let Some(e) = seq
                .checked_sub(self.base_seq)
                .and_then(|i| self.events.get(i as usize))
            else {
                continue;
            };
            if out.len() - counted_from >= max && out.last().is_some_and(|l| l.rv != e.rv) {
                return Some(seq);
            }
            out.push(e.clone());
        }
        None
    }

    /// Events with `lo < rv <= hi`, oldest first.
    pub fn between(&self, lo: u64, hi: u64) -> Vec<Arc<Event>> {
        let from = self.events.partition_point(|e| e.rv <= lo);
        let to = self.events.partition_point(|e| e.rv <= hi);
        self.events.range(from..to).cloned().collect()
    }

    /// Forgets everything and restarts history after `rv` (relist).
    pub fn reset(&mut self, rv: u64) {
        // The extra step leaves a gap, so every existing cursor (even one fully caught up)
        // finds its position gone and ends with 410 instead of silently missing the relist.
        self.base_seq += self.events.len() as u64 + 1;
        for e in self.events.drain(..) {
            e.encoded.detach();
        }
        self.bytes = 0;
        self.start_rv = rv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(log: &EventLog, rv: u64) -> Arc<Event> {
        let info = listwatch_core::builtin_resources()
            .into_iter()
            .find(|r| r.resource == "configmaps")
            .expect("configmaps");
        let r = Record::ingest(br#"{"metadata":{"name":"a","namespace":"n"}}"#, &info, rv)
            .expect("ingest");
        Arc::new(Event {
            kind: EventType::Added,
            rv,
            object: Arc::new(r),
            prev: None,
            at: Instant::now(),
            encoded: log.encodings(),
        })
    }

    #[test]
    fn cached_encodings_count_while_logged_and_only_then() {
        let mut log = EventLog::new(0, LogLimits::default());
        let e = event(&log, 1);
        log.push(e.clone());
        let base = log.bytes();
        let made = e.encoded.get_or_encode(EventForm::Protobuf, false, || {
            Some(Bytes::from(vec![7; 100]))
        });
        assert_eq!(made.map(|b| b.len()), Some(100));
        // Made once: a second request gets the same bytes without encoding.
        let again = e
            .encoded
            .get_or_encode(EventForm::Protobuf, false, || panic!("encoded twice"));
        assert_eq!(again.map(|b| b.len()), Some(100));
        assert_eq!(log.bytes(), base + 100);
        assert_eq!(e.encoded.encodings(), 1);
        // Once out of the log, its bytes leave the count, and later encodings never join.
        log.reset(1);
        assert_eq!(log.bytes(), 0);
        e.encoded
            .get_or_encode(EventForm::ProtobufMetadata, true, || {
                Some(Bytes::from_static(b"x"))
            });
        assert_eq!(log.encoded_bytes(), 0);
    }

    #[test]
    fn the_byte_bound_counts_cached_encodings() {
        let limits = LogLimits {
            max_bytes: 10_000,
            ..LogLimits::default()
        };
        let mut log = EventLog::new(0, limits);
        let first = event(&log, 1);
        log.push(first.clone());
        log.push(event(&log, 2));
        assert_eq!(log.len(), 2);
        first.encoded.get_or_encode(EventForm::Protobuf, false, || {
            Some(Bytes::from(vec![0; 20_000]))
        });
        log.trim(Instant::now());
        assert_eq!(log.len(), 1, "the encoding pushed the log over its bound");
        assert_eq!(log.encoded_bytes(), 0);
    }
}
