//! The gateway against a recording upstream (a small hyper server): identity headers the
//! client forges never reach it, refused clients never reach it, anonymous stays anonymous,
//! bodies stream, protocol upgrades (exec) cross the hop, and a missing upstream is a 503.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use listwatch_auth::authn::Authenticator;
use listwatch_gateway::{ClientCert, Gateway, GatewayConfig, Identity};
use listwatch_server::{App, ServeOptions, ServerConfig, serve_with};
use listwatch_testkit::TempDir;
use listwatch_testkit::tls::{Ca, Leaf, connect, write};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

type Seen = Arc<Mutex<Vec<(String, HeaderMap)>>>;
type UpBody = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

/// The recording upstream: answers `…/log` with three chunks 50 ms apart, an Upgrade with
/// 101 and an echo, anything else with a small JSON body; records every request's path and
/// headers, and the connection it came on as `x-recorded-peer`.
async fn upstream() -> (SocketAddr, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen: Seen = Arc::default();
    let record = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, peer)) = listener.accept().await else {
                return;
            };
            let record = record.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |mut req: Request<Incoming>| {
                    let mut headers = req.headers().clone();
                    let peer = peer.to_string().parse().expect("header value");
                    headers.insert("x-recorded-peer", peer);
                    record
                        .lock()
                        .expect("lock")
                        .push((req.uri().to_string(), headers));
                    async move {
                        let path = req.uri().path().to_string();
                        let resp: Response<UpBody> = if req.headers().contains_key("upgrade") {
                            let on = hyper::upgrade::on(&mut req);
                            tokio::spawn(async move {
                                if let Ok(up) = on.await {
                                    let mut io = TokioIo::new(up);
                                    let mut buf = [0u8; 64];
                                    while let Ok(n) = io.read(&mut buf).await {
                                        if n == 0 || io.write_all(&buf[..n]).await.is_err() {
                                            break;
                                        }
                                    }
                                }
                            });
                            Response::builder()
                                .status(101)
                                .header("connection", "Upgrade")
                                .header("upgrade", "SPDY/3.1")
                                .body(Empty::new().boxed())
                                .expect("response")
                        } else if path.ends_with("/log") {
                            let lines = futures::stream::unfold(0, |i| async move {
                                if i == 3 {
                                    return None;
                                }
                                tokio::time::sleep(Duration::from_millis(50)).await;
                                let f = Frame::data(Bytes::from(format!("line {i}\n")));
                                Some((Ok::<_, std::convert::Infallible>(f), i + 1))
                            });
                            Response::new(StreamBody::new(lines).boxed())
                        } else {
                            let body = req.into_body().collect().await.expect("body").to_bytes();
                            Response::builder()
                                .header("content-type", "application/json")
                                .body(Full::new(body).boxed())
                                .expect("response")
                        };
                        Ok::<_, std::convert::Infallible>(resp)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .with_upgrades()
                    .await;
            });
        }
    });
    (addr, seen)
}

/// A front-proxy certificate the gateway presents (any will do over plain http).
fn proxy_cert() -> ClientCert {
    let proxy = Ca::new("front-proxy-ca").client("front-proxy-client", &[]);
    ClientCert::Pem {
        cert: proxy.cert_pem.into_bytes(),
        key: proxy.key_pem.into_bytes(),
    }
}

/// listwatch (embedded store, tokens `alice-token` for alice in `dev`) passing through to
/// `upstream` with `identity`; `anonymous` lets credential-less requests in.
async fn gateway(upstream: SocketAddr, identity: Identity, anonymous: bool) -> SocketAddr {
    gateway_with(
        GatewayConfig::new(format!("http://{upstream}"), identity),
        anonymous,
    )
    .await
}

