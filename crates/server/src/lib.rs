//! listwatch-server: the hyper service serving LIST, GET, WATCH and watch-list.
//!
//! Request flow: [`routes::route`] decodes the path, [`request::ApiRequest::parse`] the
//! rest once into a typed request → `dispatch` admits ([`limits`]), authorizes and sends
//! it on by one `match` → [`handlers`] pick a snapshot or cursor by the RV rules, asking
//! the [`Source`](listwatch_sources::Source) for revisions → codec's `ObjectWriter` lays
//! out the bytes → [`body`] streams them to the socket as the connection drains;
//! [`response`] turns errors into `Status`. `app` builds the [`App`]; `serve` accepts
//! connections; each response body is metered for `listwatch_metrics` ([`metrics`]).

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};

mod app;
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

pub use app::{App, Maintenance};
use body::ResponseBody;
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
            request_log_per_second: listwatch_metrics::DEFAULT_REQUEST_LOG_PER_SECOND,
            shutdown_list_grace: Duration::from_secs(60),
            git_commit: String::new(),
            protobuf_share_bytes: listwatch_codec::shared::SHARED_BUDGET,
        }
    }
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
/// A request body of any type the host uses (boxed once per request).
pub type RequestBody =
    http_body_util::combinators::UnsyncBoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;
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
