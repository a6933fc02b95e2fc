//! PATCH as kube-apiserver applies it, as a pure function of the stored object and the
//! request body: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and strategic merge
//! patch for built-in types, with kube-apiserver's statuses and messages.
//!
//! Statuses follow `k8s.io/apiserver/pkg/endpoints/handlers/patch.go` (v0.36):
//! `PatchResource` answers an unknown `Content-Type` 415 (go-restful's "415: Unsupported
//! Media Type" for built-in types; for custom resources, whose handler accepts no strategic
//! merge patch, its own list of accepted media types); `applyJSPatch` answers a patch that
//! does not decode 400 with the decoder's message, more than 10000 operations 413, and an
//! operation that does not apply 422 with `NewGenericServerResponse` (its message hidden:
//! "the server rejected our request due to an error in our request"); a merge patch that is
//! not JSON 400 "Invalid JSON Patch"; `strategicPatchObject` a patch that is not a JSON
//! object 400, `interpretStrategicMergePatchError` the malformed-directive errors 400 and
//! lists of lists 422, and every other strategicpatch error passes through unclassified
//! (500, no reason). A result that is not an object fails to decode: 422 `Invalid` on
//! field `patch`.

mod builtin;
mod gofmt;
mod json_patch;
mod merge_patch;
pub mod strategic;

use listwatch_core::status::{ApiError, FieldError, FieldErrorKind};
use serde_json::{Map, Value};

pub use builtin::{Elem, GoNode};
pub use strategic::{Lookup, PatchMeta, SmpError};

/// kube-apiserver's `maxJSONPatchOperations`.
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// Which kind of patch a request carries, from its `Content-Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/strategic-merge-patch+json` (built-in types only).
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply: not served, see docs/resources.md).
    Apply,
}

impl PatchType {
    /// The media type naming this patch type.
    pub fn media_type(self) -> &'static str {
        match self {
            PatchType::Json => "application/json-patch+json",
            PatchType::Merge => "application/merge-patch+json",
            PatchType::Strategic => "application/strategic-merge-patch+json",
            PatchType::Apply => "application/apply-patch+yaml",
        }
    }

    /// The patch type of a `Content-Type` header (parameters after `;` ignored, as
    /// `PatchResource` does); `builtin` says whose 415 an unknown one gets.
    pub fn from_content_type(content_type: &str, builtin: bool) -> Result<Self, PatchError> {
        let base = match content_type.find(';') {
            Some(i) if i > 0 => &content_type[..i],
            _ => content_type,
        };
        [
            PatchType::Json,
            PatchType::Merge,
            PatchType::Strategic,
            PatchType::Apply,
        ]
        .into_iter()
        .find(|t| t.media_type() == base)
        .ok_or(PatchError::UnsupportedMediaType { builtin })
    }
}

/// Why a patch was refused, each with the status kube-apiserver answers (see the crate
/// docs); `From<PatchError> for ApiError` is the mapping.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// 415: the `Content-Type` is not a patch type served for this resource (strategic
    /// merge patch on a custom resource included).
    #[error("unsupported patch media type")]
    UnsupportedMediaType {
        /// A built-in type (go-restful's answer) or a custom resource (`PatchResource`'s).
        builtin: bool,
    },
    /// 415: server-side apply is not served; answered as a kube-apiserver without it did.
    #[error("server-side apply is not supported")]
    ApplyNotSupported {
        /// A built-in type or a custom resource, as for `UnsupportedMediaType`.
        builtin: bool,
    },
    /// 400: the body does not decode as the patch type requires (Go's message).
    #[error("{0}")]
    BadRequest(String),
    /// 413: more than [`MAX_JSON_PATCH_OPERATIONS`] JSON-patch operations.
    #[error(
        "The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {0}"
    )]
    TooManyOperations(usize),
    /// 422 with kube's generic message: a JSON-patch operation does not apply (a failed
    /// `test`, a missing path, a bad index) or a strategic patch has lists of lists. The
    /// text is evanphx's / strategicpatch's, for logs.
    #[error("{0}")]
    Unprocessable(String),
    /// 422 `Invalid` on `patch`: the patched document is not an object.
    #[error("the patched document is not an object: {result}")]
    NotAnObject {
        /// The patched document, as JSON.
        result: String,
    },
    /// 500 (no reason): a strategic merge patch error kube-apiserver does not classify
    /// (a missing merge key, an unknown field, an unknown `$patch`).
    #[error("{0}")]
    Strategic(String),
    /// 500: the stored object is not a JSON object (a defect of the caller, not the client).
    #[error("the original object is not a JSON object: {0}")]
    BadOriginal(String),
    /// 500: a built-in type with no schema to merge by.
    #[error("no schema for {0}")]
    UnknownType(String),
}

