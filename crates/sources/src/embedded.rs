//! `EmbeddedSource`: the default, in-process source of truth. One revision counter across
//! all resources (like etcd), optimistic concurrency on `metadata.resourceVersion`, and
//! every committed write applied to the resource's store before the write returns.

use std::sync::Arc;

use bytes::Bytes;
use listwatch_core::status::{FieldError, FieldErrorKind};
use listwatch_core::{ApiError, ObjectRef, ResourceInfo};
use listwatch_store::{Change, Record, Store};
use parking_lot::Mutex;
use rand::Rng;
use serde_json::{Map, Value};

use crate::Registry;

/// The embedded store: serves writes and keeps the registry's stores current.
pub struct EmbeddedSource {
    registry: Registry,
    revision: Mutex<u64>,
}

/// A successful write: HTTP code and the body to answer with.
#[derive(Debug)]
pub struct WriteResult {
    /// 200 or 201.
    pub code: u16,
    /// JSON body.
    pub body: Bytes,
}

impl EmbeddedSource {
    /// A source over `registry`, continuing from its stores' newest RV.
    pub fn new(registry: Registry) -> Arc<Self> {
        let rv = registry.stores().map(|s| s.rv()).max().unwrap_or(1);
        Arc::new(EmbeddedSource {
            registry,
            revision: Mutex::new(rv),
        })
    }

    /// The registry this source feeds.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The newest committed revision (what a consistent read must reach).
    pub fn revision(&self) -> u64 {
        *self.revision.lock()
    }

    /// Bulk-loads objects into `store` (one revision each, as etcd would assign), adding
    /// to what it holds; no watch events are generated. Returns how many were loaded.
    pub fn seed(
        &self,
        store: &Arc<Store>,
        objects: impl IntoIterator<Item = Vec<u8>>,
    ) -> Result<usize, String> {
        let mut records = Vec::new();
        for obj in objects {
            records.push(self.ingest_for_seed(store, &obj)?);
        }
        let n = records.len();
        self.install(store, records);
        Ok(n)
    }

    /// Ingests one object of a bulk load at the next revision (see [`Self::install`]).
    pub fn ingest_for_seed(&self, store: &Store, json: &[u8]) -> Result<Record, String> {
        let mut rev = self.revision.lock();
        let rec = Record::ingest(json, store.info(), *rev + 1)
            .map_err(|e| format!("{}: {e}", store.info().resource))?;
        *rev += 1;
        Ok(rec)
    }

    /// Adds bulk-loaded records to `store` at the current revision, without events.
    pub fn install(&self, store: &Arc<Store>, records: Vec<Record>) {
        let rev = self.revision.lock();
        let existing: Vec<Arc<Record>> = store.current().items().values().cloned().collect();
        store.replace(
            *rev,
            existing
                .into_iter()
                .chain(records.into_iter().map(Arc::new)),
        );
        let rv = *rev;
        drop(rev);
        self.progress_others(store, rv);
    }

    fn progress_others(&self, store: &Arc<Store>, rv: u64) {
        for s in self.registry.stores() {
            if !Arc::ptr_eq(s, store) {
                s.progress(rv);
            }
        }
    }

    /// POST: creates an object (`generateName`, `uid`, `creationTimestamp` filled in).
    pub fn create(
        &self,
        store: &Arc<Store>,
        namespace: Option<&str>,
        body: &[u8],
    ) -> Result<WriteResult, ApiError> {
        let info = store.info().clone();
        let mut obj = parse_body(body, &info)?;
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
                        &info,
                        "",
                        "metadata.name",
                        FieldErrorKind::Required,
                        "name or generateName is required",
                    ));
                }
            },
        };
        validate_name(&info, &name)?;
        set_namespace(&info, meta, namespace)?;
        meta.insert("name".into(), Value::String(name.clone()));
        meta.remove("resourceVersion");
        meta.insert("uid".into(), Value::String(uuid_v4()));
        meta.insert("creationTimestamp".into(), Value::String(rfc3339_now()));
        let key = info.key(namespace.unwrap_or(""), &name);
        let bytes = serde_json::to_vec(&obj).map_err(|e| ApiError::Internal(e.to_string()))?;
        let mut rev = self.revision.lock();
        if store.current().get(&key).is_some() {
            return Err(ApiError::AlreadyExists(ObjectRef::new(&info, &name)));
        }
        let record = self.commit(store, &mut rev, &bytes)?;
        Ok(WriteResult {
            code: 201,
            body: record,
        })
    }

    /// PUT: replaces an object; a stale `metadata.resourceVersion` is a 409 Conflict.
    pub fn update(
        &self,
        store: &Arc<Store>,
        namespace: Option<&str>,
        name: &str,
        body: &[u8],
    ) -> Result<WriteResult, ApiError> {
        let info = store.info().clone();
        let mut obj = parse_body(body, &info)?;
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
        set_namespace(&info, meta, namespace)?;
        let expected_rv = meta
            .get("resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string);
        let key = info.key(namespace.unwrap_or(""), name);
        let mut rev = self.revision.lock();
        let current = store.current();
        let Some(existing) = current.get(&key) else {
            return Err(ApiError::NotFound(ObjectRef::new(&info, name)));
        };
        if let Some(expected) = expected_rv.filter(|s| !s.is_empty())
            && expected != existing.rv().to_string()
        {
            return Err(ApiError::Conflict(ObjectRef::new(&info, name)));
        }
        // Identity fields are the server's: keep the stored ones.
        let old: Value = serde_json::from_slice(existing.bytes())
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        for f in ["uid", "creationTimestamp"] {
            if let Some(v) = old.get("metadata").and_then(|m| m.get(f)) {
                meta.insert(f.into(), v.clone());
            }
        }
        meta.remove("resourceVersion");
        let bytes = serde_json::to_vec(&obj).map_err(|e| ApiError::Internal(e.to_string()))?;
        let record = self.commit(store, &mut rev, &bytes)?;
        Ok(WriteResult {
            code: 200,
            body: record,
        })
    }

    /// DELETE: removes an object and answers with a success `Status`.
    pub fn delete(
        &self,
        store: &Arc<Store>,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<WriteResult, ApiError> {
        let info = store.info().clone();
        let key = info.key(namespace.unwrap_or(""), name);
        let mut rev = self.revision.lock();
        let Some(existing) = store.current().get(&key).cloned() else {
            return Err(ApiError::NotFound(ObjectRef::new(&info, name)));
        };
        *rev += 1;
        let rv = *rev;
        store
            .apply([Change::Delete { key, rv }])
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        drop(rev);
        self.progress_others(store, rv);
        let uid = serde_json::from_slice::<Value>(existing.bytes())
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
        let body = serde_json::to_vec(&Value::Object(body))
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        Ok(WriteResult {
            code: 200,
            body: Bytes::from(body),
        })
    }

    fn commit(&self, store: &Arc<Store>, rev: &mut u64, bytes: &[u8]) -> Result<Bytes, ApiError> {
        let bytes = &canonical_metadata_order(bytes)?;
        let rv = *rev + 1;
        let record = Record::ingest(bytes, store.info(), rv)
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let out = record.bytes().clone();
        store
            .apply([Change::Put(record)])
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        *rev = rv;
        self.progress_others(store, rv);
        Ok(out)
    }
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

fn canonical_metadata_order(bytes: &[u8]) -> Result<Vec<u8>, ApiError> {
    let mut obj: Value =
        serde_json::from_slice(bytes).map_err(|e| ApiError::Internal(e.to_string()))?;
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
