//! listwatch-testkit: the HTTP/1.1 client the integration tests share. Tests talk raw HTTP
//! on purpose (they check framing, chunking and what a server does with odd requests), so
//! this is small and exact rather than a general client: one request helper, one decoder
//! of chunked bodies, a line reader for watch streams, and a poll-until-deadline. [`kube`]
//! starts the real parts (kube-apiserver, etcd over TLS, the listwatch binary) for the
//! system tests.

#[cfg(feature = "jwt")]
pub mod jwt;
pub mod kube;
pub mod openssl;
pub mod process;
#[cfg(feature = "server")]
pub mod server;
#[cfg(feature = "store")]
pub mod store;
#[cfg(feature = "server")]
pub mod tls;
pub mod workload;

pub use process::{Killed, PipeLines, TempDir, serve};

use std::io::BufRead;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// A whole response: status, headers, the de-chunked body.
#[derive(Debug)]
pub struct Response {
    /// HTTP status code.
    pub status: u16,
    /// Header fields in order.
    pub headers: Vec<(String, String)>,
    /// The body (de-chunked when the response was chunked).
    pub body: Vec<u8>,
}

impl Response {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }
}

/// The value of the first of `headers` named `name` (case-insensitive).
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// [`send`] of a `GET` of `path` with `headers` and no body; panics when nothing answers.
pub async fn get_with(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Response {
    send(addr, "GET", path, headers, None)
        .await
        .expect("a response")
}

/// A listener on a free port of 127.0.0.1, and its address: where test servers serve.
pub async fn listen_local() -> (tokio::net::TcpListener, SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    (listener, addr)
}

/// Sends one request with `Connection: close` and reads the whole response (30 s at most);
/// `None` when nothing listens at `addr` or the connection breaks before the response.
pub async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Option<Response> {
    let mut s = TcpStream::connect(addr).await.ok()?;
    let body = body.unwrap_or(b"");
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    s.write_all(head.as_bytes()).await.ok()?;
    s.write_all(body).await.ok()?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut raw))
        .await
        .expect("response within 30 s")
        .ok()?;
    Some(parse_response(&raw))
}

/// Parses a complete HTTP/1.1 response.
pub fn parse_response(raw: &[u8]) -> Response {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("end of the response head");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .expect("status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| {
            l.split_once(':')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        })
        .collect();
    let rest = &raw[split + 4..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_vec()
    };
    Response {
        status,
        headers,
        body,
    }
}

/// The body of a chunked HTTP/1.1 message (everything after the head).
pub fn dechunk(rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for_each_chunk(rest, |c| out.extend_from_slice(c));
    out
}

/// Calls `f` with each chunk of a chunked body read from `r` (after the head), without
/// keeping the body; stops at the last chunk or the end of input.
pub fn for_each_chunk(mut r: impl BufRead, mut f: impl FnMut(&[u8])) {
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let Some(n) = chunk_size(&line) else {
            return;
        };
        let mut buf = vec![0u8; n + 2];
        if r.read_exact(&mut buf).is_err() {
            return;
        }
        f(&buf[..n]);
    }
}

/// The size a chunk-size line announces; `None` for the last chunk (size 0) or a line that
/// is no chunk size.
fn chunk_size(line: &str) -> Option<usize> {
    usize::from_str_radix(line.trim(), 16)
        .ok()
        .filter(|&n| n > 0)
}

/// Skips a response head on `r`.
pub fn skip_head(r: &mut impl BufRead) {
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            return;
        }
    }
}

/// Starts a server binary whose log names its address (`listen=ADDR`, as `listwatch serve`
/// logs it) and returns the process and that address; the rest of its log is drained on a
/// thread so the server never blocks on a full pipe.
pub fn spawn_server(cmd: &mut std::process::Command) -> (std::process::Child, SocketAddr) {
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the server");
    let out = child.stdout.take().expect("stdout");
    let mut lines = std::io::BufReader::new(out).lines();
    let addr = loop {
        let line = lines.next().expect("server exited").expect("log line");
        if let Some(i) = line.find("listen=") {
            let rest = &line[i + "listen=".len()..];
            break rest
                .split_whitespace()
                .next()
                .and_then(|a| a.parse().ok())
                .expect("listen address");
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (child, addr)
}

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

/// Opens a streaming GET and reads its de-chunked body line by line; `None` when nothing
/// listens at `addr`.
pub async fn try_stream_lines(addr: SocketAddr, path: &str) -> Option<Lines> {
    let s = TcpStream::connect(addr).await.ok()?;
    let (r, mut w) = s.into_split();
    w.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let _keep = w;
        let mut r = BufReader::new(r);
        let mut line = String::new();
        loop {
            line.clear();
            if r.read_line(&mut line).await.unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
        }
        let mut pending = String::new();
        loop {
            line.clear();
            if r.read_line(&mut line).await.unwrap_or(0) == 0 {
                break;
            }
            let Some(n) = chunk_size(&line) else {
                break;
            };
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

/// The next line within `secs`, or `None` (timeout or end of stream).
pub async fn next_line(lines: &mut Lines, secs: u64) -> Option<String> {
    tokio::time::timeout(Duration::from_secs(secs), lines.rx.recv())
        .await
        .ok()
        .flatten()
}

/// Asserts that the next line of a watch, within 10 s, is the ADDED event of the object
/// `name`.
pub async fn next_added(lines: &mut Lines, name: &str) {
    let line = next_line(lines, 10).await.expect("an event");
    let event: serde_json::Value = serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("a watch event is JSON ({e}): {line}"));
    assert!(
        event["type"] == "ADDED" && event["object"]["metadata"]["name"] == name,
        "not the ADDED event of {name}: {line}"
    );
}

/// Whether the server ends the stream within `secs` (lines still arriving are skipped).
pub async fn ends_within(lines: &mut Lines, secs: u64) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        match tokio::time::timeout_at(deadline, lines.rx.recv()).await {
            Ok(None) => return true,
            Ok(Some(_)) => {}
            Err(_) => return false,
        }
    }
}

/// A port for a process a test starts that binds its own (etcd: it cannot be handed a
/// listener). Taken below the kernel's ephemeral range (`ip_local_port_range` starts at
/// 32768), where no `bind(0)` of another test lands, from a block of 100 per process and a
/// counter within it, and checked free: no two calls in this process, and no listener of
/// another test on 127.0.0.1:0, can get the same port.
pub fn unlisted_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = 20_000 + (std::process::id() % 120) as u16 * 100;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(n < 100, "more than 100 such ports in one test binary");
        let port = base + n;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// `gz` decoded by a single-member gzip decoder, the way curl and tower-http read a body
/// (the test fails when it is not gzip).
pub fn gunzip(gz: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut plain = Vec::new();
    flate2::read::GzDecoder::new(gz)
        .read_to_end(&mut plain)
        .expect("single-member gzip");
    plain
}

/// The verdict of a comparison of `compared` cases: fails listing every one of
/// `differences`, and fails when fewer than `at_least` cases were compared (a corpus gone
/// missing must not pass as agreement).
pub fn assert_no_differences(differences: &[String], compared: usize, at_least: usize) {
    assert!(
        differences.is_empty(),
        "{} of {compared} differ:\n{}",
        differences.len(),
        differences.join("\n")
    );
    assert!(compared >= at_least, "only {compared} compared");
}

/// The string member `field` of each element of the JSON array `list` (the resource names
/// of a discovery document, the column names of a Table).
pub fn member_strings<'a>(list: &'a serde_json::Value, field: &str) -> Vec<&'a str> {
    list.as_array()
        .map(|a| a.iter().filter_map(|e| e[field].as_str()).collect())
        .unwrap_or_default()
}

