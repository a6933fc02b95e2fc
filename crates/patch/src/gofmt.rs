//! How Go prints the values strategicpatch and encoding/json put in their error messages, so
//! ours read as kube-apiserver's: `%v` of a decoded JSON value, `reflect.TypeOf` names, and
//! encoding/json's decode errors.

use serde_json::Value;

/// The Go type encoding/json (with kube's int-preserving decoder) gives a JSON value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GoType {
    Nil,
    Bool,
    Int,
    Float,
    String,
    Slice,
    Map,
}

impl GoType {
    pub(crate) fn of(v: &Value) -> GoType {
        match v {
            Value::Null => GoType::Nil,
            Value::Bool(_) => GoType::Bool,
            // kube decodes patches with sigs.k8s.io/json's int-preserving decoder: a number
            // that fits int64 is an int64, anything else a float64.
            Value::Number(n) if n.is_i64() => GoType::Int,
            Value::Number(_) => GoType::Float,
            Value::String(_) => GoType::String,
            Value::Array(_) => GoType::Slice,
            Value::Object(_) => GoType::Map,
        }
    }

    /// `reflect.TypeOf(v)` printed with `%s`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            GoType::Nil => "%!s(<nil>)",
            GoType::Bool => "bool",
            GoType::Int => "int64",
            GoType::Float => "float64",
            GoType::String => "string",
            GoType::Slice => "[]interface {}",
            GoType::Map => "map[string]interface {}",
        }
    }
}

/// Go's `%v` of a value decoded from JSON (`map[k:v …]` with sorted keys, `[a b]`, `<nil>`).
pub(crate) fn v(value: &Value) -> String {
    let mut out = String::new();
    write_v(&mut out, value);
    out
}

fn write_v(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("<nil>"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match n.as_i64() {
            Some(i) => out.push_str(&i.to_string()),
            None => out.push_str(&float(n.as_f64().unwrap_or(0.0))),
        },
        Value::String(s) => out.push_str(s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                write_v(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push_str("map[");
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(k);
                out.push(':');
                write_v(out, &map[k.as_str()]);
            }
            out.push(']');
        }
    }
}

/// Go's `%v` of a float64 (`strconv.FormatFloat(f, 'g', -1, 64)`): the shortest digits,
/// in exponent form when the exponent is below -4 or at least 6 (`1e+06`).
fn float(f: f64) -> String {
    if f == 0.0 || !f.is_finite() {
        return format!("{f}");
    }
    let e = format!("{f:e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        go_exp(mantissa, exp)
    } else {
        format!("{f}")
    }
}

fn go_exp(mantissa: &str, exp: i32) -> String {
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exp.abs())
}

/// The kind encoding/json names in "cannot unmarshal X into Go value".
pub(crate) fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// encoding/json's message for bytes that are not JSON: `unexpected end of JSON input`, or
/// `invalid character 'x' …` at the byte serde stopped on (Go names the context more
/// precisely; the code and reason are what clients act on).
pub(crate) fn syntax_error(input: &[u8], err: &serde_json::Error) -> String {
    if err.is_eof() || input.iter().all(u8::is_ascii_whitespace) {
        return "unexpected end of JSON input".into();
    }
    let offset = byte_offset(input, err.line(), err.column());
    let c = input.get(offset).copied().unwrap_or(b' ');
    let shown = match c {
        b'\'' => "'\\''".to_string(),
        b'"' => "'\"'".to_string(),
        c if c.is_ascii_graphic() || c == b' ' => format!("'{}'", c as char),
        c => format!("'\\x{c:02x}'"),
    };
    let context = if err.classify() == serde_json::error::Category::Syntax
        && input[..offset].iter().any(|b| !b.is_ascii_whitespace())
        && balanced(&input[..offset])
    {
        "after top-level value"
    } else {
        "looking for beginning of value"
    };
    format!("invalid character {shown} {context}")
}

/// Whether the bytes before the error close every bracket they open (outside strings): then
/// the error is trailing data after a complete value.
fn balanced(prefix: &[u8]) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0i64, false, false);
    for &b in prefix {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth -= 1,
            _ => {}
        }
    }
    depth == 0 && !in_string
}

/// serde reports the position after the offending byte (1-based line and column).
fn byte_offset(input: &[u8], line: usize, column: usize) -> usize {
    let mut start = 0;
    for _ in 1..line {
        match input[start..].iter().position(|&b| b == b'\n') {
            Some(i) => start += i + 1,
            None => break,
        }
    }
    (start + column.saturating_sub(1)).min(input.len().saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prints_like_go() {
        assert_eq!(
            v(&json!({"b": [1, "x", null], "a": {"c": true}})),
            "map[a:map[c:true] b:[1 x <nil>]]"
        );
        assert_eq!(float(1_000_000.0), "1e+06");
        assert_eq!(float(123456.0), "123456");
        assert_eq!(float(0.5), "0.5");
        assert_eq!(float(1.5e-7), "1.5e-07");
        assert_eq!(float(2.5), "2.5");
    }

    #[test]
    fn syntax_errors_read_like_encoding_json() {
        let msg = |s: &[u8]| {
            let e = serde_json::from_slice::<Value>(s).expect_err("not JSON");
            syntax_error(s, &e)
        };
        assert_eq!(msg(b""), "unexpected end of JSON input");
        assert_eq!(msg(b"{\"a\":"), "unexpected end of JSON input");
        assert_eq!(
            msg(b"<html>"),
            "invalid character '<' looking for beginning of value"
        );
        assert_eq!(msg(b"{} x"), "invalid character 'x' after top-level value");
    }
}
