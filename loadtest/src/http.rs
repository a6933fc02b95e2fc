//! Every request of the harness but the raw-socket slow reader goes through hyper's client
//! here: over `net::connect` (plain or TLS), with the bearer token, one HTTP/1.1 connection
//! per streamed request (as client-go's watches and large LISTs are), or one kept alive for
//! back-to-back small requests (writes, probes). [`Body`] counts wire bytes and inflates
//! gzip.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request};

use crate::net;

/// Protobuf, as kube-apiserver names it.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// How a scenario's requests ask for their bodies: the command line's `--gzip` and
/// `--protobuf`, reported as they were given.
#[derive(clap::Args, serde::Serialize, Clone, Copy)]
pub struct Form {
    /// Ask for gzip.
    #[arg(long)]
    pub gzip: bool,
    /// Ask for `application/vnd.kubernetes.protobuf` (list, watch-list, churn, idle-watchers,
    /// relist-storm, kubelet-storm, informers).
    #[arg(long)]
    pub protobuf: bool,
}

/// The sending half of one HTTP/1.1 connection.
pub type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// Opens an HTTP/1.1 connection; its driver runs on its own task until the connection ends.
pub async fn open(host: &str) -> Result<Sender, String> {
    handshake(net::connect(host).await?).await
}

/// An HTTP/1.1 connection over `conn`.
async fn handshake(conn: net::Conn) -> Result<Sender, String> {
    let io = hyper_util::rt::TokioIo::new(conn);
    let (send, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    Ok(send)
}

/// The `Accept` value for a list (or a watch, `watch`) in JSON or protobuf, whole objects
/// or PartialObjectMetadata; `None` for plain JSON (the server's default).
pub fn accept(protobuf: bool, metadata_only: bool, watch: bool) -> Option<String> {
    if !protobuf && !metadata_only {
        return None;
    }
    let media = if protobuf {
        PROTOBUF
    } else {
        "application/json"
    };
    let form = match (metadata_only, watch) {
        (false, _) => "",
        (true, true) => ";as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
        (true, false) => ";as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
    };
    let stream = if watch && protobuf {
        ";stream=watch"
    } else {
        ""
    };
    Some(format!("{media}{form}{stream}"))
}

/// A request with the harness's headers (host, user agent, token; JSON body when given: a
/// JSON merge patch for PATCH).
pub fn request(
    method: Method,
    host: &str,
    path: &str,
    accept: Option<&str>,
    gzip: bool,
    body: Option<String>,
) -> Result<Request<Full<Bytes>>, String> {
    let patch = method == Method::PATCH;
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", host)
        .header("user-agent", "listwatch-loadtest");
    if let Some(a) = accept {
        req = req.header("accept", a);
    }
    if gzip {
        req = req.header("accept-encoding", "gzip");
    }
    if let Some(b) = net::bearer() {
        req = req.header("authorization", b);
    }
    if body.is_some() {
        let json = if patch {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        req = req.header("content-type", json);
    }
    req.body(Full::new(body.map(Bytes::from).unwrap_or_default()))
        .map_err(|e| e.to_string())
}

/// The sending half of one HTTP/2 connection (many streams).
pub type H2Sender = hyper::client::conn::http2::SendRequest<Full<Bytes>>;

/// Opens an HTTP/2 connection (prior knowledge: h2c, or h2 over TLS); its driver runs on
/// its own task. It never caps the streams it resets itself (a harness drops many at once).
pub async fn open_h2(host: &str) -> Result<H2Sender, String> {
    handshake_h2(net::connect_h2(host).await?).await
}

/// An HTTP/2 connection over `conn`.
async fn handshake_h2(conn: net::Conn) -> Result<H2Sender, String> {
    let io = hyper_util::rt::TokioIo::new(conn);
    let (send, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .max_concurrent_reset_streams(0)
            .handshake(io)
            .await
            .map_err(|e| with_causes(&e))?;
    tokio::spawn(conn);
    Ok(send)
}

/// [`request`] for an HTTP/2 stream: HTTP/2 names the target in `:scheme` and
/// `:authority`, from an absolute URI, not in `Host`.
pub fn h2_request(
    method: Method,
    host: &str,
    path: &str,
    accept: Option<&str>,
    gzip: bool,
) -> Result<Request<Full<Bytes>>, String> {
    let mut req = request(
        method,
        host,
        &format!("http://{host}{path}"),
        accept,
        gzip,
        None,
    )?;
    req.headers_mut().remove("host");
    Ok(req)
}

/// Streamed GETs go over HTTP/2 (see [`streams_over_h2`]).
static STREAMS_OVER_H2: AtomicBool = AtomicBool::new(false);

/// From now on each streamed GET ([`get`]) opens an HTTP/2 connection of its own (prior
/// knowledge: h2c, or h2 over TLS), as a kubelet's client-go does, instead of HTTP/1.1.
pub fn streams_over_h2(on: bool) {
    STREAMS_OVER_H2.store(on, Ordering::Relaxed);
}

/// A GET on a fresh connection, returned once the response head has arrived: its status
/// and its body, to be read as a stream.
pub async fn get(
    host: &str,
    path: &str,
    accept: Option<&str>,
    gzip: bool,
) -> Result<(u16, Body), String> {
    let (status, body, _) = get_timed(host, path, accept, gzip, false).await?;
    Ok((status, body))
}

/// When a timed GET went out, and when its first response bytes reached the socket.
pub struct Timing {
    /// The connection was open and the request about to be written.
    pub sent: std::time::Instant,
    /// See [`net::Arrival`] (`None` over TLS or HTTP/2, or when not asked for).
    pub arrival: Option<net::Arrival>,
}

/// [`get`], also returning when the connection was ready and the request went out (so a
/// first-byte figure can leave out the connection's setup) and, when `watch_arrival`, when
/// the response's first bytes reached the socket (plain HTTP/1.1 only).
pub async fn get_timed(
    host: &str,
    path: &str,
    accept: Option<&str>,
    gzip: bool,
    watch_arrival: bool,
) -> Result<(u16, Body, Timing), String> {
    let h2 = STREAMS_OVER_H2.load(Ordering::Relaxed);
    // An HTTP/2 server speaks first (its SETTINGS), so only HTTP/1.1's first bytes are the
    // response's.
    let (conn, arrival) = if h2 {
        (net::connect_h2(host).await?, None)
    } else {
        net::connect_watched(host, watch_arrival).await?
    };
    let (resp, sent) = if h2 {
        let req = h2_request(Method::GET, host, path, accept, gzip)?;
        let mut send = handshake_h2(conn).await?;
        let sent = std::time::Instant::now();
        (send.send_request(req).await, sent)
    } else {
        let mut send = handshake(conn).await?;
        let sent = std::time::Instant::now();
        let req = request(Method::GET, host, path, accept, gzip, None)?;
        (send.send_request(req).await, sent)
    };
    let resp = resp.map_err(|e| with_causes(&e))?;
    let gz = resp
        .headers()
        .get("content-encoding")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
    let status = resp.status().as_u16();
    Ok((
        status,
        Body::new(resp.into_body(), gz),
        Timing { sent, arrival },
    ))
}

/// A GET as a new stream of an open HTTP/2 connection, returned once the response head has
/// arrived (as a kubelet's client-go sends every request on its one connection).
pub async fn get_on(
    send: &mut H2Sender,
    host: &str,
    path: &str,
    accept: Option<&str>,
) -> Result<(u16, Body), String> {
    send.ready().await.map_err(|e| with_causes(&e))?;
    let req = h2_request(Method::GET, host, path, accept, false)?;
    let resp = send.send_request(req).await.map_err(|e| with_causes(&e))?;
    let status = resp.status().as_u16();
    Ok((status, Body::new(resp.into_body(), false)))
}

/// A response body as a stream of decoded chunks, counting bytes on the wire and decoded.
pub struct Body {
    inner: Incoming,
    inflate: Option<flate2::write::GzDecoder<Vec<u8>>>,
    /// Bytes received on the wire (compressed when gzip).
    pub wire: u64,
    /// Bytes after inflating.
    pub decoded: u64,
}

impl Body {
    /// Wraps a body, inflating it when the response was gzip-encoded.
    pub fn new(inner: Incoming, gzip: bool) -> Self {
        Body {
            inner,
            inflate: gzip.then(|| flate2::write::GzDecoder::new(Vec::new())),
            wire: 0,
            decoded: 0,
        }
    }

    /// The next decoded bytes; `None` at the end of the body.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, String> {
        loop {
            let Some(frame) = self.inner.frame().await else {
                return Ok(None);
            };
            let Ok(data) = frame.map_err(|e| with_causes(&e))?.into_data() else {
                continue; // trailers
            };
            self.wire += data.len() as u64;
            let out = match self.inflate.as_mut() {
                None => data,
                Some(g) => {
                    g.write_all(&data).map_err(|e| format!("gzip: {e}"))?;
                    g.flush().map_err(|e| format!("gzip: {e}"))?;
                    Bytes::from(std::mem::take(g.get_mut()))
                }
            };
            if !out.is_empty() {
                self.decoded += out.len() as u64;
                return Ok(Some(out));
            }
        }
    }

    /// The whole decoded body (small responses only).
    pub async fn read_all(mut self) -> Result<Vec<u8>, String> {
        let mut all = Vec::new();
        while let Some(c) = self.chunk().await? {
            all.extend_from_slice(&c);
        }
        Ok(all)
    }
}

/// One HTTP/1.1 connection kept alive for back-to-back small requests (reopened after an
/// error), as a controller's writes go.
pub struct KeepAlive {
    host: String,
    send: Option<Sender>,
}

impl KeepAlive {
    /// Connects on first use.
    pub fn new(host: &str) -> Self {
        KeepAlive {
            host: host.to_string(),
            send: None,
        }
    }

    /// Sends one request and reads its whole response: status and body.
    pub async fn call(
        &mut self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Result<(u16, Vec<u8>), String> {
        let r = self.try_call(method, path, body).await;
        if r.is_err() {
            self.send = None;
        }
        r
    }

    async fn try_call(
        &mut self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Result<(u16, Vec<u8>), String> {
        let send = match &mut self.send {
            Some(s) if !s.is_closed() => s,
            slot => slot.insert(open(&self.host).await?),
        };
        send.ready().await.map_err(|e| e.to_string())?;
        let req = request(method, &self.host, path, None, false, body)?;
        let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let body = Body::new(resp.into_body(), false).read_all().await?;
        Ok((status, body))
    }
}

/// One small request on its own connection: status and body.
pub async fn call(
    host: &str,
    method: Method,
    path: &str,
    body: Option<String>,
) -> Result<(u16, Vec<u8>), String> {
    KeepAlive::new(host).call(method, path, body).await
}

/// The `metadata.resourceVersion` of a JSON body (object or list).
pub fn rv_of(body: &[u8]) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v["metadata"]["resourceVersion"].as_str()?.parse().ok()
}

/// An error with its causes ("connection error: connection reset by peer"): hyper's own
/// message names only the kind.
pub fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}
