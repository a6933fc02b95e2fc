//! The protobuf wire (`application/vnd.kubernetes.protobuf`): objects stay JSON in the
//! store and are transcoded per response by [`ProtoEncoder`] into a bounded scratch buffer
//! (docs/memory.md says why). Also PartialObjectMetadata, the projection of an object to
//! its `metadata`, in both encodings.

use std::sync::{Arc, Weak};
use std::task::Waker;

use bytes::Bytes;
use listwatch_core::{ApiError, ResourceInfo};
use listwatch_protobuf::encode::{
    begin, end, put_bytes, put_type_meta, put_varint, varint_len, write_envelope,
};
use listwatch_protobuf::{MessageId, ProtoEncoder, ProtoError, Schema};
use listwatch_store::record::EncodedForm;
use listwatch_store::{EventType, Filter, Record, Snapshot, SnapshotReader};

use crate::ChunkWriter;
use crate::shared::{self, Lookup};

/// Protobuf responses' `Content-Type`.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
/// What ends a whole protobuf body after its raw field: empty `contentEncoding` and
/// `contentType` (fields 3 and 4).
pub const ENVELOPE_TAIL: [u8; 4] = [0x1a, 0x00, 0x22, 0x00];
/// Protobuf watch responses' `Content-Type`.
pub const PROTOBUF_WATCH: &str = "application/vnd.kubernetes.protobuf;stream=watch";
/// PartialObjectMetadata's group version.
pub const META_V1: &str = "meta.k8s.io/v1";

/// Whether `info`'s objects have a protobuf form (built-in kinds do; custom resources
/// do not, as in kube-apiserver).
pub fn has_protobuf(info: &ResourceInfo) -> bool {
    Schema::kubernetes()
        .kind_exact(&info.api_version(), &info.kind)
        .is_some()
}

/// Writes a resource's objects (or their PartialObjectMetadata) as protobuf; one per
/// response, its scratch buffers reused for every object.
pub struct ProtoObjects {
    enc: ProtoEncoder<'static>,
    /// The resource's own message, `None` when only metadata is served.
    object: Option<MessageId>,
    object_meta: MessageId,
    list_meta: MessageId,
    status: MessageId,
    api_version: String,
    kind: String,
    /// One object's JSON with a stamped resourceVersion.
    stamped: Vec<u8>,
    /// One object's message, when its length must be known before it is written.
    scratch: Vec<u8>,
    /// Which responses' items this one may share ([`shared::group_of`]).
    group: u64,
    /// The app's window of shared items (`None`: this writer shares nothing).
    window: Option<shared::Sharing>,
    /// Present while this response shares items.
    sharing: Option<shared::Reader>,
    /// Responses waiting for items this one kept, woken by [`Self::wake_waiters`].
    waiters: Vec<Waker>,
}

impl Drop for ProtoObjects {
    fn drop(&mut self) {
        // A response dropped between two chunks (its client went away) must not leave the
        // responses that waited for its items asleep.
        self.wake_waiters();
    }
}

/// A protobuf LIST (or watch-list's initial events) of a whole snapshot, written in runs of
/// framed items ([`RunFraming`]) so that concurrent responses send one response's run by
/// reference instead of each looking up and copying item by item (issue 27's 8-informer
/// storm). A run ends after a boundary record ([`Runs::ends_after`]) or before the item
/// that would take it past [`MAX_RUN_CHUNKS`] chunks: the cut depends on the records, so
/// responses of one snapshot cut the same runs, and those of another RV the same runs
/// wherever the records are the same.
/// A run kept by another response is sent only once this response's next records are
/// found to be the ones it covers; otherwise they are transcoded here.
pub(crate) struct Runs {
    /// The chunk size runs are cut around.
    run_bytes: usize,
    /// How the run frames each record's message.
    framing: RunFraming,
    /// A watch frame's and envelope's heads for one event (reused).
    heads: Vec<u8>,
    /// The run being written by this response.
    building: Option<Building>,
    /// A run another response kept, being checked against this response's records.
    pending: Option<Pending>,
    /// The run being written (reused).
    buf: Vec<u8>,
}

