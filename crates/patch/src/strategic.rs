//! Strategic merge patch, applied the way kube-apiserver applies it
//! (apimachinery `pkg/util/strategicpatch`, `StrategicMergeMapPatch` with
//! `MergeParallelList` and `IgnoreUnmatchedNulls`): maps merge recursively and `null`
//! deletes; a list replaces unless its field's `patchStrategy` is `merge`, then maps merge by
//! the `patchMergeKey` and primitives merge as a set; `$patch: replace|delete` (maps and list
//! items), `$retainKeys`, `$deleteFromPrimitiveList/<field>` and `$setElementOrder/<field>`.
//! What a field's strategy is comes from a [`Lookup`]: the built-in types' table
//! (`builtin.rs`) or, in the tests, the types strategicpatch's own tests use.

use serde_json::{Map, Value};

use crate::gofmt::{self, GoType};
use crate::merge_patch::prune_nulls;

const DIRECTIVE: &str = "$patch";
const DELETE: &str = "delete";
const REPLACE: &str = "replace";
const MERGE: &str = "merge";
const RETAIN_KEYS_STRATEGY: &str = "retainKeys";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";

/// Why a strategic merge patch does not apply, with apimachinery's messages.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SmpError {
    /// `mergepatch.ErrBadPatchFormatForPrimitiveList` (kube: 400).
    #[error("invalid patch format of primitive list")]
    BadPrimitiveList,
    /// `mergepatch.ErrBadPatchFormatForRetainKeys` (kube: 400).
    #[error("invalid patch format of retainKeys")]
    BadRetainKeys,
    /// `mergepatch.ErrBadPatchFormatForSetElementOrderList` (kube: 400).
    #[error("invalid patch format of setElementOrder list")]
    BadSetElementOrder,
    /// `mergepatch.ErrNoListOfLists` (kube: 422).
    #[error("lists of lists are not supported")]
    ListOfLists,
    /// Every other error strategicpatch returns (a missing merge key, an unknown field, an
    /// unknown `$patch`); kube-apiserver passes them through unclassified (500).
    #[error("{0}")]
    Other(String),
}

/// What Go's struct tags say about one field (`patchStrategy`, `patchMergeKey`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PatchMeta {
    /// The `patchStrategy` tag as written: `""`, `merge`, `replace`, `retainKeys`,
    /// `merge,retainKeys`.
    pub strategy: String,
    /// The `patchMergeKey` tag (`""` when none).
    pub merge_key: String,
}

/// The type a JSON value is merged against: strategicpatch's `LookupPatchMeta`.
pub trait Lookup: Sized {
    /// The type and tags of field `key` of this struct (`LookupPatchMetadataForStruct`).
    fn for_struct(&self, key: &str) -> Result<(Self, PatchMeta), SmpError>;
    /// The element type and tags of list field `key` (`LookupPatchMetadataForSlice`).
    fn for_slice(&self, key: &str) -> Result<(Self, PatchMeta), SmpError>;
    /// Go's `reflect.Kind` name of this type (`struct`, `map`, …), for messages.
    fn kind_name(&self) -> &'static str;
}

/// Applies `patch` to `original` (both JSON objects) against the type `schema`.
pub fn merge(
    original: Map<String, Value>,
    patch: Map<String, Value>,
    schema: &impl Lookup,
) -> Result<Map<String, Value>, SmpError> {
    merge_map(original, patch, schema)
}

fn merge_map<L: Lookup>(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    schema: &L,
) -> Result<Map<String, Value>, SmpError> {
    if let Some(directive) = patch.get(DIRECTIVE) {
        return match directive.as_str() {
            Some(REPLACE) => {
                patch.shift_remove(DIRECTIVE);
                Ok(patch)
            }
            Some(DELETE) => Ok(Map::new()),
            _ => Err(bad_patch_type(directive, &patch)),
        };
    }
    retain_keys(&mut original, &mut patch)?;
    set_element_order(&mut original, &mut patch, schema)?;

    for (key, patch_value) in patch {
        let (key, delete_list) = if key.starts_with(DELETE_FROM_PRIMITIVE_LIST) {
            let field =
                extract_key(&key, DELETE_FROM_PRIMITIVE_LIST).ok_or(SmpError::BadPrimitiveList)?;
            (field.to_string(), true)
        } else {
            (key, false)
        };
        if patch_value.is_null() {
            original.shift_remove(&key);
            continue;
        }
        let Some(slot) = original.get_mut(&key) else {
            if !delete_list {
                put(&mut original, key, patch_value);
            }
            continue;
        };
        let (have, want) = (GoType::of(slot), GoType::of(&patch_value));
        if have != want {
            if !delete_list {
                put(&mut original, key, patch_value);
            }
            continue;
        }
        let current = std::mem::take(slot);
        let merged = match (current, patch_value) {
            (Value::Object(o), Value::Object(p)) => {
                let (sub, meta) = schema.for_struct(&key)?;
                if strategy(&meta)? == REPLACE {
                    Value::Object(p)
                } else {
                    Value::Object(merge_map(o, p, &sub)?)
                }
            }
            (Value::Array(o), Value::Array(p)) => {
                let (sub, meta) = schema.for_slice(&key)?;
                if strategy(&meta)? == MERGE || delete_list {
                    Value::Array(merge_slice(o, p, &sub, &meta.merge_key, delete_list, None)?)
                } else {
                    Value::Array(p)
                }
            }
            (_, p) => match remove_directives(p) {
                Some(v) => v,
                None => {
                    original.shift_remove(&key);
                    continue;
                }
            },
        };
        if let Some(slot) = original.get_mut(&key) {
            *slot = merged;
        }
    }
    Ok(original)
}

