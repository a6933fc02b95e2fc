//! Memory under stalled readers, against the real `listwatch` binary: 64 concurrent LISTs of
//! 20,000 demo pods (~90 MB each) whose clients stop reading. A server that builds the
//! response in memory would grow by ~64 × 90 MB; ours may grow only by what its bounded
//! per-connection buffers hold. Then the readers resume and every one gets every pod.

use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const PODS: usize = 20_000;
const CLIENTS: usize = 64;
const CHUNK: usize = 64 * 1024;

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

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

fn start() -> (Server, String) {
    let (child, addr) =
        listwatch_testkit::spawn_server(Command::new(env!("CARGO_BIN_EXE_listwatch")).args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--demo-pods",
            &PODS.to_string(),
            "--chunk-bytes",
            &CHUNK.to_string(),
            "--log-level",
            "info",
        ]));
    (Server(child), addr.to_string())
}

fn send_list(addr: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.write_all(format!("GET /api/v1/pods HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
        .expect("write");
    s
}

/// Reads one chunked LIST response to its end, counting items without keeping the body.
fn count_items(s: TcpStream) -> usize {
    let mut r = BufReader::with_capacity(1 << 16, s);
    listwatch_testkit::skip_head(&mut r);
    let needle = b"{\"metadata\":{\"name\":\"pod-";
    let mut count = 0;
    let mut carry: Vec<u8> = Vec::new();
    listwatch_testkit::for_each_chunk(r, |chunk| {
        carry.extend_from_slice(chunk);
        count += carry.windows(needle.len()).filter(|w| *w == needle).count();
        let keep = carry.len().min(needle.len() - 1);
        carry.drain(..carry.len() - keep);
    });
    count
}

#[test]
fn stalled_lists_cost_bounded_buffers_not_the_data_size() {
    let (server, addr) = start();
    let pid = server.0.id();
    // Warm up: one full LIST, so allocator caches and lazy statics are in place.
    assert_eq!(count_items(send_list(&addr)), PODS);
    let idle = settle(pid, Duration::from_secs(1), Duration::from_secs(10));

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