/// How a run frames a record's message: what the response around it is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum RunFraming {
    /// A List's `items` fields (`0x12`, length, message).
    ListItems,
    /// A watch stream's ADDED events, each a length-prefixed `WatchEvent` around the
    /// object's whole protobuf body (what [`crate::ObjectWriter::initial_event`] writes).
    AddedEvents,
}

impl Runs {
    /// Runs cut around `run_bytes`, framing items as `framing`.
    pub(crate) fn new(run_bytes: usize, framing: RunFraming) -> Runs {
        Runs {
            run_bytes,
            framing,
            heads: Vec::new(),
            building: None,
            pending: None,
            buf: Vec::new(),
        }
    }

    /// Whether the run being built ends after `r` (its framed item `framed` bytes): past
    /// three quarters of a chunk, at a boundary record ([`is_boundary`], one in a quarter
    /// chunk's bytes); runs are about a chunk long on average, and sent by reference
    /// ([`ChunkWriter::put_shared`]).
    fn ends_after(&self, r: &Record, framed: usize) -> bool {
        self.buf.len() >= self.run_bytes * 3 / 4 && is_boundary(r, framed, self.run_bytes / 4)
    }

    /// Begins a run at `first`, kept for the others when done if `claimed` or `kept`.
    fn start(&mut self, first: &Arc<Record>, claimed: bool, kept: bool) {
        self.buf.clear();
        self.building = Some(Building {
            first: first.clone(),
            // Named only in a run kept for others (a lone LIST's are not).
            records: (claimed || kept).then(|| Vec::with_capacity(32)),
            claimed,
        });
    }
}

/// A run never takes more than this many chunks: ended before an item that would (about
/// once in 150 runs: the cut then depends on where the run began).
const MAX_RUN_CHUNKS: usize = 2;

/// A run being written into [`Runs::buf`].
struct Building {
    /// Its first record: the key it is kept under.
    first: Arc<Record>,
    /// The records it covers, when it is kept for the others once done: claimed, or
    /// replacing a kept run whose records differ.
    records: Option<Vec<Weak<Record>>>,
    /// Claimed in the shared window: others wait for it (given up on a failure).
    claimed: bool,
}

/// Another response's run, sent once the records it covers are found to be this one's.
struct Pending {
    bytes: Bytes,
    records: shared::RunRecords,
    /// How many of them are this response's next records so far.
    matched: usize,
}

/// What [`ProtoObjects::run_item`] did with a record.
pub(crate) enum RunStep {
    /// Written (or covered by a run being sent).
    Written,
    /// Another response is writing the run that starts here: wait, then try it again.
    Wait,
    /// A run was ended before it: hand it out, then try this record again (a claim is
    /// never left open between two polls, where a stalled client would hold its waiters).
    Later,
}

impl RunStep {
    /// From an item writer's answer: written (`true`) or to wait for.
    pub(crate) fn from_written(written: bool) -> RunStep {
        if written {
            RunStep::Written
        } else {
            RunStep::Wait
        }
    }
}

/// Whether a run may end after `r`, whose framed item takes `framed` of a run of about
/// `run_bytes`: as if each byte ended one with a chance of one in `run_bytes`, drawn from
/// the record's key, so the same records end runs whatever their version and wherever a
/// run began (runs cut after another snapshot's changed record line up again at the next).
fn is_boundary(r: &Record, framed: usize, run_bytes: usize) -> bool {
    // FNV-1a, then a multiply to spread the low bits.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in r.key().as_bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
    h % (run_bytes.max(1) as u64) < framed as u64
}

/// A list item or initial event's message, from [`ProtoObjects::item`].
pub enum Item {
    /// Another response's encoding, or this one's kept for the others.
    Shared(Bytes),
    /// Transcoded into the scratch buffer given.
    InScratch,
    /// Another response is transcoding it: the waker given is woken when it is kept.
    Wait,
}

impl ProtoObjects {
    /// Frees the scratch buffers that grew past `bytes` (0: all).
    pub fn release_buffers_over(&mut self, bytes: usize) {
        use listwatch_protobuf::encode::release_over;
        release_over(&mut self.stamped, bytes);
        release_over(&mut self.scratch, bytes);
        self.enc.release_buffers_over(bytes);
    }