/// A patch value where the original has none (or one of another type): nulls inside are
/// dropped and items carrying a `$patch` directive left out.
fn put(original: &mut Map<String, Value>, key: String, mut value: Value) {
    // `discardNullValuesFromPatch` is merge patch's `pruneNulls` under another name.
    prune_nulls(&mut value);
    match remove_directives(value) {
        Some(v) => {
            original.insert(key, v);
        }
        None => {
            original.shift_remove(&key);
        }
    }
}

/// The field's strategy other than `retainKeys` (`extractRetainKeysPatchStrategy`).
fn strategy(meta: &PatchMeta) -> Result<&str, SmpError> {
    let parts: Vec<&str> = meta.strategy.split(',').collect();
    match parts.as_slice() {
        [one] if *one == RETAIN_KEYS_STRATEGY => Ok(""),
        [one] => Ok(one),
        [a, b] if *a == RETAIN_KEYS_STRATEGY => Ok(b),
        [a, b] if *b == RETAIN_KEYS_STRATEGY => Ok(a),
        _ => Err(SmpError::Other(format!(
            "unexpected patch strategy: [{}]",
            parts.join(" ")
        ))),
    }
}

/// `$deleteFromPrimitiveList/field` → `field` (None when the prefix is not exactly it).
fn extract_key<'a>(key: &'a str, prefix: &str) -> Option<&'a str> {
    match key.split_once('/') {
        Some((head, rest)) if head == prefix => Some(rest),
        _ => None,
    }
}

/// `$retainKeys`: every key the patch sets must be listed; keys of the original not listed
/// are cleared.
fn retain_keys(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
) -> Result<(), SmpError> {
    let Some(list) = patch.shift_remove(RETAIN_KEYS) else {
        return Ok(());
    };
    let Value::Array(list) = list else {
        return Err(SmpError::BadRetainKeys);
    };
    let listed = |k: &str| list.iter().any(|v| v.as_str() == Some(k));
    for (k, v) in patch.iter() {
        if v.is_null()
            || k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
            || k.starts_with(SET_ELEMENT_ORDER)
        {
            continue;
        }
        if !listed(k) {
            return Err(SmpError::BadRetainKeys);
        }
    }
    original.retain(|k, _| listed(k));
    Ok(())
}