async fn gateway_with(mut config: GatewayConfig, anonymous: bool) -> SocketAddr {
    config.client.token = Some("listwatch-own-token".into());
    let dir = std::env::temp_dir().join(format!("lw-gw-{}-{}", std::process::id(), rand_id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let tokens = dir.join("tokens.csv");
    std::fs::write(&tokens, "alice-token,alice,1,\"dev\"\n").expect("tokens");
    let authn = Authenticator::from_token_file(&tokens, anonymous).expect("authn");
    let options = ServeOptions {
        authenticator: Some(Arc::new(authn)),
        ..ServeOptions::default()
    };
    serve_front(config, options).await
}

/// [`front`] of `config` (a front proxy's presenting [`proxy_cert`]) served with `options`
/// on a free port of 127.0.0.1: its address.
async fn serve_front(mut config: GatewayConfig, options: ServeOptions) -> SocketAddr {
    if config.identity == Identity::FrontProxy {
        config.client.client_cert = Some(proxy_cert());
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(serve_with(
        front(config),
        listener,
        options,
        std::future::pending(),
    ));
    addr
}

/// listwatch on an empty embedded store, passing what it does not serve as `config` says.
fn front(config: GatewayConfig) -> Arc<App> {
    let registry = listwatch_sources::Registry::new(
        listwatch_core::builtin_resources(),
        1,
        &Default::default(),
    );
    let app = App::embedded(
        listwatch_sources::EmbeddedSource::new(registry),
        ServerConfig::default(),
    );
    app.set_pass_through(Gateway::new(config).expect("gateway"));
    app
}

fn rand_id() -> u64 {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Sends `method path` with `headers` to `addr`; status and body.
async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let mut req = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client
        .request(
            req.body(Full::new(Bytes::from_static(b"{\"kind\":\"ConfigMap\"}")))
                .expect("req"),
        )
        .await
        .expect("response");
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn all(h: &HeaderMap, name: &str) -> Vec<String> {
    h.get_all(name)
        .iter()
        .map(|v| v.to_str().expect("text").to_string())
        .collect()
}

/// Where the tests write.
const CONFIGMAPS: &str = "/api/v1/namespaces/dev/configmaps";

/// A resource listwatch does not serve: passed on.
const METRICS_PODS: &str = "/apis/metrics.k8s.io/v1beta1/pods";

/// alice's credential.
const ALICE: &[(&str, &str)] = &[("authorization", "Bearer alice-token")];

/// A forged front-proxy user and no credential.
const REMOTE_ADMIN: &[(&str, &str)] = &[("x-remote-user", "admin")];

/// Sends `method path` with `headers` through a gateway in `identity` mode (anonymous off)
/// to a new recording upstream; asserts a 200 and returns the body and the path and
/// headers the upstream saw.
async fn through(
    identity: Identity,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (String, String, HeaderMap) {
    let (up, seen) = upstream().await;
    let gw = gateway(up, identity, false).await;
    let (status, body) = send(gw, method, path, headers).await;
    assert_eq!(status, 200, "{body}");
    let (uri, h) = seen.lock().expect("lock").remove(0);
    (body, uri, h)
}

const FORGED: &[(&str, &str)] = &[
    ("authorization", "Bearer alice-token"),
    ("x-remote-user", "admin"),
    ("x-remote-group", "system:masters"),
    ("x-remote-extra-scopes", "all"),
    ("X-Remote-Uid", "0"),
];

/// The upstream connection each request arrived on, in order.
fn peers(seen: &Seen) -> Vec<String> {
    let seen = seen.lock().expect("lock");
    seen.iter()
        .map(|(_, h)| all(h, "x-recorded-peer").concat())
        .collect()
}

/// A forwarding gateway (anonymous allowed) in front of a recording upstream, after `n`
/// ConfigMap creates through it, each answered 200: the upstream's address, the gateway's,
/// and what the upstream saw.
async fn forwarded_creates(n: usize) -> (SocketAddr, SocketAddr, Seen) {
    let (up, seen) = upstream().await;
    let gw = gateway(up, Identity::Forward, true).await;
    for _ in 0..n {
        assert_eq!(send(gw, "POST", CONFIGMAPS, &[]).await.0, 200);
    }
    (up, gw, seen)
}

#[tokio::test]
async fn upstream_connections_are_reused_only_when_their_response_was_read_to_the_end() {
    let (up, gw, seen) = forwarded_creates(4).await;
    let p = peers(&seen);
    assert!(
        p.iter().all(|x| *x == p[0]),
        "one connection for all: {p:?}"
    );
    let host = all(&seen.lock().expect("lock")[0].1, "host");
    assert_eq!(host, [up.to_string()], "Host names the upstream");

    // A streamed response left after its first chunk: its connection still carries the
    // rest, so it must not serve the next request.
    let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .build_http::<Empty<Bytes>>();
    let uri = format!("http://{gw}/api/v1/namespaces/dev/pods/p/log?follow=true");
    let resp = client.get(uri.parse().expect("uri")).await.expect("log");
    let mut body = resp.into_body();
    let first = body.frame().await.expect("a chunk").expect("chunk");
    assert_eq!(first.into_data().expect("data"), "line 0\n");
    drop((body, client));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(send(gw, "POST", CONFIGMAPS, &[]).await.0, 200);
    let p = peers(&seen);
    let (log_peer, after) = (&p[p.len() - 2], &p[p.len() - 1]);
    assert_ne!(
        after, log_peer,
        "the cut log's connection was reused: {p:?}"
    );
}

#[tokio::test]
async fn forged_front_proxy_headers_never_reach_the_upstream() {
    let (body, uri, h) = &through(Identity::FrontProxy, "POST", CONFIGMAPS, FORGED).await;
    assert_eq!(body, "{\"kind\":\"ConfigMap\"}", "the body crossed the hop");
    assert_eq!(uri, CONFIGMAPS);
    assert_eq!(all(h, "x-remote-user"), ["alice"]);
    assert_eq!(all(h, "x-remote-group"), ["dev", "system:authenticated"]);
    // The forged extra is gone; the UID is alice's own (her token file line's), not the
    // forged one.
    assert!(h.get("x-remote-extra-scopes").is_none());
    assert_eq!(all(h, "x-remote-uid"), ["1"]);
    assert!(
        h.get("authorization").is_none(),
        "the client's token stays here"
    );
}

#[tokio::test]
async fn impersonation_by_the_client_is_refused_before_the_upstream() {
    let (up, seen) = upstream().await;
    for identity in [Identity::FrontProxy, Identity::Impersonate] {
        let gw = gateway(up, identity, false).await;
        let headers = [
            ("authorization", "Bearer alice-token"),
            ("impersonate-user", "admin"),
        ];
        let (status, body) = send(gw, "DELETE", "/api/v1/namespaces/dev/pods/p", &headers).await;
        assert_eq!(status, 403, "{body}");
        assert!(body.contains("impersonation"), "{body}");
        let headers = [
            ("authorization", "Bearer alice-token"),
            ("Impersonate-Group", "system:masters"),
        ];
        let (status, _) = send(gw, "GET", "/version", &headers).await;
        assert_eq!(status, 403);
        let (_, metrics) = send(gw, "GET", "/metrics", &headers[..1]).await;
        assert!(
            metrics.contains("listwatch_gateway_requests_total{route=\"refused\"} 2\n"),
            "{metrics}"
        );
        assert!(metrics.ends_with("# EOF\n"), "{metrics}");
    }
    assert!(
        seen.lock().expect("lock").is_empty(),
        "nothing reached the upstream"
    );
}

#[tokio::test]
async fn impersonate_mode_names_the_user_with_listwatch_s_own_credential() {
    let (_, _, h) = &through(Identity::Impersonate, "POST", CONFIGMAPS, FORGED).await;
    assert_eq!(all(h, "authorization"), ["Bearer listwatch-own-token"]);
    assert_eq!(all(h, "impersonate-user"), ["alice"]);
    assert_eq!(all(h, "impersonate-group"), ["dev", "system:authenticated"]);
    assert!(h.keys().all(|k| !k.as_str().starts_with("x-remote-")));
}

#[tokio::test]
async fn unauthenticated_clients_never_reach_the_upstream() {
    let (up, seen) = upstream().await;
    let gw = gateway(up, Identity::FrontProxy, false).await;
    // An unknown token, and no credential with anonymous off: 401 here.
    let forged = [("authorization", "Bearer forged")];
    let (status, _) = send(gw, "POST", CONFIGMAPS, &forged).await;
    assert_eq!(status, 401);
    let (status, _) = send(gw, "GET", METRICS_PODS, REMOTE_ADMIN).await;
    assert_eq!(status, 401);
    assert!(seen.lock().expect("lock").is_empty());
}

#[tokio::test]
async fn anonymous_clients_stay_anonymous_upstream() {
    let (up, seen) = upstream().await;
    for identity in [Identity::FrontProxy, Identity::Impersonate] {
        let gw = gateway(up, identity, true).await;
        let (status, _) = send(gw, "GET", METRICS_PODS, REMOTE_ADMIN).await;
        assert_eq!(status, 200);
    }
    let seen = seen.lock().expect("lock");
    let (front, imp) = (&seen[0].1, &seen[1].1);
    assert_eq!(all(front, "x-remote-user"), ["system:anonymous"]);
    assert_eq!(all(front, "x-remote-group"), ["system:unauthenticated"]);
    assert_eq!(all(imp, "impersonate-user"), ["system:anonymous"]);
    assert_eq!(all(imp, "impersonate-group"), ["system:unauthenticated"]);
    assert!(imp.get("x-remote-user").is_none());
}

#[tokio::test]
async fn forward_mode_passes_the_client_s_credential_as_it_came() {
    let headers = [
        ("authorization", "Bearer alice-token"),
        ("impersonate-user", "bob"),
        ("x-remote-user", "admin"),
    ];
    let path = format!("{CONFIGMAPS}/c");
    let (_, _, h) = &through(Identity::Forward, "PUT", &path, &headers).await;
    assert_eq!(all(h, "authorization"), ["Bearer alice-token"]);
    // The upstream checks this impersonation against alice's own token.
    assert_eq!(all(h, "impersonate-user"), ["bob"]);
    assert!(h.get("x-remote-user").is_none());
}

#[tokio::test]
async fn reads_of_served_resources_stay_here() {
    let (up, seen) = upstream().await;
    let gw = gateway(up, Identity::FrontProxy, false).await;
    let (status, body) = send(gw, "GET", CONFIGMAPS, ALICE).await;
    assert_eq!(status, 200);
    assert!(body.contains("\"kind\":\"ConfigMapList\""), "{body}");
    // Ready once the housekeeping loop has measured the protobuf lengths (a moment).
    let (status, _) = listwatch_testkit::poll_until(
        Duration::from_secs(10),
        || send(gw, "GET", "/readyz", ALICE),
        |(status, _)| *status == 200,
    )
    .await;
    assert_eq!(status, 200);
    assert!(seen.lock().expect("lock").is_empty());
    // Subresources are not: they go on.
    let (status, _) = send(gw, "GET", "/api/v1/namespaces/dev/pods/p/status", ALICE).await;
    assert_eq!(status, 200);
    assert_eq!(seen.lock().expect("lock").len(), 1);
}

#[tokio::test]
async fn logs_stream_through_chunk_by_chunk() {
    let (up, _) = upstream().await;
    let gw = gateway(up, Identity::FrontProxy, false).await;
    let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .build_http::<Empty<Bytes>>();
    let req = Request::get(format!(
        "http://{gw}/api/v1/namespaces/dev/pods/p/log?follow=true"
    ))
    .header("authorization", "Bearer alice-token")
    .body(Empty::new())
    .expect("req");
    let mut body = client.request(req).await.expect("response").into_body();
    // Each line arrives as its own frame, before the upstream has written the next.
    let mut frames = Vec::new();
    while let Some(f) = body.frame().await {
        if let Ok(d) = f.expect("frame").into_data() {
            frames.push(String::from_utf8_lossy(&d).into_owned());
        }
    }
    assert_eq!(frames, ["line 0\n", "line 1\n", "line 2\n"]);
}

#[tokio::test]
async fn exec_upgrades_cross_the_hop() {
    let (up, seen) = upstream().await;
    let gw = gateway(up, Identity::FrontProxy, false).await;
    let mut tcp = tokio::net::TcpStream::connect(gw).await.expect("connect");
    tcp.write_all(
        b"POST /api/v1/namespaces/dev/pods/p/exec?command=sh HTTP/1.1\r\nHost: x\r\n\
          Authorization: Bearer alice-token\r\nX-Remote-User: admin\r\n\
          Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n",
    )
    .await
    .expect("write");
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        tcp.read_exact(&mut b).await.expect("head");
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head).to_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(head.contains("upgrade: spdy/3.1"), "{head}");
    tcp.write_all(b"ping").await.expect("write");
    let mut echo = [0u8; 4];
    tcp.read_exact(&mut echo).await.expect("echo");
    assert_eq!(&echo, b"ping");
    let seen = seen.lock().expect("lock");
    let h = &seen[0].1;
    assert_eq!(all(h, "x-remote-user"), ["alice"]);
    assert_eq!(all(h, "x-stream-protocol-version"), ["v4.channel.k8s.io"]);
}

#[tokio::test]
async fn an_absent_upstream_is_a_503_status_not_a_hang() {
    // A port nothing listens on.
    let closed = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = closed.local_addr().expect("addr");
    drop(closed);
    let gw = gateway(addr, Identity::FrontProxy, false).await;
    let (status, body) = send(gw, "POST", CONFIGMAPS, ALICE).await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("\"kind\":\"Status\"") && body.contains("unavailable"),
        "{body}"
    );
}

#[tokio::test]
async fn a_silent_upstream_is_a_504_status() {
    // Accepts and never answers.
    let silent = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = silent.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            held.push(s);
        }
    });
    let mut config = GatewayConfig::new(format!("http://{addr}"), Identity::FrontProxy);
    config.client.response_timeout = Duration::from_millis(300);
    let gw = gateway_with(config, false).await;
    let (status, body) = send(gw, "GET", "/version", ALICE).await;
    assert_eq!(status, 504, "{body}");
}

