//! JSON watch-event framing: one `{"type":…,"object":…}` per line, bookmarks (whole and
//! PartialObjectMetadata) and ERROR events. A leaf: the writers ([`crate::render`]) and the
//! watch encoder ([`crate::watch`]) both frame with it.

use bytes::Bytes;
use listwatch_core::ResourceInfo;
use listwatch_core::json::push_go_string;
use listwatch_store::{EventType, Record};

use crate::ChunkWriter;
use crate::protobuf::PARTIAL_HEAD;

/// Writes an event line for `object`; with `stamp_rv` the object is sent with that RV in
/// place of its own (three shared slices, no copy of the object when large).
pub fn write_event(out: &mut ChunkWriter, kind: EventType, object: &Record, stamp_rv: Option<u64>) {
    out.put_slice(b"{\"type\":\"");
    out.put_slice(kind.as_str().as_bytes());
    out.put_slice(b"\",\"object\":");
    match stamp_rv {
        Some(rv) if rv != object.rv() => {
            let (pre, post) = object.split_at_rv();
            out.put_bytes(pre);
            let mut buf = itoa::Buffer::new();
            out.put_slice(buf.format(rv).as_bytes());
            out.put_bytes(post);
        }
        _ => out.put_bytes(object.bytes().clone()),
    }
    out.put_slice(b"}\n");
}

/// The kind's empty object with `metadata.resourceVersion` (and, for the end of initial
/// events, the `k8s.io/initial-events-end` annotation), as kube-apiserver sends bookmarks.
pub fn bookmark_object(info: &ResourceInfo, rv: u64, initial_events_end: bool) -> Vec<u8> {
    let mut b = Vec::with_capacity(160 + info.empty_object_tail.len());
    b.extend_from_slice(b"{\"kind\":");
    push_go_string(&mut b, &info.kind);
    b.extend_from_slice(b",\"apiVersion\":");
    push_go_string(&mut b, &info.api_version());
    b.extend_from_slice(b",\"metadata\":{\"resourceVersion\":\"");
    b.extend_from_slice(rv.to_string().as_bytes());
    b.push(b'"');
    if initial_events_end {
        b.extend_from_slice(b",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}");
    }
    b.push(b'}');
    if !info.empty_object_tail.is_empty() {
        b.push(b',');
        b.extend_from_slice(info.empty_object_tail.as_bytes());
    }
    b.push(b'}');
    b
}

/// Writes a BOOKMARK event line.
pub fn write_bookmark(
    out: &mut ChunkWriter,
    info: &ResourceInfo,
    rv: u64,
    initial_events_end: bool,
) {
    out.put_slice(b"{\"type\":\"BOOKMARK\",\"object\":");
    out.put_slice(&bookmark_object(info, rv, initial_events_end));
    out.put_slice(b"}\n");
}

/// Writes an ERROR event line carrying a `Status` body.
pub fn write_error(out: &mut ChunkWriter, status_body: &[u8]) {
    out.put_slice(b"{\"type\":\"ERROR\",\"object\":");
    out.put_slice(status_body);
    out.put_slice(b"}\n");
}

/// A whole response that is one ERROR event (kube-apiserver answers a watch from a
/// too-old RV with 200 and this line).
pub fn error_body(status_body: &[u8]) -> Vec<u8> {
    let mut w = ChunkWriter::unbounded();
    write_error(&mut w, status_body);
    w.into_vec()
}

/// PartialObjectMetadata's bookmark object: only `metadata.resourceVersion` (and the
/// initial-events-end annotation).
pub fn partial_bookmark_object(rv: u64, initial_events_end: bool) -> Vec<u8> {
    let mut b = Vec::with_capacity(160);
    b.extend_from_slice(PARTIAL_HEAD);
    b.extend_from_slice(b"{\"resourceVersion\":\"");
    let mut buf = itoa::Buffer::new();
    b.extend_from_slice(buf.format(rv).as_bytes());
    b.push(b'"');
    if initial_events_end {
        b.extend_from_slice(b",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}");
    }
    b.extend_from_slice(b"}}");
    b
}

/// One complete event line as bytes (for tests and small one-off writes).
pub fn event_line(kind: EventType, object: &Record, stamp_rv: Option<u64>) -> Bytes {
    let mut w = ChunkWriter::unbounded();
    write_event(&mut w, kind, object, stamp_rv);
    Bytes::from(w.into_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(r: &str) -> ResourceInfo {
        listwatch_core::builtin_resource(r).expect("builtin")
    }

    #[test]
    fn bookmarks_match_kube_apiserver() {
        assert_eq!(
            bookmark_object(&info("configmaps"), 70, true),
            br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"70","annotations":{"k8s.io/initial-events-end":"true"}}}"#
        );
        assert_eq!(
            bookmark_object(&info("pods"), 23492, true),
            br#"{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"23492","annotations":{"k8s.io/initial-events-end":"true"}},"spec":{"containers":null},"status":{}}"#
        );
        assert_eq!(
            bookmark_object(&info("pods"), 23662, false),
            br#"{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"23662"},"spec":{"containers":null},"status":{}}"#
        );
    }

    #[test]
    fn deleted_event_carries_deletion_rv() {
        let cm = info("configmaps");
        let r = Record::ingest(br#"{"metadata":{"name":"a","namespace":"d"}}"#, &cm, 5)
            .expect("ingest");
        let line = event_line(EventType::Deleted, &r, Some(9));
        assert_eq!(
            &line[..],
            br#"{"type":"DELETED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"d","resourceVersion":"9"}}}
"#
        );
    }
}
