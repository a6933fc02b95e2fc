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
    /// LISTs (and watch-lists) one connection may have streaming at once (0 = no cap): a
    /// client cannot take every slot, however many streams it multiplexes.
    pub max_lists_per_connection: usize,
    /// LISTs one authenticated user may have streaming at once (0 = no cap).
    pub max_lists_per_user: usize,
    /// When connections are closed for idleness or a response nobody reads.
    pub connection: crate::connection::ConnectionTimeouts,
    /// HTTP/2 streams a client may reset before the server accepted them, per connection,
    /// before the connection is cut off (rapid reset, CVE-2023-44487); 0 = no cap (and no
    /// cap on the streams the server itself must reset, e.g. refused over the concurrency
    /// limit, 256 otherwise).
    pub max_h2_pending_resets: usize,
    /// Requests a client may abandon (reset or close before their response ended) per
    /// connection within [`crate::connection::CANCEL_WINDOW`] before the connection is cut
    /// off: the rapid-reset cap counted over time, however the resets are batched; 0 = no cap.
    pub max_cancelled_requests: usize,
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
            // Far above what informers do (a few cancelled watches a minute), far below a
            // rapid-reset attack (thousands a second).
            max_cancelled_requests: 400,
            // A quarter of the slots: one HTTP/2 connection may carry a whole controller's
            // informers starting at once (client-go shares one per host), yet cannot take
            // everything from the rest.
            max_lists_per_connection: 100,
            max_lists_per_user: 100,
            connection: crate::connection::ConnectionTimeouts::default(),
        }
    }
}

/// What an admitted request holds until its response body is dropped.
pub struct Admission {
    /// A watch's slot among all watches (not a Vec: a watch holds it for life).
    _watch: Option<OwnedSemaphorePermit>,
    _user: Option<UserSlot>,
    /// Boxed: a response body holds its admission for life, most of them without one.
    list: Option<Box<ListSeat>>,
}

impl Admission {
    /// A watch-list's LIST share, for its body to give back once the initial events are
    /// sent (kube-apiserver's priority and fairness likewise counts a watch's seats only
    /// while it initializes); the watch's own slots stay held. None for anything else.
    pub fn take_list_seat(&mut self) -> Option<Box<ListSeat>> {
        self.list.take()
    }
}

/// A LIST's share of the limits: its in-flight slot, response-buffer budget, and its
/// user's and connection's LIST slots; given back when dropped.
pub struct ListSeat {
    _permits: [OwnedSemaphorePermit; 2],
    _user: Option<UserSlot>,
    _connection: Option<crate::connection::ConnectionListSlot>,
}

/// Who is asking for a LIST slot: its connection (standalone server) and, when
/// authenticated, its user.
#[derive(Clone, Copy, Default)]
pub struct Requester<'a> {
    /// The client connection, when the server accepted it.
    pub connection: Option<&'a crate::connection::Connection>,
    /// The authenticated user (not `system:anonymous`).
    pub user: Option<&'a str>,
}

struct UserSlot {
    counts: Arc<Mutex<HashMap<Arc<str>, usize>>>,
    /// The map's own key: a watch holds its slot for life, one name per user not per slot.
    user: Arc<str>,
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
    per_user: Arc<Mutex<HashMap<Arc<str>, usize>>>,
    lists_per_user: Arc<Mutex<HashMap<Arc<str>, usize>>>,
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
            lists_per_user: Arc::default(),
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

    /// Admits a LIST or watch-list that buffers up to `chunk` bytes twice, within the
    /// requester's shares (per connection, per authenticated user) and the global limits.
    pub fn admit_list(&self, chunk: usize, who: Requester<'_>) -> Result<Admission, ApiError> {
        let connection = match who.connection {
            Some(c) => Some(
                c.take_list_slot(self.config.max_lists_per_connection)
                    .ok_or_else(|| {
                        ApiError::TooManyRequests(format!(
                            "too many LISTs on this connection (limit {}), please try again later.",
                            self.config.max_lists_per_connection
                        ))
                    })?,
            ),
            None => None,
        };
        let list_user = match who.user {
            Some(u) => Some(take_user_slot(
                &self.lists_per_user,
                u,
                self.config.max_lists_per_user,
                "LISTs",
            )?),
            None => None,
        };
        let list = self.lists.clone().try_acquire_owned();
        let kib = u32::try_from((2 * chunk).div_ceil(1024)).unwrap_or(u32::MAX);
        let budget = self.budget.clone().try_acquire_many_owned(kib);
        match (list, budget) {
            (Ok(a), Ok(b)) => Ok(Admission {
                _watch: None,
                _user: None,
                list: Some(Box::new(ListSeat {
                    _permits: [a, b],
                    _user: list_user,
                    _connection: connection,
                })),
            }),
            _ => Err(ApiError::TooManyRequests(TOO_MANY.into())),
        }
    }

    /// Admits a watch by `user` (and, for a watch-list, its LIST part).
    pub fn admit_watch(
        &self,
        user: &str,
        initial: Option<usize>,
        who: Requester<'_>,
    ) -> Result<Admission, ApiError> {
        let mut admission = match initial {
            Some(chunk) => self.admit_list(chunk, who)?,
            None => Admission {
                _watch: None,
                _user: None,
                list: None,
            },
        };
        let w = self
            .watches
            .clone()
            .try_acquire_owned()
            .map_err(|_| ApiError::TooManyRequests(TOO_MANY.into()))?;
        admission._watch = Some(w);
        admission._user = Some(take_user_slot(
            &self.per_user,
            user,
            self.config.max_watches_per_user,
            "watches",
        )?);
        Ok(admission)
    }
}

/// One of `user`'s `cap` slots in `counts` (0: no cap).
fn take_user_slot(
    counts: &Arc<Mutex<HashMap<Arc<str>, usize>>>,
    user: &str,
    cap: usize,
    what: &str,
) -> Result<UserSlot, ApiError> {
    let mut c = counts.lock();
    let key = match c.get_key_value(user) {
        Some((k, _)) => k.clone(),
        None => Arc::from(user),
    };
    let n = c.entry(key.clone()).or_insert(0);
    if cap > 0 && *n >= cap {
        return Err(ApiError::TooManyRequests(format!(
            "too many {what} for user {user:?} (limit {cap}), please try again later."
        )));
    }
    *n += 1;
    Ok(UserSlot {
        counts: counts.clone(),
        user: key,
    })
}
