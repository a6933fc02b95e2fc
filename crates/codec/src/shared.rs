//! Protobuf items shared by concurrent responses (issue 27 item 2). While two or more
//! protobuf LISTs or watch-lists of one resource (in one form) are being written, an
//! object message one of them transcodes is kept for the others: a LIST storm (N requests
//! for the same snapshot) transcodes each object about once instead of N times.
//!
//! The kept items are the window between the slowest and the fastest reader: each reader
//! records where it is (responses walk a collection in key order) and an item every reader
//! has passed is dropped. At the byte budget nothing more is kept: the readers in front
//! then transcode for themselves while those behind copy what is kept, so the readers
//! close up (dropping the lowest items instead kept the front fast and the back slow, and
//! they drifted apart for good). A reader that has not moved for a second no longer holds
//! items back: a stalled client costs the others nothing; it transcodes when it resumes.
//! A lone response neither looks items up nor keeps any (it only records its position),
//! and the items go with the last reader. docs/memory.md has the measurements and
//! alternatives.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use listwatch_store::Record;

/// Bytes of encoded items kept at most, over all resources.
pub const SHARED_BUDGET: usize = 32 << 20;

/// A reader that has not moved for this long no longer holds items for itself.
const STALLED: Duration = Duration::from_secs(1);

/// Where a reader is: its last key (`None` before its first item) and when it got there.
struct Position {
    key: Option<Arc<str>>,
    at: Instant,
}

/// The readers of one resource in one form, and the items kept for them.
#[derive(Default)]
struct Group {
    readers: HashMap<u64, Position>,
    /// Items by key; the `Weak` pins the record's address, which identifies its version.
    items: BTreeMap<Arc<str>, (Weak<Record>, Bytes)>,
}

struct Shared {
    groups: Mutex<HashMap<u64, Group>>,
    next_reader: AtomicU64,
    held: AtomicUsize,
    hits: AtomicU64,
    kept: AtomicU64,
}

static SHARED: LazyLock<Shared> = LazyLock::new(|| Shared {
    groups: Mutex::new(HashMap::new()),
    next_reader: AtomicU64::new(0),
    held: AtomicUsize::new(0),
    hits: AtomicU64::new(0),
    kept: AtomicU64::new(0),
});

/// Counters since start (items served from another response's encoding, items kept) and
/// the bytes held now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SharedStats {
    /// Items copied from the shared set instead of transcoded.
    pub hits: u64,
    /// Items a response transcoded and kept for the others.
    pub kept: u64,
    /// Bytes of items held now.
    pub held: usize,
}

/// The counters of the process's shared items.
pub fn stats() -> SharedStats {
    SharedStats {
        hits: SHARED.hits.load(Ordering::Relaxed),
        kept: SHARED.kept.load(Ordering::Relaxed),
        held: SHARED.held.load(Ordering::Relaxed),
    }
}

/// Which items a response can share: those of one resource (`api_version`, `kind`,
/// `resource`) in one form.
pub fn group_of(api_version: &str, kind: &str, resource: &str, metadata_only: bool) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (api_version, kind, resource, metadata_only).hash(&mut h);
    h.finish()
}

/// One response taking part in sharing, from [`Reader::join`] until dropped.
pub struct Reader {
    group: u64,
    id: u64,
}

impl Reader {
    /// Joins the readers of `group`.
    pub fn join(group: u64) -> Reader {
        let id = SHARED.next_reader.fetch_add(1, Ordering::Relaxed);
        let start = Position {
            key: None,
            at: Instant::now(),
        };
        lock().entry(group).or_default().readers.insert(id, start);
        Reader { group, id }
    }

    /// `r`'s item, if another reader kept it; notes that this reader is at `r`.
    /// [`Lookup::Alone`] when this reader is alone (it then neither looks nor keeps).
    pub(crate) fn get(&self, r: &Arc<Record>) -> Lookup {
        let mut groups = lock();
        let Some(g) = groups.get_mut(&self.group) else {
            return Lookup::Alone;
        };
        if let Some(p) = g.readers.get_mut(&self.id) {
            p.key = Some(r.key().clone());
            p.at = Instant::now();
        }
        if g.readers.len() < 2 {
            return Lookup::Alone;
        }
        match g.items.get(r.key()) {
            Some((w, b)) if std::ptr::eq(w.as_ptr(), Arc::as_ptr(r)) => {
                SHARED.hits.fetch_add(1, Ordering::Relaxed);
                Lookup::Hit(b.clone())
            }
            _ => Lookup::Miss,
        }
    }

