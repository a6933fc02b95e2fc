//! # listwatch, embedded
//!
//! Serve the Kubernetes read path — LIST, GET, WATCH and watch-list — from inside your own
//! apiserver, with kube-apiserver's wire format and resourceVersion semantics and memory that
//! does not grow with the number or slowness of clients. Your server keeps writes,
//! admission and everything else; you feed listwatch the changes you commit.
//!
//! ```no_run
//! use listwatch::{Builder, Outcome, Relisted};
//!
//! # async fn host() {
//! // 1. Build: the resources to serve, and how to relist one if your stream ever breaks.
//! let (lw, feed) = Builder::new().host_fed(|_resource| Ok(Relisted { rv: 1, objects: vec![] }));
//! let _maintenance = lw.spawn_maintenance(); // keep it; `shutdown().await` stops it
//!
//! // 2. Feed every committed change with the RV you committed it at.
//! feed.put("", "v1", "configmaps", 2, br#"{"metadata":{"name":"a","namespace":"default"}}"#).unwrap();
//! feed.progress(3); // nothing else happened up to RV 3
//!
//! // 3. Route requests: listwatch answers reads of served resources, hands back the rest.
//! let req = http::Request::get("/api/v1/namespaces/default/configmaps")
//!     .body(http_body_util::Empty::<bytes::Bytes>::new())
//!     .unwrap();
//! match lw.handle(req).await {
//!     Outcome::Handled(response) => { /* send it */ }
//!     Outcome::NotHandled(request) => { /* your own handlers */ }
//! }
//! # }
//! ```
//!
//! See `docs/embedding.md` for the threading and backpressure model and what the host must
//! guarantee about resourceVersions, and `examples/host.rs` for a complete host.
#![deny(missing_docs)]

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
#[cfg(feature = "etcd")]
pub use listwatch_etcd::{Decryptor, EtcdConfig, EtcdError, EtcdTls, EtcdTlsFiles, ValueDecoder};
use listwatch_server::App;
use listwatch_server::routes::Route;
use listwatch_sources::HostFedSource;

pub use listwatch_auth::{Attributes, Authorizer, Decision, User};
pub use listwatch_core::{ApiError, ResourceInfo, builtin_resources};
pub use listwatch_server::body::{BodyCut, ResponseBody, full as full_body};
pub use listwatch_server::{Maintenance, ServerConfig};
pub use listwatch_sources::{
    BoxFuture, EmbeddedSource, FeedError, HostChange, Registry, Relisted, Source, SourceWriter,
    Views, WriteOp, WriteRequest, WriteResult,
};
pub use listwatch_store::StoreConfig;

/// Configures a listwatch instance.
///
/// ```
/// let builder = listwatch::Builder::new()
///     .resources(listwatch::builtin_resources())
///     .start_rv(100);
/// ```
pub struct Builder {
    resources: Vec<ResourceInfo>,
    server: ServerConfig,
    store: StoreConfig,
    authorizer: Option<Arc<dyn Authorizer>>,
    start_rv: u64,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            resources: builtin_resources(),
            server: ServerConfig::default(),
            store: StoreConfig::default(),
            authorizer: None,
            start_rv: 1,
        }
    }
}

impl Builder {
    /// Built-in resources (pods, configmaps, …, apps/v1 workloads), default limits, no
    /// authorizer, starting at RV 1.
    ///
    /// ```
    /// let b = listwatch::Builder::new();
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces the served resources.
    ///
    /// ```
    /// let mut widgets: Vec<listwatch::ResourceInfo> = listwatch::builtin_resources();
    /// let b = listwatch::Builder::new().resources(widgets);
    /// ```
    pub fn resources(mut self, resources: Vec<ResourceInfo>) -> Self {
        self.resources = resources
            .into_iter()
            .map(ResourceInfo::normalized)
            .collect();
        self
    }

