//! listwatch-server: the hyper service serving LIST, GET, WATCH and watch-list.
//!
//! Request flow: [`routes::route`] decodes the path, [`request::ApiRequest::parse`] the query, verb,
//! list options and rendering once → admission ([`limits`]) and authorization read it →
//! [`handlers`] pick a snapshot or cursor by the RV rules, asking the [`Source`] for
//! revisions → codec's encoders lay out the bytes → [`body`] streams them to the socket as
//! the connection drains.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, header};
use hyper_util::rt::{TokioExecutor, TokioIo};
use listwatch_auth::review::ReviewKind;
use listwatch_auth::{Attributes, Authenticate, Authorizer, User};
use listwatch_core::{ApiError, Verb};
use listwatch_sources::{Registry, Source};
use tokio::net::TcpListener;
use tracing::warn;

pub mod body;
pub mod connection;
pub mod discovery;
pub mod handlers;
pub mod limits;
pub mod metrics;
pub mod request;
pub mod routes;

use body::{ResponseBody, full};
use request::ApiRequest;
use routes::{DiscoveryPath, Route};

/// Server tunables.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Bytes copied into one response chunk at most (per in-flight response).
    pub chunk_bytes: usize,
    /// How long a request for a future RV waits before 504 (kube-apiserver: 3 s).
    pub rv_wait: Duration,
    /// Default watch timeout base; the actual one is random in [this, 2×this).
    pub min_request_timeout: Duration,
    /// Period of bookmarks on watches that asked for them.
    pub bookmark_interval: Duration,
    /// Largest accepted write body (kube-apiserver: 3 MiB).
    pub max_body_bytes: usize,
    /// Address advertised in `/api` discovery.
    pub advertise: String,
    /// Admission limits (in-flight LISTs and watches, per-user watches, buffer budget).
    pub limits: limits::LimitConfig,
    /// Request-log lines at INFO per second (0: every request); beyond it requests are
    /// logged at DEBUG and counted in `listwatch_request_log_lines_suppressed_total`.
    pub request_log_per_second: u32,
    /// On shutdown, how long responses in flight (LISTs) may take to finish before their
    /// connections are closed (kube-apiserver's HTTP server waits 60 s). A response cut at
    /// this bound ends without its terminating chunk, so no client takes it for complete.
    pub shutdown_list_grace: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            chunk_bytes: listwatch_codec::DEFAULT_CHUNK,
            rv_wait: Duration::from_secs(3),
            min_request_timeout: Duration::from_secs(1800),
            bookmark_interval: Duration::from_secs(60),
            max_body_bytes: 3 << 20,
            advertise: "127.0.0.1:8080".into(),
            limits: limits::LimitConfig::default(),
            request_log_per_second: metrics::DEFAULT_REQUEST_LOG_PER_SECOND,
            shutdown_list_grace: Duration::from_secs(60),
        }
    }
}

/// The application: registry, source and configuration shared by all connections.
pub struct App {
    registry: Registry,
    source: Arc<dyn Source>,
    config: ServerConfig,
    metrics: Arc<metrics::Metrics>,
    /// None: `AlwaysAllow`.
    authorizer: Option<Arc<dyn Authorizer>>,
    limits: limits::Limits,
}

/// A request body of any type the host uses (boxed once per request).
pub type RequestBody =
    http_body_util::combinators::UnsyncBoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

impl App {
    /// An app over the embedded source, without an authorizer.
    pub fn embedded(
        source: Arc<listwatch_sources::EmbeddedSource>,
        config: ServerConfig,
    ) -> Arc<App> {
        Self::new(source, config, None)
    }

    /// An app serving `source`'s registry, with an optional authorizer.
    pub fn new(
        source: Arc<dyn Source>,
        config: ServerConfig,
        authorizer: Option<Arc<dyn Authorizer>>,
    ) -> Arc<App> {
        // The protobuf schema is parsed here rather than by the first protobuf request
        // (3 ms and 30,000 small allocations, once).
        listwatch_protobuf::Schema::kubernetes();
        Arc::new(App {
            registry: source.registry().clone(),
            source,
            metrics: Arc::new(metrics::Metrics::new(config.request_log_per_second)),
            authorizer,
            limits: limits::Limits::new(config.limits.clone()),
            config,
        })
    }

