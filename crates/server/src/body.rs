//! Response bodies: where bytes hit the socket. A body pulls the next chunk from its encoder
//! (codec's `ListEncoder` or `WatchEncoder`) only when hyper asks for the next frame, i.e.
//! when the connection can take more (backpressure). [`StreamedBody`] is the one gzip
//! adapter both use.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use listwatch_codec::gzip::GzipStream;
use listwatch_codec::{ListEncoder, WatchEncoder, WatchStep};
use tokio::time::Instant;

use crate::limits::ListSeat;

/// The body type every handler answers with.
pub type ResponseBody = BoxBody<Bytes, BodyCut>;

/// A response body that cannot be finished (a relayed upstream body broke off). hyper
/// then aborts the HTTP/1.1 connection or resets the HTTP/2 stream, so the client sees
/// the response fail rather than end as if it were whole.
#[derive(Debug, thiserror::Error)]
#[error("response body cut short: {0}")]
pub struct BodyCut(pub String);

/// A complete body from bytes.
pub fn full(b: impl Into<Bytes>) -> ResponseBody {
    http_body_util::Full::new(b.into())
        .map_err(|never: Infallible| match never {})
        .boxed()
}

/// Responses smaller than this are sent uncompressed, like kube-apiserver's small-response
/// threshold.
const GZIP_MIN: usize = 32 * 1024;

/// Where a streamed body's pieces come from: polled when hyper asks for the next frame.
/// A plain trait rather than a boxed `Stream`: the body holds its producer inline, so an
/// idle watch is one allocation (hyper's boxed body wants `Sync` too).
pub trait Producer: Send + Sync + Unpin + 'static {
    /// The next piece, `None` at the end.
    fn poll_piece(&mut self, cx: &mut Context<'_>) -> Poll<Option<Piece>>;
}

/// One piece of a streamed body.
pub struct Piece {
    /// The bytes.
    pub bytes: Bytes,
    /// Whether what follows is bulk (LIST items, initial events): worth compressing, and
    /// yielding to new requests (see `TURN`). Once false, the gzip stream frames the rest
    /// as stored blocks and frees its compressor.
    pub bulk: bool,
}

/// A streamed body, gzip-encoded or not: the one gzip adapter for LIST and watch bodies.
/// With gzip, one member per response, flushed per chunk so a watch stays live.
pub struct StreamedBody<P> {
    /// `None` once it has ended (a finished producer must not be polled again).
    producer: Option<P>,
    /// Boxed: most bodies are not compressed, and an idle watch would carry it for life.
    gzip: Option<Box<GzipStream>>,
    done: bool,
    /// When this body's current turn on a worker began (its first frame since it last
    /// yielded).
    turn_started: Option<std::time::Instant>,
    /// The last piece was bulk: a turn's end defers to tasks the I/O driver wakes.
    bulk: bool,
}

/// How long a body produces frames before its connection's task yields to the others: a
/// protobuf LIST transcodes as it goes and a fast client rarely pushes back, so without it
/// one storm response keeps a worker for many chunks while new requests wait for their
/// first byte. By time, not frames: a response copying shared bytes still catches up with
/// the one ahead of it (and shares its encoding) within its turn. 64 concurrent LISTs of
/// 40,000 pods, yielding deferred: a new request's first bytes p50 / max 54–80 / 150–187 ms
/// with 1 ms turns, 30–44 / 74–76 ms with 500 µs, 11–23 / 31–63 ms with 250 µs, the storm's
/// duration the same (loadtest/README.md).
const TURN: Duration = Duration::from_micros(250);

impl<P: Producer> StreamedBody<P> {
    /// A body over `producer`, gzip-encoded when `gzip`; `compress` says whether the first
    /// pieces are worth a compressor (else they are framed as stored blocks from the start,
    /// so an idle gzip watch never allocates one).
    fn new(producer: P, gzip: bool, compress: bool) -> Self {
        StreamedBody {
            producer: Some(producer),
            gzip: gzip.then(|| Box::new(GzipStream::new(compress))),
            done: false,
            turn_started: None,
            bulk: compress,
        }
    }
}