    /// Server tunables (chunk size, RV wait, bookmark period, watch timeout).
    ///
    /// ```
    /// let b = listwatch::Builder::new().server_config(listwatch::ServerConfig::default());
    /// ```
    pub fn server_config(mut self, config: ServerConfig) -> Self {
        self.server = config;
        self
    }

    /// Store tunables (event window, snapshot retention).
    ///
    /// ```
    /// let b = listwatch::Builder::new().store_config(listwatch::StoreConfig::default());
    /// ```
    pub fn store_config(mut self, config: StoreConfig) -> Self {
        self.store = config;
        self
    }

    /// Decides every read on its [`Attributes`], whose user is the [`User`] the host put
    /// into the request's extensions (`system:anonymous` without one).
    ///
    /// ```
    /// struct AllowAll;
    /// impl listwatch::Authorizer for AllowAll {
    ///     fn authorize(&self, _: &listwatch::Attributes) -> listwatch::Decision {
    ///         listwatch::Decision::allow("")
    ///     }
    /// }
    /// let b = listwatch::Builder::new().authorizer(AllowAll);
    /// ```
    pub fn authorizer(mut self, authorizer: impl Authorizer) -> Self {
        self.authorizer = Some(Arc::new(authorizer));
        self
    }

    /// The RV the (empty) caches start at; the first change fed must be after it.
    ///
    /// ```
    /// let b = listwatch::Builder::new().start_rv(5000);
    /// ```
    pub fn start_rv(mut self, rv: u64) -> Self {
        self.start_rv = rv;
        self
    }

    /// Builds an instance fed by the host. `relist` returns a resource's full state when
    /// its change stream can no longer be trusted (a gap, an RV going backwards). Built
    /// inside a tokio runtime, it also serves `events.k8s.io/v1` Events and
    /// `autoscaling/v1` HPAs as views of the fed core/v1 Events and autoscaling/v2 HPAs
    /// ([`Views`]).
    ///
    /// ```
    /// let (lw, feed) = listwatch::Builder::new()
    ///     .host_fed(|_| Ok(listwatch::Relisted { rv: 1, objects: vec![] }));
    /// ```
    pub fn host_fed<F>(self, relist: F) -> (ListWatch, Feed)
    where
        F: Fn(&ResourceInfo) -> Result<Relisted, String> + Send + Sync + 'static,
    {
        let registry = Registry::new(self.resources, self.start_rv, &self.store);
        let source = HostFedSource::new(registry.clone(), self.start_rv, Box::new(relist));
        let _ = registry;
        // The views' tasks need a runtime to run on.
        let served: Arc<dyn Source> = match tokio::runtime::Handle::try_current() {
            Ok(_) => Views::start(source.clone(), &self.store),
            Err(_) => source.clone(),
        };
        let app = App::new(served, self.server, self.authorizer);
        (ListWatch { app }, Feed { source })
    }

    /// Builds an instance following etcd (kube-apiserver's key layout, JSON values): reads
    /// are served from caches kept exact by watches, consistent reads wait for etcd's
    /// current revision (docs/etcd.md). Must run inside a tokio runtime. Needs the `etcd`
    /// feature (which compiles a gRPC client; its build needs `protoc`).
    ///
    /// Read-only: writes are 405 (they belong to the host's own write path), unless
    /// `unsafe_direct_writes` is set. A production etcd is reached over mutual TLS, with
    /// kube-apiserver's `--etcd-cafile`, `--etcd-certfile` and `--etcd-keyfile` (read again
    /// when they are renewed):
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// let tls = listwatch::EtcdTlsFiles {
    ///     ca: Some("/etc/kubernetes/pki/etcd/ca.crt".into()),
    ///     cert: Some("/etc/kubernetes/pki/apiserver-etcd-client.crt".into()),
    ///     key: Some("/etc/kubernetes/pki/apiserver-etcd-client.key".into()),
    /// };
    /// let lw = listwatch::Builder::new()
    ///     .etcd(listwatch::EtcdConfig {
    ///         endpoints: vec!["https://127.0.0.1:2379".into()],
    ///         tls: Some(tls.read()?),
    ///         ..Default::default()
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "etcd")]
    pub async fn etcd(self, config: EtcdConfig) -> Result<ListWatch, EtcdError> {
        let registry = Registry::new(self.resources, self.start_rv, &self.store);
        let source = listwatch_etcd::EtcdSource::start(registry, config).await?;
        // events.k8s.io/v1 Events and autoscaling/v1 HPAs: views of the stored versions.
        let source = listwatch_sources::Views::start(source, &self.store);
        let app = App::new(source, self.server, self.authorizer);
        Ok(ListWatch { app })
    }

    /// Builds an instance over any [`Source`] (one of yours, or listwatch's): the server
    /// reads through it and never names it.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// let registry = listwatch::Registry::new(listwatch::builtin_resources(), 1, &Default::default());
    /// let source = listwatch::EmbeddedSource::new(registry);
    /// let lw = listwatch::Builder::new().source(source);
    /// ```
    pub fn source(self, source: Arc<dyn Source>) -> ListWatch {
        ListWatch {
            app: App::new(source, self.server, self.authorizer),
        }
    }
}

