//! JSON patch (RFC 6902) as kube-apiserver applies it: with `gopkg.in/evanphx/json-patch.v4`
//! (`Patch.Apply`), whose behaviour differs from the RFC where clients can see it, so it is
//! followed here rather than the RFC (and rather than the `json-patch` crate, which follows
//! the RFC): negative array indices count from the end; `test` of a missing member against
//! `null` (or no `value`) passes; `replace` of a missing object member adds it; `copy` from a
//! missing object member copies `null`; `add` at the whole document (`""`) does not apply
//! while `replace` and `test` of it do; numbers compare by their JSON text (`1` ≠ `1.0`);
//! the accumulated size of `copy` is limited (kube-apiserver's 3 MiB `JSONPatchMaxCopyBytes`).
//! Error texts are evanphx's (kube-apiserver's 422 does not show them, but logs do).

use serde_json::{Map, Value};

/// kube-apiserver's `JSONPatchMaxCopyBytes`: what `copy` operations may add in total.
const MAX_COPY_BYTES: usize = 3 * 1024 * 1024;

/// One decoded operation: its members as sent (evanphx keeps the raw map).
pub(crate) type Operation = Map<String, Value>;

/// Why an operation does not apply (evanphx's message).
#[derive(Debug)]
pub(crate) struct OpError(pub(crate) String);

const MISSING: &str = "missing value";
const INVALID_INDEX: &str = "invalid index referenced";

/// Applies `ops` to `doc` in order; the first failing operation stops the patch.
pub(crate) fn apply(doc: &mut Value, ops: &[Option<Operation>]) -> Result<(), OpError> {
    let mut copied = 0usize;
    for op in ops {
        let empty = Map::new();
        let op = op.as_ref().unwrap_or(&empty);
        let kind = op.get("op").and_then(Value::as_str).unwrap_or("unknown");
        match kind {
            "add" => add(doc, op)?,
            "remove" => remove(doc, op)?,
            "replace" => replace(doc, op)?,
            "move" => mov(doc, op)?,
            "test" => test(doc, op)?,
            "copy" => copy(doc, op, &mut copied)?,
            other => return Err(OpError(format!("Unexpected kind: {other}"))),
        }
    }
    Ok(())
}

/// A string member (`path`, `from`): Err with evanphx's reason when absent, null or not a string.
fn member<'a>(op: &'a Operation, name: &str) -> Result<&'a str, String> {
    match op.get(name) {
        None | Some(Value::Null) => Err(if name == "path" {
            format!("operation missing path field: {MISSING}")
        } else {
            format!("operation, missing from field: {MISSING}")
        }),
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(format!(
            "json: cannot unmarshal {} into Go value of type string",
            crate::gofmt::json_kind(other)
        )),
    }
}

/// The operation's `value`: `None` when absent or `null` (evanphx's nil node).
fn value(op: &Operation) -> Option<&Value> {
    op.get("value").filter(|v| !v.is_null())
}

/// RFC 6901 unescaping of one reference token.
fn decode_token(t: &str) -> String {
    t.replace("~1", "/").replace("~0", "~")
}

/// evanphx's `findObject`: the container holding the last token of `path` and that token.
/// Every token but the last must name an existing, non-null object or array.
fn find<'a>(doc: &'a mut Value, path: &str) -> Option<(&'a mut Value, String)> {
    let mut parts: Vec<&str> = path.split('/').collect();
    if parts.len() < 2 {
        return None;
    }
    let last = parts.pop().unwrap_or_default();
    let mut cur = doc;
    for part in &parts[1..] {
        let key = decode_token(part);
        let next = match cur {
            Value::Object(m) => m.get_mut(&key)?,
            Value::Array(items) => {
                let i = array_index(&key, items.len()).ok()?;
                items.get_mut(i)?
            }
            _ => return None,
        };
        if !(next.is_object() || next.is_array()) {
            return None;
        }
        cur = next;
    }
    Some((cur, decode_token(last)))
}

