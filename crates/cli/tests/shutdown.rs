//! SIGTERM on the real binary: it stops accepting, lets a LIST in flight finish, and ends
//! open watches spread over the grace period instead of all at once (so informers do not
//! reconnect in one stampede), then exits 0.

use std::process::Command;
use std::time::{Duration, Instant};

use listwatch_testkit::poll_until;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const GRACE_S: u64 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_lists_and_spreads_watch_ends() {
    let (child, addr) = serve_20000_pods(&[
        "--shutdown-watch-termination-grace-period",
        &GRACE_S.to_string(),
    ]);

    // 30 watches, each reporting when its stream ends: half of them node-scoped, which wait
    // on their node's wake-up channel rather than the resource's.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..30 {
        let tx = tx.clone();
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let path = if i % 2 == 0 {
            "/api/v1/configmaps?watch=1".to_string()
        } else {
            format!("/api/v1/pods?watch=1&fieldSelector=spec.nodeName%3Dnode-{i}")
        };
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .expect("write");
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let mut all = Vec::new();
            while let Ok(n) = s.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                all.extend_from_slice(&buf[..n]);
                // The chunked body's terminator: the watch ended cleanly.
                if all.ends_with(b"0\r\n\r\n") {
                    break;
                }
            }
            let _ = tx.send(Instant::now());
        });
    }
    drop(tx);
    // A LIST of 20,000 pods read slowly, so it is still in flight at SIGTERM.
    let reader = tokio::spawn(list_read_slowly(addr, Duration::from_millis(5)));
    // SIGTERM once the 30 watches and the LIST are in flight, by the server's own gauges.
    let in_flight = |m: &String| {
        m.contains("apiserver_registered_watchers{resource=\"configmaps\"} 15")
            && m.contains("apiserver_registered_watchers{resource=\"pods\"} 15")
            && m.contains("apiserver_longrunning_requests{verb=\"LIST\",resource=\"pods\"} 1")
    };
    let m = poll_until(Duration::from_secs(10), || metrics(addr), in_flight).await;
    assert!(in_flight(&m), "watches and LIST not in flight:\n{m}");

    let term = sigterm(&child);
    // The listener closes once the signal is handled: connect until refused (5 s at most).
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut refused = false;
    while Instant::now() < deadline {
        if tokio::net::TcpStream::connect(addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(refused, "no new connections once draining");

    let mut ends = Vec::new();
    while let Some(t) = tokio::time::timeout(Duration::from_secs(GRACE_S + 10), rx.recv())
        .await
        .expect("every watch ends within the grace period")
    {
        ends.push(t.duration_since(term));
    }
    assert_eq!(ends.len(), 30);
    ends.sort();
    let (first, last) = (ends[0], ends[ends.len() - 1]);
    assert!(
        last <= Duration::from_secs(GRACE_S) + Duration::from_millis(800),
        "last watch ended {last:?} after SIGTERM"
    );
    assert!(
        last - first >= Duration::from_secs(GRACE_S) / 3,
        "watch ends are spread, not simultaneous: {first:?}..{last:?}"
    );

    let raw = reader.await.expect("reader");
    let head_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("response head");
    assert!(raw.starts_with(b"HTTP/1.1 200"));
    let body = listwatch_testkit::dechunk(&raw[head_end + 4..]);
    let v: serde_json::Value =
        serde_json::from_slice(&body).expect("the LIST in flight finished as complete JSON");
    assert_eq!(
        v["items"].as_array().map(Vec::len),
        Some(20_000),
        "every pod of the LIST in flight was sent"
    );

    assert_exits_0(child).await;
}

/// The server's `/metrics` text.
/// The real binary serving 20,000 demo pods on a free port, with `flags` added.
fn serve_20000_pods(flags: &[&str]) -> (std::process::Child, std::net::SocketAddr) {
    listwatch_testkit::serve(
        env!("CARGO_BIN_EXE_listwatch"),
        ["--demo-pods", "20000"].iter().chain(flags),
    )
}

/// Waits for `child` to exit and asserts that it exited 0.
async fn assert_exits_0(mut child: std::process::Child) {
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .expect("join")
        .expect("wait");
    assert!(status.success(), "exit status {status:?}");
}

/// Sends SIGTERM to `child` and returns when it was sent.
fn sigterm(child: &std::process::Child) -> Instant {
    let term = Instant::now();
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    term
}

async fn metrics(addr: std::net::SocketAddr) -> String {
    listwatch_testkit::send(addr, "GET", "/metrics", &[], None)
        .await
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .unwrap_or_default()
}

/// LISTs in flight at SIGTERM get `--shutdown-list-grace-period` to finish, however short
/// the watch grace: one read at ~6 MB/s (some 13 s for 20,000 pods, past the watch grace
/// plus its 10 s margin) ends complete; one whose client never reads is cut at the bound
/// without its terminating chunk (never made to look complete), and the process then exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_in_flight_get_their_own_grace_and_a_stalled_one_is_cut_at_it() {
    const LIST_GRACE_S: u64 = 40;
    let (child, addr) = serve_20000_pods(&[
        "--shutdown-watch-termination-grace-period",
        "1",
        "--shutdown-list-grace-period",
        &LIST_GRACE_S.to_string(),
    ]);
    let slow = tokio::spawn(async move {
        let body = list_read_slowly(addr, Duration::from_millis(10)).await;
        (body, Instant::now())
    });
    let mut stalled = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stalled.write_all(LIST_PODS).await.expect("write");
    let two_lists = |m: &String| {
        m.contains("apiserver_longrunning_requests{verb=\"LIST\",resource=\"pods\"} 2")
    };
    let m = poll_until(Duration::from_secs(10), || metrics(addr), two_lists).await;
    assert!(two_lists(&m), "the two LISTs are not in flight:\n{m}");
    let term = sigterm(&child);

    let (raw, done) = slow.await.expect("slow reader");
    let head_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("response head");
    let body = listwatch_testkit::dechunk(&raw[head_end + 4..]);
    let v: serde_json::Value = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("slow LIST cut after {:?}: {e}", done - term));
    assert_eq!(v["items"].as_array().map(Vec::len), Some(20_000));

    // The stalled LIST: its client starts reading only after the bound (reading earlier
    // would let it finish).
    tokio::time::sleep(
        (term + Duration::from_secs(LIST_GRACE_S + 2)).saturating_duration_since(Instant::now()),
    )
    .await;
    let mut rest = Vec::new();
    let read_all = tokio::time::timeout(
        Duration::from_secs(LIST_GRACE_S + 30),
        stalled.read_to_end(&mut rest),
    )
    .await;
    assert!(
        matches!(read_all, Ok(Ok(_)) | Ok(Err(_))),
        "the stalled LIST's connection was not closed"
    );
    assert!(rest.starts_with(b"HTTP/1.1 200"), "no response head");
    assert!(
        !rest.ends_with(b"0\r\n\r\n"),
        "a cut LIST must not end with the terminating chunk"
    );
    assert_exits_0(child).await;
}

