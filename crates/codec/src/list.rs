//! The LIST body: `{"kind":"<Kind>List","apiVersion":…,"metadata":{…},"items":[…]}\n`, or
//! its protobuf form: `k8s\0` + `runtime.Unknown{typeMeta, raw: <Kind>List}`, streamed item
//! by item once the list's length is known (as kube-apiserver 1.33+ streams it). The bytes
//! of each piece are the [`ObjectWriter`]'s; this drives the page.

use std::sync::Arc;
use std::task::{Poll, Waker};

use bytes::Bytes;
use listwatch_core::ContinueToken;
use listwatch_protobuf::ProtoError;
use listwatch_store::{Record, SnapshotReader};

use crate::ChunkWriter;
use crate::protobuf::{RunFraming, RunStep, Runs};
use crate::render::{ListHead, ObjectWriter};

enum Phase {
    Header,
    Items,
    Done,
}

/// Produces a LIST response body chunk by chunk from a [`SnapshotReader`]; memory held is
/// one chunk (and, for a protobuf LIST in runs, a run of at most two) plus the snapshot
/// handle, whatever the list's size.
pub struct ListEncoder {
    reader: SnapshotReader,
    writer: ObjectWriter,
    out: ChunkWriter,
    phase: Phase,
    first: bool,
    /// A record taken from the reader whose protobuf item another response is transcoding
    /// now: written first when woken.
    waiting: Option<Arc<Record>>,
    continue_prefix: String,
    page_limited: bool,
    /// A protobuf LIST of a whole snapshot is written in runs shared with its level peers.
    runs: Option<Runs>,
}

/// Records examined per step: bounds the work done per poll when a selector skips most.
const SCAN_PER_STEP: usize = 4096;

impl ListEncoder {
    /// An encoder for one LIST page written by `writer`. `continue_prefix` is the list's
    /// key prefix (for the continue token); `chunk` bounds the bytes copied per chunk.
    pub fn new(
        reader: SnapshotReader,
        mut writer: ObjectWriter,
        continue_prefix: String,
        page_limited: bool,
        chunk: usize,
    ) -> Self {
        // Runs cut around a chunk: a LIST in step with another sends that one's as chunks.
        let runs = writer.start_sharing_for(&reader, chunk, RunFraming::ListItems);
        ListEncoder {
            reader,
            writer,
            out: ChunkWriter::new(chunk),
            phase: Phase::Header,
            first: true,
            waiting: None,
            continue_prefix,
            page_limited,
            runs,
        }
    }

    /// The continue token and remaining count this page will carry (a dry run over the
    /// page; only done for limited lists, where it is at most `limit` matches).
    pub fn page_metadata(&self) -> (Option<String>, Option<u64>) {
        if !self.page_limited {
            return (None, None);
        }
        let mut probe = self.reader.clone();
        while probe.next_batch(usize::MAX, |_| true) {}
        self.page_metadata_of(&probe)
    }

    /// [`Self::page_metadata`] from a probe already run to the page's end.
    fn page_metadata_of(&self, probe: &SnapshotReader) -> (Option<String>, Option<u64>) {
        if !self.page_limited {
            return (None, None);
        }
        let token = probe
            .continue_after()
            .map(|k| ContinueToken::encode(probe.snapshot().rv() as i64, &self.continue_prefix, k));
        (token, probe.remaining())
    }

    /// The head: one pass over the page gives where it ends (limited pages) and, when the
    /// writer needs it (protobuf), the items' encoded size — memoized per record, so only
    /// a record's first protobuf LIST transcodes it twice, and per snapshot for a whole
    /// collection, so a storm of such LISTs of one snapshot sums it once.
    fn header(&mut self) -> Result<(), ProtoError> {
        let mut items_len = 0usize;
        let form = self.writer.measured_form();
        let whole = self.reader.reads_whole_snapshot();
        let known = form
            .filter(|_| whole)
            .and_then(|f| self.reader.snapshot().encoded_total(f));
        let (token, remaining) = match (form, known) {
            (Some(_), Some(total)) => {
                items_len = total;
                (None, None)
            }
            (Some(form), None) => {
                let mut failed = None;
                let mut probe = self.reader.clone();
                let writer = &mut self.writer;
                while probe.next_batch(usize::MAX, |r| match writer.item_len(r) {
                    Ok(n) => {
                        items_len += n;
                        true
                    }
                    Err(e) => {
                        failed = Some(e);
                        false
                    }
                }) && failed.is_none()
                {}
                if let Some(e) = failed {
                    return Err(e);
                }
                if whole {
                    self.reader.snapshot().set_encoded_total(form, items_len);
                }
                self.page_metadata_of(&probe)
            }
            (None, _) => self.page_metadata(),
        };
        let head = ListHead {
            rv: self.reader.snapshot().rv(),
            continue_token: token.as_deref(),
            remaining,
            items_len,
        };
        self.writer.list_head(&mut self.out, &head)
    }

    /// The next chunk of the body, or `None` when the body is complete.
    pub fn next_chunk(&mut self) -> Option<Bytes> {
        match self.poll_chunk(None) {
            Poll::Ready(c) => c,
            Poll::Pending => unreachable!("nothing is waited for without a waker"),
        }
    }