    /// A writer of `info`'s objects, or of their PartialObjectMetadata when
    /// `metadata_only`, sharing items in `window` (`None`: never); `None` when the kind has
    /// no protobuf form.
    pub fn new(
        info: &ResourceInfo,
        metadata_only: bool,
        window: Option<&shared::Sharing>,
    ) -> Option<ProtoObjects> {
        let schema = Schema::kubernetes();
        let object = if metadata_only {
            None
        } else {
            Some(schema.kind_exact(&info.api_version(), &info.kind)?)
        };
        let (api_version, kind) = if metadata_only {
            (META_V1.to_string(), "PartialObjectMetadata".to_string())
        } else {
            (info.api_version(), info.kind.clone())
        };
        Some(ProtoObjects {
            enc: ProtoEncoder::new(schema),
            object,
            object_meta: object_meta(schema)?,
            list_meta: list_meta(schema)?,
            status: schema.kind(META_V1, "Status")?,
            api_version,
            kind,
            stamped: Vec::new(),
            scratch: Vec::new(),
            group: shared::group_of(
                &info.api_version(),
                &info.kind,
                &info.resource,
                metadata_only,
            ),
            window: window.cloned(),
            sharing: None,
            waiters: Vec::new(),
        })
    }

    /// Whether only PartialObjectMetadata is written.
    pub fn metadata_only(&self) -> bool {
        self.object.is_none()
    }

    /// The `typeMeta` each object is sent with.
    pub fn type_meta(&self) -> (&str, &str) {
        (&self.api_version, &self.kind)
    }

    /// The form this writer's items are memoized under.
    pub fn form(&self) -> EncodedForm {
        match self.object {
            Some(_) => EncodedForm::Object,
            None => EncodedForm::Metadata,
        }
    }

    /// The length of `r`'s message as a list item, memoized in the record.
    pub fn item_len(&mut self, r: &Record) -> Result<usize, ProtoError> {
        self.measure(r).map(|(n, _)| n)
    }

    /// [`Self::item_len`], and whether `r` was measured just now: its message is then in
    /// the scratch buffer, to be copied rather than transcoded again.
    fn measure(&mut self, r: &Record) -> Result<(usize, bool), ProtoError> {
        let form = self.form();
        if let Some(n) = r.encoded_len(form) {
            return Ok((n, false));
        }
        // Measured into the scratch buffer (taken out so the writers may borrow `self`).
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let written = match self.object {
            Some(id) => self.enc.message(id, r.bytes(), &mut scratch),
            None => self.metadata_message(r, None, &mut scratch),
        };
        let n = scratch.len();
        self.scratch = scratch;
        written?;
        r.set_encoded_len(form, n);
        Ok((n, true))
    }

    /// Takes part in sharing items with concurrent protobuf responses of the same
    /// resource and form (a LIST, a watch-list's initial events), until
    /// [`Self::stop_sharing`].
    pub fn start_sharing(&mut self) {
        self.sharing = self.window.as_ref().map(|w| w.join(self.group));
    }

    /// Takes part in sharing runs of items framed as `framing` with concurrent protobuf
    /// responses of whole snapshots cut around `run_bytes` (`Runs`), until
    /// [`Self::stop_sharing`].
    pub(crate) fn start_sharing_runs(&mut self, run_bytes: usize, framing: RunFraming) {
        let group = shared::group_of_runs(self.group, run_bytes, framing);
        self.sharing = self.window.as_ref().map(|w| w.join_runs(group));
    }

    /// Leaves the sharing readers (a watch-list's initial events are over).
    pub fn stop_sharing(&mut self) {
        self.wake_waiters();
        self.sharing = None;
    }

    /// Wakes the responses that waited for items this one kept: called when it hands out
    /// a chunk or waits itself, so they copy a chunk's worth of items per wake-up.
    pub fn wake_waiters(&mut self) {
        self.waiters.drain(..).for_each(Waker::wake);
    }

