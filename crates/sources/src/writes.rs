//! Writes built on a source's writer, shared by every writable source: PATCH (read,
//! patch, update with what was read as the precondition, retried as kube-apiserver's
//! `GuaranteedUpdate` is) and the `scale` subresource (autoscaling/v1 `Scale`). Also the
//! consistent read they start from.

use std::sync::Arc;
use std::time::Duration;

use listwatch_core::status::FieldErrorKind;
use listwatch_core::{ApiError, FieldError, ObjectRef, ResourceInfo, WriteOptions};
use listwatch_patch::PatchType;
use listwatch_store::{Record, Snapshot, Store};
use serde_json::Value;

use crate::{Source, SourceWriter, WriteOp, WriteRequest, WriteResult};

/// Waits until `store` has reached `rv`, asking the source for progress, at most `wait`.
pub async fn wait_for(
    source: &dyn Source,
    store: &Store,
    rv: u64,
    wait: Duration,
) -> Result<(), ApiError> {
    if store.rv() < rv {
        source.request_progress(store);
    }
    store.wait_for(rv, wait).await?;
    Ok(())
}

/// A snapshot at least as new as the source's current revision (a consistent read).
pub async fn consistent_snapshot(
    source: &dyn Source,
    store: &Store,
    wait: Duration,
) -> Result<Snapshot, ApiError> {
    let target = source.consistent_revision(store).await?;
    wait_for(source, store, target, wait).await?;
    Ok(store.current())
}

/// How many times a PATCH without a `resourceVersion` of its own is re-applied to a newer
/// object when a concurrent write got in first (kube's `GuaranteedUpdate` retries so too).
const PATCH_ATTEMPTS: usize = 5;

/// What a write may change of the stored object: all of it, or (through the `status`
/// subresource) only its `.status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The whole object.
    Object,
    /// Only `.status`: kube's status strategies keep the stored spec and reset metadata
    /// (`ResetObjectMetaForStatus`); the request's `resourceVersion` stays the precondition.
    Status,
}

impl Scope {
    /// `wanted` narrowed to what this scope lets it change of `current`.
    pub fn narrow(self, current: &[u8], wanted: Vec<u8>) -> Result<Vec<u8>, ApiError> {
        if self == Scope::Object {
            return Ok(wanted);
        }
        let wanted: Value = serde_json::from_slice(&wanted).map_err(|e| {
            ApiError::BadRequest(format!("couldn't get version/kind; json parse error: {e}"))
        })?;
        let mut new = parse(current)?;
        match wanted.get("status") {
            Some(status) => new["status"] = status.clone(),
            None => {
                if let Some(o) = new.as_object_mut() {
                    o.remove("status");
                }
            }
        }
        with_precondition(new, &wanted)
    }
}

/// PATCH: the patch applied to the stored object (`listwatch-patch`), then sent through the
/// writer's update, so embedded and etcd sources check and store it as a PUT. The patched
/// object's `resourceVersion` is the update's precondition: the stored one unless the patch
/// set another (then a stale one is 409, as kube-apiserver answers). `dryRun` answers the
/// patched object without storing it (the update's own dry run). With [`Scope::Status`] the
/// patch applies to the whole object and only its status is kept, as kube-apiserver does.
#[allow(clippy::too_many_arguments)]
pub async fn patch(
    source: &dyn Source,
    writer: &dyn SourceWriter,
    store: &Arc<Store>,
    ns: Option<&str>,
    name: &str,
    patch_type: PatchType,
    patch: &[u8],
    scope: Scope,
    options: WriteOptions,
    wait: Duration,
) -> Result<WriteResult, ApiError> {
    let info = store.info();
    let api_version = info.api_version();
    // An object's own apiVersion/kind decides: built-in types have strategies to merge by.
    let builtin = listwatch_patch::GoNode::kind(&api_version, &info.kind).is_some();
    let type_of = builtin.then_some((api_version.as_str(), info.kind.as_str()));
    let key = info.key(ns.unwrap_or(""), name);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let snap = consistent_snapshot(source, store, wait).await?;
        let Some(current) = snap.get(&key) else {
            return Err(ApiError::NotFound(ObjectRef::new(info, name)));
        };
        let patched = listwatch_patch::apply(patch_type, type_of, current.bytes(), patch)?;
        let patched = scope.narrow(current.bytes(), patched)?;
        let op = WriteOp::Update {
            name,
            body: &patched,
        };
        match writer
            .write(WriteRequest::new(store, ns, op, options))
            .await
        {
            // Our own precondition went stale (the patch named none): patch the newer one.
            Err(ApiError::Conflict(_))
                if attempt < PATCH_ATTEMPTS && patched_rv(&patched) == Some(current.rv()) =>
            {
                continue;
            }
            other => return other,
        }
    }
}