/// kube-apiserver's 415 message for a custom resource (`NewUnsupportedMediaTypeError` with
/// the custom resource handler's accepted patch types).
pub const CUSTOM_RESOURCE_UNSUPPORTED: &str = "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml";

/// The 415 a kube-apiserver without server-side apply gave custom resources (its accepted
/// list without `application/apply-patch+yaml`), which clients fall back on.
const CUSTOM_RESOURCE_NO_APPLY: &str = "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json";

/// go-restful's message when no route consumes the `Content-Type` (built-in types).
const GO_RESTFUL_UNSUPPORTED: &str = "415: Unsupported Media Type";

impl From<PatchError> for ApiError {
    fn from(e: PatchError) -> Self {
        match e {
            PatchError::UnsupportedMediaType { builtin: true }
            | PatchError::ApplyNotSupported { builtin: true } => ApiError::ServerResponse {
                code: 415,
                message: GO_RESTFUL_UNSUPPORTED.into(),
            },
            PatchError::UnsupportedMediaType { builtin: false } => {
                ApiError::UnsupportedMediaType(CUSTOM_RESOURCE_UNSUPPORTED.into())
            }
            PatchError::ApplyNotSupported { builtin: false } => {
                ApiError::UnsupportedMediaType(CUSTOM_RESOURCE_NO_APPLY.into())
            }
            PatchError::BadRequest(m) => ApiError::BadRequest(m),
            e @ PatchError::TooManyOperations(_) => {
                ApiError::TooLarge(format!("Request entity too large: {e}"))
            }
            PatchError::Unprocessable(message) => ApiError::ServerResponse { code: 422, message },
            PatchError::NotAnObject { result } => ApiError::InvalidObject {
                kind: String::new(),
                group: String::new(),
                name: String::new(),
                causes: vec![FieldError {
                    field: "patch".into(),
                    kind: FieldErrorKind::Invalid(listwatch_core::json::go_string(&result)),
                    detail: NOT_AN_OBJECT_DETAIL.into(),
                }],
            },
            PatchError::Strategic(m) => ApiError::Unclassified(m),
            e @ (PatchError::BadOriginal(_) | PatchError::UnknownType(_)) => {
                ApiError::Internal(e.to_string())
            }
        }
    }
}

/// What kube's decoder says of a JSON document that is not an object (it reads
/// `apiVersion`/`kind` first).
const NOT_AN_OBJECT_DETAIL: &str = "couldn't get version/kind; json parse error: json: cannot unmarshal array into Go value of type struct { APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string \"json:\\\"kind,omitempty\\\"\" }";