/// An HTTP/1.1 LIST of every pod, closing the connection after it.
const LIST_PODS: &[u8] =
    b"GET /api/v1/pods?resourceVersion=0 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

/// Sends [`LIST_PODS`] and reads the raw response 64 KiB at a time with `pause` between
/// reads, until the server closes the connection.
async fn list_read_slowly(addr: std::net::SocketAddr, pause: Duration) -> Vec<u8> {
    let mut list = tokio::net::TcpStream::connect(addr).await.expect("connect");
    list.write_all(LIST_PODS).await.expect("write");
    let mut body = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match list.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => body.extend_from_slice(&buf[..n]),
        }
        tokio::time::sleep(pause).await;
    }
    body
}

/// `--shutdown-delay-duration`: after SIGTERM `/readyz` fails at once (naming the shutdown)
/// while LISTs and new connections are still served, and only after the delay does the
/// server drain and exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_fails_first_during_the_shutdown_delay() {
    let (child, addr) = listwatch_testkit::serve(
        env!("CARGO_BIN_EXE_listwatch"),
        ["--demo-pods", "10", "--shutdown-delay-duration", "2s"],
    );
    assert_eq!(
        listwatch_testkit::wait_ready(addr, Duration::from_secs(10)).await,
        200
    );
    let term = sigterm(&child);
    let readyz = |addr| async move {
        listwatch_testkit::send(addr, "GET", "/readyz?verbose", &[], None)
            .await
            .map(|r| (r.status, String::from_utf8_lossy(&r.body).into_owned()))
    };
    let (status, body) = poll_until(
        Duration::from_secs(1),
        || readyz(addr),
        |r| r.as_ref().is_some_and(|(s, _)| *s == 500),
    )
    .await
    .expect("an answer during the delay");
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("[-]shutdown"), "{body}");
    let list = listwatch_testkit::send(addr, "GET", "/api/v1/pods", &[], None)
        .await
        .expect("still served");
    assert_eq!(list.status, 200);
    assert!(
        term.elapsed() < Duration::from_secs(2),
        "checked within the delay"
    );
    assert_exits_0(child).await;
    assert!(
        term.elapsed() >= Duration::from_secs(2),
        "exited {:?} after SIGTERM, before the delay",
        term.elapsed()
    );
}
