//! The writer seam. Content negotiation ([`negotiate`]) yields a [`Rendering`]; the
//! rendering builds, once per response, the [`ObjectWriter`] that decides every byte of the
//! body — a list's head, items and tail, a watch event, a bookmark, an ERROR, a single
//! object — for JSON objects, PartialObjectMetadata, Tables, protobuf objects and protobuf
//! metadata. LIST, WATCH and GET drive it (ripgrep's searcher and `Sink`); a new wire form
//! is one more writer style here.

use std::sync::Arc;
use std::task::Waker;

use bytes::Bytes;
use listwatch_core::json::push_go_string;
use listwatch_core::{ApiError, QueryParams, ResourceInfo, Verb};
use listwatch_protobuf::encode::{put_type_meta, put_varint, varint_bytes};
use listwatch_protobuf::{MAGIC, ProtoError};
use listwatch_store::record::EncodedForm;
use listwatch_store::{Event, EventForm, EventType, FilteredEvent, Record, SnapshotReader};

use crate::frame::{bookmark_object, partial_bookmark_object, write_error, write_event};
use crate::protobuf::{
    self as pb, META_V1, PARTIAL_HEAD, ProtoObjects, field_len, write_watch_frame,
    write_watch_frame_head,
};
use crate::shared::Sharing;
use crate::table::{IncludeObject, TableFormat};
use crate::{ChunkWriter, Encoding};

/// What a read response holds per object.
#[derive(Clone, Debug)]
pub enum Form {
    /// The objects.
    Objects,
    /// A `meta.k8s.io` Table.
    Table(TableFormat),
    /// PartialObjectMetadata.
    Metadata,
}

/// How a LIST, GET or watch response is rendered, as negotiated.
#[derive(Clone, Debug)]
pub struct Rendering {
    /// The wire encoding.
    pub encoding: Encoding,
    /// What each object is sent as.
    pub form: Form,
    /// The client accepts gzip.
    pub gzip: bool,
}

impl Rendering {
    /// Whole objects in `encoding`, uncompressed (what benches and tests encode).
    pub fn objects(encoding: Encoding) -> Self {
        Self::new(encoding, Form::Objects)
    }

    /// Protobuf objects, or their PartialObjectMetadata when `metadata_only`, uncompressed.
    pub fn protobuf(metadata_only: bool) -> Self {
        let form = if metadata_only {
            Form::Metadata
        } else {
            Form::Objects
        };
        Self::new(Encoding::Protobuf, form)
    }

    /// `form` in `encoding`, uncompressed.
    pub fn new(encoding: Encoding, form: Form) -> Self {
        Rendering {
            encoding,
            form,
            gzip: false,
        }
    }

    /// The writer of this rendering for `info`'s objects, sharing protobuf items with
    /// concurrent responses in `sharing` (the app's); 406 for a protobuf form the kind
    /// does not have (negotiation already steers clients away from it).
    pub fn writer(&self, info: &ResourceInfo, sharing: &Sharing) -> Result<ObjectWriter, ApiError> {
        let metadata = matches!(self.form, Form::Metadata);
        let style = match (&self.encoding, &self.form) {
            (Encoding::Protobuf, _) => {
                let objects =
                    ProtoObjects::new(info, metadata, Some(sharing)).ok_or_else(|| {
                        ApiError::NotAcceptable(format!("{} has no protobuf form", info.resource))
                    })?;
                Style::Protobuf(Box::new(ProtoStyle {
                    objects,
                    scratch: Vec::new(),
                    frame: Vec::new(),
                }))
            }
            (Encoding::Json, Form::Objects) => Style::Json,
            (Encoding::Json, Form::Metadata) => Style::Metadata,
            (Encoding::Json, Form::Table(t)) => Style::Table(Box::new(t.clone())),
        };
        let (api_version, list_kind) = if metadata {
            (META_V1.to_string(), "PartialObjectMetadataList".to_string())
        } else {
            (info.api_version(), info.list_kind())
        };
        Ok(ObjectWriter {
            // Custom resources are the ones without a protobuf form.
            unstructured: !pb::has_protobuf(info),
            metadata_items_open: false,
            style,
            api_version,
            list_kind,
            now: listwatch_core::time::unix_now(),
        })
    }
}

