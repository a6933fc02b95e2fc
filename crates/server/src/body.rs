//! Response bodies: where bytes hit the socket. Both pull from a snapshot or cursor only when
//! hyper asks for the next frame, i.e. when the connection can take more (backpressure).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use listwatch_codec::gzip::GzipStream;
use listwatch_codec::{ChunkWriter, ListEncoder, watch};
use listwatch_core::ApiError;
use listwatch_store::{Event, EventType, Filter, SnapshotReader, StoreError, WatchCursor};
use tokio::time::Instant;

/// The body type every handler answers with.
pub type ResponseBody = BoxBody<Bytes, Infallible>;

/// A complete body from bytes.
pub fn full(b: impl Into<Bytes>) -> ResponseBody {
    http_body_util::Full::new(b.into()).boxed()
}

/// A LIST body: each poll encodes the next chunk from the snapshot, synchronously.
pub struct ListBody {
    encoder: ListEncoder,
    ahead: VecDeque<Bytes>,
    gzip: Option<GzipStream>,
    done: bool,
}

/// Responses smaller than this are sent uncompressed, like kube-apiserver's small-response
/// threshold.
const GZIP_MIN: usize = 32 * 1024;

impl ListBody {
    /// A body streaming `encoder`'s output, gzip-compressed when `gzip_ok` and the body is
    /// at least `GZIP_MIN` bytes (decided by looking ahead at most one chunk). Returns the
    /// body and whether it is compressed.
    pub fn new(mut encoder: ListEncoder, gzip_ok: bool) -> (Self, bool) {
        let mut ahead = VecDeque::new();
        let mut gzip = None;
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
            gzip = (size >= GZIP_MIN).then(|| GzipStream::new(true));
        }
        let compressed = gzip.is_some();
        (
            ListBody {
                encoder,
                ahead,
                gzip,
                done: false,
            },
            compressed,
        )
    }
}

