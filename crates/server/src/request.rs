//! The front door: every request is parsed once into an [`ApiRequest`] — a [`RequestHead`]
//! every stage reads (admission, authorization, metrics, the request log) and a
//! [`RequestKind`] that says what it is, with the options that kind needs already
//! validated. Parse errors of a read are kept, not raised, so each surfaces where
//! kube-apiserver raises it (after authentication and authorization).

use http::{Method, Request, header};
use listwatch_auth::User;
use listwatch_auth::review::ReviewKind;
use listwatch_codec::render::{error_encoding, media_ranges, negotiate};
use listwatch_codec::{Encoding, Rendering};
use listwatch_core::fields::FieldTerm;
use listwatch_core::{ApiError, ListOptions, QueryParams, Verb};
use listwatch_patch::PatchType;

use crate::RequestBody;
use crate::connection::InFlight;
pub use crate::routes::Target;
use crate::routes::{DiscoveryPath, Route};

/// One request, parsed once.
pub struct ApiRequest {
    /// What every stage reads.
    pub head: RequestHead,
    /// What the request is.
    pub kind: RequestKind,
}

/// What every request carries, whatever it addresses.
pub struct RequestHead {
    /// HTTP method.
    pub method: Method,
    /// Path, for logs.
    pub path: String,
    /// Raw query, for logs.
    pub query: String,
    /// What the request does (`Other` for everything but a resource's verbs).
    pub verb: Verb,
    /// Decoded query parameters.
    pub params: QueryParams,
    /// The encoding an error `Status` is sent in (protobuf when the client asked for
    /// plain protobuf, as kube-apiserver answers it).
    pub error_encoding: Encoding,
    /// The authenticated user the connection or host attached, if any.
    pub user: Option<User>,
    /// The request's place on its connection (standalone server only).
    pub in_flight: Option<InFlight>,
}

/// A read's validated options.
pub struct Read {
    /// List options (a watch of one name carries it as a `metadata.name` field term).
    pub options: ListOptions,
    /// The negotiated rendering.
    pub rendering: Rendering,
}

/// A request's body with its `Content-Type` (writes, `scale`, access reviews).
pub struct Payload {
    /// `Content-Type` of the body.
    pub content_type: Option<String>,
    /// The body.
    pub body: RequestBody,
}

/// What a request is, by kind, each with what its handler needs.
pub enum RequestKind {
    /// LIST, GET, WATCH or watch-list of a served resource; the options' error, if any,
    /// is raised after authorization.
    Read {
        /// What is read.
        target: Target,
        /// The validated options, or why they are invalid.
        read: Result<Read, ApiError>,
    },
    /// Any other method on a served resource: the source's writer decides.
    Write {
        /// What is written.
        target: Target,
        /// The body.
        payload: Payload,
    },
    /// GET, PUT or PATCH of an object's subresource: `scale` (autoscaling/v1 `Scale`) or
    /// `status` (the object, of which a write changes `.status` only).
    Subresource {
        /// The object, with the subresource named.
        target: Target,
        /// The body.
        payload: Payload,
    },
    /// A GET of discovery, health, readiness, metrics.
    Discovery {
        /// Which.
        path: DiscoveryPath,
        /// `Accept`, for discovery's own negotiation.
        accept: Option<String>,
    },
    /// A GET of an OpenAPI document.
    OpenApi {
        /// The request's headers (`Accept`, `If-None-Match`).
        headers: http::HeaderMap,
    },
    /// `POST …/subjectaccessreviews` or `…/selfsubjectaccessreviews`.
    AccessReview {
        /// Which review.
        kind: ReviewKind,
        /// The review.
        payload: Payload,
    },
    /// Not served here: the error it is answered with (the gateway passes these on).
    Refused(ApiError),
    /// Not served here, for the configured [`crate::PassThrough`]: head and body intact.
    PassThrough(Request<RequestBody>),
}

