//! listwatch-gateway: everything listwatch does not serve itself — writes, subresources
//! (`log` streamed, `exec`/`attach`/`portforward` over HTTP/1.1 Upgrade), aggregated APIs,
//! discovery, `/openapi`, `/version`, unknown paths — goes on to an upstream apiserver.
//!
//! Bodies stream both ways (nothing is buffered whole); connections come from
//! listwatch-kubeclient's pool; the upstream's silence or absence is a 504 or 503 `Status`, never a hang. The
//! client's identity crosses the hop in one of three ways ([`Identity`]); identity headers
//! the client sent itself (`X-Remote-*`, and `Impersonate-*` unless the token is forwarded)
//! never reach the upstream.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode, Uri, header};
use http_body::{Body, Frame};
use http_body_util::Either;
use hyper_util::rt::TokioIo;
use listwatch_auth::User;
use listwatch_core::ApiError;
use listwatch_kubeclient::{Client, SendError};
use listwatch_server::body::{BodyCut, ResponseBody};
use listwatch_server::{PassThrough, RequestBody};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use tokio::sync::Semaphore;

/// The connection half of [`GatewayConfig`], and the client certificate it may name.
pub use listwatch_kubeclient::{ClientCert, ClientConfig};

/// Why the gateway cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// A flag is wrong.
    #[error("{0}")]
    Config(String),
    /// The client to the upstream cannot be made (URL, TLS material, token file).
    #[error("{0}")]
    Client(#[from] listwatch_kubeclient::Error),
}

/// How the client's identity is carried to the upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Identity {
    /// `X-Remote-User`/`X-Remote-Group` over a client certificate the upstream trusts as
    /// a front proxy (its `--requestheader-client-ca-file`).
    FrontProxy,
    /// `Impersonate-User`/`Impersonate-Group` with listwatch's own credential, which the
    /// upstream must allow to `impersonate` users and groups.
    Impersonate,
    /// The client's own `Authorization` header as it came (and its `Impersonate-*`, which
    /// the upstream then checks against that credential); listwatch adds nothing.
    Forward,
}

/// How to reach the upstream and carry identities there.
#[derive(Clone, Debug)]
pub struct GatewayConfig {
    /// The upstream (`client.server`, `https://host:6443`), its CA, and the client
    /// certificate presented there: the front-proxy certificate, or listwatch's own from
    /// its kubeconfig. Its token, listwatch's own, is sent with [`Identity::Impersonate`]
    /// only. Connecting gives up after `connect_timeout` (503); the upstream's response
    /// head must arrive within `response_timeout` (504; bodies then stream for as long as
    /// they last: watches, `logs -f`).
    pub client: ClientConfig,
    /// How identities cross the hop.
    pub identity: Identity,
    /// Requests in flight to the upstream at once, streams and upgraded connections
    /// included: 429 beyond.
    pub max_in_flight: usize,
}

impl GatewayConfig {
    /// Defaults for `upstream` with `identity`.
    pub fn new(upstream: impl Into<String>, identity: Identity) -> Self {
        GatewayConfig {
            client: ClientConfig::new(upstream),
            identity,
            max_in_flight: 2048,
        }
    }
}

