//! Protobuf items shared by concurrent responses (issue 27 item 2). While two or more
//! protobuf LISTs or watch-lists are being written, an object message one of them
//! transcodes is kept, within a byte budget, for the others: a LIST storm (N requests for
//! the same snapshot) transcodes each object about once instead of N times. A lone response
//! neither looks nor keeps (no allocation beyond today's), and the items are dropped as
//! soon as the last protobuf response ends, so idle memory is untouched. docs/memory.md
//! has the measurements and the alternatives.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, Weak};

use bytes::Bytes;
use listwatch_store::Record;

/// Bytes of encoded items kept at most, over all shards.
pub const SHARED_BUDGET: usize = 32 << 20;
const SHARDS: usize = 16;

/// An item's identity: the record's address (held alive by the entry's `Weak`, so no
/// other record can take it while the entry exists) and the form it is encoded in.
type ItemKey = (usize, u32);

#[derive(Default)]
struct Shard {
    items: HashMap<ItemKey, (Weak<Record>, Bytes)>,
    /// Insertion order, for eviction: the oldest item goes first.
    order: VecDeque<ItemKey>,
    bytes: usize,
}

/// The process's shared protobuf items.
pub struct SharedItems {
    shards: [Mutex<Shard>; SHARDS],
    /// Protobuf responses being written now.
    active: AtomicUsize,
    hits: AtomicU64,
    kept: AtomicU64,
}

static SHARED: LazyLock<SharedItems> = LazyLock::new(|| SharedItems {
    shards: std::array::from_fn(|_| Mutex::new(Shard::default())),
    active: AtomicUsize::new(0),
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

/// Held by a protobuf response while it writes objects: sharing is on while two or more
/// are held, and the shared items are dropped when the last one goes.
pub struct ActiveResponse(());

impl ActiveResponse {
    /// Counts one more protobuf response in progress.
    pub fn begin() -> ActiveResponse {
        SHARED.active.fetch_add(1, Ordering::AcqRel);
        ActiveResponse(())
    }
}

impl Drop for ActiveResponse {
    fn drop(&mut self) {
        if SHARED.active.fetch_sub(1, Ordering::AcqRel) == 1 {
            for shard in &SHARED.shards {
                let mut s = lock(shard);
                s.items = HashMap::new();
                s.order = VecDeque::new();
                s.bytes = 0;
            }
        }
    }
}

/// The counters of the process's shared items.
pub fn stats() -> SharedStats {
    SharedStats {
        hits: SHARED.hits.load(Ordering::Relaxed),
        kept: SHARED.kept.load(Ordering::Relaxed),
        held: SHARED.shards.iter().map(|s| lock(s).bytes).sum(),
    }
}

/// Whether responses share items now (two or more protobuf responses in progress).
pub(crate) fn sharing() -> bool {
    SHARED.active.load(Ordering::Acquire) >= 2
}

/// `r`'s item in `form`, if another response kept it.
pub(crate) fn get(r: &Arc<Record>, form: u32) -> Option<Bytes> {
    let key = (Arc::as_ptr(r) as usize, form);
    let found = lock(shard_of(key)).items.get(&key).map(|(_, b)| b.clone());
    if found.is_some() {
        SHARED.hits.fetch_add(1, Ordering::Relaxed);
    }
    found
}

/// Keeps `item` as `r`'s encoding in `form`, evicting the oldest items past the budget.
pub(crate) fn keep(r: &Arc<Record>, form: u32, item: Bytes) {
    let per_shard = SHARED_BUDGET / SHARDS;
    if item.len() > per_shard {
        return;
    }
    let key = (Arc::as_ptr(r) as usize, form);
    let mut s = lock(shard_of(key));
    let len = item.len();
    if s.items.insert(key, (Arc::downgrade(r), item)).is_some() {
        // Two responses transcoded it at once; the one entry stands.
        return;
    }
    s.order.push_back(key);
    s.bytes += len;
    while s.bytes > per_shard {
        let Some(old) = s.order.pop_front() else {
            break;
        };
        if let Some((_, b)) = s.items.remove(&old) {
            s.bytes -= b.len();
        }
    }
    SHARED.kept.fetch_add(1, Ordering::Relaxed);
}

fn shard_of(key: ItemKey) -> &'static Mutex<Shard> {
    // Records are allocations of one size: the address bits above the alignment spread.
    let h = (key.0 >> 6) ^ (key.0 >> 12) ^ key.1 as usize;
    &SHARED.shards[h % SHARDS]
}

fn lock(m: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    // A panic while holding a shard leaves it consistent enough to clear and reuse.
    m.lock().unwrap_or_else(|e| e.into_inner())
}
