//! Write preparation shared by every writable source (embedded, etcd): decoding and
//! checking a request body, filling in server-owned fields, and the optimistic-concurrency
//! check of an update, so both sources accept and reject exactly the same requests.

use bytes::Bytes;
use listwatch_core::status::{FieldError, FieldErrorKind};
use listwatch_core::{ApiError, ObjectRef, ResourceInfo};
use rand::Rng;
use serde_json::{Map, Value};

/// A checked object for a create: its store key, name and JSON without `resourceVersion`.
#[derive(Debug)]
pub struct NewObject {
    /// Store key (`namespace/name` or `name`).
    pub key: String,
    /// The object's name (generated when the body had only `generateName`).
    pub name: String,
    /// JSON to store, metadata in Go's field order.
    pub json: Vec<u8>,
}

/// Checks a POST body and fills in `name` (from `generateName`), `namespace`, `uid` and
/// `creationTimestamp`.
pub fn prepare_create(
    info: &ResourceInfo,
    namespace: Option<&str>,
    body: &[u8],
) -> Result<NewObject, ApiError> {
    let mut obj = parse_body(body, info)?;
    let meta = metadata(&mut obj)?;
    let name = match meta
        .get("name")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        Some(n) => n.to_string(),
        None => match meta
            .get("generateName")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        {
            Some(prefix) => format!("{prefix}{}", random_suffix()),
            None => {
                return Err(invalid(
                    info,
                    "",
                    "metadata.name",
                    FieldErrorKind::Required,
                    "name or generateName is required",
                ));
            }
        },
    };
    validate_name(info, &name)?;
    set_namespace(info, meta, namespace)?;
    meta.insert("name".into(), Value::String(name.clone()));
    meta.remove("resourceVersion");
    meta.insert("uid".into(), Value::String(uuid_v4()));
    meta.insert("creationTimestamp".into(), Value::String(rfc3339_now()));
    // Deletion is the server's: a create does not start one.
    meta.remove("deletionTimestamp");
    meta.remove("deletionGracePeriodSeconds");
    if is_namespace(info) {
        // kube's namespace strategy (PrepareForCreate): the `kubernetes` finalizer, Active.
        obj["spec"] = serde_json::json!({"finalizers": ["kubernetes"]});
        obj["status"] = serde_json::json!({"phase": "Active"});
    }
    Ok(NewObject {
        key: info.key(namespace.unwrap_or(""), &name),
        name,
        json: canonical_json(obj)?,
    })
}

/// A checked PUT body, still to be compared with the stored object ([`Replacement::merge`]).
#[derive(Debug)]
pub struct Replacement {
    /// Store key of the object replaced.
    pub key: String,
    name: String,
    obj: Value,
    /// The `metadata.resourceVersion` the client sent (a precondition), if any.
    pub expected_rv: Option<String>,
}

