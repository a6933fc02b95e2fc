//! Watch responses: [`WatchEncoder`], which turns a snapshot (initial events) and a cursor
//! into chunks; the event framing it writes is `crate::frame`'s (re-exported here).

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::Waker;
use std::time::{Duration, Instant};

use bytes::Bytes;
use listwatch_store::{Event, Filter, Record, SnapshotReader, WatchCursor};

use crate::ChunkWriter;
pub use crate::frame::{
    bookmark_object, error_body, event_line, partial_bookmark_object, write_bookmark, write_error,
    write_event,
};
use crate::list::{Batch, Wrote, write_batch};
use crate::protobuf::{RunFraming, RunStep, Runs};
use crate::render::ObjectWriter;

/// A waiting watch keeps scratch buffers up to this size (a few everyday objects).
const IDLE_BUFFER_BYTES: usize = 16 * 1024;

/// Settings of one watch response.
pub struct WatchSpec {
    /// Initial state to send as ADDED events first (watch-list / RV unset or "0"); boxed,
    /// as the spec lives as long as the watch and most watches have none.
    pub initial: Option<Box<SnapshotReader>>,
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
    /// Bytes copied into one chunk at most.
    pub chunk: usize,
}

/// What a watch has to send next.
#[derive(Debug)]
pub enum WatchStep {
    /// Send this chunk, then ask again.
    Chunk(Bytes),
    /// Nothing to send: ask again when the cursor has news or at `until` (a bookmark or
    /// the deadline), whichever comes first.
    Idle {
        /// The next moment something is due without new events.
        until: Instant,
    },
    /// Another response is transcoding the next initial event's protobuf item: the waker
    /// given to [`WatchEncoder::step_waiting`] is woken when it is kept.
    Wait,
    /// The watch is over.
    End,
}

enum Phase {
    /// Initial events; a protobuf watch-list shares items with concurrent responses (boxed:
    /// an idle watch would carry the reader's size for life).
    Initial(Box<Initial>),
    InitialEnd,
    Live,
    Done,
}

/// A watch-list's initial events: the snapshot being read, while another response
/// transcodes its protobuf item the record waited for, and for a whole snapshot in
/// protobuf the runs of ADDED events shared with concurrent watch-lists.
struct Initial {
    reader: SnapshotReader,
    waiting: Option<Arc<Record>>,
    runs: Option<Runs>,
}

/// Events fetched from the log per step.
const EVENTS_PER_STEP: usize = 256;

/// A watch (or watch-list) response being encoded: initial events from a snapshot, the
/// `initial-events-end` bookmark, then the event log through a cursor, with periodic
/// bookmarks and an ERROR event if the cursor falls out of the log. Pure: it never waits;
/// the caller waits when told [`WatchStep::Idle`] or [`WatchStep::Wait`]. Holds at most
/// about one chunk of copied bytes plus the events of one step.
pub struct WatchEncoder {
    cursor: WatchCursor,
    filter: Arc<Filter>,
    out: ChunkWriter,
    phase: Phase,
    pending: VecDeque<Arc<Event>>,
    scratch: Vec<Arc<Event>>,
    spec: WatchSpec,
    next_bookmark: Option<Instant>,
    writer: ObjectWriter,
}

impl WatchEncoder {
    /// An encoder over `cursor` through `filter`, writing with `writer`, started at `now`.
    pub fn new(
        cursor: WatchCursor,
        filter: Arc<Filter>,
        mut writer: ObjectWriter,
        mut spec: WatchSpec,
        now: Instant,
    ) -> Self {
        let phase = match spec.initial.take() {
            Some(r) => {
                // As a LIST's items: a storm of watch-lists of one snapshot sends one
                // response's runs of events.
                let runs = writer.start_sharing_for(&r, spec.chunk, RunFraming::AddedEvents);
                Phase::Initial(Box::new(Initial {
                    reader: *r,
                    waiting: None,
                    runs,
                }))
            }
            None => Phase::InitialEnd,
        };
        let mut e = WatchEncoder {
            cursor,
            filter,
            out: ChunkWriter::new(spec.chunk),
            phase,
            pending: VecDeque::new(),
            scratch: Vec::new(),
            spec,
            next_bookmark: None,
            writer,
        };
        e.next_bookmark = e.bookmark_after(now);
        e
    }

