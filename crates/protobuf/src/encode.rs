//! JSON bytes → protobuf bytes as kube-apiserver's gogo marshalers write them: fields in
//! number order, plain (non-pointer) Go fields written even when zero, pointers only when
//! set, map entries sorted by key. Reads the JSON in place (no tree, no per-object
//! allocation once its scratch buffers have grown), so a server can keep objects as JSON
//! and answer protobuf clients per request.

use listwatch_core::scan::{self, Span};

use crate::schema::{Field, Kind, MessageId, Schema, Special, name_hash};
use crate::{OrMalformed, ProtoError};

/// Deeper JSON than this is refused (Kubernetes objects nest a few dozen levels at most).
const MAX_DEPTH: usize = 100;

/// Encodes JSON objects as protobuf messages; reuse one per thread or request so its
/// scratch buffers are allocated once.
pub struct ProtoEncoder<'s> {
    schema: &'s Schema,
    /// Fields written for every object on the current path: (field index, start, end) in
    /// `out`, to put them into field-number order when JSON order differs.
    chunks: Vec<(u16, u32, u32)>,
    /// Scratch for that reordering.
    reorder: Vec<u8>,
    /// Decoded strings (JSON escapes, base64) before their length is written.
    text: Vec<u8>,
    /// Map keys of the map being written, to sort them as Go does.
    keys: Vec<(Span, Span)>,
}

impl<'s> ProtoEncoder<'s> {
    /// An encoder over `schema`.
    pub fn new(schema: &'s Schema) -> Self {
        ProtoEncoder {
            schema,
            chunks: Vec::new(),
            reorder: Vec::new(),
            text: Vec::new(),
            keys: Vec::new(),
        }
    }

    /// Frees the scratch buffers that grew past `bytes` (0: all): what a long-lived
    /// response (a watch) calls when it goes quiet, so it does not keep them for its life.
    pub fn release_buffers_over(&mut self, bytes: usize) {
        release_over(&mut self.chunks, bytes);
        release_over(&mut self.reorder, bytes);
        release_over(&mut self.text, bytes);
        release_over(&mut self.keys, bytes);
    }