/// Checks a PUT body against the URL's namespace and name.
pub fn prepare_update(
    info: &ResourceInfo,
    namespace: Option<&str>,
    name: &str,
    body: &[u8],
) -> Result<Replacement, ApiError> {
    let mut obj = parse_body(body, info)?;
    let meta = metadata(&mut obj)?;
    match meta.get("name").and_then(Value::as_str) {
        Some(n) if n == name => {}
        Some(n) => {
            return Err(ApiError::BadRequest(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        None => {
            meta.insert("name".into(), Value::String(name.into()));
        }
    }
    set_namespace(info, meta, namespace)?;
    let expected_rv = meta
        .get("resourceVersion")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    meta.remove("resourceVersion");
    Ok(Replacement {
        key: info.key(namespace.unwrap_or(""), name),
        name: name.to_string(),
        obj,
        expected_rv,
    })
}

impl Replacement {
    /// The JSON to store over `existing` (stored at `existing_rv`): 409 Conflict when the
    /// client's precondition names another RV; `uid` and `creationTimestamp` stay the
    /// stored ones, since identity fields belong to the server.
    pub fn merge(
        &self,
        info: &ResourceInfo,
        existing: &[u8],
        existing_rv: u64,
    ) -> Result<Vec<u8>, ApiError> {
        if let Some(expected) = &self.expected_rv
            && *expected != existing_rv.to_string()
        {
            return Err(ApiError::Conflict(ObjectRef::new(info, &self.name)));
        }
        let old: Value =
            serde_json::from_slice(existing).map_err(|e| ApiError::Internal(e.to_string()))?;
        let mut obj = self.obj.clone();
        let meta = metadata(&mut obj)?;
        // A deletion once started is the server's to keep (kube's BeforeUpdate).
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
        for f in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ] {
            if let Some(v) = old.get("metadata").and_then(|m| m.get(f)) {
                meta.insert(f.into(), v.clone());
            }
        }
        if meta.contains_key("deletionTimestamp") {
            // kube's ValidateObjectMetaUpdate: a deleting object takes no new finalizers.
            let before = finalizers(&old);
            if let Some(added) = finalizers(&obj).into_iter().find(|f| !before.contains(f)) {
                return Err(invalid(
                    info,
                    &self.name,
                    "metadata.finalizers",
                    FieldErrorKind::Forbidden,
                    &format!(
                        "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                        listwatch_core::json::go_string(&added)
                    ),
                ));
            }
        }
        if is_namespace(info) {
            // The namespace's phase and finalizers are its controller's (status and
            // finalize subresources), not a PUT's.
            for f in ["spec", "status"] {
                match old.get(f) {
                    Some(v) => obj[f] = v.clone(),
                    None => {
                        if let Value::Object(m) = &mut obj {
                            m.remove(f);
                        }
                    }
                }
            }
        }
        canonical_json(obj)
    }
}

/// Whether `info` is the core group's namespaces.
pub fn is_namespace(info: &ResourceInfo) -> bool {
    info.group.is_empty() && info.resource == "namespaces"
}

/// An object's `metadata.finalizers`.
pub fn finalizers(obj: &Value) -> Vec<String> {
    obj.get("metadata")
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a stored object (JSON) is being deleted (`metadata.deletionTimestamp` set).
pub fn is_deleting(obj: &Value) -> bool {
    obj.get("metadata")
        .and_then(|m| m.get("deletionTimestamp"))
        .is_some_and(|v| !v.is_null())
}

/// What a DELETE does to a stored object, as kube's generic store decides it.
#[derive(Debug)]
pub enum DeleteStep {
    /// No finalizers: the object goes now.
    Remove,
    /// Finalizers: the object stays with `deletionTimestamp` and
    /// `deletionGracePeriodSeconds` set (this JSON), until they are removed.
    Mark(Vec<u8>),
    /// Already being deleted and still finalized: nothing changes.
    Pending,
}

/// The [`DeleteStep`] for `existing` (its stored JSON). Namespaces also turn `Terminating`
/// (their `kubernetes` spec finalizer is what keeps them, until their content is gone).
pub fn delete_step(info: &ResourceInfo, existing: &[u8]) -> Result<DeleteStep, ApiError> {
    let mut obj: Value =
        serde_json::from_slice(existing).map_err(|e| ApiError::Internal(e.to_string()))?;
    let namespace = is_namespace(info);
    if finalizers(&obj).is_empty() && !namespace {
        return Ok(DeleteStep::Remove);
    }
    if is_deleting(&obj) {
        return Ok(DeleteStep::Pending);
    }
    let meta = metadata(&mut obj)?;
    meta.insert("deletionTimestamp".into(), Value::String(rfc3339_now()));
    // Kinds without graceful deletion (all but pods) are marked with a zero grace period.
    meta.insert("deletionGracePeriodSeconds".into(), Value::from(0));
    meta.remove("resourceVersion");
    if namespace {
        obj["status"]["phase"] = Value::String("Terminating".into());
    }
    Ok(DeleteStep::Mark(canonical_json(obj)?))
}

/// Whether an update leaves `json` (the object to store) deleting with no finalizers, so
/// that it is removed instead (kube's store: `ShouldDeleteDuringUpdate`).
pub fn deletes_on_update(info: &ResourceInfo, json: &[u8]) -> bool {
    let Ok(obj) = serde_json::from_slice::<Value>(json) else {
        return false;
    };
    let spec_done = !is_namespace(info)
        || obj
            .get("spec")
            .and_then(|s| s.get("finalizers"))
            .and_then(Value::as_array)
            .is_none_or(|a| a.is_empty());
    is_deleting(&obj) && finalizers(&obj).is_empty() && spec_done
}

/// The success `Status` a DELETE answers with (`existing` is the deleted object's JSON).
pub fn delete_status(info: &ResourceInfo, name: &str, existing: &[u8]) -> Bytes {
    let uid = serde_json::from_slice::<Value>(existing)
        .ok()
        .and_then(|v| v.get("metadata")?.get("uid")?.as_str().map(str::to_string))
        .unwrap_or_default();
    let mut body = Map::new();
    body.insert("kind".into(), "Status".into());
    body.insert("apiVersion".into(), "v1".into());
    body.insert("metadata".into(), Value::Object(Map::new()));
    body.insert("status".into(), "Success".into());
    let mut details = Map::new();
    details.insert("name".into(), name.into());
    if !info.group.is_empty() {
        details.insert("group".into(), info.group.clone().into());
    }
    details.insert("kind".into(), info.resource.clone().into());
    details.insert("uid".into(), uid.into());
    body.insert("details".into(), Value::Object(details));
    Bytes::from(serde_json::to_vec(&Value::Object(body)).unwrap_or_default())
}

/// ObjectMeta's field order as Go serializes it, so objects we write read like the ones
/// kube-apiserver writes (unknown fields keep their order after these).
const METADATA_ORDER: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// The ObjectMeta fields Go serializes before `field` (all of them when it is none).
pub(crate) fn metadata_fields_before(field: &str) -> &'static [&'static str] {
    let at = METADATA_ORDER
        .iter()
        .position(|k| *k == field)
        .unwrap_or(METADATA_ORDER.len());
    &METADATA_ORDER[..at]
}

fn canonical_json(mut obj: Value) -> Result<Vec<u8>, ApiError> {
    if let Some(Value::Object(meta)) = obj.get_mut("metadata") {
        let mut ordered = Map::new();
        for k in METADATA_ORDER {
            if let Some(v) = meta.remove(*k) {
                ordered.insert((*k).to_string(), v);
            }
        }
        ordered.extend(std::mem::take(meta));
        *meta = ordered;
    }
    serde_json::to_vec(&obj).map_err(|e| ApiError::Internal(e.to_string()))
}

fn parse_body(body: &[u8], info: &ResourceInfo) -> Result<Value, ApiError> {
    let obj: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::BadRequest(format!("couldn't get version/kind; json parse error: {e}"))
    })?;
    let Value::Object(mut map) = obj else {
        return Err(ApiError::BadRequest(
            "couldn't get version/kind; json parse error: not an object".into(),
        ));
    };
    if let Some(v) = map.get("apiVersion").and_then(Value::as_str)
        && v != info.api_version()
    {
        return Err(ApiError::BadRequest(format!(
            "the API version in the data ({v}) does not match the expected API version ({})",
            info.api_version()
        )));
    }
    if let Some(k) = map.get("kind").and_then(Value::as_str)
        && k != info.kind
    {
        return Err(ApiError::BadRequest(format!(
            "the kind in the data ({k}) does not match the expected kind ({})",
            info.kind
        )));
    }
    // Canonical order: kind and apiVersion first (ingest enforces it too).
    let mut out = Map::new();
    out.insert("kind".into(), Value::String(info.kind.clone()));
    out.insert("apiVersion".into(), Value::String(info.api_version()));
    map.remove("kind");
    map.remove("apiVersion");
    if !matches!(map.get("metadata"), Some(Value::Object(_))) {
        map.insert("metadata".into(), Value::Object(Map::new()));
    }
    out.extend(map);
    Ok(Value::Object(out))
}