/// Go's `strconv.Atoi` (an optional sign, then ASCII digits).
fn atoi(key: &str) -> Result<i64, String> {
    let digits = key.strip_prefix(['+', '-']).unwrap_or(key);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "strconv.Atoi: parsing {}: invalid syntax",
            go_quote(key)
        ));
    }
    key.parse::<i64>().map_err(|_| {
        format!(
            "strconv.Atoi: parsing {}: value out of range",
            go_quote(key)
        )
    })
}

fn go_quote(s: &str) -> String {
    listwatch_core::json::go_string(s)
}

/// An existing element's index (`get`, `remove`, `set`): negative counts from the end.
fn array_index(key: &str, len: usize) -> Result<usize, String> {
    let idx = atoi(key)?;
    let len = len as i64;
    let resolved = if idx < 0 { idx + len } else { idx };
    if idx < -len || resolved >= len {
        return Err(format!(
            "Unable to access invalid index: {idx}: {INVALID_INDEX}"
        ));
    }
    Ok(resolved as usize)
}

/// The member or element at `key`: Ok(None) for a missing or null object member.
fn get<'a>(con: &'a Value, key: &str) -> Result<Option<&'a Value>, String> {
    match con {
        Value::Object(m) => Ok(m.get(key).filter(|v| !v.is_null())),
        Value::Array(items) => {
            let i = array_index(key, items.len())?;
            Ok(items.get(i).filter(|v| !v.is_null()))
        }
        _ => Ok(None),
    }
}

fn con_add(con: &mut Value, key: &str, val: Value) -> Result<(), String> {
    match con {
        Value::Object(m) => {
            m.insert(key.to_string(), val);
            Ok(())
        }
        Value::Array(items) => {
            if key == "-" {
                items.push(val);
                return Ok(());
            }
            let idx = atoi(key)
                .map_err(|e| format!("value was not a proper array index: '{key}': {e}"))?;
            let size = items.len() as i64 + 1;
            if idx >= size || idx < -size {
                return Err(format!(
                    "Unable to access invalid index: {idx}: {INVALID_INDEX}"
                ));
            }
            let at = if idx < 0 { idx + size } else { idx };
            items.insert(at as usize, val);
            Ok(())
        }
        _ => Err(format!(
            "Unable to access invalid index: {key}: {INVALID_INDEX}"
        )),
    }
}

fn con_remove(con: &mut Value, key: &str) -> Result<Value, String> {
    match con {
        Value::Object(m) => m
            .shift_remove(key)
            .ok_or_else(|| format!("Unable to remove nonexistent key: {key}: {MISSING}")),
        Value::Array(items) => {
            let i = array_index(key, items.len())?;
            Ok(items.remove(i))
        }
        _ => Err(format!(
            "Unable to remove nonexistent key: {key}: {MISSING}"
        )),
    }
}

fn add(doc: &mut Value, op: &Operation) -> Result<(), OpError> {
    let (path, con, key) = target(doc, op, "add")?;
    let val = value(op).cloned().unwrap_or(Value::Null);
    con_add(con, &key, val).map_err(|e| OpError(format!("error in add for path: '{path}': {e}")))
}

fn remove(doc: &mut Value, op: &Operation) -> Result<(), OpError> {
    let (path, con, key) = target(doc, op, "remove")?;
    con_remove(con, &key)
        .map(drop)
        .map_err(|e| OpError(format!("error in remove for path: '{path}': {e}")))
}

/// An add's or remove's `path`, its container in `doc` and the key in it, with evanphx's
/// words (the same for both) when the path is missing or leads nowhere.
fn target<'d, 'o>(
    doc: &'d mut Value,
    op: &'o Operation,
    name: &str,
) -> Result<(&'o str, &'d mut Value, String), OpError> {
    let path = member(op, "path")
        .map_err(|_| OpError(format!("{name} operation failed to decode path: {MISSING}")))?;
    let Some((con, key)) = find(doc, path) else {
        return Err(OpError(format!(
            "{name} operation does not apply: doc is missing path: \"{path}\": {MISSING}"
        )));
    };
    Ok((path, con, key))
}

