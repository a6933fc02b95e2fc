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
use futures::Stream;
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

/// The pieces of a streamed body (hyper's boxed body wants `Sync` too).
pub type Pieces = Pin<Box<dyn Stream<Item = Piece> + Send + Sync>>;

/// One piece of a streamed body.
pub struct Piece {
    /// The bytes.
    pub bytes: Bytes,
    /// Whether what follows is bulk (LIST items, initial events): worth compressing, and
    /// yielding to new requests (see [`TURN`]). Once false, the gzip stream frames the rest
    /// as stored blocks and frees its compressor.
    pub bulk: bool,
}

/// A streamed body, gzip-encoded or not: the one gzip adapter for LIST and watch bodies.
/// With gzip, one member per response, flushed per chunk so a watch stays live.
pub struct StreamedBody {
    /// `None` once it has ended (a finished stream must not be polled again).
    pieces: Option<Pieces>,
    ahead: VecDeque<Bytes>,
    gzip: Option<GzipStream>,
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

impl StreamedBody {
    /// A body over `pieces`, gzip-encoded when `gzip`; `compress` says whether the first
    /// pieces are worth a compressor (else they are framed as stored blocks from the start,
    /// so an idle gzip watch never allocates one).
    pub fn new(pieces: Pieces, gzip: bool, compress: bool) -> Self {
        StreamedBody {
            pieces: Some(pieces),
            ahead: VecDeque::new(),
            gzip: gzip.then(|| GzipStream::new(compress)),
            done: false,
            turn_started: None,
            bulk: compress,
        }
    }

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
        let pieces = futures::stream::iter(std::iter::from_fn(move || {
            encoder
                .next_chunk()
                .map(|bytes| Piece { bytes, bulk: true })
        }));
        let mut body = StreamedBody::new(Box::pin(pieces), compress, true);
        body.ahead = ahead;
        (body, compress)
    }

    /// A watch body: `encoder` driven in time, ended early (spread over the grace period)
    /// when `drain` reports the server is draining; a watch-list's `list_seat` is given back
    /// once its initial events are out.
    pub fn watch(
        encoder: WatchEncoder,
        drain: Option<DrainSignal>,
        list_seat: Option<Box<ListSeat>>,
        gzip: bool,
    ) -> Self {
        let compress = encoder.has_initial_events();
        let state = WatchDriver {
            encoder,
            drain,
            list_seat,
        };
        let pieces = futures::stream::unfold(state, |mut s| async move {
            let bytes = s.next_chunk().await?;
            let bulk = s.encoder.in_initial_phase();
            if !bulk {
                s.list_seat = None;
            }
            Some((Piece { bytes, bulk }, s))
        });
        StreamedBody::new(Box::pin(pieces), gzip, compress)
    }
}

impl Body for StreamedBody {
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
        match this.turn_started {
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
        let next = match this.ahead.pop_front() {
            Some(c) => Some(Piece {
                bytes: c,
                bulk: true,
            }),
            None => match this.pieces.as_mut().map(|p| p.as_mut().poll_next(cx)) {
                Some(Poll::Pending) => return Poll::Pending,
                Some(Poll::Ready(Some(p))) => Some(p),
                Some(Poll::Ready(None)) | None => {
                    this.pieces = None;
                    None
                }
            },
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

/// Becomes `Some(grace)` when the server (or one resource) drains.
pub type DrainSignal = tokio::sync::watch::Receiver<Option<Duration>>;

/// Drives a [`WatchEncoder`] in time: waits for events (a drain wakes the cursor too), the
/// next bookmark or the deadline when the encoder is idle.
struct WatchDriver {
    encoder: WatchEncoder,
    drain: Option<DrainSignal>,
    /// Boxed: only watch-lists have one, and every idle watch would carry its size.
    list_seat: Option<Box<ListSeat>>,
}

impl WatchDriver {
    async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            // The store wakes every cursor when it drains (`Store::drain_watches`), so the
            // signal is read here, not waited on beside the cursor: an idle watch's future
            // stays one select of two.
            let grace = self.drain.as_ref().and_then(|rx| *rx.borrow());
            if let Some(grace) = grace {
                // Read once: the watch ends at a random moment within the grace, so clients
                // do not all reconnect at the same instant.
                self.drain = None;
                let spread = grace.mul_f64(rand::random::<f64>());
                self.encoder.end_by((Instant::now() + spread).into_std());
            }
            let until = match self.encoder.step(Instant::now().into_std()) {
                WatchStep::Chunk(c) => return Some(c),
                WatchStep::End => return None,
                WatchStep::Idle { until } => Instant::from_std(until),
            };
            tokio::select! {
                _ = self.encoder.cursor_mut().changed() => {}
                _ = tokio::time::sleep_until(until) => {}
            }
        }
    }
}
