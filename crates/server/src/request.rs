//! The front door: every request is parsed once into an [`ApiRequest`] — route, verb, query
//! parameters, list options, negotiated rendering — that admission, authorization, metrics
//! and the handlers all read. Parse errors are kept, not raised, so each surfaces where
//! kube-apiserver raises it (after authentication and authorization).

use http::{Method, Request, header};
use listwatch_codec::{Encoding, IncludeObject, TableFormat};
use listwatch_core::{ApiError, ListOptions, QueryParams, ResourceInfo, Verb};

use crate::RequestBody;
use crate::routes::Route;
use listwatch_auth::User;

/// How a LIST, GET or watch response is rendered.
#[derive(Clone)]
pub struct Rendering {
    /// The wire encoding the encoders write.
    pub encoding: Encoding,
    /// A `meta.k8s.io` Table instead of objects.
    pub table: Option<TableFormat>,
    /// PartialObjectMetadata (`metadata` only) instead of objects.
    pub metadata_only: bool,
    /// The client accepts gzip.
    pub gzip: bool,
}

/// One request, parsed once.
pub struct ApiRequest {
    /// HTTP method.
    pub method: Method,
    /// Path, for logs.
    pub path: String,
    /// Raw query, for logs.
    pub query: String,
    /// What the path addresses.
    pub route: Route,
    /// What the request does.
    pub verb: Verb,
    /// Decoded query parameters.
    pub params: QueryParams,
    /// Validated list options (reads of a resource only).
    pub options: Option<Result<ListOptions, ApiError>>,
    /// The negotiated rendering (reads of a resource only).
    pub rendering: Option<Result<Rendering, ApiError>>,
    /// `Accept`, for discovery's own negotiation.
    pub accept: Option<String>,
    /// The encoding an error `Status` is sent in (protobuf when the client asked for
    /// plain protobuf, as kube-apiserver answers it).
    pub error_encoding: Encoding,
    /// `Content-Type` of the body, if any.
    pub content_type: Option<String>,
    /// The authenticated user the connection or host attached, if any.
    pub user: Option<User>,
    /// The request body (read only by writes).
    pub body: RequestBody,
    /// The request's place on its connection (standalone server only).
    pub in_flight: Option<crate::connection::InFlight>,
    /// The request's headers (what the OpenAPI handler negotiates and caches by).
    pub headers: http::HeaderMap,
}

impl ApiRequest {
    /// Parses `req`, whose path `routes::route` already decoded into `route`.
    pub fn parse(req: Request<RequestBody>, route: Route) -> ApiRequest {
        let (mut parts, body) = req.into_parts();
        let in_flight = parts.extensions.remove::<crate::connection::InFlight>();
        let path = parts.uri.path().to_string();
        let query = parts.uri.query().unwrap_or("").to_string();
        let header = |name: header::HeaderName| {
            parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let params = QueryParams::decode(&query);
        let (object, legacy_watch) = match &route {
            Route::Collection { legacy_watch, .. } => (false, *legacy_watch),
            Route::Object { legacy_watch, .. } => (true, *legacy_watch),
            _ => (false, false),
        };
        let resource = matches!(route, Route::Collection { .. } | Route::Object { .. });
        let verb = if resource {
            Verb::of(parts.method.as_str(), object, legacy_watch || params.watch)
        } else {
            Verb::Other
        };
        let accept = header(header::ACCEPT);
        // Parsed once: for the read's rendering and for an error's encoding.
        let ranges = accept
            .as_deref()
            .filter(|a| !a.trim().is_empty())
            .map(media_ranges);
        let (options, rendering) = match (&route, verb) {
            (
                Route::Collection {
                    store, namespace, ..
                },
                Verb::List | Verb::Watch,
            )
            | (
                Route::Object {
                    store, namespace, ..
                },
                Verb::Get | Verb::Watch,
            ) => {
                let info = store.info();
                let opts =
                    ListOptions::from_params(&params, info, namespace.as_deref()).map(|mut o| {
                        o.watch |= legacy_watch;
                        o
                    });
                let gzip = accepts_gzip(&parts.headers);
                let rendering =
                    negotiate(ranges.as_deref(), &params, info, verb).map(|(encoding, form)| {
                        Rendering {
                            encoding,
                            metadata_only: matches!(form, Form::Metadata),
                            table: match form {
                                Form::Table(t) => Some(t),
                                _ => None,
                            },
                            gzip,
                        }
                    });
                (Some(opts), Some(rendering))
            }
            _ => (None, None),
        };
        let error_encoding = error_encoding(ranges.as_deref());
        ApiRequest {
            method: parts.method,
            path,
            query,
            route,
            verb,
            params,
            options,
            rendering,
            error_encoding,
            accept,
            content_type: header(header::CONTENT_TYPE),
            user: parts.extensions.get::<User>().cloned(),
            body,
            in_flight,
            headers: parts.headers,
        }
    }

    /// The user's name, `system:anonymous` without one.
    pub fn user_name(&self) -> &str {
        self.user
            .as_ref()
            .map_or("system:anonymous", |u| u.name.as_str())
    }

    /// The resource label of metrics and logs ("" for non-resource paths).
    pub fn resource_label(&self) -> String {
        match &self.route {
            Route::Collection { store, .. } | Route::Object { store, .. } => {
                store.info().resource.clone()
            }
            _ => String::new(),
        }
    }

    /// Path and query, for the request log.
    pub fn uri(&self) -> String {
        if self.query.is_empty() {
            self.path.clone()
        } else {
            format!("{}?{}", self.path, self.query)
        }
    }

    /// Takes the validated options and rendering of a read (raising their errors now).
    pub fn take_read(&mut self) -> Result<(ListOptions, Rendering), ApiError> {
        let missing = || ApiError::Internal("read options were not parsed".into());
        let opts = self.options.take().ok_or_else(missing)??;
        let rendering = self.rendering.take().ok_or_else(missing)??;
        Ok((opts, rendering))
    }
}

/// What a read response holds per object.
pub enum Form {
    /// The objects.
    Objects,
    /// A `meta.k8s.io` Table.
    Table(TableFormat),
    /// PartialObjectMetadata.
    Metadata,
}

/// One media range of `Accept`.
pub struct MediaRange<'a> {
    media: &'a str,
    params: Vec<(&'a str, &'a str)>,
    q: f32,
}

