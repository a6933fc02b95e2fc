//! `/openapi/v2`, `/openapi/v3` and `/openapi/v3/<group-version>`, answered as
//! kube-apiserver's kube-openapi handlers answer them: `Accept` negotiation (v2 as JSON or
//! gnostic protobuf), a quoted SHA-512 `ETag` and `If-None-Match` → 304, and for a v3
//! document fetched by its `?hash=` the immutable cache headers (another hash: a 301 to the
//! current one). The documents are built by `listwatch-openapi` once per change of what is
//! served ([`OpenApiCache`]) and shared as `Bytes`; the server only maps the body.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use listwatch_core::ApiError;
use listwatch_sources::Registry;
use parking_lot::Mutex;

use bytes::Bytes;

use crate::{Doc, OpenApiDocs, Served};

/// An OpenAPI answer: the response (its body shared bytes), or the error to render.
pub type Answer = Result<Response<Bytes>, ApiError>;

const V2_PROTO: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
/// The older spelling of the v2 protobuf type, which kubectl still sends.
const V2_PROTO_OLD: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// What the documents were built from: the verbs served, and each served resource (with the
/// resourceVersion of a custom resource's CRD object).
type Fingerprint = (String, Vec<(String, String, String, String, bool, u64)>);

/// The documents for what the registry serves now, rebuilt only when that changed.
#[derive(Default)]
pub struct OpenApiCache {
    built: Mutex<Option<(Fingerprint, Arc<OpenApiDocs>)>>,
}

impl OpenApiCache {
    /// The documents for `registry`'s live resources, with `verbs` each.
    pub fn docs(&self, registry: &Registry, verbs: &[&str]) -> Arc<OpenApiDocs> {
        let table = listwatch_protobuf::Schema::kubernetes();
        let crds = registry
            .get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
            .map(|s| s.current());
        // Each live resource with its CRD object (custom resources only).
        let live: Vec<_> = registry
            .stores()
            .into_iter()
            .filter(|s| !s.is_retired())
            .map(|store| {
                let info = store.info().clone();
                let builtin = table.kind_exact(&info.api_version(), &info.kind).is_some();
                let name = format!("{}.{}", info.resource, info.group);
                let crd = crds
                    .as_ref()
                    .filter(|_| !builtin)
                    .and_then(|c| c.get(&name).cloned());
                (info, crd)
            })
            .collect();
        let print: Fingerprint = (
            verbs.join(","),
            live.iter()
                .map(|(i, crd)| {
                    let i = &**i;
                    (
                        i.group.clone(),
                        i.version.clone(),
                        i.resource.clone(),
                        i.kind.clone(),
                        i.namespaced,
                        crd.as_ref().map_or(0, |r| r.rv()),
                    )
                })
                .collect(),
        );
        let mut built = self.built.lock();
        if let Some((p, docs)) = built.as_ref()
            && *p == print
        {
            return docs.clone();
        }
        let served: Vec<Served> = live
            .into_iter()
            .map(|(info, crd)| Served {
                crd_schema: crd.and_then(|r| crd_schema(r.bytes(), &info.version)),
                info: (*info).clone(),
                verbs: verbs.iter().map(|v| v.to_string()).collect(),
            })
            .collect();
        let docs = Arc::new(OpenApiDocs::build(&served));
        *built = Some((print, docs.clone()));
        docs
    }
}

/// `spec.versions[name=version].schema.openAPIV3Schema` of a CRD object.
fn crd_schema(crd: &[u8], version: &str) -> Option<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_slice(crd).ok()?;
    v["spec"]["versions"]
        .as_array()?
        .iter()
        .find(|x| x["name"] == version)
        .map(|x| x["schema"]["openAPIV3Schema"].clone())
        .filter(serde_json::Value::is_object)
}

