//! Watch streams, read for what the harness checks and no more: each event's type, its
//! object's `resourceVersion` and, for bookmarks, the initial-events-end annotation — found by
//! scanning a JSON line, or by walking a protobuf frame's fields with `listwatch-protobuf`,
//! never by decoding the object. A fraction of the watchers also decodes every event in full
//! ([`full_rv`]) and checks the scan against it, so the client's CPU goes to the server.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use listwatch_protobuf::wire::{FieldReader, Value, slice};
use listwatch_protobuf::{JsonWriter, Schema};

use crate::http;

/// A watch event's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// ADDED.
    Added,
    /// MODIFIED.
    Modified,
    /// DELETED.
    Deleted,
    /// BOOKMARK.
    Bookmark,
    /// ERROR (a `Status`, e.g. 410 Gone).
    Error,
}

/// One watch event, as scanned.
pub struct Event<'a> {
    /// Its type.
    pub kind: Kind,
    /// The object's `metadata.resourceVersion`, when numeric.
    pub rv: Option<u64>,
    /// A bookmark carrying `k8s.io/initial-events-end`.
    pub initial_end: bool,
    /// The JSON line, or the protobuf object (`k8s\0` envelope), for a full decode.
    pub raw: &'a [u8],
}

const INITIAL_END: &[u8] = b"k8s.io/initial-events-end";

/// Splits a watch body into events — newline-delimited JSON, or protobuf frames (a 4-byte
/// big-endian length, then a `WatchEvent`) — across chunk boundaries; an event inside one
/// chunk is read in place, only one cut by a boundary is copied.
#[derive(Default)]
pub struct EventReader {
    protobuf: bool,
    partial: Vec<u8>,
}

impl EventReader {
    /// A reader of JSON lines, or of protobuf frames.
    pub fn new(protobuf: bool) -> Self {
        EventReader {
            protobuf,
            partial: Vec::new(),
        }
    }

