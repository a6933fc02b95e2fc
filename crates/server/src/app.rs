//! The [`App`]: what a server serves (registry, source, configuration, the protobuf
//! sharing window) and its housekeeping. Requests go to its `dispatch` service; `serve`
//! hands it connections.

use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response};
use listwatch_auth::Authorizer;
use listwatch_core::ApiError;
use listwatch_sources::{Registry, Source};

use crate::body::ResponseBody;
use crate::dispatch;
use crate::routes::{self, Route};
use crate::{PassThrough, RequestBody, ServerConfig, limits, response};

/// The application: registry, source and configuration shared by all connections. Built
/// here; requests are served by its `dispatch` service.
pub struct App {
    service: dispatch::Service,
}

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
                metrics: Arc::new(listwatch_metrics::Metrics::new(
                    config.request_log_per_second,
                    sharing.clone(),
                )),
                sharing,
                authorizer,
                limits: limits::Limits::new(config.limits.clone()),
                openapi: listwatch_openapi::OpenApiCache::default(),
                pass_through: std::sync::OnceLock::new(),
                lengths: listwatch_codec::lengths::LengthMeasuring::default(),
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
            let mut measuring: Option<tokio::task::JoinHandle<()>> = None;
            let measure = |measuring: &mut Option<tokio::task::JoinHandle<()>>| {
                if measuring.as_ref().is_none_or(|h| h.is_finished()) {
                    let app = app.clone();
                    *measuring = Some(tokio::task::spawn_blocking(move || {
                        // Only a pass that began with every cache loaded covers what a
                        // storm right after readiness lists.
                        let loaded = app.caches_loaded();
                        let stores = app.service.registry.stores();
                        app.service.lengths.pass(&stores, loaded);
                    }));
                }
            };
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        app.maintain();
                        measure(&mut measuring);
                    }
                    _ = first_pass.tick(), if app.service.lengths.first_pass_done() == Some(false) => {
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
