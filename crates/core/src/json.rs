//! Writing JSON strings the way Go's `encoding/json` does, so bodies we generate ourselves
//! (Status, list envelopes, bookmarks) match kube-apiserver's byte for byte.

/// Appends `s` to `out` as a quoted JSON string with Go's escaping rules: `<`, `>` and `&`
/// become `\u003c`, `\u003e`, `\u0026`, control characters use `\n`/`\r`/`\t` or `\u00XX`,
/// and U+2028/U+2029 are escaped.
pub fn push_go_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, ch) in s.char_indices() {
        let esc: Option<&[u8]> = match ch {
            '"' => Some(b"\\\""),
            '\\' => Some(b"\\\\"),
            '\n' => Some(b"\\n"),
            '\r' => Some(b"\\r"),
            '\t' => Some(b"\\t"),
            '<' => Some(b"\\u003c"),
            '>' => Some(b"\\u003e"),
            '&' => Some(b"\\u0026"),
            '\u{2028}' => Some(b"\\u2028"),
            '\u{2029}' => Some(b"\\u2029"),
            c if (c as u32) < 0x20 => None,
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        match esc {
            Some(e) => out.extend_from_slice(e),
            None => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                let c = ch as u32;
                out.extend_from_slice(b"\\u00");
                out.push(HEX[(c >> 4) as usize & 0xf]);
                out.push(HEX[c as usize & 0xf]);
            }
        }
        start = i + ch.len_utf8();
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Returns `s` as a Go-escaped JSON string literal.
pub fn go_string(s: &str) -> String {
    let mut v = Vec::with_capacity(s.len() + 2);
    push_go_string(&mut v, s);
    // Only ASCII escapes are added to valid UTF-8 input, so the result stays valid UTF-8.
    String::from_utf8(v).unwrap_or_default()
}

/// The order [`push_go_value`] writes an object's members in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberOrder {
    /// As the value holds them: a Go struct's fields, in declaration order.
    AsHeld,
    /// Sorted by key: a Go `map[string]interface{}`.
    Sorted,
}

/// Appends `v` as Go's `encoding/json` writes it: Go's string escaping (HTML-safe), no
/// spaces, object members in `order`.
pub fn push_go_value(out: &mut Vec<u8>, v: &serde_json::Value, order: MemberOrder) {
    use serde_json::Value;
    match v {
        Value::String(s) => push_go_string(out, s),
        Value::Array(a) => {
            out.push(b'[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                push_go_value(out, x, order);
            }
            out.push(b']');
        }
        Value::Object(m) => {
            let mut members: Vec<(&String, &Value)> = m.iter().collect();
            if order == MemberOrder::Sorted {
                members.sort_by_key(|(k, _)| *k);
            }
            out.push(b'{');
            for (i, (k, x)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                push_go_string(out, k);
                out.push(b':');
                push_go_value(out, x, order);
            }
            out.push(b'}');
        }
        // null, booleans and numbers are written as serde_json writes them, as Go does.
        other => out.extend_from_slice(other.to_string().as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_like_go() {
        assert_eq!(go_string("a\"b"), r#""a\"b""#);
        assert_eq!(go_string("<&>"), r#""\u003c\u0026\u003e""#);
        assert_eq!(go_string("\u{0}x\u{1f}"), r#""\u0000x\u001f""#);
        assert_eq!(go_string("é\n"), "\"é\\n\"");
    }
}
