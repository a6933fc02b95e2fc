//! A test upstream standing in for what kube-apiserver reaches through the kubelet: a pod's
//! `log` (followed, streamed over time), and the WebSocket upgrades kubectl makes for
//! `exec` and `attach` (channel protocol `v5.channel.k8s.io`) and `portforward` (SPDY/3.1
//! tunnelled in WebSocket binary messages, `SPDY/3.1+portforward.k8s.io`, KEP 4006); and,
//! when told to refuse WebSocket, the same three over SPDY/3.1 upgrades (`exec`/`attach`:
//! remotecommand `v4.channel.k8s.io`; `portforward`: `portforward.k8s.io`), what kubectl
//! falls back to and what kubectl before 1.30 (1.31 for port-forward) speaks.
//! Everything else is proxied to a listwatch on its embedded store, so the pod objects kubectl
//! reads first exist there.
//!
//! The "container" is this machine: commands run for real (from a short allowlist) and a
//! forwarded port is a port on 127.0.0.1, so tests use absolute paths in a temporary
//! directory and a local echo server.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::SinkExt;
use futures::stream::{SplitStream, StreamExt};
use http::{Request, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Body = UnsyncBoxBody<Bytes, BoxError>;
type Ws = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// Lines a pod's log has; a followed log sends one every [`LOG_INTERVAL`], then ends.
pub const LOG_LINES: usize = 5;
/// The pause between two lines of a followed log.
pub const LOG_INTERVAL: Duration = Duration::from_millis(300);
/// Lines `attach` streams on stdout before the session ends.
pub const ATTACH_LINES: usize = 3;

/// The remotecommand subprotocol kubectl offers for exec, attach and cp.
const CHANNEL_V5: &str = "v5.channel.k8s.io";
/// The remotecommand protocol of an `exec` or `attach` over SPDY/3.1.
const CHANNEL_V4: &str = "v4.channel.k8s.io";
/// The protocol of a port-forward over SPDY/3.1.
const PORTFORWARD_V1: &str = "portforward.k8s.io";
/// The subprotocol kubectl port-forward offers: SPDY tunnelled in WebSocket.
const PORTFORWARD_TUNNEL: &str = "SPDY/3.1+portforward.k8s.io";
/// How long after the upgrade a command or attached process starts writing. A kubelet
/// behind kube-apiserver starts it a round trip later; output at once would meet kubectl
/// 1.32's race (its reader starts before its streams exist and drops what arrives first:
/// "Unknown stream id 2, discarding message"; kubernetes/kubernetes#131189, fixed in 1.33).
const START_DELAY: Duration = Duration::from_millis(150);
/// Programs `exec` runs; anything else fails as a missing executable would.
const ALLOWED: &[&str] = &["echo", "cat", "sh", "tar", "test", "ls", "tail"];

/// A running test upstream.
pub struct Kubelet {
    /// Where it listens (plain HTTP/1.1).
    pub addr: SocketAddr,
    /// Every command `exec` was asked to run, in order.
    pub commands: Arc<Mutex<Vec<Vec<String>>>>,
    /// The subresource requests it answered itself (`exec`, `log`, …), in order.
    pub served: Arc<Mutex<Vec<String>>>,
    /// Refuse `exec`, `attach` and `portforward` over WebSocket, as an apiserver or
    /// kubelet before 1.30 does: kubectl then falls back to SPDY/3.1 (served, and recorded
    /// as `exec-spdy`, `attach-spdy`, `portforward-spdy`).
    pub refuse_websocket: Arc<std::sync::atomic::AtomicBool>,
}

struct State {
    upstream: SocketAddr,
    client: hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        Incoming,
    >,
    commands: Arc<Mutex<Vec<Vec<String>>>>,
    served: Arc<Mutex<Vec<String>>>,
    refuse_websocket: Arc<std::sync::atomic::AtomicBool>,
}

/// Starts the test upstream on 127.0.0.1, proxying what it does not serve to `upstream`.
pub async fn start(upstream: SocketAddr) -> Kubelet {
    let (listener, addr) = listwatch_testkit::listen_local().await;
    let commands = Arc::new(Mutex::new(Vec::new()));
    let served = Arc::new(Mutex::new(Vec::new()));
    let refuse_websocket = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let state = Arc::new(State {
        upstream,
        client: hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build_http(),
        commands: commands.clone(),
        served: served.clone(),
        refuse_websocket: refuse_websocket.clone(),
    });
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let state = state.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| state.clone().handle(req));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .with_upgrades()
                    .await;
            });
        }
    });
    Kubelet {
        addr,
        commands,
        served,
        refuse_websocket,
    }
}