    /// The cursor, for the caller to wait on when idle.
    pub fn cursor_mut(&mut self) -> &mut WatchCursor {
        &mut self.cursor
    }

    /// Whether initial events are still being sent (where compression pays off).
    pub fn in_initial_phase(&self) -> bool {
        matches!(self.phase, Phase::Initial(_) | Phase::InitialEnd)
    }

    /// Whether initial events are still to come (a watch-list not yet past its snapshot).
    pub fn has_initial_events(&self) -> bool {
        matches!(self.phase, Phase::Initial(_))
    }

    /// Ends the watch at `at` if that is before its deadline (shutdown spreads watch ends).
    pub fn end_by(&mut self, at: Instant) {
        self.spec.deadline = self.spec.deadline.min(at);
        self.next_bookmark = self.next_bookmark.filter(|b| *b < self.spec.deadline);
    }

    /// What to send next at time `now`.
    pub fn step(&mut self, now: Instant) -> WatchStep {
        self.step_waiting(now, None)
    }

    /// [`Self::step`], waiting ([`WatchStep::Wait`], `waker` woken later) rather than
    /// transcoding an initial event's protobuf item that a concurrent response is
    /// transcoding now.
    pub fn step_waiting(&mut self, now: Instant, waker: Option<&Waker>) -> WatchStep {
        loop {
            if let Some(c) = self.out.pop() {
                self.writer.wake_waiters();
                return WatchStep::Chunk(c);
            }
            match &mut self.phase {
                Phase::Done => return WatchStep::End,
                Phase::Initial(_) if now >= self.spec.deadline => {
                    self.writer.stop_sharing();
                    self.out.flush();
                    self.phase = Phase::Done;
                }
                Phase::Initial(initial) => {
                    let out = &mut self.out;
                    let writer = &mut self.writer;
                    let wall = listwatch_core::time::unix_now();
                    let Initial {
                        reader,
                        waiting,
                        runs,
                    } = &mut **initial;
                    let mut batch = write_batch(reader, waiting, |r| {
                        let wrote = match runs {
                            Some(runs) => writer.run_item(runs, out, r, waker),
                            None => writer
                                .initial_event(out, r, wall, waker)
                                .map(RunStep::from_written),
                        };
                        match encoded(wrote) {
                            Some(step) => Wrote::of_step(step, out),
                            None => Wrote::Failed,
                        }
                    });
                    if let (Batch::Complete, Some(runs)) = (&batch, runs)
                        && encoded(writer.finish_runs(runs, out)).is_none()
                    {
                        batch = Batch::Failed;
                    }
                    match batch {
                        Batch::Failed => self.end_with_internal_error(),
                        Batch::Wait => {
                            self.writer.wake_waiters();
                            return WatchStep::Wait;
                        }
                        Batch::Complete => {
                            self.writer.stop_sharing();
                            self.phase = Phase::InitialEnd;
                        }
                        Batch::More => {}
                    }
                }
                Phase::InitialEnd if now >= self.spec.deadline => {
                    self.out.flush();
                    self.phase = Phase::Done;
                }
                Phase::InitialEnd => {
                    if self.spec.initial_events_end {
                        let info = self.cursor.store().info();
                        if encoded(self.writer.bookmark(
                            &mut self.out,
                            info,
                            self.spec.initial_rv,
                            true,
                        ))
                        .is_none()
                        {
                            self.end_with_internal_error();
                            continue;
                        }
                    }
                    self.out.flush();
                    self.phase = Phase::Live;
                    // The initial events' buffers are not needed for a watch's life.
                    self.release_buffers_over(0);
                }
                Phase::Live => {
                    if now >= self.spec.deadline {
                        self.phase = Phase::Done;
                        continue;
                    }
                    if self.pending.is_empty() && !self.fetch() {
                        continue;
                    }
                    let wall = listwatch_core::time::unix_now();
                    let mut ok = true;
                    while let Some(e) = self.pending.pop_front() {
                        if let Some(v) = self.filter.view(&e) {
                            ok = encoded(self.writer.logged_event(&mut self.out, &e, &v, wall))
                                .is_some();
                        }
                        if !ok || self.out.is_full() {
                            break;
                        }
                    }
                    if !ok {
                        self.end_with_internal_error();
                        continue;
                    }
                    if self.out.buffered() > 0 {
                        self.out.flush();
                        continue;
                    }
                    if !self.pending.is_empty() {
                        continue;
                    }
                    // A step reads the log in batches: a filtered watch whose batch matched
                    // nothing reads on rather than sleep on events it has not seen.
                    if self.cursor.has_news() {
                        continue;
                    }
                    // Caught up. A due bookmark goes out now: everything logged before it
                    // has been sent, so its RV (the cursor's) covers it.
                    // kube-apiserver sends a periodic bookmark only once the store has moved
                    // past the resourceVersion the watch started from.
                    if let Some(at) = self.next_bookmark
                        && now >= at
                        && self.cursor.rv() <= self.spec.initial_rv
                    {
                        self.next_bookmark = self.bookmark_after(now);
                        continue;
                    }
                    if let Some(at) = self.next_bookmark
                        && now >= at
                    {
                        let info = self.cursor.store().info();
                        let rv = self.cursor.rv();
                        if encoded(self.writer.bookmark(&mut self.out, info, rv, false)).is_none() {
                            self.end_with_internal_error();
                            continue;
                        }
                        self.out.flush();
                        self.next_bookmark = self.bookmark_after(now);
                        continue;
                    }
                    let until = self
                        .next_bookmark
                        .map_or(self.spec.deadline, |b| b.min(self.spec.deadline));
                    self.release_buffers_over(IDLE_BUFFER_BYTES);
                    return WatchStep::Idle { until };
                }
            }
        }
    }

