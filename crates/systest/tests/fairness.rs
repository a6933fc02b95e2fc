//! Fair sharing and connection hygiene (issue 14): idle and half-open connections are
//! closed, a response nobody reads ends after a deadline and gives its LIST slot back, and
//! one client cannot hold every LIST slot while others are refused.

mod common;

use std::time::{Duration, Instant};

use listwatch_server::ServerConfig;
use listwatch_server::connection::ConnectionTimeouts;
use listwatch_server::limits::LimitConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn short_timeouts() -> ServerConfig {
    ServerConfig {
        limits: LimitConfig {
            connection: ConnectionTimeouts {
                first_request: Duration::from_secs(1),
                keep_alive_idle: Duration::from_secs(1),
                stalled_response: Duration::from_secs(2),
            },
            ..LimitConfig::default()
        },
        ..ServerConfig::default()
    }
}

/// Reads until the server closes the connection (or `within` passes); returns whether it
/// closed and what it sent.
async fn closed_within(
    s: &mut (impl tokio::io::AsyncRead + Unpin),
    within: Duration,
) -> (bool, Vec<u8>) {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return (false, got),
            Ok(Ok(0) | Err(_)) => return (true, got),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

async fn gauge(addr: std::net::SocketAddr, line: &str) -> bool {
    common::get(addr, "/metrics")
        .await
        .body
        .lines()
        .any(|l| l == line)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_half_open_connections_are_closed() {
    let s = common::start(20, short_timeouts()).await;
    // Never sends a byte: closed after the first-request timeout.
    let mut silent = TcpStream::connect(s.addr).await.expect("connect");
    let t = Instant::now();
    let (closed, _) = closed_within(&mut silent, Duration::from_secs(5)).await;
    assert!(closed, "a connection that never sent a request stayed open");
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );

    // One request on a kept-alive connection, then nothing: closed after the idle timeout.
    let mut kept = TcpStream::connect(s.addr).await.expect("connect");
    kept.write_all(b"GET /api/v1/pods?limit=1 HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let (closed, got) = closed_within(&mut kept, Duration::from_secs(5)).await;
    assert!(closed, "an idle kept-alive connection stayed open");
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "the request itself was answered"
    );

    // A watch on an idle resource sends nothing for longer than the idle timeout, and stays.
    let mut watch = TcpStream::connect(s.addr).await.expect("connect");
    watch
        .write_all(b"GET /api/v1/configmaps?watch=1&timeoutSeconds=30 HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let (closed, got) = closed_within(&mut watch, Duration::from_secs(4)).await;
    assert!(!closed, "an open watch was closed as idle");
    assert!(got.starts_with(b"HTTP/1.1 200"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_nobody_reads_ends_and_frees_its_slot() {
    let s = common::start(20_000, short_timeouts()).await;
    let mut stalled = TcpStream::connect(s.addr).await.expect("connect");
    stalled
        .write_all(b"GET /api/v1/pods?resourceVersion=0 HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let listing = "apiserver_longrunning_requests{verb=\"LIST\",resource=\"pods\"} 1";
    let idle = "apiserver_longrunning_requests{verb=\"LIST\",resource=\"pods\"} 0";
    let seen = common::poll_until(Duration::from_secs(10), || gauge(s.addr, listing), |v| *v).await;
    assert!(seen, "the stalled LIST was never in flight");
    // Not read for the stalled-response deadline (2 s): the server ends it.
    let t = Instant::now();
    let freed = common::poll_until(Duration::from_secs(10), || gauge(s.addr, idle), |v| *v).await;
    assert!(freed, "the stalled LIST still holds its slot");
    assert!(t.elapsed() >= Duration::from_secs(1), "{:?}", t.elapsed());
    // Its connection is gone: reading drains what was buffered, then hits the end.
    let (closed, _) = closed_within(&mut stalled, Duration::from_secs(30)).await;
    assert!(closed);
}

/// One h2c connection opens `n` LIST streams of 20,000 pods and never reads them; returns
/// the connection's handles (kept alive by the caller).
async fn greedy_h2(addr: std::net::SocketAddr, n: usize) -> Vec<h2::client::ResponseFuture> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (mut client, conn) = h2::client::handshake(tcp).await.expect("h2c handshake");
    tokio::spawn(conn);
    let mut held = Vec::new();
    for _ in 0..n {
        futures::future::poll_fn(|cx| client.poll_ready(cx))
            .await
            .expect("ready");
        let req = http::Request::get(format!("http://{addr}/api/v1/pods?resourceVersion=0"))
            .body(())
            .expect("req");
        let (resp, _) = client.send_request(req, true).expect("send");
        held.push(resp);
    }
    held
}

/// Another client LISTs every 100 ms for 3 s; returns the statuses it got.
async fn polite_client(addr: std::net::SocketAddr) -> Vec<u16> {
    let mut codes = Vec::new();
    let end = Instant::now() + Duration::from_secs(3);
    while Instant::now() < end {
        codes.push(common::get(addr, "/api/v1/pods?limit=5").await.status);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    codes
}

/// A server over 20,000 demo pods with 100 LIST slots, `per_connection` of them at most
/// for one connection (0: no share).
async fn start_with_list_share(per_connection: usize) -> common::TestServer {
    let config = ServerConfig {
        limits: LimitConfig {
            max_lists: 100,
            max_lists_per_connection: per_connection,
            ..LimitConfig::default()
        },
        ..ServerConfig::default()
    };
    common::start(20_000, config).await
}

/// A server with 100 LIST slots (one connection may hold `per_connection` of them) and a
/// greedy connection asking for 400 LISTs: whether it came to hold `held` slots, then the
/// codes a polite client got meanwhile.
async fn greedy_then_polite(per_connection: usize, held: usize) -> (bool, Vec<u16>) {
    let s = start_with_list_share(per_connection).await;
    let _greedy = greedy_h2(s.addr, 400).await;
    let full = format!("apiserver_longrunning_requests{{verb=\"LIST\",resource=\"pods\"}} {held}");
    let holds = common::poll_until(Duration::from_secs(10), || gauge(s.addr, &full), |v| *v).await;
    (holds, polite_client(s.addr).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_connection_cannot_take_every_list_slot() {
    // 100 slots; one connection may hold 32 of them.
    let (capped, codes) = greedy_then_polite(32, 32).await;
    assert!(
        capped,
        "the greedy connection should hold exactly its 32 slots"
    );
    assert!(codes.len() >= 10);
    assert!(codes.iter().all(|c| *c == 200), "{codes:?}");
}

/// The control: without the per-connection share, the same client starves the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_per_connection_share_one_client_starves_the_rest() {
    let (starved, codes) = greedy_then_polite(0, 100).await;
    assert!(starved, "the greedy connection should hold every slot");
    assert!(codes.iter().all(|c| *c == 429), "{codes:?}");
}

/// A TLS server with [`short_timeouts`]; its CA, its files' folder and its stop handle.
async fn tls_server(
    name: &str,
) -> (
    std::net::SocketAddr,
    common::tls::Ca,
    common::etcd::TempDir,
    tokio::sync::oneshot::Sender<()>,
) {
    use common::tls::{Ca, write};
    use listwatch_auth::tls::tls_config;
    let dir = common::etcd::TempDir::new(name);
    let ca = Ca::new("listwatch-idle-ca");
    let leaf = ca.server();
    let cert = write(&dir.0, "server.crt", &leaf.cert_pem);
    let key = write(&dir.0, "server.key", &leaf.key_pem);
    let registry = listwatch_sources::Registry::new(
        listwatch_core::builtin_resources(),
        1,
        &listwatch_store::StoreConfig::default(),
    );
    let app = listwatch_server::App::embedded(
        listwatch_sources::EmbeddedSource::new(registry),
        short_timeouts(),
    );
    let (listener, addr) = listwatch_testkit::listen_local().await;
    let options = listwatch_server::ServeOptions {
        tls: Some(tls_config(&cert, &key, None).expect("tls")),
        ..Default::default()
    };
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(listwatch_server::serve_with(
        app,
        listener,
        options,
        async {
            let _ = rx.await;
        },
    ));
    (addr, ca, dir, stop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_connection_idle_after_its_handshake_is_closed() {
    let (addr, ca, _dir, _stop) = tls_server("tls-idle").await;
    // The handshake completes, then the client says nothing.
    let mut s = common::tls::connect(addr, &ca, &["http/1.1"], None)
        .await
        .expect("TLS handshake");
    let t = Instant::now();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0) | Err(_))),
        "an idle TLS connection stayed open: {read:?}"
    );
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
}

/// The handshake has the first request's deadline (kube-apiserver's read-header timeout
/// covers its handshakes too), not one of its own: a client that never starts it is let go
/// after that deadline, and one that starts it late, within the deadline, is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_handshake_has_the_first_requests_deadline() {
    let (addr, ca, _dir, _stop) = tls_server("tls-handshake").await;
    let mut silent = TcpStream::connect(addr).await.expect("connect");
    let t = Instant::now();
    let (closed, _) = closed_within(&mut silent, Duration::from_secs(5)).await;
    assert!(
        closed,
        "a connection that never began its TLS handshake stayed open 5 s (the deadline is 1 s)"
    );
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );

    let late = TcpStream::connect(addr).await.expect("connect");
    // Late, yet leaving most of the 1 s for the handshake on a loaded machine.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut s = common::tls::connect_stream(late, &ca, &["http/1.1"], None)
        .await
        .expect("a handshake begun within the deadline completes");
    s.write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    let (_, got) = closed_within(&mut s, Duration::from_secs(5)).await;
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got)
    );
}
