//! `/openapi/v2` as protobuf: gnostic's `openapi.v2.Document`
//! (`application/com.github.proto-openapi.spec.v2.v1.0+protobuf`), the only form kubectl's
//! client-side validation downloads. Written from the JSON document, so both always agree;
//! only what listwatch's documents use is encoded. Field numbers are gnostic's
//! `openapiv2/OpenAPIv2.proto`.

use serde_json::{Map, Value};

/// Encodes the Swagger 2.0 document `doc` (as [`crate::OpenApiDocs`] builds it).
pub fn document(doc: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    str_field(&mut out, 1, doc.get("swagger"));
    if let Some(Value::Object(info)) = doc.get("info") {
        message(&mut out, 2, |m| {
            str_field(m, 1, info.get("title"));
            str_field(m, 2, info.get("version"));
            str_field(m, 3, info.get("description"));
        });
    }
    if let Some(Value::Object(paths)) = doc.get("paths") {
        message(&mut out, 8, |m| {
            for (name, item) in paths {
                message(m, 2, |n| {
                    string(n, 1, name);
                    message(n, 2, |p| path_item(p, item));
                });
            }
        });
    }
    if let Some(Value::Object(defs)) = doc.get("definitions") {
        message(&mut out, 9, |m| named_schemas(m, 1, defs));
    }
    out
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn key(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, (u64::from(field) << 3) | u64::from(wire));
}

fn string(out: &mut Vec<u8>, field: u32, s: &str) {
    if !s.is_empty() {
        key(out, field, 2);
        varint(out, s.len() as u64);
        out.extend_from_slice(s.as_bytes());
    }
}

fn str_field(out: &mut Vec<u8>, field: u32, v: Option<&Value>) {
    if let Some(Value::String(s)) = v {
        string(out, field, s);
    }
}

fn strings(out: &mut Vec<u8>, field: u32, v: Option<&Value>) {
    match v {
        Some(Value::Array(a)) => a.iter().for_each(|s| str_field(out, field, Some(s))),
        Some(s @ Value::String(_)) => str_field(out, field, Some(s)),
        _ => {}
    }
}

fn boolean(out: &mut Vec<u8>, field: u32, v: Option<&Value>) {
    if let Some(Value::Bool(true)) = v {
        key(out, field, 0);
        out.push(1);
    }
}

fn int64(out: &mut Vec<u8>, field: u32, v: Option<&Value>) {
    if let Some(n) = v.and_then(Value::as_i64).filter(|n| *n != 0) {
        key(out, field, 0);
        varint(out, n as u64);
    }
}

fn double(out: &mut Vec<u8>, field: u32, v: Option<&Value>) {
    if let Some(n) = v.and_then(Value::as_f64).filter(|n| *n != 0.0) {
        key(out, field, 1);
        out.extend_from_slice(&n.to_le_bytes());
    }
}

/// A length-delimited sub-message written by `f`.
fn message(out: &mut Vec<u8>, field: u32, f: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    f(&mut inner);
    key(out, field, 2);
    varint(out, inner.len() as u64);
    out.extend_from_slice(&inner);
}

/// gnostic's `Any`: the value as YAML text (JSON is YAML).
fn any(out: &mut Vec<u8>, field: u32, v: &Value) {
    let text = serde_json::to_string(v).unwrap_or_default();
    message(out, field, |m| string(m, 2, &text));
}

/// The `x-…` members of `o` as `NamedAny`s.
fn extensions(out: &mut Vec<u8>, field: u32, o: &Map<String, Value>) {
    for (k, v) in o.iter().filter(|(k, _)| k.starts_with("x-")) {
        message(out, field, |m| {
            string(m, 1, k);
            any(m, 2, v);
        });
    }
}

fn named_schemas(out: &mut Vec<u8>, field: u32, o: &Map<String, Value>) {
    for (name, s) in o {
        message(out, field, |m| {
            string(m, 1, name);
            message(m, 2, |x| schema(x, s));
        });
    }
}

