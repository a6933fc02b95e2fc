//! Admission limits: how many LISTs (and watch-lists) and watches may be in flight, how
//! many watches one user may hold, and a global budget on the bytes in-flight responses may
//! buffer. Refusals are 429 `TooManyRequests` with `Retry-After: 1`, as kube-apiserver's
//! max-in-flight filter answers.

use std::collections::HashMap;
use std::sync::Arc;

use listwatch_core::ApiError;
use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Limit settings (0 = unlimited).
#[derive(Clone, Debug)]
pub struct LimitConfig {
    /// LISTs and watch-lists streaming at once (kube-apiserver: `--max-requests-inflight`).
    pub max_lists: usize,
    /// Watches open at once.
    pub max_watches: usize,
    /// Watches one user may hold.
    pub max_watches_per_user: usize,
    /// Bytes all in-flight LIST/watch-list responses may buffer together; each reserves
    /// two chunks (the encoder's and hyper's queue) while it streams.
    pub response_buffer_budget: usize,
    /// Longest request URI (path and query) in bytes.
    pub max_uri_bytes: usize,
    /// HTTP/2 streams a client may reset before the server accepted them, per connection,
    /// before the connection is cut off (rapid reset, CVE-2023-44487); 0 = no cap.
    pub max_h2_pending_resets: usize,
}

impl Default for LimitConfig {
    fn default() -> Self {
        LimitConfig {
            max_lists: 400,
            max_watches: 100_000,
            max_watches_per_user: 10_000,
            response_buffer_budget: 256 << 20,
            max_uri_bytes: 16 << 10,
            max_h2_pending_resets: 50,
        }
    }
}

/// What an admitted request holds until its response body is dropped.
pub struct Admission {
    _permits: Vec<OwnedSemaphorePermit>,
    _user: Option<UserSlot>,
}

struct UserSlot {
    counts: Arc<Mutex<HashMap<String, usize>>>,
    user: String,
}

impl Drop for UserSlot {
    fn drop(&mut self) {
        let mut c = self.counts.lock();
        if let Some(n) = c.get_mut(&self.user) {
            *n -= 1;
            if *n == 0 {
                c.remove(&self.user);
            }
        }
    }
}

/// The limiter shared by all connections.
pub struct Limits {
    config: LimitConfig,
    lists: Arc<Semaphore>,
    watches: Arc<Semaphore>,
    /// Budget in KiB units (semaphores count u32 permits).
    budget: Arc<Semaphore>,
    per_user: Arc<Mutex<HashMap<String, usize>>>,
}

const TOO_MANY: &str = "Too many requests, please try again later.";

fn sem(n: usize) -> Arc<Semaphore> {
    Arc::new(Semaphore::new(if n == 0 {
        Semaphore::MAX_PERMITS
    } else {
        n.min(Semaphore::MAX_PERMITS)
    }))
}

impl Limits {
    /// A limiter with `config`.
    pub fn new(config: LimitConfig) -> Self {
        Limits {
            lists: sem(config.max_lists),
            watches: sem(config.max_watches),
            budget: sem(config.response_buffer_budget >> 10),
            per_user: Arc::default(),
            config,
        }
    }

    /// Refuses a URI longer than the limit.
    pub fn check_uri(&self, len: usize) -> Result<(), ApiError> {
        if self.config.max_uri_bytes > 0 && len > self.config.max_uri_bytes {
            return Err(ApiError::BadRequest(format!(
                "request URI too long: {len} bytes (limit {})",
                self.config.max_uri_bytes
            )));
        }
        Ok(())
    }

    /// Admits a LIST or watch-list that buffers up to `chunk` bytes twice.
    pub fn admit_list(&self, chunk: usize) -> Result<Admission, ApiError> {
        let list = self.lists.clone().try_acquire_owned();
        let kib = u32::try_from((2 * chunk).div_ceil(1024)).unwrap_or(u32::MAX);
        let budget = self.budget.clone().try_acquire_many_owned(kib);
        match (list, budget) {
            (Ok(a), Ok(b)) => Ok(Admission {
                _permits: vec![a, b],
                _user: None,
            }),
            _ => Err(ApiError::TooManyRequests(TOO_MANY.into())),
        }
    }

    /// Admits a watch by `user` (and, for a watch-list, its LIST part).
    pub fn admit_watch(&self, user: &str, initial: Option<usize>) -> Result<Admission, ApiError> {
        let mut permits = Vec::new();
        if let Some(chunk) = initial {
            permits = self.admit_list(chunk)?.into_permits();
        }
        let w = self
            .watches
            .clone()
            .try_acquire_owned()
            .map_err(|_| ApiError::TooManyRequests(TOO_MANY.into()))?;
        permits.push(w);
        let cap = self.config.max_watches_per_user;
        let mut counts = self.per_user.lock();
        let n = counts.entry(user.to_string()).or_insert(0);
        if cap > 0 && *n >= cap {
            return Err(ApiError::TooManyRequests(format!(
                "too many watches for user {user:?} (limit {cap}), please try again later."
            )));
        }
        *n += 1;
        drop(counts);
        Ok(Admission {
            _permits: permits,
            _user: Some(UserSlot {
                counts: self.per_user.clone(),
                user: user.to_string(),
            }),
        })
    }
}

impl Admission {
    fn into_permits(mut self) -> Vec<OwnedSemaphorePermit> {
        std::mem::take(&mut self._permits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_slots_and_budget_are_returned_on_drop() {
        let l = Limits::new(LimitConfig {
            max_lists: 2,
            response_buffer_budget: 1 << 20,
            ..LimitConfig::default()
        });
        let a = l.admit_list(64 << 10).expect("1");
        let b = l.admit_list(64 << 10).expect("2");
        assert!(l.admit_list(64 << 10).is_err(), "third LIST refused");
        drop(a);
        let _c = l.admit_list(64 << 10).expect("slot returned");
        drop(b);
        // Budget: 1 MiB / 128 KiB = 8 at most, whatever the count limit.
        let l = Limits::new(LimitConfig {
            max_lists: 100,
            response_buffer_budget: 1 << 20,
            ..LimitConfig::default()
        });
        let held: Vec<_> = (0..8)
            .map(|_| l.admit_list(64 << 10).expect("in budget"))
            .collect();
        assert!(l.admit_list(64 << 10).is_err(), "budget exhausted");
        drop(held);
    }

    #[test]
    fn per_user_watch_cap() {
        let l = Limits::new(LimitConfig {
            max_watches_per_user: 2,
            ..LimitConfig::default()
        });
        let a = l.admit_watch("alice", None).expect("1");
        let _b = l.admit_watch("alice", None).expect("2");
        assert!(l.admit_watch("alice", None).is_err());
        let _other = l.admit_watch("bob", None).expect("bob has his own");
        drop(a);
        let _c = l.admit_watch("alice", None).expect("slot returned");
    }
}
