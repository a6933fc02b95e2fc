//! The LIST body: `{"kind":"<Kind>List","apiVersion":…,"metadata":{…},"items":[…]}\n`.

use bytes::Bytes;
use listwatch_core::ContinueToken;
use listwatch_core::json::push_go_string;
use listwatch_store::SnapshotReader;

use crate::table::TableFormat;
use crate::{ChunkWriter, Encoding};

/// How LIST items are presented.
#[derive(Clone, Debug)]
pub enum ListFormat {
    /// `<Kind>List` with full objects (the default).
    Objects,
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
}

/// Records examined per step: bounds the work done per poll when a selector skips most.
const SCAN_PER_STEP: usize = 4096;

impl ListEncoder {
    /// An encoder for one LIST page in `encoding`. `continue_prefix` is the list's key
    /// prefix (for the continue token); `chunk` bounds the bytes copied per chunk.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        reader: SnapshotReader,
        encoding: Encoding,
        list_kind: String,
        api_version: String,
        continue_prefix: String,
        page_limited: bool,
        format: ListFormat,
        chunk: usize,
    ) -> Self {
        // JSON is the only encoding so far: stored bytes go out as they are.
        let Encoding::Json = encoding;
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
        let token = probe
            .continue_after()
            .map(|k| ContinueToken::encode(probe.snapshot().rv() as i64, &self.continue_prefix, k));
        (token, probe.remaining())
    }

    fn header(&mut self) {
        let (token, remaining) = self.page_metadata();
        let mut h = Vec::with_capacity(256);
        match &self.format {
            ListFormat::Objects => {
                h.extend_from_slice(b"{\"kind\":");
                push_go_string(&mut h, &self.list_kind);
                h.extend_from_slice(b",\"apiVersion\":");
                push_go_string(&mut h, &self.api_version);
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
            ListFormat::Objects => h.extend_from_slice(b"},\"items\":["),
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
                    self.header();
                    self.phase = Phase::Items;
                }
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
}