/// `$setElementOrder/<field>`: merges the field's list (if patched) and orders the result
/// by the directive, then the patch, then the live list (`mergePatchIntoOriginal`).
fn set_element_order<L: Lookup>(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    schema: &L,
) -> Result<(), SmpError> {
    let keys: Vec<String> = patch
        .keys()
        .filter(|k| k.starts_with(SET_ELEMENT_ORDER))
        .cloned()
        .collect();
    for key in keys {
        let Some(order) = patch.shift_remove(&key) else {
            continue;
        };
        let Value::Array(order) = order else {
            return Err(bad_arg_type(GoType::Slice, &order));
        };
        let field = extract_key(&key, SET_ELEMENT_ORDER)
            .ok_or(SmpError::BadSetElementOrder)?
            .to_string();
        let original_list = list_or_bad_type(original.get(&field))?;
        let patch_list = list_or_bad_type(patch.get(&field))?;
        let (sub, meta) = schema.for_slice(&field)?;
        let strategy = strategy(&meta)?.to_string();
        let merge_key = meta.merge_key.as_str();
        check_order(patch_list.unwrap_or(&[]), &order, merge_key)?;

        let original_items = original_list.map(<[Value]>::to_vec);
        let patch_items = patch_list.map(<[Value]>::to_vec);
        // Go orders the result by the original list's slice, whose backing array merging
        // has shifted deleted items out of and appended new items into (Go's slices alias):
        // `view` replays that, and kube's own tests depend on it.
        let mut view = original_items.clone().unwrap_or_default();
        let merged = match (original_items.clone(), patch_items.clone()) {
            (Some(o), None) => o,
            (None, Some(p)) => match remove_directives(Value::Array(p)) {
                Some(Value::Array(p)) => p,
                _ => continue,
            },
            (Some(o), Some(p)) => {
                if strategy == MERGE {
                    merge_slice(o, p, &sub, merge_key, false, Some(&mut view))?
                } else {
                    p
                }
            }
            (None, None) => continue,
        };
        let (in_order, server_only) = partition(merged, &order, merge_key)?;
        let server_order = view;
        let kind = element_type(&[
            original_items.as_deref().unwrap_or(&[]),
            patch_items.as_deref().unwrap_or(&[]),
        ])?;
        let ordered = normalize_order(
            in_order,
            server_only,
            &order,
            &server_order,
            merge_key,
            kind,
        )?;
        original.insert(field.clone(), Value::Array(ordered));
        patch.shift_remove(&field);
    }
    Ok(())
}

fn list_or_bad_type(v: Option<&Value>) -> Result<Option<&[Value]>, SmpError> {
    match v {
        None => Ok(None),
        Some(Value::Array(items)) => Ok(Some(items)),
        Some(other) => Err(bad_arg_type(GoType::Slice, other)),
    }
}

/// `validatePatchWithSetOrderList`: the patch list's items (deletions aside) appear in the
/// `$setElementOrder` list, in the same relative order.
fn check_order(patch: &[Value], order: &[Value], merge_key: &str) -> Result<(), SmpError> {
    if order.is_empty() || patch.is_empty() {
        return Ok(());
    }
    let kept: Vec<&Value> = if merge_key.is_empty() {
        patch.iter().collect()
    } else {
        let mut kept = Vec::new();
        for item in patch {
            let Value::Object(m) = item else {
                return Err(bad_arg_type(GoType::Map, item));
            };
            if m.get(DIRECTIVE).and_then(Value::as_str) != Some(DELETE) {
                kept.push(item);
            }
        }
        kept
    };
    let (mut p, mut o) = (0, 0);
    while p < kept.len() && o < order.len() {
        if has_directive(kept[p]) {
            p += 1;
            continue;
        }
        if merge_key_equal(kept[p], &order[o], merge_key)? {
            p += 1;
        }
        o += 1;
    }
    if p < kept.len() && o >= order.len() {
        return Err(SmpError::Other(format!(
            "The order in patch list:\n{}\n doesn't match {SET_ELEMENT_ORDER} list:\n{}\n",
            gofmt::v(&Value::Array(patch.to_vec())),
            gofmt::v(&Value::Array(order.to_vec()))
        )));
    }
    Ok(())
}

fn has_directive(v: &Value) -> bool {
    v.as_object().is_some_and(|m| m.contains_key(DIRECTIVE))
}

fn merge_key_equal(left: &Value, right: &Value, merge_key: &str) -> Result<bool, SmpError> {
    if merge_key.is_empty() {
        return Ok(left == right);
    }
    let l = merge_key_of(left, merge_key)?;
    let r = merge_key_of(right, merge_key)?;
    Ok(l == r)
}

fn merge_key_of<'a>(item: &'a Value, merge_key: &str) -> Result<&'a Value, SmpError> {
    let Value::Object(m) = item else {
        return Err(bad_arg_type(GoType::Map, item));
    };
    m.get(merge_key).ok_or_else(|| no_merge_key(m, merge_key))
}

