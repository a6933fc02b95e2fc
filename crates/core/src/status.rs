//! Typed API errors and their one mapping to kube-apiserver's `Status` wire format.

use crate::json::push_go_string;
use crate::resource::ResourceInfo;

/// What kind of problem a [`FieldError`] reports, as `k8s.io/apimachinery/.../field.ErrorType`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldErrorKind {
    /// `FieldValueForbidden`.
    Forbidden,
    /// `FieldValueNotSupported`; the supported values, already quoted in Go syntax.
    NotSupported(Vec<String>),
    /// `FieldValueInvalid`; the offending value as Go prints it.
    Invalid(String),
    /// `FieldValueRequired`.
    Required,
}

/// One validation failure on one field (a `Status` cause).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The field path, e.g. `resourceVersionMatch`.
    pub field: String,
    /// The kind of failure.
    pub kind: FieldErrorKind,
    /// Free-text detail (may be empty for `NotSupported`).
    pub detail: String,
}

impl FieldError {
    /// A `Forbidden` error on `field`.
    pub fn forbidden(field: &str, detail: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            kind: FieldErrorKind::Forbidden,
            detail: detail.into(),
        }
    }

    /// A `NotSupported` error: `value` is not one of `supported`.
    pub fn not_supported(field: &str, value: &str, supported: &[&str]) -> Self {
        FieldError {
            field: field.into(),
            kind: FieldErrorKind::NotSupported(
                supported
                    .iter()
                    .map(|s| crate::json::go_string(s))
                    .collect(),
            ),
            detail: crate::json::go_string(value),
        }
    }

    /// The cause reason, e.g. `FieldValueForbidden`.
    pub fn reason(&self) -> &'static str {
        match self.kind {
            FieldErrorKind::Forbidden => "FieldValueForbidden",
            FieldErrorKind::NotSupported(_) => "FieldValueNotSupported",
            FieldErrorKind::Invalid(_) => "FieldValueInvalid",
            FieldErrorKind::Required => "FieldValueRequired",
        }
    }

    /// The message without the field path (Go's `ErrorBody`).
    pub fn body(&self) -> String {
        match &self.kind {
            FieldErrorKind::Forbidden => format!("Forbidden: {}", self.detail),
            FieldErrorKind::NotSupported(values) => format!(
                "Unsupported value: {}: supported values: {}",
                self.detail,
                values.join(", ")
            ),
            FieldErrorKind::Required => format!("Required value: {}", self.detail),
            FieldErrorKind::Invalid(value) => {
                if self.detail.is_empty() {
                    format!("Invalid value: {value}")
                } else {
                    format!("Invalid value: {value}: {}", self.detail)
                }
            }
        }
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// Identifies the object an error is about, for `Status.details`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRef {
    /// API group ("" for core).
    pub group: String,
    /// Plural resource name, e.g. `configmaps`.
    pub resource: String,
    /// Object name.
    pub name: String,
}

impl ObjectRef {
    /// A reference to object `name` of resource `info`.
    pub fn new(info: &ResourceInfo, name: &str) -> Self {
        ObjectRef {
            group: info.group.clone(),
            resource: info.resource.clone(),
            name: name.into(),
        }
    }

    /// `configmaps` or `deployments.apps`, as kube-apiserver's messages print a GroupResource.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }
}

/// Who was denied what, for a 403.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denied {
    /// User name (`system:anonymous` when none).
    pub user: String,
    /// Verb (`list`, `watch`, `get`, …).
    pub verb: String,
    /// The resource (and object name, empty for collections).
    pub object: ObjectRef,
    /// Namespace, or None for the cluster scope.
    pub namespace: Option<String>,
}