    /// `r`'s message as it is stored (no stamp): another response's encoding while
    /// protobuf responses share items, else transcoded into `scratch` (and kept for the
    /// others while they share). With a `waker`, an item another response is transcoding
    /// now is waited for ([`Item::Wait`]) rather than transcoded twice.
    pub fn item(
        &mut self,
        r: &Arc<Record>,
        scratch: &mut Vec<u8>,
        waker: Option<&Waker>,
    ) -> Result<Item, ProtoError> {
        let lookup = match &self.sharing {
            Some(s) => s.get(r, waker),
            None => Lookup::Alone,
        };
        match lookup {
            Lookup::Hit(b, _) => return Ok(Item::Shared(b)),
            Lookup::Wait => return Ok(Item::Wait),
            Lookup::Alone | Lookup::Miss => {}
        }
        scratch.clear();
        let written = self.write_item(r, None, scratch);
        match (lookup, &self.sharing) {
            (Lookup::Miss, Some(s)) => {
                if let Err(e) = written {
                    s.give_up(r);
                    return Err(e);
                }
                let b = Bytes::copy_from_slice(scratch);
                let waiters = s.keep(r, b.clone(), None);
                self.waiters.extend(waiters);
                Ok(Item::Shared(b))
            }
            _ => written.map(|()| Item::InScratch),
        }
    }

    /// Writes `r` into a LIST (or watch-list) of a whole snapshot in runs ([`Runs`]); on a
    /// failure the run being built is dropped and its claim given up, so no response
    /// waits on a run that will not come (whether or not this one is polled again).
    pub(crate) fn run_item(
        &mut self,
        runs: &mut Runs,
        r: &Arc<Record>,
        out: &mut ChunkWriter,
        waker: Option<&Waker>,
    ) -> Result<RunStep, ProtoError> {
        let step = self.write_run_item(runs, r, out, waker);
        if step.is_err() {
            self.drop_run(runs);
        }
        step
    }

    /// Drops the run being built, giving up its claim in the shared window.
    fn drop_run(&self, runs: &mut Runs) {
        if let (Some(b), Some(s)) = (runs.building.take(), &self.sharing)
            && b.claimed
        {
            s.give_up(&b.first);
        }
    }

