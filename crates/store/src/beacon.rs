//! [`Beacon`]: a watch channel of one `u64` whose receivers are polled, not awaited.
//!
//! Why not `tokio::sync::watch`: its `changed()` is an `async fn`, so a watch body that
//! waits on it holds a 120-byte future (the waiter node lives inside it) and has to be an
//! `async` state machine itself. Every idle watch waits for life, so that is paid per watch
//! (docs/memory.md, "What an idle watch holds"). Here a waiting receiver keeps a slot in the
//! beacon's waker table and a few words of its own, and a hand-written body polls it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;
use slab::Slab;

/// A published `u64` and its version; every change wakes every receiver waiting on it.
#[derive(Debug)]
pub struct Beacon {
    /// Bumped (after `value` is stored) by each send.
    version: AtomicU64,
    value: AtomicU64,
    waiters: Mutex<Waiters>,
}

#[derive(Debug, Default)]
struct Waiters {
    /// Registered wakers, each with the token of the registration that put it there (a
    /// slot freed by a send can be reused by another receiver).
    slots: Slab<(u64, Waker)>,
    next_token: u64,
    /// Wakers taken out by a send, woken outside the lock; kept for their capacity.
    spare: Vec<Waker>,
}

impl Beacon {
    /// A beacon holding `value`.
    pub fn new(value: u64) -> Arc<Self> {
        Arc::new(Beacon {
            version: AtomicU64::new(0),
            value: AtomicU64::new(value),
            waiters: Mutex::new(Waiters::default()),
        })
    }

    /// A receiver that has seen the current version.
    pub fn subscribe(self: &Arc<Self>) -> BeaconReceiver {
        BeaconReceiver {
            seen: self.version.load(Ordering::Acquire),
            beacon: self.clone(),
            slot: None,
        }
    }

    /// Stores `value`, counts a change and wakes every waiting receiver. Concurrent sends
    /// need serialising by the caller for the value to only move forward (the store sends
    /// triggers under its lock).
    pub fn send(&self, value: u64) {
        self.value.store(value, Ordering::Release);
        self.touch();
    }

    /// Counts a change without a new value: wakes every waiting receiver.
    pub fn touch(&self) {
        // After the value: a receiver that sees the new version reads at least that value.
        self.version.fetch_add(1, Ordering::AcqRel);
        let mut wake = {
            let mut w = self.waiters.lock();
            if w.slots.is_empty() {
                return;
            }
            let mut out = std::mem::take(&mut w.spare);
            out.extend(w.slots.drain().map(|(_, waker)| waker));
            out
        };
        // Woken outside the lock: a receiver re-registering meanwhile does not wait on us.
        for w in wake.drain(..) {
            w.wake();
        }
        let mut w = self.waiters.lock();
        if w.spare.capacity() < wake.capacity() {
            w.spare = wake;
        }
    }

    /// The current value.
    pub fn value(&self) -> u64 {
        self.value.load(Ordering::Acquire)
    }

    /// How many receivers exist, for an owner holding the one other `Arc`.
    pub fn receiver_count(self: &Arc<Self>) -> usize {
        Arc::strong_count(self) - 1
    }
}

/// One receiver of a [`Beacon`]: the version it last saw and, while it waits, its slot.
#[derive(Debug)]
pub struct BeaconReceiver {
    beacon: Arc<Beacon>,
    seen: u64,
    /// `(slot, token)` of this receiver's waker, if it registered one since the last send.
    slot: Option<(usize, u64)>,
}

impl BeaconReceiver {
    /// Marks the current version seen and returns the value.
    pub fn borrow_and_update(&mut self) -> u64 {
        self.seen = self.beacon.version.load(Ordering::Acquire);
        self.beacon.value()
    }

    /// Whether a send happened since this receiver last marked a version seen.
    pub fn has_changed(&self) -> bool {
        self.beacon.version.load(Ordering::Acquire) != self.seen
    }

