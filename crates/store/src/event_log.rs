//! `EventLog`: the shared history of changes. Watchers read it through cursors (a sequence
//! number), so a slow watcher holds a position, not a private queue.

use std::collections::VecDeque;
use std::sync::Arc;
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
}

impl Event {
    fn weight(&self) -> usize {
        // The new object is usually also held by the snapshot; what the log alone keeps
        // alive is the previous version. Count both to stay conservative.
        self.object.weight() + self.prev.as_ref().map_or(0, |p| p.weight())
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

    /// Bytes of records the log keeps alive.
    pub fn bytes(&self) -> usize {
        self.bytes
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
            let over_bytes = self.bytes > self.limits.max_bytes && self.events.len() > 1;
            let old = now.duration_since(front.at) >= self.limits.min_age
                && self.events.len() > self.limits.min_events;
            if !(over_bytes || old) {
                break;
            }
            let e = self.events.pop_front().expect("front exists");
            self.bytes -= e.weight();
            self.base_seq += 1;
            self.start_rv = self.start_rv.max(e.rv);
        }
    }

    /// Events from `seq` on, at most `max` (but never splitting events that share an RV).
    pub fn read_from(&self, seq: u64, max: usize, out: &mut Vec<Arc<Event>>) -> u64 {
        let mut i = (seq.saturating_sub(self.base_seq)) as usize;
        let mut n = 0;
        while i < self.events.len() {
            let e = &self.events[i];
            if n >= max && out.last().is_some_and(|l| l.rv != e.rv) {
                break;
            }
            out.push(e.clone());
            n += 1;
            i += 1;
        }
        self.base_seq + i as u64
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
        self.events.clear();
        self.bytes = 0;
        self.start_rv = rv;
    }
}