    /// Hands every whole event in `data` (and what came before it) to `on`, until it breaks.
    pub fn feed(
        &mut self,
        mut data: &[u8],
        mut on: impl FnMut(Event<'_>) -> Result<ControlFlow<()>, String>,
    ) -> Result<ControlFlow<()>, String> {
        while !data.is_empty() {
            if !self.partial.is_empty() {
                // Complete the event a chunk boundary cut.
                let want = self.unit_len(&self.partial).map(|n| n - self.partial.len());
                let take = match want {
                    Some(n) => n.min(data.len()),
                    None if self.protobuf => (4 - self.partial.len()).min(data.len()),
                    None => memchr::memchr(b'\n', data).map_or(data.len(), |i| i + 1),
                };
                self.partial.extend_from_slice(&data[..take]);
                data = &data[take..];
                if self.unit_len(&self.partial) == Some(self.partial.len()) {
                    let unit = std::mem::take(&mut self.partial);
                    let flow = on(self.parse(&unit)?)?;
                    self.partial = unit;
                    self.partial.clear();
                    if flow.is_break() {
                        return Ok(flow);
                    }
                }
                continue;
            }
            match self.unit_len(data) {
                Some(n) if n <= data.len() => {
                    if on(self.parse(&data[..n])?)?.is_break() {
                        return Ok(ControlFlow::Break(()));
                    }
                    data = &data[n..];
                }
                _ => {
                    self.partial.extend_from_slice(data);
                    data = &[];
                }
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// The length of the event starting at `b` (its line with the newline, or its frame
    /// with the length prefix), if `b` holds enough to tell.
    fn unit_len(&self, b: &[u8]) -> Option<usize> {
        if self.protobuf {
            let head: [u8; 4] = b.get(..4)?.try_into().ok()?;
            Some(4 + u32::from_be_bytes(head) as usize)
        } else {
            memchr::memchr(b'\n', b).map(|i| i + 1)
        }
    }

    fn parse<'a>(&self, unit: &'a [u8]) -> Result<Event<'a>, String> {
        if self.protobuf {
            proto_event(&unit[4..]).map_err(|e| format!("protobuf watch event: {e}"))
        } else {
            json_event(unit)
        }
    }
}

fn kind(name: &[u8]) -> Result<Kind, String> {
    Ok(match name {
        b"ADDED" => Kind::Added,
        b"MODIFIED" => Kind::Modified,
        b"DELETED" => Kind::Deleted,
        b"BOOKMARK" => Kind::Bookmark,
        b"ERROR" => Kind::Error,
        other => {
            return Err(format!(
                "unknown watch event type {}",
                String::from_utf8_lossy(other)
            ));
        }
    })
}

/// A JSON event line as the apiserver writes it: `{"type":"…","object":{…}}`, the object's
/// metadata (and so its first `resourceVersion`) before anything it holds.
fn json_event(line: &[u8]) -> Result<Event<'_>, String> {
    const TYPE: &[u8] = br#"{"type":""#;
    const RV: &[u8] = br#""resourceVersion":""#;
    let rest = line
        .strip_prefix(TYPE)
        .ok_or("watch event line without a leading type")?;
    let end = memchr::memchr(b'"', rest).ok_or("unterminated event type")?;
    let kind = kind(&rest[..end])?;
    let rv = memchr::memmem::find(line, RV).and_then(|i| {
        let v = &line[i + RV.len()..];
        std::str::from_utf8(&v[..memchr::memchr(b'"', v)?])
            .ok()?
            .parse()
            .ok()
    });
    let initial_end = kind == Kind::Bookmark && memchr::memmem::find(line, INITIAL_END).is_some();
    Ok(Event {
        kind,
        rv,
        initial_end,
        raw: line,
    })
}

/// A protobuf `WatchEvent{type = 1, object = 2: RawExtension{raw = 1}}` whose raw is the
/// object's `k8s\0` envelope; its metadata is the object's field 1 (`ObjectMeta`:
/// resourceVersion 6, annotations 12).
fn proto_event(frame: &[u8]) -> Result<Event<'_>, listwatch_protobuf::ProtoError> {
    let (mut name, mut raw) = (&[][..], &[][..]);
    let mut r = FieldReader::new(frame, 0, frame.len());
    while let Some((tag, v)) = r.next_field()? {
        if let (1 | 2, Value::Len(s, e)) = (tag, v) {
            if tag == 1 {
                name = slice(frame, s, e);
            } else if let Some(b) = first_len_field(slice(frame, s, e), 1)? {
                raw = b;
            }
        }
    }
    let kind = kind(name).map_err(|_| listwatch_protobuf::ProtoError::Malformed("event type"))?;
    let object = listwatch_protobuf::envelope(raw)?.raw;
    let meta = first_len_field(object, 1)?.unwrap_or_default();
    let mut rv = None;
    let mut initial_end = false;
    let mut m = FieldReader::new(meta, 0, meta.len());
    while let Some((tag, v)) = m.next_field()? {
        match (tag, v) {
            (6, Value::Len(s, e)) => {
                rv = std::str::from_utf8(slice(meta, s, e))
                    .ok()
                    .and_then(|t| t.parse().ok());
            }
            (12, Value::Len(s, e)) if kind == Kind::Bookmark => {
                // A map entry: key 1, value 2.
                initial_end |=
                    first_len_field(slice(meta, s, e), 1)?.is_some_and(|k| k == INITIAL_END);
            }
            _ => {}
        }
    }
    Ok(Event {
        kind,
        rv,
        initial_end,
        raw,
    })
}

/// The bytes of the first length-delimited field `tag` of a message.
fn first_len_field(msg: &[u8], tag: u32) -> Result<Option<&[u8]>, listwatch_protobuf::ProtoError> {
    let mut r = FieldReader::new(msg, 0, msg.len());
    while let Some((t, v)) = r.next_field()? {
        if let (true, Value::Len(s, e)) = (t == tag, v) {
            return Ok(Some(slice(msg, s, e)));
        }
    }
    Ok(None)
}