/// Merges two lists of a `merge`-strategy field (or applies a parallel deletion list).
/// `view`, when given, is the original list as Go's caller still sees it through the shared
/// backing array (its length fixed): deletions shift it left, appends overwrite its tail.
fn merge_slice<L: Lookup>(
    original: Vec<Value>,
    patch: Vec<Value>,
    schema: &L,
    merge_key: &str,
    delete_list: bool,
    mut view: Option<&mut Vec<Value>>,
) -> Result<Vec<Value>, SmpError> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let kind = element_type(&[&original, &patch])?;
    let (original, patch, merged) = if kind != GoType::Map {
        if delete_list {
            return Ok(original
                .into_iter()
                .filter(|v| !patch.contains(v))
                .collect());
        }
        let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
        for v in original.iter().chain(patch.iter()) {
            if !merged.contains(v) {
                merged.push(v.clone());
            }
        }
        (original, patch, merged)
    } else {
        if merge_key.is_empty() {
            return Err(SmpError::Other(format!(
                "cannot merge lists without merge key for {}",
                schema.kind_name()
            )));
        }
        let (original, patch, replaced) =
            special_elements(original, patch, merge_key, view.as_deref_mut())?;
        if replaced {
            // The list now is the patch's: a new slice, no longer the caller's.
            view = None;
        }
        let mut merged = original.clone();
        for item in &patch {
            let Value::Object(p) = item else {
                return Err(bad_arg_type(GoType::Map, item));
            };
            let value = p.get(merge_key).ok_or_else(|| no_merge_key(p, merge_key))?;
            match find_by_key(&merged, merge_key, value)? {
                Some(i) => {
                    let Value::Object(o) = std::mem::take(&mut merged[i]) else {
                        unreachable_map()?
                    };
                    merged[i] = Value::Object(merge_map(o, p.clone(), schema)?);
                }
                None => {
                    if let Some(slot) = view.as_deref_mut().and_then(|v| v.get_mut(merged.len())) {
                        *slot = item.clone();
                    }
                    merged.push(item.clone());
                }
            }
        }
        (original, patch, merged)
    };
    let (in_patch, server_only) = partition(merged, &patch, merge_key)?;
    normalize_order(in_patch, server_only, &patch, &original, merge_key, kind)
}

/// The element type check always precedes merging maps; reaching a non-map is a defect of
/// this code, answered as strategicpatch's own "not a map" error rather than a panic.
fn unreachable_map<T>() -> Result<T, SmpError> {
    Err(SmpError::Other("value is not a map".into()))
}

/// Handles list items carrying `$patch` (`mergeSliceWithSpecialElements`): `delete` drops
/// the original items with that merge key, `replace` makes the other items the whole list.
fn special_elements(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    merge_key: &str,
    mut view: Option<&mut Vec<Value>>,
) -> Result<(Vec<Value>, Vec<Value>, bool), SmpError> {
    let mut rest = Vec::with_capacity(patch.len());
    let mut replace = false;
    for item in patch {
        let Value::Object(m) = &item else {
            return Err(bad_arg_type(GoType::Map, &item));
        };
        match m.get(DIRECTIVE) {
            None => rest.push(item),
            Some(d) => match d.as_str() {
                Some(DELETE) => {
                    let value = m.get(merge_key).ok_or_else(|| no_merge_key(m, merge_key))?;
                    while let Some(i) = find_by_key(&original, merge_key, value)? {
                        if let Some(v) = view.as_deref_mut() {
                            // append(s[:i], s[i+1:]...): a left shift; the last slot stays.
                            let end = original.len().min(v.len());
                            if i + 1 < end {
                                v[i..end].rotate_left(1);
                                v[end - 1] = v[end - 2].clone();
                            }
                        }
                        original.remove(i);
                    }
                }
                Some(REPLACE) => replace = true,
                Some(MERGE) => {
                    return Err(SmpError::Other(
                        "merging lists cannot yet be specified in the patch".into(),
                    ));
                }
                _ => return Err(bad_patch_type(d, m)),
            },
        }
    }
    Ok(if replace {
        (rest, Vec::new(), true)
    } else {
        (original, rest, false)
    })
}