fn replace(doc: &mut Value, op: &Operation) -> Result<(), OpError> {
    let path = member(op, "path")
        .map_err(|e| OpError(format!("replace operation failed to decode path: {e}")))?;
    if path.is_empty() {
        return match value(op) {
            Some(v @ (Value::Object(_) | Value::Array(_))) => {
                *doc = v.clone();
                Ok(())
            }
            _ => Err(OpError(
                "replace operation value must be object or array: %!w(<nil>)".into(),
            )),
        };
    }
    let Some((con, key)) = find(doc, path) else {
        return Err(OpError(format!(
            "replace operation does not apply: doc is missing path: {path}: {MISSING}"
        )));
    };
    if get(con, &key).is_err() {
        return Err(OpError(format!(
            "replace operation does not apply: doc is missing key: {path}: {MISSING}"
        )));
    }
    let val = value(op).cloned().unwrap_or(Value::Null);
    match con {
        Value::Object(m) => {
            m.insert(key, val);
        }
        Value::Array(items) => {
            let i = array_index(&key, items.len())
                .map_err(|e| OpError(format!("error in remove for path: '{path}': {e}")))?;
            items[i] = val;
        }
        _ => {}
    }
    Ok(())
}

fn mov(doc: &mut Value, op: &Operation) -> Result<(), OpError> {
    let from = member(op, "from")
        .map_err(|e| OpError(format!("move operation failed to decode from: {e}")))?;
    let Some((con, key)) = find(doc, from) else {
        return Err(OpError(format!(
            "move operation does not apply: doc is missing from path: {from}: {MISSING}"
        )));
    };
    get(con, &key).map_err(|e| OpError(format!("error in move for path: '{key}': {e}")))?;
    let val = con_remove(con, &key)
        .map_err(|e| OpError(format!("error in move for path: '{key}': {e}")))?;
    let path = member(op, "path")
        .map_err(|e| OpError(format!("move operation failed to decode path: {e}")))?;
    let Some((con, key)) = find(doc, path) else {
        return Err(OpError(format!(
            "move operation does not apply: doc is missing destination path: {path}: {MISSING}"
        )));
    };
    con_add(con, &key, val).map_err(|e| OpError(format!("error in move for path: '{path}': {e}")))
}

fn test(doc: &mut Value, op: &Operation) -> Result<(), OpError> {
    let path = member(op, "path")
        .map_err(|e| OpError(format!("test operation failed to decode path: {e}")))?;
    let failed = || OpError(format!("testing value {path} failed: test failed"));
    if path.is_empty() {
        return if value(op) == Some(&*doc) {
            Ok(())
        } else {
            Err(failed())
        };
    }
    let Some((con, key)) = find(doc, path) else {
        return Err(OpError(format!(
            "test operation does not apply: is missing path: {path}: {MISSING}"
        )));
    };
    let current =
        get(con, &key).map_err(|e| OpError(format!("error in test for path: '{path}': {e}")))?;
    match (current, value(op)) {
        (None, None) => Ok(()),
        (Some(a), Some(b)) if a == b => Ok(()),
        _ => Err(failed()),
    }
}

fn copy(doc: &mut Value, op: &Operation, copied: &mut usize) -> Result<(), OpError> {
    let from = member(op, "from")
        .map_err(|e| OpError(format!("copy operation failed to decode from: {e}")))?;
    let Some((con, key)) = find(doc, from) else {
        return Err(OpError(format!(
            "copy operation does not apply: doc is missing from path: {from}: {MISSING}"
        )));
    };
    let val = get(con, &key)
        .map_err(|e| OpError(format!("error in copy for from: '{from}': {e}")))?
        .cloned();
    let path = member(op, "path")
        .map_err(|_| OpError(format!("copy operation failed to decode path: {MISSING}")))?;
    let Some((con, key)) = find(doc, path) else {
        return Err(OpError(format!(
            "copy operation does not apply: doc is missing destination path: {path}: {MISSING}"
        )));
    };
    if let Some(v) = &val {
        *copied += serde_json::to_vec(v).map(|b| b.len()).unwrap_or(0);
        if *copied > MAX_COPY_BYTES {
            return Err(OpError(format!(
                "Unable to complete the copy, the accumulated size increase of copy is {}, exceeding the limit {MAX_COPY_BYTES}",
                *copied
            )));
        }
    }
    con_add(con, &key, val.unwrap_or(Value::Null))
        .map_err(|e| OpError(format!("error while adding value during copy: {e}")))
}