    /// An app authorizing with the cluster's own RBAC and Node authorizers, evaluated from
    /// `source`'s caches, which also answers `SubjectAccessReview` and
    /// `SelfSubjectAccessReview` (`kubectl auth can-i`).
    pub fn with_cluster_authorization(source: Arc<dyn Source>, config: ServerConfig) -> Arc<App> {
        App::with_cluster_authorization_and(source, config, None)
    }

    /// [`Self::with_cluster_authorization`], chained with `also` (an ABAC policy, say): a
    /// request either allows is allowed, and access reviews answer for the chain.
    pub fn with_cluster_authorization_and(
        source: Arc<dyn Source>,
        config: ServerConfig,
        also: Option<Arc<dyn Authorizer>>,
    ) -> Arc<App> {
        let authz = Arc::new(listwatch_auth::rbac::ClusterAuthorizer::new(
            source.registry(),
        ));
        let authorizer: Arc<dyn Authorizer> = match also {
            Some(other) => Arc::new(listwatch_auth::AnyOf(vec![authz, other])),
            None => authz,
        };
        App::new(source, config, Some(authorizer))
    }

    /// Whether this app answers `method` on `path` (read verbs on served resources): what
    /// an embedding host routes to us.
    pub fn handles(&self, method: &Method, path: &str) -> bool {
        self.read_route(method, path).is_some()
    }

    /// The route of `method` on `path` when this app answers it (a read of a served
    /// resource), for [`Self::handle_routed`]: a host decodes the path once.
    pub fn read_route(&self, method: &Method, path: &str) -> Option<Route> {
        if *method != Method::GET {
            return None;
        }
        let route = routes::route(&self.registry, path);
        matches!(route, Route::Collection { .. } | Route::Object { .. }).then_some(route)
    }

    /// The route of a GET of discovery (`/api`, `/apis`, their group-versions, in the
    /// aggregated form kubectl asks for too), `/version` or the health checks, for
    /// `path`: what an embedding host lets listwatch answer when it has no discovery of
    /// its own for the resources listwatch serves.
    pub fn discovery_route(&self, method: &Method, path: &str) -> Option<Route> {
        if *method != Method::GET {
            return None;
        }
        let route = routes::route(&self.registry, path);
        matches!(route, Route::Discovery(_)).then_some(route)
    }

    /// Time-based housekeeping of every store (trims event windows and retained snapshots);
    /// `serve` runs it every second, an embedding host calls it (or spawns it) itself.
    pub fn maintain(&self) {
        for s in self.registry.stores() {
            s.maintain();
        }
    }

    /// Starts draining: every open watch ends at a random moment within `grace` (like
    /// kube-apiserver's `--shutdown-watch-termination-grace-period`), so clients reconnect
    /// spread out rather than all at once; LISTs in flight finish normally.
    pub fn drain(&self, grace: Duration) {
        for s in self.registry.stores() {
            s.drain_watches(grace);
        }
    }

    /// Stops serving `group/version/resource` at runtime: its paths answer 404 and leave
    /// discovery, and its open watches end spread over `grace`, as on shutdown. Returns
    /// whether the resource was served.
    pub fn remove_resource(
        &self,
        group: &str,
        version: &str,
        resource: &str,
        grace: Duration,
    ) -> bool {
        match self.registry.get(group, version, resource) {
            Some(s) if !s.is_retired() => {
                s.retire(grace);
                true
            }
            _ => false,
        }
    }

    /// The served resources and their stores.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The source behind this app.
    pub fn source(&self) -> &Arc<dyn Source> {
        &self.source
    }

