//! `Record`: one object as stored — its final JSON bytes plus byte spans of what filtering
//! and encoding need — and the ingest step that builds it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use bytes::Bytes;
use listwatch_core::ResourceInfo;

use listwatch_core::scan::{self, Span};

/// A compact byte range into [`Record::bytes`].
type Range32 = (u32, u32);

const MISSING: Range32 = (u32::MAX, u32::MAX);

/// One object as stored and served.
///
/// `bytes` is the canonical JSON `{"kind":K,"apiVersion":V,<other members>}` with
/// `metadata.resourceVersion` set. It is shared (`Bytes`) by every snapshot, event and
/// in-flight response; nothing is re-serialized to serve a read. Names, labels and
/// selectable fields are spans into `bytes` (Kubernetes names and label values cannot
/// contain JSON escapes), so indexing a record costs two small allocations.
#[derive(Debug)]
pub struct Record {
    key: Arc<str>,
    bytes: Bytes,
    rv: u64,
    body_off: u32,
    rv_span: Range32,
    namespace: Range32,
    name: Range32,
    labels: Box<[(Range32, Range32)]>,
    fields: Box<[Range32]>,
    /// The `metadata` object (PartialObjectMetadata is this span, projected).
    metadata: Range32,
    /// The length of this object's protobuf message and of its PartialObjectMetadata's,
    /// once an encoder has computed them (`u32::MAX` until then): a protobuf LIST must state
    /// its length before its items, and the bytes are immutable, so each length is computed
    /// once per record.
    encoded_len: [AtomicU32; 2],
}

/// The protobuf forms whose lengths a record memoizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodedForm {
    /// The whole object.
    Object = 0,
    /// Its PartialObjectMetadata.
    Metadata = 1,
}

/// Why an object could not be ingested.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IngestError {
    /// Not valid JSON.
    #[error("object is not valid JSON: {0}")]
    Json(String),
    /// Valid JSON but not an object with a `metadata` object.
    #[error("object has no metadata")]
    NoMetadata,
    /// `metadata.name` is missing or empty.
    #[error("object has no metadata.name")]
    NoName,
    /// The object is larger than a record can address.
    #[error("object is too large")]
    TooLarge,
    /// A field clients decode as a string (`metadata.namespace`, a label value) is not a
    /// plain JSON string; Go clients would fail to decode the object.
    #[error("{0} must be a string")]
    NotAString(&'static str),
    /// An object (top level, `metadata` or `labels`) names one key twice. Go clients keep
    /// the last value, our index the first: refusing it keeps both views identical.
    #[error("duplicate key {0:?} in an object")]
    DuplicateKey(String),
}

/// A member key as JSON text means it (escapes decoded), for comparisons that must agree
/// with how clients decode the object.
fn decoded_key<'a>(input: &'a [u8], key: Span) -> std::borrow::Cow<'a, [u8]> {
    let raw = &input[key.0..key.1];
    if !raw.contains(&b'\\') {
        return std::borrow::Cow::Borrowed(raw);
    }
    match serde_json::from_slice::<String>(&input[key.0 - 1..key.1 + 1]) {
        Ok(s) => std::borrow::Cow::Owned(s.into_bytes()),
        Err(_) => std::borrow::Cow::Borrowed(raw),
    }
}

/// Validates `input` as JSON, structure and UTF-8, with simd-json, so the byte scanner
/// only ever sees well-formed JSON. simd-json parses in place, so it reads a padded copy;
/// the copy and simd-json's buffers are kept per thread for objects up to
/// [`KEEP_SCRATCH`] (made and dropped per object they were a third of a pod's ingest).
fn validate(input: &[u8]) -> Result<(), IngestError> {
    use std::cell::RefCell;
    thread_local! {
        static SCRATCH: RefCell<(Vec<u8>, simd_json::Buffers)> = RefCell::default();
    }
    SCRATCH.with_borrow_mut(|(copy, buffers)| {
        copy.clear();
        copy.extend_from_slice(input);
        copy.resize(input.len() + simd_json::INPUT_PADDING, 0);
        let mut tape = simd_json::Tape::null();
        let valid = simd_json::fill_tape_padded(copy, input.len(), buffers, &mut tape)
            .map_err(|e| IngestError::Json(e.to_string()));
        drop(tape);
        if copy.capacity() > KEEP_SCRATCH {
            *copy = Vec::new();
            *buffers = simd_json::Buffers::default();
        }
        valid
    })
}