    /// [`Self::run_item`]'s work.
    fn write_run_item(
        &mut self,
        runs: &mut Runs,
        r: &Arc<Record>,
        out: &mut ChunkWriter,
        waker: Option<&Waker>,
    ) -> Result<RunStep, ProtoError> {
        if let Some(p) = &mut runs.pending {
            let next = p.records.get(p.matched);
            if next.is_some_and(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(r))) {
                p.matched += 1;
                if p.matched == p.records.len() {
                    if let Some(s) = &self.sharing {
                        s.count_hits(p.matched);
                    }
                    if let Some(p) = runs.pending.take() {
                        out.put_shared(p.bytes);
                    }
                }
                return Ok(RunStep::Written);
            }
            // Not this response's records (another snapshot): write them here, and keep
            // the run this snapshot has in its place.
            self.write_pending(runs, out)?;
        }
        // Measured only where the length is needed before the lookup: a record another
        // response is writing is not transcoded here to learn its length.
        let mut measured = None;
        if runs.building.is_some() {
            let (len, in_scratch) = self.measure(r)?;
            measured = Some((len, in_scratch));
            if runs.buf.len() + self.framed_len(runs, len) > MAX_RUN_CHUNKS * runs.run_bytes {
                self.finish_run(runs, out);
                if out.is_full() {
                    return Ok(RunStep::Later);
                }
            }
        }
        if runs.building.is_none() {
            let lookup = match &self.sharing {
                Some(s) => s.get(r, waker),
                None => Lookup::Alone,
            };
            let claimed = match lookup {
                Lookup::Hit(bytes, Some(records)) => {
                    runs.pending = Some(Pending {
                        bytes,
                        records,
                        matched: 0,
                    });
                    return self.write_run_item(runs, r, out, waker);
                }
                // One item (nothing keeps those in a group of runs): transcoded here.
                Lookup::Hit(_, None) | Lookup::Alone => false,
                Lookup::Wait => return Ok(RunStep::Wait),
                Lookup::Miss => true,
            };
            runs.start(r, claimed, false);
        }
        let (len, in_scratch) = match measured {
            Some(m) => m,
            None => self.measure(r)?,
        };
        self.append_to_run(runs, r, len, in_scratch, out)?;
        Ok(RunStep::Written)
    }

    /// How many bytes `r`'s message of `len` bytes takes framed in `runs` (its heads
    /// depend only on `len` and the kind: level readers cut the same runs).
    fn framed_len(&self, runs: &mut Runs, len: usize) -> usize {
        match runs.framing {
            RunFraming::ListItems => field_len(len),
            RunFraming::AddedEvents => {
                self.added_event_heads(len, &mut runs.heads);
                runs.heads.len() + len + ENVELOPE_TAIL.len()
            }
        }
    }

    /// Appends `r`'s framed item (its message `len` bytes, in the scratch buffer when
    /// `in_scratch`) to the run being built, and ends the run after it at a boundary; on a
    /// failure the run is dropped and its claim given up.
    fn append_to_run(
        &mut self,
        runs: &mut Runs,
        r: &Arc<Record>,
        len: usize,
        in_scratch: bool,
        out: &mut ChunkWriter,
    ) -> Result<(), ProtoError> {
        let mut buf = std::mem::take(&mut runs.buf);
        let start = buf.len();
        match runs.framing {
            RunFraming::ListItems => {
                buf.push(0x12);
                put_varint(&mut buf, len as u64);
            }
            RunFraming::AddedEvents => {
                let envelope = self.added_event_heads(len, &mut runs.heads);
                buf.extend_from_slice(&runs.heads[envelope..]);
                buf.extend_from_slice(&runs.heads[..envelope]);
            }
        }
        let at = buf.len();
        let written = if in_scratch {
            buf.extend_from_slice(&self.scratch);
            Ok(())
        } else {
            self.write_item(r, None, &mut buf)
        };
        let written = written.and_then(|()| {
            if buf.len() - at == len {
                Ok(())
            } else {
                Err(ProtoError::Malformed(
                    "an item's length changed between passes",
                ))
            }
        });
        if runs.framing == RunFraming::AddedEvents {
            buf.extend_from_slice(&ENVELOPE_TAIL);
        }
        runs.buf = buf;
        if let Err(e) = written {
            self.drop_run(runs);
            return Err(e);
        }
        if let Some(records) = runs.building.as_mut().and_then(|b| b.records.as_mut()) {
            records.push(Arc::downgrade(r));
        }
        // What was appended is the framed item ([`Self::framed_len`]).
        let framed = runs.buf.len() - start;
        if runs.ends_after(r, framed) {
            self.finish_run(runs, out);
        }
        Ok(())
    }

    /// Writes here the records matched against another response's run that turned out
    /// not to be this response's, as a run of its own kept in that one's place.
    fn write_pending(&mut self, runs: &mut Runs, out: &mut ChunkWriter) -> Result<(), ProtoError> {
        let Some(p) = runs.pending.take() else {
            return Ok(());
        };
        for w in &p.records[..p.matched] {
            // Alive: each is a record of this response's snapshot, which holds it.
            let r = &w
                .upgrade()
                .ok_or(ProtoError::Malformed("a record of a shared run is gone"))?;
            if runs.building.is_none() {
                runs.start(r, false, true);
            }
            let (len, in_scratch) = self.measure(r)?;
            self.append_to_run(runs, r, len, in_scratch, out)?;
        }
        Ok(())
    }

    /// Ends the run being built: hands it to `out`, and keeps it for the other LISTs
    /// when it was claimed (or replaces another snapshot's).
    pub(crate) fn finish_run(&mut self, runs: &mut Runs, out: &mut ChunkWriter) {
        let Some(b) = runs.building.take() else {
            return;
        };
        // Copied out of the reused buffer: a kept run holds only its own bytes, which the
        // window's budget counts (runs handed over in chunk-sized buffers half full held
        // twice what was counted: 64 LISTs' peak 63-73 MiB against 26-48).
        let bytes = Bytes::copy_from_slice(&runs.buf);
        runs.buf.clear();
        if runs.buf.capacity() > MAX_RUN_CHUNKS * runs.run_bytes {
            // Grown by an object larger than a run: not kept for the rest of the LIST.
            runs.buf = Vec::new();
        }
        if let (Some(records), Some(s)) = (b.records, &self.sharing) {
            self.waiters
                .extend(s.keep(&b.first, bytes.clone(), Some(records.into())));
        }
        out.put_shared(bytes);
    }

    /// Ends a LIST's runs at its last record: what is still being checked against a kept
    /// run (the snapshot ended first) is written here, and the open run handed out.
    pub(crate) fn finish_runs(
        &mut self,
        runs: &mut Runs,
        out: &mut ChunkWriter,
    ) -> Result<(), ProtoError> {
        self.write_pending(runs, out)?;
        self.finish_run(runs, out);
        Ok(())
    }

    /// Appends the head of a whole protobuf body (`k8s\0`, `typeMeta`, the raw field's key
    /// and length) whose message of `message_len` bytes and [`ENVELOPE_TAIL`] follow: a
    /// shared message is framed without being copied into a body first.
    pub fn envelope_head(&self, message_len: usize, out: &mut Vec<u8>) {
        out.extend_from_slice(listwatch_protobuf::MAGIC);
        put_type_meta(out, &self.api_version, &self.kind);
        out.push(0x12);
        put_varint(out, message_len as u64);
    }

    /// Writes into `heads` the whole-body head of a message of `message_len` bytes
    /// ([`Self::envelope_head`]), then the head of the ADDED watch frame around that body;
    /// returns where the frame's head begins: it goes on the wire first.
    pub(crate) fn added_event_heads(&self, message_len: usize, heads: &mut Vec<u8>) -> usize {
        heads.clear();
        self.envelope_head(message_len, heads);
        let envelope = heads.len();
        let envelope_len = envelope + message_len + ENVELOPE_TAIL.len();
        write_watch_frame_head(EventType::Added.as_str(), envelope_len, heads);
        envelope
    }

    /// Appends `r`'s message (its resourceVersion replaced by `stamp_rv` if given).
    pub fn write_item(
        &mut self,
        r: &Record,
        stamp_rv: Option<u64>,
        out: &mut Vec<u8>,
    ) -> Result<(), ProtoError> {
        let json = self.json_of(r, stamp_rv);
        match self.object {
            Some(id) => {
                let json = if json {
                    &self.stamped[..]
                } else {
                    &r.bytes()[..]
                };
                self.enc.message(id, json, out)
            }
            None => self.metadata_message(r, stamp_rv, out),
        }
    }

    /// Appends `r` as a whole protobuf body: `k8s\0` + `runtime.Unknown`.
    pub fn write_envelope(
        &mut self,
        r: &Record,
        stamp_rv: Option<u64>,
        out: &mut Vec<u8>,
    ) -> Result<(), ProtoError> {
        // Taken out for the call (no copy), so `write_item` may borrow `self`.
        let (api_version, kind) = (
            std::mem::take(&mut self.api_version),
            std::mem::take(&mut self.kind),
        );
        let written = write_envelope(out, &api_version, &kind, |out| {
            self.write_item(r, stamp_rv, out)
        });
        (self.api_version, self.kind) = (api_version, kind);
        written
    }

    /// Appends the JSON object `json` (a bookmark's empty object) as a whole protobuf
    /// body of this writer's kind.
    pub fn write_json_envelope(
        &mut self,
        json: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), ProtoError> {
        let (object, object_meta) = (self.object, self.object_meta);
        let enc = &mut self.enc;
        write_envelope(out, &self.api_version, &self.kind, |out| match object {
            Some(id) => enc.message(id, json, out),
            None => {
                // PartialObjectMetadata{metadata}: the object's `metadata` member.
                let md = listwatch_core::scan::find_member(json, 0, "metadata")
                    .ok_or(ProtoError::Malformed("object without metadata"))?;
                let inner = begin(out, 1);
                enc.message(object_meta, &json[md.0..md.1], out)?;
                end(out, inner);
                Ok(())
            }
        })
    }

    /// Appends a `Status` JSON body as a protobuf `Status` body (`v1`, as kube-apiserver
    /// types it).
    pub fn write_status(
        &mut self,
        status_json: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), ProtoError> {
        status_body(&mut self.enc, self.status, status_json, out)
    }

    /// The `ListMeta` message of a list page.
    pub fn list_meta(
        &mut self,
        rv: u64,
        continue_token: Option<&str>,
        remaining: Option<u64>,
    ) -> Result<Vec<u8>, ProtoError> {
        let mut json = Vec::with_capacity(128);
        json.extend_from_slice(b"{\"resourceVersion\":\"");
        let mut buf = itoa::Buffer::new();
        json.extend_from_slice(buf.format(rv).as_bytes());
        json.push(b'"');
        if let Some(t) = continue_token {
            json.extend_from_slice(b",\"continue\":");
            listwatch_core::json::push_go_string(&mut json, t);
        }
        if let Some(n) = remaining {
            json.extend_from_slice(b",\"remainingItemCount\":");
            json.extend_from_slice(buf.format(n).as_bytes());
        }
        json.push(b'}');
        let mut out = Vec::with_capacity(json.len());
        self.enc.message(self.list_meta, &json, &mut out)?;
        Ok(out)
    }

    /// Fills `stamped` with `r`'s JSON carrying `stamp_rv` when that differs from its own;
    /// returns whether it did.
    fn json_of(&mut self, r: &Record, stamp_rv: Option<u64>) -> bool {
        match stamp_rv {
            Some(rv) if rv != r.rv() => {
                let b = r.bytes();
                let span = r.rv_range();
                self.stamped.clear();
                self.stamped.extend_from_slice(&b[..span.start]);
                let mut buf = itoa::Buffer::new();
                self.stamped.extend_from_slice(buf.format(rv).as_bytes());
                self.stamped.extend_from_slice(&b[span.end..]);
                true
            }
            _ => false,
        }
    }

    /// Appends `PartialObjectMetadata{metadata}` of `r`.
    fn metadata_message(
        &mut self,
        r: &Record,
        stamp_rv: Option<u64>,
        out: &mut Vec<u8>,
    ) -> Result<(), ProtoError> {
        let md = r.metadata_range();
        let json: &[u8] = if self.json_of(r, stamp_rv) {
            // The stamp moved everything after the resourceVersion by the digits' change.
            let shift = self.stamped.len() as isize - r.bytes().len() as isize;
            &self.stamped[md.start..(md.end as isize + shift) as usize]
        } else {
            &r.bytes()[md]
        };
        let at = begin(out, 1);
        self.enc.message(self.object_meta, json, out)?;
        end(out, at);
        Ok(())
    }
}