impl StreamedBody<ListPieces> {
    /// A LIST body from `encoder`, gzip-encoded when `gzip_ok` and the body is at least
    /// `GZIP_MIN` bytes (decided by looking ahead at most that far). Returns the body and
    /// whether it is compressed.
    pub fn list(mut encoder: ListEncoder, gzip_ok: bool) -> (Self, bool) {
        let mut ahead = VecDeque::new();
        let mut compress = false;
        if gzip_ok {
            let mut size = 0;
            while size < GZIP_MIN {
                match encoder.next_chunk() {
                    Some(c) => {
                        size += c.len();
                        ahead.push_back(c);
                    }
                    None => break,
                }
            }
            compress = size >= GZIP_MIN;
        }
        let pieces = ListPieces { ahead, encoder };
        (StreamedBody::new(pieces, compress, true), compress)
    }
}

/// A LIST's pieces: the chunks looked ahead at, then the encoder's.
pub struct ListPieces {
    ahead: VecDeque<Bytes>,
    encoder: ListEncoder,
}

impl Producer for ListPieces {
    fn poll_piece(&mut self, cx: &mut Context<'_>) -> Poll<Option<Piece>> {
        let bytes = match self.ahead.pop_front() {
            Some(b) => Some(b),
            // Waits while a concurrent LIST transcodes the item this one needs next.
            None => std::task::ready!(self.encoder.poll_chunk(Some(cx.waker()))),
        };
        Poll::Ready(bytes.map(|bytes| Piece { bytes, bulk: true }))
    }
}

impl StreamedBody<WatchDriver> {
    /// A watch body: `encoder` driven in time, ended early (spread over the grace period)
    /// when its store drains; a watch-list's `list_seat` is given back once its initial
    /// events are out.
    pub fn watch(encoder: WatchEncoder, list_seat: Option<Box<ListSeat>>, gzip: bool) -> Self {
        let compress = encoder.has_initial_events();
        let driver = WatchDriver {
            encoder,
            drain_seen: false,
            list_seat,
            timer: None,
        };
        StreamedBody::new(driver, gzip, compress)
    }
}

