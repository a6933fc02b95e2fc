//! [`TtlCache`]: the bounded answer cache the token and authorization webhooks share.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// Answers kept until they expire, at most `capacity` of them: when full, expired answers
/// go first, then all (a webhook is asked again rather than memory grow).
pub struct TtlCache<K, V> {
    entries: parking_lot::Mutex<HashMap<K, (Instant, V)>>,
    capacity: usize,
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    /// An empty cache of at most `capacity` answers.
    pub fn new(capacity: usize) -> Self {
        TtlCache {
            entries: parking_lot::Mutex::new(HashMap::new()),
            capacity,
        }
    }

    /// The answer for `key`, if one is still fresh.
    pub fn get(&self, key: &K) -> Option<V> {
        let entries = self.entries.lock();
        let (until, v) = entries.get(key)?;
        (*until > Instant::now()).then(|| v.clone())
    }

    /// Keeps `value` for `key` for `ttl`.
    pub fn insert(&self, key: K, value: V, ttl: Duration) {
        let now = Instant::now();
        let mut entries = self.entries.lock();
        if entries.len() >= self.capacity {
            entries.retain(|_, (until, _)| *until > now);
            if entries.len() >= self.capacity {
                entries.clear();
            }
        }
        entries.insert(key, (now + ttl, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_expire_and_a_full_cache_makes_room() {
        let c = TtlCache::new(2);
        c.insert("a", 1, Duration::from_secs(60));
        c.insert("gone", 2, Duration::ZERO);
        assert_eq!(c.get(&"a"), Some(1));
        assert_eq!(c.get(&"gone"), None, "expired");
        // Full: the expired answer makes room, the fresh one stays.
        c.insert("b", 3, Duration::from_secs(60));
        assert_eq!((c.get(&"a"), c.get(&"b")), (Some(1), Some(3)));
        // Full of fresh answers: all go.
        c.insert("c", 4, Duration::from_secs(60));
        assert_eq!((c.get(&"a"), c.get(&"c")), (None, Some(4)));
    }
}
