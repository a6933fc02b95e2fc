//! JSON → protobuf, driven by the same [`Schema`]: what kube-apiserver writes for an object
//! (to etcd, and on the protobuf wire). Used to write protobuf-stored objects (load tests,
//! tests of the storage path); members the schema does not know are dropped, as Go's
//! decoder drops them.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::Value;

use crate::ProtoError;
use crate::schema::{Field, Kind, MessageId, Schema, Special};

/// A message's JSON member names → (field index, whether that field is an inline struct).
type MemberNames = HashMap<String, (usize, bool)>;

/// Encodes JSON objects as protobuf messages.
pub struct ProtoWriter<'s> {
    schema: &'s Schema,
    /// Per message: JSON name → (field index, through an inline field), built once.
    names: HashMap<MessageId, Arc<MemberNames>>,
}

impl<'s> ProtoWriter<'s> {
    /// A writer over `schema`.
    pub fn new(schema: &'s Schema) -> Self {
        ProtoWriter {
            schema,
            names: HashMap::new(),
        }
    }

    /// `k8s\0` + `runtime.Unknown{typeMeta, raw}` for the object `json` of `api_version`
    /// / `kind`, as kube-apiserver stores it.
    pub fn storage_value(&mut self, json: &Value) -> Result<Vec<u8>, ProtoError> {
        let api_version = json["apiVersion"].as_str().unwrap_or_default();
        let kind = json["kind"].as_str().unwrap_or_default();
        let id = self
            .schema
            .kind(api_version, kind)
            .ok_or_else(|| ProtoError::UnknownKind {
                api_version: api_version.into(),
                kind: kind.into(),
            })?;
        let raw = self.message(id, json)?;
        let mut type_meta = Vec::new();
        put_bytes(&mut type_meta, 1, api_version.as_bytes());
        put_bytes(&mut type_meta, 2, kind.as_bytes());
        let mut out = crate::MAGIC.to_vec();
        put_bytes(&mut out, 1, &type_meta);
        put_bytes(&mut out, 2, &raw);
        put_bytes(&mut out, 3, b"");
        put_bytes(&mut out, 4, b"");
        Ok(out)
    }