#[tokio::test]
async fn an_upstream_body_that_breaks_off_is_not_relayed_as_complete() {
    // Answers with a chunked body, sends one chunk, then drops the connection.
    let breaking = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = breaking.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = breaking.accept().await {
            let mut head = [0u8; 4096];
            let _ = s.read(&mut head).await;
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nhello\n\r\n")
                .await;
            let _ = s.flush().await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let gw = gateway(addr, Identity::FrontProxy, false).await;
    let mut client = tokio::net::TcpStream::connect(gw).await.expect("connect");
    client
        .write_all(b"GET /api/v1/namespaces/dev/pods/p/log?follow=true HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer alice-token\r\n\r\n")
        .await
        .expect("request");
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), client.read_to_end(&mut got))
        .await
        .expect("the front closes the connection")
        .ok();
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(
        got.contains("hello"),
        "the chunk before the break is relayed: {got}"
    );
    assert!(
        !got.ends_with("0\r\n\r\n"),
        "a broken-off body must not end with the last chunk: {got:?}"
    );
}

/// A new cluster CA and a scratch directory `tag` holding a serving certificate for
/// 127.0.0.1 it signed (`tls.crt`, `tls.key`) and its own certificate (`ca.crt`, the CA
/// client certificates are checked against): the CA, the directory and the three files.
fn serving_files(tag: &str) -> (Ca, TempDir, [std::path::PathBuf; 3]) {
    let cluster = Ca::new("cluster-ca");
    let dir = TempDir::new(tag);
    let serving = cluster.server();
    let files = [
        write(&dir, "tls.crt", &serving.cert_pem),
        write(&dir, "tls.key", &serving.key_pem),
        write(&dir, "ca.crt", &cluster.cert_pem),
    ];
    (cluster, dir, files)
}