/// Answers a GET of `path` (`/openapi/…`) with `query` and the request's `headers`.
pub fn respond(docs: &OpenApiDocs, path: &str, query: &str, headers: &HeaderMap) -> Answer {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .filter(|a| !a.trim().is_empty())
        .unwrap_or("*/*");
    let path = path.trim_end_matches('/');
    if path == "/openapi/v2" {
        let (doc, ct) = match negotiate(
            accept,
            &[
                ("application/json", &docs.v2_json),
                (V2_PROTO, &docs.v2_proto),
                (V2_PROTO_OLD, &docs.v2_proto),
            ],
        ) {
            Some((doc, ct)) => (doc, if ct == V2_PROTO_OLD { V2_PROTO } else { ct }),
            None => return Ok(status_only(StatusCode::NOT_ACCEPTABLE)),
        };
        return Ok(document(doc, ct, headers, false));
    }
    if path == "/openapi/v3" {
        return Ok(document(&docs.v3_index, "application/json", headers, false));
    }
    let gv = path
        .strip_prefix("/openapi/v3/")
        .ok_or(ApiError::UnknownPath)?;
    let doc = docs.v3.get(gv).ok_or(ApiError::UnknownPath)?;
    if negotiate(accept, &[("application/json", doc)]).is_none() {
        return Ok(status_only(StatusCode::NOT_ACCEPTABLE));
    }
    let hash = form_urlencoded_value(query, "hash");
    if hash.as_deref().is_some_and(|h| h != doc.hash) {
        let mut r = status_only(StatusCode::MOVED_PERMANENTLY);
        if let Ok(v) = HeaderValue::from_str(&format!("/openapi/v3/{gv}?hash={}", doc.hash)) {
            r.headers_mut().insert(header::LOCATION, v);
        }
        return Ok(r);
    }
    Ok(document(doc, "application/json", headers, hash.is_some()))
}

/// The first of `offered` the `Accept` header's ranges take, by quality then order.
fn negotiate<'d>(
    accept: &str,
    offered: &[(&'static str, &'d Doc)],
) -> Option<(&'d Doc, &'static str)> {
    let mut ranges: Vec<(f32, &str)> = accept
        .split(',')
        .map(|r| {
            let mut parts = r.split(';').map(str::trim);
            let range = parts.next().unwrap_or("");
            let q = parts
                .filter_map(|p| p.strip_prefix("q="))
                .find_map(|q| q.parse::<f32>().ok())
                .unwrap_or(1.0);
            (q, range)
        })
        .filter(|(q, _)| *q > 0.0)
        .collect();
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0));
    ranges.iter().find_map(|(_, range)| {
        let (rt, rs) = range.split_once('/').unwrap_or((range, ""));
        offered.iter().find_map(|(ct, doc)| {
            let (t, s) = ct.split_once('/').unwrap_or((ct, ""));
            ((rt == "*" || rt.eq_ignore_ascii_case(t)) && (rs == "*" || rs.eq_ignore_ascii_case(s)))
                .then_some((*doc, *ct))
        })
    })
}

/// A document response: its `ETag`, 304 when `If-None-Match` names it, and with
/// `immutable` (fetched by its hash) the year-long cache headers.
fn document(
    doc: &Doc,
    content_type: &'static str,
    headers: &HeaderMap,
    immutable: bool,
) -> Response<Bytes> {
    let etag = format!("\"{}\"", doc.hash);
    let matches = headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .any(|t| t == "*" || t.trim_start_matches("W/") == etag);
    let mut r = if matches {
        status_only(StatusCode::NOT_MODIFIED)
    } else {
        let mut r = Response::new(doc.bytes.clone());
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        r
    };
    let h = r.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::VARY, HeaderValue::from_static("Accept"));
    if immutable {
        h.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, immutable"),
        );
        let year = SystemTime::now() + Duration::from_secs(365 * 24 * 3600);
        if let Ok(v) = HeaderValue::from_str(&httpdate::fmt_http_date(year)) {
            h.insert(header::EXPIRES, v);
        }
    }
    r
}

fn status_only(code: StatusCode) -> Response<Bytes> {
    let mut r = Response::new(Bytes::new());
    *r.status_mut() = code;
    r
}

/// The first value of `name` in a raw query string.
fn form_urlencoded_value(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then(|| {
            percent_encoding::percent_decode_str(v)
                .decode_utf8_lossy()
                .into_owned()
        })
    })
}
