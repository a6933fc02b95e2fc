//! The one dispatch: a parsed request is admitted, authorized and sent on by one `match`
//! over its kind; every answer is metered and logged the same way.

use std::sync::Arc;
use std::time::Instant;

use http::{Request, Response, StatusCode};
use listwatch_auth::review::ReviewKind;
use listwatch_auth::{Attributes, Authorizer, User};
use listwatch_core::status::Denied;
use listwatch_core::{ApiError, ObjectRef, Verb};
use listwatch_metrics::{Metrics, RequestInfo, request_log_enabled};
use listwatch_sources::{Registry, Source};

use crate::body::ResponseBody;
use crate::connection::InFlight;
use crate::handlers::{self, Ctx};
use crate::request::{ApiRequest, Payload, RequestHead, RequestKind, Target};
use crate::response::{self, Answer};
use crate::routes::Route;
use crate::{RequestBody, ServerConfig, discovery, limits, metrics};

/// Everything a request is served with: registry, source, configuration, metrics,
/// authorizer and admission limits.
pub(crate) struct Service {
    pub registry: Registry,
    pub source: Arc<dyn Source>,
    pub config: ServerConfig,
    pub metrics: Arc<Metrics>,
    /// None: `AlwaysAllow`.
    pub authorizer: Option<Arc<dyn Authorizer>>,
    pub limits: limits::Limits,
    /// This app's window of protobuf items shared by concurrent responses.
    pub sharing: listwatch_codec::Sharing,
    /// The OpenAPI documents, rebuilt when what is served changes.
    pub openapi: listwatch_openapi::OpenApiCache,
    /// Where requests not served here go, when an upstream is configured.
    pub pass_through: std::sync::OnceLock<Arc<dyn crate::PassThrough>>,
    /// Protobuf lengths measured ahead of LISTs; readiness waits for the first pass.
    pub lengths: listwatch_codec::lengths::LengthMeasuring,
    /// Set by [`crate::App::begin_shutdown`]: readiness fails.
    pub shutting_down: std::sync::atomic::AtomicBool,
}

impl Service {
    /// Answers one request whose path was decoded into `route` (never fails: errors become
    /// `Status` responses).
    pub async fn handle(&self, req: Request<RequestBody>, route: Route) -> Response<ResponseBody> {
        let start = Instant::now();
        let uri_len = req.uri().path().len() + req.uri().query().map_or(0, str::len);
        let (mut parts, body) = req.into_parts();
        let impersonated = self.impersonate(&mut parts).await;
        let req = Request::from_parts(parts, body);
        let mut req = ApiRequest::parse(req, route, self.pass_through.get().is_some());
        let in_flight = req.head.in_flight.take();
        let resource = req.resource_label();
        let (verb, error_encoding) = (req.head.verb, req.head.error_encoding);
        // Kept only for the request's log line: a watch would hold it for life unwritten.
        let uri = if request_log_enabled() {
            req.head.uri().into_boxed_str()
        } else {
            Box::default()
        };
        // Refused requests go the same way as failed ones: a Status, metered and logged.
        let admitted =
            impersonated.and_then(|()| self.admit(&req.head, in_flight.as_ref(), uri_len));
        let (admission, answer) = match admitted {
            Err(e) => (None, Err(e)),
            Ok(mut admission) => {
                // A watch-list's LIST share goes with its body (a LIST's stays held here).
                let list_seat = (verb == Verb::Watch)
                    .then(|| admission.as_mut()?.take_list_seat())
                    .flatten();
                (admission, self.dispatch(req, list_seat).await)
            }
        };
        let response = answer.unwrap_or_else(|e| response::error(&e, error_encoding));
        let (parts, body) = response.into_parts();
        let info = RequestInfo {
            verb,
            resource,
            uri,
            code: parts.status.as_u16(),
            start,
        };
        let admission = admission.filter(|_| parts.status.is_success());
        let body = metrics::MeteredBody::new(body, self.metrics.clone(), info)
            .hold(admission)
            .on_connection(in_flight);
        Response::from_parts(parts, http_body_util::BodyExt::boxed(body))
    }

