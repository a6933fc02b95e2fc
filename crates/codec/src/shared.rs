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
//!
//! The window is a value, a [`Sharing`], owned by each app (built from its configuration's
//! budget) and handed to the writers of its responses: nothing here is process-wide, so two
//! apps in one process (a fork serving two apiservers, parallel tests) do not share.
//!
//! LISTs and watch-lists of a whole snapshot share runs of framed items the same way, in a
//! group of their own for each framing (`crate::protobuf::Runs`): an entry then covers the
//! records it names, and is dropped as soon as every reader has passed it.
//!
//! A reader that misses an item claims it while it transcodes. Another reader reaching a
//! claimed item waits for it (its task is woken when the item is kept) instead of
//! transcoding it too: two workers running level readers otherwise transcoded the front of
//! the window twice (8 concurrent LISTs of 40,000 pods: 1.43 transcodes a pod).

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::Waker;
use std::time::{Duration, Instant};

use bytes::Bytes;
use listwatch_store::Record;

/// Bytes of encoded items an app keeps at most by default, over all resources.
pub const SHARED_BUDGET: usize = 32 << 20;

/// A reader that has not moved for this long no longer holds items for itself.
const STALLED: Duration = Duration::from_secs(1);

/// Where a reader is: its last key (`None` before its first item) and when it got there.
struct Position {
    key: Option<Arc<str>>,
    at: Instant,
}

/// The records a kept run of framed list items covers, its first (the entry's own) first;
/// the `Weak`s pin their addresses, which identify their versions.
pub(crate) type RunRecords = Arc<[Weak<Record>]>;

/// An item's place in the window: its encoding, or a claim while one reader transcodes it.
enum Slot {
    /// Kept for the other readers: one item (`None`), or a run of framed items and the
    /// records it covers.
    Kept(Bytes, Option<RunRecords>),
    /// Being transcoded by reader `by`; `waiters` are woken when it is kept or given up.
    Claimed { by: u64, waiters: Vec<Waker> },
}

/// The readers of one resource in one form, and the items kept for them.
#[derive(Default)]
struct Group {
    readers: HashMap<u64, Position>,
    /// Items by key; the `Weak` pins the record's address, which identifies its version.
    items: BTreeMap<Arc<str>, (Weak<Record>, Slot)>,
}

/// The window of one [`Sharing`]: its groups, budget and counters.
struct Shared {
    groups: Mutex<HashMap<u64, Group>>,
    /// Bytes of encoded items kept at most, over all resources.
    budget: usize,
    next_reader: AtomicU64,
    held: AtomicUsize,
    hits: AtomicU64,
    kept: AtomicU64,
    waits: AtomicU64,
}

/// The items concurrent protobuf responses of one app share, within one byte budget: each
/// app owns one (built from its configuration) and hands it to the writers of its
/// responses, so two apps in one process (a fork with two apiservers, tests) share
/// neither items nor budget. Cloning it shares the same window.
#[derive(Clone)]
pub struct Sharing(Arc<Shared>);

impl std::fmt::Debug for Sharing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sharing")
            .field("budget", &self.0.budget)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Default for Sharing {
    /// A window of [`SHARED_BUDGET`] bytes.
    fn default() -> Self {
        Sharing::new(SHARED_BUDGET)
    }
}

impl Sharing {
    /// A window keeping at most `budget` bytes of encoded items (0: nothing is kept, every
    /// response transcodes for itself).
    pub fn new(budget: usize) -> Sharing {
        Sharing(Arc::new(Shared {
            groups: Mutex::new(HashMap::new()),
            budget,
            next_reader: AtomicU64::new(0),
            held: AtomicUsize::new(0),
            hits: AtomicU64::new(0),
            kept: AtomicU64::new(0),
            waits: AtomicU64::new(0),
        }))
    }

    /// This window's counters since it was made, and the bytes it holds now.
    pub fn stats(&self) -> SharedStats {
        let s = &self.0;
        SharedStats {
            hits: s.hits.load(Ordering::Relaxed),
            kept: s.kept.load(Ordering::Relaxed),
            waits: s.waits.load(Ordering::Relaxed),
            held: s.held.load(Ordering::Relaxed),
        }
    }