    /// Spawns the housekeeping loop ([`Self::maintain`] every second) on the current tokio
    /// runtime. [`Maintenance::shutdown`] stops it and waits; dropping the handle detaches
    /// the loop, as dropping a `JoinHandle` does.
    pub fn spawn_maintenance(self: &Arc<Self>) -> Maintenance {
        let app = self.clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            let mut stopped = Some(stopped);
            loop {
                tokio::select! {
                    _ = tick.tick() => app.maintain(),
                    r = async { stopped.as_mut().expect("guarded").await }, if stopped.is_some() => {
                        match r {
                            Ok(()) => break,
                            // The handle was dropped: keep running, detached.
                            Err(_) => stopped = None,
                        }
                    }
                }
            }
        });
        Maintenance { stop, task }
    }

    /// Answers one request (never fails: errors become `Status` responses).
    pub async fn handle(&self, req: Request<RequestBody>) -> Response<ResponseBody> {
        let route = routes::route(&self.registry, req.uri().path());
        self.handle_routed(req, route).await
    }

    /// [`Self::handle`] for a request whose path was already decoded into `route` (by
    /// [`Self::read_route`]).
    pub async fn handle_routed(
        &self,
        req: Request<RequestBody>,
        route: Route,
    ) -> Response<ResponseBody> {
        let start = std::time::Instant::now();
        let uri_len = req.uri().path().len() + req.uri().query().map_or(0, str::len);
        let mut req = ApiRequest::parse(req, route);
        let verb = req.verb;
        let in_flight = req.in_flight.take();
        let resource = req.resource_label();
        let uri = req.uri();
        let error_encoding = req.error_encoding;
        // Refused requests go the same way as failed ones: a Status, metered and logged.
        let (admission, answer) = match self.admit(&req, in_flight.as_ref(), uri_len) {
            Err(e) => (None, Err(e)),
            Ok(admission) => (admission, self.route(req).await),
        };
        let response = answer.unwrap_or_else(|e| handlers::error_response_in(&e, error_encoding));
        let (parts, body) = response.into_parts();
        let info = metrics::RequestInfo {
            verb,
            resource,
            uri,
            code: parts.status.as_u16(),
            start,
        };
        let admission = if parts.status.is_success() {
            admission
        } else {
            None
        };
        let body = metrics::MeteredBody::new(body, self.metrics.clone(), info)
            .hold(admission)
            .on_connection(in_flight);
        Response::from_parts(parts, http_body_util::BodyExt::boxed(body))
    }

    /// Dispatches a parsed request to discovery or a resource (after authorization).
    async fn route(&self, mut req: ApiRequest) -> handlers::Answer {
        match std::mem::replace(&mut req.route, Route::NotFound) {
            Route::Discovery(d) if req.method == Method::GET => {
                self.discovery(d, req.accept.as_deref(), req.params.verbose)
            }
            Route::Discovery(_) => Err(ApiError::MethodNotAllowed),
            Route::Collection {
                store,
                namespace,
                legacy_watch,
            } => {
                // kube-apiserver authorizes a list or watch with its selectors, but not one
                // reached through the legacy `/watch/` prefix.
                self.authorize(&req, &store, namespace.as_deref(), "", !legacy_watch)?;
                self.resource(req, store, namespace, None).await
            }
            Route::Object {
                store,
                namespace,
                name,
                ..
            } => {
                self.authorize(&req, &store, namespace.as_deref(), &name, false)?;
                self.resource(req, store, namespace, Some(name)).await
            }
            Route::Invalid(why) => Err(ApiError::BadRequest(why)),
            Route::NotFound => match ReviewKind::from_path(&req.path) {
                Some(kind) if req.method == Method::POST => self.access_review(req, kind).await,
                _ => Err(ApiError::UnknownPath),
            },
        }
    }

    /// `POST …/subjectaccessreviews` and `…/selfsubjectaccessreviews`: the decision the
    /// configured authorizer (`AlwaysAllow` without one) makes for the spec (or for the
    /// requester), as kube-apiserver answers it (201 with `status.allowed` and the reason).
    async fn access_review(&self, req: ApiRequest, kind: ReviewKind) -> handlers::Answer {
        let authorizer = self
            .authorizer
            .as_deref()
            .unwrap_or(&listwatch_auth::AlwaysAllow);
        let info = kind.resource_info();
        let user = req.user.clone().unwrap_or_else(User::anonymous);
        let create = Attributes::resource(user.clone(), "create", &info, None, "");
        if !authorizer.authorize(&create).allowed {
            return Err(ApiError::Forbidden(Box::new(
                listwatch_core::status::Denied {
                    user: req.user_name().to_string(),
                    verb: "create".into(),
                    object: listwatch_core::ObjectRef::new(&info, ""),
                    namespace: None,
                },
            )));
        }
        let body = handlers::read_request_body(&self.config, req.content_type.as_deref(), req.body)
            .await?;
        let review: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| ApiError::BadRequest(format!("invalid {}: {e}", kind.kind())))?;
        let review = listwatch_auth::review::answer(authorizer, kind, &user, review);
        Ok(json_response(http::StatusCode::CREATED, &review))
    }

    /// A `Status` response for a request refused before routing (e.g. 401).
    pub fn refuse(&self, e: &ApiError) -> Response<ResponseBody> {
        handlers::error_response(e)
    }

    /// Applies the admission limits to a read before any work is done for it.
    fn admit(
        &self,
        req: &ApiRequest,
        in_flight: Option<&connection::InFlight>,
        uri_len: usize,
    ) -> Result<Option<limits::Admission>, ApiError> {
        self.limits.check_uri(uri_len)?;
        let chunk = self.config.chunk_bytes;
        let conn = in_flight.map(connection::InFlight::connection);
        let who = limits::Requester {
            connection: conn.as_ref(),
            // Shares per user only for real identities: every unauthenticated client is
            // system:anonymous, and one share for all of them would let one starve the rest.
            user: req
                .user
                .as_ref()
                .map(|u| u.name.as_str())
                .filter(|u| *u != "system:anonymous"),
        };
        match req.verb {
            Verb::List => self.limits.admit_list(chunk, who).map(Some),
            Verb::Watch => {
                let initial = (req.params.send_initial_events == Some(true)).then_some(chunk);
                self.limits
                    .admit_watch(req.user_name(), initial, who)
                    .map(Some)
            }
            _ => Ok(None),
        }
    }

    fn authorize(
        &self,
        req: &ApiRequest,
        store: &listwatch_store::Store,
        namespace: Option<&str>,
        name: &str,
        selectors: bool,
    ) -> Result<(), ApiError> {
        let Some(authz) = &self.authorizer else {
            return Ok(());
        };
        let verb = req.verb.authz_name();
        let ns = if store.info().namespaced {
            namespace
        } else {
            None
        };
        // No user (a host that attached none): kube-apiserver's anonymous identity.
        let user = req.user.clone().unwrap_or_else(User::anonymous);
        let mut attributes = Attributes::resource(user, verb, store.info(), ns, name);
        if selectors {
            let p = &req.params;
            attributes = attributes.with_request_selectors(&p.field_selector, &p.label_selector);
        }
        if authz.authorize(&attributes).allowed {
            return Ok(());
        }
        Err(ApiError::Forbidden(Box::new(
            listwatch_core::status::Denied {
                user: req.user_name().to_string(),
                verb: verb.to_string(),
                // The name a `metadata.name` field selector pinned, as kube-apiserver's
                // message names it.
                object: listwatch_core::ObjectRef::new(store.info(), &attributes.name),
                namespace: ns.map(str::to_string),
            },
        )))
    }

    fn discovery(&self, d: DiscoveryPath, accept: Option<&str>, verbose: bool) -> handlers::Answer {
        let json = |v: serde_json::Value| Ok(json_response(http::StatusCode::OK, &v));
        let writable = self.source.writer().is_some();
        let aggregated = |core: bool, api_version: &str| {
            let mut b = serde_json::to_vec(&discovery::aggregated(
                &self.registry,
                core,
                writable,
                api_version,
            ))
            .unwrap_or_default();
            b.push(b'\n');
            let mut r = Response::new(full(b));
            let ct = format!(
                "application/json;g=apidiscovery.k8s.io;v={};as=APIGroupDiscoveryList",
                api_version.rsplit('/').next().unwrap_or("v2")
            );
            if let Ok(v) = http::HeaderValue::from_str(&ct) {
                r.headers_mut().insert(header::CONTENT_TYPE, v);
            }
            r.headers_mut()
                .insert(header::VARY, http::HeaderValue::from_static("Accept"));
            Ok(r)
        };
        match d {
            DiscoveryPath::Api => match discovery::wants_aggregated(accept) {
                Some(v) => aggregated(true, v),
                None => json(discovery::api(&self.config.advertise)),
            },
            DiscoveryPath::Apis => match discovery::wants_aggregated(accept) {
                Some(v) => aggregated(false, v),
                None => json(discovery::apis(&self.registry)),
            },
            DiscoveryPath::Group(g) => {
                discovery::group(&self.registry, &g).map_or(Err(ApiError::UnknownPath), json)
            }
            DiscoveryPath::GroupVersion(g, v) => {
                discovery::resource_list(&self.registry, &g, &v, writable)
                    .map_or(Err(ApiError::UnknownPath), json)
            }
            DiscoveryPath::Version => json(discovery::version()),
            DiscoveryPath::Health => {
                let mut r = Response::new(full(Bytes::from_static(b"ok")));
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    http::HeaderValue::from_static("text/plain; charset=utf-8"),
                );
                Ok(r)
            }
            DiscoveryPath::Ready => {
                // kube-apiserver's format: one [+]/[-] line per check when failing or asked
                // (`?verbose`), a bare "ok" otherwise; a failed check's reason is withheld
                // (the probe needs no credentials; the log has the cause).
                let mut text = String::new();
                let source_ok = self.source.health().is_ok();
                let mut ok = source_ok;
                let check = self.source.health_check_name();
                text.push_str(&if source_ok {
                    format!("[+]{check} ok\n")
                } else {
                    format!("[-]{check} failed: reason withheld\n")
                });
                for s in self.registry.stores() {
                    let ready = s.is_ready();
                    ok &= ready;
                    let i = s.info();
                    text.push_str(&format!(
                        "[{}]cache {}{}{} {}\n",
                        if ready { '+' } else { '-' },
                        i.resource,
                        if i.group.is_empty() { "" } else { "." },
                        i.group,
                        if ready { "ok" } else { "not ready" }
                    ));
                }
                if ok && !verbose {
                    text = "ok".into();
                } else if ok {
                    text.push_str("readyz check passed\n");
                } else {
                    text.push_str("readyz check failed\n");
                }
                let mut r = Response::new(full(Bytes::from(text)));
                *r.status_mut() = if ok {
                    http::StatusCode::OK
                } else {
                    http::StatusCode::INTERNAL_SERVER_ERROR
                };
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    http::HeaderValue::from_static("text/plain; charset=utf-8"),
                );
                Ok(r)
            }
            DiscoveryPath::Metrics => {
                let text = self
                    .metrics
                    .render(self.registry.stores().iter(), self.source.skipped_values());
                let mut r = Response::new(full(text));
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    http::HeaderValue::from_static(
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    ),
                );
                Ok(r)
            }
        }
    }
}