impl State {
    async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
        let path = req.uri().path().to_string();
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let sub = match segments.as_slice() {
            ["api", "v1", "namespaces", _, "pods", _, sub] => Some(*sub),
            _ => None,
        };
        let query = decode_query(req.uri().query().unwrap_or(""));
        let upgrade = req
            .headers()
            .get(header::UPGRADE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_ascii_lowercase);
        let websocket = upgrade.as_deref() == Some("websocket");
        let refuse_websocket = self
            .refuse_websocket
            .load(std::sync::atomic::Ordering::Relaxed);
        let answer = match sub {
            Some("log") if req.method() == http::Method::GET => {
                self.served.lock().push("log".into());
                log(&query)
            }
            Some(s @ ("exec" | "attach" | "portforward")) if websocket && refuse_websocket => text(
                StatusCode::BAD_REQUEST,
                format!("{s}: this kubelet speaks SPDY/3.1 only"),
            ),
            Some(s @ ("exec" | "attach" | "portforward"))
                if upgrade.as_deref() == Some("spdy/3.1") =>
            {
                self.served.lock().push(format!("{s}-spdy"));
                self.upgrade(Transport::Spdy, s, req, query)
            }
            Some(s @ ("exec" | "attach" | "portforward")) if websocket => {
                self.served.lock().push(s.into());
                self.upgrade(Transport::WebSocket, s, req, query)
            }
            _ => self.proxy(req).await,
        };
        Ok(answer)
    }

    /// Passes the request on to the listwatch upstream, bodies streamed both ways.
    async fn proxy(&self, req: Request<Incoming>) -> Response<Body> {
        let (mut parts, body) = req.into_parts();
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        parts.uri = match format!("http://{}{path}", self.upstream).parse() {
            Ok(u) => u,
            Err(e) => return text(StatusCode::BAD_REQUEST, format!("bad path: {e}")),
        };
        parts.headers.remove(header::HOST);
        match self.client.request(Request::from_parts(parts, body)).await {
            Ok(resp) => resp.map(|b| b.map_err(|e| -> BoxError { Box::new(e) }).boxed_unsync()),
            Err(e) => text(StatusCode::BAD_GATEWAY, format!("upstream: {e}")),
        }
    }

    /// Accepts the upgrade of `sub` (`exec`, `attach`, `portforward`) to `transport` when
    /// the client offers the protocol the session needs there, and runs the session on the
    /// upgraded connection.
    fn upgrade(
        self: Arc<Self>,
        transport: Transport,
        sub: &str,
        mut req: Request<Incoming>,
        query: Vec<(String, String)>,
    ) -> Response<Body> {
        let switching = Response::builder()
            .status(StatusCode::SWITCHING_PROTOCOLS)
            .header(header::CONNECTION, "Upgrade");
        let switching = match transport {
            Transport::WebSocket => {
                let wanted = protocol(sub, PORTFORWARD_TUNNEL, CHANNEL_V5);
                let offered = offers(req.headers(), header::SEC_WEBSOCKET_PROTOCOL, wanted);
                let Some(key) = req.headers().get(header::SEC_WEBSOCKET_KEY) else {
                    return text(StatusCode::BAD_REQUEST, "no Sec-WebSocket-Key".into());
                };
                if !offered {
                    // As a kubelet that only speaks `wanted`: the client may fall back (to
                    // SPDY, which this upstream does not speak, so a test sees it fail).
                    return text(
                        StatusCode::BAD_REQUEST,
                        format!("{sub}: subprotocol {wanted} not offered"),
                    );
                }
                switching
                    .header(header::UPGRADE, "websocket")
                    .header(
                        header::SEC_WEBSOCKET_ACCEPT,
                        derive_accept_key(key.as_bytes()),
                    )
                    .header(header::SEC_WEBSOCKET_PROTOCOL, wanted)
            }
            Transport::Spdy => {
                let wanted = protocol(sub, PORTFORWARD_V1, CHANNEL_V4);
                if !offers(req.headers(), "x-stream-protocol-version", wanted) {
                    return text(
                        StatusCode::FORBIDDEN,
                        format!("{sub}: protocol {wanted} not offered"),
                    );
                }
                switching
                    .header(header::UPGRADE, "SPDY/3.1")
                    .header("X-Stream-Protocol-Version", wanted)
            }
        };
        let on = hyper::upgrade::on(&mut req);
        let sub = sub.to_string();
        tokio::spawn(async move {
            let Ok(upgraded) = on.await else { return };
            match transport {
                Transport::WebSocket => {
                    let ws = WebSocketStream::from_raw_socket(
                        TokioIo::new(upgraded),
                        Role::Server,
                        None,
                    )
                    .await;
                    match sub.as_str() {
                        "exec" => exec(ws, &query, &self.commands).await,
                        "attach" => attach(ws).await,
                        _ => portforward(ws).await,
                    }
                }
                Transport::Spdy => {
                    let conn = SpdyConnection::new(upgraded);
                    match sub.as_str() {
                        "exec" => spdy_exec(conn, &query, &self.commands).await,
                        "attach" => spdy_attach(conn, &query).await,
                        _ => spdy_portforward(conn).await,
                    }
                }
            }
        });
        switching.body(empty()).expect("a valid 101")
    }
}