    /// The schema this encoder writes.
    pub fn schema(&self) -> &'s Schema {
        self.schema
    }

    /// Appends `k8s\0` + `runtime.Unknown{typeMeta{api_version, kind}, raw}` with the
    /// object `json` (message `id`) as `raw`: a protobuf response body for one object.
    pub fn envelope(
        &mut self,
        api_version: &str,
        kind: &str,
        id: MessageId,
        json: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), ProtoError> {
        write_envelope(out, api_version, kind, |out| self.message(id, json, out))
    }

    /// `k8s\0` + `runtime.Unknown` for a whole object, its type read from its own
    /// `apiVersion` and `kind`: the value kube-apiserver stores in etcd for it.
    pub fn storage_value(&mut self, json: &[u8]) -> Result<Vec<u8>, ProtoError> {
        let start = scan::skip_ws(json, 0);
        let member = |key: &str| -> String {
            scan::find_member(json, start, key)
                .and_then(|v| string_content(json, v))
                .and_then(|s| std::str::from_utf8(&json[s.0..s.1]).ok())
                .unwrap_or_default()
                .to_string()
        };
        let (api_version, kind) = (member("apiVersion"), member("kind"));
        let id = self
            .schema
            .kind(&api_version, &kind)
            .ok_or_else(|| ProtoError::UnknownKind {
                api_version: api_version.clone(),
                kind: kind.clone(),
            })?;
        let mut out = Vec::with_capacity(json.len());
        self.envelope(&api_version, &kind, id, json, &mut out)?;
        Ok(out)
    }

    /// Appends the message bytes of `json` (an object of message `id`) to `out`.
    pub fn message(
        &mut self,
        id: MessageId,
        json: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), ProtoError> {
        // An object that failed part-way leaves entries behind: start from empty stacks.
        self.chunks.clear();
        self.keys.clear();
        let start = scan::skip_ws(json, 0);
        self.value_of(id, json, start, out, 0).map(|_| ())
    }

    /// The protobuf size of `json` as message `id`, without keeping the bytes.
    pub fn size(
        &mut self,
        id: MessageId,
        json: &[u8],
        scratch: &mut Vec<u8>,
    ) -> Result<usize, ProtoError> {
        scratch.clear();
        self.message(id, json, scratch)?;
        Ok(scratch.len())
    }

    /// A message's content from the JSON value starting at `v`; returns the value's end.
    /// One pass: members are encoded as they are read (JSON order is Go's declaration order,
    /// nearly always field-number order) and moved into number order afterwards when not.
    fn value_of(
        &mut self,
        id: MessageId,
        b: &[u8],
        v: usize,
        out: &mut Vec<u8>,
        depth: usize,
    ) -> Result<usize, ProtoError> {
        if depth > MAX_DEPTH {
            return Err(ProtoError::Malformed("nesting too deep"));
        }
        let schema = self.schema;
        let msg = schema.message(id);
        if msg.special != Special::None {
            return self.special(id, msg.special, b, v, out, depth);
        }
        if b.get(v) != Some(&b'{') {
            // `null` or a value of the wrong type: Go leaves the struct empty.
            self.zero_fields(id, out, depth)?;
            return scan::skip_value(b, v).or_malformed("JSON value");
        }
        let base = self.chunks.len();
        // Fields with a chunk: present members, and absent plain fields written as zero.
        let mut written = 0u64;
        // Fields before `filled` are written or settled (zero written, or nothing to write);
        // a `null` member does not move it, so it stays absent until a later member.
        let mut filled = 0usize;
        let mut i = scan::skip_ws(b, v + 1);
        let close = if b.get(i) == Some(&b'}') {
            i
        } else {
            loop {
                if b.get(i) != Some(&b'"') {
                    return Err(ProtoError::Malformed("JSON object"));
                }
                let kend = scan::skip_string(b, i).or_malformed("JSON string")?;
                let key = &b[i + 1..kend - 1];
                // Compact JSON (what is stored) has `:` right after the key and the value
                // right after it: whitespace is looked for only when it is not so.
                i = if b.get(kend) == Some(&b':') {
                    kend
                } else {
                    scan::skip_ws(b, kend)
                };
                if b.get(i) != Some(&b':') {
                    return Err(ProtoError::Malformed("JSON object"));
                }
                i = match b.get(i + 1) {
                    Some(&c) if c > b' ' => i + 1,
                    _ => scan::skip_ws(b, i + 1),
                };
                let head = key_word(b, kend - 1 - key.len(), key.len());
                let tail = if key.len() <= 8 {
                    head
                } else {
                    key_word(b, kend - 9, 8)
                };
                let idx = msg.json_field_hashed(name_hash(head, tail, key.len()), head, key);
                let vend = match idx {
                    Some(fi) if b.get(i) != Some(&b'n') => {
                        if written & (1 << fi) != 0 {
                            // A repeated name (the last value wins, as in Go's decoder), or
                            // a member after a later one, whose zero was written already.
                            if let Some(c) =
                                self.chunks[base..].iter_mut().find(|c| c.0 == fi as u16)
                            {
                                c.0 = u16::MAX;
                            }
                        } else if fi > filled {
                            // Absent plain fields before this one are zero in Go's output:
                            // written now, in number order, rather than moved there later.
                            written |= self.zeros_between(msg, filled, fi, written, out);
                        }
                        filled = filled.max(fi + 1);
                        let at = out.len();
                        let vend = self.field(&msg.fields[fi], b, i, out, depth)?;
                        written |= 1 << fi;
                        self.chunks.push((fi as u16, at as u32, out.len() as u32));
                        vend
                    }
                    None if key.contains(&b'\\') => {
                        // Escaped member names never occur in what kube-apiserver writes.
                        return Err(ProtoError::Malformed("escaped member name"));
                    }
                    _ => scan::skip_value(b, i).or_malformed("JSON value")?,
                };
                i = match b.get(vend) {
                    Some(b',' | b'}') => vend,
                    _ => scan::skip_ws(b, vend),
                };
                match b.get(i) {
                    Some(b',') => {
                        i = match b.get(i + 1) {
                            Some(b'"') => i + 1,
                            _ => scan::skip_ws(b, i + 1),
                        }
                    }
                    Some(b'}') => break i,
                    _ => return Err(ProtoError::Malformed("JSON object")),
                }
            }
        };
        // Absent fields Go writes anyway (plain ones) after the last member, and inline
        // structs, which read their members from this same object.
        written |= self.zeros_between(msg, filled, msg.fields.len(), written, out);
        let mut inline = msg.inline_mask & !written;
        while inline != 0 {
            let fi = inline.trailing_zeros() as usize;
            inline &= inline - 1;
            let f = &msg.fields[fi];
            if let Kind::Message(inner) = f.kind {
                let at = out.len();
                let mark = begin(out, f.tag);
                self.value_of(inner, b, v, out, depth + 1)?;
                end(out, mark);
                self.chunks.push((fi as u16, at as u32, out.len() as u32));
            }
        }
        self.order_chunks(base, out);
        Ok(close + 1)
    }

    /// Writes the zero values of the fields `from..to` of `msg` not in `written` (inline
    /// ones are left for the end: they read the whole object), one chunk each; returns
    /// the fields it settled.
    fn zeros_between(
        &mut self,
        msg: &crate::schema::Message,
        from: usize,
        to: usize,
        written: u64,
        out: &mut Vec<u8>,
    ) -> u64 {
        let range = low_bits(to) & !low_bits(from);
        let settled = range & !written & !msg.inline_mask;
        let mut todo = settled & msg.zero_mask;
        while todo != 0 {
            let fi = todo.trailing_zeros() as usize;
            todo &= todo - 1;
            let at = out.len();
            out.extend_from_slice(&msg.fields[fi].zero);
            self.chunks.push((fi as u16, at as u32, out.len() as u32));
        }
        settled
    }

    /// Puts the fields written since chunk `base` into field-number order (Go's), dropping
    /// values a repeated member name overrode.
    fn order_chunks(&mut self, base: usize, out: &mut Vec<u8>) {
        let chunks = &mut self.chunks[base..];
        let in_order = chunks.windows(2).all(|w| w[0].0 < w[1].0);
        if !in_order {
            chunks.sort_by_key(|c| c.0);
            // Everything written for this object since `base` lies in these chunks.
            let from = chunks
                .iter()
                .map(|c| c.1 as usize)
                .min()
                .unwrap_or(out.len());
            self.reorder.clear();
            for c in chunks.iter().filter(|c| c.0 != u16::MAX) {
                self.reorder
                    .extend_from_slice(&out[c.1 as usize..c.2 as usize]);
            }
            out.truncate(from);
            out.extend_from_slice(&self.reorder);
        }
        self.chunks.truncate(base);
    }

    /// What gogo writes for a message none of whose members are set.
    fn zero_fields(
        &mut self,
        id: MessageId,
        out: &mut Vec<u8>,
        depth: usize,
    ) -> Result<(), ProtoError> {
        let schema = self.schema;
        let msg = schema.message(id);
        for f in &msg.fields {
            if f.inline {
                if let Kind::Message(inner) = f.kind {
                    let at = begin(out, f.tag);
                    self.zero_fields(inner, out, depth + 1)?;
                    end(out, at);
                }
            } else {
                self.zero(f, out, depth)?;
            }
        }
        Ok(())
    }

    /// An absent or null member: written as zero only when Go's field is plain (what
    /// the schema computes [`Field::zero`] with once).
    pub(crate) fn zero(
        &mut self,
        f: &Field,
        out: &mut Vec<u8>,
        depth: usize,
    ) -> Result<(), ProtoError> {
        if !f.plain || f.repeated || f.map {
            return Ok(());
        }
        match f.kind {
            Kind::String | Kind::Bytes => put_bytes(out, f.tag, b""),
            Kind::Bool | Kind::Int32 | Kind::Int64 => put_varint_field(out, f.tag, 0),
            Kind::Double => put_double(out, f.tag, 0.0),
            Kind::Message(id) => {
                let at = begin(out, f.tag);
                self.special_zero(id, out, depth + 1)?;
                end(out, at);
            }
        }
        Ok(())
    }

    /// A zero message's content, custom marshalers included.
    fn special_zero(
        &mut self,
        id: MessageId,
        out: &mut Vec<u8>,
        depth: usize,
    ) -> Result<(), ProtoError> {
        if depth > MAX_DEPTH {
            return Err(ProtoError::Malformed("nesting too deep"));
        }
        match self.schema.message(id).special {
            // A zero time marshals to nothing; a zero quantity to its string "0".
            Special::Time | Special::MicroTime | Special::Raw | Special::List => Ok(()),
            Special::Quantity => {
                put_bytes(out, 1, b"0");
                Ok(())
            }
            _ => self.zero_fields(id, out, depth),
        }
    }

    /// A present member starting at `v`; returns its end.
    fn field(
        &mut self,
        f: &Field,
        b: &[u8],
        v: usize,
        out: &mut Vec<u8>,
        depth: usize,
    ) -> Result<usize, ProtoError> {
        if f.map {
            if b.get(v) != Some(&b'{') {
                return scan::skip_value(b, v).or_malformed("JSON value");
            }
            let base = self.keys.len();
            let keys = &mut self.keys;
            let close = scan::for_each_member(b, v, |m| keys.push((m.key, m.value)))
                .or_malformed("JSON object")?;
            // Go writes map entries sorted by key (compared as decoded text). The entries
            // stay on the shared stack (nested maps push above them): no allocation.
            let top = self.keys.len();
            let entries = &mut self.keys[base..top];
            // Keys without escapes (all but never) compare as written.
            let escaped = entries
                .iter()
                .any(|&((ks, ke), _)| scan::quote_or_backslash(b, ks) != Some(ke));
            if !escaped {
                let raw = |k: Span| &b[k.0..k.1];
                if entries.windows(2).any(|w| raw(w[0].0) >= raw(w[1].0)) {
                    entries.sort_by(|x, y| raw(x.0).cmp(raw(y.0)));
                }
            } else if entries
                .windows(2)
                .any(|w| decoded(b, w[0].0) >= decoded(b, w[1].0))
            {
                entries.sort_by(|x, y| decoded(b, x.0).cmp(&decoded(b, y.0)));
            }
            for j in base..top {
                let (k, val) = self.keys[j];
                let at = begin(out, f.tag);
                self.string_field(1, b, k.0 - 1, out)?;
                if b.get(val.0) != Some(&b'n') {
                    self.value(f.kind, 2, b, val.0, out, depth)?;
                } else if let Kind::Message(id) = f.kind {
                    // A null map value still has its entry, holding a zero value.
                    let inner = begin(out, 2);
                    self.special_zero(id, out, depth + 1)?;
                    end(out, inner);
                }
                end(out, at);
            }
            self.keys.truncate(base);
            return Ok(close);
        }
        if f.repeated {
            return self.elements(
                b,
                v,
                |enc, e, out| enc.value(f.kind, f.tag, b, e, out, depth),
                out,
            );
        }
        self.value(f.kind, f.tag, b, v, out, depth)
    }

    /// Calls `each` for every element of the JSON array at `v` (other values are skipped);
    /// returns the array's end.
    fn elements(
        &mut self,
        b: &[u8],
        v: usize,
        mut each: impl FnMut(&mut Self, usize, &mut Vec<u8>) -> Result<usize, ProtoError>,
        out: &mut Vec<u8>,
    ) -> Result<usize, ProtoError> {
        if b.get(v) != Some(&b'[') {
            return scan::skip_value(b, v).or_malformed("JSON value");
        }
        let mut i = scan::skip_ws(b, v + 1);
        if b.get(i) == Some(&b']') {
            return Ok(i + 1);
        }
        loop {
            let end = each(self, i, out)?;
            i = scan::skip_ws(b, end);
            match b.get(i) {
                Some(b',') => i = scan::skip_ws(b, i + 1),
                Some(b']') => return Ok(i + 1),
                _ => return Err(ProtoError::Malformed("JSON array")),
            }
        }
    }

    /// One value of `kind` as field `tag`; returns its end.
    fn value(
        &mut self,
        kind: Kind,
        tag: u32,
        b: &[u8],
        v: usize,
        out: &mut Vec<u8>,
        depth: usize,
    ) -> Result<usize, ProtoError> {
        match kind {
            Kind::String => self.string_field(tag, b, v, out),
            Kind::Bytes => {
                let e = scalar_end(b, v)?;
                self.text.clear();
                let inner =
                    string_content(b, (v, e)).or_malformed("bytes field is not a string")?;
                base64_into(&b[inner.0..inner.1], &mut self.text)
                    .or_malformed("bytes field is not base64")?;
                put_bytes(out, tag, &self.text);
                Ok(e)
            }
            Kind::Bool => {
                let e = scalar_end(b, v)?;
                put_varint_field(out, tag, u64::from(&b[v..e] == b"true"));
                Ok(e)
            }
            Kind::Int32 | Kind::Int64 => {
                let e = scalar_end(b, v)?;
                put_varint_field(out, tag, int(&b[v..e]) as u64);
                Ok(e)
            }
            Kind::Double => {
                let e = scalar_end(b, v)?;
                put_double(out, tag, float(&b[v..e]));
                Ok(e)
            }
            Kind::Message(id) => {
                let at = begin(out, tag);
                let e = self.value_of(id, b, v, out, depth + 1)?;
                end(out, at);
                Ok(e)
            }
        }
    }

    /// A string field from a JSON string (escapes decoded) or, for another JSON type, its
    /// text; returns the value's end.
    fn string_field(
        &mut self,
        tag: u32,
        b: &[u8],
        v: usize,
        out: &mut Vec<u8>,
    ) -> Result<usize, ProtoError> {
        if b.get(v) == Some(&b'"') {
            // The common case, a string without escapes, in one pass.
            if let Some(j) = scan::quote_or_backslash(b, v + 1)
                && b[j] == b'"'
            {
                put_bytes(out, tag, &b[v + 1..j]);
                return Ok(j + 1);
            }
        }
        let e = scalar_end(b, v)?;
        match string_content(b, (v, e)) {
            Some(_) => {
                self.text.clear();
                unescape(&b[v..e], &mut self.text).or_malformed("JSON string")?;
                put_bytes(out, tag, &self.text);
            }
            None => put_bytes(out, tag, &b[v..e]),
        }
        Ok(e)
    }

    /// Messages with a custom Go JSON form; returns the value's end.
    fn special(
        &mut self,
        id: MessageId,
        special: Special,
        b: &[u8],
        v: usize,
        out: &mut Vec<u8>,
        depth: usize,
    ) -> Result<usize, ProtoError> {
        let first = b.get(v).copied();
        match special {
            Special::None => scan::skip_value(b, v).or_malformed("JSON value"),
            Special::Time | Special::MicroTime => {
                let e = scalar_end(b, v)?;
                if let Some(inner) = string_content(b, (v, e))
                    && let Some((secs, nanos)) = parse_time(&b[inner.0..inner.1])
                {
                    put_varint_field(out, 1, secs as u64);
                    put_varint_field(out, 2, u64::from(nanos));
                }
                Ok(e)
            }
            Special::Duration => {
                let e = scalar_end(b, v)?;
                let d = string_content(b, (v, e))
                    .and_then(|s| std::str::from_utf8(&b[s.0..s.1]).ok())
                    .and_then(listwatch_core::time::parse_go_duration)
                    .unwrap_or(0);
                put_varint_field(out, 1, d as u64);
                Ok(e)
            }
            // The embedded JSON as written: kube-apiserver keeps a RawExtension's bytes as
            // it received them and writes them back unchanged.
            Special::Raw => {
                let e = scan::skip_value(b, v).or_malformed("JSON value")?;
                put_bytes(out, 1, &b[v..e]);
                Ok(e)
            }
            Special::Quantity => self.string_field(1, b, v, out),
            Special::IntOrString => {
                if first == Some(b'"') {
                    put_varint_field(out, 1, 1);
                    put_varint_field(out, 2, 0);
                    self.string_field(3, b, v, out)
                } else {
                    let e = scalar_end(b, v)?;
                    put_varint_field(out, 1, 0);
                    put_varint_field(out, 2, int(&b[v..e]) as u64);
                    put_bytes(out, 3, b"");
                    Ok(e)
                }
            }
            Special::List => self.elements(b, v, |enc, e, out| enc.string_field(1, b, e, out), out),
            Special::OrBool | Special::OrArray | Special::OrStringArray => {
                let (schema_tag, schema_kind) = self.schema.union_schema_field(id, special)?;
                match (special, first) {
                    (Special::OrBool, Some(b't' | b'f')) => {
                        let e = scalar_end(b, v)?;
                        put_varint_field(out, 1, u64::from(&b[v..e] == b"true"));
                        Ok(e)
                    }
                    (Special::OrArray, Some(b'[')) => self.elements(
                        b,
                        v,
                        |enc, e, out| enc.value(schema_kind, 2, b, e, out, depth),
                        out,
                    ),
                    (Special::OrStringArray, Some(b'[')) => {
                        self.elements(b, v, |enc, e, out| enc.string_field(2, b, e, out), out)
                    }
                    _ => {
                        if special == Special::OrBool {
                            put_varint_field(out, 1, 1);
                        }
                        self.value(schema_kind, schema_tag, b, v, out, depth)
                    }
                }
            }
        }
    }
}