    /// Ready once a send happened since the version last seen (which it does not mark
    /// seen, unlike tokio's `changed()`); otherwise registers `cx`'s waker to be woken by
    /// the next send.
    pub fn poll_changed(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.has_changed() {
            return Poll::Ready(());
        }
        let mut w = self.beacon.waiters.lock();
        // A send bumps the version before it takes the lock to drain: unchanged here, the
        // waker registered below is drained (and woken) by any send that follows.
        if self.has_changed() {
            return Poll::Ready(());
        }
        if let Some((i, token)) = self.slot
            && let Some((t, waker)) = w.slots.get_mut(i)
            && *t == token
        {
            if !waker.will_wake(cx.waker()) {
                waker.clone_from(cx.waker());
            }
            return Poll::Pending;
        }
        let token = w.next_token;
        w.next_token += 1;
        let i = w.slots.insert((token, cx.waker().clone()));
        self.slot = Some((i, token));
        Poll::Pending
    }
}

impl Drop for BeaconReceiver {
    fn drop(&mut self) {
        if let Some((i, token)) = self.slot {
            let mut w = self.beacon.waiters.lock();
            if w.slots.get(i).is_some_and(|(t, _)| *t == token) {
                w.slots.remove(i);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A receiver polled with a waker of its own that counts its wake-ups.
    struct Counted {
        receiver: BeaconReceiver,
        count: Arc<Count>,
        waker: Waker,
    }

    impl Counted {
        fn new(b: &Arc<Beacon>) -> Counted {
            let count = Arc::new(Count(AtomicUsize::new(0)));
            Counted {
                receiver: b.subscribe(),
                waker: Waker::from(count.clone()),
                count,
            }
        }

        fn poll(&mut self) -> Poll<()> {
            self.receiver
                .poll_changed(&mut Context::from_waker(&self.waker))
        }

        fn woken(&self) -> usize {
            self.count.0.load(Ordering::SeqCst)
        }
    }

    #[test]
    fn a_send_wakes_each_waiting_receiver_once_and_marks_it_changed() {
        let b = Beacon::new(7);
        let (mut r1, mut r2) = (Counted::new(&b), Counted::new(&b));
        assert!(r1.poll().is_pending());
        // Polled twice: one slot, woken once.
        assert!(r1.poll().is_pending());
        assert!(r2.poll().is_pending());
        assert_eq!(b.waiters.lock().slots.len(), 2);
        b.send(9);
        assert_eq!(r1.woken(), 1);
        assert_eq!(r2.woken(), 1);
        assert!(r1.receiver.has_changed());
        assert!(r1.poll().is_ready());
        assert_eq!(r1.receiver.borrow_and_update(), 9);
        assert!(!r1.receiver.has_changed());
        assert!(r1.poll().is_pending());
        assert_eq!(b.receiver_count(), 2);
    }

    #[test]
    fn a_reused_slot_is_never_taken_for_another_receivers() {
        let b = Beacon::new(0);
        let (mut r1, mut r2) = (Counted::new(&b), Counted::new(&b));
        assert!(r1.poll().is_pending());
        b.send(1);
        r1.receiver.borrow_and_update();
        r2.receiver.borrow_and_update();
        // r2 now gets the slot r1 had; r1 dropped must not free it, and r1 polling again
        // must not overwrite r2's waker.
        assert!(r2.poll().is_pending());
        assert!(r1.poll().is_pending());
        let c1 = r1.count.clone();
        drop(r1);
        b.send(2);
        assert_eq!(r2.woken(), 1);
        assert_eq!(c1.0.load(Ordering::SeqCst), 1);
        assert!(b.waiters.lock().slots.is_empty());
    }

    #[test]
    fn a_dropped_waiter_gives_its_slot_back() {
        let b = Beacon::new(0);
        let mut r = Counted::new(&b);
        assert!(r.poll().is_pending());
        drop(r);
        assert!(b.waiters.lock().slots.is_empty());
        assert_eq!(b.receiver_count(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiters_never_miss_a_send() {
        let b = Beacon::new(0);
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let mut r = b.subscribe();
            tasks.push(tokio::spawn(async move {
                loop {
                    if r.borrow_and_update() == 1000 {
                        return;
                    }
                    std::future::poll_fn(|cx| r.poll_changed(cx)).await;
                }
            }));
        }
        for v in 1..=1000 {
            b.send(v);
            if v % 100 == 0 {
                tokio::task::yield_now().await;
            }
        }
        for t in tasks {
            tokio::time::timeout(std::time::Duration::from_secs(10), t)
                .await
                .expect("a waiter missed the last send")
                .unwrap();
        }
    }
}