enum Style {
    Json,
    Metadata,
    /// Boxed like protobuf's state: every watch's writer would otherwise carry its size.
    Table(Box<TableFormat>),
    Protobuf(Box<ProtoStyle>),
}

/// Protobuf's state with its scratch buffers: in the box, so a JSON watch's writer does
/// not carry two empty buffers for life.
struct ProtoStyle {
    objects: ProtoObjects,
    /// One protobuf item or envelope.
    scratch: Vec<u8>,
    /// One protobuf watch frame.
    frame: Vec<u8>,
}

impl ProtoStyle {
    /// The encoder and its two buffers, borrowed apart.
    fn parts(&mut self) -> (&mut ProtoObjects, &mut Vec<u8>, &mut Vec<u8>) {
        (&mut self.objects, &mut self.scratch, &mut self.frame)
    }

    /// One watch frame of `kind` around the envelope `envelope` writes (nothing is written
    /// if it fails).
    fn watch_frame(
        &mut self,
        kind: &str,
        out: &mut ChunkWriter,
        envelope: impl FnOnce(&mut ProtoObjects, &mut Vec<u8>) -> Result<(), ProtoError>,
    ) -> Result<(), ProtoError> {
        self.scratch.clear();
        envelope(&mut self.objects, &mut self.scratch)?;
        self.frame.clear();
        write_watch_frame(kind, &self.scratch, &mut self.frame);
        out.put_slice(&self.frame);
        Ok(())
    }
}

impl std::ops::Deref for ProtoStyle {
    type Target = ProtoObjects;
    fn deref(&self) -> &ProtoObjects {
        &self.objects
    }
}

impl std::ops::DerefMut for ProtoStyle {
    fn deref_mut(&mut self) -> &mut ProtoObjects {
        &mut self.objects
    }
}

/// A list page's metadata, written by [`ObjectWriter::list_head`].
pub struct ListHead<'a> {
    /// The snapshot's RV.
    pub rv: u64,
    /// `metadata.continue`.
    pub continue_token: Option<&'a str>,
    /// `metadata.remainingItemCount`.
    pub remaining: Option<u64>,
    /// The items' encoded size, summed with [`ObjectWriter::item_len`] (protobuf only).
    pub items_len: usize,
}

/// Writes one response's objects in its negotiated form; built once per response by
/// [`Rendering::writer`], its scratch buffers reused for every object.
pub struct ObjectWriter {
    style: Style,
    api_version: String,
    list_kind: String,
    /// Tables' ages of a LIST or GET are computed at this moment (seconds since the epoch).
    now: i64,
    /// A custom resource: kube-apiserver serves its lists as unstructured lists, whose items
    /// keep `kind` and `apiVersion` and whose metadata always has `continue` (`""` on the
    /// last page).
    unstructured: bool,
    /// A PartialObjectMetadataList's `items` array is open (an item was written): with no
    /// item kube-apiserver writes `"items":null` (its list starts as a nil slice).
    metadata_items_open: bool,
}

impl ObjectWriter {
    /// Frees the scratch buffers that grew past `bytes` (0: all): a watch calls it when it
    /// goes quiet, so a kubelet's watch does not keep its initial events' buffers for life.
    pub fn release_buffers_over(&mut self, bytes: usize) {
        use listwatch_protobuf::encode::release_over;
        if let Style::Protobuf(ps) = &mut self.style {
            let (p, scratch, frame) = ps.parts();
            release_over(scratch, bytes);
            release_over(frame, bytes);
            p.release_buffers_over(bytes);
        }
    }