/// End of the string, number or literal at `v` (objects and arrays are skipped whole).
fn scalar_end(b: &[u8], v: usize) -> Result<usize, ProtoError> {
    match b.get(v) {
        Some(b'"') => scan::skip_string(b, v),
        _ => scan::skip_value(b, v),
    }
    .or_malformed("JSON value")
}

/// Appends `k8s\0` + `runtime.Unknown{typeMeta{api_version, kind}, raw, "", ""}` with
/// `raw` whatever `body` writes: the one place a whole protobuf body is framed.
pub fn write_envelope<E>(
    out: &mut Vec<u8>,
    api_version: &str,
    kind: &str,
    body: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
) -> Result<(), E> {
    out.extend_from_slice(crate::MAGIC);
    put_type_meta(out, api_version, kind);
    let at = begin(out, 2);
    body(out)?;
    end(out, at);
    put_bytes(out, 3, b"");
    put_bytes(out, 4, b"");
    Ok(())
}

/// `typeMeta` (field 1 of `runtime.Unknown`).
pub fn put_type_meta(out: &mut Vec<u8>, api_version: &str, kind: &str) {
    let at = begin(out, 1);
    put_bytes(out, 1, api_version.as_bytes());
    put_bytes(out, 2, kind.as_bytes());
    end(out, at);
}

