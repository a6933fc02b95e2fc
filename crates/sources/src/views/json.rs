//! What the view converters share: their error, Go's JSON of a value and member lookups. A
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

/// `v` as Go writes it.
pub(crate) fn go_json(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    listwatch_core::json::push_go_value(&mut out, v, listwatch_core::json::MemberOrder::AsHeld);
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