impl ApiRequest {
    /// Parses `req`, whose path `routes::route` already decoded into `route`; with `pass`
    /// (an upstream is configured) what is not a read or a local probe is passed on.
    pub fn parse(req: Request<RequestBody>, route: Route, pass: bool) -> ApiRequest {
        let passes = pass
            && match &route {
                // Reads of resources stay; writes and subresources (`status`, `scale`:
                // the upstream's own, with its admission) go on.
                Route::Resource(t) => req.method() != Method::GET || t.subresource.is_some(),
                Route::Discovery(p) => !p.is_local(),
                _ => true,
            };
        let (mut parts, body) = req.into_parts();
        let (path, method) = (parts.uri.path().to_string(), parts.method.clone());
        let (user, in_flight) = (
            parts.extensions.get::<User>().cloned(),
            parts.extensions.remove::<InFlight>(),
        );
        let header = |name: header::HeaderName| {
            parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let accept = header(header::ACCEPT);
        let content_type = header(header::CONTENT_TYPE);
        let query = parts.uri.query().unwrap_or("").to_string();
        let params = QueryParams::decode(&query);
        // Parsed once: for a read's rendering and for an error's encoding.
        let ranges = accept
            .as_deref()
            .filter(|a| !a.trim().is_empty())
            .map(media_ranges);
        let mut verb = Verb::Other;
        let kind = match route {
            _ if passes => RequestKind::PassThrough(Request::from_parts(parts, body)),
            Route::Resource(target) => {
                let object = target.name.is_some();
                let watch = target.legacy_watch || params.flags.watch;
                verb = Verb::of(method.as_str(), object, watch);
                // kube's request info labels a server-side apply `APPLY`, other patches `PATCH`.
                let apply = PatchType::Apply.media_type();
                if verb == Verb::Patch
                    && content_type
                        .as_deref()
                        .is_some_and(|ct| ct.starts_with(apply))
                {
                    verb = Verb::Apply;
                }
                if target.subresource.is_some() {
                    RequestKind::Subresource {
                        target,
                        payload: Payload { content_type, body },
                    }
                } else {
                    resource_kind(
                        target,
                        verb,
                        &params,
                        ranges.as_deref(),
                        &parts.headers,
                        Payload { content_type, body },
                    )
                }
            }
            Route::Discovery(DiscoveryPath::OpenApi) if method == Method::GET => {
                RequestKind::OpenApi {
                    headers: parts.headers.clone(),
                }
            }
            Route::Discovery(p) if method == Method::GET => RequestKind::Discovery {
                path: p,
                accept: accept.clone(),
            },
            Route::Discovery(_) => RequestKind::Refused(ApiError::MethodNotAllowed),
            Route::Invalid(why) => RequestKind::Refused(ApiError::BadRequest(why)),
            Route::NotFound => match ReviewKind::from_path(&path) {
                Some(kind) if method == Method::POST => RequestKind::AccessReview {
                    kind,
                    payload: Payload { content_type, body },
                },
                _ => RequestKind::Refused(ApiError::UnknownPath),
            },
        };
        let error_encoding = error_encoding(ranges.as_deref());
        let head = RequestHead {
            path,
            query,
            verb,
            error_encoding,
            user,
            in_flight,
            params,
            method,
        };
        ApiRequest { head, kind }
    }

    /// The resource label of metrics and logs ("" for non-resource paths).
    pub fn resource_label(&self) -> String {
        match &self.kind {
            RequestKind::Read { target, .. }
            | RequestKind::Write { target, .. }
            | RequestKind::Subresource { target, .. } => target.store.info().resource.clone(),
            _ => String::new(),
        }
    }
}

impl RequestHead {
    /// The user's name, `system:anonymous` without one.
    pub fn user_name(&self) -> &str {
        self.user
            .as_ref()
            .map_or("system:anonymous", |u| u.name.as_str())
    }

    /// Path and query, for the request log.
    pub fn uri(&self) -> String {
        if self.query.is_empty() {
            self.path.clone()
        } else {
            format!("{}?{}", self.path, self.query)
        }
    }
}

/// A request to a served resource: a read with its options validated (errors kept), or a
/// write with its body.
#[allow(clippy::too_many_arguments)]
fn resource_kind(
    target: Target,
    verb: Verb,
    params: &QueryParams,
    ranges: Option<&[listwatch_codec::render::MediaRange<'_>]>,
    headers: &http::HeaderMap,
    payload: Payload,
) -> RequestKind {
    // `Verb::of` gives List only for collections and Get only for objects.
    if !matches!(verb, Verb::List | Verb::Get | Verb::Watch) {
        return RequestKind::Write { target, payload };
    }
    let info = target.store.info();
    let options =
        ListOptions::from_params(params, info, target.namespace.as_deref()).map(|mut o| {
            o.flags.watch |= target.legacy_watch;
            if let (Verb::Watch, Some(name)) = (verb, &target.name) {
                // Watching one object is a watch with a name field selector.
                o.field_selector.terms.push(FieldTerm {
                    field: "metadata.name".into(),
                    value: name.clone(),
                    negated: false,
                });
            }
            o
        });
    let rendering = negotiate(ranges, params, info, verb).map(|(encoding, form)| Rendering {
        encoding,
        form,
        gzip: accepts_gzip(headers),
    });
    let read = options.and_then(|options| {
        Ok(Read {
            options,
            rendering: rendering?,
        })
    });
    RequestKind::Read { target, read }
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