/// Starts a length-delimited field whose length is not yet known: writes its key and a
/// one-byte placeholder, returns where the placeholder is.
pub fn begin(out: &mut Vec<u8>, tag: u32) -> usize {
    put_varint(out, (u64::from(tag) << 3) | 2);
    out.push(0);
    out.len() - 1
}

/// Ends the field [`begin`] started: fills in its length, widening the placeholder when
/// the length needs more than one byte.
pub fn end(out: &mut Vec<u8>, at: usize) {
    let len = out.len() - at - 1;
    if len < 0x80 {
        out[at] = len as u8;
        return;
    }
    let mut buf = [0u8; 10];
    let n = varint_bytes(len as u64, &mut buf);
    // Widen the placeholder: move the content up by the extra bytes in one copy.
    out.resize(out.len() + n - 1, 0);
    out.copy_within(at + 1..at + 1 + len, at + n);
    out[at..at + n].copy_from_slice(&buf[..n]);
}

/// The bytes of `v` as a varint in `buf`; returns how many.
pub fn varint_bytes(mut v: u64, buf: &mut [u8; 10]) -> usize {
    let mut n = 0;
    while v >= 0x80 {
        buf[n] = (v as u8) | 0x80;
        v >>= 7;
        n += 1;
    }
    buf[n] = v as u8;
    n + 1
}