/// What a streaming session's connection is upgraded to: a WebSocket (remotecommand
/// `v5.channel.k8s.io`, or `portforward.k8s.io`'s tunnel), or SPDY/3.1 (remotecommand
/// `v4.channel.k8s.io`, or `portforward.k8s.io`: what kubectl falls back to when the
/// WebSocket upgrade is refused).
#[derive(Clone, Copy)]
enum Transport {
    WebSocket,
    Spdy,
}

/// The protocol a session of `sub` speaks: `portforward`'s, or the remote command
/// `channel` of exec and attach.
fn protocol(sub: &str, portforward: &'static str, channel: &'static str) -> &'static str {
    if sub == "portforward" {
        portforward
    } else {
        channel
    }
}

/// Whether the comma-separated values of the `name` headers offer the protocol `wanted`.
fn offers(headers: &http::HeaderMap, name: impl header::AsHeaderName, wanted: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim() == wanted)
}

fn empty() -> Body {
    Full::new(Bytes::new())
        .map_err(|e: Infallible| -> BoxError { match e {} })
        .boxed_unsync()
}

fn text(status: StatusCode, message: String) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/plain")
        .body(
            Full::new(Bytes::from(message))
                .map_err(|e: Infallible| -> BoxError { match e {} })
                .boxed_unsync(),
        )
        .expect("a valid response")
}

/// The query's pairs, `+` and `%XX` decoded (Go's `url.Values.Encode` writes them).
fn decode_query(q: &str) -> Vec<(String, String)> {
    let decode = |s: &str| {
        let b = s.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < b.len() => {
                    let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
                    match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                        Some(v) => {
                            out.push(v);
                            i += 2;
                        }
                        None => out.push(b'%'),
                    }
                }
                c => out.push(c),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn flag(query: &[(String, String)], name: &str) -> bool {
    query
        .iter()
        .any(|(k, v)| k == name && (v == "true" || v == "1"))
}

/// The log's line `i` (1-based).
pub fn log_line(i: usize) -> String {
    format!("log line {i}\n")
}

/// The pod's log: all of it at once, or with `follow=true` a line every [`LOG_INTERVAL`]
/// (chunked), the response ending after the last as a container's exit ends it.
fn log(query: &[(String, String)]) -> Response<Body> {
    let body = if flag(query, "follow") {
        let lines = futures::stream::unfold(1usize, |i| async move {
            if i > LOG_LINES {
                return None;
            }
            if i > 1 {
                tokio::time::sleep(LOG_INTERVAL).await;
            }
            let frame = Frame::data(Bytes::from(log_line(i)));
            Some((Ok::<_, BoxError>(frame), i + 1))
        });
        StreamBody::new(lines).boxed_unsync()
    } else {
        let all: String = (1..=LOG_LINES).map(log_line).collect();
        Full::new(Bytes::from(all))
            .map_err(|e: Infallible| -> BoxError { match e {} })
            .boxed_unsync()
    };
    Response::builder()
        .header(header::CONTENT_TYPE, "text/plain")
        .body(body)
        .expect("a valid response")
}

/// Splits the session: what is sent goes through the returned channel to one writer task
/// (frames from several producers never interleave), a `Close` ending it.
fn split(
    ws: Ws,
) -> (
    mpsc::Sender<Message>,
    SplitStream<Ws>,
    tokio::task::JoinHandle<()>,
) {
    let (mut sink, stream) = ws.split();
    let (tx, mut rx) = mpsc::channel::<Message>(64);
    let writer = tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            let close = matches!(m, Message::Close(_));
            if sink.send(m).await.is_err() || close {
                break;
            }
        }
    });
    (tx, stream, writer)
}

/// One remotecommand message: the channel byte, then the data.
fn channel(id: u8, data: &[u8]) -> Message {
    let mut m = Vec::with_capacity(data.len() + 1);
    m.push(id);
    m.extend_from_slice(data);
    Message::Binary(m.into())
}

/// Ends a remotecommand session: the `Status` on channel 3 (kubectl's exit code comes from
/// it), then a normal close, which the client reads as the end of every stream.
async fn finish(tx: mpsc::Sender<Message>, writer: tokio::task::JoinHandle<()>, status: String) {
    let _ = tx.send(channel(3, status.as_bytes())).await;
    close(tx, writer).await;
}

/// Closes a WebSocket session normally and waits for its writer to send what is queued.
async fn close(tx: mpsc::Sender<Message>, writer: tokio::task::JoinHandle<()>) {
    let _ = tx
        .send(Message::Close(Some(CloseFrame {
            code: CloseCode::Normal,
            reason: "".into(),
        })))
        .await;
    drop(tx);
    let _ = writer.await;
}

fn success() -> String {
    r#"{"metadata":{},"status":"Success"}"#.into()
}