/// Measures the protobuf lengths a LIST states before its items (whole object and
/// PartialObjectMetadata, the forms `wanted` says) of every record of `snap` not measured
/// yet, and the snapshot's total in each form, so that a protobuf LIST — the first of a
/// storm too — states its length without transcoding or summing the collection before its
/// first byte. Returns how many records it transcoded; `0` for a kind without protobuf.
pub fn measure_lengths(
    info: &ResourceInfo,
    snap: &Snapshot,
    wanted: impl Fn(EncodedForm) -> bool,
) -> usize {
    let mut measured = 0;
    for metadata_only in [false, true] {
        let Some(mut w) = ProtoObjects::new(info, metadata_only, None) else {
            return 0;
        };
        let form = w.form();
        if !wanted(form) {
            continue;
        }
        let mut reader =
            SnapshotReader::new(snap.clone(), Arc::new(Filter::everything()), None, None);
        let (mut total, mut complete) = (0, true);
        while reader.next_batch(usize::MAX, |r| {
            if r.encoded_len(form).is_none() {
                measured += 1;
            }
            match w.item_len(r) {
                Ok(n) => total += field_len(n),
                // An object that cannot be encoded is reported by the LIST that sends it.
                Err(_) => complete = false,
            }
            true
        }) {}
        if complete {
            snap.set_encoded_total(form, total);
        }
    }
    measured
}