impl<P: Producer> Body for StreamedBody<P> {
    type Data = Bytes;
    type Error = BodyCut;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyCut>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let this = &mut *self;
        let now = std::time::Instant::now();
        // Turns share a runtime's workers. A body polled outside any task (a host's own
        // thread, through the C ABI) shares nothing by yielding: it would only go through a
        // wake-up round trip, and the host would flush a part-filled buffer each time.
        match this.turn_started {
            _ if tokio::task::try_id().is_none() => {}
            Some(t) if now.duration_since(t) >= TURN => {
                // A bulk body yields deferred, as `tokio::task::yield_now` does: the worker
                // first runs what is queued, then polls for I/O and starts the tasks it
                // woke (a new request), and only then the yielded bodies. A plain wake
                // queues this task ahead of those the driver has yet to wake: with 250 µs
                // turns, 64 concurrent LISTs' first bytes p50 50–87 ms that way, 11–35 ms
                // deferred. A watch's events wake plainly: deferred, they waited behind
                // every queued task and the churn lost ~10 % (loadtest/README.md).
                this.turn_started = None;
                if this.bulk {
                    let yielded = std::pin::pin!(tokio::task::yield_now());
                    let _ = yielded.poll(cx);
                } else {
                    cx.waker().wake_by_ref();
                }
                return Poll::Pending;
            }
            Some(_) => {}
            None => this.turn_started = Some(now),
        }
        let next = match this.producer.as_mut().map(|p| p.poll_piece(cx)) {
            Some(Poll::Pending) => {
                // Waiting (for another response's item, an event, a timer) ends the turn:
                // woken, the body produces at once instead of first yielding for a turn
                // that began before it waited.
                this.turn_started = None;
                return Poll::Pending;
            }
            Some(Poll::Ready(Some(p))) => Some(p),
            Some(Poll::Ready(None)) | None => {
                this.producer = None;
                None
            }
        };
        if let Some(p) = &next {
            this.bulk = p.bulk;
        }
        let frame = match (next, &mut this.gzip) {
            (Some(p), Some(g)) => {
                let b = g.encode(&p.bytes);
                if !p.bulk {
                    g.stop_compressing();
                }
                Some(b)
            }
            (Some(p), None) => Some(p.bytes),
            (None, Some(g)) => g.finish(),
            (None, None) => None,
        };
        match frame {
            Some(c) => Poll::Ready(Some(Ok(Frame::data(c)))),
            None => {
                this.done = true;
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// Drives a [`WatchEncoder`] in time: waits for events (a drain wakes the cursor too), the
/// next bookmark or the deadline when the encoder is idle. Hand-written rather than an
/// `async` loop: an idle watch then holds its cursor's slot and a timer, not a state
/// machine with a select of two futures (docs/memory.md).
pub struct WatchDriver {
    encoder: WatchEncoder,
    /// The store's drain was seen (and the end scheduled).
    drain_seen: bool,
    /// Boxed: only watch-lists have one, and every idle watch would carry its size.
    list_seat: Option<Box<ListSeat>>,
    /// The wake-up for the encoder's next deadline (bookmark or end), made on first wait
    /// and reset after.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl WatchDriver {
    /// The store's drain grace, if it drains and this watch has not acted on it yet. The
    /// store wakes every cursor when it drains (`Store::drain_watches`), so it is read
    /// here, not waited on beside the cursor.
    fn unseen_drain(&mut self) -> Option<Duration> {
        if self.drain_seen {
            None
        } else {
            self.encoder.cursor_mut().store().draining()
        }
    }
}

impl Producer for WatchDriver {
    fn poll_piece(&mut self, cx: &mut Context<'_>) -> Poll<Option<Piece>> {
        loop {
            if let Some(grace) = self.unseen_drain() {
                // Read once: the watch ends at a random moment within the grace, so clients
                // do not all reconnect at the same instant.
                self.drain_seen = true;
                let spread = grace.mul_f64(random_fraction());
                self.encoder.end_by((Instant::now() + spread).into_std());
            }
            // A watch-list waits while a concurrent response transcodes its next initial
            // event's protobuf item.
            let step = self
                .encoder
                .step_waiting(Instant::now().into_std(), Some(cx.waker()));
            let until = match step {
                WatchStep::Chunk(bytes) => {
                    let bulk = self.encoder.in_initial_phase();
                    if !bulk {
                        self.list_seat = None;
                    }
                    return Poll::Ready(Some(Piece { bytes, bulk }));
                }
                WatchStep::End => return Poll::Ready(None),
                WatchStep::Wait => return Poll::Pending,
                WatchStep::Idle { until } => Instant::from_std(until),
            };
            // `step` marked the cursor's wake-up seen: a drain that came after the check
            // above would otherwise wait for the next event or timer.
            if self.unseen_drain().is_some()
                || self.encoder.cursor_mut().poll_changed(cx).is_ready()
            {
                continue;
            }
            let timer = match &mut self.timer {
                Some(t) => {
                    if t.deadline() != until || t.is_elapsed() {
                        t.as_mut().reset(until);
                    }
                    t
                }
                None => self.timer.insert(Box::pin(tokio::time::sleep_until(until))),
            };
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }
}

/// A number in [0, 1) for spreading watch ends: from the standard library's randomly
/// keyed hasher (each `RandomState` has new keys), enough for jitter without a random
/// number crate in the embedding facade's tree.
pub(crate) fn random_fraction() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let bits = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    #[test]
    fn random_fractions_are_in_the_unit_interval_and_spread() {
        let draws: Vec<f64> = (0..1000).map(|_| super::random_fraction()).collect();
        assert!(draws.iter().all(|x| (0.0..1.0).contains(x)));
        // Spread over the interval: each tenth gets some (1000 draws, ~100 expected each).
        for tenth in 0..10 {
            let n = draws
                .iter()
                .filter(|x| (**x * 10.0) as usize == tenth)
                .count();
            assert!(n > 40, "tenth {tenth}: {n} of 1000");
        }
    }
}
