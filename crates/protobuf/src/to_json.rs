//! Protobuf → JSON, driven by the [`Schema`]: one pass over a message's fields into a
//! reusable scratch list, then the JSON members in Go's field order, written straight into
//! the output buffer (no per-field allocation once the scratch has grown).

use listwatch_core::json::push_go_string;
use listwatch_core::time::push_rfc3339;

use crate::ProtoError;
use crate::schema::{Field, Kind, MessageId, Schema, Special};
use crate::wire::{FieldReader, Value, slice};

/// Nesting deeper than this is refused (Kubernetes objects nest a few dozen levels at most;
/// `JSONSchemaProps` recursion is bounded by what the apiserver accepted).
const MAX_DEPTH: usize = 100;

#[derive(Clone, Copy)]
struct Entry {
    field: u16,
    value: Value,
}

/// Writes JSON from protobuf messages; keep one per thread and reuse it.
pub struct JsonWriter<'s> {
    schema: &'s Schema,
    scratch: Vec<Entry>,
    /// Fields whose number the schema does not know (newer than the table); skipped.
    pub unknown_fields: u64,
    /// The first few (message, field number) pairs skipped, for logs and the schema's tests.
    pub unknown_seen: Vec<(MessageId, u32)>,
    /// Apply kube-apiserver's read-time defaulting (objects read from etcd), not only
    /// serialization (objects on the wire).
    pub storage_defaults: bool,
}

impl<'s> JsonWriter<'s> {
    /// A writer over `schema`.
    pub fn new(schema: &'s Schema) -> Self {
        JsonWriter {
            schema,
            scratch: Vec::new(),
            unknown_fields: 0,
            unknown_seen: Vec::new(),
            storage_defaults: false,
        }
    }

    /// A writer for values read from etcd: also fills what kube-apiserver defaults on read.
    pub fn for_storage(schema: &'s Schema) -> Self {
        JsonWriter {
            storage_defaults: true,
            ..JsonWriter::new(schema)
        }
    }

    /// Appends the JSON of message `id` encoded in `input[start..end]` (a whole object, in
    /// braces). `type_meta` puts `kind` and `apiVersion` first, as Go's inline TypeMeta does.
    pub fn write_message(
        &mut self,
        id: MessageId,
        input: &[u8],
        type_meta: Option<(&str, &str)>,
        out: &mut Vec<u8>,
    ) -> Result<(), ProtoError> {
        self.object(id, input, 0, input.len(), type_meta, out, 0)
    }