    /// Keeps `item` as `r`'s encoding for the other readers, first dropping what every
    /// reader has passed; not kept at the budget.
    pub(crate) fn keep(&self, r: &Arc<Record>, item: Bytes) {
        let mut groups = lock();
        let Some(g) = groups.get_mut(&self.group) else {
            return;
        };
        let over = || SHARED.held.load(Ordering::Relaxed) + item.len() > SHARED_BUDGET;
        if over() {
            g.drop_passed();
            if over() {
                return;
            }
        }
        let len = item.len();
        if let Some((_, old)) = g.items.insert(r.key().clone(), (Arc::downgrade(r), item)) {
            SHARED.held.fetch_sub(old.len(), Ordering::Relaxed);
        }
        SHARED.held.fetch_add(len, Ordering::Relaxed);
        SHARED.kept.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let mut groups = lock();
        let Some(g) = groups.get_mut(&self.group) else {
            return;
        };
        g.readers.remove(&self.id);
        if g.readers.is_empty() {
            let bytes = g.items.values().map(|(_, b)| b.len()).sum();
            SHARED.held.fetch_sub(bytes, Ordering::Relaxed);
            groups.remove(&self.group);
        } else {
            g.drop_passed();
        }
    }
}

/// What [`Reader::get`] found.
pub(crate) enum Lookup {
    /// No other reader: transcode and do not keep.
    Alone,
    /// Another reader's encoding.
    Hit(Bytes),
    /// Not kept: transcode and keep.
    Miss,
}

impl Group {
    /// Drops the items below every moving reader's position (none while a moving reader
    /// has not started).
    fn drop_passed(&mut self) {
        let now = Instant::now();
        let mut slowest: Option<&Arc<str>> = None;
        for p in self.readers.values() {
            if now.duration_since(p.at) >= STALLED {
                continue;
            }
            match &p.key {
                None => return,
                Some(k) if slowest.is_none_or(|s| k < s) => slowest = Some(k),
                Some(_) => {}
            }
        }
        let Some(slowest) = slowest.cloned() else {
            return;
        };
        while let Some(entry) = self.items.first_entry() {
            if entry.key() >= &slowest {
                break;
            }
            let (_, b) = entry.remove();
            SHARED.held.fetch_sub(b.len(), Ordering::Relaxed);
        }
    }
}

fn lock() -> MutexGuard<'static, HashMap<u64, Group>> {
    // A panic while holding the lock leaves the maps consistent enough to go on.
    SHARED.groups.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: &str) -> Arc<Record> {
        let info = listwatch_core::builtin_resource("configmaps").expect("configmaps");
        let json = format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns"}}}}"#);
        Arc::new(Record::ingest(json.as_bytes(), &info, 2).expect("ingest"))
    }

    fn held(group: u64) -> usize {
        lock().get(&group).map_or(0, |g| g.items.len())
    }

    #[test]
    fn items_every_reader_passed_are_dropped_and_a_lone_reader_keeps_nothing() {
        let group = group_of("v1", "Test", "tests", false);
        let rs: Vec<_> = ["a", "b", "c", "d"].into_iter().map(record).collect();
        let fast = Reader::join(group);
        assert!(matches!(fast.get(&rs[0]), Lookup::Alone));
        let slow = Reader::join(group);
        for r in &rs {
            assert!(matches!(fast.get(r), Lookup::Miss));
            fast.keep(r, Bytes::from_static(b"x"));
        }
        assert_eq!(held(group), 4);
        // The slow reader finds the fast one's items; what both readers passed goes.
        assert!(matches!(slow.get(&rs[0]), Lookup::Hit(_)));
        assert!(matches!(slow.get(&rs[2]), Lookup::Hit(_)));
        lock().get_mut(&group).expect("group").drop_passed();
        assert_eq!(held(group), 2, "a and b are behind both readers");
        // Another version of c (same key) is not c's item.
        assert!(matches!(slow.get(&record("c")), Lookup::Miss));
        // A reader that stops moving no longer holds items back: c is behind the fast one.
        if let Some(p) = lock()
            .get_mut(&group)
            .and_then(|g| g.readers.get_mut(&slow.id))
        {
            p.at -= STALLED;
        }
        lock().get_mut(&group).expect("group").drop_passed();
        assert_eq!(held(group), 1, "only d, where the fast reader is, is left");
        drop(fast);
        // One reader left: no sharing, and the group goes with it.
        assert!(matches!(slow.get(&rs[3]), Lookup::Alone));
        drop(slow);
        assert!(lock().get(&group).is_none());
    }
}
