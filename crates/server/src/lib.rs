//! listwatch-server: the hyper service serving LIST, GET, WATCH and watch-list.
//!
//! Request flow: [`routes::route`] decodes the path, [`request::ApiRequest::parse`] the
//! rest once into a typed request → `dispatch` admits ([`limits`]), authorizes and sends
//! it on by one `match` → [`handlers`] pick a snapshot or cursor by the RV rules, asking the
//! [`Source`] for revisions → codec's `ObjectWriter` lays out the bytes → [`body`] streams
//! them to the socket as the connection drains; [`response`] turns errors into `Status`.
//! This file builds the [`App`]; `serve` accepts connections.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response};
use listwatch_auth::Authorizer;
use listwatch_core::ApiError;
use listwatch_sources::{Registry, Source};

pub mod body;
pub mod connection;
pub mod discovery;
mod dispatch;
pub mod handlers;
pub mod limits;
pub mod metrics;
pub mod request;
pub mod response;
pub mod routes;
mod serve;

use body::ResponseBody;
use routes::Route;
pub use serve::{ServeOptions, serve, serve_with};

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
    /// The commit the binary was built from, for `/version`'s `gitCommit` (empty: unknown).
    pub git_commit: String,
    /// Bytes of protobuf items this app keeps at most for concurrent responses to share
    /// ([`listwatch_codec::shared`]; 0: none are kept).
    pub protobuf_share_bytes: usize,
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
            git_commit: String::new(),
            protobuf_share_bytes: listwatch_codec::shared::SHARED_BUDGET,
        }
    }
}

/// The application: registry, source and configuration shared by all connections. Built
/// here; requests are served by its [`dispatch`] service.
pub struct App {
    service: dispatch::Service,
}

/// Where the requests an app does not serve go (writes, subresources, aggregated APIs,
/// discovery, anything unknown): the gateway to an upstream apiserver.
pub trait PassThrough: Send + Sync {
    /// Forwards `req` (head and body as the client sent them) on behalf of `user` (the
    /// authenticated user; `None` when no authenticator ran) and answers with the result.
    fn forward(
        &self,
        req: Request<RequestBody>,
        user: Option<listwatch_auth::User>,
    ) -> futures_core::future::BoxFuture<'static, Response<ResponseBody>>;

    /// Its metrics in OpenMetrics text (without `# EOF`), added to `/metrics`.
    fn metrics_text(&self) -> String {
        String::new()
    }
}

/// Whether the housekeeping loop has measured protobuf lengths once with every cache then
/// registered loaded: without it the first protobuf LISTs after readiness measured them
/// themselves, and a storm of 64 right after a 40,000-pod start got its first bytes 0.8 s
/// late (loadtest/README.md). Set once: caches registered later (custom resources, which
/// have no protobuf form) or relisted later are not waited for.
#[derive(Default)]
pub(crate) struct LengthsMeasured(std::sync::atomic::AtomicU8);

impl LengthsMeasured {
    const UNCHECKED: u8 = 0;
    const PENDING: u8 = 1;
    const DONE: u8 = 2;

    /// A housekeeping loop will measure: readiness waits for its first pass.
    fn expect(&self) {
        self.0
            .fetch_max(Self::PENDING, std::sync::atomic::Ordering::AcqRel);
    }

    fn done(&self) {
        self.0
            .store(Self::DONE, std::sync::atomic::Ordering::Release);
    }