/// Applies `patch` of type `kind` to `original` (the stored object's JSON) and returns the
/// patched object's JSON (compact; the original's member order kept, new members after).
/// `type_of` is the built-in type's (`apiVersion`, `kind`), `None` for a custom resource
/// (strategic merge patch is then 415, as kube-apiserver answers).
pub fn apply(
    kind: PatchType,
    type_of: Option<(&str, &str)>,
    original: &[u8],
    patch: &[u8],
) -> Result<Vec<u8>, PatchError> {
    let builtin = type_of.is_some();
    let doc: Map<String, Value> =
        serde_json::from_slice(original).map_err(|e| PatchError::BadOriginal(e.to_string()))?;
    let result = match kind {
        PatchType::Apply => return Err(PatchError::ApplyNotSupported { builtin }),
        PatchType::Json => json_patch(Value::Object(doc), patch)?,
        PatchType::Merge => merge_patch(doc, patch)?,
        PatchType::Strategic => {
            let Some((api_version, type_kind)) = type_of else {
                return Err(PatchError::UnsupportedMediaType { builtin: false });
            };
            let node = GoNode::kind(api_version, type_kind).ok_or_else(|| {
                PatchError::UnknownType(format!("{api_version}, Kind={type_kind}"))
            })?;
            Value::Object(strategic_patch(doc, patch, &node)?)
        }
    };
    if !result.is_object() {
        return Err(PatchError::NotAnObject {
            result: serde_json::to_string(&result).unwrap_or_default(),
        });
    }
    serde_json::to_vec(&result).map_err(|e| PatchError::BadOriginal(e.to_string()))
}

/// Applies a strategic merge patch (JSON bytes) to `original` against the type `schema`:
/// the step `apply` takes for built-in types, open to other type tables (the tests').
pub fn strategic_patch(
    original: Map<String, Value>,
    patch: &[u8],
    schema: &impl Lookup,
) -> Result<Map<String, Value>, PatchError> {
    // kube decodes the patch into a map first: what is not JSON, or not an object, is 400
    // with the decoder's message; `null` decodes to no patch at all.
    let patch: Value = serde_json::from_slice(patch)
        .map_err(|e| PatchError::BadRequest(gofmt::syntax_error(patch, &e)))?;
    let patch = match patch {
        Value::Object(m) => m,
        Value::Null => return Ok(original),
        other => {
            return Err(PatchError::BadRequest(format!(
                "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                gofmt::json_kind(&other)
            )));
        }
    };
    strategic::merge(original, patch, schema).map_err(|e| match e {
        SmpError::BadPrimitiveList | SmpError::BadRetainKeys | SmpError::BadSetElementOrder => {
            PatchError::BadRequest(e.to_string())
        }
        SmpError::ListOfLists => PatchError::Unprocessable(e.to_string()),
        SmpError::Other(m) => PatchError::Strategic(m),
    })
}

fn json_patch(mut doc: Value, patch: &[u8]) -> Result<Value, PatchError> {
    let ops: Value = serde_json::from_slice(patch)
        .map_err(|e| PatchError::BadRequest(gofmt::syntax_error(patch, &e)))?;
    let ops = match ops {
        Value::Array(items) => items
            .into_iter()
            .map(|op| match op {
                Value::Object(m) => Ok(Some(m)),
                Value::Null => Ok(None),
                other => Err(PatchError::BadRequest(format!(
                    "json: cannot unmarshal {} into Go value of type jsonpatch.Operation",
                    gofmt::json_kind(&other)
                ))),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Value::Null => Vec::new(),
        other => {
            return Err(PatchError::BadRequest(format!(
                "json: cannot unmarshal {} into Go value of type jsonpatch.Patch",
                gofmt::json_kind(&other)
            )));
        }
    };
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(PatchError::TooManyOperations(ops.len()));
    }
    json_patch::apply(&mut doc, &ops).map_err(|e| PatchError::Unprocessable(e.0))?;
    Ok(doc)
}

fn merge_patch(mut doc: Map<String, Value>, patch: &[u8]) -> Result<Value, PatchError> {
    const BAD: &str = "Invalid JSON Patch";
    let patch: Value =
        serde_json::from_slice(patch).map_err(|_| PatchError::BadRequest(BAD.into()))?;
    match patch {
        Value::Object(p) => {
            merge_patch::merge_docs(&mut doc, p);
            Ok(Value::Object(doc))
        }
        // Not an object: an array becomes the document (nulls in its objects pruned),
        // anything else is not a merge patch.
        mut array @ Value::Array(_) => {
            merge_patch::prune_nulls(&mut array);
            Ok(array)
        }
        _ => Err(PatchError::BadRequest(BAD.into())),
    }
}