/// The event's `resourceVersion` decoded in full — the JSON line with serde_json, the
/// protobuf object transcoded to JSON by `listwatch-protobuf` and then parsed — to check
/// what [`Event::rv`] scanned.
pub fn full_rv(ev: &Event<'_>, protobuf: bool) -> Result<Option<u64>, String> {
    let v: serde_json::Value = if protobuf {
        let schema = Schema::kubernetes();
        let mut json = Vec::new();
        listwatch_protobuf::storage_to_json(
            &mut JsonWriter::new(schema),
            schema,
            ev.raw,
            &mut json,
        )
        .map_err(|e| e.to_string())?;
        serde_json::from_slice(&json).map_err(|e| e.to_string())?
    } else {
        let line: serde_json::Value = serde_json::from_slice(ev.raw).map_err(|e| e.to_string())?;
        line["object"].clone()
    };
    Ok(v["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok()))
}

/// Counts a watch-list's ADDED events until the initial-events-end bookmark.
pub struct InitialEvents {
    reader: EventReader,
    /// ADDED events so far.
    pub added: u64,
    /// The initial-events-end bookmark arrived.
    pub done: bool,
}

impl InitialEvents {
    /// A counter for a JSON or protobuf stream.
    pub fn new(protobuf: bool) -> Self {
        InitialEvents {
            reader: EventReader::new(protobuf),
            added: 0,
            done: false,
        }
    }

    /// Reads `data`; stops at the initial-events-end bookmark.
    pub fn feed(&mut self, data: &[u8]) -> Result<(), String> {
        let (added, done) = (&mut self.added, &mut self.done);
        // Breaking at the bookmark leaves what follows unread: the caller stops there.
        let _ = self.reader.feed(data, |ev| {
            *added += u64::from(ev.kind == Kind::Added);
            *done |= ev.initial_end;
            Ok(if *done {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            })
        })?;
        Ok(())
    }
}

/// Streams a watch from `path` (on its own connection) and hands each event to `on` with its
/// arrival time, until `on` breaks, the stream ends or `stop` turns true. Returns the bytes
/// received on the wire.
pub async fn watch(
    host: &str,
    path: &str,
    protobuf: bool,
    stop: tokio::sync::watch::Receiver<bool>,
    on: impl FnMut(Event<'_>, Instant) -> Result<ControlFlow<()>, String>,
) -> Result<u64, String> {
    watch_retrying(host, None, path, protobuf, stop, on, 0, &AtomicU64::new(0)).await
}

/// [`watch`] opened as client-go opens it: a 429 is asked again after its `Retry-After`
/// (listwatch and kube-apiserver send 1 s), at most `retries` times (client-go: 10); each
/// retry is counted in `retried`. On `conn`, an open HTTP/2 connection, when given (retries
/// too, as client-go's); on a fresh connection otherwise.
#[allow(clippy::too_many_arguments)]
pub async fn watch_retrying(
    host: &str,
    mut conn: Option<&mut http::H2Sender>,
    path: &str,
    protobuf: bool,
    mut stop: tokio::sync::watch::Receiver<bool>,
    mut on: impl FnMut(Event<'_>, Instant) -> Result<ControlFlow<()>, String>,
    retries: u32,
    retried: &AtomicU64,
) -> Result<u64, String> {
    let accept = http::accept(protobuf, false, true);
    let mut left = retries;
    let mut body = loop {
        let (status, body) = match conn.as_deref_mut() {
            Some(send) => http::get_on(send, host, path, accept.as_deref()).await?,
            None => http::get(host, path, accept.as_deref(), false).await?,
        };
        match status {
            200 => break body,
            429 if left > 0 => {
                drop(body);
                left -= 1;
                retried.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
            _ => return Err(format!("watch: HTTP {status}")),
        }
    };
    let mut reader = EventReader::new(protobuf);
    loop {
        let chunk = tokio::select! {
            c = body.chunk() => c?,
            _ = stop.wait_for(|s| *s) => return Ok(body.wire),
        };
        let Some(chunk) = chunk else {
            return Ok(body.wire);
        };
        let now = Instant::now();
        if reader.feed(&chunk, |ev| on(ev, now))?.is_break() {
            return Ok(body.wire);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(reader: &mut EventReader, chunks: &[&[u8]]) -> Vec<(Kind, Option<u64>, bool)> {
        let mut out = Vec::new();
        for c in chunks {
            let _ = reader
                .feed(c, |ev| {
                    out.push((ev.kind, ev.rv, ev.initial_end));
                    Ok(ControlFlow::Continue(()))
                })
                .expect("feed");
        }
        out
    }

    /// `stream` (an ADDED at RV 7, then the initial-events-end bookmark at RV 9), split in
    /// two at every byte, reads as those two events: a reader keeps what a chunk cut off.
    fn assert_every_cut_gives_added_then_end(stream: &[u8], protobuf: bool) {
        let want = vec![
            (Kind::Added, Some(7), false),
            (Kind::Bookmark, Some(9), true),
        ];
        for cut in 0..stream.len() {
            let mut r = EventReader::new(protobuf);
            let (a, b) = stream.split_at(cut);
            assert_eq!(collect(&mut r, &[a, b]), want, "cut at {cut}");
        }
    }

    #[test]
    fn json_lines_cut_anywhere_give_the_same_events() {
        let stream = concat!(
            r#"{"type":"ADDED","object":{"kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"7"},"data":{"resourceVersion":"1"}}}"#,
            "\n",
            r#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","metadata":{"resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}}}"#,
            "\n",
        )
        .as_bytes();
        assert_every_cut_gives_added_then_end(stream, false);
    }

    /// A protobuf watch stream: an ADDED ConfigMap (encoded from JSON by listwatch-protobuf)
    /// and the initial-events-end bookmark, each framed by its length.
    fn proto_stream() -> Vec<u8> {
        use listwatch_protobuf::encode::{begin, end, put_bytes, write_envelope};
        let cm = br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"7"},"data":{"k":"v"}}"#;
        let added = listwatch_protobuf::ProtoEncoder::new(Schema::kubernetes())
            .storage_value(cm)
            .expect("encode");
        let mut bookmark = Vec::new();
        write_envelope(&mut bookmark, "v1", "ConfigMap", |o| {
            let m = begin(o, 1);
            put_bytes(o, 6, b"9");
            let a = begin(o, 12);
            put_bytes(o, 1, INITIAL_END);
            put_bytes(o, 2, b"true");
            end(o, a);
            end(o, m);
            Ok::<(), ()>(())
        })
        .expect("envelope");
        let mut out = Vec::new();
        for (kind, object) in [("ADDED", added), ("BOOKMARK", bookmark)] {
            let mut ev = Vec::new();
            put_bytes(&mut ev, 1, kind.as_bytes());
            let o = begin(&mut ev, 2);
            put_bytes(&mut ev, 1, &object);
            end(&mut ev, o);
            out.extend_from_slice(&(ev.len() as u32).to_be_bytes());
            out.extend_from_slice(&ev);
        }
        out
    }

    #[test]
    fn protobuf_frames_cut_anywhere_give_the_same_events() {
        assert_every_cut_gives_added_then_end(&proto_stream(), true);
    }

    #[test]
    fn a_full_decode_agrees_with_the_scan() {
        let stream = proto_stream();
        let mut rvs = Vec::new();
        let _ = EventReader::new(true)
            .feed(&stream, |ev| {
                if ev.kind == Kind::Added {
                    rvs.push((ev.rv, full_rv(&ev, true)?));
                }
                Ok(ControlFlow::Continue(()))
            })
            .expect("feed");
        assert_eq!(rvs, vec![(Some(7), Some(7))]);
        let line = br#"{"type":"MODIFIED","object":{"metadata":{"resourceVersion":"12"}}}"#;
        let ev = json_event(line).expect("event");
        assert_eq!(
            (ev.rv, full_rv(&ev, false).expect("decode")),
            (Some(12), Some(12))
        );
    }

    #[test]
    fn a_line_that_is_not_an_event_is_an_error() {
        let mut r = EventReader::new(false);
        assert!(
            r.feed(b"{\"kind\":\"Status\"}\n", |_| Ok(
                ControlFlow::Continue(())
            ))
            .is_err()
        );
    }
}