fn schema(out: &mut Vec<u8>, v: &Value) {
    let Value::Object(o) = v else {
        return;
    };
    str_field(out, 1, o.get("$ref"));
    str_field(out, 2, o.get("format"));
    str_field(out, 3, o.get("title"));
    str_field(out, 4, o.get("description"));
    if let Some(d) = o.get("default") {
        any(out, 5, d);
    }
    double(out, 6, o.get("multipleOf"));
    double(out, 7, o.get("maximum"));
    boolean(out, 8, o.get("exclusiveMaximum"));
    double(out, 9, o.get("minimum"));
    boolean(out, 10, o.get("exclusiveMinimum"));
    int64(out, 11, o.get("maxLength"));
    int64(out, 12, o.get("minLength"));
    str_field(out, 13, o.get("pattern"));
    int64(out, 14, o.get("maxItems"));
    int64(out, 15, o.get("minItems"));
    boolean(out, 16, o.get("uniqueItems"));
    int64(out, 17, o.get("maxProperties"));
    int64(out, 18, o.get("minProperties"));
    strings(out, 19, o.get("required"));
    if let Some(Value::Array(e)) = o.get("enum") {
        e.iter().for_each(|x| any(out, 20, x));
    }
    match o.get("additionalProperties") {
        Some(Value::Bool(b)) => message(out, 21, |m| boolean(m, 2, Some(&Value::Bool(*b)))),
        Some(s @ Value::Object(_)) => message(out, 21, |m| message(m, 1, |x| schema(x, s))),
        _ => {}
    }
    if o.contains_key("type") {
        message(out, 22, |m| strings(m, 1, o.get("type")));
    }
    match o.get("items") {
        Some(Value::Array(a)) => message(out, 23, |m| {
            a.iter().for_each(|s| message(m, 1, |x| schema(x, s)));
        }),
        Some(s @ Value::Object(_)) => message(out, 23, |m| message(m, 1, |x| schema(x, s))),
        _ => {}
    }
    if let Some(Value::Array(a)) = o.get("allOf") {
        a.iter().for_each(|s| message(out, 24, |x| schema(x, s)));
    }
    if let Some(Value::Object(p)) = o.get("properties") {
        message(out, 25, |m| named_schemas(m, 1, p));
    }
    str_field(out, 26, o.get("discriminator"));
    boolean(out, 27, o.get("readOnly"));
    if let Some(e) = o.get("example") {
        any(out, 30, e);
    }
    extensions(out, 31, o);
}

fn path_item(out: &mut Vec<u8>, item: &Value) {
    let Value::Object(o) = item else {
        return;
    };
    for (method, field) in [
        ("get", 2),
        ("put", 3),
        ("post", 4),
        ("delete", 5),
        ("options", 6),
        ("head", 7),
        ("patch", 8),
    ] {
        if let Some(op) = o.get(method) {
            message(out, field, |m| operation(m, op));
        }
    }
    parameters(out, 9, o.get("parameters"));
    extensions(out, 10, o);
}

fn operation(out: &mut Vec<u8>, op: &Value) {
    let Value::Object(o) = op else {
        return;
    };
    strings(out, 1, o.get("tags"));
    str_field(out, 2, o.get("summary"));
    str_field(out, 3, o.get("description"));
    str_field(out, 5, o.get("operationId"));
    strings(out, 6, o.get("produces"));
    strings(out, 7, o.get("consumes"));
    parameters(out, 8, o.get("parameters"));
    if let Some(Value::Object(rs)) = o.get("responses") {
        message(out, 9, |m| {
            for (code, r) in rs {
                message(m, 1, |n| {
                    string(n, 1, code);
                    // ResponseValue.response → Response{description, schema: SchemaItem}.
                    message(n, 2, |rv| {
                        message(rv, 1, |resp| {
                            str_field(resp, 1, r.get("description"));
                            if let Some(s) = r.get("schema") {
                                message(resp, 2, |si| message(si, 1, |x| schema(x, s)));
                            }
                        })
                    });
                });
            }
        });
    }
    strings(out, 10, o.get("schemes"));
    boolean(out, 11, o.get("deprecated"));
    extensions(out, 13, o);
}

fn parameters(out: &mut Vec<u8>, field: u32, ps: Option<&Value>) {
    let Some(Value::Array(ps)) = ps else {
        return;
    };
    for p in ps {
        // ParametersItem.parameter → Parameter (body, or non-body by location).
        message(out, field, |item| {
            message(item, 1, |param| {
                if p.get("in").and_then(Value::as_str) == Some("body") {
                    message(param, 1, |b| {
                        str_field(b, 1, p.get("description"));
                        str_field(b, 2, p.get("name"));
                        str_field(b, 3, p.get("in"));
                        boolean(b, 4, p.get("required"));
                        if let Some(s) = p.get("schema") {
                            message(b, 5, |x| schema(x, s));
                        }
                    });
                } else {
                    non_body(param, p);
                }
            })
        });
    }
}

/// A query or path parameter (the two kinds the documents have). Their sub-schemas
/// number `type` and `uniqueItems` differently: query has `allowEmptyValue` before them.
fn non_body(out: &mut Vec<u8>, p: &Value) {
    let (which, ty, format, unique) = match p.get("in").and_then(Value::as_str) {
        Some("path") => (4, 5, 6, 19),
        _ => (3, 6, 7, 20),
    };
    message(out, 2, |nb| {
        message(nb, which, |s| {
            boolean(s, 1, p.get("required"));
            str_field(s, 2, p.get("in"));
            str_field(s, 3, p.get("description"));
            str_field(s, 4, p.get("name"));
            str_field(s, ty, p.get("type"));
            str_field(s, format, p.get("format"));
            boolean(s, unique, p.get("uniqueItems"));
        })
    });
}
