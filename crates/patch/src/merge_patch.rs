//! JSON merge patch (RFC 7386) as kube-apiserver applies it: evanphx/json-patch v4's
//! `MergePatch`. It differs from the RFC in one place clients can see: a patch value that
//! lands where the document has no object (absent, `null`, a scalar or an array) has its
//! `null` members dropped recursively, through arrays too (`{"a":[{"b":null}]}` adds
//! `"a":[{}]`), while the RFC keeps nulls inside arrays. A patch value that is not an
//! object replaces whatever is there as is.

use serde_json::{Map, Value};

/// Merges `patch` into `doc` (`mergeDocs`).
pub(crate) fn merge_docs(doc: &mut Map<String, Value>, patch: Map<String, Value>) {
    for (k, v) in patch {
        if v.is_null() {
            doc.shift_remove(&k);
            continue;
        }
        match doc.get_mut(&k) {
            Some(cur) if !cur.is_null() => {
                let old = std::mem::take(cur);
                *cur = merge(old, v);
            }
            _ => {
                let mut v = v;
                prune_nulls(&mut v);
                doc.insert(k, v);
            }
        }
    }
}

/// `merge(cur, patch)`: objects merge; anything else is replaced by the patch value.
fn merge(cur: Value, patch: Value) -> Value {
    match (cur, patch) {
        (Value::Object(mut c), Value::Object(p)) => {
            merge_docs(&mut c, p);
            Value::Object(c)
        }
        (Value::Object(_), p) => p,
        (_, mut p) => {
            prune_nulls(&mut p);
            p
        }
    }
}

/// Drops `null` object members, recursively through objects and arrays (evanphx's
/// `pruneNulls`, strategicpatch's `discardNullValuesFromPatch`).
pub(crate) fn prune_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, v| !v.is_null());
            m.values_mut().for_each(prune_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(prune_nulls),
        _ => {}
    }
}
