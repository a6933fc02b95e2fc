//! Values and errors into HTTP responses, in one place (axum's `IntoResponse`): a handler
//! answers a [`Answer`]; an `Err` becomes kube-apiserver's `Status` here.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use listwatch_codec::Encoding;
use listwatch_codec::protobuf as pb;
use listwatch_core::ApiError;

use crate::body::{ResponseBody, full};

/// A handler's answer: a response, or an error to render as a `Status`.
pub type Answer = Result<Response<ResponseBody>, ApiError>;

/// A response with `code`, `Content-Type: content_type` and kube-apiserver's
/// `Cache-Control` for API responses.
pub fn typed(
    code: StatusCode,
    content_type: &'static str,
    body: ResponseBody,
) -> Response<ResponseBody> {
    let mut r = Response::new(body);
    *r.status_mut() = code;
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    r
}

/// A JSON value as a response body (newline-terminated, as Go's encoder writes it).
pub fn json_value(code: StatusCode, v: &serde_json::Value) -> Response<ResponseBody> {
    let mut b = serde_json::to_vec(v).unwrap_or_default();
    b.push(b'\n');
    let mut r = Response::new(full(b));
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// A plain-text (probe) or other non-API response with `content_type`.
pub fn text(
    code: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<ResponseBody> {
    let mut r = Response::new(full(body));
    *r.status_mut() = code;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// Renders an error as kube-apiserver does: the `Status` body (protobuf for a client that
/// asked for plain protobuf), its code, `Retry-After`.
pub fn error(e: &ApiError, encoding: Encoding) -> Response<ResponseBody> {
    let s = e.to_status();
    // `to_status` only makes codes in 400..=599.
    let code = StatusCode::from_u16(s.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let protobuf = match encoding {
        Encoding::Protobuf => pb::status_to_protobuf(&s.body).ok(),
        Encoding::Json => None,
    };
    let mut r = match protobuf {
        Some(body) => typed(code, pb::PROTOBUF, full(body)),
        None => {
            let mut body = s.body;
            body.push(b'\n');
            typed(code, "application/json", full(body))
        }
    };
    if let Some(secs) = s.retry_after {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    r
}

/// Content-negotiation headers of a streamed response: `Vary` whenever gzip was offered,
/// `Content-Encoding` when the body is actually compressed.
pub fn encoded(mut r: Response<ResponseBody>, offered: bool, gzip: bool) -> Response<ResponseBody> {
    if gzip {
        r.headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    if offered {
        r.headers_mut()
            .insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    }
    r
}

/// `b` followed by a newline (write results, as Go's encoder ends a body).
pub fn with_newline(b: Bytes) -> Bytes {
    let mut v = Vec::with_capacity(b.len() + 1);
    v.extend_from_slice(&b);
    v.push(b'\n');
    Bytes::from(v)
}