/// Every error the read path can answer with. Converted to a wire `Status` only by
/// [`ApiError::to_status`], so codes, reasons and messages live in one place.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// 400 `BadRequest`: the request could not be parsed.
    #[error("{0}")]
    BadRequest(String),
    /// 422 `Invalid` on `ListOptions` with one cause per field error.
    #[error("ListOptions is invalid")]
    InvalidListOptions(Vec<FieldError>),
    /// 422 `Invalid` on an object being written.
    #[error("{kind} {name:?} is invalid")]
    InvalidObject {
        /// Object kind, e.g. `ConfigMap`.
        kind: String,
        /// API group of the kind.
        group: String,
        /// Object name.
        name: String,
        /// The field errors.
        causes: Vec<FieldError>,
    },
    /// 401 `Unauthorized`: no valid credentials (and anonymous requests are off).
    #[error("Unauthorized")]
    Unauthorized,
    /// 403 `Forbidden` (boxed: it is the largest variant and errors travel by value).
    #[error("forbidden")]
    Forbidden(Box<Denied>),
    /// 404 `NotFound` for an object.
    #[error("not found")]
    NotFound(ObjectRef),
    /// 404 `NotFound` for a path we do not serve.
    #[error("the server could not find the requested resource")]
    UnknownPath,
    /// 405 `MethodNotAllowed`.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// 405 `MethodNotAllowed` with why: the source is read-only (writes belong elsewhere).
    #[error("{0}")]
    ReadOnly(String),
    /// 409 `AlreadyExists`.
    #[error("already exists")]
    AlreadyExists(ObjectRef),
    /// 409 `Conflict`: optimistic concurrency failed.
    #[error("conflict")]
    Conflict(ObjectRef),
    /// 410 `Expired` with a plain message (too-old Exact LIST, too-old watch).
    #[error("{0}")]
    Expired(String),
    /// 410 `Expired` for a continue token whose snapshot is gone; carries the inconsistent
    /// continue token to resume from the latest state.
    #[error("continue token expired")]
    ContinueExpired {
        /// The token (with `rv: -1`) to put in the Status' `metadata.continue`.
        inconsistent_token: String,
    },
    /// 406 `NotAcceptable`: no representation the client accepts.
    #[error("{0}")]
    NotAcceptable(String),
    /// 413 `RequestEntityTooLarge`.
    #[error("{0}")]
    TooLarge(String),
    /// 415 `UnsupportedMediaType`.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 429 `TooManyRequests`.
    #[error("{0}")]
    TooManyRequests(String),
    /// 503 `ServiceUnavailable`.
    #[error("{0}")]
    Unavailable(String),
    /// 504 `Timeout`: the storage did not answer in time (`Retry-After: 1`).
    #[error("{0}")]
    Timeout(String),
    /// 504 `Timeout` with cause `ResourceVersionTooLarge`: the cache did not reach the RV.
    #[error("Too large resource version: {requested}, current: {current}")]
    ResourceVersionTooLarge {
        /// The RV the client asked for.
        requested: u64,
        /// The newest RV the cache had when it gave up waiting.
        current: u64,
    },
    /// 500 `InternalError`.
    #[error("{0}")]
    Internal(String),
    /// What apimachinery's `NewGenericServerResponse(code, "", {}, "", message, 0, false)`
    /// answers: the reason and a fixed message by code, an empty `details`, and `message`
    /// itself only where Go keeps it (415, 403, 406). kube-apiserver answers a JSON patch
    /// that does not apply (422) and go-restful's unknown Content-Type (415) with it.
    #[error("{message}")]
    ServerResponse {
        /// HTTP status code.
        code: u16,
        /// The underlying message (kept for logs; on the wire only for 415/403/406).
        message: String,
    },
    /// An error kube-apiserver passes through without classifying it (not a `StatusError`):
    /// 500 with no reason and the error's own message, as `ErrorToAPIStatus` renders it.
    #[error("{0}")]
    Unclassified(String),
}

/// A rendered `Status`: the HTTP code, an optional `Retry-After`, and the JSON body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// HTTP status code (also `Status.code`).
    pub code: u16,
    /// Seconds for a `Retry-After` header, when the Status asks for one.
    pub retry_after: Option<u32>,
    /// The compact JSON body, without a trailing newline.
    pub body: Vec<u8>,
}

struct StatusParts<'a> {
    code: u16,
    reason: &'a str,
    message: String,
    continue_token: Option<&'a str>,
    details: Option<Details<'a>>,
}

#[derive(Default)]
struct Details<'a> {
    name: Option<&'a str>,
    group: Option<&'a str>,
    kind: Option<&'a str>,
    causes: Vec<(String, String, Option<String>)>,
    retry_after: Option<u32>,
}

impl ApiError {
    /// The HTTP status code this error is answered with.
    pub fn code(&self) -> u16 {
        self.parts().code
    }

