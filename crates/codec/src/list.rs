//! The LIST body: `{"kind":"<Kind>List","apiVersion":…,"metadata":{…},"items":[…]}\n`, or
//! its protobuf form: `k8s\0` + `runtime.Unknown{typeMeta, raw: <Kind>List}`, streamed item
//! by item once the list's length is known (as kube-apiserver 1.33+ streams it).

use bytes::Bytes;
use listwatch_core::ContinueToken;
use listwatch_core::json::push_go_string;
use listwatch_protobuf::encode::{put_type_meta, put_varint};
use listwatch_protobuf::{MAGIC, ProtoError};
use listwatch_store::SnapshotReader;

use crate::ChunkWriter;
use crate::protobuf::{META_V1, PARTIAL_HEAD, ProtoObjects};
use crate::table::TableFormat;

/// How LIST items are presented.
#[derive(Clone, Debug)]
pub enum ListFormat {
    /// `<Kind>List` with full objects (the default).
    Objects,
    /// `PartialObjectMetadataList`: each object's `metadata` only.
    Metadata,
    /// A `meta.k8s.io` Table, rows rendered at `now` (seconds since the epoch).
    Table(TableFormat, i64),
}

enum Phase {
    Header,
    Items,
    Done,
}

/// Produces a LIST response body chunk by chunk from a [`SnapshotReader`]; memory held is
/// one chunk plus the snapshot handle, whatever the list's size.
pub struct ListEncoder {
    reader: SnapshotReader,
    out: ChunkWriter,
    phase: Phase,
    first: bool,
    list_kind: String,
    api_version: String,
    continue_prefix: String,
    page_limited: bool,
    format: ListFormat,
    /// Set for a protobuf body.
    proto: Option<ProtoObjects>,
    /// One protobuf item, before its length is written.
    item: Vec<u8>,
}

/// Records examined per step: bounds the work done per poll when a selector skips most.
const SCAN_PER_STEP: usize = 4096;