/// How many bytes `v` takes as a varint.
pub fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Appends `v` as a varint.
#[inline]
pub fn put_varint(out: &mut Vec<u8>, v: u64) {
    // Field keys and most lengths are one byte: that case inline, the rest out of line.
    if v < 0x80 {
        out.push(v as u8);
    } else {
        put_long_varint(out, v);
    }
}

#[inline(never)]
fn put_long_varint(out: &mut Vec<u8>, v: u64) {
    let mut buf = [0u8; 10];
    let n = varint_bytes(v, &mut buf);
    out.extend_from_slice(&buf[..n]);
}

/// Appends a varint field.
pub fn put_varint_field(out: &mut Vec<u8>, tag: u32, v: u64) {
    put_varint(out, u64::from(tag) << 3);
    put_varint(out, v);
}

/// Appends a length-delimited field.
pub fn put_bytes(out: &mut Vec<u8>, tag: u32, b: &[u8]) {
    put_varint(out, (u64::from(tag) << 3) | 2);
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn put_double(out: &mut Vec<u8>, tag: u32, v: f64) {
    put_varint(out, (u64::from(tag) << 3) | 1);
    out.extend_from_slice(&v.to_bits().to_le_bytes());
}

/// A mask of the lowest `n` bits (all 64 when `n` is 64).
fn low_bits(n: usize) -> u64 {
    if n >= 64 { u64::MAX } else { (1u64 << n) - 1 }
}

/// [`crate::schema::name_word`] of `b[start..start + len]`, read in one load when the
/// buffer goes on eight bytes (a member name is followed by at least `":` and a value).
#[inline]
fn key_word(b: &[u8], start: usize, len: usize) -> u64 {
    match b.get(start..start + 8) {
        Some(bytes) => {
            let mut word = [0u8; 8];
            word.copy_from_slice(bytes);
            let w = u64::from_le_bytes(word);
            if len >= 8 {
                w
            } else {
                w & ((1u64 << (8 * len)) - 1)
            }
        }
        None => crate::schema::name_word(&b[start..start + len]),
    }
}

/// The content span (inside the quotes) of a JSON string value.
fn string_content(b: &[u8], v: Span) -> Option<Span> {
    (v.1 >= v.0 + 2 && b.get(v.0) == Some(&b'"')).then_some((v.0 + 1, v.1 - 1))
}

/// A key's text for sorting: its bytes, decoded when escaped.
fn decoded(b: &[u8], key: Span) -> std::borrow::Cow<'_, [u8]> {
    let raw = &b[key.0..key.1];
    if !raw.contains(&b'\\') {
        return std::borrow::Cow::Borrowed(raw);
    }
    let mut out = Vec::new();
    match unescape(&b[key.0 - 1..key.1 + 1], &mut out) {
        Some(()) => std::borrow::Cow::Owned(out),
        None => std::borrow::Cow::Borrowed(raw),
    }
}