/// The largest object whose validation buffers a thread keeps for the next.
const KEEP_SCRATCH: usize = 256 << 10;

/// An object's members as (key, value) spans, in order.
fn members(b: &[u8], start: usize) -> Option<Vec<(Span, Span)>> {
    let mut v = Vec::with_capacity(16);
    scan::for_each_member(b, start, |m| v.push((m.key, m.value)))?;
    Some(v)
}

/// The value of the first member named `key` (duplicates are refused anyway).
fn lookup(b: &[u8], members: &[(Span, Span)], key: &str) -> Option<Span> {
    members
        .iter()
        .find(|(k, _)| &b[k.0..k.1] == key.as_bytes())
        .map(|(_, v)| *v)
}

/// Fails when two of `keys` are equal.
fn no_duplicates(keys: &mut [std::borrow::Cow<'_, [u8]>]) -> Result<(), IngestError> {
    keys.sort_unstable();
    match keys.windows(2).find(|w| w[0] == w[1]) {
        Some(w) => Err(IngestError::DuplicateKey(
            String::from_utf8_lossy(&w[0]).into_owned(),
        )),
        None => Ok(()),
    }
}

fn r32(s: Span) -> Range32 {
    (s.0 as u32, s.1 as u32)
}

impl Record {
    /// Ingests an object: validates it (simd-json), rewrites it to canonical form with
    /// `kind`/`apiVersion` first and `metadata.resourceVersion` = `rv` (replaced or inserted,
    /// the rest copied byte for byte), and indexes it for filtering.
    pub fn ingest(input: &[u8], info: &ResourceInfo, rv: u64) -> Result<Record, IngestError> {
        if input.len() >= (u32::MAX / 2) as usize {
            return Err(IngestError::TooLarge);
        }
        validate(input)?;
        let start = scan::skip_ws(input, 0);
        let mut out = Vec::with_capacity(input.len() + 64);
        // The top level's member spans in `out`, noted as it is written (not found by
        // scanning the whole object again).
        let mut top: Vec<(Span, Span)> = Vec::with_capacity(16);
        out.push(b'{');
        for (i, (key, value)) in [
            ("kind", info.kind.as_str()),
            ("apiVersion", &info.api_version()),
        ]
        .into_iter()
        .enumerate()
        {
            if i > 0 {
                out.push(b',');
            }
            let key_at = out.len() + 1;
            listwatch_core::json::push_go_string(&mut out, key);
            out.push(b':');
            let value_at = out.len();
            listwatch_core::json::push_go_string(&mut out, value);
            top.push(((key_at, key_at + key.len()), (value_at, out.len())));
        }
        let mut body_off = None;
        let mut saw_metadata = false;
        let mut bad = None;
        scan::for_each_member(input, start, |m| {
            // Compared unescaped: a `"kin\u0064"` must not slip past as a second kind.
            let key = decoded_key(input, m.key);
            if *key == *b"kind" || *key == *b"apiVersion" {
                return;
            }
            let key = &input[m.key.0..m.key.1];
            out.push(b',');
            if body_off.is_none() {
                body_off = Some(out.len());
            }
            let key_at = out.len() + 1;
            out.extend_from_slice(&input[m.key.0 - 1..m.key.1 + 1]);
            out.push(b':');
            let value_at = out.len();
            if key == b"metadata" {
                saw_metadata = true;
                if let Err(e) = write_metadata(&mut out, input, m.value.0, rv) {
                    bad = Some(e);
                }
            } else {
                out.extend_from_slice(&input[m.value.0..m.value.1]);
            }
            top.push(((key_at, key_at + key.len()), (value_at, out.len())));
        })
        .ok_or(IngestError::NoMetadata)?;
        if let Some(e) = bad {
            return Err(e);
        }
        if !saw_metadata {
            return Err(IngestError::NoMetadata);
        }
        out.push(b'}');
        let body_off = body_off.unwrap_or(out.len() - 1);
        Record::index(Bytes::from(out), body_off, &top, info, rv)
    }

    /// The `metadata.resourceVersion` an object's JSON already carries, if any (a relist
    /// keeps each object's own RV rather than the list's).
    pub fn existing_rv(input: &[u8]) -> Option<u64> {
        let start = scan::skip_ws(input, 0);
        let v = scan::find_path(input, start, &["metadata", "resourceVersion"])?;
        let s = scan::plain_scalar(input, v)?;
        std::str::from_utf8(&input[s.0..s.1]).ok()?.parse().ok()
    }

    /// Builds the record's spans over canonical bytes whose top-level members are `top`.
    fn index(
        bytes: Bytes,
        body_off: usize,
        top: &[(Span, Span)],
        info: &ResourceInfo,
        rv: u64,
    ) -> Result<Record, IngestError> {
        let b = &bytes[..];
        debug_assert_eq!(members(b, 0).as_deref(), Some(top));
        // One pass over metadata; every lookup below reads these spans instead of
        // rescanning the document (managedFields alone is kilobytes).
        let md = lookup(b, top, "metadata").ok_or(IngestError::NoMetadata)?;
        let meta = members(b, md.0).ok_or(IngestError::NoMetadata)?;
        let str_at = |key: &str| {
            lookup(b, &meta, key)
                .and_then(|v| scan::plain_string(b, v))
                .map(r32)
        };
        let name = str_at("name")
            .filter(|s| s.1 > s.0)
            .ok_or(IngestError::NoName)?;
        let namespace = match lookup(b, &meta, "namespace") {
            None => (0, 0),
            Some(v) => scan::plain_string(b, v)
                .map(r32)
                .ok_or(IngestError::NotAString("metadata.namespace"))?,
        };
        let rv_span = str_at("resourceVersion").ok_or(IngestError::NoMetadata)?;
        let mut labels = Vec::new();
        let label_members = match lookup(b, &meta, "labels").filter(|l| b[l.0] == b'{') {
            Some(l) => members(b, l.0).ok_or(IngestError::NoMetadata)?,
            None => Vec::new(),
        };
        for &(k, v) in &label_members {
            match scan::plain_string(b, v) {
                Some(v) => labels.push((r32(k), r32(v))),
                // An escaped string is still a string (just not indexed by span).
                None if b[v.0] == b'"' => {}
                None => return Err(IngestError::NotAString("a label value")),
            }
        }
        // Go clients keep the last of duplicate keys, our spans the first: refuse them.
        for level in [top, &meta[..], &label_members[..]] {
            let mut keys: Vec<_> = level.iter().map(|(k, _)| decoded_key(b, *k)).collect();
            no_duplicates(&mut keys)?;
        }
        // The members of each object on a field's path (`spec`, `status`) are listed once
        // for all its fields: searched from its start per field, a pod's `spec` (six of its
        // eight selectable fields, after the containers) was scanned six times, 29 % of a
        // pod's ingest.
        let mut listed: Vec<(usize, Vec<(Span, Span)>)> = Vec::new();
        let mut member = |obj: Span, key: &str| -> Option<Span> {
            let at = match listed.iter().position(|(start, _)| *start == obj.0) {
                Some(at) => at,
                None => {
                    listed.push((obj.0, members(b, obj.0)?));
                    listed.len() - 1
                }
            };
            lookup(b, &listed[at].1, key)
        };
        let mut value_at = |f: &str| -> Option<Range32> {
            let mut path = f.split('.');
            let first = path.next().unwrap_or("");
            let mut v = if first == "metadata" {
                path.next().and_then(|k| lookup(b, &meta, k))
            } else {
                lookup(b, top, first)
            };
            for k in path {
                v = v.and_then(|v| member(v, k));
            }
            v.and_then(|v| scan::plain_scalar(b, v)).map(r32)
        };
        let fields = info
            .field_selectors
            .iter()
            .map(|f| {
                // The first path with a non-empty value (a selector compares "" for both
                // absent and empty, so skipping an empty one changes nothing else).
                field_paths(info, f)
                    .iter()
                    .filter_map(|p| value_at(p))
                    .find(|r| r.1 > r.0)
                    .unwrap_or(MISSING)
            })
            .collect();
        let ns = std::str::from_utf8(&b[namespace.0 as usize..namespace.1 as usize]).unwrap_or("");
        let nm = std::str::from_utf8(&b[name.0 as usize..name.1 as usize]).unwrap_or("");
        let key: Arc<str> = info.key(ns, nm).into();
        Ok(Record {
            key,
            rv,
            body_off: body_off as u32,
            rv_span,
            namespace,
            name,
            labels: labels.into_boxed_slice(),
            fields,
            metadata: r32(md),
            encoded_len: [AtomicU32::new(u32::MAX), AtomicU32::new(u32::MAX)],
            bytes,
        })
    }

    fn text(&self, r: Range32) -> &str {
        if r == MISSING {
            return "";
        }
        std::str::from_utf8(&self.bytes[r.0 as usize..r.1 as usize]).unwrap_or("")
    }

    /// The store key (`namespace/name` or `name`).
    pub fn key(&self) -> &Arc<str> {
        &self.key
    }

    /// The object's resourceVersion.
    pub fn rv(&self) -> u64 {
        self.rv
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.text(self.name)
    }

    /// `metadata.namespace` ("" for cluster-scoped objects).
    pub fn namespace(&self) -> &str {
        self.text(self.namespace)
    }

    /// The value of label `key`, if present.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| self.text(*k) == key)
            .map(|(_, v)| self.text(*v))
    }

    /// All labels as (key, value) pairs.
    pub fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        self.labels
            .iter()
            .map(|(k, v)| (self.text(*k), self.text(*v)))
    }

    /// The bytes a field selector compares ("" when absent). Bytes, not `&str`: ingest
    /// checked the UTF-8 once, and checking it again per watcher per event was 15 % of the
    /// server's CPU in a kubelet storm's churn (every node's watch matches every pod event).
    pub(crate) fn selected_bytes(&self, f: &FieldRef) -> &[u8] {
        let r = match f {
            FieldRef::Name => self.name,
            FieldRef::Namespace => self.namespace,
            FieldRef::Index(i) => self.fields.get(*i).copied().unwrap_or(MISSING),
        };
        if r == MISSING {
            return b"";
        }
        &self.bytes[r.0 as usize..r.1 as usize]
    }

    /// The value of the resource's `i`-th selectable field (see
    /// [`ResourceInfo::field_selectors`]); `None` when absent.
    pub fn field(&self, i: usize) -> Option<&str> {
        self.fields
            .get(i)
            .filter(|r| **r != MISSING)
            .map(|r| self.text(*r))
    }

    /// The full object (`kind` and `apiVersion` first), as GET and watch events send it.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The object as a LIST item (no `kind`/`apiVersion`), as two parts to write in order:
    /// `{` then the returned slice. Slicing `Bytes` shares the buffer, it does not copy.
    pub fn list_item_tail(&self) -> Bytes {
        self.bytes.slice(self.body_off as usize..)
    }

    /// The object with its resourceVersion replaced by `rv`, as three shared parts (prefix,
    /// digits, suffix): used for DELETED events, which carry the deletion's RV.
    pub fn split_at_rv(&self) -> (Bytes, Bytes) {
        (
            self.bytes.slice(..self.rv_span.0 as usize),
            self.bytes.slice(self.rv_span.1 as usize..),
        )
    }

    /// The `metadata` object's JSON, shared (PartialObjectMetadata serves it as it is).
    pub fn metadata(&self) -> Bytes {
        self.bytes
            .slice(self.metadata.0 as usize..self.metadata.1 as usize)
    }

    /// Where `metadata` lies in [`Record::bytes`].
    pub fn metadata_range(&self) -> std::ops::Range<usize> {
        self.metadata.0 as usize..self.metadata.1 as usize
    }

    /// Where `metadata.resourceVersion`'s digits lie in [`Record::bytes`].
    pub fn rv_range(&self) -> std::ops::Range<usize> {
        self.rv_span.0 as usize..self.rv_span.1 as usize
    }

    /// The protobuf message length an encoder memoized for this record in `form`, if any.
    pub fn encoded_len(&self, form: EncodedForm) -> Option<usize> {
        match self.encoded_len[form as usize].load(Ordering::Relaxed) {
            u32::MAX => None,
            n => Some(n as usize),
        }
    }

    /// Memoizes the protobuf message length (the encoder is deterministic, so any
    /// thread's answer is the answer).
    pub fn set_encoded_len(&self, form: EncodedForm, len: usize) {
        if let Ok(n) = u32::try_from(len)
            && n != u32::MAX
        {
            self.encoded_len[form as usize].store(n, Ordering::Relaxed);
        }
    }

    /// Bytes this record keeps alive (for event-log accounting).
    pub fn weight(&self) -> usize {
        self.bytes.len()
            + std::mem::size_of::<Record>()
            + self.labels.len() * 16
            + self.fields.len() * 8
    }
}