impl ListEncoder {
    /// An encoder for one LIST page, in protobuf when `proto` is given, else JSON.
    /// `continue_prefix` is the list's key prefix (for the continue token); `chunk` bounds
    /// the bytes copied per chunk.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        reader: SnapshotReader,
        proto: Option<ProtoObjects>,
        list_kind: String,
        api_version: String,
        continue_prefix: String,
        page_limited: bool,
        format: ListFormat,
        chunk: usize,
    ) -> Self {
        ListEncoder {
            reader,
            out: ChunkWriter::new(chunk),
            phase: Phase::Header,
            first: true,
            list_kind,
            api_version,
            continue_prefix,
            page_limited,
            format,
            proto,
            item: Vec::new(),
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

    /// The list's `typeMeta`.
    fn list_type(&self) -> (&str, &str) {
        match self.format {
            ListFormat::Metadata => (META_V1, "PartialObjectMetadataList"),
            _ => (&self.api_version, &self.list_kind),
        }
    }

    /// The protobuf head: envelope, the list message's length (every item's length summed
    /// first: memoized per record, so only a record's first protobuf LIST transcodes it
    /// twice) and `ListMeta`.
    fn proto_header(&mut self, proto: &mut ProtoObjects) -> Result<(), ProtoError> {
        // One pass over the page: the items' lengths, and (limited pages) where it ends.
        let mut items = 0usize;
        let mut failed = None;
        let mut probe = self.reader.clone();
        while probe.next_batch(usize::MAX, |r| match proto.item_len(r) {
            Ok(n) => {
                items += field_len(n);
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
        let (token, remaining) = self.page_metadata_of(&probe);
        let list_meta =
            proto.list_meta(self.reader.snapshot().rv(), token.as_deref(), remaining)?;
        let (api_version, kind) = self.list_type();
        let mut h = Vec::with_capacity(64 + list_meta.len());
        h.extend_from_slice(MAGIC);
        put_type_meta(&mut h, api_version, kind);
        h.push(0x12);
        put_varint(&mut h, (field_len(list_meta.len()) + items) as u64);
        h.push(0x0a);
        put_varint(&mut h, list_meta.len() as u64);
        h.extend_from_slice(&list_meta);
        self.out.put_slice(&h);
        Ok(())
    }

    fn header(&mut self) {
        let (token, remaining) = self.page_metadata();
        let mut h = Vec::with_capacity(256);
        match &self.format {
            ListFormat::Objects | ListFormat::Metadata => {
                let (api_version, kind) = self.list_type();
                h.extend_from_slice(b"{\"kind\":");
                push_go_string(&mut h, kind);
                h.extend_from_slice(b",\"apiVersion\":");
                push_go_string(&mut h, api_version);
                h.extend_from_slice(b",\"metadata\":{");
            }
            ListFormat::Table(t, _) => t.open(&mut h),
        }
        h.extend_from_slice(b"\"resourceVersion\":\"");
        h.extend_from_slice(self.reader.snapshot().rv().to_string().as_bytes());
        h.push(b'"');
        if let Some(t) = token {
            h.extend_from_slice(b",\"continue\":");
            push_go_string(&mut h, &t);
        }
        if let Some(n) = remaining {
            h.extend_from_slice(b",\"remainingItemCount\":");
            h.extend_from_slice(n.to_string().as_bytes());
        }
        match &self.format {
            ListFormat::Objects | ListFormat::Metadata => h.extend_from_slice(b"},\"items\":["),
            ListFormat::Table(t, _) => t.columns_and_rows_start(&mut h),
        }
        self.out.put_slice(&h);
    }

    /// The next chunk of the body, or `None` when the body is complete.
    pub fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            if let Some(c) = self.out.pop() {
                return Some(c);
            }
            match self.phase {
                Phase::Header => {
                    match self.proto.take() {
                        Some(mut proto) => {
                            let head = self.proto_header(&mut proto);
                            self.proto = Some(proto);
                            if let Err(e) = head {
                                self.fail(&e);
                                continue;
                            }
                        }
                        None => self.header(),
                    }
                    self.phase = Phase::Items;
                }
                Phase::Items if self.proto.is_some() => self.proto_items(),
                Phase::Items => {
                    let out = &mut self.out;
                    let first = &mut self.first;
                    let format = &self.format;
                    let more = self.reader.next_batch(SCAN_PER_STEP, |r| {
                        match format {
                            ListFormat::Objects => {
                                out.put_slice(if *first { b"{" } else { b",{" });
                                out.put_bytes(r.list_item_tail());
                            }
                            ListFormat::Metadata => {
                                if !*first {
                                    out.put_slice(b",");
                                }
                                out.put_slice(PARTIAL_HEAD);
                                out.put_bytes(r.metadata());
                                out.put_slice(b"}");
                            }
                            ListFormat::Table(t, now) => {
                                if !*first {
                                    out.put_slice(b",");
                                }
                                t.write_row(out, r, None, *now);
                            }
                        }
                        *first = false;
                        !out.is_full()
                    });
                    if !more {
                        self.out.put_slice(b"]}\n");
                        self.out.flush();
                        self.phase = Phase::Done;
                    }
                }
                Phase::Done => return None,
            }
        }
    }

    /// The next protobuf items: `items` fields (2) of the list message, then the envelope's
    /// empty `contentEncoding` and `contentType`.
    fn proto_items(&mut self) {
        let Some(mut proto) = self.proto.take() else {
            return;
        };
        let out = &mut self.out;
        let item = &mut self.item;
        let mut failed = None;
        let more = self.reader.next_batch(SCAN_PER_STEP, |r| {
            item.clear();
            let expected = proto.item_len(r);
            let written = proto.write_item(r, None, item);
            match (expected, written) {
                (Ok(n), Ok(())) if n == item.len() => {
                    let mut len = [0u8; 10];
                    let k = listwatch_protobuf::encode::varint_bytes(n as u64, &mut len);
                    out.put_slice(&[0x12]);
                    out.put_slice(&len[..k]);
                    out.put_slice(item);
                    !out.is_full()
                }
                (Err(e), _) | (_, Err(e)) => {
                    failed = Some(e);
                    false
                }
                _ => {
                    failed = Some(ProtoError::Malformed(
                        "an item's length changed between passes",
                    ));
                    false
                }
            }
        });
        self.proto = Some(proto);
        if let Some(e) = failed {
            self.fail(&e);
            return;
        }
        if !more {
            self.out.put_slice(&[0x1a, 0x00, 0x22, 0x00]);
            self.out.flush();
            self.phase = Phase::Done;
        }
    }

    /// Ends a protobuf body that cannot be completed: what was sent stays a truncated
    /// message the client refuses, never a list with objects silently missing.
    fn fail(&mut self, e: &ProtoError) {
        tracing::error!(error = %e, kind = %self.list_kind, "protobuf LIST ended early: an object could not be encoded");
        self.out.flush();
        self.phase = Phase::Done;
    }
}

/// The bytes a length-delimited field of `n` bytes takes (field number below 16).
fn field_len(n: usize) -> usize {
    1 + listwatch_protobuf::encode::varint_len(n as u64) + n
}