/// Decodes the JSON string `quoted` (with its quotes) into `out`.
fn unescape(quoted: &[u8], out: &mut Vec<u8>) -> Option<()> {
    let s = quoted.get(1..quoted.len().checked_sub(1)?)?;
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if c != b'\\' {
            out.push(c);
            i += 1;
            continue;
        }
        let e = *s.get(i + 1)?;
        i += 2;
        match e {
            b'"' | b'\\' | b'/' => out.push(e),
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'u' => {
                let mut cp = hex4(s.get(i..i + 4)?)?;
                i += 4;
                if (0xD800..0xDC00).contains(&cp) && s.get(i..i + 2) == Some(b"\\u") {
                    let lo = hex4(s.get(i + 2..i + 6)?)?;
                    if (0xDC00..0xE000).contains(&lo) {
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        i += 6;
                    }
                }
                let ch = char::from_u32(cp).unwrap_or('\u{FFFD}');
                let mut buf = [0u8; 4];
                out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
            }
            _ => return None,
        }
    }
    Some(())
}

fn hex4(h: &[u8]) -> Option<u32> {
    std::str::from_utf8(h)
        .ok()
        .and_then(|t| u32::from_str_radix(t, 16).ok())
}

/// A JSON number as an integer (Go truncates nothing: a fraction is an error there; here
/// it is truncated so a malformed object still encodes).
fn int(text: &[u8]) -> i64 {
    let mut neg = false;
    let mut n: i64 = 0;
    let mut digits = text;
    if let Some((&b'-', rest)) = digits.split_first() {
        neg = true;
        digits = rest;
    }
    for &c in digits {
        if !c.is_ascii_digit() {
            return float(text) as i64;
        }
        n = n.wrapping_mul(10).wrapping_add(i64::from(c - b'0'));
    }
    if neg { n.wrapping_neg() } else { n }
}