    /// The protobuf of message `id` from a JSON object.
    pub fn message(&mut self, id: MessageId, json: &Value) -> Result<Vec<u8>, ProtoError> {
        let schema = self.schema;
        let msg = schema.message(id);
        let mut out = Vec::new();
        match msg.special {
            Special::None => {}
            special => {
                self.special(id, special, json, &mut out)?;
                return Ok(out);
            }
        }
        let Value::Object(obj) = json else {
            return Ok(out);
        };
        // Members in field order; members of an inline struct (Go's `json:",inline"`)
        // gathered under their inline field, which encodes them as its own message.
        let names = self.names_of(id);
        let mut members: Vec<(usize, Cow<'_, Value>)> = Vec::with_capacity(obj.len());
        let mut inline: BTreeMap<usize, serde_json::Map<String, Value>> = BTreeMap::new();
        for (k, v) in obj {
            match names.get(k) {
                Some(&(i, false)) => members.push((i, Cow::Borrowed(v))),
                Some(&(i, true)) => {
                    inline.entry(i).or_default().insert(k.clone(), v.clone());
                }
                None => {}
            }
        }
        members.extend(
            inline
                .into_iter()
                .map(|(i, m)| (i, Cow::Owned(Value::Object(m)))),
        );
        members.sort_by_key(|(i, _)| *i);
        for (i, v) in members {
            self.field(&msg.fields[i], &v, &mut out)?;
        }
        Ok(out)
    }

    /// JSON name → (field index, whether that field is an inline struct holding it).
    fn names_of(&mut self, id: MessageId) -> Arc<MemberNames> {
        if let Some(n) = self.names.get(&id) {
            return n.clone();
        }
        let mut map = HashMap::new();
        let msg = self.schema.message(id);
        for (i, f) in msg.fields.iter().enumerate() {
            if f.inline
                && let Kind::Message(inner) = f.kind
            {
                for k in self.names_of(inner).keys() {
                    map.entry(k.clone()).or_insert((i, true));
                }
            } else {
                map.insert(f.json.to_string(), (i, false));
            }
        }
        let map = Arc::new(map);
        self.names.insert(id, map.clone());
        map
    }

    fn field(&mut self, f: &Field, v: &Value, out: &mut Vec<u8>) -> Result<(), ProtoError> {
        if v.is_null() {
            return Ok(());
        }
        if f.map {
            let Value::Object(m) = v else { return Ok(()) };
            // Go writes map entries sorted by key.
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            for k in keys {
                let mut entry = Vec::new();
                put_bytes(&mut entry, 1, k.as_bytes());
                self.value(f.kind, 2, &m[k], &mut entry)?;
                put_bytes(out, f.tag, &entry);
            }
            return Ok(());
        }
        if f.repeated {
            if let Value::Array(items) = v {
                for item in items {
                    self.value(f.kind, f.tag, item, out)?;
                }
            }
            return Ok(());
        }
        if f.inline {
            if let Kind::Message(inner) = f.kind {
                let bytes = self.message(inner, v)?;
                put_bytes(out, f.tag, &bytes);
            }
            return Ok(());
        }
        self.value(f.kind, f.tag, v, out)
    }

    fn value(
        &mut self,
        kind: Kind,
        tag: u32,
        v: &Value,
        out: &mut Vec<u8>,
    ) -> Result<(), ProtoError> {
        match kind {
            Kind::String => put_bytes(out, tag, v.as_str().unwrap_or_default().as_bytes()),
            Kind::Bytes => {
                let b = base64_decode(v.as_str().unwrap_or_default())
                    .ok_or(ProtoError::Malformed("bytes field is not base64"))?;
                put_bytes(out, tag, &b);
            }
            Kind::Bool => put_varint_field(out, tag, u64::from(v.as_bool().unwrap_or(false))),
            Kind::Int32 | Kind::Int64 => {
                let n = v.as_i64().unwrap_or(0);
                put_varint_field(out, tag, n as u64);
            }
            Kind::Double => {
                put_varint(out, u64::from(tag) << 3 | 1);
                out.extend_from_slice(&v.as_f64().unwrap_or(0.0).to_bits().to_le_bytes());
            }
            Kind::Message(id) => {
                let bytes = self.message(id, v)?;
                put_bytes(out, tag, &bytes);
            }
        }
        Ok(())
    }

    fn special(
        &mut self,
        id: MessageId,
        special: Special,
        v: &Value,
        out: &mut Vec<u8>,
    ) -> Result<(), ProtoError> {
        match special {
            Special::None => {}
            Special::Time | Special::MicroTime => {
                if let Some((secs, nanos)) = v.as_str().and_then(parse_time) {
                    put_varint_field(out, 1, secs as u64);
                    if nanos != 0 {
                        put_varint_field(out, 2, u64::from(nanos));
                    }
                }
            }
            Special::Duration => {
                let d = v.as_str().and_then(parse_go_duration).unwrap_or(0);
                put_varint_field(out, 1, d as u64);
            }
            Special::Raw => {
                let text = serde_json::to_vec(v).map_err(|_| ProtoError::Malformed("raw JSON"))?;
                put_bytes(out, 1, &text);
            }
            Special::Quantity => {
                let s = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                put_bytes(out, 1, s.as_bytes());
            }
            Special::IntOrString => match v {
                Value::String(s) => {
                    put_varint_field(out, 1, 1);
                    put_bytes(out, 3, s.as_bytes());
                }
                other => {
                    put_varint_field(out, 1, 0);
                    put_varint_field(out, 2, other.as_i64().unwrap_or(0) as u64);
                }
            },
            Special::List => {
                for item in v.as_array().into_iter().flatten() {
                    put_bytes(out, 1, item.as_str().unwrap_or_default().as_bytes());
                }
            }
            Special::OrBool | Special::OrArray | Special::OrStringArray => {
                let (schema_tag, schema_kind) = self.schema.union_schema_field(id, special)?;
                match (special, v) {
                    (Special::OrBool, Value::Bool(b)) => put_varint_field(out, 1, u64::from(*b)),
                    (Special::OrArray, Value::Array(items)) => {
                        for item in items {
                            self.value(schema_kind, 2, item, out)?;
                        }
                    }
                    (Special::OrStringArray, Value::Array(items)) => {
                        for item in items {
                            put_bytes(out, 2, item.as_str().unwrap_or_default().as_bytes());
                        }
                    }
                    _ => {
                        if special == Special::OrBool {
                            put_varint_field(out, 1, 1);
                        }
                        self.value(schema_kind, schema_tag, v, out)?;
                    }
                }
            }
        }
        Ok(())
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_varint_field(out: &mut Vec<u8>, tag: u32, v: u64) {
    put_varint(out, u64::from(tag) << 3);
    put_varint(out, v);
}

fn put_bytes(out: &mut Vec<u8>, tag: u32, b: &[u8]) {
    put_varint(out, (u64::from(tag) << 3) | 2);
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// RFC 3339 → (seconds, nanoseconds).
fn parse_time(s: &str) -> Option<(i64, u32)> {
    let secs = listwatch_core::time::parse_rfc3339(s)?;
    let nanos = match s.find('.') {
        Some(dot) => {
            let digits: String = s[dot + 1..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            let padded = format!("{digits:0<9}");
            padded.get(..9)?.parse().ok()?
        }
        None => 0,
    };
    Some((secs, nanos))
}

/// Go's duration syntax (`1h2m3.5s`, `300ms`) → nanoseconds.
fn parse_go_duration(s: &str) -> Option<i64> {
    let (neg, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    if rest == "0" {
        return Some(0);
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let n = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let value: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let u = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..u] {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[u..];
    }
    let total = total.round() as i64;
    Some(if neg { -total } else { total })
}

/// Standard base64 (padding optional) → bytes; `None` on a character outside the alphabet.
pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
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
    let bytes: Vec<u8> = s.bytes().filter(|c| *c != b'=').collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
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
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_go_duration("1h2m3.5s"), Some(3_723_500_000_000));
        assert_eq!(parse_go_duration("300ms"), Some(300_000_000));
        assert_eq!(parse_go_duration("0s"), Some(0));
        assert_eq!(parse_go_duration("x"), None);
    }
}