    /// [`Self::next_chunk`], waiting (`Pending`, `waker` woken later) rather than
    /// transcoding a protobuf item that a concurrent response is transcoding now.
    pub fn poll_chunk(&mut self, waker: Option<&Waker>) -> Poll<Option<Bytes>> {
        loop {
            if let Some(c) = self.out.pop() {
                self.writer.wake_waiters();
                return Poll::Ready(Some(c));
            }
            match self.phase {
                Phase::Header => match self.header() {
                    Ok(()) => {
                        if self.runs.is_some() {
                            // The head goes out now, not with the first run, which may be
                            // waited for (64 LISTs' first bytes: 43-54 ms, over issue 27's
                            // 50 ms, with the head held back).
                            self.out.flush();
                        }
                        self.phase = Phase::Items;
                    }
                    Err(e) => self.fail(&e),
                },
                Phase::Items => {
                    let (out, first, writer) = (&mut self.out, &mut self.first, &mut self.writer);
                    let runs = &mut self.runs;
                    let mut failed = None;
                    let batch = write_batch(&mut self.reader, &mut self.waiting, |r| {
                        let wrote = match runs {
                            Some(runs) => writer.run_item(runs, out, r, waker),
                            None => writer
                                .list_item(out, r, *first, waker)
                                .map(RunStep::from_written),
                        };
                        match wrote {
                            Ok(step) => {
                                if matches!(step, RunStep::Written) {
                                    *first = false;
                                }
                                Wrote::of_step(step, out)
                            }
                            Err(e) => {
                                failed = Some(e);
                                Wrote::Failed
                            }
                        }
                    });
                    match (batch, failed) {
                        (_, Some(e)) => self.fail(&e),
                        (Batch::Wait, None) => {
                            // Not flushed: the wait lasts one item's transcoding, and a
                            // chunk cut short at every wait would go out in small writes.
                            self.writer.wake_waiters();
                            return Poll::Pending;
                        }
                        (Batch::Complete, None) => {
                            if let Some(runs) = &mut self.runs
                                && let Err(e) = self.writer.finish_runs(runs, &mut self.out)
                            {
                                self.fail(&e);
                                continue;
                            }
                            self.writer.list_tail(&mut self.out);
                            self.writer.stop_sharing();
                            self.out.flush();
                            self.phase = Phase::Done;
                        }
                        (Batch::More | Batch::Failed, None) => {}
                    }
                }
                Phase::Done => return Poll::Ready(None),
            }
        }
    }

    /// Ends a body that cannot be completed (an object that cannot be encoded): what was
    /// sent stays a truncated message the client refuses, never a list with objects
    /// silently missing.
    fn fail(&mut self, e: &ProtoError) {
        tracing::error!(error = %e, "LIST ended early: an object could not be encoded");
        // Wakes the responses waiting for what this one kept, and leaves the readers.
        self.writer.stop_sharing();
        self.out.flush();
        self.phase = Phase::Done;
    }
}

/// How one record went into a body, for [`write_batch`].
pub(crate) enum Wrote {
    /// Written; go on.
    Written,
    /// Written, and the chunk is full: hand it out first.
    Full,
    /// Another response is transcoding its protobuf item: wait, and write it first later.
    Wait,
    /// Not written: hand out what is written first, then write it.
    Later,
    /// Could not be written.
    Failed,
}

impl Wrote {
    /// Written, and whether `out` should be handed out before the next record.
    pub(crate) fn written(out: &ChunkWriter) -> Wrote {
        if out.is_full() {
            Wrote::Full
        } else {
            Wrote::Written
        }
    }

    /// What a record written in runs ([`RunStep`]) means for the batch.
    pub(crate) fn of_step(step: RunStep, out: &ChunkWriter) -> Wrote {
        match step {
            RunStep::Written => Wrote::written(out),
            RunStep::Wait => Wrote::Wait,
            RunStep::Later => Wrote::Later,
        }
    }
}

/// How a batch of [`write_batch`] ended.
pub(crate) enum Batch {
    /// Records remain (or a chunk is full).
    More,
    /// Every record of the page is written.
    Complete,
    /// Waiting for a record's item, which is held to be written first.
    Wait,
    /// A record could not be written.
    Failed,
}

/// Writes the record held back by a wait (if any), then the reader's next records, with
/// `write` until it asks to stop: the one loop of a LIST's items and a watch-list's initial
/// events.
pub(crate) fn write_batch(
    reader: &mut SnapshotReader,
    held: &mut Option<Arc<Record>>,
    mut write: impl FnMut(&Arc<Record>) -> Wrote,
) -> Batch {
    if let Some(r) = held.take() {
        match write(&r) {
            Wrote::Written => {}
            Wrote::Full => return Batch::More,
            Wrote::Wait => {
                *held = Some(r);
                return Batch::Wait;
            }
            Wrote::Later => {
                *held = Some(r);
                return Batch::More;
            }
            Wrote::Failed => return Batch::Failed,
        }
    }
    let mut stopped = None;
    let more = reader.next_batch(SCAN_PER_STEP, |r| match write(r) {
        Wrote::Written => true,
        Wrote::Full => false,
        Wrote::Wait => {
            *held = Some(r.clone());
            stopped = Some(Batch::Wait);
            false
        }
        Wrote::Later => {
            *held = Some(r.clone());
            stopped = Some(Batch::More);
            false
        }
        Wrote::Failed => {
            stopped = Some(Batch::Failed);
            false
        }
    });
    match stopped {
        Some(b) => b,
        None if more => Batch::More,
        None => Batch::Complete,
    }
}