impl Body for ListBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let this = &mut *self;
        let next = match this.ahead.pop_front() {
            Some(c) => Some(c),
            None => this.encoder.next_chunk(),
        };
        let frame = match (next, &mut this.gzip) {
            (Some(c), Some(g)) => Some(g.encode(&c)),
            (Some(c), None) => Some(c),
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

/// Settings of one watch stream.
pub struct WatchSpec {
    /// Initial state to send as ADDED events first (watch-list / RV unset or "0").
    pub initial: Option<SnapshotReader>,
    /// Send the `k8s.io/initial-events-end` bookmark after the initial events.
    pub initial_events_end: bool,
    /// RV of the initial snapshot (the end bookmark's RV).
    pub initial_rv: u64,
    /// Periodic bookmarks requested.
    pub bookmarks: bool,
    /// Bookmark period (kube-apiserver: about a minute).
    pub bookmark_every: Duration,
    /// When the watch ends.
    pub deadline: Instant,
    /// Chunk size.
    pub chunk: usize,
    /// Send each event's object as a one-row Table (kubectl `-w`).
    pub table: Option<listwatch_codec::TableFormat>,
    /// Becomes `Some(grace)` when the server drains: the watch then ends at a random moment
    /// within `grace`, so clients do not all reconnect at the same instant.
    pub drain: Option<tokio::sync::watch::Receiver<Option<Duration>>>,
}

enum Phase {
    Initial(SnapshotReader),
    InitialEnd,
    Live,
    Done,
}

/// A watch (or watch-list) in progress: initial events from a snapshot, then the event log
/// through a cursor. Holds at most one chunk of copied bytes plus the events of one poll.
pub struct WatchStream {
    cursor: WatchCursor,
    filter: Arc<Filter>,
    out: ChunkWriter,
    phase: Phase,
    pending: VecDeque<Arc<Event>>,
    scratch: Vec<Arc<Event>>,
    spec: WatchSpec,
    next_bookmark: Option<Instant>,
    gzip: Option<GzipStream>,
}

/// Events fetched from the log per poll.
const EVENTS_PER_POLL: usize = 256;

impl WatchStream {
    /// A stream over `cursor` through `filter`.
    pub fn new(cursor: WatchCursor, filter: Arc<Filter>, mut spec: WatchSpec) -> Self {
        let phase = match spec.initial.take() {
            Some(r) => Phase::Initial(r),
            None => Phase::InitialEnd,
        };
        let next_bookmark = next_bookmark_time(Instant::now(), &spec);
        WatchStream {
            cursor,
            filter,
            out: ChunkWriter::new(spec.chunk),
            phase,
            pending: VecDeque::new(),
            scratch: Vec::new(),
            spec,
            next_bookmark,
            gzip: None,
        }
    }

    /// Ends the stream with an ERROR event for `err`.
    fn fail(&mut self, err: ApiError) {
        watch::write_error(&mut self.out, &err.to_status().body);
        self.out.flush();
        self.phase = Phase::Done;
    }

    /// The next chunk to send, waiting for events when idle; `None` when the watch ends.
    pub async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            if let Some(c) = self.out.pop() {
                return Some(c);
            }
            match &mut self.phase {
                Phase::Done => return None,
                Phase::Initial(reader) => {
                    let out = &mut self.out;
                    let table = &self.spec.table;
                    let now = listwatch_core::time::unix_now();
                    let more = reader.next_batch(4096, |r| {
                        write_one(out, table, EventType::Added, r, None, now);
                        !out.is_full()
                    });
                    if !more {
                        self.phase = Phase::InitialEnd;
                    }
                    if Instant::now() >= self.spec.deadline {
                        self.out.flush();
                        self.phase = Phase::Done;
                    }
                }
                Phase::InitialEnd => {
                    if self.spec.initial_events_end {
                        let rv = self.spec.initial_rv;
                        watch::write_bookmark(&mut self.out, self.cursor.store().info(), rv, true);
                    }
                    self.out.flush();
                    self.phase = Phase::Live;
                }
                Phase::Live => {
                    if self.pending.is_empty() {
                        self.scratch.clear();
                        if let Err(e) = self.cursor.poll(EVENTS_PER_POLL, &mut self.scratch) {
                            self.fail(expired(e));
                            continue;
                        }
                        self.pending.extend(self.scratch.drain(..));
                    }
                    let now = listwatch_core::time::unix_now();
                    while let Some(e) = self.pending.pop_front() {
                        if let Some(v) = self.filter.view(&e) {
                            write_one(
                                &mut self.out,
                                &self.spec.table,
                                v.kind,
                                v.object,
                                v.stamp_rv,
                                now,
                            );
                        }
                        if self.out.is_full() {
                            break;
                        }
                    }
                    if self.out.buffered() > 0 {
                        self.out.flush();
                        continue;
                    }
                    if !self.pending.is_empty() {
                        continue;
                    }
                    self.wait().await;
                }
            }
        }
    }

    /// Idle: waits for new events, the next bookmark, or the deadline.
    async fn wait(&mut self) {
        enum Woke {
            Events,
            Bookmark,
            Deadline,
            Drain(Duration),
        }
        let far = self.spec.deadline + Duration::from_secs(3600);
        let bookmark_at = self.next_bookmark.unwrap_or(far);
        let deadline = self.spec.deadline;
        let drain = async {
            match self.spec.drain.as_mut() {
                Some(rx) => {
                    let grace = rx.wait_for(Option::is_some).await.map(|g| *g);
                    match grace {
                        Ok(g) => g,
                        Err(_) => std::future::pending().await,
                    }
                }
                None => std::future::pending().await,
            }
        };
        let woke = tokio::select! {
            _ = self.cursor.changed() => Woke::Events,
            _ = tokio::time::sleep_until(bookmark_at) => Woke::Bookmark,
            _ = tokio::time::sleep_until(deadline) => Woke::Deadline,
            grace = drain => Woke::Drain(grace.unwrap_or_default()),
        };
        match woke {
            Woke::Events => {}
            Woke::Drain(grace) => {
                // Watched once: the new deadline is the spread-out end.
                self.spec.drain = None;
                let spread = grace.mul_f64(rand::random::<f64>());
                self.spec.deadline = self.spec.deadline.min(Instant::now() + spread);
            }
            Woke::Deadline => self.phase = Phase::Done,
            Woke::Bookmark => {
                // Drain first so the bookmark's RV covers everything already logged.
                self.scratch.clear();
                if let Err(e) = self.cursor.poll(EVENTS_PER_POLL, &mut self.scratch) {
                    self.fail(expired(e));
                    return;
                }
                if self.scratch.is_empty() {
                    watch::write_bookmark(
                        &mut self.out,
                        self.cursor.store().info(),
                        self.cursor.rv(),
                        false,
                    );
                    self.out.flush();
                    self.next_bookmark = next_bookmark_time(Instant::now(), &self.spec);
                } else {
                    // Events first; the bookmark stays due and fires on the next idle wait.
                    self.pending.extend(self.scratch.drain(..));
                }
            }
        }
    }

    /// The stream as a response body; with `gzip`, one gzip stream flushed per chunk:
    /// compressed while initial events flow, stored blocks once live (see `GzipStream`).
    pub fn into_body(mut self, gzip: bool) -> ResponseBody {
        if gzip {
            let initial = matches!(self.phase, Phase::Initial(_));
            self.gzip = Some(GzipStream::new(initial));
        }
        let stream = futures::stream::unfold(self, |mut s| async move {
            let chunk = s.next_chunk().await;
            let live = matches!(s.phase, Phase::Live | Phase::Done);
            let out = match (chunk, s.gzip.as_mut()) {
                (Some(c), Some(g)) => {
                    let b = g.encode(&c);
                    if live {
                        g.stop_compressing();
                    }
                    b
                }
                (Some(c), None) => c,
                (None, Some(g)) => g.finish()?,
                (None, None) => return None,
            };
            Some((Ok::<_, Infallible>(Frame::data(out)), s))
        });
        http_body_util::StreamBody::new(stream).boxed()
    }
}

/// One event line, as a plain object or a one-row Table.
fn write_one(
    out: &mut ChunkWriter,
    table: &Option<listwatch_codec::TableFormat>,
    kind: EventType,
    r: &listwatch_store::Record,
    stamp_rv: Option<u64>,
    now: i64,
) {
    match table {
        Some(t) => t.write_event(out, kind.as_str(), r, stamp_rv, now),
        None => watch::write_event(out, kind, r, stamp_rv),
    }
}

/// kube-apiserver's bookmark schedule: about every `bookmark_every`, and 2 s before the
/// deadline; none once that moment has passed.
fn next_bookmark_time(now: Instant, spec: &WatchSpec) -> Option<Instant> {
    if !spec.bookmarks {
        return None;
    }
    let mut t = now + spec.bookmark_every;
    if let Some(pre) = spec.deadline.checked_sub(Duration::from_secs(2))
        && pre < t
    {
        t = pre;
    }
    (t > now).then_some(t)
}

/// The watch ERROR for a cursor whose history is gone (kube-apiserver's wording).
pub fn expired(e: StoreError) -> ApiError {
    match e {
        StoreError::TooOld { requested, oldest } => {
            ApiError::Expired(format!("too old resource version: {requested} ({oldest})"))
        }
        other => ApiError::Internal(other.to_string()),
    }
}
