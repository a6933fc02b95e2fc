//! Memory under stalled readers, against the real `listwatch` binary: 64 concurrent LISTs of
//! 20,000 demo pods (~90 MB each) whose clients stop reading. A server that builds the
//! response in memory would grow by ~64 × 90 MB; ours may grow only by what its bounded
//! per-connection buffers hold. Then the readers resume and every one gets every pod.

use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use listwatch_testkit::Killed;

const PODS: usize = 20_000;
const CLIENTS: usize = 64;
const CHUNK: usize = 64 * 1024;

fn rss_kib(pid: u32) -> u64 {
    listwatch_core::process::rss_kib(pid).expect("VmRSS of the server")
}

/// Waits until RSS has not moved by more than 256 KiB for `quiet`.
fn settle(pid: u32, quiet: Duration, max: Duration) -> u64 {
    let start = Instant::now();
    let mut last = rss_kib(pid);
    let mut since = Instant::now();
    while start.elapsed() < max {
        std::thread::sleep(Duration::from_millis(200));
        let now = rss_kib(pid);
        if now.abs_diff(last) > 256 {
            since = Instant::now();
        }
        last = now;
        if since.elapsed() >= quiet {
            break;
        }
    }
    last
}

fn start() -> (Killed, String) {
    let (child, addr) = listwatch_testkit::serve(
        env!("CARGO_BIN_EXE_listwatch"),
        [
            "--demo-pods",
            &PODS.to_string(),
            "--chunk-bytes",
            &CHUNK.to_string(),
            "--log-level",
            "info",
        ],
    );
    (Killed(child), addr.to_string())
}