/// The bytes a length-delimited field of `n` bytes takes (field number below 16).
pub(crate) fn field_len(n: usize) -> usize {
    1 + varint_len(n as u64) + n
}

/// A `Status` JSON body as a protobuf body.
pub fn status_body(
    enc: &mut ProtoEncoder<'static>,
    status: MessageId,
    status_json: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), ProtoError> {
    enc.envelope("v1", "Status", status, status_json, out)
}

/// A `Status` JSON body (as `ApiError::to_status` renders it) as a protobuf body.
pub fn status_to_protobuf(status_json: &[u8]) -> Result<Vec<u8>, ProtoError> {
    let schema = Schema::kubernetes();
    let id = schema
        .kind(META_V1, "Status")
        .ok_or(ProtoError::Malformed("no Status message"))?;
    let mut out = Vec::with_capacity(status_json.len());
    status_body(&mut ProtoEncoder::new(schema), id, status_json, &mut out)?;
    Ok(out)
}

/// A whole watch body that is one ERROR event carrying the `Status` JSON `status_json`
/// (kube-apiserver's answer to a watch from a compacted resourceVersion).
pub fn watch_error_body(status_json: &[u8]) -> Result<Vec<u8>, ProtoError> {
    let envelope = status_to_protobuf(status_json)?;
    let mut out = Vec::with_capacity(envelope.len() + 16);
    write_watch_frame("ERROR", &envelope, &mut out);
    Ok(out)
}