/// What was passed through (rendered by [`Gateway::metrics_text`]).
struct Counters {
    registry: prometheus_client::registry::Registry,
    routes: Family<RouteLabel, Counter>,
    /// Upstream answers by HTTP code.
    codes: Family<CodeLabel, Counter>,
    /// Requests the upstream did not answer (503: unreachable or failed, 504: silent).
    errors: Counter,
    open_streams: Gauge,
    /// Time to the upstream's response head (or its failure).
    latency: Histogram,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabel {
    route: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabel {
    code: u16,
}

impl Default for Counters {
    fn default() -> Self {
        let mut registry = prometheus_client::registry::Registry::default();
        let routes = Family::<RouteLabel, Counter>::default();
        let codes = Family::<CodeLabel, Counter>::default();
        let errors = Counter::default();
        let open_streams = Gauge::default();
        // 1 ms to ~33 s, as the server's request durations.
        let latency = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        for route in ["passed", "refused"] {
            // Both series exist from the start, as they did when hand-written.
            let _ = routes.get_or_create(&RouteLabel { route });
        }
        registry.register(
            "listwatch_gateway_requests",
            "Requests not served here: passed to the upstream or refused by the gateway",
            routes.clone(),
        );
        registry.register(
            "listwatch_gateway_upstream_responses",
            "Upstream response heads by HTTP code",
            codes.clone(),
        );
        registry.register(
            "listwatch_gateway_upstream_errors",
            "Passed-through requests the upstream did not answer (503, 504)",
            errors.clone(),
        );
        registry.register(
            "listwatch_gateway_upstream_latency_seconds",
            "Time to the upstream's response head",
            latency.clone(),
        );
        registry.register(
            "listwatch_gateway_open_streams",
            "Passed-through responses and upgraded connections open",
            open_streams.clone(),
        );
        Counters {
            registry,
            routes,
            codes,
            errors,
            open_streams,
            latency,
        }
    }
}

impl Counters {
    fn route(&self, route: &'static str) {
        self.routes.get_or_create(&RouteLabel { route }).inc();
    }
}

/// The pass-through to one upstream.
pub struct Gateway {
    /// The pool of connections to the upstream (upgrades on connections of their own),
    /// and listwatch's own token.
    client: Client,
    identity: Identity,
    response_timeout: Duration,
    slots: Arc<Semaphore>,
    counters: Arc<Counters>,
}

impl Gateway {
    /// A gateway as `config` says; fails on a bad URL or unusable TLS material.
    pub fn new(config: GatewayConfig) -> Result<Arc<Gateway>, GatewayError> {
        if config.identity == Identity::FrontProxy && config.client.client_cert.is_none() {
            return Err(GatewayError::Config(
                "front-proxy identity needs --proxy-client-cert-file and --proxy-client-key-file"
                    .into(),
            ));
        }
        Ok(Arc::new(Gateway {
            client: Client::new(&config.client)?,
            identity: config.identity,
            response_timeout: config.client.response_timeout,
            slots: Arc::new(Semaphore::new(config.max_in_flight.max(1))),
            counters: Arc::default(),
        }))
    }

    /// The upstream's base URL.
    pub fn upstream(&self) -> &Uri {
        self.client.base()
    }

    /// Forwards one request, or says why not as a `Status`.
    async fn pass(
        self: Arc<Self>,
        req: Request<RequestBody>,
        user: Option<User>,
    ) -> Result<Response<ResponseBody>, ApiError> {
        let permit = self.slots.clone().try_acquire_owned().map_err(|_| {
            self.counters.route("refused");
            ApiError::TooManyRequests("too many requests in flight to the upstream".into())
        })?;
        let (mut parts, body) = req.into_parts();
        let upgrade = is_upgrade(&parts.headers);
        // The client's half of an upgraded connection, taken before the head is rewritten.
        let client_side = upgrade
            .then(|| parts.extensions.remove::<hyper::upgrade::OnUpgrade>())
            .flatten();
        self.rewrite(&mut parts, user, upgrade)?;
        let start = Instant::now();
        let req = Request::from_parts(parts, body);
        let exchange = async {
            if upgrade {
                let r = self.client.upgrade(req).await;
                r.map(|r| r.map(Either::Left))
            } else {
                let r = self.client.send(req).await;
                r.map(|r| r.map(Either::Right))
            }
        };
        let sent = tokio::time::timeout(self.response_timeout, exchange).await;
        let counters = &self.counters;
        let base = self.client.base();
        counters.latency.observe(start.elapsed().as_secs_f64());
        let mut resp = match sent {
            Err(_) => {
                counters.errors.inc();
                return Err(ApiError::Timeout(format!(
                    "the upstream {base} did not answer within {:?}",
                    self.response_timeout
                )));
            }
            Ok(Err(e)) => {
                counters.errors.inc();
                tracing::warn!(upstream = %base, error = %e, "upstream request failed");
                return Err(ApiError::Unavailable(format!(
                    "the upstream {base} is unavailable: {}",
                    if matches!(e, SendError::Connect(_)) {
                        "cannot connect"
                    } else {
                        "request failed"
                    }
                )));
            }
            Ok(Ok(r)) => r,
        };
        counters.route("passed");
        counters
            .codes
            .get_or_create(&CodeLabel {
                code: resp.status().as_u16(),
            })
            .inc();
        if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
            let Some(client_side) = client_side else {
                return Err(ApiError::Internal(
                    "upstream switched protocols unasked".into(),
                ));
            };
            let upstream_side = hyper::upgrade::on(&mut resp);
            let counters = self.counters.clone();
            tokio::spawn(async move {
                let _permit = permit;
                let _open = Open::new(&counters);
                match futures::try_join!(client_side, upstream_side) {
                    Ok((c, u)) => {
                        let (mut c, mut u) = (TokioIo::new(c), TokioIo::new(u));
                        if let Err(e) = tokio::io::copy_bidirectional(&mut c, &mut u).await {
                            tracing::debug!(error = %e, "upgraded connection ended");
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "upgrade failed"),
                }
            });
            let (mut parts, _) = resp.into_parts();
            strip_hop_by_hop(&mut parts.headers, true);
            return Ok(Response::from_parts(
                parts,
                listwatch_server::body::full(Bytes::new()),
            ));
        }
        let (mut parts, body) = resp.into_parts();
        strip_hop_by_hop(&mut parts.headers, false);
        let body = Relay {
            inner: body,
            _permit: permit,
            _open: Open::new(&self.counters),
        };
        Ok(Response::from_parts(
            parts,
            http_body_util::BodyExt::boxed(body),
        ))
    }

    /// Points the request at the upstream and puts the identity on it: identity headers
    /// the client sent are removed (or refused) first.
    fn rewrite(
        &self,
        parts: &mut http::request::Parts,
        user: Option<User>,
        upgrade: bool,
    ) -> Result<(), ApiError> {
        let impersonating = listwatch_auth::impersonation::requested(&parts.headers);
        if impersonating && self.identity != Identity::Forward {
            // Authorized here already (the server's impersonation step): `user` is the
            // impersonated user, carried across as any other; the headers themselves would be
            // checked upstream against listwatch's identity, so they go.
            if parts
                .extensions
                .get::<listwatch_auth::impersonation::Impersonated>()
                .is_none()
            {
                self.counters.route("refused");
                return Err(ApiError::ServerResponse {
                    code: 403,
                    message: "impersonation is not allowed through this listwatch gateway".into(),
                });
            }
            remove_prefixed(&mut parts.headers, "impersonate-");
        }
        let h = &mut parts.headers;
        // Forged front-proxy identity.
        remove_prefixed(h, "x-remote-");
        strip_hop_by_hop(h, upgrade);
        h.remove(header::HOST);
        // No authenticator ran: the client is anonymous here, and stays so upstream.
        let user = user.unwrap_or_else(User::anonymous);
        match self.identity {
            Identity::Forward => {}
            Identity::FrontProxy => {
                h.remove(header::AUTHORIZATION);
                put_identity(h, IdentityHeaders::FRONT_PROXY, &user)?;
            }
            Identity::Impersonate => {
                h.remove(header::AUTHORIZATION);
                if let Some(t) = self.client.authorization() {
                    h.insert(header::AUTHORIZATION, t);
                }
                put_identity(h, IdentityHeaders::IMPERSONATE, &user)?;
            }
        }
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        parts.uri = self
            .client
            .target(path)
            .map_err(|e| ApiError::BadRequest(format!("invalid path: {e}")))?;
        // The upstream connection is HTTP/1.1 whatever the client spoke.
        parts.version = http::Version::HTTP_11;
        Ok(())
    }
}

impl PassThrough for Gateway {
    /// Requests passed on and refused here, upstream errors and latency, streams and
    /// upgraded connections open.
    fn metrics_text(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ =
            prometheus_client::encoding::text::encode_registry(&mut text, &self.counters.registry);
        text
    }

    fn forward(
        &self,
        req: Request<RequestBody>,
        user: Option<User>,
    ) -> BoxFuture<'static, Response<ResponseBody>> {
        let this = Arc::new(self.clone_handle());
        Box::pin(async move {
            this.pass(req, user).await.unwrap_or_else(|e| {
                listwatch_server::response::error(&e, listwatch_codec::Encoding::Json)
            })
        })
    }
}

impl Gateway {
    /// A handle sharing this gateway's pool, slots and counters.
    fn clone_handle(&self) -> Gateway {
        Gateway {
            client: self.client.clone(),
            identity: self.identity,
            response_timeout: self.response_timeout,
            slots: self.slots.clone(),
            counters: self.counters.clone(),
        }
    }
}

/// Sets the user and group headers (names `user_h`, `group_h`) to `user`'s.
fn put_identity(h: &mut HeaderMap, names: IdentityHeaders, user: &User) -> Result<(), ApiError> {
    let value = |s: &str| {
        HeaderValue::from_str(s)
            .map_err(|_| ApiError::BadRequest("user name is not a header value".into()))
    };
    h.insert(names.user, value(&user.name)?);
    for g in &user.groups {
        h.append(names.group, value(g)?);
    }
    if !user.uid.is_empty() {
        h.insert(names.uid, value(&user.uid)?);
    }
    for (key, values) in &user.extra {
        let name = HeaderName::from_bytes(
            format!(
                "{}{}",
                names.extra,
                listwatch_kubeclient::percent_encode(key)
            )
            .as_bytes(),
        )
        .map_err(|_| ApiError::BadRequest("user extra is not a header name".into()))?;
        for v in values {
            h.append(name.clone(), value(v)?);
        }
    }
    Ok(())
}

/// The headers one identity mode names a user in.
#[derive(Clone, Copy)]
struct IdentityHeaders {
    user: &'static str,
    group: &'static str,
    uid: &'static str,
    /// Prefix of one header per extra key.
    extra: &'static str,
}

impl IdentityHeaders {
    /// kube-apiserver's request-header authentication (the defaults of its
    /// `--requestheader-*` flags; the UID header is read where `--requestheader-uid-headers`
    /// names it).
    const FRONT_PROXY: IdentityHeaders = IdentityHeaders {
        user: "x-remote-user",
        group: "x-remote-group",
        uid: "x-remote-uid",
        extra: "x-remote-extra-",
    };
    /// kube-apiserver's impersonation headers.
    const IMPERSONATE: IdentityHeaders = IdentityHeaders {
        user: "impersonate-user",
        group: "impersonate-group",
        uid: "impersonate-uid",
        extra: "impersonate-extra-",
    };
}

/// Removes every header whose name starts with `prefix` (lower case, as names are kept).
fn remove_prefixed(h: &mut HeaderMap, prefix: &str) {
    let names: Vec<HeaderName> = h
        .keys()
        .filter(|k| k.as_str().starts_with(prefix))
        .cloned()
        .collect();
    for n in names {
        h.remove(n);
    }
}

/// Whether the request or response asks to switch protocols (SPDY, WebSocket).
fn is_upgrade(h: &HeaderMap) -> bool {
    h.contains_key(header::UPGRADE)
        && h.get_all(header::CONNECTION).iter().any(|v| {
            v.to_str().is_ok_and(|v| {
                v.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
            })
        })
}

/// Removes the headers that belong to one hop (RFC 9110 §7.6.1), keeping `Connection:
/// Upgrade` and `Upgrade` when the protocol switch is to cross the hop.
fn strip_hop_by_hop(h: &mut HeaderMap, upgrade: bool) {
    // Headers `Connection` names are hop-by-hop too.
    let named: Vec<HeaderName> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .filter(|n| !(upgrade && *n == header::UPGRADE))
        .collect();
    for n in named {
        h.remove(n);
    }
    for n in [
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::PROXY_AUTHORIZATION,
        header::PROXY_AUTHENTICATE,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
    ] {
        h.remove(n);
    }
    if upgrade {
        h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    } else {
        h.remove(header::CONNECTION);
        h.remove(header::UPGRADE);
    }
}

/// Counts a stream or upgraded connection as open while it lives.
struct Open(Arc<Counters>);

impl Open {
    fn new(c: &Arc<Counters>) -> Open {
        c.open_streams.inc();
        Open(c.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open_streams.dec();
    }
}

/// The upstream's response body relayed chunk by chunk, holding its in-flight slot until
/// it ends.
struct Relay {
    inner: Either<hyper::body::Incoming, listwatch_kubeclient::ResponseBody>,
    _permit: tokio::sync::OwnedSemaphorePermit,
    _open: Open,
}

impl Body for Relay {
    type Data = Bytes;
    type Error = BodyCut;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        use std::task::Poll;
        match std::pin::Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(f))) => Poll::Ready(Some(Ok(f))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Err(e))) => {
                // Not an end: the client's connection (or HTTP/2 stream) is aborted, so a
                // chunked body is not taken as complete.
                tracing::warn!(error = %e, "upstream response body failed; aborting the response");
                Poll::Ready(Some(Err(BodyCut(e.to_string()))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