    /// `Content-Type` of a LIST or GET (`watch`: of a watch stream).
    pub fn content_type(&self, watch: bool) -> &'static str {
        match (&self.style, watch) {
            (Style::Protobuf(_), false) => pb::PROTOBUF,
            (Style::Protobuf(_), true) => pb::PROTOBUF_WATCH,
            _ => "application/json",
        }
    }

    /// The wire encoding written.
    pub fn encoding(&self) -> Encoding {
        match self.style {
            Style::Protobuf(_) => Encoding::Protobuf,
            _ => Encoding::Json,
        }
    }

    /// Shares protobuf items with concurrent responses of the same resource and form
    /// in the window it was built with, until [`Self::stop_sharing`] (see
    /// [`crate::shared`]); other forms have nothing to share.
    pub fn start_sharing(&mut self) {
        if let Style::Protobuf(p) = &mut self.style {
            p.start_sharing();
        }
    }

    /// Shares what `reader`'s page lets this response share with concurrent ones: runs
    /// framed as `framing` for a whole snapshot (returned; cut around `run_bytes`), items
    /// otherwise — except for a page read by the field index: a node's pods are read by
    /// that node, and sharing them only copies and holds items nobody takes (a kubelet
    /// storm filled the window's 32 MiB with them).
    pub(crate) fn start_sharing_for(
        &mut self,
        reader: &SnapshotReader,
        run_bytes: usize,
        framing: pb::RunFraming,
    ) -> Option<pb::Runs> {
        if reader.reads_whole_snapshot() {
            return self.start_sharing_runs(run_bytes, framing);
        }
        if !reader.reads_by_index() {
            self.start_sharing();
        }
        None
    }

    /// Shares runs of items framed as `framing` with concurrent protobuf responses of
    /// whole snapshots ([`pb::Runs`]); `None` for the other forms, which write item by item.
    fn start_sharing_runs(
        &mut self,
        run_bytes: usize,
        framing: pb::RunFraming,
    ) -> Option<pb::Runs> {
        match &mut self.style {
            Style::Protobuf(p) => {
                p.objects.start_sharing_runs(run_bytes, framing);
                Some(pb::Runs::new(run_bytes, framing))
            }
            _ => None,
        }
    }

    /// [`Self::list_item`] (or [`Self::initial_event`]) for a response written in runs
    /// ([`pb::ProtoObjects::run_item`]).
    pub(crate) fn run_item(
        &mut self,
        runs: &mut pb::Runs,
        out: &mut ChunkWriter,
        r: &Arc<Record>,
        waker: Option<&Waker>,
    ) -> Result<pb::RunStep, ProtoError> {
        match &mut self.style {
            Style::Protobuf(p) => p.objects.run_item(runs, r, out, waker),
            _ => Ok(pb::RunStep::from_written(
                self.list_item(out, r, false, waker)?,
            )),
        }
    }

    /// Ends the runs at the page's end ([`pb::ProtoObjects::finish_runs`]).
    pub(crate) fn finish_runs(
        &mut self,
        runs: &mut pb::Runs,
        out: &mut ChunkWriter,
    ) -> Result<(), ProtoError> {
        match &mut self.style {
            Style::Protobuf(p) => p.objects.finish_runs(runs, out),
            _ => Ok(()),
        }
    }

    /// Stops sharing protobuf items.
    pub fn stop_sharing(&mut self) {
        if let Style::Protobuf(p) = &mut self.style {
            p.stop_sharing();
        }
    }

    /// Wakes the responses waiting for protobuf items this one kept
    /// ([`ProtoObjects::wake_waiters`]): called as each chunk is handed out.
    pub fn wake_waiters(&mut self) {
        if let Style::Protobuf(p) = &mut self.style {
            p.wake_waiters();
        }
    }

    /// The form whose items' encoded size [`Self::list_head`] needs first (protobuf: the
    /// list message is length-prefixed); `None` for JSON.
    pub fn measured_form(&self) -> Option<EncodedForm> {
        match &self.style {
            Style::Protobuf(p) => Some(p.form()),
            _ => None,
        }
    }

    /// The bytes `r` takes as a list item (protobuf; memoized in the record).
    pub fn item_len(&mut self, r: &Record) -> Result<usize, ProtoError> {
        match &mut self.style {
            Style::Protobuf(p) => Ok(field_len(p.item_len(r)?)),
            _ => Ok(0),
        }
    }

    /// A list's head: envelope and `ListMeta` (protobuf), or `{"kind":…,"metadata":{…},
    /// "items":[` (JSON; a Table's columns and `"rows":[`).
    pub fn list_head(
        &mut self,
        out: &mut ChunkWriter,
        page: &ListHead<'_>,
    ) -> Result<(), ProtoError> {
        let mut h = Vec::with_capacity(256);
        if let Style::Protobuf(p) = &mut self.style {
            let list_meta = p.list_meta(page.rv, page.continue_token, page.remaining)?;
            h.extend_from_slice(MAGIC);
            put_type_meta(&mut h, &self.api_version, &self.list_kind);
            h.push(0x12);
            put_varint(&mut h, (field_len(list_meta.len()) + page.items_len) as u64);
            h.push(0x0a);
            put_varint(&mut h, list_meta.len() as u64);
            h.extend_from_slice(&list_meta);
            out.put_slice(&h);
            return Ok(());
        }
        match &self.style {
            Style::Table(t) => t.open(&mut h),
            _ => {
                h.extend_from_slice(b"{\"kind\":");
                push_go_string(&mut h, &self.list_kind);
                h.extend_from_slice(b",\"apiVersion\":");
                push_go_string(&mut h, &self.api_version);
                h.extend_from_slice(b",\"metadata\":{");
            }
        }
        let mut buf = itoa::Buffer::new();
        let unstructured_json = self.unstructured && matches!(self.style, Style::Json);
        if unstructured_json && page.continue_token.is_none() {
            h.extend_from_slice(b"\"continue\":\"\",");
        }
        h.extend_from_slice(b"\"resourceVersion\":\"");
        h.extend_from_slice(buf.format(page.rv).as_bytes());
        h.push(b'"');
        if let Some(t) = page.continue_token {
            h.extend_from_slice(b",\"continue\":");
            push_go_string(&mut h, t);
        }
        if let Some(n) = page.remaining {
            h.extend_from_slice(b",\"remainingItemCount\":");
            h.extend_from_slice(buf.format(n).as_bytes());
        }
        match &self.style {
            Style::Table(t) => t.columns_and_rows_start(&mut h),
            Style::Metadata => h.extend_from_slice(b"},\"items\":"),
            _ => h.extend_from_slice(b"},\"items\":["),
        }
        out.put_slice(&h);
        Ok(())
    }

    /// One list item (`first`: no separator before it). With a `waker`, a protobuf item
    /// another response is transcoding now is waited for: `Ok(false)`, nothing written,
    /// and `waker` is woken when it can be written.
    pub fn list_item(
        &mut self,
        out: &mut ChunkWriter,
        r: &Arc<Record>,
        first: bool,
        waker: Option<&Waker>,
    ) -> Result<bool, ProtoError> {
        match &mut self.style {
            Style::Json if self.unstructured => {
                if !first {
                    out.put_slice(b",");
                }
                out.put_bytes(r.bytes().clone());
            }
            Style::Json => {
                out.put_slice(if first { b"{" } else { b",{" });
                out.put_bytes(r.list_item_tail());
            }
            Style::Metadata => {
                out.put_slice(if self.metadata_items_open { b"," } else { b"[" });
                self.metadata_items_open = true;
                out.put_slice(PARTIAL_HEAD);
                out.put_bytes(r.metadata());
                out.put_slice(b"}");
            }
            Style::Table(t) => {
                if !first {
                    out.put_slice(b",");
                }
                t.write_row(out, r, None, self.now);
            }
            Style::Protobuf(ps) => {
                let (p, scratch, _) = ps.parts();
                let expected = p.item_len(r)?;
                let shared = match p.item(r, scratch, waker)? {
                    pb::Item::Wait => return Ok(false),
                    pb::Item::Shared(b) => Some(b),
                    pb::Item::InScratch => None,
                };
                let item = shared.as_deref().unwrap_or(scratch);
                if expected != item.len() {
                    return Err(ProtoError::Malformed(
                        "an item's length changed between passes",
                    ));
                }
                let mut len = [0u8; 10];
                let k = varint_bytes(expected as u64, &mut len);
                out.put_slice(&[0x12]);
                out.put_slice(&len[..k]);
                match shared {
                    Some(b) => out.put_bytes(b),
                    None => out.put_slice(scratch),
                }
            }
        }
        Ok(true)
    }

    /// A list's tail: `]}` and a newline (JSON), the envelope's empty `contentEncoding` and
    /// `contentType` (protobuf).
    pub fn list_tail(&mut self, out: &mut ChunkWriter) {
        match self.style {
            Style::Protobuf(_) => out.put_slice(&pb::ENVELOPE_TAIL),
            Style::Metadata if !self.metadata_items_open => out.put_slice(b"null}\n"),
            _ => out.put_slice(b"]}\n"),
        }
    }

    /// One watch event of `r` (sent with `stamp_rv` in place of its RV when given); Table
    /// ages at `now`.
    pub fn event(
        &mut self,
        out: &mut ChunkWriter,
        kind: EventType,
        r: &Record,
        stamp_rv: Option<u64>,
        now: i64,
    ) -> Result<(), ProtoError> {
        match &mut self.style {
            Style::Json => write_event(out, kind, r, stamp_rv),
            Style::Table(t) => t.write_event(out, kind.as_str(), r, stamp_rv, now),
            Style::Metadata => {
                out.put_slice(b"{\"type\":\"");
                out.put_slice(kind.as_str().as_bytes());
                out.put_slice(b"\",\"object\":");
                out.put_slice(PARTIAL_HEAD);
                let md = r.metadata_range();
                match stamp_rv {
                    Some(rv) if rv != r.rv() => {
                        let at = r.rv_range();
                        out.put_slice(&r.bytes()[md.start..at.start]);
                        out.put_slice(itoa::Buffer::new().format(rv).as_bytes());
                        out.put_slice(&r.bytes()[at.end..md.end]);
                    }
                    _ => out.put_bytes(r.metadata()),
                }
                out.put_slice(b"}}\n");
            }
            Style::Protobuf(ps) => {
                ps.watch_frame(kind.as_str(), out, |p, s| p.write_envelope(r, stamp_rv, s))?;
            }
        }
        Ok(())
    }

    /// One initial event of a watch-list: `r` ADDED with its own resourceVersion (a
    /// protobuf message shared with concurrent protobuf responses, see [`crate::shared`]).
    /// With a `waker`, a protobuf item another response is transcoding now is waited for:
    /// `Ok(false)`, nothing written, and `waker` is woken when it can be written.
    pub fn initial_event(
        &mut self,
        out: &mut ChunkWriter,
        r: &Arc<Record>,
        now: i64,
        waker: Option<&Waker>,
    ) -> Result<bool, ProtoError> {
        let Style::Protobuf(ps) = &mut self.style else {
            return self
                .event(out, EventType::Added, r, None, now)
                .map(|()| true);
        };
        let (p, scratch, frame) = ps.parts();
        let shared = match p.item(r, scratch, waker)? {
            pb::Item::Shared(b) => Some(b),
            pb::Item::InScratch => None,
            pb::Item::Wait => return Ok(false),
        };
        let message_len = shared.as_ref().map_or(scratch.len(), Bytes::len);
        let head = p.added_event_heads(message_len, frame);
        out.put_slice(&frame[head..]);
        out.put_slice(&frame[..head]);
        match shared {
            Some(b) => out.put_bytes(b),
            None => out.put_slice(scratch),
        }
        out.put_slice(&pb::ENVELOPE_TAIL);
        Ok(true)
    }

    /// One logged event `e` as a watcher's filter sees it (`v`). A protobuf form frames
    /// the event's own encoding, made by the first watcher of that form and shared by every
    /// other (the JSON forms are slices of the record already); Table ages at `now`.
    pub fn logged_event(
        &mut self,
        out: &mut ChunkWriter,
        e: &Event,
        v: &FilteredEvent<'_>,
        now: i64,
    ) -> Result<(), ProtoError> {
        let Style::Protobuf(ps) = &mut self.style else {
            return self.event(out, v.kind, v.object, v.stamp_rv, now);
        };
        let (p, scratch, frame) = ps.parts();
        let form = if p.metadata_only() {
            EventForm::ProtobufMetadata
        } else {
            EventForm::Protobuf
        };
        // A view stamps only the previous object, and only with the event's RV: one
        // encoding per (form, stamped) serves every watcher.
        let mut failed = None;
        let envelope = e
            .encoded
            .get_or_encode(form, v.stamp_rv.is_some(), || {
                scratch.clear();
                match p.write_envelope(v.object, v.stamp_rv, scratch) {
                    // Copied out at its exact size: the log holds it for the window.
                    Ok(()) => Some(Bytes::copy_from_slice(scratch)),
                    Err(err) => {
                        failed = Some(err);
                        None
                    }
                }
            })
            .ok_or_else(|| {
                failed.unwrap_or(ProtoError::Malformed(
                    "the event's object cannot be encoded",
                ))
            })?;
        frame.clear();
        write_watch_frame_head(v.kind.as_str(), envelope.len(), frame);
        out.put_slice(frame);
        out.put_bytes(envelope);
        Ok(())
    }

    /// A BOOKMARK event: the kind's empty object (PartialObjectMetadata's) at `rv`, with
    /// the `k8s.io/initial-events-end` annotation when `initial_events_end`.
    pub fn bookmark(
        &mut self,
        out: &mut ChunkWriter,
        info: &ResourceInfo,
        rv: u64,
        initial_events_end: bool,
    ) -> Result<(), ProtoError> {
        let object = match self.style {
            Style::Metadata => partial_bookmark_object(rv, initial_events_end),
            Style::Protobuf(ref p) if p.metadata_only() => {
                partial_bookmark_object(rv, initial_events_end)
            }
            _ => bookmark_object(info, rv, initial_events_end),
        };
        match &mut self.style {
            Style::Protobuf(ps) => {
                ps.watch_frame("BOOKMARK", out, |p, s| p.write_json_envelope(&object, s))?;
            }
            _ => {
                out.put_slice(b"{\"type\":\"BOOKMARK\",\"object\":");
                out.put_slice(&object);
                out.put_slice(b"}\n");
            }
        }
        Ok(())
    }

    /// An ERROR event carrying the `Status` JSON `status_body`.
    pub fn error_event(&mut self, out: &mut ChunkWriter, status_body: &[u8]) {
        match &mut self.style {
            Style::Protobuf(ps) => {
                // A status that cannot be encoded is left out: the stream ends anyway.
                let _ = ps.watch_frame("ERROR", out, |p, s| p.write_status(status_body, s));
            }
            _ => write_error(out, status_body),
        }
    }

    /// A whole response that is `r` alone (GET): the object, its metadata, a one-row Table,
    /// or its protobuf envelope.
    pub fn object(&mut self, r: &Record) -> Result<Bytes, ProtoError> {
        let mut body = Vec::with_capacity(r.bytes().len() + 1);
        match &mut self.style {
            Style::Protobuf(p) => p.write_envelope(r, None, &mut body)?,
            Style::Json => {
                body.extend_from_slice(r.bytes());
                body.push(b'\n');
            }
            Style::Metadata => {
                body.extend_from_slice(PARTIAL_HEAD);
                body.extend_from_slice(&r.metadata());
                body.extend_from_slice(b"}\n");
            }
            Style::Table(t) => {
                let mut out = ChunkWriter::unbounded();
                t.write_single(&mut out, r, None, self.now);
                out.put_slice(b"\n");
                body = out.into_vec();
            }
        }
        Ok(Bytes::from(body))
    }
}

