//! listwatch-server: the hyper service serving LIST, GET, WATCH and watch-list.
//!
//! Request flow: [`routes::route`] decodes the path → `ListOptions::parse` (core) decodes
//! the query → [`handlers`] pick a snapshot or cursor by the RV rules → [`body`] streams
//! chunks from it to the socket as the connection drains.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, header};
use hyper_util::rt::{TokioExecutor, TokioIo};
use listwatch_core::ApiError;
use listwatch_etcd::EtcdSource;
use listwatch_sources::embedded::WriteResult;
use listwatch_sources::{EmbeddedSource, HostFedSource, Registry};
use tokio::net::TcpListener;
use tracing::warn;

pub mod auth;
pub mod body;
pub mod discovery;
pub mod handlers;
pub mod limits;
pub mod metrics;
pub mod routes;
pub mod security;

use body::{ResponseBody, full};
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
        }
    }
}

/// Where the data comes from, and where writes and consistent reads go.
pub enum Backend {
    /// The in-process store (default).
    Embedded(Arc<EmbeddedSource>),
    /// Changes pushed by an embedding host; reads only.
    HostFed(Arc<HostFedSource>),
    /// A real etcd, followed; writes go to etcd in transactions.
    Etcd(Arc<EtcdSource>),
}

/// The application: registry, backend and configuration shared by all connections.
pub struct App {
    registry: Registry,
    backend: Backend,
    config: ServerConfig,
    metrics: Arc<metrics::Metrics>,
    authorizer: Option<Arc<dyn auth::Authorizer>>,
    limits: limits::Limits,
}

/// A request body of any type the host uses (boxed once per request).
pub type RequestBody =
    http_body_util::combinators::UnsyncBoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

impl App {
    /// An app over the embedded source.
    pub fn embedded(source: Arc<EmbeddedSource>, config: ServerConfig) -> Arc<App> {
        Self::new(
            source.registry().clone(),
            Backend::Embedded(source),
            config,
            None,
        )
    }

    /// An app over `backend`, with an optional authorizer.
    pub fn new(
        registry: Registry,
        backend: Backend,
        config: ServerConfig,
        authorizer: Option<Arc<dyn auth::Authorizer>>,
    ) -> Arc<App> {
        Arc::new(App {
            registry,
            backend,
            metrics: Arc::new(metrics::Metrics::default()),
            authorizer,
            limits: limits::Limits::new(config.limits.clone()),
            config,
        })
    }