    /// Frees the writer's buffers over `bytes` and event queues over a sixteenth of it (0:
    /// all): what the initial events or a burst grew. Called before the watch waits, with
    /// [`IDLE_BUFFER_BYTES`], buffers of everyday size stay, so a busy watch does not
    /// allocate per event.
    fn release_buffers_over(&mut self, bytes: usize) {
        self.writer.release_buffers_over(bytes);
        listwatch_protobuf::encode::release_over(&mut self.scratch, bytes / 16);
        if self.pending.capacity() * std::mem::size_of::<Arc<Event>>() > bytes / 16 {
            self.pending = VecDeque::new();
        }
    }

    /// Moves the cursor's next events into `pending`; false when it fell out of the log
    /// (the ERROR event is then written and the watch ends).
    fn fetch(&mut self) -> bool {
        self.scratch.clear();
        if let Err(e) = self.cursor.poll(EVENTS_PER_STEP, &mut self.scratch) {
            let status = listwatch_core::ApiError::from(e).to_status();
            self.writer.error_event(&mut self.out, &status.body);
            self.out.flush();
            self.phase = Phase::Done;
            return false;
        }
        self.pending.extend(self.scratch.drain(..));
        true
    }

    /// Ends the watch with an ERROR event (500): an object could not be encoded, and a
    /// watcher must relist rather than miss it.
    fn end_with_internal_error(&mut self) {
        let status = listwatch_core::ApiError::Internal(
            "an object could not be encoded in the requested media type".into(),
        )
        .to_status();
        // Leaves the sharing readers (as a failed LIST does): the responses waiting for
        // what this one kept are woken, and it holds nothing back while its client takes
        // (or never takes) the ERROR.
        self.writer.stop_sharing();
        self.writer.error_event(&mut self.out, &status.body);
        self.out.flush();
        self.phase = Phase::Done;
    }

    /// kube-apiserver's bookmark schedule: about every `bookmark_every`, and 2 s before
    /// the deadline; none once that moment has passed.
    fn bookmark_after(&self, now: Instant) -> Option<Instant> {
        if !self.spec.bookmarks {
            return None;
        }
        let mut t = now + self.spec.bookmark_every;
        if let Some(pre) = self.spec.deadline.checked_sub(Duration::from_secs(2))
            && pre < t
        {
            t = pre;
        }
        (t > now).then_some(t)
    }
}

/// Whether a piece was written; an object that cannot be encoded is logged here, and the
/// watch then ends with an ERROR (a watcher must relist rather than miss it).
fn encoded<T>(written: Result<T, listwatch_protobuf::ProtoError>) -> Option<T> {
    match written {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::error!(error = %e, "watch event could not be encoded in the requested media type");
            None
        }
    }
}