    /// Joins the readers of `group`.
    pub fn join(&self, group: u64) -> Reader {
        let shared = self.0.clone();
        let id = shared.next_reader.fetch_add(1, Ordering::Relaxed);
        let start = Position {
            key: None,
            at: Instant::now(),
        };
        shared
            .lock()
            .entry(group)
            .or_default()
            .readers
            .insert(id, start);
        Reader {
            shared,
            group,
            id,
            claiming: AtomicBool::new(false),
            runs: false,
        }
    }

    /// Joins the readers of `group`, a group of runs ([`group_of_runs`]).
    pub(crate) fn join_runs(&self, group: u64) -> Reader {
        let mut reader = self.join(group);
        reader.runs = true;
        reader
    }
}

/// Counters since start (items served from another response's encoding, items kept) and
/// the bytes held now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SharedStats {
    /// Items taken from the shared set instead of transcoded (each item of a run counts).
    pub hits: u64,
    /// Items a response transcoded and kept for the others (each item of a run counts).
    pub kept: u64,
    /// Times a response waited for an item another was transcoding.
    pub waits: u64,
    /// Bytes of items held now.
    pub held: usize,
}

/// Which items a response can share: those of one resource (`api_version`, `kind`,
/// `resource`) in one form.
pub fn group_of(api_version: &str, kind: &str, resource: &str, metadata_only: bool) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (api_version, kind, resource, metadata_only).hash(&mut h);
    h.finish()
}

/// Which responses can share runs of framed items: those of one resource and form
/// (`group`) reading whole snapshots (of any RV: a run is taken only where its records are
/// the reader's) in runs cut at `run_bytes` and framed alike (LISTs, watch-lists).
pub(crate) fn group_of_runs(group: u64, run_bytes: usize, framing: impl Hash) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (group, run_bytes, framing, "runs").hash(&mut h);
    h.finish()
}

/// One response taking part in sharing, from [`Sharing::join`] until dropped.
pub struct Reader {
    /// The window it reads.
    shared: Arc<Shared>,
    group: u64,
    id: u64,
    /// A claim of this reader's is in the window (set when it claims, cleared when it keeps
    /// or gives up): only then does dropping the reader look for one left behind.
    claiming: AtomicBool,
    /// Shares runs: what every reader passed is dropped at each keep and hit, not at the
    /// budget.
    runs: bool,
}