/// Sends one HTTP/1.1 request (with the header lines `headers`) over TLS to `addr`, trusting
/// `ca`, with client certificate `client`; the response's status line, or the TLS or I/O
/// error.
async fn https_status(
    addr: SocketAddr,
    ca: &Ca,
    client: &Leaf,
    headers: &str,
) -> std::io::Result<String> {
    let mut tls = connect(addr, ca, &[], Some(client)).await?;
    let head = format!(
        "POST /api/v1/namespaces/dev/configmaps HTTP/1.1\r\nHost: x\r\n{headers}Content-Length: 0\r\nConnection: close\r\n\r\n"
    );
    tls.write_all(head.as_bytes()).await?;
    let mut out = Vec::new();
    tls.read_to_end(&mut out).await?;
    let text = String::from_utf8_lossy(&out);
    Ok(text.lines().next().unwrap_or_default().to_string())
}

#[tokio::test]
async fn a_client_certificate_failing_verification_never_reaches_the_upstream() {
    let (up, seen) = upstream().await;
    let (cluster, _dir, [cert, key, client_ca]) = serving_files("gw-tls");
    let rogue = Ca::new("rogue-ca");
    let tls = listwatch_auth::tls::tls_config(&cert, &key, Some(&client_ca)).expect("tls");
    let options = ServeOptions {
        tls: Some(tls),
        authenticator: Some(Arc::new(Authenticator::certificates_only(false))),
        ..ServeOptions::default()
    };
    let config = GatewayConfig::new(format!("http://{up}"), Identity::FrontProxy);
    let addr = serve_front(config, options).await;
    // Signed by a CA listwatch does not trust: refused (handshake or 401), never passed on.
    let refused = https_status(addr, &cluster, &rogue.client("admin", &[]), "").await;
    assert!(
        refused.as_ref().map_or(true, |s| s.contains(" 401 ")),
        "{refused:?}"
    );
    assert!(seen.lock().expect("lock").is_empty());
    // A verified one is passed on as its CN.
    let ok = https_status(addr, &cluster, &cluster.client("carol", &[]), "")
        .await
        .expect("served");
    assert!(ok.contains(" 200 "), "{ok}");
    let seen = seen.lock().expect("lock");
    assert_eq!(all(&seen[0].1, "x-remote-user"), ["carol"]);
}