    /// kube-apiserver's impersonation step, after authentication and before anything else:
    /// with `Impersonate-*` headers the request goes on as the impersonated user, once the
    /// authorizer allowed the authenticated one to impersonate it (403 otherwise), so reads
    /// served here are authorized and answered as that user. Only with an authorizer: under
    /// `AlwaysAllow` anyone could become anyone, and a gateway would carry that identity
    /// upstream, where the cluster's own rules apply; there the headers stay as they came
    /// (the gateway refuses them unless it forwards the client's credential).
    async fn impersonate(&self, parts: &mut http::request::Parts) -> Result<(), ApiError> {
        use listwatch_auth::impersonation;
        let Some(authorizer) = self.authorizer.as_deref() else {
            return Ok(());
        };
        if !impersonation::requested(&parts.headers) {
            return Ok(());
        }
        let requester = parts
            .extensions
            .get::<User>()
            .cloned()
            .unwrap_or_else(User::anonymous);
        if let Some(user) =
            impersonation::impersonate(authorizer, &requester, &parts.headers).await?
        {
            tracing::Span::current().record("user", user.name.as_str());
            parts.extensions.insert(user);
            parts.extensions.insert(impersonation::Impersonated);
        }
        Ok(())
    }

    /// The one `match`: each kind to its handler, resources after authorization.
    async fn dispatch(&self, req: ApiRequest, list_seat: Option<Box<limits::ListSeat>>) -> Answer {
        let ApiRequest { head, kind } = req;
        let ctx = Ctx {
            source: &*self.source,
            config: &self.config,
            sharing: &self.sharing,
        };
        match kind {
            RequestKind::Read { target, read } => {
                self.authorize(&head, &target).await?;
                handlers::read(ctx, head.verb, target, read, list_seat).await
            }
            RequestKind::Write { target, payload } => {
                self.authorize(&head, &target).await?;
                handlers::write(ctx, &head, target, payload).await
            }
            RequestKind::Subresource { target, payload } => {
                self.authorize(&head, &target).await?;
                handlers::subresource(ctx, &head, target, payload).await
            }
            RequestKind::Discovery { path, accept } => {
                let d = discovery::Discovery {
                    registry: &self.registry,
                    source: &*self.source,
                    server: listwatch_openapi::discovery::ServerInfo {
                        writable: self.source.writer().is_some(),
                        advertise: &self.config.advertise,
                        git_commit: &self.config.git_commit,
                    },
                    metrics: &self.metrics,
                    pass_through: self.pass_through.get().map(|p| &**p),
                    lengths_measured: self.lengths.first_pass_done(),
                    shutting_down: self
                        .shutting_down
                        .load(std::sync::atomic::Ordering::Acquire),
                };
                d.respond(path, accept.as_deref(), head.params.verbose)
            }
            RequestKind::OpenApi { headers } => {
                let verbs = listwatch_openapi::discovery::verbs(self.source.writer().is_some());
                let docs = self.openapi.docs(&self.registry, &verbs);
                listwatch_openapi::respond(&docs, &head.path, &head.query, &headers)
                    .map(|r| r.map(crate::body::full))
            }
            RequestKind::AccessReview { kind, payload } => {
                self.access_review(&head, kind, payload).await
            }
            RequestKind::Refused(e) => Err(e),
            RequestKind::PassThrough(req) => match self.pass_through.get() {
                Some(p) => Ok(p.forward(req, head.user).await),
                None => Err(ApiError::UnknownPath),
            },
        }
    }