impl Reader {
    /// Counts `n` items taken from the window as a run another reader kept.
    pub(crate) fn count_hits(&self, n: usize) {
        self.shared.hits.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// `r`'s item, if another reader kept it; notes that this reader is at `r`.
    /// [`Lookup::Alone`] when this reader is alone (it then keeps nothing, and finds what
    /// the others left behind it, dropping each as it passes). On a
    /// miss the item is claimed for this reader, which must then [`Self::keep`] or
    /// [`Self::give_up`] it. With a `waker`, an item another reader is transcoding is
    /// waited for ([`Lookup::Wait`]: `waker` is woken once it is kept or given up).
    pub(crate) fn get(&self, r: &Arc<Record>, waker: Option<&Waker>) -> Lookup {
        let mut groups = self.shared.lock();
        let Some(g) = groups.get_mut(&self.group) else {
            return Lookup::Alone;
        };
        if let Some(p) = g.readers.get_mut(&self.id) {
            // The same record again after a wait: its key is the same `Arc`.
            if !p.key.as_ref().is_some_and(|k| Arc::ptr_eq(k, r.key())) {
                p.key = Some(r.key().clone());
            }
            p.at = Instant::now();
        }
        let alone = g.readers.len() < 2;
        if alone && g.items.is_empty() {
            return Lookup::Alone;
        }
        let same = |w: &Weak<Record>| std::ptr::eq(w.as_ptr(), Arc::as_ptr(r));
        match g.items.get_mut(r.key()) {
            Some((w, Slot::Kept(b, run))) if same(w) => {
                let (b, run) = (b.clone(), run.clone());
                // A run counts as hits once it is found to be this reader's ([`count_hits`]).
                if run.is_none() {
                    self.shared.hits.fetch_add(1, Ordering::Relaxed);
                }
                let mut wake = Vec::new();
                if alone {
                    // The last reader behind the others: what it passes is nobody's now.
                    if let Some((_, slot)) = g.items.remove(r.key()) {
                        let _ = release(&self.shared.held, slot);
                    }
                } else if self.runs {
                    // Runs go as soon as every reader passed them, also once the readers
                    // in front have finished and nobody keeps any more.
                    wake = g.drop_passed(&self.shared.held);
                }
                drop(groups);
                wake.into_iter().for_each(Waker::wake);
                return Lookup::Hit(b, run);
            }
            Some((w, Slot::Claimed { by, waiters })) if same(w) && *by != self.id => {
                if let Some(waker) = waker {
                    // Counted once per wait: a task polled again meanwhile (its socket woke
                    // it) is still the same wait.
                    if !waiters.iter().any(|x| x.will_wake(waker)) {
                        waiters.push(waker.clone());
                        self.shared.waits.fetch_add(1, Ordering::Relaxed);
                    }
                    return Lookup::Wait;
                }
                // Cannot wait: transcode as well (the first to keep it wakes the waiters).
                return Lookup::Miss;
            }
            _ => {}
        }
        if alone {
            return Lookup::Alone;
        }
        let claim = Slot::Claimed {
            by: self.id,
            waiters: Vec::new(),
        };
        self.claiming.store(true, Ordering::Relaxed);
        let old = g.items.insert(r.key().clone(), (Arc::downgrade(r), claim));
        let wake = old
            .map(|(_, s)| release(&self.shared.held, s))
            .unwrap_or_default();
        drop(groups);
        wake.into_iter().for_each(Waker::wake);
        Lookup::Miss
    }

    /// Keeps `item` as `r`'s encoding for the other readers, first dropping what every
    /// reader has passed; not kept at the budget. Returns the readers waiting for it, for
    /// the caller to wake once it hands out what it has written: woken at every item, a
    /// reader level with this one was woken for each item it waited for (a task poll each).
    #[must_use = "the waiters must be woken"]
    pub(crate) fn keep(&self, r: &Arc<Record>, item: Bytes, run: Option<RunRecords>) -> Vec<Waker> {
        self.claiming.store(false, Ordering::Relaxed);
        let mut groups = self.shared.lock();
        let Some(g) = groups.get_mut(&self.group) else {
            return Vec::new();
        };
        let shared = &*self.shared;
        let over = || shared.held.load(Ordering::Relaxed) + item.len() > shared.budget;
        let mut wake = Vec::new();
        // Runs are dropped as soon as every reader has passed them: held only by the
        // responses still sending them, they are freed and reused at the pace they are
        // made (kept to the budget, 64 LISTs' RSS grew by 110 MiB with the window's ≤ 32).
        if over() || self.runs {
            wake = g.drop_passed(&self.shared.held);
        }
        if over() {
            // Not kept: its waiters have nothing to copy, and would wait for this reader's
            // next chunk for nothing; woken now, they transcode it themselves.
            wake.extend(g.remove_claim(&self.shared.held, r, self.id));
            drop(groups);
            wake.into_iter().for_each(Waker::wake);
            return Vec::new();
        } else {
            shared.held.fetch_add(item.len(), Ordering::Relaxed);
            let items = run.as_ref().map_or(1, |r| r.len() as u64);
            shared.kept.fetch_add(items, Ordering::Relaxed);
            let slot = (Arc::downgrade(r), Slot::Kept(item, run));
            if let Some((_, old)) = g.items.insert(r.key().clone(), slot) {
                wake.extend(release(&shared.held, old));
            }
        }
        wake
    }

    /// Gives up this reader's claim on `r` (its transcoding failed); its waiters are woken
    /// to transcode it themselves.
    pub(crate) fn give_up(&self, r: &Arc<Record>) {
        self.claiming.store(false, Ordering::Relaxed);
        let mut groups = self.shared.lock();
        let wake = match groups.get_mut(&self.group) {
            Some(g) => g.remove_claim(&self.shared.held, r, self.id),
            None => Vec::new(),
        };
        drop(groups);
        wake.into_iter().for_each(Waker::wake);
    }
}

/// What a slot taken out of the window leaves to do: a kept item's bytes are no longer
/// held; a claim's waiters are returned to be woken (outside the lock).
fn release(held: &AtomicUsize, slot: Slot) -> Vec<Waker> {
    match slot {
        Slot::Kept(b, _) => {
            held.fetch_sub(b.len(), Ordering::Relaxed);
            Vec::new()
        }
        Slot::Claimed { waiters, .. } => waiters,
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let mut groups = self.shared.lock();
        let Some(g) = groups.get_mut(&self.group) else {
            return;
        };
        g.readers.remove(&self.id);
        let mut wake = Vec::new();
        if g.readers.is_empty() {
            if let Some(g) = groups.remove(&self.group) {
                for (_, (_, slot)) in g.items {
                    wake.extend(release(&self.shared.held, slot));
                }
            }
        } else {
            // Claims are given up where they are made; one left here means a transcode
            // that unwound (only then is the window searched).
            if self.claiming.load(Ordering::Relaxed) {
                let id = self.id;
                let mine = g.items.extract_if(
                    ..,
                    |_, (_, s)| matches!(s, Slot::Claimed { by, .. } if *by == id),
                );
                wake.extend(mine.flat_map(|(_, (_, slot))| release(&self.shared.held, slot)));
            }
            wake.extend(g.drop_passed(&self.shared.held));
        }
        drop(groups);
        wake.into_iter().for_each(Waker::wake);
    }
}

/// What [`Reader::get`] found.
pub(crate) enum Lookup {
    /// No other reader: transcode and do not keep.
    Alone,
    /// Another reader's encoding: one item, or a run and the records it covers (this
    /// reader's only if its next records are those).
    Hit(Bytes, Option<RunRecords>),
    /// Not kept: claimed for this reader, which transcodes and keeps it.
    Miss,
    /// Another reader is transcoding it: the waker given is woken when it is kept.
    Wait,
}

impl Group {
    /// Drops the items below every moving reader's position (none while a moving reader
    /// has not started); returns the waiters of claims dropped with them.
    fn drop_passed(&mut self, held: &AtomicUsize) -> Vec<Waker> {
        let now = Instant::now();
        let mut slowest: Option<&Arc<str>> = None;
        for p in self.readers.values() {
            if now.duration_since(p.at) >= STALLED {
                continue;
            }
            match &p.key {
                None => return Vec::new(),
                Some(k) if slowest.is_none_or(|s| k < s) => slowest = Some(k),
                Some(_) => {}
            }
        }
        let Some(slowest) = slowest.cloned() else {
            return Vec::new();
        };
        let mut wake = Vec::new();
        while let Some(entry) = self.items.first_entry() {
            if entry.key() >= &slowest {
                break;
            }
            let (_, slot) = entry.remove();
            wake.extend(release(held, slot));
        }
        wake
    }