/// Appends one watch frame: the event's length (4 bytes, big-endian), then the
/// `WatchEvent{type, object: RawExtension{raw: envelope}}` message.
pub fn write_watch_frame(event_type: &str, envelope: &[u8], out: &mut Vec<u8>) {
    write_watch_frame_head(event_type, envelope.len(), out);
    out.extend_from_slice(envelope);
}

/// Appends a watch frame up to its envelope of `envelope_len` bytes, which the caller
/// sends next (shared bytes framed without a copy into a scratch buffer).
pub fn write_watch_frame_head(event_type: &str, envelope_len: usize, out: &mut Vec<u8>) {
    let raw_len = 1 + varint_len(envelope_len as u64) + envelope_len;
    let len = 1
        + varint_len(event_type.len() as u64)
        + event_type.len()
        + 1
        + varint_len(raw_len as u64)
        + raw_len;
    out.extend_from_slice(&(len as u32).to_be_bytes());
    put_bytes(out, 1, event_type.as_bytes());
    out.push(0x12);
    put_varint(out, raw_len as u64);
    out.push(0x0a);
    put_varint(out, envelope_len as u64);
}

/// `PartialObjectMetadata`'s JSON head; the object's `metadata` and `}` follow.
pub const PARTIAL_HEAD: &[u8] =
    b"{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":";

fn object_meta(schema: &Schema) -> Option<MessageId> {
    field_message(schema, schema.kind(META_V1, "PartialObjectMetadata")?, 1)
}

fn list_meta(schema: &Schema) -> Option<MessageId> {
    field_message(
        schema,
        schema.kind(META_V1, "PartialObjectMetadataList")?,
        1,
    )
}

/// The message of field `tag` of message `id`.
fn field_message(schema: &Schema, id: MessageId, tag: u32) -> Option<MessageId> {
    let msg = schema.message(id);
    match msg.fields.get(msg.field_index(tag)?)?.kind {
        listwatch_protobuf::Kind::Message(m) => Some(m),
        _ => None,
    }
}

/// A protobuf request body (`k8s\0` + `runtime.Unknown`, as `kubectl create` and `auth
/// can-i` send) as the JSON of the same object.
pub fn request_body_to_json(body: &[u8]) -> Result<Vec<u8>, ApiError> {
    let bad = |e: listwatch_protobuf::ProtoError| {
        ApiError::BadRequest(format!("the protobuf body could not be decoded: {e}"))
    };
    let schema = listwatch_protobuf::Schema::kubernetes();
    let mut out = Vec::with_capacity(body.len() * 2);
    // The same reading as a stored value's, without storage's read-time defaults.
    match listwatch_protobuf::storage_to_json(
        &mut listwatch_protobuf::JsonWriter::new(schema),
        schema,
        body,
        &mut out,
    ) {
        Ok(_) => Ok(out),
        Err(listwatch_protobuf::ProtoError::UnknownKind { api_version, kind }) => {
            Err(ApiError::UnsupportedMediaType(format!(
                "no protobuf form for {api_version}, Kind={kind}"
            )))
        }
        Err(e) => Err(bad(e)),
    }
}