/// The index of the first map in `items` whose `key` is `value` (`findMapInSliceBasedOnKeyValue`).
fn find_by_key(items: &[Value], key: &str, value: &Value) -> Result<Option<usize>, SmpError> {
    for (i, item) in items.iter().enumerate() {
        let Value::Object(m) = item else {
            return Err(SmpError::Other(format!("value for key {i} is not a map")));
        };
        if m.get(key) == Some(value) {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

/// Splits `merged` into the items present in `by` and the rest (primitives by value, maps by
/// merge key), each keeping its order.
fn partition(
    merged: Vec<Value>,
    by: &[Value],
    merge_key: &str,
) -> Result<(Vec<Value>, Vec<Value>), SmpError> {
    let mut present = Vec::with_capacity(merged.len());
    let mut absent = Vec::with_capacity(merged.len());
    for item in merged {
        let found = if merge_key.is_empty() {
            by.contains(&item)
        } else {
            let value = merge_key_of(&item, merge_key)?;
            find_by_key(by, merge_key, value)?.is_some()
        };
        if found {
            present.push(item);
        } else {
            absent.push(item);
        }
    }
    Ok((present, absent))
}

/// The one Go type all items of the lists share (`sliceElementType`).
fn element_type(lists: &[&[Value]]) -> Result<GoType, SmpError> {
    let mut seen: Option<GoType> = None;
    for item in lists.iter().flat_map(|l| l.iter()) {
        let t = GoType::of(item);
        match seen {
            None if t == GoType::Slice => return Err(SmpError::ListOfLists),
            None => seen = Some(t),
            Some(s) if s != t => {
                let all: Vec<Value> = lists.iter().map(|l| Value::Array(l.to_vec())).collect();
                return Err(SmpError::Other(format!(
                    "list element types are not identical: {}",
                    gofmt::v(&Value::Array(all))
                )));
            }
            Some(_) => {}
        }
    }
    seen.ok_or_else(|| SmpError::Other("no elements in any of the given slices".into()))
}

/// Orders the patched items by `patch_order` and the server-only items by `server_order`,
/// then interleaves them by the live order (`normalizeElementOrder`).
fn normalize_order(
    in_patch: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    merge_key: &str,
    kind: GoType,
) -> Result<Vec<Value>, SmpError> {
    let in_patch = sort_by_order(in_patch, patch_order, merge_key, kind)?;
    let server_only = sort_by_order(server_only, server_order, merge_key, kind)?;
    Ok(merge_sorted(
        server_only,
        in_patch,
        server_order,
        merge_key,
        kind,
    ))
}

fn sort_by_order(
    items: Vec<Value>,
    order: &[Value],
    merge_key: &str,
    kind: GoType,
) -> Result<Vec<Value>, SmpError> {
    let (mut keep, deleted) = if kind == GoType::Map {
        for item in items.iter().chain(order.iter()) {
            merge_key_of(item, merge_key)?;
        }
        items
            .into_iter()
            .partition::<Vec<_>, _>(|v| v.get(DIRECTIVE).and_then(Value::as_str) != Some(DELETE))
    } else {
        (items, Vec::new())
    };
    // Every item is in `order` by construction (Go's comparator assumes it); one that is not
    // sorts last rather than where Go's sort happens to leave it.
    keep.sort_by_key(|v| index_of(order, v, merge_key, kind).unwrap_or(usize::MAX));
    keep.extend(deleted);
    Ok(keep)
}

fn index_of(list: &[Value], item: &Value, merge_key: &str, kind: GoType) -> Option<usize> {
    if kind == GoType::Map {
        let key = |v: &Value| v.as_object().and_then(|m| m.get(merge_key)).cloned();
        let want = key(item);
        list.iter().position(|v| key(v) == want)
    } else {
        list.iter().position(|v| v == item)
    }
}

/// `mergeSortedSlice`: inserts each server-only item before the first patched item that
/// follows it in the live list, keeping both lists' own order.
fn merge_sorted(
    left: Vec<Value>,
    right: Vec<Value>,
    server_order: &[Value],
    merge_key: &str,
    kind: GoType,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => {
                match (
                    index_of(server_order, l, merge_key, kind),
                    index_of(server_order, r, merge_key, kind),
                ) {
                    (Some(li), Some(ri)) => li < ri,
                    _ => false,
                }
            }
        };
        let next = if take_left { left.next() } else { right.next() };
        out.extend(next);
    }
    out
}

/// Drops maps carrying `$patch` (None when `value` itself is one), recursively.
fn remove_directives(value: Value) -> Option<Value> {
    match value {
        Value::Object(m) => {
            if m.contains_key(DIRECTIVE) {
                return None;
            }
            Some(Value::Object(
                m.into_iter()
                    .filter_map(|(k, v)| remove_directives(v).map(|v| (k, v)))
                    .collect(),
            ))
        }
        Value::Array(items) => Some(Value::Array(
            items.into_iter().filter_map(remove_directives).collect(),
        )),
        other => Some(other),
    }
}

fn no_merge_key(m: &Map<String, Value>, key: &str) -> SmpError {
    SmpError::Other(format!(
        "map: {} does not contain declared merge key: {key}",
        gofmt::v(&Value::Object(m.clone()))
    ))
}

fn bad_arg_type(expected: GoType, actual: &Value) -> SmpError {
    SmpError::Other(format!(
        "expected a {}, but received a {}",
        expected.name(),
        GoType::of(actual).name()
    ))
}

fn bad_patch_type(directive: &Value, m: &Map<String, Value>) -> SmpError {
    let shown = match directive {
        Value::String(s) => s.clone(),
        other => format!("%!s({}={})", GoType::of(other).name(), gofmt::v(other)),
    };
    SmpError::Other(format!(
        "unknown patch type: {shown} in map: {}",
        gofmt::v(&Value::Object(m.clone()))
    ))
}