/// Where in the object the selectable field `field` of `info` is read, in order: the first
/// non-empty value is the field's. A field is its own JSON path, except core Event's `source`,
/// which kube-apiserver selects on as `source.component`, or `reportingComponent` when that is
/// empty (`pkg/registry/core/event`'s `ToSelectableFields`): events written through
/// `events.k8s.io/v1` carry only the latter.
fn field_paths<'a>(info: &ResourceInfo, field: &'a str) -> Vec<&'a str> {
    if info.group.is_empty() && info.resource == "events" && field == "source" {
        return vec!["source.component", "reportingComponent"];
    }
    vec![field]
}

fn write_metadata(
    out: &mut Vec<u8>,
    input: &[u8],
    start: usize,
    rv: u64,
) -> Result<(), IngestError> {
    let mut members: Vec<scan::Member> = Vec::with_capacity(16);
    if scan::for_each_member(input, start, |m| members.push(m)).is_none() {
        return Err(IngestError::NoMetadata);
    }
    let key_of = |m: &scan::Member| &input[m.key.0..m.key.1];
    let has_rv = members.iter().any(|m| key_of(m) == b"resourceVersion");
    // kube-apiserver's field order puts resourceVersion after uid (or namespace, or name).
    let insert_after = if has_rv {
        None
    } else {
        ["uid", "selfLink", "namespace", "generateName", "name"]
            .iter()
            .find_map(|k| members.iter().position(|m| key_of(m) == k.as_bytes()))
    };
    let mut rv_buf = itoa::Buffer::new();
    let rv_text = rv_buf.format(rv).as_bytes();
    let write_rv = |out: &mut Vec<u8>| {
        out.extend_from_slice(b"\"resourceVersion\":\"");
        out.extend_from_slice(rv_text);
        out.push(b'"');
    };
    out.push(b'{');
    let mut first = true;
    if !has_rv && insert_after.is_none() {
        write_rv(out);
        first = false;
    }
    for (i, m) in members.iter().enumerate() {
        if !first {
            out.push(b',');
        }
        first = false;
        out.extend_from_slice(&input[m.key.0 - 1..m.key.1 + 1]);
        out.push(b':');
        if key_of(m) == b"resourceVersion" {
            out.push(b'"');
            out.extend_from_slice(rv_text);
            out.push(b'"');
        } else {
            out.extend_from_slice(&input[m.value.0..m.value.1]);
        }
        if insert_after == Some(i) {
            out.push(b',');
            write_rv(out);
        }
    }
    out.push(b'}');
    Ok(())
}

