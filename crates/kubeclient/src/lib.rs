//! listwatch-kubeclient: the one HTTP client listwatch calls a kube-apiserver with — the
//! gateway's pass-through, the apiserver source's LISTs and watches, and the access and
//! token reviews asked of the upstream or a webhook.
//!
//! - [`Kubeconfig`] (from a file, or [`Kubeconfig::in_cluster`]): where the server is and listwatch's
//!   own credential, as client-go reads them.
//! - [`tls`]: rustls with the server's CA bundle and a client certificate, whose files are
//!   read again as they are renewed ([`tls::CertFiles`], also the serving certificate of
//!   listwatch-auth); [`Bearer`]: a token, or a token file read again as it rotates.
//! - [`Client`]: one pool of HTTP/1.1 connections per server, driven by the requests
//!   using them ([`Client::send`], [`ResponseBody`]), protocol upgrades on connections of
//!   their own ([`Client::upgrade`]), and requests with the credential and the response
//!   timeout put on ([`Client::request`]).
//!
//! It depends on no listwatch crate, so everything above it can share it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, Uri, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;

pub mod credentials;
mod kubeconfig;
mod pool;
pub mod tls;

pub use credentials::{Bearer, TokenSource};
pub use kubeconfig::{Kubeconfig, SERVICE_ACCOUNT_DIR};
pub use pool::{ResponseBody, SendError};
pub use tls::ClientCert;

