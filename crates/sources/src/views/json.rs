//! What the view converters share: their error, Go's JSON writer and member lookups. A
//! leaf of `views`, so the converters and the view source do not import each other.

use serde_json::Value;

/// Why an object could not be converted into its view.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// The stored object is not JSON.
    #[error("not a JSON object: {0}")]
    Json(String),
    /// The stored object is JSON but not of the expected shape.
    #[error("unexpected shape: {0}")]
    Shape(&'static str),
}

/// Writes `v` as Go's `encoding/json` does (HTML-safe escapes), members in their order.
pub(crate) fn write_go(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) => out.extend_from_slice(n.to_string().as_bytes()),
        Value::String(s) => listwatch_core::json::push_go_string(out, s),
        Value::Array(a) => {
            out.push(b'[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_go(x, out);
            }
            out.push(b']');
        }
        Value::Object(m) => {
            out.push(b'{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                listwatch_core::json::push_go_string(out, k);
                out.push(b':');
                write_go(x, out);
            }
            out.push(b'}');
        }
    }
}

/// `v` as Go writes it.
pub(crate) fn go_json(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    write_go(v, &mut out);
    out
}

/// `obj[key]` unless absent or null.
pub(crate) fn present<'a>(obj: &'a Value, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

/// `obj[key]` as a non-empty string.
pub(crate) fn non_empty<'a>(obj: &'a Value, key: &str) -> Option<&'a Value> {
    obj.get(key)
        .filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
}