impl MediaRange<'_> {
    fn param(&self, k: &str) -> Option<&str> {
        self.params.iter().find(|(pk, _)| *pk == k).map(|(_, v)| *v)
    }
}

/// `Accept`'s ranges, highest quality first (equal qualities keep their order), without
/// those of quality 0.
pub fn media_ranges(accept: &str) -> Vec<MediaRange<'_>> {
    let mut ranges: Vec<MediaRange<'_>> = accept
        .split(',')
        .filter_map(|range| {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().filter(|m| !m.is_empty())?;
            let mut params = Vec::new();
            let mut q = 1.0f32;
            for p in parts {
                if let Some((k, v)) = p.split_once('=') {
                    let (k, v) = (k.trim(), v.trim());
                    if k == "q" {
                        q = v.parse().unwrap_or(1.0);
                    } else {
                        params.push((k, v));
                    }
                }
            }
            (q > 0.0).then_some(MediaRange { media, params, q })
        })
        .collect();
    ranges.sort_by(|a, b| b.q.total_cmp(&a.q));
    ranges
}

/// Picks encoding and form from `Accept`'s ranges (`None`: no `Accept`) as kube-apiserver
/// does: ranges by quality; JSON
/// (`application/json`, `application/*`, `*/*`) or protobuf
/// (`application/vnd.kubernetes.protobuf`, built-in kinds only); `as=Table` (JSON only) or
/// `as=PartialObjectMetadata` (GET, watch) / `as=PartialObjectMetadataList` (LIST) of
/// `meta.k8s.io/v1`; 406 when nothing offered can be served.
pub fn negotiate(
    ranges: Option<&[MediaRange<'_>]>,
    params: &QueryParams,
    info: &ResourceInfo,
    verb: Verb,
) -> Result<(Encoding, Form), ApiError> {
    let Some(ranges) = ranges else {
        return Ok((Encoding::Json, Form::Objects));
    };
    for range in ranges {
        let encoding = match range.media {
            "application/json" | "application/*" | "*/*" => Encoding::Json,
            "application/vnd.kubernetes.protobuf" => Encoding::Protobuf,
            _ => continue,
        };
        let meta_v1 = range.param("g") == Some("meta.k8s.io") && range.param("v") == Some("v1");
        let form = match range.param("as") {
            None => Form::Objects,
            Some("Table")
                if encoding == Encoding::Json
                    && range.param("g") == Some("meta.k8s.io")
                    && matches!(range.param("v"), Some("v1" | "v1beta1")) =>
            {
                let include = match params.include_object.as_deref() {
                    Some("None") => IncludeObject::None,
                    Some("Object") => IncludeObject::Object,
                    _ => IncludeObject::Metadata,
                };
                Form::Table(TableFormat::new(
                    info,
                    range.param("v") == Some("v1beta1"),
                    include,
                ))
            }
            Some("PartialObjectMetadata") if meta_v1 && verb != Verb::List => Form::Metadata,
            Some("PartialObjectMetadataList") if meta_v1 && verb == Verb::List => Form::Metadata,
            Some(_) => continue,
        };
        // Custom resources have no protobuf form; their metadata does.
        if encoding == Encoding::Protobuf
            && matches!(form, Form::Objects)
            && !listwatch_codec::protobuf::has_protobuf(info)
        {
            continue;
        }
        return Ok((encoding, form));
    }
    Err(ApiError::NotAcceptable(
        "only the following media types are accepted: application/json, application/vnd.kubernetes.protobuf".to_string(),
    ))
}

/// The encoding of an error `Status`: protobuf when the client's preferred range is plain
/// `application/vnd.kubernetes.protobuf`, JSON otherwise.
pub fn error_encoding(ranges: Option<&[MediaRange<'_>]>) -> Encoding {
    match ranges.and_then(<[_]>::first) {
        Some(r) if r.media == "application/vnd.kubernetes.protobuf" && r.param("as").is_none() => {
            Encoding::Protobuf
        }
        _ => Encoding::Json,
    }
}

/// Whether `Accept-Encoding` lists gzip with a non-zero quality.
pub fn accepts_gzip(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|e| {
            let mut parts = e.split(';').map(str::trim);
            parts.next().is_some_and(|c| c.eq_ignore_ascii_case("gzip"))
                && !parts.any(|p| p.replace(' ', "") == "q=0")
        })
}