/// One media range of `Accept`.
pub struct MediaRange<'a> {
    media: &'a str,
    params: Vec<(&'a str, &'a str)>,
    q: f32,
}

impl MediaRange<'_> {
    fn param(&self, k: &str) -> Option<&str> {
        self.params.iter().find(|(pk, _)| *pk == k).map(|(_, v)| *v)
    }
}

/// `Accept`'s ranges, highest quality first (equal qualities keep their order), without
/// those of quality 0.
pub fn media_ranges(accept: &str) -> Vec<MediaRange<'_>> {
    let mut ranges: Vec<MediaRange<'_>> = accept
        .split(',')
        .filter_map(|range| {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().filter(|m| !m.is_empty())?;
            let mut params = Vec::new();
            let mut q = 1.0f32;
            for p in parts {
                if let Some((k, v)) = p.split_once('=') {
                    let (k, v) = (k.trim(), v.trim());
                    if k == "q" {
                        q = v.parse().unwrap_or(1.0);
                    } else {
                        params.push((k, v));
                    }
                }
            }
            (q > 0.0).then_some(MediaRange { media, params, q })
        })
        .collect();
    ranges.sort_by(|a, b| b.q.total_cmp(&a.q));
    ranges
}

/// Picks encoding and form from `Accept`'s ranges (`None`: no `Accept`) as kube-apiserver
/// does: ranges by quality; JSON (`application/json`, `application/*`, `*/*`) or protobuf
/// (`application/vnd.kubernetes.protobuf`, built-in kinds only); `as=Table` (JSON only) or
/// `as=PartialObjectMetadata` (GET, watch) / `as=PartialObjectMetadataList` (LIST) of
/// `meta.k8s.io/v1`; 406 when nothing offered can be served.
pub fn negotiate(
    ranges: Option<&[MediaRange<'_>]>,
    params: &QueryParams,
    info: &ResourceInfo,
    verb: Verb,
) -> Result<(Encoding, Form), ApiError> {
    let Some(ranges) = ranges else {
        return Ok((Encoding::Json, Form::Objects));
    };
    for range in ranges {
        let encoding = match range.media {
            "application/json" | "application/*" | "*/*" => Encoding::Json,
            pb::PROTOBUF => Encoding::Protobuf,
            _ => continue,
        };
        let meta_v1 = range.param("g") == Some("meta.k8s.io") && range.param("v") == Some("v1");
        let form = match range.param("as") {
            None => Form::Objects,
            Some("Table")
                if encoding == Encoding::Json
                    && range.param("g") == Some("meta.k8s.io")
                    && matches!(range.param("v"), Some("v1" | "v1beta1")) =>
            {
                let include = match params.include_object.as_deref() {
                    Some("None") => IncludeObject::None,
                    Some("Object") => IncludeObject::Object,
                    _ => IncludeObject::Metadata,
                };
                Form::Table(TableFormat::new(
                    info,
                    range.param("v") == Some("v1beta1"),
                    include,
                ))
            }
            Some("PartialObjectMetadata") if meta_v1 && verb != Verb::List => Form::Metadata,
            Some("PartialObjectMetadataList") if meta_v1 && verb == Verb::List => Form::Metadata,
            Some(_) => continue,
        };
        // Custom resources have no protobuf form; their metadata does.
        if encoding == Encoding::Protobuf
            && matches!(form, Form::Objects)
            && !pb::has_protobuf(info)
        {
            continue;
        }
        return Ok((encoding, form));
    }
    Err(ApiError::NotAcceptable(
        "only the following media types are accepted: application/json, application/vnd.kubernetes.protobuf".to_string(),
    ))
}

/// The encoding of an error `Status`: protobuf when the client's preferred range is plain
/// `application/vnd.kubernetes.protobuf`, JSON otherwise.
pub fn error_encoding(ranges: Option<&[MediaRange<'_>]>) -> Encoding {
    match ranges.and_then(<[_]>::first) {
        Some(r) if r.media == pb::PROTOBUF && r.param("as").is_none() => Encoding::Protobuf,
        _ => Encoding::Json,
    }
}
