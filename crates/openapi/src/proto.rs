//! `/openapi/v2` as protobuf: gnostic's `openapi.v2.Document`
//! (`application/com.github.proto-openapi.spec.v2.v1.0+protobuf`), the only form kubectl's
//! client-side validation downloads. Written from the JSON document, so both always agree;
//! only what listwatch's documents use is encoded. Field numbers are gnostic's
//! `openapiv2/OpenAPIv2.proto`.

use std::ops::RangeInclusive;

use serde_json::{Map, Value};

/// Encodes the Swagger 2.0 document `doc` (as [`crate::OpenApiDocs`] builds it).
pub fn document(doc: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    str_field(&mut out, 1, doc.get("swagger"));
    if let Some(info @ Value::Object(_)) = doc.get("info") {
        message(&mut out, 2, |m| members(m, info, Message::Info, 1..=3));
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

/// The gnostic messages whose plain members [`MEMBERS`] lists.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Message {
    Info,
    Schema,
    Operation,
    BodyParameter,
    QueryParameter,
    PathParameter,
}

/// How a JSON member is encoded: a string, each string of an array (or a lone string), a
/// bool (true only), an int64 or a double (both non-zero only), or gnostic's `Any`.
#[derive(Clone, Copy)]
enum Encoding {
    Str,
    Strings,
    Bool,
    Int64,
    Double,
    Any,
}

/// The members each message takes from its JSON object as they are (the others are
/// written by hand): message, field number, JSON member, encoding; in field order within
/// a message. `QueryParameter` and `PathParameter` are the query and path
/// `NonBodyParameter` sub-schemas, which number `type` and `uniqueItems` differently
/// (query has `allowEmptyValue` before them).
const MEMBERS: &[(Message, u32, &str, Encoding)] = {
    use Encoding::*;
    use Message::*;
    &[
        (Info, 1, "title", Str),
        (Info, 2, "version", Str),
        (Info, 3, "description", Str),
        (Schema, 1, "$ref", Str),
        (Schema, 2, "format", Str),
        (Schema, 3, "title", Str),
        (Schema, 4, "description", Str),
        (Schema, 5, "default", Any),
        (Schema, 6, "multipleOf", Double),
        (Schema, 7, "maximum", Double),
        (Schema, 8, "exclusiveMaximum", Bool),
        (Schema, 9, "minimum", Double),
        (Schema, 10, "exclusiveMinimum", Bool),
        (Schema, 11, "maxLength", Int64),
        (Schema, 12, "minLength", Int64),
        (Schema, 13, "pattern", Str),
        (Schema, 14, "maxItems", Int64),
        (Schema, 15, "minItems", Int64),
        (Schema, 16, "uniqueItems", Bool),
        (Schema, 17, "maxProperties", Int64),
        (Schema, 18, "minProperties", Int64),
        (Schema, 19, "required", Strings),
        (Schema, 26, "discriminator", Str),
        (Schema, 27, "readOnly", Bool),
        (Schema, 30, "example", Any),
        (Operation, 1, "tags", Strings),
        (Operation, 2, "summary", Str),
        (Operation, 3, "description", Str),
        (Operation, 5, "operationId", Str),
        (Operation, 6, "produces", Strings),
        (Operation, 7, "consumes", Strings),
        (Operation, 10, "schemes", Strings),
        (Operation, 11, "deprecated", Bool),
        (BodyParameter, 1, "description", Str),
        (BodyParameter, 2, "name", Str),
        (BodyParameter, 3, "in", Str),
        (BodyParameter, 4, "required", Bool),
        (QueryParameter, 1, "required", Bool),
        (QueryParameter, 2, "in", Str),
        (QueryParameter, 3, "description", Str),
        (QueryParameter, 4, "name", Str),
        (QueryParameter, 6, "type", Str),
        (QueryParameter, 7, "format", Str),
        (QueryParameter, 20, "uniqueItems", Bool),
        (PathParameter, 1, "required", Bool),
        (PathParameter, 2, "in", Str),
        (PathParameter, 3, "description", Str),
        (PathParameter, 4, "name", Str),
        (PathParameter, 5, "type", Str),
        (PathParameter, 6, "format", Str),
        (PathParameter, 19, "uniqueItems", Bool),
    ]
};

/// The members of `o` that [`MEMBERS`] lists for `message` with field numbers in `fields`.
fn members(out: &mut Vec<u8>, o: &Value, message: Message, fields: RangeInclusive<u32>) {
    let listed = MEMBERS
        .iter()
        .filter(|(m, field, ..)| *m == message && fields.contains(field));
    for &(_, field, member, encoding) in listed {
        let v = o.get(member);
        match encoding {
            Encoding::Str => str_field(out, field, v),
            Encoding::Strings => strings(out, field, v),
            Encoding::Bool => boolean(out, field, v),
            Encoding::Int64 => int64(out, field, v),
            Encoding::Double => double(out, field, v),
            Encoding::Any => {
                if let Some(v) = v {
                    any(out, field, v);
                }
            }
        }
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
    members(out, v, Message::Schema, 1..=19);
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
    members(out, v, Message::Schema, 26..=30);
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
    members(out, op, Message::Operation, 1..=7);
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
    members(out, op, Message::Operation, 10..=11);
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
                        members(b, p, Message::BodyParameter, 1..=4);
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

/// A query or path parameter (the two kinds the documents have), each its own
/// `NonBodyParameter` sub-schema.
fn non_body(out: &mut Vec<u8>, p: &Value) {
    let (which, sub_schema) = match p.get("in").and_then(Value::as_str) {
        Some("path") => (4, Message::PathParameter),
        _ => (3, Message::QueryParameter),
    };
    message(out, 2, |nb| {
        message(nb, which, |s| members(s, p, sub_schema, 1..=20))
    });
}