    /// Renders the error as kube-apiserver's `Status` (the only place codes and reasons are
    /// decided).
    pub fn to_status(&self) -> Status {
        let p = self.parts();
        let mut b = Vec::with_capacity(256);
        b.extend_from_slice(br#"{"kind":"Status","apiVersion":"v1","metadata":{"#);
        if let Some(token) = p.continue_token {
            b.extend_from_slice(br#""continue":"#);
            push_go_string(&mut b, token);
        }
        b.extend_from_slice(br#"},"status":"Failure","message":"#);
        push_go_string(&mut b, &p.message);
        if !p.reason.is_empty() {
            b.extend_from_slice(br#","reason":"#);
            push_go_string(&mut b, p.reason);
        }
        let mut retry_after = None;
        if let Some(d) = &p.details {
            b.extend_from_slice(br#","details":{"#);
            let mut first = true;
            let mut field = |b: &mut Vec<u8>, name: &str| {
                if !first {
                    b.push(b',');
                }
                first = false;
                b.push(b'"');
                b.extend_from_slice(name.as_bytes());
                b.extend_from_slice(b"\":");
            };
            for (name, value) in [("name", d.name), ("group", d.group), ("kind", d.kind)] {
                if let Some(v) = value.filter(|v| !v.is_empty()) {
                    field(&mut b, name);
                    push_go_string(&mut b, v);
                }
            }
            if !d.causes.is_empty() {
                field(&mut b, "causes");
                b.push(b'[');
                for (i, (reason, message, f)) in d.causes.iter().enumerate() {
                    if i > 0 {
                        b.push(b',');
                    }
                    b.extend_from_slice(br#"{"reason":"#);
                    push_go_string(&mut b, reason);
                    b.extend_from_slice(br#","message":"#);
                    push_go_string(&mut b, message);
                    if let Some(f) = f {
                        b.extend_from_slice(br#","field":"#);
                        push_go_string(&mut b, f);
                    }
                    b.push(b'}');
                }
                b.push(b']');
            }
            if let Some(secs) = d.retry_after {
                field(&mut b, "retryAfterSeconds");
                b.extend_from_slice(secs.to_string().as_bytes());
                retry_after = Some(secs);
            }
            b.push(b'}');
        }
        b.extend_from_slice(br#","code":"#);
        b.extend_from_slice(p.code.to_string().as_bytes());
        b.push(b'}');
        Status {
            code: p.code,
            retry_after,
            body: b,
        }
    }

    fn parts(&self) -> StatusParts<'_> {
        let simple = |code, reason, message: String| StatusParts {
            code,
            reason,
            message,
            continue_token: None,
            details: None,
        };
        // What clients (client-go, kubectl) retry after a second.
        let retry = |code, reason, message: String| StatusParts {
            details: Some(Details {
                retry_after: Some(1),
                ..Default::default()
            }),
            ..simple(code, reason, message)
        };
        fn object<'a>(
            code: u16,
            reason: &'a str,
            message: String,
            r: &'a ObjectRef,
        ) -> StatusParts<'a> {
            StatusParts {
                code,
                reason,
                message,
                continue_token: None,
                details: Some(Details {
                    name: Some(&r.name),
                    group: Some(&r.group),
                    kind: Some(&r.resource),
                    ..Default::default()
                }),
            }
        }
        match self {
            ApiError::BadRequest(m) => simple(400, "BadRequest", m.clone()),
            ApiError::InvalidListOptions(errs) => invalid(
                "meta.k8s.io",
                "ListOptions",
                "",
                "ListOptions.meta.k8s.io",
                errs,
            ),
            ApiError::InvalidObject {
                kind,
                group,
                name,
                causes,
            } => {
                let qualified = if group.is_empty() {
                    kind.clone()
                } else {
                    format!("{kind}.{group}")
                };
                invalid(group, kind, name, &qualified, causes)
            }
            ApiError::Forbidden(d) => {
                let Denied {
                    user,
                    verb,
                    object: target,
                    namespace,
                } = &**d;
                let subject = if target.name.is_empty() {
                    target.group_resource()
                } else {
                    format!("{} {:?}", target.group_resource(), target.name)
                };
                let scope = match namespace {
                    Some(ns) => format!("in the namespace {ns:?}"),
                    None => "at the cluster scope".into(),
                };
                let message = format!(
                    "{subject} is forbidden: User {user:?} cannot {verb} resource {:?} in API group {:?} {scope}",
                    target.resource, target.group
                );
                object(403, "Forbidden", message, target)
            }
            ApiError::NotFound(r) => object(
                404,
                "NotFound",
                format!("{} {:?} not found", r.group_resource(), r.name),
                r,
            ),
            ApiError::UnknownPath => StatusParts {
                code: 404,
                reason: "NotFound",
                message: "the server could not find the requested resource".into(),
                continue_token: None,
                details: Some(Details::default()),
            },
            ApiError::MethodNotAllowed => simple(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource".into(),
            ),
            ApiError::ReadOnly(why) => simple(405, "MethodNotAllowed", why.clone()),
            ApiError::AlreadyExists(r) => object(
                409,
                "AlreadyExists",
                format!("{} {:?} already exists", r.group_resource(), r.name),
                r,
            ),
            ApiError::Conflict(r) => object(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} {:?}: the object has been modified; \
                     please apply your changes to the latest version and try again",
                    r.group_resource(),
                    r.name
                ),
                r,
            ),
            ApiError::Expired(m) => simple(410, "Expired", m.clone()),
            ApiError::ContinueExpired { inconsistent_token } => StatusParts {
                code: 410,
                reason: "Expired",
                message: CONTINUE_EXPIRED_MESSAGE.into(),
                continue_token: Some(inconsistent_token),
                details: None,
            },
            ApiError::NotAcceptable(m) => simple(406, "NotAcceptable", m.clone()),
            ApiError::Unauthorized => simple(401, "Unauthorized", "Unauthorized".into()),
            ApiError::TooLarge(m) => simple(413, "RequestEntityTooLarge", m.clone()),
            ApiError::UnsupportedMediaType(m) => simple(415, "UnsupportedMediaType", m.clone()),
            ApiError::TooManyRequests(m) => retry(429, "TooManyRequests", m.clone()),
            ApiError::Unavailable(m) => retry(503, "ServiceUnavailable", m.clone()),
            ApiError::Timeout(m) => retry(504, "Timeout", m.clone()),
            ApiError::ResourceVersionTooLarge { .. } => StatusParts {
                code: 504,
                reason: "Timeout",
                message: format!("Timeout: {self}"),
                continue_token: None,
                details: Some(Details {
                    causes: vec![(
                        "ResourceVersionTooLarge".into(),
                        "Too large resource version".into(),
                        None,
                    )],
                    retry_after: Some(1),
                    ..Default::default()
                }),
            },
            ApiError::Internal(m) => simple(500, "InternalError", m.clone()),
            ApiError::ServerResponse { code, message } => {
                let (reason, text) = match code {
                    400 => (
                        "BadRequest",
                        "the server rejected our request for an unknown reason",
                    ),
                    403 | 406 | 415 => (
                        match code {
                            403 => "Forbidden",
                            406 => "NotAcceptable",
                            _ => "UnsupportedMediaType",
                        },
                        message.as_str(),
                    ),
                    404 => (
                        "NotFound",
                        "the server could not find the requested resource",
                    ),
                    405 => (
                        "MethodNotAllowed",
                        "the server does not allow this method on the requested resource",
                    ),
                    422 => (
                        "Invalid",
                        "the server rejected our request due to an error in our request",
                    ),
                    _ => ("", ""),
                };
                let text = if text.is_empty() {
                    format!(
                        "the server responded with the status code {code} but did not return more information"
                    )
                } else {
                    text.to_string()
                };
                StatusParts {
                    code: *code,
                    reason,
                    message: text,
                    continue_token: None,
                    details: Some(Details::default()),
                }
            }
            ApiError::Unclassified(m) => simple(500, "", m.clone()),
        }
    }
}

fn invalid<'a>(
    group: &'a str,
    kind: &'a str,
    name: &'a str,
    qualified: &str,
    errs: &[FieldError],
) -> StatusParts<'a> {
    let list = if errs.len() == 1 {
        errs[0].to_string()
    } else {
        format!(
            "[{}]",
            errs.iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    StatusParts {
        code: 422,
        reason: "Invalid",
        message: format!("{qualified} {name:?} is invalid: {list}"),
        continue_token: None,
        details: Some(Details {
            name: Some(name),
            group: Some(group),
            kind: Some(kind),
            causes: errs
                .iter()
                .map(|e| (e.reason().to_string(), e.body(), Some(e.field.clone())))
                .collect(),
            retry_after: None,
        }),
    }
}

/// kube-apiserver's message for a continue token whose snapshot has been compacted.
pub const CONTINUE_EXPIRED_MESSAGE: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

/// kube-apiserver's message for an `Exact` LIST whose RV is no longer held.
pub const LIST_TOO_OLD_MESSAGE: &str = "The resourceVersion for the provided list is too old.";
