//! The standalone server: accepts connections (plain or TLS), authenticates each request,
//! hands it to the [`App`], and drains on shutdown.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http::Request;
use hyper_util::rt::{TokioExecutor, TokioIo};
use listwatch_auth::Authenticate;
use listwatch_auth::authn::PeerIdentity;
use tokio::net::TcpListener;
use tracing::warn;

use crate::app::App;
use crate::{box_body, connection};

/// How the standalone server accepts connections.
#[derive(Clone, Default)]
pub struct ServeOptions {
    /// TLS (with ALPN h2/http1.1); plaintext HTTP/1.1 and h2c without it.
    #[cfg(feature = "standalone")]
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Tells client-CA users from trusted front proxies when the TLS config accepts both
    /// (`tls_config_with_front_proxy`); without it a verified certificate names its user.
    #[cfg(feature = "standalone")]
    pub client_certs: Option<Arc<listwatch_auth::tls::ClientCerts>>,
    /// Authenticates every request; without it requests carry no user (embedding hosts
    /// put their own [`listwatch_auth::User`] into the request extensions).
    pub authenticator: Option<Arc<dyn Authenticate>>,
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
        let (tls, client_certs) = (tls.clone(), options.client_certs.clone());
        let watcher = graceful.watcher();
        #[cfg(feature = "standalone")]
        let handshake_deadline = app.config().limits.connection.first_request;
        tokio::spawn(async move {
            #[cfg(feature = "standalone")]
            if let Some(acceptor) = tls {
                // Boxed: the handshake's state is freed once it is done, not kept in the
                // connection's task for its life.
                let Some((tls_stream, identity)) = Box::pin(accept_tls(
                    acceptor,
                    stream,
                    client_certs.as_deref(),
                    handshake_deadline,
                ))
                .await
                else {
                    tracing::debug!(%peer, "TLS handshake failed or timed out");
                    return;
                };
                let io = TokioIo::new(tls_stream);
                serve_connection(app, authn, identity, io, watcher, peer).await;
                return;
            }
            let identity = PeerIdentity::default();
            serve_connection(app, authn, identity, TokioIo::new(stream), watcher, peer).await
        });
    }
    drop(listener);
    tracing::info!(grace = ?options.watch_grace, "draining: LISTs finish, watches end spread over the grace period");
    app.drain(options.watch_grace);
    // Watches end within their grace; LISTs (and other responses) get theirs to finish.
    let limit =
        (options.watch_grace + Duration::from_secs(10)).max(app.config().shutdown_list_grace);
    if tokio::time::timeout(limit, graceful.shutdown())
        .await
        .is_err()
    {
        warn!(after = ?limit, "responses still in flight after the shutdown grace; closing their connections");
    }
    maintenance.shutdown().await;
    Ok(())
}

/// Completes a client's TLS handshake within `deadline` (the time from accept to the first
/// request, kube-apiserver's read-header timeout, which counts its handshakes too: a busy
/// client's handshake it accepts is not cut here either; a client that never finishes does
/// not hold a task forever) and names the client by its certificate.
#[cfg(feature = "standalone")]
async fn accept_tls(
    acceptor: tokio_rustls::TlsAcceptor,
    stream: tokio::net::TcpStream,
    client_certs: Option<&listwatch_auth::tls::ClientCerts>,
    deadline: Duration,
) -> Option<(
    tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    PeerIdentity,
)> {
    let accepted = tokio::time::timeout(deadline, acceptor.accept(stream)).await;
    let tls_stream = accepted.ok()?.ok()?;
    let chain = tls_stream.get_ref().1.peer_certificates().unwrap_or(&[]);
    let identity = match client_certs {
        Some(c) => c.identify(chain),
        None => PeerIdentity {
            user: chain.first().and_then(listwatch_auth::tls::user_from_cert),
            front_proxy: false,
        },
    };
    Some((tls_stream, identity))
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

/// Serves one client connection until it ends or its watchdog closes it. Not an `async fn`:
/// its arguments and locals are not kept in the connection's task beside the connection
/// they build (the service and a copy of hyper's builder live in the boxed connection).
fn serve_connection<I>(
    app: Arc<App>,
    authn: Option<Arc<dyn Authenticate>>,
    identity: PeerIdentity,
    io: TokioIo<I>,
    watcher: hyper_util::server::graceful::Watcher,
    peer: std::net::SocketAddr,
) -> impl Future<Output = ()> + Send
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let chunk = app.config().chunk_bytes;
    let resets = app.config().limits.max_h2_pending_resets;
    let max_cancelled = app.config().limits.max_cancelled_requests;
    let timeouts = app.config().limits.connection;
    let connection = connection::Connection::new();
    let on_conn = connection.clone();
    let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
        let in_flight = on_conn.begin();
        let app = app.clone();
        let authn = authn.clone();
        let identity = identity.clone();
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
                if identity.front_proxy {
                    head.extensions.insert(listwatch_auth::authn::FrontProxied);
                }
                if let Some(authn) = &authn {
                    match authn.authenticate(&head, identity.user.as_ref()).await {
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
        // Streams the server resets for the client's errors (refused over the concurrency
        // limit among them, which a burst of resets a slow server has not yet seen causes):
        // a cap of its own, switched off with the one above.
        .max_local_error_reset_streams((resets != 0).then_some(256));
    // Boxed: a future moved into `select!` would be held twice in the task (once captured,
    // once where it is polled); the connection is ~1.7 KB.
    let served =
        Box::pin(watcher.watch(builder.serve_connection_with_upgrades(io, svc).into_owned()));
    async move {
        tokio::select! {
            r = served => {
                if let Err(e) = r {
                    tracing::debug!(%peer, error = %e, "connection ended");
                }
            }
            // Dropping the connection closes it: idle ones have nothing in flight, and a
            // response its client stopped reading ends with it.
            why = connection.watchdog(timeouts, max_cancelled) => tracing::debug!(%peer, why, "closing connection"),
        }
    }
}