fn float(text: &[u8]) -> f64 {
    std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(0.0)
}

/// RFC 3339 → (seconds, nanoseconds).
fn parse_time(s: &[u8]) -> Option<(i64, u32)> {
    let s = std::str::from_utf8(s).ok()?;
    let secs = listwatch_core::time::parse_rfc3339(s)?;
    let mut nanos = 0u32;
    if let Some(dot) = s.find('.') {
        let mut scale = 100_000_000u32;
        for c in s[dot + 1..].bytes().take_while(u8::is_ascii_digit) {
            nanos += u32::from(c - b'0') * scale;
            scale /= 10;
        }
    }
    Some((secs, nanos))
}

/// Standard base64 (padding optional) appended to `out`; `None` on a character outside
/// the alphabet.
pub fn base64_into(s: &[u8], out: &mut Vec<u8>) -> Option<()> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let s = match s.iter().position(|&c| c == b'=') {
        Some(p) => &s[..p],
        None => s,
    };
    out.reserve(s.len() * 3 / 4);
    for chunk in s.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= val(*c)? << (18 - 6 * i);
        }
        out.push((n >> 16) as u8);
        if chunk.len() > 2 {
            out.push((n >> 8) as u8);
        }
        if chunk.len() > 3 {
            out.push(n as u8);
        }
    }
    Some(())
}