/// The `Status` kubelet reports for a command that exited with `code` (kubectl exits with
/// the code in `details.causes[reason=ExitCode]`).
fn exit_status(command: &[String], code: i32) -> String {
    serde_json::json!({
        "metadata": {},
        "status": "Failure",
        "message": format!("command terminated with non-zero exit code: error executing command {command:?}, exit code {code}"),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
    .to_string()
}

fn failure(message: String) -> String {
    serde_json::json!({"metadata": {}, "status": "Failure", "message": message}).to_string()
}

/// The command an `exec` asks for (query `command=` repeated), recorded in `commands`.
fn requested_command(
    query: &[(String, String)],
    commands: &Mutex<Vec<Vec<String>>>,
) -> Vec<String> {
    let command: Vec<String> = query
        .iter()
        .filter(|(k, _)| k == "command")
        .map(|(_, v)| v.clone())
        .collect();
    commands.lock().push(command.clone());
    command
}

/// Starts `command` if it is allowed here, stdin piped when `stdin`; else the failure
/// `Status` to report.
fn start_command(command: &[String], stdin: bool) -> Result<tokio::process::Child, String> {
    let allowed = command
        .first()
        .is_some_and(|c| ALLOWED.contains(&c.as_str()));
    if !allowed {
        return Err(failure(format!("executable not allowed here: {command:?}")));
    }
    tokio::process::Command::new(&command[0])
        .args(&command[1..])
        .stdin(if stdin {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| failure(format!("{command:?}: {e}")))
}

/// Copies `out` (a command's stdout or stderr) to the session until it ends, each read
/// framed by `frame`.
fn pump(
    out: Option<impl tokio::io::AsyncRead + Send + Unpin + 'static>,
    tx: &mpsc::Sender<Message>,
    frame: impl Fn(&[u8]) -> Message + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let tx = tx.clone();
    tokio::spawn(async move {
        let Some(mut out) = out else { return };
        let mut buf = vec![0u8; 32 * 1024];
        while let Ok(n) = out.read(&mut buf).await {
            if n == 0 || tx.send(frame(&buf[..n])).await.is_err() {
                break;
            }
        }
    })
}

/// The failure `Status` of a command that ended as `exited` (None: it exited 0).
fn exit_report(
    command: &[String],
    exited: std::io::Result<std::process::ExitStatus>,
) -> Option<String> {
    match exited.map(|s| s.code()) {
        Ok(Some(0)) => None,
        Ok(Some(code)) => Some(exit_status(command, code)),
        Ok(None) => Some(failure(format!("{command:?} was killed"))),
        Err(e) => Some(failure(format!("{command:?}: {e}"))),
    }
}

/// Runs `command` (query `command=` repeated) with the streams the query asks for: stdin
/// from channel 0 until the client's close signal (`[255, 0]`), stdout on 1, stderr on 2.
async fn exec(ws: Ws, query: &[(String, String)], commands: &Mutex<Vec<Vec<String>>>) {
    let command = requested_command(query, commands);
    let (tx, mut incoming, writer) = split(ws);
    tokio::time::sleep(START_DELAY).await;
    let mut child = match start_command(&command, flag(query, "stdin")) {
        Ok(c) => c,
        Err(status) => return finish(tx, writer, status).await,
    };
    let stdout = pump(child.stdout.take(), &tx, |b| channel(1, b));
    let stderr = pump(child.stderr.take(), &tx, |b| channel(2, b));
    let mut input = child.stdin.take();
    let exited = loop {
        tokio::select! {
            status = child.wait() => break status,
            msg = incoming.next() => match msg {
                Some(Ok(Message::Binary(b))) => match b.first() {
                    Some(0) => {
                        if let Some(i) = input.as_mut()
                            && i.write_all(&b[1..]).await.is_err()
                        {
                            input = None;
                        }
                    }
                    // The close signal for stdin: EOF for the command.
                    Some(255) if b.get(1) == Some(&0) => input = None,
                    _ => {}
                },
                Some(Ok(_)) => {}
                // The client went away: the command is killed with `child`.
                Some(Err(_)) | None => return,
            }
        }
    };
    let _ = stdout.await;
    let _ = stderr.await;
    let status = exit_report(&command, exited).unwrap_or_else(success);
    finish(tx, writer, status).await;
}

/// A SPDY/3.1 session on a raw upgraded connection: frames read from `read` are fed to
/// `session`; what the session and the handlers send goes out through one writer task.
struct SpdyConnection {
    read: tokio::io::ReadHalf<TokioIo<hyper::upgrade::Upgraded>>,
    tx: mpsc::Sender<Message>,
    writer: tokio::task::JoinHandle<()>,
    session: spdy::Session,
    chunk: Vec<u8>,
}

impl SpdyConnection {
    fn new(upgraded: hyper::upgrade::Upgraded) -> Self {
        let (read, mut write) = tokio::io::split(TokioIo::new(upgraded));
        let (tx, mut rx) = mpsc::channel::<Message>(64);
        let writer = tokio::spawn(async move {
            while let Some(m) = rx.recv().await {
                if let Message::Binary(b) = m
                    && write.write_all(&b).await.is_err()
                {
                    break;
                }
            }
            let _ = write.shutdown().await;
        });
        let session = spdy::Session::new(tx.clone());
        SpdyConnection {
            read,
            tx,
            writer,
            session,
            chunk: vec![0u8; 16 * 1024],
        }
    }

    /// Reads and handles one batch of frames; false when the client is gone or broke the
    /// session.
    async fn step(&mut self) -> bool {
        match self.read.read(&mut self.chunk).await {
            Ok(n) if n > 0 => self.session.feed(&self.chunk[..n]).await,
            _ => false,
        }
    }

    /// Reads until the client has opened the standard streams the query asks for (and its
    /// error stream); false if it went away first.
    async fn await_streams(&mut self, query: &[(String, String)]) -> bool {
        let wanted: Vec<&str> = ["stdin", "stdout", "stderr"]
            .into_iter()
            .filter(|s| flag(query, s))
            .collect();
        while !self.session.has_streams(&wanted) {
            if !self.step().await {
                return false;
            }
        }
        true
    }

    /// Ends the stdout and stderr streams, then the error stream with `status` (empty for
    /// success), and closes the connection once the writer has sent it all.
    async fn finish(self, status: String) {
        let (out_id, err_id, error_id) = (
            self.session.stream("stdout"),
            self.session.stream("stderr"),
            self.session.stream("error"),
        );
        for id in [out_id, err_id].into_iter().flatten() {
            let _ = self.tx.send(spdy::data(id, true, &[])).await;
        }
        if let Some(id) = error_id {
            let _ = self.tx.send(spdy::data(id, true, status.as_bytes())).await;
        }
        self.close().await;
    }

    /// Closes the connection once the writer has sent everything queued.
    async fn close(self) {
        drop(self.session);
        drop(self.tx);
        let _ = self.writer.await;
    }
}

/// `exec` over SPDY/3.1: kubectl opens an `error` stream and one stream per standard stream
/// it asked for (`streamtype` header); the command's output goes to the `stdout`/`stderr`
/// streams, its stdin comes from the `stdin` stream, and the error stream carries the
/// `Status` of a failure (nothing for success) before every stream is closed.
async fn spdy_exec(
    mut conn: SpdyConnection,
    query: &[(String, String)],
    commands: &Mutex<Vec<Vec<String>>>,
) {
    let command = requested_command(query, commands);
    if !conn.await_streams(query).await {
        return;
    }
    let (out_id, err_id) = (conn.session.stream("stdout"), conn.session.stream("stderr"));
    let status = match start_command(&command, flag(query, "stdin")) {
        Err(status) => status,
        Ok(mut child) => {
            if let (Some(id), Some(input)) = (conn.session.stream("stdin"), child.stdin.take()) {
                conn.session.attach(id, Box::new(input));
            }
            let to = |id: Option<u32>| move |b: &[u8]| spdy::data(id.unwrap_or(0), false, b);
            let stdout = pump(
                child.stdout.take().filter(|_| out_id.is_some()),
                &conn.tx,
                to(out_id),
            );
            let stderr = pump(
                child.stderr.take().filter(|_| err_id.is_some()),
                &conn.tx,
                to(err_id),
            );
            let exited = loop {
                tokio::select! {
                    status = child.wait() => break status,
                    // The client went away: the command is killed with `child`.
                    going = conn.step() => if !going { return },
                }
            };
            let _ = stdout.await;
            let _ = stderr.await;
            exit_report(&command, exited).unwrap_or_default()
        }
    };
    conn.finish(status).await;
}

/// `attach` over SPDY/3.1: the "running process" writes [`ATTACH_LINES`] lines to the
/// stdout stream over time, then exits 0 (an empty error stream).
async fn spdy_attach(mut conn: SpdyConnection, query: &[(String, String)]) {
    if !conn.await_streams(query).await {
        return;
    }
    let Some(out_id) = conn.session.stream("stdout") else {
        return conn
            .finish(failure("attach: no stdout stream".into()))
            .await;
    };
    tokio::time::sleep(START_DELAY).await;
    for i in 1..=ATTACH_LINES {
        let line = spdy::data(out_id, false, attach_line(i).as_bytes());
        if conn.tx.send(line).await.is_err() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    conn.finish(String::new()).await;
}

/// Port-forwarding over SPDY/3.1 on the raw connection: the same session as in the
/// WebSocket tunnel ([`portforward`]), frames read straight from the socket.
async fn spdy_portforward(mut conn: SpdyConnection) {
    while conn.step().await {}
    conn.close().await;
}

/// The attach line `i` (1-based).
pub fn attach_line(i: usize) -> String {
    format!("attached line {i}\n")
}

/// Attaches to the "running process": it writes [`ATTACH_LINES`] lines to stdout over
/// time, then exits 0.
async fn attach(ws: Ws) {
    let (tx, _incoming, writer) = split(ws);
    tokio::time::sleep(START_DELAY).await;
    for i in 1..=ATTACH_LINES {
        if tx
            .send(channel(1, attach_line(i).as_bytes()))
            .await
            .is_err()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    finish(tx, writer, success()).await;
}

/// Port-forwarding as kubelet serves it behind kube-apiserver's WebSocket tunnel: the
/// binary messages carry a SPDY/3.1 session in which kubectl opens, per connection, an
/// error stream and a data stream (headers `streamtype`, `port`, `requestid`); the data
/// stream is joined to 127.0.0.1:`port`.
async fn portforward(ws: Ws) {
    let (tx, mut incoming, writer) = split(ws);
    let mut session = spdy::Session::new(tx.clone());
    while let Some(Ok(msg)) = incoming.next().await {
        match msg {
            Message::Binary(b) if session.feed(&b).await => {}
            Message::Binary(_) | Message::Close(_) => break,
            _ => {}
        }
    }
    drop(session);
    close(tx, writer).await;
}

/// The little of SPDY/3.1 a port-forward needs, server side.
mod spdy {
    use super::*;
    use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};

    const SYN_STREAM: u16 = 1;
    const SYN_REPLY: u16 = 2;
    const RST_STREAM: u16 = 3;
    const PING: u16 = 6;
    const GOAWAY: u16 = 7;
    const FLAG_FIN: u8 = 1;

    /// Why a session cannot go on.
    #[derive(Debug)]
    pub struct Error(String);

    impl std::fmt::Display for Error {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    /// The length of the first whole frame in `buf`, if it holds one.
    fn frame_len(buf: &[u8]) -> Option<usize> {
        if buf.len() < 8 {
            return None;
        }
        let len = 8 + u32::from_be_bytes([0, buf[5], buf[6], buf[7]]) as usize;
        (buf.len() >= len).then_some(len)
    }

    fn be32(b: &[u8], at: usize) -> Result<u32, Error> {
        b.get(at..at + 4)
            .map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
            .ok_or_else(|| Error("frame too short".into()))
    }

    fn len24(n: usize) -> [u8; 3] {
        let b = (n as u32).to_be_bytes();
        [b[1], b[2], b[3]]
    }

    /// A DATA frame of `stream`.
    pub fn data(stream: u32, fin: bool, payload: &[u8]) -> Message {
        let mut f = Vec::with_capacity(8 + payload.len());
        f.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
        f.push(if fin { FLAG_FIN } else { 0 });
        f.extend_from_slice(&len24(payload.len()));
        f.extend_from_slice(payload);
        Message::Binary(f.into())
    }

    /// A control frame of SPDY version 3.
    fn control(kind: u16, flags: u8, body: &[u8]) -> Message {
        let mut f = Vec::with_capacity(8 + body.len());
        f.extend_from_slice(&[0x80, 0x03]);
        f.extend_from_slice(&kind.to_be_bytes());
        f.push(flags);
        f.extend_from_slice(&len24(body.len()));
        f.extend_from_slice(body);
        Message::Binary(f.into())
    }

    /// SPDY/3's header-compression dictionary (draft-mbelshe-httpbis-spdy-00 §2.6.10.1):
    /// the words, each after its 32-bit length, then a run of common values.
    fn dictionary() -> Vec<u8> {
        #[rustfmt::skip]
        const WORDS: &[&str] = &[
            "options", "head", "post", "put", "delete", "trace", "accept", "accept-charset",
            "accept-encoding", "accept-language", "accept-ranges", "age", "allow",
            "authorization", "cache-control", "connection", "content-base", "content-encoding",
            "content-language", "content-length", "content-location", "content-md5",
            "content-range", "content-type", "date", "etag", "expect", "expires", "from",
            "host", "if-match", "if-modified-since", "if-none-match", "if-range",
            "if-unmodified-since", "last-modified", "location", "max-forwards", "pragma",
            "proxy-authenticate", "proxy-authorization", "range", "referer", "retry-after",
            "server", "te", "trailer", "transfer-encoding", "upgrade", "user-agent", "vary",
            "via", "warning", "www-authenticate", "method", "get", "status", "200 OK",
            "version", "HTTP/1.1", "url", "public", "set-cookie", "keep-alive", "origin",
        ];
        const TAIL: &str = "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505\
203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized\
403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable\
Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT\
chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,\
text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.";
        let mut d = Vec::new();
        for w in WORDS {
            d.extend_from_slice(&(w.len() as u32).to_be_bytes());
            d.extend_from_slice(w.as_bytes());
        }
        d.extend_from_slice(TAIL.as_bytes());
        d
    }

    fn adler32(data: &[u8]) -> u32 {
        let (mut a, mut b) = (1u32, 0u32);
        for &x in data {
            a = (a + u32::from(x)) % 65521;
            b = (b + a) % 65521;
        }
        (b << 16) | a
    }

    /// The client's header blocks: one zlib stream across the session, compressed against
    /// the SPDY dictionary. Inflated raw, the dictionary is put in the window first as a
    /// stored block (what a preset dictionary means), and its output skipped.
    struct Inflater {
        raw: Decompress,
        started: bool,
        skip: usize,
    }

    impl Inflater {
        fn block(&mut self, mut data: &[u8]) -> Result<Vec<u8>, Error> {
            let mut input = Vec::new();
            if !self.started {
                if data.len() < 2 || data[0] & 0x0f != 8 {
                    return Err(Error("header block is not zlib".into()));
                }
                let dict = dictionary();
                if data[1] & 0x20 != 0 {
                    let id = be32(data, 2)?;
                    if id != adler32(&dict) {
                        return Err(Error(format!(
                            "header dictionary id {id:#x}, ours {:#x}",
                            adler32(&dict)
                        )));
                    }
                    data = &data[6..];
                } else {
                    data = &data[2..];
                }
                let n = dict.len() as u16;
                input.push(0); // BFINAL 0, BTYPE 00 (stored), padded to the byte
                input.extend_from_slice(&n.to_le_bytes());
                input.extend_from_slice(&(!n).to_le_bytes());
                input.extend_from_slice(&dict);
                self.skip = dict.len();
                self.started = true;
            }
            input.extend_from_slice(data);
            let mut out = Vec::with_capacity(4096);
            let mut at = 0;
            loop {
                if out.capacity() - out.len() < 1024 {
                    out.reserve(4096);
                }
                let (i, o) = (self.raw.total_in(), self.raw.total_out());
                self.raw
                    .decompress_vec(&input[at..], &mut out, FlushDecompress::Sync)
                    .map_err(|e| Error(format!("header block: {e}")))?;
                at += (self.raw.total_in() - i) as usize;
                let progressed = self.raw.total_in() != i || self.raw.total_out() != o;
                if (at >= input.len() && out.len() < out.capacity()) || !progressed {
                    break;
                }
            }
            let skip = std::mem::take(&mut self.skip).min(out.len());
            Ok(out.split_off(skip))
        }
    }

    /// A header block's name/value pairs (32-bit lengths).
    fn parse_headers(b: &[u8]) -> Result<HashMap<String, String>, Error> {
        let n = be32(b, 0)?;
        let mut at = 4;
        let mut h = HashMap::new();
        let string = |at: &mut usize| -> Result<String, Error> {
            let len = be32(b, *at)? as usize;
            let s = b
                .get(*at + 4..*at + 4 + len)
                .ok_or_else(|| Error("header block too short".into()))?;
            *at += 4 + len;
            Ok(String::from_utf8_lossy(s).into_owned())
        };
        for _ in 0..n {
            let name = string(&mut at)?;
            let value = string(&mut at)?;
            h.insert(name, value);
        }
        Ok(h)
    }

    /// One session's streams (a port-forward's, or an exec's).
    pub struct Session {
        tx: mpsc::Sender<Message>,
        inflate: Inflater,
        deflate: Compress,
        /// Where each incoming stream's data goes (a forwarded port's connection, a
        /// command's stdin), by stream id.
        data: HashMap<u32, Box<dyn tokio::io::AsyncWrite + Send + Sync + Unpin>>,
        /// The error stream of each request id (an exec's: of "").
        errors: HashMap<String, u32>,
        /// An exec's standard streams, by `streamtype`.
        standard: HashMap<String, u32>,
        copiers: Vec<tokio::task::JoinHandle<()>>,
        /// Bytes received and not yet a whole frame.
        pending: Vec<u8>,
    }

    impl Drop for Session {
        fn drop(&mut self) {
            for c in &self.copiers {
                c.abort();
            }
        }
    }

    impl Session {
        /// A session whose frames go out through `tx`.
        pub fn new(tx: mpsc::Sender<Message>) -> Session {
            Session {
                tx,
                inflate: Inflater {
                    raw: Decompress::new(false),
                    started: false,
                    skip: 0,
                },
                deflate: Compress::new(Compression::default(), true),
                data: HashMap::new(),
                errors: HashMap::new(),
                standard: HashMap::new(),
                copiers: Vec::new(),
                pending: Vec::new(),
            }
        }

        /// Handles the whole frames `data` completes; false once the session cannot go on
        /// (said on stderr).
        pub async fn feed(&mut self, data: &[u8]) -> bool {
            self.pending.extend_from_slice(data);
            while let Some(len) = frame_len(&self.pending) {
                let frame: Vec<u8> = self.pending.drain(..len).collect();
                if let Err(e) = self.frame(&frame).await {
                    eprintln!("test kubelet: SPDY session ended: {e}");
                    return false;
                }
            }
            true
        }

        /// Whether the error stream and every one of `wanted` are open.
        pub fn has_streams(&self, wanted: &[&str]) -> bool {
            self.errors.contains_key("") && wanted.iter().all(|w| self.standard.contains_key(*w))
        }

        /// The id of the stream of `streamtype` (an exec's).
        pub fn stream(&self, streamtype: &str) -> Option<u32> {
            match streamtype {
                "error" => self.errors.get("").copied(),
                t => self.standard.get(t).copied(),
            }
        }

        /// Sends what arrives on `stream` to `to` (closed when the client ends the stream).
        pub fn attach(
            &mut self,
            stream: u32,
            to: Box<dyn tokio::io::AsyncWrite + Send + Sync + Unpin>,
        ) {
            self.data.insert(stream, to);
        }

        async fn send(&self, m: Message) -> Result<(), Error> {
            self.tx
                .send(m)
                .await
                .map_err(|_| Error("the connection is gone".into()))
        }

        /// An empty header block (no pairs), compressed on this session's zlib stream.
        fn empty_headers(&mut self) -> Result<Vec<u8>, Error> {
            let raw = [0u8; 4];
            let mut out = Vec::with_capacity(64);
            let mut at = 0;
            loop {
                out.reserve(256);
                let before = self.deflate.total_in();
                self.deflate
                    .compress_vec(&raw[at..], &mut out, FlushCompress::Sync)
                    .map_err(|e| Error(format!("compress: {e}")))?;
                at += (self.deflate.total_in() - before) as usize;
                if at >= raw.len() && out.len() < out.capacity() {
                    return Ok(out);
                }
            }
        }

        /// Handles one whole frame.
        pub async fn frame(&mut self, f: &[u8]) -> Result<(), Error> {
            let flags = f[4];
            let body = &f[8..];
            if f[0] & 0x80 == 0 {
                let stream = be32(f, 0)? & 0x7fff_ffff;
                if let Some(conn) = self.data.get_mut(&stream) {
                    if !body.is_empty() && conn.write_all(body).await.is_err() {
                        self.data.remove(&stream);
                    } else if flags & FLAG_FIN != 0 {
                        // The client is done sending: half-close towards the port.
                        if let Some(mut conn) = self.data.remove(&stream) {
                            let _ = conn.shutdown().await;
                        }
                    }
                }
                return Ok(());
            }
            match u16::from_be_bytes([f[2], f[3]]) {
                SYN_STREAM => {
                    let stream = be32(body, 0)? & 0x7fff_ffff;
                    let block = body.get(10..).unwrap_or_default();
                    let headers = parse_headers(&self.inflate.block(block)?)?;
                    let mut reply = stream.to_be_bytes().to_vec();
                    reply.extend_from_slice(&self.empty_headers()?);
                    self.send(control(SYN_REPLY, 0, &reply)).await?;
                    self.open(stream, &headers).await
                }
                RST_STREAM => {
                    self.data.remove(&(be32(body, 0)? & 0x7fff_ffff));
                    Ok(())
                }
                // Pings are answered with the same frame.
                PING => self.send(control(PING, flags, body)).await,
                GOAWAY => Err(Error("the client went away".into())),
                // SETTINGS, WINDOW_UPDATE, HEADERS: nothing to do for a few small streams.
                _ => Ok(()),
            }
        }

        /// Sets up a stream kubectl opened: its error stream is remembered; its data
        /// stream is connected to the port and copied back until the port closes.
        async fn open(&mut self, stream: u32, h: &HashMap<String, String>) -> Result<(), Error> {
            let request = h.get("requestid").cloned().unwrap_or_default();
            match h.get("streamtype").map(String::as_str) {
                Some("error") => {
                    self.errors.insert(request, stream);
                    Ok(())
                }
                Some(t @ ("stdin" | "stdout" | "stderr" | "resize")) => {
                    self.standard.insert(t.to_string(), stream);
                    Ok(())
                }
                Some("data") => {
                    let error_stream = self.errors.get(&request).copied();
                    let port: u16 = h.get("port").and_then(|p| p.parse().ok()).unwrap_or(0);
                    let conn = match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
                        Ok(c) => c,
                        Err(e) => {
                            if let Some(es) = error_stream {
                                let msg = format!("failed to connect to localhost:{port}: {e}");
                                self.send(data(es, true, msg.as_bytes())).await?;
                            }
                            return self.send(data(stream, true, &[])).await;
                        }
                    };
                    let (mut read, write) = conn.into_split();
                    self.data.insert(stream, Box::new(write));
                    let tx = self.tx.clone();
                    self.copiers.push(tokio::spawn(async move {
                        let mut buf = vec![0u8; 16 * 1024];
                        while let Ok(n) = read.read(&mut buf).await {
                            if n == 0 || tx.send(data(stream, false, &buf[..n])).await.is_err() {
                                break;
                            }
                        }
                        // The port closed: end the data stream, then the error stream
                        // (empty: no error), which kubectl waits for.
                        let _ = tx.send(data(stream, true, &[])).await;
                        if let Some(es) = error_stream {
                            let _ = tx.send(data(es, true, &[])).await;
                        }
                    }));
                    Ok(())
                }
                other => Err(Error(format!("unknown stream type {other:?}"))),
            }
        }
    }
}