    /// Takes reader `id`'s claim on `r` out (not kept after all); returns its waiters.
    /// Another reader's claim there stays.
    fn remove_claim(&mut self, held: &AtomicUsize, r: &Arc<Record>, id: u64) -> Vec<Waker> {
        match self.items.get(r.key()) {
            Some((_, Slot::Claimed { by, .. })) if *by == id => self
                .items
                .remove(r.key())
                .map(|(_, s)| release(held, s))
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Group>> {
        // A panic while holding the lock leaves the maps consistent enough to go on.
        self.groups.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: &str) -> Arc<Record> {
        let info = listwatch_core::builtin_resource("configmaps").expect("configmaps");
        let json = format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns"}}}}"#);
        Arc::new(Record::ingest(json.as_bytes(), &info, 2).expect("ingest"))
    }

    fn held(sharing: &Sharing, group: u64) -> usize {
        sharing.0.lock().get(&group).map_or(0, |g| g.items.len())
    }

    fn drop_passed(sharing: &Sharing, group: u64) {
        let shared = &sharing.0;
        let mut groups = shared.lock();
        groups
            .get_mut(&group)
            .expect("group")
            .drop_passed(&shared.held);
    }

    #[test]
    fn items_every_reader_passed_are_dropped_and_a_lone_reader_keeps_nothing() {
        let sharing = Sharing::default();
        let group = group_of("v1", "Test", "tests", false);
        let rs: Vec<_> = ["a", "b", "c", "d"].into_iter().map(record).collect();
        let fast = sharing.join(group);
        assert!(matches!(fast.get(&rs[0], None), Lookup::Alone));
        let slow = sharing.join(group);
        for r in &rs {
            assert!(matches!(fast.get(r, None), Lookup::Miss));
            assert!(fast.keep(r, Bytes::from_static(b"x"), None).is_empty());
        }
        assert_eq!(held(&sharing, group), 4);
        // The slow reader finds the fast one's items; what both readers passed goes.
        assert!(matches!(slow.get(&rs[0], None), Lookup::Hit(..)));
        assert!(matches!(slow.get(&rs[2], None), Lookup::Hit(..)));
        drop_passed(&sharing, group);
        assert_eq!(held(&sharing, group), 2, "a and b are behind both readers");
        // Another version of c (same key) is not c's item.
        assert!(matches!(slow.get(&record("c"), None), Lookup::Miss));
        // A reader that stops moving no longer holds items back: c is behind the fast one.
        if let Some(p) = sharing
            .0
            .lock()
            .get_mut(&group)
            .and_then(|g| g.readers.get_mut(&slow.id))
        {
            p.at -= STALLED;
        }
        drop_passed(&sharing, group);
        assert_eq!(
            held(&sharing, group),
            1,
            "only d, where the fast reader is, is left"
        );
        drop(fast);
        // One reader left: it finds what the other left ahead of it, dropping it as it
        // passes, then keeps and looks up nothing; the group goes with it.
        assert!(matches!(slow.get(&rs[3], None), Lookup::Hit(..)));
        assert_eq!(held(&sharing, group), 0);
        assert!(matches!(slow.get(&rs[3], None), Lookup::Alone));
        drop(slow);
        assert!(sharing.0.lock().get(&group).is_none());
    }

    /// Counts its wake-ups.
    struct Counter(AtomicU64);

    impl std::task::Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_reader_waits_for_an_item_another_is_transcoding_instead_of_transcoding_it_too() {
        let sharing = Sharing::default();
        let group = group_of("v1", "Test", "claims", false);
        let rs: Vec<_> = ["a", "b", "c"].into_iter().map(record).collect();
        let (first, second) = (sharing.join(group), sharing.join(group));
        let woken = Arc::new(Counter(AtomicU64::new(0)));
        let waker = Waker::from(woken.clone());
        let wakes = || woken.0.load(Ordering::Relaxed);

        // Kept: the waiter is woken and then finds the item.
        assert!(matches!(first.get(&rs[0], None), Lookup::Miss));
        let waits = sharing.stats().waits;
        assert!(matches!(second.get(&rs[0], Some(&waker)), Lookup::Wait));
        assert!(matches!(second.get(&rs[0], Some(&waker)), Lookup::Wait));
        assert_eq!(
            sharing.stats().waits - waits,
            1,
            "polled again, still one wait"
        );
        assert_eq!(wakes(), 0);
        let waiters = first.keep(&rs[0], Bytes::from_static(b"a"), None);
        assert_eq!(waiters.len(), 1, "one wake-up for a waker registered twice");
        assert_eq!(
            wakes(),
            0,
            "woken by the keeper when it hands out its chunk"
        );
        waiters.into_iter().for_each(Waker::wake);
        assert_eq!(wakes(), 1);
        assert!(matches!(second.get(&rs[0], Some(&waker)), Lookup::Hit(b, _) if b == "a"));
        // Without a waker the other reader transcodes as well (and keeping wakes nobody).
        assert!(matches!(first.get(&rs[1], None), Lookup::Miss));
        assert!(matches!(second.get(&rs[1], None), Lookup::Miss));
        // Given up (a failed transcode): the waiter is woken and claims it itself.
        assert!(matches!(first.get(&rs[2], None), Lookup::Miss));
        assert!(matches!(second.get(&rs[2], Some(&waker)), Lookup::Wait));
        first.give_up(&rs[2]);
        assert_eq!(wakes(), 2);
        assert!(matches!(second.get(&rs[2], Some(&waker)), Lookup::Miss));
        // A reader that goes with its claim (a transcode that unwound) wakes its waiters.
        assert!(matches!(first.get(&rs[2], Some(&waker)), Lookup::Wait));
        let third = sharing.join(group);
        drop(second);
        assert_eq!(wakes(), 3);
        assert!(matches!(first.get(&rs[2], Some(&waker)), Lookup::Miss));
        drop((first, third));
        assert!(sharing.0.lock().get(&group).is_none());
    }
}