    /// One object in braces, `kind` and `apiVersion` first when given (Go's inline
    /// TypeMeta).
    #[allow(clippy::too_many_arguments)]
    fn object(
        &mut self,
        id: MessageId,
        input: &[u8],
        start: usize,
        end: usize,
        type_meta: Option<(&str, &str)>,
        out: &mut Vec<u8>,
        depth: usize,
    ) -> Result<(), ProtoError> {
        let mut first = true;
        out.push(b'{');
        if let Some((api_version, kind)) = type_meta {
            out.extend_from_slice(b"\"kind\":");
            push_go_string(out, kind);
            out.extend_from_slice(b",\"apiVersion\":");
            push_go_string(out, api_version);
            first = false;
        }
        self.fields(id, input, start, end, out, &mut first, depth)?;
        out.push(b'}');
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn fields(
        &mut self,
        id: MessageId,
        input: &[u8],
        start: usize,
        end: usize,
        out: &mut Vec<u8>,
        first: &mut bool,
        depth: usize,
    ) -> Result<(), ProtoError> {
        if depth > MAX_DEPTH {
            return Err(ProtoError::Malformed("nesting too deep"));
        }
        let schema = self.schema;
        let msg = schema.message(id);
        let base = self.scratch.len();
        let mut reader = FieldReader::new(input, start, end);
        while let Some((tag, value)) = reader.next_field()? {
            match msg.field_index(tag) {
                Some(i) => self.scratch.push(Entry {
                    field: i as u16,
                    value,
                }),
                None => {
                    self.unknown_fields += 1;
                    if self.unknown_seen.len() < 64 && !self.unknown_seen.contains(&(id, tag)) {
                        self.unknown_seen.push((id, tag));
                    }
                }
            }
        }
        // Stable: repeated values keep their wire order.
        self.scratch[base..].sort_by_key(|e| e.field);
        let top = self.scratch.len();
        let mut j = base;
        for (i, field) in msg.fields.iter().enumerate() {
            let from = j;
            while j < top && usize::from(self.scratch[j].field) == i {
                j += 1;
            }
            self.field(field, input, from, j, out, first, depth)?;
        }
        self.scratch.truncate(base);
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn field(
        &mut self,
        field: &Field,
        input: &[u8],
        from: usize,
        to: usize,
        out: &mut Vec<u8>,
        first: &mut bool,
        depth: usize,
    ) -> Result<(), ProtoError> {
        let present = from < to;
        if field.inline
            && let Kind::Message(inner) = field.kind
        {
            let (s, e) = match present {
                true => len_range(self.scratch[to - 1].value)?,
                false => (0, 0),
            };
            return self.fields(inner, input, s, e, out, first, depth + 1);
        }
        if !present {
            if let Some(d) = field.default.as_ref().filter(|_| self.storage_defaults) {
                key(out, field, first);
                push_go_string(out, d);
                return Ok(());
            }
            if field.required {
                key(out, field, first);
                self.absent(field, out);
            }
            return Ok(());
        }
        if field.map {
            key(out, field, first);
            out.push(b'{');
            for k in from..to {
                let (s, e) = len_range(self.scratch[k].value)?;
                if k > from {
                    out.push(b',');
                }
                self.map_entry(field, input, s, e, out, depth)?;
            }
            out.push(b'}');
            return Ok(());
        }
        if field.repeated {
            key(out, field, first);
            out.push(b'[');
            let mut n = 0;
            for k in from..to {
                let value = self.scratch[k].value;
                match (field.kind, value) {
                    // Packed numbers: several values in one length-delimited field.
                    (Kind::Int32 | Kind::Int64 | Kind::Bool, Value::Len(s, e)) => {
                        let mut r = FieldReader::new(input, s as usize, e as usize);
                        while r.remaining() > 0 {
                            let v = r.varint()?;
                            sep(out, &mut n);
                            self.value(field.kind, Value::Varint(v), input, out, depth)?;
                        }
                    }
                    (Kind::Message(id), Value::Len(s, e))
                        if field.typemeta && self.storage_defaults =>
                    {
                        sep(out, &mut n);
                        let schema = self.schema;
                        let tm = schema.type_meta(id);
                        self.object(id, input, s as usize, e as usize, tm, out, depth + 1)?;
                    }
                    _ => {
                        sep(out, &mut n);
                        self.value(field.kind, value, input, out, depth)?;
                    }
                }
            }
            out.push(b']');
            return Ok(());
        }
        // Singular: the last value wins, as in protobuf.
        let value = self.scratch[to - 1].value;
        if let (Some(d), Kind::String, Value::Len(s, e)) = (&field.default, field.kind, value)
            && s == e
            && self.storage_defaults
        {
            key(out, field, first);
            push_go_string(out, d);
            return Ok(());
        }
        if !field.required && !field.pointer && is_zero_scalar(field.kind, value) {
            // Go writes non-pointer fields even when zero; with `omitempty` JSON drops them.
            return Ok(());
        }
        if field.omitzero && is_zero_time(input, value)? {
            return Ok(());
        }
        key(out, field, first);
        self.value(field.kind, value, input, out, depth)
    }

    fn map_entry(
        &mut self,
        field: &Field,
        input: &[u8],
        start: usize,
        end: usize,
        out: &mut Vec<u8>,
        depth: usize,
    ) -> Result<(), ProtoError> {
        let mut r = FieldReader::new(input, start, end);
        let mut k: &[u8] = &[];
        let mut v = None;
        while let Some((tag, value)) = r.next_field()? {
            match (tag, value) {
                (1, Value::Len(s, e)) => k = slice(input, s, e),
                (2, value) => v = Some(value),
                _ => self.unknown_fields += 1,
            }
        }
        push_go_string(out, &String::from_utf8_lossy(k));
        out.push(b':');
        match v {
            Some(value) => self.value(field.kind, value, input, out, depth),
            None => {
                zero_value(field.kind, self.schema, out);
                Ok(())
            }
        }
    }

    fn absent(&self, field: &Field, out: &mut Vec<u8>) {
        // A nil slice, map or pointer: Go's encoder writes null.
        if field.repeated || field.map || field.pointer {
            out.extend_from_slice(b"null");
        } else {
            zero_value(field.kind, self.schema, out);
        }
    }

    fn value(
        &mut self,
        kind: Kind,
        value: Value,
        input: &[u8],
        out: &mut Vec<u8>,
        depth: usize,
    ) -> Result<(), ProtoError> {
        match (kind, value) {
            (Kind::String, Value::Len(s, e)) => {
                push_go_string(out, &String::from_utf8_lossy(slice(input, s, e)))
            }
            (Kind::Bytes, Value::Len(s, e)) => push_base64(out, slice(input, s, e)),
            (Kind::Bool, Value::Varint(v)) => {
                out.extend_from_slice(if v != 0 { b"true" } else { b"false" })
            }
            (Kind::Int32, Value::Varint(v)) => push_int(out, i64::from(v as i32)),
            (Kind::Int64, Value::Varint(v)) => push_int(out, v as i64),
            (Kind::Double, Value::Fixed64(v)) => push_float(out, f64::from_bits(v)),
            (Kind::Message(id), Value::Len(s, e)) => {
                self.message(id, input, s as usize, e as usize, out, depth + 1)?
            }
            _ => return Err(ProtoError::Malformed("wire type does not match the schema")),
        }
        Ok(())
    }

    fn message(
        &mut self,
        id: MessageId,
        input: &[u8],
        start: usize,
        end: usize,
        out: &mut Vec<u8>,
        depth: usize,
    ) -> Result<(), ProtoError> {
        let special = self.schema.message(id).special;
        match special {
            Special::None => self.object(id, input, start, end, None, out, depth)?,
            Special::Time | Special::MicroTime => {
                let (mut secs, mut nanos) = (0i64, 0i64);
                let mut r = FieldReader::new(input, start, end);
                while let Some((tag, value)) = r.next_field()? {
                    match (tag, value) {
                        (1, Value::Varint(v)) => secs = v as i64,
                        (2, Value::Varint(v)) => nanos = i64::from(v as i32),
                        _ => {}
                    }
                }
                if secs == 0 && nanos == 0 {
                    out.extend_from_slice(b"null");
                } else {
                    out.push(b'"');
                    let micros = (special == Special::MicroTime).then_some((nanos / 1000) as u32);
                    push_rfc3339(out, secs, micros);
                    out.push(b'"');
                }
            }
            Special::Duration => {
                let mut d = 0i64;
                let mut r = FieldReader::new(input, start, end);
                while let Some((tag, value)) = r.next_field()? {
                    if let (1, Value::Varint(v)) = (tag, value) {
                        d = v as i64;
                    }
                }
                out.push(b'"');
                push_go_duration(out, d);
                out.push(b'"');
            }
            Special::Raw => {
                let raw = first_bytes(input, start, end, 1)?;
                match raw {
                    Some(b) if !b.is_empty() => out.extend_from_slice(trim_json(b)),
                    _ => out.extend_from_slice(b"null"),
                }
            }
            Special::Quantity => match first_bytes(input, start, end, 1)? {
                Some(b) => push_go_string(out, &String::from_utf8_lossy(b)),
                None => out.extend_from_slice(b"\"0\""),
            },
            Special::IntOrString => {
                let (mut ty, mut int, mut string) = (0u64, 0i64, &[][..]);
                let mut r = FieldReader::new(input, start, end);
                while let Some((tag, value)) = r.next_field()? {
                    match (tag, value) {
                        (1, Value::Varint(v)) => ty = v,
                        (2, Value::Varint(v)) => int = i64::from(v as i32),
                        (3, Value::Len(s, e)) => string = slice(input, s, e),
                        _ => {}
                    }
                }
                if ty == 1 {
                    push_go_string(out, &String::from_utf8_lossy(string));
                } else {
                    push_int(out, int);
                }
            }
            Special::List => {
                out.push(b'[');
                let mut n = 0;
                let mut r = FieldReader::new(input, start, end);
                while let Some((tag, value)) = r.next_field()? {
                    if let (1, Value::Len(s, e)) = (tag, value) {
                        sep(out, &mut n);
                        push_go_string(out, &String::from_utf8_lossy(slice(input, s, e)));
                    }
                }
                if n == 0 {
                    // A nil Go slice.
                    out.pop();
                    out.extend_from_slice(b"null");
                } else {
                    out.push(b']');
                }
            }
            Special::OrBool | Special::OrArray | Special::OrStringArray => {
                self.schema_or(id, special, input, start, end, out, depth)?
            }
        }
        Ok(())
    }

    /// The apiextensions `JSONSchemaPropsOr…` unions, whose Go marshalers write one side.
    #[allow(clippy::too_many_arguments)]
    fn schema_or(
        &mut self,
        id: MessageId,
        special: Special,
        input: &[u8],
        start: usize,
        end: usize,
        out: &mut Vec<u8>,
        depth: usize,
    ) -> Result<(), ProtoError> {
        let (schema_tag, schema_kind) = self.schema.union_schema_field(id, special)?;
        let mut schema_value = None;
        let mut allows = false;
        let mut many = Vec::new();
        let mut r = FieldReader::new(input, start, end);
        while let Some((tag, value)) = r.next_field()? {
            match (special, tag, value) {
                (Special::OrBool, 1, Value::Varint(v)) => allows = v != 0,
                (_, t, v) if t == schema_tag => schema_value = Some(v),
                (Special::OrArray | Special::OrStringArray, 2, v) => many.push(v),
                _ => {}
            }
        }
        if special != Special::OrBool && !many.is_empty() {
            let kind = if special == Special::OrArray {
                schema_kind
            } else {
                Kind::String
            };
            out.push(b'[');
            let mut n = 0;
            for v in many {
                sep(out, &mut n);
                self.value(kind, v, input, out, depth)?;
            }
            out.push(b']');
            return Ok(());
        }
        match schema_value {
            Some(v) => self.value(schema_kind, v, input, out, depth),
            None if special == Special::OrBool => {
                out.extend_from_slice(if allows { b"true" } else { b"false" });
                Ok(())
            }
            None => {
                out.extend_from_slice(b"null");
                Ok(())
            }
        }
    }
}

fn key(out: &mut Vec<u8>, field: &Field, first: &mut bool) {
    if !*first {
        out.push(b',');
    }
    *first = false;
    out.extend_from_slice(&field.json_key);
}

fn sep(out: &mut Vec<u8>, n: &mut usize) {
    if *n > 0 {
        out.push(b',');
    }
    *n += 1;
}

fn len_range(v: Value) -> Result<(usize, usize), ProtoError> {
    match v {
        Value::Len(s, e) => Ok((s as usize, e as usize)),
        _ => Err(ProtoError::Malformed("wire type does not match the schema")),
    }
}

fn first_bytes(
    input: &[u8],
    start: usize,
    end: usize,
    want: u32,
) -> Result<Option<&[u8]>, ProtoError> {
    let mut r = FieldReader::new(input, start, end);
    let mut found = None;
    while let Some((tag, value)) = r.next_field()? {
        if let (t, Value::Len(s, e)) = (tag, value)
            && t == want
        {
            found = Some(slice(input, s, e));
        }
    }
    Ok(found)
}

/// Go's `encoding/json` compacts embedded raw JSON; stored raw values are already compact
/// apart from surrounding whitespace.
fn trim_json(b: &[u8]) -> &[u8] {
    let s = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let e = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(s, |i| i + 1);
    &b[s..e]
}

/// Whether a `Time`-shaped message (seconds, nanos) is the zero time.
fn is_zero_time(input: &[u8], value: Value) -> Result<bool, ProtoError> {
    let Value::Len(s, e) = value else {
        return Ok(false);
    };
    let mut r = FieldReader::new(input, s as usize, e as usize);
    while let Some((_, v)) = r.next_field()? {
        if v != Value::Varint(0) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether a present singular scalar holds its type's zero value.
fn is_zero_scalar(kind: Kind, value: Value) -> bool {
    match (kind, value) {
        (Kind::String | Kind::Bytes, Value::Len(s, e)) => s == e,
        (Kind::Bool | Kind::Int32 | Kind::Int64, Value::Varint(v)) => v == 0,
        (Kind::Double, Value::Fixed64(v)) => f64::from_bits(v) == 0.0,
        _ => false,
    }
}

/// What Go writes for a field it always serializes but the message does not carry.
fn zero_value(kind: Kind, schema: &Schema, out: &mut Vec<u8>) {
    let text: &[u8] = match kind {
        Kind::String => b"\"\"",
        Kind::Bytes => b"null",
        Kind::Bool => b"false",
        Kind::Int32 | Kind::Int64 | Kind::Double => b"0",
        Kind::Message(id) => match schema.message(id).special {
            Special::Quantity => b"\"0\"",
            Special::IntOrString => b"0",
            Special::Duration => b"\"0s\"",
            Special::OrBool => b"false",
            // A nil pointer (non-pointer structs are always on the wire).
            _ => b"null",
        },
    };
    out.extend_from_slice(text);
}

fn push_int(out: &mut Vec<u8>, v: i64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let mut u = v.unsigned_abs();
    loop {
        i -= 1;
        buf[i] = b'0' + (u % 10) as u8;
        u /= 10;
        if u == 0 {
            break;
        }
    }
    if v < 0 {
        out.push(b'-');
    }
    out.extend_from_slice(&buf[i..]);
}

/// Go's float formatting in JSON: shortest representation, exponent form only for very
/// large or small magnitudes.
fn push_float(out: &mut Vec<u8>, f: f64) {
    if !f.is_finite() {
        out.extend_from_slice(b"null");
        return;
    }
    let abs = f.abs();
    let text = if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let s = format!("{f:e}");
        // Rust writes 1e21 / 1e-7; Go writes 1e+21 / 1e-07.
        match s.split_once('e') {
            Some((m, e)) => {
                let (sign, digits) = match e.strip_prefix('-') {
                    Some(d) => ('-', d),
                    None => ('+', e),
                };
                format!("{m}e{sign}{digits:0>2}")
            }
            None => s,
        }
    } else {
        format!("{f}")
    };
    out.extend_from_slice(text.as_bytes());
}

/// Go's `time.Duration.String()`.
pub fn push_go_duration(out: &mut Vec<u8>, d: i64) {
    if d == 0 {
        out.extend_from_slice(b"0s");
        return;
    }
    let u = d.unsigned_abs();
    let mut text = String::new();
    if d < 0 {
        text.push('-');
    }
    if u < 1_000_000_000 {
        let (prec, unit) = match u {
            0..1_000 => (0, "ns"),
            1_000..1_000_000 => (3, "µs"),
            _ => (6, "ms"),
        };
        text.push_str(&frac(u, prec));
        text.push_str(unit);
    } else {
        let secs = u / 1_000_000_000;
        let seconds = frac(u % 60_000_000_000, 9);
        let minutes = secs / 60;
        if minutes > 0 {
            let hours = minutes / 60;
            if hours > 0 {
                text.push_str(&format!("{hours}h"));
            }
            text.push_str(&format!("{}m", minutes % 60));
        }
        text.push_str(&seconds);
        text.push('s');
    }
    out.extend_from_slice(text.as_bytes());
}

/// `v / 10^prec` with the fraction's trailing zeros dropped (`1500, 3` → `1.5`).
fn frac(v: u64, prec: u32) -> String {
    let p = 10u64.pow(prec);
    let (int, rem) = (v / p, v % p);
    if rem == 0 {
        return int.to_string();
    }
    let digits = format!("{rem:0width$}", width = prec as usize);
    format!("{int}.{}", digits.trim_end_matches('0'))
}

/// Standard base64 with padding, as Go's `encoding/json` writes `[]byte`.
pub fn push_base64(out: &mut Vec<u8>, data: &[u8]) {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    out.push(b'"');
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        out.push(T[(n >> 18) as usize & 63]);
        out.push(T[(n >> 12) as usize & 63]);
        out.push(if chunk.len() > 1 {
            T[(n >> 6) as usize & 63]
        } else {
            b'='
        });
        out.push(if chunk.len() > 2 {
            T[n as usize & 63]
        } else {
            b'='
        });
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dur(d: i64) -> String {
        let mut v = Vec::new();
        push_go_duration(&mut v, d);
        String::from_utf8(v).unwrap_or_default()
    }

    #[test]
    fn durations_read_like_go() {
        assert_eq!(dur(0), "0s");
        assert_eq!(dur(1), "1ns");
        assert_eq!(dur(1_500), "1.5µs");
        assert_eq!(dur(2_000_000), "2ms");
        assert_eq!(dur(1_000_000_000), "1s");
        assert_eq!(dur(90_000_000_000), "1m30s");
        assert_eq!(dur(3_600_000_000_000), "1h0m0s");
        assert_eq!(dur(3_723_500_000_000), "1h2m3.5s");
        assert_eq!(dur(-1_000_000_000), "-1s");
    }

    #[test]
    fn base64_pads() {
        let b = |d: &[u8]| {
            let mut v = Vec::new();
            push_base64(&mut v, d);
            String::from_utf8(v).unwrap_or_default()
        };
        assert_eq!(b(b""), "\"\"");
        assert_eq!(b(b"f"), "\"Zg==\"");
        assert_eq!(b(b"fo"), "\"Zm8=\"");
        assert_eq!(b(b"foo"), "\"Zm9v\"");
    }

    #[test]
    fn floats_read_like_go() {
        let f = |x: f64| {
            let mut v = Vec::new();
            push_float(&mut v, x);
            String::from_utf8(v).unwrap_or_default()
        };
        assert_eq!(f(1.0), "1");
        assert_eq!(f(0.5), "0.5");
        assert_eq!(f(1e21), "1e+21");
        assert_eq!(f(1e-7), "1e-07");
    }
}