/// A request body of any type (boxed once per request): what listwatch-server hands a
/// pass-through, and what [`Client::send`] takes.
pub type RequestBody =
    http_body_util::combinators::UnsyncBoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// Why a client cannot be set up, or a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A setting or file is wrong.
    #[error("{0}")]
    Config(String),
    /// The TLS material is unusable.
    #[error("TLS: {0}")]
    Tls(#[from] rustls::Error),
    /// A file cannot be read, or its contents are wrong.
    #[error("{path}: {why}")]
    File {
        /// The file.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// The request failed before the response head.
    #[error("{0}")]
    Send(#[from] SendError),
    /// No response head within the response timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// How to reach one server as listwatch.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// The server's base URL (`https://host:6443`, a path included for a webhook).
    pub server: String,
    /// CA bundle (PEM) the server's serving certificate is verified against (https).
    pub ca_pem: Option<Vec<u8>>,
    /// The CA bundle's file, read again when it changes (then `ca_pem` is not used): new
    /// connections verify against the current bundle.
    pub ca_file: Option<PathBuf>,
    /// Client certificate presented to the server.
    pub client_cert: Option<ClientCert>,
    /// Bearer token, kept current ([`Client::authorization`]).
    pub token: Option<TokenSource>,
    /// Connecting (TCP) gives up after this.
    pub connect_timeout: Duration,
    /// The response head must arrive within this ([`Client::request`]; bodies then stream
    /// for as long as they last: watches, `logs -f`).
    pub response_timeout: Duration,
    /// Idle connections kept.
    pub max_idle: usize,
}

impl ClientConfig {
    /// Defaults for `server`, with no credential.
    pub fn new(server: impl Into<String>) -> Self {
        ClientConfig {
            server: server.into(),
            ca_pem: None,
            ca_file: None,
            client_cert: None,
            token: None,
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(60),
            max_idle: 64,
        }
    }

    /// Defaults for `server` with `kubeconfig`'s CA and credential (client certificate or
    /// token): listwatch calling as itself.
    pub fn with_own_credential(server: impl Into<String>, kubeconfig: Kubeconfig) -> Self {
        ClientConfig {
            ca_pem: kubeconfig.ca_pem,
            ca_file: kubeconfig.ca_file,
            client_cert: kubeconfig.client_cert,
            token: kubeconfig.token,
            ..ClientConfig::new(server)
        }
    }

    /// The server's base URL (`http(s)://host:port[/path]`), checked.
    pub fn base_uri(&self) -> Result<Uri, Error> {
        let base: Uri = self
            .server
            .parse()
            .map_err(|e| Error::Config(format!("{}: {e}", self.server)))?;
        if base.authority().is_none() || !matches!(base.scheme_str(), Some("http" | "https")) {
            return Err(Error::Config(format!(
                "{}: expected http(s)://host:port",
                self.server
            )));
        }
        Ok(base)
    }
}

/// How long an idle connection is kept: well inside kube-apiserver's own idle timeout
/// (90 s) and a cloud load balancer's (60 s), so a write is rarely sent on a connection
/// the server is closing at that moment (a GET would be sent again).
const IDLE_FOR: Duration = Duration::from_secs(45);

/// A client of one server; clones share its pool.
#[derive(Clone)]
pub struct Client {
    pool: Arc<pool::InlinePool>,
    base: Uri,
    bearer: Option<Bearer>,
    response_timeout: Duration,
}

impl Client {
    /// A client as `config` says; fails on a bad URL, unusable TLS material or an
    /// unreadable token file.
    pub fn new(config: &ClientConfig) -> Result<Client, Error> {
        let base = config.base_uri()?;
        let tls = tls::client_config(
            config.ca_file.as_deref(),
            config.ca_pem.as_deref(),
            config.client_cert.as_ref(),
        )?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(config.connect_timeout));
        http.set_nodelay(true);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let pool = pool::InlinePool::new(connector, &base, config.max_idle, IDLE_FOR)
            .map_err(|_| Error::Config(format!("{base}: not a Host value")))?;
        Ok(Client {
            pool,
            base,
            bearer: config.token.as_ref().map(Bearer::new).transpose()?,
            response_timeout: config.response_timeout,
        })
    }

    /// The server's base URL.
    pub fn base(&self) -> &Uri {
        &self.base
    }

    /// The `Authorization` header with listwatch's own token (read again as its file
    /// rotates), if one is configured.
    pub fn authorization(&self) -> Option<HeaderValue> {
        self.bearer.as_ref().map(Bearer::header)
    }

    /// The request target for `path_and_query` under the base URL's path.
    pub fn target(&self, path_and_query: &str) -> Result<Uri, Error> {
        let base = self.base.path().trim_end_matches('/');
        let path = if base.is_empty() && path_and_query.is_empty() {
            "/"
        } else {
            path_and_query
        };
        format!("{base}{path}")
            .parse()
            .map_err(|e| Error::Config(format!("{path_and_query}: {e}")))
    }

    /// Sends `req` (its URI the [`Self::target`]; its headers as they are) on a pooled
    /// connection: the response head, whose body drives the connection until read.
    pub async fn send(
        &self,
        req: Request<RequestBody>,
    ) -> Result<Response<ResponseBody>, SendError> {
        self.pool.send(req).await
    }

    /// Sends `req` (asking to switch protocols) on a connection of its own; after a `101`,
    /// `hyper::upgrade::on` gives the upgraded stream.
    pub async fn upgrade(
        &self,
        req: Request<RequestBody>,
    ) -> Result<Response<Incoming>, SendError> {
        self.pool.send_upgrade(req).await
    }

    /// `method path_and_query` with listwatch's credential, `Accept: accept` and, when
    /// `body` is some, that body as `content_type`: the response head within the
    /// response timeout.
    pub async fn request(
        &self,
        method: Method,
        path_and_query: &str,
        accept: &str,
        body: Option<(&str, Bytes)>,
    ) -> Result<Response<ResponseBody>, Error> {
        let mut req = Request::builder()
            .method(method)
            .uri(self.target(path_and_query)?)
            .header(header::ACCEPT, accept);
        if let Some(t) = self.authorization() {
            req = req.header(header::AUTHORIZATION, t);
        }
        let body = match body {
            Some((content_type, bytes)) => {
                req = req.header(header::CONTENT_TYPE, content_type);
                box_body(http_body_util::Full::new(bytes))
            }
            None => box_body(http_body_util::Empty::<Bytes>::new()),
        };
        let req = req.body(body).map_err(|e| Error::Config(e.to_string()))?;
        match tokio::time::timeout(self.response_timeout, self.send(req)).await {
            Ok(r) => Ok(r?),
            Err(_) => Err(Error::Timeout(self.response_timeout)),
        }
    }

    /// How long [`Self::request`] waits for a response head.
    pub fn response_timeout(&self) -> Duration {
        self.response_timeout
    }
}

/// `s` percent-encoded beyond RFC 3986's unreserved characters, as Go's clients write what
/// they send a kube-apiserver: query values (continue tokens are base64 with `=`, `+`, `/`)
/// and header-name fragments (an impersonated extra's key, `authentication.kubernetes.io/…`).
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Boxes a body that cannot fail into a [`RequestBody`].
pub(crate) fn box_body<B>(body: B) -> RequestBody
where
    B: http_body::Body<Data = Bytes, Error = std::convert::Infallible> + Send + 'static,
{
    body.map_err(|never| match never {}).boxed_unsync()
}