    /// Whether this app answers `method` on `path` (read verbs on served resources): what
    /// an embedding host routes to us.
    pub fn handles(&self, method: &Method, path: &str) -> bool {
        *method == Method::GET
            && matches!(
                routes::route(&self.registry, path),
                Route::Collection { .. } | Route::Object { .. }
            )
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

    /// The source's newest committed revision: what a consistent read of `store` must
    /// reach (for etcd, also asks for a progress notification so the cache gets there).
    async fn current_revision(&self, store: &listwatch_store::Store) -> Result<u64, ApiError> {
        match &self.backend {
            Backend::Embedded(s) => Ok(s.revision()),
            Backend::HostFed(s) => Ok(s.revision()),
            Backend::Etcd(s) => s.consistent_revision(store).await,
        }
    }

    /// A reader waits for `store` to reach an RV it has not: ask the source to report its
    /// progress now rather than at its next periodic mark.
    fn request_progress(&self, store: &listwatch_store::Store) {
        if let Backend::Etcd(s) = &self.backend {
            s.request_progress(store);
        }
    }

    fn writable(&self) -> bool {
        !matches!(self.backend, Backend::HostFed(_))
    }

    /// POST through the backend.
    async fn create(
        &self,
        store: &Arc<listwatch_store::Store>,
        ns: Option<&str>,
        body: &[u8],
    ) -> Result<WriteResult, ApiError> {
        match &self.backend {
            Backend::Embedded(s) => s.create(store, ns, body),
            Backend::Etcd(s) => s.create(store, ns, body).await,
            Backend::HostFed(_) => Err(ApiError::MethodNotAllowed),
        }
    }

    /// PUT through the backend.
    async fn update(
        &self,
        store: &Arc<listwatch_store::Store>,
        ns: Option<&str>,
        name: &str,
        body: &[u8],
    ) -> Result<WriteResult, ApiError> {
        match &self.backend {
            Backend::Embedded(s) => s.update(store, ns, name, body),
            Backend::Etcd(s) => s.update(store, ns, name, body).await,
            Backend::HostFed(_) => Err(ApiError::MethodNotAllowed),
        }
    }

    /// DELETE through the backend.
    async fn delete(
        &self,
        store: &Arc<listwatch_store::Store>,
        ns: Option<&str>,
        name: &str,
    ) -> Result<WriteResult, ApiError> {
        match &self.backend {
            Backend::Embedded(s) => s.delete(store, ns, name),
            Backend::Etcd(s) => s.delete(store, ns, name).await,
            Backend::HostFed(_) => Err(ApiError::MethodNotAllowed),
        }
    }

    /// Answers one request (never fails: errors become `Status` responses).
    pub async fn handle(&self, req: Request<RequestBody>) -> Response<ResponseBody> {
        let start = std::time::Instant::now();
        let method = req.method().clone();
        let path = req.uri().path().to_string();
        let query = req.uri().query().unwrap_or("").to_string();
        let content_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let accept = req
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let call = handlers::Call {
            method: method.clone(),
            query: query.clone(),
            content_type,
            accept,
            gzip: accepts_gzip(req.headers()),
            user: req.extensions().get::<auth::User>().cloned(),
            body: req.into_body(),
        };
        let route = routes::route(&self.registry, &path);
        // (is an object path, resource, legacy watch) for the metrics labels.
        let route_kind = match &route {
            Route::Collection {
                store,
                legacy_watch,
                ..
            } => (false, store.info().resource.clone(), *legacy_watch),
            Route::Object {
                store,
                legacy_watch,
                ..
            } => (true, store.info().resource.clone(), *legacy_watch),
            _ => (false, String::new(), false),
        };
        let verb = verb_label(&method, &route_kind, &query);
        // Refused requests go the same way as failed ones: a Status, metered and logged.
        let (admission, answer) =
            match self.admit(&route, &method, verb, &call, path.len() + query.len()) {
                Err(e) => (None, Err(e)),
                Ok(admission) => (admission, self.route(route, call, &route_kind).await),
            };
        let response = answer.unwrap_or_else(|e| handlers::error_response(&e));
        let (parts, body) = response.into_parts();
        let info = metrics::RequestInfo {
            verb,
            resource: route_kind.1,
            uri: if query.is_empty() {
                path
            } else {
                format!("{path}?{query}")
            },
            code: parts.status.as_u16(),
            start,
        };
        let admission = if parts.status.is_success() {
            admission
        } else {
            None
        };
        let body = metrics::MeteredBody::new(body, self.metrics.clone(), info).hold(admission);
        Response::from_parts(parts, http_body_util::BodyExt::boxed(body))
    }

    /// Dispatches a routed request to discovery, a collection or an object (after
    /// authorization).
    async fn route(
        &self,
        route: Route,
        call: handlers::Call,
        route_kind: &(bool, String, bool),
    ) -> handlers::Answer {
        match route {
            Route::Discovery(d) if call.method == Method::GET => {
                self.discovery(d, call.accept.as_deref())
            }
            Route::Discovery(_) => Err(ApiError::MethodNotAllowed),
            Route::Collection {
                store,
                namespace,
                legacy_watch,
            } => {
                self.authorize(&call, route_kind, &store, namespace.as_deref(), "")?;
                self.collection(call, store, namespace, legacy_watch).await
            }
            Route::Object {
                store,
                namespace,
                name,
                legacy_watch,
            } => {
                self.authorize(&call, route_kind, &store, namespace.as_deref(), &name)?;
                self.object(call, store, namespace, name, legacy_watch)
                    .await
            }
            Route::NotFound => Err(ApiError::UnknownPath),
        }
    }

    /// A `Status` response for a request refused before routing (e.g. 401).
    pub fn refuse(&self, e: &ApiError) -> Response<ResponseBody> {
        handlers::error_response(e)
    }

    /// Applies the admission limits to a read before any work is done for it.
    fn admit(
        &self,
        route: &Route,
        method: &Method,
        verb: &str,
        call: &handlers::Call,
        uri_len: usize,
    ) -> Result<Option<limits::Admission>, ApiError> {
        self.limits.check_uri(uri_len)?;
        if *method != Method::GET
            || !matches!(route, Route::Collection { .. } | Route::Object { .. })
        {
            return Ok(None);
        }
        let chunk = self.config.chunk_bytes;
        match verb {
            "LIST" => self.limits.admit_list(chunk).map(Some),
            "WATCH" => {
                let user = call
                    .user
                    .as_ref()
                    .map_or("system:anonymous", |u| u.name.as_str());
                let initial = listwatch_core::options::query_flag(&call.query, "sendInitialEvents")
                    .then_some(chunk);
                self.limits.admit_watch(user, initial).map(Some)
            }
            _ => Ok(None),
        }
    }

    fn authorize(
        &self,
        call: &handlers::Call,
        route: &(bool, String, bool),
        store: &listwatch_store::Store,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<(), ApiError> {
        let Some(authz) = &self.authorizer else {
            return Ok(());
        };
        let verb = verb_label(&call.method, route, &call.query).to_ascii_lowercase();
        let verb = match verb.as_str() {
            "post" => "create".to_string(),
            "put" => "update".to_string(),
            _ => verb,
        };
        let ns = if store.info().namespaced {
            namespace
        } else {
            None
        };
        if authz.allowed(call.user.as_ref(), &verb, store.info(), ns) {
            return Ok(());
        }
        Err(ApiError::Forbidden(Box::new(
            listwatch_core::status::Denied {
                user: call
                    .user
                    .as_ref()
                    .map_or_else(|| "system:anonymous".to_string(), |u| u.name.clone()),
                verb,
                object: listwatch_core::ObjectRef::new(store.info(), name),
                namespace: ns.map(str::to_string),
            },
        )))
    }

    fn discovery(&self, d: DiscoveryPath, accept: Option<&str>) -> handlers::Answer {
        let json = |v: serde_json::Value| {
            let mut b = serde_json::to_vec(&v).unwrap_or_default();
            b.push(b'\n');
            let mut r = Response::new(full(b));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            Ok(r)
        };
        let writable = self.writable();
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
                // kube-apiserver's format when failing: one [+]/[-] line per check, 500.
                let mut text = String::new();
                let mut ok = true;
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
                // Like kube-apiserver: a bare "ok" when ready, the check list when not.
                if ok {
                    text = "ok".into();
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
                let text = self.metrics.render(self.registry.stores());
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

/// The verb label kube-apiserver would use.
fn verb_label(method: &Method, route: &(bool, String, bool), query: &str) -> &'static str {
    let watch = route.2 || listwatch_core::options::query_flag(query, "watch");
    match *method {
        Method::GET if watch => "WATCH",
        Method::GET if route.1.is_empty() || route.0 => "GET",
        Method::GET => "LIST",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        _ => "OTHER",
    }
}

/// Whether `Accept-Encoding` lists gzip with a non-zero quality.
fn accepts_gzip(headers: &http::HeaderMap) -> bool {
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

/// How the standalone server accepts connections.
#[derive(Clone, Default)]
pub struct ServeOptions {
    /// TLS (with ALPN h2/http1.1); plaintext HTTP/1.1 and h2c without it.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Authenticates every request; without it requests carry no user (embedding hosts
    /// put their own [`auth::User`] into the request extensions).
    pub authenticator: Option<Arc<security::Authenticator>>,
    /// On shutdown, open watches end spread over this period (0: all at once).
    pub watch_grace: Duration,
}

/// Serves `app` on `listener` (HTTP/1.1 and h2c) until `shutdown` completes.
pub async fn serve(
    app: Arc<App>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    serve_with(app, listener, ServeOptions::default(), shutdown).await
}

/// Serves `app` on `listener` with `options` until `shutdown` completes, then drains:
/// stops accepting, lets LISTs in flight finish, ends watches spread over
/// `options.watch_grace`, and returns when every connection is done (or the grace period
/// plus 10 s has passed).
pub async fn serve_with(
    app: Arc<App>,
    listener: TcpListener,
    options: ServeOptions,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let maintenance = tokio::spawn({
        let app = app.clone();
        async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                app.maintain();
            }
        }
    });
    let tls = options.tls.clone().map(tokio_rustls::TlsAcceptor::from);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let authn = options.authenticator.clone();
        let tls = tls.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            match tls {
                None => {
                    serve_connection(app, authn, None, TokioIo::new(stream), watcher, peer).await
                }
                Some(acceptor) => {
                    // A client that never finishes its handshake does not hold a task forever.
                    let accepted =
                        tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream))
                            .await;
                    let Ok(Ok(tls_stream)) = accepted else {
                        tracing::debug!(%peer, "TLS handshake failed or timed out");
                        return;
                    };
                    let cert_user = tls_stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .and_then(security::user_from_cert);
                    serve_connection(
                        app,
                        authn,
                        cert_user,
                        TokioIo::new(tls_stream),
                        watcher,
                        peer,
                    )
                    .await;
                }
            }
        });
    }
    drop(listener);
    tracing::info!(grace = ?options.watch_grace, "draining: LISTs finish, watches end spread over the grace period");
    app.drain(options.watch_grace);
    let limit = options.watch_grace + Duration::from_secs(10);
    if tokio::time::timeout(limit, graceful.shutdown())
        .await
        .is_err()
    {
        warn!("connections still open after the grace period; closing");
    }
    maintenance.abort();
    Ok(())
}