/// listwatch as the receiving end of a front proxy (kube-apiserver's `--requestheader-*`):
/// a certificate from the request-header CA with an allowed name makes `X-Remote-User` and
/// `X-Remote-Group` the user; any other certificate's headers are ignored.
#[tokio::test]
async fn a_trusted_front_proxy_s_headers_name_the_user() {
    let (up, seen) = upstream().await;
    let (cluster, dir, [cert, key, client_ca]) = serving_files("gw-rh");
    let proxies = Ca::new("front-proxy-ca");
    let trust = listwatch_auth::tls::FrontProxyTrust {
        ca: write(&dir, "front-proxy-ca.crt", &proxies.cert_pem),
        allowed_names: vec!["front-proxy-client".into()],
    };
    let (tls, certs) =
        listwatch_auth::tls::tls_config_with_front_proxy(&cert, &key, Some(&client_ca), &trust)
            .expect("tls");
    let mut authn = Authenticator::certificates_only(false);
    authn.request_headers = Some(Default::default());
    let options = ServeOptions {
        tls: Some(tls),
        client_certs: Some(Arc::new(certs)),
        authenticator: Some(Arc::new(authn)),
        ..ServeOptions::default()
    };
    let config = GatewayConfig::new(format!("http://{up}"), Identity::FrontProxy);
    let addr = serve_front(config, options).await;
    let as_alice = "X-Remote-User: alice\r\nX-Remote-Group: dev\r\nX-Remote-Group: ops\r\n";
    let cluster = &cluster;
    let ask = move |client: Leaf, headers: &'static str| async move {
        https_status(addr, cluster, &client, headers).await
    };

    let proxy = || proxies.client("front-proxy-client", &[]);
    let ok = ask(proxy(), as_alice).await.expect("served");
    assert!(ok.contains(" 200 "), "{ok}");
    // A proxy certificate without a user header names no one.
    let none = ask(proxy(), "").await.expect("answered");
    assert!(none.contains(" 401 "), "{none}");
    // The request-header CA's certificate with a name not allowed: headers ignored.
    let stranger = ask(proxies.client("someone-else", &[]), as_alice).await;
    assert!(
        stranger.as_ref().is_ok_and(|s| s.contains(" 401 ")),
        "{stranger:?}"
    );
    // A client-CA user's headers are not believed either: it is itself.
    let mallory = ask(cluster.client("mallory", &[]), as_alice)
        .await
        .expect("served");
    assert!(mallory.contains(" 200 "), "{mallory}");

    let seen = seen.lock().expect("lock");
    assert_eq!(
        seen.len(),
        2,
        "only the proxied alice and mallory reach the upstream"
    );
    assert_eq!(all(&seen[0].1, "x-remote-user"), ["alice"]);
    assert_eq!(
        all(&seen[0].1, "x-remote-group"),
        ["dev", "ops", "system:authenticated"]
    );
    assert_eq!(all(&seen[1].1, "x-remote-user"), ["mallory"]);
}