fn send_list(addr: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.write_all(format!("GET /api/v1/pods HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
        .expect("write");
    s
}

/// Counts a JSON LIST's items from its body fed piece by piece, without keeping it.
#[derive(Default)]
struct ItemCount {
    count: usize,
    carry: Vec<u8>,
}

impl ItemCount {
    const NEEDLE: &'static [u8] = b"{\"metadata\":{\"name\":\"pod-";

    fn feed(&mut self, piece: &[u8]) {
        self.carry.extend_from_slice(piece);
        let n = Self::NEEDLE.len();
        self.count += self.carry.windows(n).filter(|w| *w == Self::NEEDLE).count();
        let keep = self.carry.len().min(n - 1);
        self.carry.drain(..self.carry.len() - keep);
    }
}

/// Reads one chunked LIST response to its end, counting items without keeping the body.
fn count_items(s: TcpStream) -> usize {
    let mut r = BufReader::with_capacity(1 << 16, s);
    listwatch_testkit::skip_head(&mut r);
    let mut items = ItemCount::default();
    listwatch_testkit::for_each_chunk(r, |chunk| items.feed(chunk));
    items.count
}

/// A server after one full LIST (allocator caches and lazy statics in place), and its
/// settled RSS.
fn start_warm() -> (Killed, String, u64) {
    let (server, addr) = start();
    assert_eq!(count_items(send_list(&addr)), PODS);
    let idle = settle(
        server.0.id(),
        Duration::from_secs(1),
        Duration::from_secs(10),
    );
    (server, addr, idle)
}

#[test]
fn stalled_lists_cost_bounded_buffers_not_the_data_size() {
    let (server, addr, idle) = start_warm();
    let pid = server.0.id();

    let stalled: Vec<TcpStream> = (0..CLIENTS).map(|_| send_list(&addr)).collect();
    // The server writes until each socket's kernel buffers are full, then stops polling.
    let peak = settle(pid, Duration::from_secs(2), Duration::from_secs(30));
    let growth_kib = peak.saturating_sub(idle);
    // Per stalled response: hyper's write queue (max_buf_size = chunk) + the encoder's
    // open chunk + one record + connection state ≈ 3 chunks; plus 16 MiB fixed slack for
    // runtime and allocator arenas.
    let bound_kib = (CLIENTS * 3 * CHUNK / 1024 + 16 * 1024) as u64;
    let data_kib = rss_kib(pid); // for the message only
    println!(
        "idle RSS {idle} KiB, stalled RSS {peak} KiB, growth {growth_kib} KiB, bound {bound_kib} KiB (now {data_kib} KiB)"
    );
    assert!(
        growth_kib <= bound_kib,
        "RSS grew {growth_kib} KiB with {CLIENTS} stalled readers; bound {bound_kib} KiB"
    );

    // Resume: every reader gets every pod.
    let handles: Vec<_> = stalled
        .into_iter()
        .map(|s| std::thread::spawn(move || count_items(s)))
        .collect();
    for h in handles {
        assert_eq!(h.join().expect("reader"), PODS);
    }
}

/// LISTs on one HTTP/2 connection (the per-connection LIST limit) from a client that
/// offers large flow-control windows, as client-go does (4 MiB a stream, 1 GiB the
/// connection), then stops reading the connection: the server may hold what it holds for a
/// stalled HTTP/1.1 response, about a chunk queued per stream, whatever the windows allow.
const H2_STREAMS: usize = 100;

#[test]
fn stalled_http2_streams_cost_bounded_buffers_not_the_window() {
    use http_body_util::BodyExt;
    use std::sync::Arc;
    use tokio::sync::Notify;

    let (server, addr, idle) = start_warm();
    let pid = server.0.id();

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (pause, resume) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let bodies = rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(&addr)
            .await
            .expect("connect");
        let (mut send, conn) =
            hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                .initial_stream_window_size(4 << 20)
                .initial_connection_window_size(1 << 30)
                .adaptive_window(false)
                .handshake::<_, http_body_util::Empty<bytes::Bytes>>(hyper_util::rt::TokioIo::new(
                    tcp,
                ))
                .await
                .expect("h2 handshake");
        // The connection is driven until paused: then nothing reads the socket, as with a
        // client that froze, until resumed.
        let (paused, resumed) = (pause.clone(), resume.clone());
        tokio::spawn(async move {
            let mut conn = std::pin::pin!(conn);
            loop {
                tokio::select! {
                    _ = &mut conn => return,
                    _ = paused.notified() => resumed.notified().await,
                }
            }
        });
        let mut bodies = Vec::new();
        for _ in 0..H2_STREAMS {
            let req = hyper::Request::get(format!("http://{addr}/api/v1/pods"))
                .body(http_body_util::Empty::new())
                .expect("request");
            let resp = send.send_request(req).await.expect("response head");
            assert_eq!(resp.status(), 200);
            bodies.push(resp.into_body());
        }
        pause.notify_one();
        bodies
    });

    let peak = settle(pid, Duration::from_secs(2), Duration::from_secs(30));
    let growth_kib = peak.saturating_sub(idle);
    // As for HTTP/1.1 above: per stalled response ≈ 3 chunks, plus fixed slack.
    let bound_kib = (H2_STREAMS * 3 * CHUNK / 1024 + 16 * 1024) as u64;
    println!(
        "idle RSS {idle} KiB, stalled RSS {peak} KiB, growth {growth_kib} KiB, bound {bound_kib} KiB"
    );
    assert!(
        growth_kib <= bound_kib,
        "RSS grew {growth_kib} KiB with {H2_STREAMS} stalled HTTP/2 streams; bound {bound_kib} KiB"
    );

    // Resumed, the streams carry on: a few are read to their end, the rest are cancelled.
    resume.notify_one();
    rt.block_on(async {
        for mut body in bodies.into_iter().take(4) {
            let mut items = ItemCount::default();
            while let Some(frame) = body.frame().await {
                if let Ok(data) = frame.expect("body frame").into_data() {
                    items.feed(&data);
                }
            }
            assert_eq!(items.count, PODS);
        }
    });
}