    /// `None` when nothing measures, else whether the first pass is done.
    pub(crate) fn get(&self) -> Option<bool> {
        match self.0.load(std::sync::atomic::Ordering::Acquire) {
            Self::UNCHECKED => None,
            v => Some(v == Self::DONE),
        }
    }
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
        let sharing = listwatch_codec::Sharing::new(config.protobuf_share_bytes);
        Arc::new(App {
            service: dispatch::Service {
                registry: source.registry().clone(),
                source,
                metrics: Arc::new(metrics::Metrics::new(
                    config.request_log_per_second,
                    sharing.clone(),
                )),
                sharing,
                authorizer,
                limits: limits::Limits::new(config.limits.clone()),
                openapi: listwatch_openapi::OpenApiCache::default(),
                pass_through: std::sync::OnceLock::new(),
                lengths: LengthsMeasured::default(),
                shutting_down: std::sync::atomic::AtomicBool::new(false),
                config,
            },
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
        let route = routes::route(&self.service.registry, path);
        matches!(route, Route::Resource(_)).then_some(route)
    }

    /// The route of a GET of discovery (`/api`, `/apis`, their group-versions, in the
    /// aggregated form kubectl asks for too), `/version` or the health checks, for
    /// `path`: what an embedding host lets listwatch answer when it has no discovery of
    /// its own for the resources listwatch serves.
    pub fn discovery_route(&self, method: &Method, path: &str) -> Option<Route> {
        if *method != Method::GET {
            return None;
        }
        let route = routes::route(&self.service.registry, path);
        matches!(route, Route::Discovery(_)).then_some(route)
    }

    /// Time-based housekeeping of every store (trims event windows and retained snapshots);
    /// `serve` runs it every second, an embedding host calls it (or spawns it) itself.
    pub fn maintain(&self) {
        for s in self.service.registry.stores() {
            s.maintain();
        }
    }

    /// Says the server is shutting down: `/readyz` fails from now on (kube-apiserver's
    /// `--shutdown-delay-duration` phase), so load balancers stop sending new clients while
    /// everything still works; [`App::drain`] follows.
    pub fn begin_shutdown(&self) {
        self.service
            .shutting_down
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Starts draining: every open watch ends at a random moment within `grace` (like
    /// kube-apiserver's `--shutdown-watch-termination-grace-period`), so clients reconnect
    /// spread out rather than all at once; LISTs in flight finish normally.
    pub fn drain(&self, grace: Duration) {
        for s in self.service.registry.stores() {
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
        match self.service.registry.get(group, version, resource) {
            Some(s) if !s.is_retired() => {
                s.retire(grace);
                true
            }
            _ => false,
        }
    }

    /// The served resources and their stores.
    pub fn registry(&self) -> &Registry {
        &self.service.registry
    }

    /// The source behind this app.
    pub fn source(&self) -> &Arc<dyn Source> {
        &self.service.source
    }

    /// Measures the protobuf lengths of the records of every store with a protobuf form
    /// that changed since `warmed` (store address → RV and forms measured) was last
    /// updated, so a protobuf LIST's first byte does not wait for a transcode of its
    /// collection (issue 27 item 2). A pass over a measured store only reads the memos.
    /// `every_form`: all protobuf forms (the pass readiness waits for); otherwise only the
    /// forms LISTs have asked of each resource since start — on a write-heavy server (a
    /// gateway's front) measuring every new object in both forms was 10 % of a small
    /// create's cost, for LISTs that mostly never come (the first one measures for itself).
    pub fn measure_encodings(
        &self,
        warmed: &mut HashMap<usize, (u64, [bool; 2])>,
        every_form: bool,
    ) {
        use listwatch_store::record::EncodedForm;
        let mut next = HashMap::new();
        for s in self.service.registry.stores() {
            let key = Arc::as_ptr(&s) as usize;
            let snap = s.current();
            // Measured again when a form is first LISTed, not only at the next write.
            let forms = [EncodedForm::Object, EncodedForm::Metadata]
                .map(|form| every_form || s.listed_form(form));
            let state = (snap.rv(), forms);
            if warmed.get(&key) != Some(&state) {
                listwatch_codec::protobuf::measure_lengths(s.info(), &snap, |form| {
                    forms[form as usize]
                });
            }
            next.insert(key, state);
        }
        *warmed = next;
    }

    /// Whether every registered cache is loaded (ready).
    fn caches_loaded(&self) -> bool {
        self.service.registry.stores().iter().all(|s| s.is_ready())
    }

    /// Spawns the housekeeping loop ([`Self::maintain`] every second) on the current tokio
    /// runtime. [`Maintenance::shutdown`] stops it and waits; dropping the handle detaches
    /// the loop, as dropping a `JoinHandle` does.
    pub fn spawn_maintenance(self: &Arc<Self>) -> Maintenance {
        let app = self.clone();
        app.service.lengths.expect();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            // Until the first pass over loaded caches is done readiness waits on it, so it
            // starts within 20 ms of the last cache loading rather than at the next second.
            let mut first_pass = tokio::time::interval(Duration::from_millis(20));
            first_pass.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let mut stopped = Some(stopped);
            // Length measuring transcodes: on a blocking thread, one pass at a time.
            let warmed = Arc::new(std::sync::Mutex::new(HashMap::new()));
            let mut measuring: Option<tokio::task::JoinHandle<()>> = None;
            let measure = |measuring: &mut Option<tokio::task::JoinHandle<()>>| {
                if measuring.as_ref().is_none_or(|h| h.is_finished()) {
                    let (app, warmed) = (app.clone(), warmed.clone());
                    *measuring = Some(tokio::task::spawn_blocking(move || {
                        let mut w = warmed.lock().unwrap_or_else(|e| e.into_inner());
                        // Only a pass that began with every cache loaded covers what a
                        // storm right after readiness lists.
                        let loaded = app.caches_loaded();
                        let first = app.service.lengths.get() != Some(true);
                        app.measure_encodings(&mut w, first);
                        if loaded {
                            app.service.lengths.done();
                        }
                    }));
                }
            };
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        app.maintain();
                        measure(&mut measuring);
                    }
                    _ = first_pass.tick(), if app.service.lengths.get() == Some(false) => {
                        // Not while a cache is still loading: the second's pass covers that.
                        if app.caches_loaded() {
                            measure(&mut measuring);
                        }
                    }
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
        let route = routes::route(&self.service.registry, req.uri().path());
        self.service.handle(req, route).await
    }

    /// [`Self::handle`] for a request whose path was already decoded into `route` (by
    /// [`Self::read_route`]).
    pub async fn handle_routed(
        &self,
        req: Request<RequestBody>,
        route: Route,
    ) -> Response<ResponseBody> {
        self.service.handle(req, route).await
    }

    /// A `Status` response for a request refused before routing (e.g. 401).
    pub fn refuse(&self, e: &ApiError) -> Response<ResponseBody> {
        response::error(e, listwatch_codec::Encoding::Json)
    }

    /// Sends every request not served here to `p` from now on (once; later calls are
    /// ignored).
    pub fn set_pass_through(&self, p: Arc<dyn PassThrough>) {
        let _ = self.service.pass_through.set(p);
    }

    /// Server tunables.
    pub fn config(&self) -> &ServerConfig {
        &self.service.config
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