/// Boxes any request body into [`RequestBody`] (for [`App::handle`]).
pub fn box_body<B>(body: B) -> RequestBody
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    http_body_util::BodyExt::boxed_unsync(http_body_util::BodyExt::map_err(
        body,
        |e| -> Box<dyn std::error::Error + Send + Sync> { e.into() },
    ))
}

/// The housekeeping loop of [`App::spawn_maintenance`], owned: shut it down to stop it.
pub struct Maintenance {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Maintenance {
    /// Stops the loop and waits for it to end.
    pub async fn shutdown(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// How the standalone server accepts connections.
#[derive(Clone, Default)]
pub struct ServeOptions {
    /// TLS (with ALPN h2/http1.1); plaintext HTTP/1.1 and h2c without it.
    #[cfg(feature = "standalone")]
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Authenticates every request; without it requests carry no user (embedding hosts
    /// put their own [`User`] into the request extensions).
    pub authenticator: Option<Arc<dyn Authenticate>>,
    /// On shutdown, open watches end spread over this period (0: all at once).
    pub watch_grace: Duration,
}

/// A JSON body (newline-terminated, as Go's encoder writes it) with `code`.
fn json_response(code: http::StatusCode, v: &serde_json::Value) -> Response<ResponseBody> {
    let mut b = serde_json::to_vec(v).unwrap_or_default();
    b.push(b'\n');
    let mut r = Response::new(full(b));
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

/// Serves `app` on `listener` (HTTP/1.1 and h2c) until `shutdown` completes.
pub async fn serve(
    app: Arc<App>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    serve_with(app, listener, ServeOptions::default(), shutdown).await
}

/// Accept errors (EMFILE and friends) are retried after a growing pause and logged at most
/// once per this interval, with the count of those not logged.
const ACCEPT_ERROR_LOG_EVERY: Duration = Duration::from_secs(10);

/// Serves `app` on `listener` with `options` until `shutdown` completes, then drains:
/// stops accepting, lets LISTs in flight finish, ends watches spread over
/// `options.watch_grace`, and returns when every connection is done (or the grace period
/// plus 10 s has passed) and the housekeeping loop has stopped.
pub async fn serve_with(
    app: Arc<App>,
    listener: TcpListener,
    options: ServeOptions,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let maintenance = app.spawn_maintenance();
    #[cfg(feature = "standalone")]
    let tls = options.tls.clone().map(tokio_rustls::TlsAcceptor::from);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    let mut backoff = Duration::ZERO;
    let mut last_logged: Option<std::time::Instant> = None;
    let mut suppressed = 0u64;
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => {
                    backoff = Duration::ZERO;
                    x
                }
                Err(e) => {
                    // Out of descriptors: retrying at once would spin and flood the log.
                    backoff = (backoff * 2).clamp(Duration::from_millis(10), Duration::from_secs(1));
                    if last_logged.is_none_or(|t| t.elapsed() >= ACCEPT_ERROR_LOG_EVERY) {
                        warn!(error = %e, retry_in = ?backoff, suppressed, "accept failed");
                        last_logged = Some(std::time::Instant::now());
                        suppressed = 0;
                    } else {
                        suppressed += 1;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => continue,
                        _ = &mut shutdown => break,
                    }
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let authn = options.authenticator.clone();
        #[cfg(feature = "standalone")]
        let tls = tls.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            #[cfg(feature = "standalone")]
            if let Some(acceptor) = tls {
                // A client that never finishes its handshake does not hold a task forever.
                let accepted =
                    tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await;
                let Ok(Ok(tls_stream)) = accepted else {
                    tracing::debug!(%peer, "TLS handshake failed or timed out");
                    return;
                };
                let cert_user = tls_stream
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .and_then(listwatch_auth::tls::user_from_cert);
                let io = TokioIo::new(tls_stream);
                serve_connection(app, authn, cert_user, io, watcher, peer).await;
                return;
            }
            serve_connection(app, authn, None, TokioIo::new(stream), watcher, peer).await
        });
    }
    drop(listener);
    tracing::info!(grace = ?options.watch_grace, "draining: LISTs finish, watches end spread over the grace period");
    app.drain(options.watch_grace);
    // Watches end within their grace; LISTs (and other responses) get theirs to finish.
    let limit = (options.watch_grace + Duration::from_secs(10)).max(app.config.shutdown_list_grace);
    if tokio::time::timeout(limit, graceful.shutdown())
        .await
        .is_err()
    {
        warn!(after = ?limit, "responses still in flight after the shutdown grace; closing their connections");
    }
    maintenance.shutdown().await;
    Ok(())
}

/// A process-wide request number for the request span (`id`), to find one request's lines.
fn next_request_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Counts a request as abandoned by its client unless it was answered (see
/// `connection::InFlight::cancelled`).
struct AbandonGuard(Option<connection::InFlight>);

impl AbandonGuard {
    fn answered(mut self) {
        self.0 = None;
    }
}

impl Drop for AbandonGuard {
    fn drop(&mut self) {
        if let Some(in_flight) = self.0.take() {
            in_flight.cancelled();
        }
    }
}

async fn serve_connection<I>(
    app: Arc<App>,
    authn: Option<Arc<dyn Authenticate>>,
    cert_user: Option<User>,
    io: TokioIo<I>,
    watcher: hyper_util::server::graceful::Watcher,
    peer: std::net::SocketAddr,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let chunk = app.config.chunk_bytes;
    let resets = app.config.limits.max_h2_pending_resets;
    let max_cancelled = app.config.limits.max_cancelled_requests;
    let timeouts = app.config.limits.connection;
    let connection = connection::Connection::new();
    let on_conn = connection.clone();
    let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
        let in_flight = on_conn.begin();
        let app = app.clone();
        let authn = authn.clone();
        let cert_user = cert_user.clone();
        // Every log line of this request, its response body included, carries these.
        let span = tracing::info_span!(
            "request",
            id = next_request_id(),
            method = %req.method(),
            path = req.uri().path(),
            user = tracing::field::Empty,
        );
        // Boxed: the connection (HTTP/1) or stream task (HTTP/2) would otherwise embed the
        // whole handler state machine (~6.6 KB, sized for its largest state) for as long as
        // the response streams — most of an idle watch's cost. Boxed, it is freed once the
        // response head is ready and only the body stays (measured with dhat, docs/memory.md).
        Box::pin(tracing::Instrument::instrument(
            async move {
                // A request dropped before its response is ready was abandoned by the client.
                let abandoned = AbandonGuard(Some(in_flight.clone()));
                let (mut head, body) = req.into_parts();
                head.extensions.insert(in_flight);
                if let Some(authn) = &authn {
                    match authn.authenticate(&head, cert_user.as_ref()).await {
                        Ok(user) => {
                            tracing::Span::current().record("user", user.name.as_str());
                            head.extensions.insert(user);
                        }
                        Err(e) => {
                            abandoned.answered();
                            return Ok::<_, Infallible>(app.refuse(&e));
                        }
                    }
                }
                let req = Request::from_parts(head, box_body(body));
                let response = app.handle(req).await;
                abandoned.answered();
                Ok::<_, Infallible>(response)
            },
            span,
        ))
    });
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    // hyper queues body chunks by reference (writev) until this many bytes are pending,
    // then stops polling the body: a stalled reader holds about one chunk here plus one in
    // the encoder, whatever the response's size. It also bounds a request head (431).
    builder
        .http1()
        .max_buf_size(chunk.max(16 * 1024))
        .max_headers(128)
        .timer(hyper_util::rt::TokioTimer::new())
        // A client that trickles its request head (slowloris) is cut off.
        .header_read_timeout(Duration::from_secs(30));
    builder
        .http2()
        .timer(hyper_util::rt::TokioTimer::new())
        .max_header_list_size(u32::try_from(chunk.max(16 * 1024)).unwrap_or(u32::MAX))
        .max_concurrent_streams(1000)
        // HTTP/2 rapid reset (CVE-2023-44487): cap streams reset before completion.
        .max_pending_accept_reset_streams(Some(match resets {
            0 => usize::MAX,
            n => n,
        }))
        .max_local_error_reset_streams(Some(256));
    let conn = builder.serve_connection_with_upgrades(io, svc);
    tokio::select! {
        r = watcher.watch(conn.into_owned()) => {
            if let Err(e) = r {
                tracing::debug!(%peer, error = %e, "connection ended");
            }
        }
        // Dropping the connection closes it: idle ones have nothing in flight, and a
        // response its client stopped reading ends with it.
        why = connection.watchdog(timeouts, max_cancelled) => tracing::debug!(%peer, why, "closing connection"),
    }
}