/// Which of a record's texts a field selector compares (a `Filter` resolves its terms to
/// these once).
pub(crate) enum FieldRef {
    Name,
    Namespace,
    /// The resource's `i`-th selectable field.
    Index(usize),
}

#[cfg(test)]
mod tests {
    use super::*;
    use listwatch_core::builtin_resource;

    #[test]
    fn inserts_rv_after_uid_and_puts_kind_first() {
        let raw = br#"{"metadata":{"name":"a","namespace":"default","uid":"u1","labels":{"app":"web"}},"data":{"k":"v"},"kind":"ConfigMap","apiVersion":"v1"}"#;
        let r = Record::ingest(raw, &builtin_resource("configmaps").expect("builtin"), 42).unwrap();
        assert_eq!(
            &r.bytes()[..],
            br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"default","uid":"u1","resourceVersion":"42","labels":{"app":"web"}},"data":{"k":"v"}}"#
        );
        let mut item = b"{".to_vec();
        item.extend_from_slice(&r.list_item_tail());
        assert!(item.starts_with(br#"{"metadata":{"name":"a""#));
        assert_eq!(r.key().as_ref(), "default/a");
        assert_eq!(r.label("app"), Some("web"));
        assert_eq!(r.label("nope"), None);
        let (pre, post) = r.split_at_rv();
        let mut stamped = pre.to_vec();
        stamped.extend_from_slice(b"43");
        stamped.extend_from_slice(&post);
        assert!(
            std::str::from_utf8(&stamped)
                .unwrap()
                .contains(r#""resourceVersion":"43""#)
        );
    }

    #[test]
    fn replaces_existing_rv_and_indexes_fields() {
        let raw = br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"n","resourceVersion":"7"},"spec":{"nodeName":"node-1"},"status":{"phase":"Running"}}"#;
        let pods = builtin_resource("pods").expect("builtin");
        let r = Record::ingest(raw, &pods, 9).unwrap();
        assert!(
            std::str::from_utf8(r.bytes())
                .unwrap()
                .contains(r#""resourceVersion":"9""#)
        );
        let idx = |f: &str| pods.field_selectors.iter().position(|x| x == f).unwrap();
        assert_eq!(r.field(idx("spec.nodeName")), Some("node-1"));
        assert_eq!(r.field(idx("status.phase")), Some("Running"));
        assert_eq!(r.field(idx("status.podIP")), None);
    }

    #[test]
    fn a_core_event_s_source_is_its_component_or_else_its_reporting_controller() {
        // kube-apiserver's `source` field selector: `source.component`, falling back to
        // `reportingComponent` (what an events.k8s.io/v1 write fills in).
        let events = builtin_resource("events").expect("builtin");
        let idx = events
            .field_selectors
            .iter()
            .position(|x| x == "source")
            .expect("source is selectable");
        let ingest = |body: &str| {
            let raw = format!(
                r#"{{"kind":"Event","apiVersion":"v1","metadata":{{"name":"e","namespace":"n","resourceVersion":"7"}},{body}}}"#
            );
            Record::ingest(raw.as_bytes(), &events, 7).expect("ingest")
        };
        let kubelet =
            ingest(r#""source":{"component":"kubelet","host":"n1"},"reportingComponent":"x""#);
        assert_eq!(kubelet.field(idx), Some("kubelet"));
        let reported = ingest(r#""source":{},"reportingComponent":"test-controller""#);
        assert_eq!(reported.field(idx), Some("test-controller"));
        let empty = ingest(r#""source":{"component":""},"reportingComponent":"rc""#);
        assert_eq!(empty.field(idx), Some("rc"));
        assert_eq!(ingest(r#""source":{}"#).field(idx), None);
    }

    #[test]
    fn rejects_garbage() {
        let cm = builtin_resource("configmaps").expect("builtin");
        assert!(matches!(
            Record::ingest(b"{not json", &cm, 1),
            Err(IngestError::Json(_))
        ));
        assert_eq!(
            Record::ingest(b"[1,2]", &cm, 1).unwrap_err(),
            IngestError::NoMetadata
        );
        assert_eq!(
            Record::ingest(br#"{"metadata":{}}"#, &cm, 1).unwrap_err(),
            IngestError::NoName
        );
        assert_eq!(
            Record::ingest(br#"{"metadata":5}"#, &cm, 1).unwrap_err(),
            IngestError::NoMetadata
        );
    }

    #[test]
    fn duplicate_keys_are_refused_even_when_escaped() {
        let info = listwatch_core::builtin_resources()
            .into_iter()
            .find(|r| r.resource == "pods")
            .expect("pods");
        for bad in [
            // Found by the ingest fuzzer: Go clients read name "n1", the index read "p".
            &br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","name":"n1"}}"#[..],
            br#"{"metadata":{"name":"p","n\u0061me":"q"}}"#,
            br#"{"metadata":{"name":"p"},"metadata":{"name":"q"}}"#,
            br#"{"metadata":{"name":"p","labels":{"a":"1","a":"2"}}}"#,
        ] {
            assert!(
                matches!(
                    Record::ingest(bad, &info, 1),
                    Err(IngestError::DuplicateKey(_))
                ),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(
            Record::ingest(
                br#"{"metadata":{"name":"p","labels":{"a":"1","b":"1"}}}"#,
                &info,
                1
            )
            .is_ok()
        );
    }
}