/// The stored object `ns/name` in `snap`; 404 when it is not there.
pub fn stored<'a>(
    snap: &'a Snapshot,
    info: &ResourceInfo,
    ns: Option<&str>,
    name: &str,
) -> Result<&'a Arc<Record>, ApiError> {
    snap.get(&info.key(ns.unwrap_or(""), name))
        .ok_or_else(|| ApiError::NotFound(ObjectRef::new(info, name)))
}

/// The stored object `ns/name` in `snap`, parsed; 404 when it is not there.
pub fn current(
    snap: &Snapshot,
    info: &ResourceInfo,
    ns: Option<&str>,
    name: &str,
) -> Result<Value, ApiError> {
    parse(stored(snap, info, ns, name)?.bytes())
}

/// A stored (or just written) object's JSON, parsed.
pub fn parse(json: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(json).map_err(|e| ApiError::Internal(e.to_string()))
}

/// The `Scale` `obj` would have after `patch` (of `patch_type`), as JSON.
pub fn patch_scale(
    obj: &Value,
    patch_type: PatchType,
    patch: &[u8],
) -> Result<bytes::Bytes, ApiError> {
    let original =
        serde_json::to_vec(&scale_of(obj)).map_err(|e| ApiError::Internal(e.to_string()))?;
    let scale = Some(("autoscaling/v1", "Scale"));
    Ok(listwatch_patch::apply(patch_type, scale, &original, patch)?.into())
}

/// `obj` with the `spec.replicas` of the `Scale` JSON `wanted` (and its `resourceVersion`
/// as the precondition, when it names one); 422 for replicas out of range.
pub fn scaled(obj: &Value, wanted: &[u8], name: &str) -> Result<Vec<u8>, ApiError> {
    let wanted: Value = serde_json::from_slice(wanted).map_err(|e| {
        ApiError::BadRequest(format!("couldn't get version/kind; json parse error: {e}"))
    })?;
    let replicas = wanted
        .get("spec")
        .and_then(|s| s.get("replicas"))
        .cloned()
        .unwrap_or(Value::from(0));
    if !replicas
        .as_i64()
        .is_some_and(|r| (0..=i64::from(i32::MAX)).contains(&r))
    {
        return Err(ApiError::InvalidObject {
            kind: "Scale".into(),
            group: "autoscaling".into(),
            name: name.into(),
            causes: vec![FieldError {
                field: "spec.replicas".into(),
                kind: FieldErrorKind::Invalid(replicas.to_string()),
                detail: "must be greater than or equal to 0".into(),
            }],
        });
    }
    let mut new = obj.clone();
    new["spec"]["replicas"] = replicas;
    with_precondition(new, &wanted)
}

/// `new` as JSON, with the `resourceVersion` the request `wanted` names (when it names one)
/// as the update's precondition: a subresource write is checked against what its client read.
fn with_precondition(mut new: Value, wanted: &Value) -> Result<Vec<u8>, ApiError> {
    if let Some(rv) = wanted
        .get("metadata")
        .and_then(|m| m.get("resourceVersion"))
        .filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
    {
        new["metadata"]["resourceVersion"] = rv.clone();
    }
    serde_json::to_vec(&new).map_err(|e| ApiError::Internal(e.to_string()))
}

/// The autoscaling/v1 `Scale` of a scalable object (kube's `scaleFromDeployment` and
/// kin): its identity, `spec.replicas`, `status.replicas` and its selector as a string.
pub fn scale_of(obj: &Value) -> Value {
    let meta = &obj["metadata"];
    let mut m = serde_json::Map::new();
    for f in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = meta.get(f) {
            m.insert(f.into(), v.clone());
        }
    }
    let selector = &obj["spec"]["selector"];
    // apps kinds have a LabelSelector; ReplicationControllers a plain map.
    let labels = selector
        .get("matchLabels")
        .or_else(|| {
            selector
                .as_object()
                .filter(|o| !o.contains_key("matchExpressions"))
                .map(|_| selector)
        })
        .and_then(Value::as_object);
    let mut pairs: Vec<String> = labels
        .map(|l| {
            l.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| format!("{k}={v}")))
                .collect()
        })
        .unwrap_or_default();
    pairs.sort();
    let mut status = serde_json::Map::new();
    status.insert(
        "replicas".into(),
        obj["status"]
            .get("replicas")
            .cloned()
            .unwrap_or(Value::from(0)),
    );
    if !pairs.is_empty() {
        status.insert("selector".into(), Value::String(pairs.join(",")));
    }
    let mut spec = serde_json::Map::new();
    if let Some(r) = obj["spec"].get("replicas") {
        spec.insert("replicas".into(), r.clone());
    }
    serde_json::json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": m,
        "spec": spec,
        "status": status,
    })
}

/// The `metadata.resourceVersion` of a patched object, when it is a number.
fn patched_rv(json: &[u8]) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_slice(json).ok()?;
    v.get("metadata")?
        .get("resourceVersion")?
        .as_str()?
        .parse()
        .ok()
}