    /// `POST …/subjectaccessreviews` and `…/selfsubjectaccessreviews`: the decision the
    /// configured authorizer (`AlwaysAllow` without one) makes for the spec (or for the
    /// requester), as kube-apiserver answers it (201 with `status.allowed` and the reason).
    async fn access_review(
        &self,
        head: &RequestHead,
        kind: ReviewKind,
        payload: Payload,
    ) -> Answer {
        let authorizer = self
            .authorizer
            .as_deref()
            .unwrap_or(&listwatch_auth::AlwaysAllow);
        let info = kind.resource_info();
        let user = head.user.clone().unwrap_or_else(User::anonymous);
        let create = Attributes::resource(user.clone(), "create", &info, None, "");
        let d = authorizer.authorize_async(&create).await;
        if !d.allowed {
            return Err(refusal(d, head, "create", &info, "", None));
        }
        let body = handlers::read_request_body(&self.config, payload).await?;
        let review: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| ApiError::BadRequest(format!("invalid {}: {e}", kind.kind())))?;
        let review = listwatch_auth::review::answer(authorizer, kind, &user, review).await;
        Ok(response::json_value(StatusCode::CREATED, &review))
    }

    /// Applies the admission limits to a read before any work is done for it.
    fn admit(
        &self,
        head: &RequestHead,
        in_flight: Option<&InFlight>,
        uri_len: usize,
    ) -> Result<Option<limits::Admission>, ApiError> {
        self.limits.check_uri(uri_len)?;
        let chunk = self.config.chunk_bytes;
        let conn = in_flight.map(InFlight::connection);
        let who = limits::Requester {
            connection: conn.as_ref(),
            // Shares per user only for real identities: every unauthenticated client is
            // system:anonymous, and one share for all of them would let one starve the rest.
            user: head
                .user
                .as_ref()
                .map(|u| u.name.as_str())
                .filter(|u| *u != "system:anonymous"),
        };
        match head.verb {
            Verb::List => self.limits.admit_list(chunk, who).map(Some),
            Verb::Watch => {
                let initial =
                    (head.params.flags.send_initial_events == Some(true)).then_some(chunk);
                self.limits
                    .admit_watch(head.user_name(), initial, who)
                    .map(Some)
            }
            _ => Ok(None),
        }
    }

    /// Asks the authorizer (none: `AlwaysAllow`) whether the request's user may do its verb
    /// on `target`; kube-apiserver's 403 otherwise.
    async fn authorize(&self, head: &RequestHead, target: &Target) -> Result<(), ApiError> {
        let Some(authz) = &self.authorizer else {
            return Ok(());
        };
        let info = target.store.info();
        let verb = head.verb.authz_name();
        let ns = target.namespace.as_deref().filter(|_| info.namespaced);
        let name = target.name.as_deref().unwrap_or("");
        // No user (a host that attached none): kube-apiserver's anonymous identity.
        let user = head.user.clone().unwrap_or_else(User::anonymous);
        let mut attributes = Attributes::resource(user, verb, info, ns, name);
        // `deployments/scale`, `pods/status`: RBAC grants subresources by that name.
        attributes.subresource = target.subresource.clone().unwrap_or_default();
        // kube-apiserver authorizes a list or watch with its selectors, but not one reached
        // through the legacy `/watch/` prefix.
        if target.name.is_none() && !target.legacy_watch {
            let p = &head.params;
            attributes = attributes.with_request_selectors(&p.field_selector, &p.label_selector);
        }
        let d = authz.authorize_async(&attributes).await;
        if d.allowed {
            return Ok(());
        }
        // The name a `metadata.name` field selector pinned, as kube-apiserver's message
        // names it.
        Err(refusal(d, head, verb, info, &attributes.name, ns))
    }
}

/// What a request not allowed gets: kube-apiserver's 500 when an authorizer could not
/// decide (an unreachable webhook), else its 403 naming the user, verb and object.
fn refusal(
    d: listwatch_auth::Decision,
    head: &RequestHead,
    verb: &str,
    info: &listwatch_core::ResourceInfo,
    name: &str,
    namespace: Option<&str>,
) -> ApiError {
    if let Some(e) = d.error {
        return ApiError::Internal(format!("Internal error occurred: {e}"));
    }
    ApiError::Forbidden(Box::new(Denied {
        user: head.user_name().to_string(),
        verb: verb.to_string(),
        object: ObjectRef::new(info, name),
        namespace: namespace.map(str::to_string),
    }))
}