/// An upstream that closes its first connection, unanswered, when a second request arrives
/// on it (an idle timeout racing the request), and answers every other request with a small
/// JSON body. Returns its address and how many request heads it read.
async fn closing_upstream() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let heads: Arc<Mutex<Vec<String>>> = Arc::default();
    let record = heads.clone();
    tokio::spawn(async move {
        let mut first = true;
        while let Ok((mut tcp, _)) = listener.accept().await {
            let closes = std::mem::take(&mut first);
            let record = record.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                for answered in 0.. {
                    let head = loop {
                        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                            buf.drain(..end + 4);
                            break head;
                        }
                        if !read_more(&mut tcp, &mut buf).await {
                            return;
                        }
                    };
                    let line = head.lines().next().unwrap_or_default().to_string();
                    record.lock().expect("lock").push(line);
                    if closes && answered == 1 {
                        return; // dropped: closed without an answer
                    }
                    let length = head
                        .lines()
                        .filter_map(|l| l.split_once(':'))
                        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    while buf.len() < length {
                        if !read_more(&mut tcp, &mut buf).await {
                            return;
                        }
                    }
                    buf.drain(..length);
                    let body = "{\"kind\":\"Status\",\"status\":\"Success\"}";
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if tcp.write_all(resp.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, heads)
}

/// Appends what `tcp` has to `buf`; false once it is closed or broken.
async fn read_more(tcp: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 4096];
    match tcp.read(&mut chunk).await {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
    }
}

/// `method path` without a body, as kubectl sends a GET or a DELETE.
async fn send_empty(addr: SocketAddr, method: &str, path: &str) -> u16 {
    let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .build_http::<Empty<Bytes>>();
    let req = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .body(Empty::new())
        .expect("request");
    let resp = client.request(req).await.expect("response");
    resp.status().as_u16()
}

async fn get_empty(addr: SocketAddr, path: &str) -> u16 {
    send_empty(addr, "GET", path).await
}

#[tokio::test]
async fn a_get_on_an_idle_connection_the_upstream_closed_is_sent_again() {
    let (up, heads) = closing_upstream().await;
    let gw = gateway(up, Identity::Forward, true).await;
    assert_eq!(get_empty(gw, METRICS_PODS).await, 200);
    // The idle connection is taken and closed under the request: sent again on a new one.
    assert_eq!(get_empty(gw, METRICS_PODS).await, 200);
    let heads = heads.lock().expect("lock").clone();
    let get = format!("GET {METRICS_PODS} HTTP/1.1");
    assert_eq!(heads, [get.clone(), get.clone(), get], "{heads:?}");
}

#[tokio::test]
async fn a_write_on_an_idle_connection_the_upstream_closed_is_not_sent_twice() {
    let (up, heads) = closing_upstream().await;
    let gw = gateway(up, Identity::Forward, true).await;
    assert_eq!(get_empty(gw, METRICS_PODS).await, 200);
    // The create's bytes went out before the connection closed: the upstream may have
    // acted on it, so its client gets the error rather than a second create.
    let (status, body) = send(gw, "POST", CONFIGMAPS, &[]).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("\"kind\":\"Status\""), "{body}");
    // Nor a delete without a body: not idempotent in what it answers.
    let (up, heads_delete) = closing_upstream().await;
    let gw = gateway(up, Identity::Forward, true).await;
    assert_eq!(get_empty(gw, METRICS_PODS).await, 200);
    let pod = "/api/v1/namespaces/dev/pods/p";
    assert_eq!(send_empty(gw, "DELETE", pod).await, 503);
    for (heads, write) in [
        (heads, format!("POST {CONFIGMAPS} HTTP/1.1")),
        (heads_delete, format!("DELETE {pod} HTTP/1.1")),
    ] {
        let heads = heads.lock().expect("lock").clone();
        assert_eq!(
            heads,
            [format!("GET {METRICS_PODS} HTTP/1.1"), write],
            "{heads:?}"
        );
    }
}

#[tokio::test]
async fn metrics_count_upstream_answers_by_code_and_time() {
    let (_, gw, _) = forwarded_creates(3).await;
    let (_, metrics) = send(gw, "GET", "/metrics", &[]).await;
    for line in [
        "listwatch_gateway_requests_total{route=\"passed\"} 3\n",
        "listwatch_gateway_requests_total{route=\"refused\"} 0\n",
        "listwatch_gateway_upstream_responses_total{code=\"200\"} 3\n",
        "listwatch_gateway_upstream_errors_total 0\n",
        "listwatch_gateway_upstream_latency_seconds_count 3\n",
        "listwatch_gateway_upstream_latency_seconds_bucket{le=\"+Inf\"} 3\n",
        "# TYPE listwatch_gateway_upstream_latency_seconds histogram\n",
    ] {
        assert!(metrics.contains(line), "{line:?} missing from {metrics}");
    }
    assert!(metrics.ends_with("# EOF\n"), "{metrics}");
}
