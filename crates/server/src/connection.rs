//! One client connection's accounting: what it has in flight, so that idle and half-open
//! connections are closed, a response the client stopped reading ends after a deadline, and
//! one connection cannot hold more than its share of the LIST slots.
//!
//! `serve_connection` puts an [`InFlight`] into each request's extensions; the request's
//! response body ([`crate::metrics::MeteredBody`]) keeps it, marking when it is waiting for
//! the client to take the bytes it produced. [`Connection::watchdog`] resolves when the
//! connection should be closed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// When the server closes a connection on its own.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionTimeouts {
    /// From accept to the first request (kube-apiserver's read-header timeout: 32 s).
    pub first_request: Duration,
    /// Between requests on a kept-alive connection (Go's server in kube-apiserver: 90 s).
    pub keep_alive_idle: Duration,
    /// A response whose client has not taken a byte for this long ends (kube-apiserver
    /// ends a LIST at 60 s); the connection is closed with it.
    pub stalled_response: Duration,
}

impl Default for ConnectionTimeouts {
    fn default() -> Self {
        ConnectionTimeouts {
            first_request: Duration::from_secs(32),
            keep_alive_idle: Duration::from_secs(90),
            stalled_response: Duration::from_secs(60),
        }
    }
}

/// A connection's shared state.
#[derive(Clone)]
pub struct Connection {
    shared: Arc<Shared>,
}

/// The period over which requests a client abandoned are counted (see
/// `LimitConfig::max_cancelled_requests`).
pub const CANCEL_WINDOW: Duration = Duration::from_secs(10);

struct Shared {
    opened: Instant,
    /// Wakes the watchdog when a request is abandoned, so a flood is cut off at once.
    cancelled: tokio::sync::Notify,
    /// LISTs (and watch-lists) admitted on this connection and still streaming.
    lists: AtomicUsize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    in_flight: usize,
    requests: u64,
    /// Milliseconds since `opened` of the last request's end (or 0).
    last_end_ms: u64,
    /// Weak, and not to the request's `Place`: the watchdog upgrades them under this
    /// state's lock, and dropping a `Place` takes that lock (an upgraded last reference
    /// would deadlock it).
    bodies: Vec<std::sync::Weak<BodyProgress>>,
    /// Requests the client abandoned in the current [`CANCEL_WINDOW`], and when it began.
    cancels: u64,
    cancel_window_ms: u64,
}

/// Whether one response is waiting for its client.
#[derive(Default)]
pub struct BodyProgress {
    /// Milliseconds since the connection opened at which the body handed out bytes and
    /// has not been asked for more since (0: not waiting for the client).
    blocked_since_ms: AtomicU64,
}

/// A request in flight on a connection; dropping it (with its response body) ends it.
/// Clones share one place (request extensions want `Clone`).
#[derive(Clone)]
pub struct InFlight(Arc<Place>);

struct Place {
    shared: Arc<Shared>,
    progress: Arc<BodyProgress>,
}

/// A LIST slot held on a connection.
pub struct ConnectionListSlot {
    shared: Arc<Shared>,
}

impl Drop for ConnectionListSlot {
    fn drop(&mut self) {
        self.shared.lists.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Default for Connection {
    fn default() -> Self {
        Self::new()
    }
}

impl Connection {
    /// A connection accepted now.
    pub fn new() -> Self {
        Connection {
            shared: Arc::new(Shared {
                opened: Instant::now(),
                cancelled: tokio::sync::Notify::new(),
                lists: AtomicUsize::new(0),
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// A request arrived.
    pub fn begin(&self) -> InFlight {
        let progress = Arc::new(BodyProgress::default());
        let mut s = self.shared.state.lock();
        s.in_flight += 1;
        s.requests += 1;
        s.bodies.retain(|b| b.strong_count() > 0);
        s.bodies.push(Arc::downgrade(&progress));
        drop(s);
        InFlight(Arc::new(Place {
            shared: self.shared.clone(),
            progress,
        }))
    }

    /// Resolves when the connection should be closed, with the reason: idle too long (before
    /// its first request, or between requests), a response its client stopped reading, or
    /// more than `max_cancelled` requests abandoned by the client within [`CANCEL_WINDOW`]
    /// (0: no cap).
    pub async fn watchdog(&self, t: ConnectionTimeouts, max_cancelled: usize) -> &'static str {
        loop {
            let now = self.shared.ms_now();
            let (due, reason) = {
                let s = self.shared.state.lock();
                if max_cancelled > 0 && s.cancels > max_cancelled as u64 {
                    return "too many requests abandoned by the client (rapid reset)";
                }
                if s.in_flight == 0 {
                    let (limit, reason) = if s.requests == 0 {
                        (t.first_request, "no request after accept")
                    } else {
                        (t.keep_alive_idle, "idle keep-alive")
                    };
                    (s.last_end_ms + ms(limit), reason)
                } else {
                    let oldest = s
                        .bodies
                        .iter()
                        .filter_map(std::sync::Weak::upgrade)
                        .map(|b| b.blocked_since_ms.load(Ordering::Relaxed))
                        .filter(|at| *at > 0)
                        .min();
                    match oldest {
                        Some(at) => (at + ms(t.stalled_response), "response not read"),
                        // Nothing waits on the client: look again within a second.
                        None => (now + 1000, ""),
                    }
                }
            };
            if !reason.is_empty() && now >= due {
                return reason;
            }
            let wait = due.saturating_sub(now).clamp(10, 1000);
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(wait)) => {}
                _ = self.shared.cancelled.notified() => {}
            }
        }
    }

    /// Takes one of this connection's `cap` LIST slots (0: no cap).
    pub fn take_list_slot(&self, cap: usize) -> Option<ConnectionListSlot> {
        let n = self.shared.lists.fetch_add(1, Ordering::Relaxed);
        let slot = ConnectionListSlot {
            shared: self.shared.clone(),
        };
        (cap == 0 || n < cap).then_some(slot)
    }
}

impl Shared {
    fn ms_now(&self) -> u64 {
        // At least 1, so 0 can mean "not waiting".
        (self.opened.elapsed().as_millis() as u64).max(1)
    }
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

impl InFlight {
    /// The connection this request arrived on.
    pub fn connection(&self) -> Connection {
        Connection {
            shared: self.0.shared.clone(),
        }
    }

    /// The body handed out bytes: from now on it waits for the client to ask for more.
    pub fn produced(&self) {
        self.0
            .progress
            .blocked_since_ms
            .store(self.0.shared.ms_now(), Ordering::Relaxed);
    }

    /// The client abandoned this request (reset its stream, or closed the connection)
    /// before its response ended.
    pub fn cancelled(&self) {
        let shared = &self.0.shared;
        let now = shared.ms_now();
        let mut s = shared.state.lock();
        if now.saturating_sub(s.cancel_window_ms) >= ms(CANCEL_WINDOW) {
            s.cancel_window_ms = now;
            s.cancels = 0;
        }
        s.cancels += 1;
        drop(s);
        shared.cancelled.notify_one();
    }

    /// The client asked for more: not waiting on it any more.
    pub fn polled(&self) {
        self.0.progress.blocked_since_ms.store(0, Ordering::Relaxed);
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let now = self.shared.ms_now();
        let mut s = self.shared.state.lock();
        s.in_flight -= 1;
        s.last_end_ms = now;
    }
}