/// Calls `probe` until `done` holds for its result or `within` has passed, and returns the
/// last result: for waiting on something a server does asynchronously without a fixed
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

/// `curl -s --max-time 2 URL` every 200 ms until `done` holds for what it printed or
/// `within` has passed, and what it printed last: for waiting on a server in a child
/// process (the caller asserts on the body it gets).
pub fn curl_until(url: &str, within: Duration, done: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    let deadline = std::time::Instant::now() + within;
    loop {
        let out = std::process::Command::new("curl")
            .args(["-s", "--max-time", "2", url])
            .output()
            .expect("curl runs");
        if done(&out.stdout) || std::time::Instant::now() >= deadline {
            return out.stdout;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The JSON paths where `got` and `want` differ (member order aside), at most `limit` of
/// them: `a.b[2].c: got X, want Y`.
pub fn json_diff(got: &serde_json::Value, want: &serde_json::Value, limit: usize) -> Vec<String> {
    fn walk(
        path: &str,
        g: &serde_json::Value,
        w: &serde_json::Value,
        out: &mut Vec<String>,
        limit: usize,
    ) {
        use serde_json::Value;
        if out.len() >= limit {
            return;
        }
        match (g, w) {
            (Value::Object(a), Value::Object(b)) => {
                for (k, wv) in b {
                    match a.get(k) {
                        Some(gv) => walk(&format!("{path}.{k}"), gv, wv, out, limit),
                        None => out.push(format!("{path}.{k}: missing, want {}", short(wv))),
                    }
                }
                for (k, gv) in a {
                    if !b.contains_key(k) {
                        out.push(format!("{path}.{k}: extra {}", short(gv)));
                    }
                }
            }
            (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
                for (i, (gv, wv)) in a.iter().zip(b).enumerate() {
                    walk(&format!("{path}[{i}]"), gv, wv, out, limit);
                }
            }
            _ if g == w => {}
            _ => out.push(format!("{path}: got {}, want {}", short(g), short(w))),
        }
    }
    fn short(v: &serde_json::Value) -> String {
        let s = v.to_string();
        if s.len() > 80 {
            format!(
                "{}…",
                &s[..s.char_indices().nth(80).map_or(s.len(), |c| c.0)]
            )
        } else {
            s
        }
    }
    let mut out = Vec::new();
    walk("", got, want, &mut out, limit);
    out
}

/// The sum of the samples of `metric` in a Prometheus text (`/metrics`) whose labels
/// contain every one of `labels` (`verb="LIST"`, say).
pub fn metric_sum(metrics: &str, metric: &str, labels: &[&str]) -> f64 {
    let start = format!("{metric}{{");
    metrics
        .lines()
        .filter(|l| l.starts_with(&start) && labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `../shared/reference/<rel>` beside the repository (panics naming what is missing: the
/// reference material is part of the test fixture, never optional).
pub fn reference(rel: &str) -> std::path::PathBuf {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/reference")
        .join(rel);
    assert!(
        p.exists(),
        "{} is missing: the tests need shared/reference beside the repository",
        p.display()
    );
    p
}

/// `/readyz`'s status once it is 200, or the last one after `within` (0: no answer).
pub async fn wait_ready(addr: SocketAddr, within: Duration) -> u16 {
    poll_until(
        within,
        || async {
            send(addr, "GET", "/readyz", &[], None)
                .await
                .map_or(0, |r| r.status)
        },
        |s| *s == 200,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_and_plain_bodies() {
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
        let r = parse_response(chunked);
        assert_eq!((r.status, &r.body[..]), (200, &b"hello world"[..]));
        let plain = b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\nno";
        let r = parse_response(plain);
        assert_eq!(
            (r.status, &r.body[..], r.header("content-length")),
            (404, &b"no"[..], Some("2"))
        );
    }
}