/// What [`ListWatch::handle`] did with a request.
pub enum Outcome<B> {
    /// listwatch answered (a read of a served resource): send this response.
    Handled(Response<ResponseBody>),
    /// Not a read of a served resource: the untouched request, for the host's own handlers.
    NotHandled(Request<B>),
}

/// A running listwatch: cheap to clone, shared by all connections.
#[derive(Clone)]
pub struct ListWatch {
    app: Arc<App>,
}

impl ListWatch {
    /// Answers GET (LIST, GET, WATCH, watch-list) on served resources and hands every other
    /// request back untouched. Responses stream: their bodies pull data only as the
    /// connection drains.
    ///
    /// ```no_run
    /// # async fn f(lw: listwatch::ListWatch, req: http::Request<http_body_util::Empty<bytes::Bytes>>) {
    /// match lw.handle(req).await {
    ///     listwatch::Outcome::Handled(resp) => drop(resp),
    ///     listwatch::Outcome::NotHandled(req) => drop(req),
    /// }
    /// # }
    /// ```
    pub async fn handle<B>(&self, req: Request<B>) -> Outcome<B>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        self.handle_on(req, App::read_route).await
    }

    /// Answers discovery (`/api`, `/apis`, group-versions — aggregated too), `/version`,
    /// `/healthz`, `/livez`, `/readyz` and `/metrics` for the resources listwatch serves,
    /// and hands every other request back: for a host without discovery of its own, so
    /// kubectl and client-go find the resources (a host with its own discovery — an
    /// apiserver fork — leaves this out).
    pub async fn handle_discovery<B>(&self, req: Request<B>) -> Outcome<B>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        self.handle_on(req, App::discovery_route).await
    }

    /// Answers `req` on the route `route_of` finds for it; hands it back when there is none.
    async fn handle_on<B>(
        &self,
        req: Request<B>,
        route_of: fn(&App, &http::Method, &str) -> Option<Route>,
    ) -> Outcome<B>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let Some(route) = route_of(&self.app, req.method(), req.uri().path()) else {
            return Outcome::NotHandled(req);
        };
        let req = req.map(listwatch_server::box_body);
        Outcome::Handled(self.app.handle_routed(req, route).await)
    }

    /// Ends every open watch at a random moment within `grace` (call on shutdown, before
    /// closing connections), so clients do not reconnect all at once.
    pub fn drain(&self, grace: std::time::Duration) {
        self.app.drain(grace);
    }

    /// Stops serving a resource at runtime: 404 from now on, gone from discovery, and its
    /// open watches end spread over `grace`. Returns whether it was served.
    pub fn remove_resource(
        &self,
        group: &str,
        version: &str,
        resource: &str,
        grace: std::time::Duration,
    ) -> bool {
        self.app.remove_resource(group, version, resource, grace)
    }

    /// Trims event windows and retained snapshots by age; call about once a second.
    ///
    /// ```no_run
    /// # fn f(lw: listwatch::ListWatch) { lw.maintain(); }
    /// ```
    pub fn maintain(&self) {
        self.app.maintain();
    }

    /// Spawns the housekeeping loop ([`Self::maintain`] every second) on the current tokio
    /// runtime; it stops when the returned handle is shut down or dropped.
    ///
    /// ```no_run
    /// # async fn f(lw: listwatch::ListWatch) { let m = lw.spawn_maintenance(); m.shutdown().await; }
    /// ```
    pub fn spawn_maintenance(&self) -> Maintenance {
        self.app.spawn_maintenance()
    }

    /// Drains open watches over `grace` and stops the source's background work (etcd
    /// followers), waiting for it to end.
    pub async fn close(&self, grace: std::time::Duration) {
        self.app.drain(grace);
        self.app.source().close().await;
    }
}