async fn serve_connection<I>(
    app: Arc<App>,
    authn: Option<Arc<security::Authenticator>>,
    cert_user: Option<auth::User>,
    io: TokioIo<I>,
    watcher: hyper_util::server::graceful::Watcher,
    peer: std::net::SocketAddr,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let chunk = app.config.chunk_bytes;
    let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
        let app = app.clone();
        let authn = authn.clone();
        let cert_user = cert_user.clone();
        // Boxed: the connection (HTTP/1) or stream task (HTTP/2) would otherwise embed the
        // whole handler state machine (~6.6 KB, sized for its largest state) for as long as
        // the response streams — most of an idle watch's cost. Boxed, it is freed once the
        // response head is ready and only the body stays (measured with dhat, docs/memory.md).
        Box::pin(async move {
            let mut req = req.map(box_body);
            if let Some(authn) = &authn {
                match authn.authenticate(req.headers(), cert_user.as_ref()) {
                    Ok(user) => {
                        req.extensions_mut().insert(user);
                    }
                    Err(e) => {
                        return Ok::<_, Infallible>(app.refuse(&e));
                    }
                }
            }
            Ok::<_, Infallible>(app.handle(req).await)
        })
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
        .max_pending_accept_reset_streams(Some(50))
        .max_local_error_reset_streams(Some(256));
    let conn = builder.serve_connection_with_upgrades(io, svc);
    if let Err(e) = watcher.watch(conn.into_owned()).await {
        tracing::debug!(%peer, error = %e, "connection ended");
    }
}