/// Replaces `v` by an empty vector when its allocation is over `bytes`.
pub fn release_over<T>(v: &mut Vec<T>, bytes: usize) {
    if v.capacity() * std::mem::size_of::<T>().max(1) > bytes {
        *v = Vec::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_widen_past_one_byte() {
        let mut out = Vec::new();
        let at = begin(&mut out, 2);
        out.extend(std::iter::repeat_n(7u8, 300));
        end(&mut out, at);
        assert_eq!(&out[..3], &[0x12, 0xac, 0x02]);
        assert_eq!(out.len(), 303);
        assert_eq!(varint_len(300), 2);
        assert_eq!(varint_len(0), 1);
        assert_eq!(varint_len(127), 1);
    }

    /// `json` as message `api_version`/`kind`.
    fn encode(api_version: &str, kind: &str, json: &str) -> Vec<u8> {
        let schema = Schema::kubernetes();
        let id = schema.kind(api_version, kind).expect("kind");
        let mut out = Vec::new();
        ProtoEncoder::new(schema)
            .message(id, json.as_bytes(), &mut out)
            .expect("encode");
        out
    }

    #[test]
    fn members_in_any_order_encode_alike_with_zeros_in_place() {
        // Go's order (the zeros of generateName and selfLink, absent, go between), reversed,
        // shuffled with a repeated name (the last wins), and with a null.
        let ordered = r#"{"metadata":{"name":"a","namespace":"b","uid":"u","labels":{"x":"1","a":"2"}},"spec":{"containers":[{"name":"c","image":"i"}],"restartPolicy":"Always"}}"#;
        let want = encode("v1", "Pod", ordered);
        for json in [
            r#"{"spec":{"restartPolicy":"Always","containers":[{"image":"i","name":"c"}]},"metadata":{"labels":{"a":"2","x":"1"},"uid":"u","namespace":"b","name":"a"}}"#,
            r#"{"metadata":{"uid":"u","name":"z","namespace":"b","name":"a","selfLink":null,"labels":{"x":"1","a":"2"}},"spec":{"containers":[{"name":"c","image":"i"}],"restartPolicy":"Always"},"status":null}"#,
        ] {
            assert_eq!(encode("v1", "Pod", json), want, "{json}");
        }
        // ObjectMeta's first fields as gogo writes them: name, generateName "" (absent),
        // namespace, selfLink "" (absent), uid.
        let md = encode(
            "v1",
            "ConfigMap",
            r#"{"metadata":{"name":"a","namespace":"b","uid":"u"}}"#,
        );
        assert_eq!(
            &md[2..17],
            &[
                0x0a, 1, b'a', 0x12, 0, 0x1a, 1, b'b', 0x22, 0, 0x2a, 1, b'u', 0x32, 0
            ][..]
        );
    }

    #[test]
    fn truncated_json_is_an_error_not_a_panic() {
        let schema = Schema::kubernetes();
        let mut enc = ProtoEncoder::new(schema);
        let id = schema.kind("v1", "ConfigMap").expect("kind");
        for json in [
            r#"{"binaryData":"#,
            r#"{"metadata":{"labels":"#,
            r#"{"data":{"a":"#,
        ] {
            let mut out = Vec::new();
            assert!(
                enc.message(id, json.as_bytes(), &mut out).is_err(),
                "{json}"
            );
        }
        // The encoder is still good for the next object.
        let mut out = Vec::new();
        enc.message(id, br#"{"metadata":{"name":"a"}}"#, &mut out)
            .expect("encode");
        assert_eq!(
            out,
            encode("v1", "ConfigMap", r#"{"metadata":{"name":"a"}}"#)
        );
    }

    #[test]
    fn escapes_decode() {
        let mut out = Vec::new();
        unescape(br#""a\u003cb\n\ud83d\ude00""#, &mut out).unwrap();
        assert_eq!(out, "a<b\n😀".as_bytes());
    }
}