/// The host's handle for pushing committed changes. Cheap to clone; call from any thread.
#[derive(Clone)]
pub struct Feed {
    source: Arc<HostFedSource>,
}

impl Feed {
    /// An object of `group/version/resource` was created or updated at `rv` (its JSON; the
    /// RV is written into `metadata.resourceVersion` for you).
    ///
    /// ```no_run
    /// # fn f(feed: listwatch::Feed) {
    /// feed.put("apps", "v1", "deployments", 42, br#"{"metadata":{"name":"web","namespace":"prod"}}"#).unwrap();
    /// # }
    /// ```
    pub fn put(
        &self,
        group: &str,
        version: &str,
        resource: &str,
        rv: u64,
        json: &[u8],
    ) -> Result<(), FeedError> {
        self.source
            .apply(group, version, resource, rv, &[HostChange::Put(json)])
    }

    /// An object was deleted at `rv`.
    ///
    /// ```no_run
    /// # fn f(feed: listwatch::Feed) {
    /// feed.delete("", "v1", "configmaps", 43, "default", "a").unwrap();
    /// # }
    /// ```
    pub fn delete(
        &self,
        group: &str,
        version: &str,
        resource: &str,
        rv: u64,
        namespace: &str,
        name: &str,
    ) -> Result<(), FeedError> {
        self.source.apply(
            group,
            version,
            resource,
            rv,
            &[HostChange::Delete { namespace, name }],
        )
    }

    /// Several changes committed together at `rv` (one transaction).
    ///
    /// ```no_run
    /// # fn f(feed: listwatch::Feed) {
    /// use listwatch::HostChange;
    /// feed.apply("", "v1", "configmaps", 44, &[HostChange::Put(br#"{"metadata":{"name":"b","namespace":"d"}}"#), HostChange::Delete { namespace: "d", name: "c" }]).unwrap();
    /// # }
    /// ```
    pub fn apply(
        &self,
        group: &str,
        version: &str,
        resource: &str,
        rv: u64,
        changes: &[HostChange<'_>],
    ) -> Result<(), FeedError> {
        self.source.apply(group, version, resource, rv, changes)
    }

    /// Nothing happened on any resource up to `rv`: consistent reads and RV waits complete,
    /// bookmarks report it.
    ///
    /// ```no_run
    /// # fn f(feed: listwatch::Feed) { feed.progress(100); }
    /// ```
    pub fn progress(&self, rv: u64) {
        self.source.progress(rv);
    }

    /// The host lost changes of a resource: listwatch relists it through the callback and
    /// its open watches end with 410, so clients relist too.
    ///
    /// ```no_run
    /// # fn f(feed: listwatch::Feed) { let _ = feed.gap("", "v1", "pods"); }
    /// ```
    pub fn gap(&self, group: &str, version: &str, resource: &str) -> Result<(), FeedError> {
        self.source.gap(group, version, resource)
    }

    /// The newest RV fed (changes or progress).
    ///
    /// ```no_run
    /// # fn f(feed: listwatch::Feed) { let rv = feed.revision(); }
    /// ```
    pub fn revision(&self) -> u64 {
        self.source.revision()
    }
}