fn metadata(obj: &mut Value) -> Result<&mut Map<String, Value>, ApiError> {
    // parse_body always sets an object `metadata`; anything else is our bug, not a panic.
    match obj.get_mut("metadata") {
        Some(Value::Object(m)) => Ok(m),
        _ => Err(ApiError::Internal("object without metadata".into())),
    }
}

fn set_namespace(
    info: &ResourceInfo,
    meta: &mut Map<String, Value>,
    namespace: Option<&str>,
) -> Result<(), ApiError> {
    if !info.namespaced {
        meta.remove("namespace");
        return Ok(());
    }
    let Some(ns) = namespace else {
        return Err(ApiError::MethodNotAllowed);
    };
    if let Some(given) = meta.get("namespace").and_then(Value::as_str)
        && !given.is_empty()
        && given != ns
    {
        return Err(ApiError::BadRequest(
            "the namespace of the provided object does not match the namespace sent on the request"
                .into(),
        ));
    }
    meta.insert("namespace".into(), Value::String(ns.into()));
    Ok(())
}

fn invalid(
    info: &ResourceInfo,
    name: &str,
    field: &str,
    kind: FieldErrorKind,
    detail: &str,
) -> ApiError {
    let e = FieldError {
        field: field.into(),
        kind,
        detail: detail.into(),
    };
    ApiError::InvalidObject {
        kind: info.kind.clone(),
        group: info.group.clone(),
        name: name.into(),
        causes: vec![e],
    }
}

/// Names must be DNS-1123 subdomains: this also keeps `/` and `..` out of store keys.
fn validate_name(info: &ResourceInfo, name: &str) -> Result<(), ApiError> {
    let ok = name.len() <= 253
        && name.split('.').all(|l| {
            let b = l.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        });
    if ok {
        return Ok(());
    }
    Err(invalid(
        info,
        name,
        "metadata.name",
        FieldErrorKind::Invalid(listwatch_core::json::go_string(name)),
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
    ))
}

fn random_suffix() -> String {
    const ALPHA: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHA[rng.random_range(0..ALPHA.len())] as char)
        .collect()
}

/// A random RFC 4122 version 4 UUID.
pub fn uuid_v4() -> String {
    let mut b: [u8; 16] = rand::rng().random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Now as RFC 3339 in UTC with second precision (`2026-11-22T02:14:15Z`).
pub fn rfc3339_now() -> String {
    listwatch_core::time::rfc3339(listwatch_core::time::unix_now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_shape() {
        let u = uuid_v4();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
    }
}
