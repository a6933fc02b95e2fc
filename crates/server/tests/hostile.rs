//! Hostile requests: each gets the right `Status` (or is cut off), and the server keeps
//! serving everyone else. Memory under never-reading clients is measured in memory.rs.

use listwatch_testkit::server as common;

use std::time::Duration;

use listwatch_server::ServerConfig;
use listwatch_server::limits::LimitConfig;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The server still answers an ordinary LIST, in full.
async fn still_serving(addr: std::net::SocketAddr, pods: usize) {
    let r = common::get(addr, "/api/v1/pods?resourceVersion=0").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        common::json(&r.body)["items"].as_array().map(Vec::len),
        Some(pods)
    );
}

/// Sends a GET and never reads the response.
async fn stalled(addr: std::net::SocketAddr, path: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .expect("write");
    s
}

/// POSTs raw bytes (write errors ignored: the server may answer before reading it all).
async fn raw_post(addr: std::net::SocketAddr, path: &str, body: &[u8]) -> String {
    let mut c = TcpStream::connect(addr).await.expect("connect");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let _ = c.write_all(head.as_bytes()).await;
    let _ = c.write_all(body).await;
    let mut out = Vec::new();
    let _ = tokio::io::AsyncReadExt::read_to_end(&mut c, &mut out).await;
    String::from_utf8_lossy(&out).to_string()
}

/// Waits (10 s at most) until `n` LISTs of pods are in flight, by the server's own gauge.
async fn wait_for_lists(addr: std::net::SocketAddr, n: usize) {
    let line = format!("apiserver_longrunning_requests{{verb=\"LIST\",resource=\"pods\"}} {n}");
    let m = common::poll_until(
        Duration::from_secs(10),
        || async { common::get(addr, "/metrics").await.body },
        |m| m.lines().any(|l| l == line),
    )
    .await;
    assert!(m.lines().any(|l| l == line), "want {line:?} in\n{m}");
}

fn status_of(body: &str) -> serde_json::Value {
    common::json(body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_limits_answer_429_with_retry_after() {
    let s = common::start(
        20_000,
        ServerConfig {
            chunk_bytes: 16 << 10,
            limits: LimitConfig {
                max_lists: 2,
                max_watches_per_user: 2,
                ..LimitConfig::default()
            },
            ..ServerConfig::default()
        },
    )
    .await;
    // Two LISTs of 20,000 pods whose clients never read hold both LIST slots.
    let a = stalled(s.addr, "/api/v1/pods?resourceVersion=0").await;
    let b = stalled(s.addr, "/api/v1/pods?resourceVersion=0").await;
    // The server admits the stalled LISTs asynchronously: wait for both to be in flight (a
    // probe sent earlier could take a slot itself and have one of them refused).
    wait_for_lists(s.addr, 2).await;
    let r = common::get_expecting(s.addr, "/api/v1/pods?limit=1", 429).await;
    assert_eq!(r.header("retry-after"), Some("1"));
    let v = status_of(&r.body);
    assert_eq!(v["reason"], "TooManyRequests");
    assert_eq!(v["details"]["retryAfterSeconds"], 1);
    // A GET of one object is not a LIST and still gets through.
    let one = common::get(s.addr, "/api/v1/namespaces/demo-0/pods/does-not-exist").await;
    assert_eq!(one.status, 404);
    // The slots come back when the stalled clients go away.
    drop((a, b));
    assert_a_list_is_served_within(
        &s,
        Duration::from_secs(10),
        "LIST slots returned after the stalled clients left",
    )
    .await;

    // Per-user watch cap (no authenticator: everyone is system:anonymous).
    let w1 = common::stream_lines(s.addr, "/api/v1/configmaps?watch=1").await;
    let w2 = common::stream_lines(s.addr, "/api/v1/configmaps?watch=1").await;
    // Both watches admitted (a probe sent earlier could take a slot itself and push w2 out).
    let m = common::poll_until(
        Duration::from_secs(10),
        || async { common::get(s.addr, "/metrics").await.body },
        |m| m.contains("apiserver_registered_watchers{resource=\"configmaps\"} 2"),
    )
    .await;
    assert!(
        m.contains("apiserver_registered_watchers{resource=\"configmaps\"} 2"),
        "{m}"
    );
    let r = common::get_expecting(s.addr, "/api/v1/configmaps?watch=1&timeoutSeconds=1", 429).await;
    assert!(r.body.contains("too many watches for user"), "{}", r.body);
    drop((w1, w2));
    still_serving(s.addr, 20_000).await;
}

#[tokio::test]
async fn oversized_and_malformed_requests_get_a_status() {
    let s = common::start(50, ServerConfig::default()).await;
    // A 20 KiB selector: over the URI limit (16 KiB), a 400 Status.
    let giant = "a".repeat(20 << 10);
    let r = common::get(s.addr, &format!("/api/v1/pods?labelSelector={giant}")).await;
    assert_eq!(r.status, 400);
    assert!(r.body.contains("request URI too long"), "{}", r.body);
    // A 100 KiB header: hyper refuses the head with 431 before any handler runs.
    let mut c = TcpStream::connect(s.addr).await.expect("connect");
    let req = format!(
        "GET /api/v1/pods HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
        "b".repeat(100 << 10)
    );
    let _ = c.write_all(req.as_bytes()).await;
    let mut head = vec![0u8; 64];
    let n = tokio::io::AsyncReadExt::read(&mut c, &mut head)
        .await
        .unwrap_or(0);
    let line = String::from_utf8_lossy(&head[..n]).to_string();
    assert!(line.starts_with("HTTP/1.1 431"), "{line:?}");

    // Query values kube-apiserver refuses with 400, never a 500 or a crash.
    for q in [
        "limit=99999999999999999999999",
        "limit=abc",
        "resourceVersion=-5",
        "resourceVersion=abc",
        "timeoutSeconds=abc",
        "labelSelector=a%20in%20(",
        "labelSelector=%zz",
        "fieldSelector=spec.notAField%3Dx",
        "continue=%%%",
        "continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTAsInN0YXJ0IjoiLy4uL3NlY3JldHMvIn0",
    ] {
        let r = common::get(s.addr, &format!("/api/v1/pods?{q}")).await;
        assert!(
            (400..500).contains(&r.status),
            "{q}: {} {}",
            r.status,
            r.body
        );
        let v = status_of(&r.body);
        assert_eq!(v["kind"], "Status", "{q}");
    }
    // A negative limit means "no limit", as in kube-apiserver.
    let r = common::get(s.addr, "/api/v1/pods?limit=-1").await;
    assert_eq!(r.status, 200);
    // A selector of 1,000 terms is evaluated, within the URI limit.
    let terms: Vec<String> = (0..1000).map(|i| format!("k{i}!=v")).collect();
    let r = common::get(
        s.addr,
        &format!("/api/v1/pods?labelSelector={}", terms.join(",")),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);

    // Hostile bodies: deeply nested, invalid UTF-8, too large, path tricks in names.
    let deep = format!(
        r#"{{"metadata":{{"name":"x"}},"data":{}}}"#,
        "[".repeat(100_000)
    );
    common::answered(
        s.addr,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some(&deep),
        400,
    )
    .await;
    let text = raw_post(
        s.addr,
        "/api/v1/namespaces/default/configmaps",
        b"{\"metadata\":{\"name\":\"\xff\xfe\"}}",
    )
    .await;
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    let huge = format!(
        r#"{{"metadata":{{"name":"x"}},"data":{{"a":"{}"}}}}"#,
        "x".repeat(4 << 20)
    );
    let text = raw_post(
        s.addr,
        "/api/v1/namespaces/default/configmaps",
        huge.as_bytes(),
    )
    .await;
    assert!(
        text.starts_with("HTTP/1.1 413"),
        "{}",
        &text[..text.len().min(300)]
    );
    for name in ["../x", "a/b", "..", "x%2Fy"] {
        let body = format!(r#"{{"metadata":{{"name":"{name}"}}}}"#);
        let r = common::request(
            s.addr,
            "POST",
            "/api/v1/namespaces/default/configmaps",
            Some(&body),
        )
        .await;
        assert_eq!(r.status, 422, "{name}: {}", r.body);
        assert_eq!(status_of(&r.body)["reason"], "Invalid");
    }
    for path in [
        "/api/v1/namespaces/default/pods/..",
        "/api/v1/namespaces/../pods",
        "/api/v1/namespaces/default/pods/a/b/c",
        "/api/v1/namespaces/default/pods/%2e%2e",
    ] {
        let r = common::get(s.addr, path).await;
        assert!((400..500).contains(&r.status), "{path}: {}", r.status);
    }
    // Encoded namespaces and names are decoded (as Go's server does) and then refused,
    // never answered with an empty list.
    for (path, why) in [
        ("/api/v1/namespaces/%2e%2e/pods", "may not be '..'"),
        ("/api/v1/namespaces/%2E/pods", "may not be '.'"),
        ("/api/v1/namespaces/demo%00/pods", "control characters"),
        ("/api/v1/namespaces/a%2Fb/pods", "may not contain '/'"),
        ("/api/v1/namespaces/%FF%FE/pods", "not valid UTF-8"),
        ("/api/v1/namespaces/demo-0/pods/%2e%2e", "may not be '..'"),
    ] {
        let r = common::get(s.addr, path).await;
        assert_eq!(r.status, 400, "{path}: {}", r.body);
        assert_eq!(status_of(&r.body)["reason"], "BadRequest", "{path}");
        assert!(r.body.contains(why), "{path}: {}", r.body);
    }
    // An encoded name that is fine once decoded is looked up decoded.
    common::get_expecting(s.addr, "/api/v1/namespaces/demo-1/pods/pod%2D0", 200).await;
    // timeoutSeconds=-1 ends a watch at once, as kube-apiserver does (the whole response
    // arrives; a watch left open would time the read out).
    let started = std::time::Instant::now();
    let r = common::get(s.addr, "/api/v1/pods?watch=1&timeoutSeconds=-1").await;
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty(), "{}", r.body);
    assert!(started.elapsed() < Duration::from_secs(5));
    still_serving(s.addr, 50).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_rapid_reset_is_cut_off_and_others_are_served() {
    let s = common::start(50, ServerConfig::default()).await;
    // The gauge this test reads does count open watches.
    let w = common::stream_lines(s.addr, "/api/v1/pods?watch=1").await;
    let watching = |m: &String| {
        m.lines().any(|l| {
            l.starts_with("apiserver_longrunning_requests")
                && l.contains("WATCH")
                && l.ends_with(" 1")
        })
    };
    let m = common::poll_until(
        Duration::from_secs(10),
        || async { common::get(s.addr, "/metrics").await.body },
        watching,
    )
    .await;
    assert!(
        m.lines()
            .any(|l| l.starts_with("apiserver_longrunning_requests")
                && l.contains("WATCH")
                && l.ends_with(" 1")),
        "{m}"
    );
    drop(w);
    let (refused, open) = rapid_reset(s.addr, Batches::Burst).await;
    assert!(refused, "the connection was not cut off");
    assert!(
        open.lines().all(|l| l.ends_with(" 0")),
        "watches left open after the resets: {open}"
    );
    still_serving(s.addr, 50).await;
}

/// A watch-list takes a LIST slot while it sends its initial events and gives it back once
/// they are out (kube-apiserver's priority and fairness counts a watch's seats only while it
/// initializes): with one LIST slot, a synced watch-list leaves room for a LIST and another
/// watch-list. Before, each held its slot for its whole life, and 5,000 kubelets' node
/// watch-lists got 429 beyond the first 400 for as long as those lived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synced_watch_list_gives_its_list_slot_back() {
    let s = start_with_limits(|l| l.max_lists = 1).await;
    let watch_list = "/api/v1/pods?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan";
    let mut synced = Vec::new();
    for _ in 0..2 {
        let mut w = common::stream_lines(s.addr, watch_list).await;
        loop {
            let line = common::next_line(&mut w, 10)
                .await
                .expect("the initial events and their end bookmark");
            if line.contains("k8s.io/initial-events-end") {
                break;
            }
        }
        synced.push(w);
    }
    assert_a_list_is_served_within(
        &s,
        Duration::from_secs(5),
        "a LIST beside two synced watch-lists",
    )
    .await;
    drop(synced);
}

/// Asserts that a LIST (`/api/v1/pods?limit=1`) is answered 200 within `within` (`what`
/// and the last answer the message when it is not).
async fn assert_a_list_is_served_within(s: &common::TestServer, within: Duration, what: &str) {
    let r = common::get_until(s.addr, "/api/v1/pods?limit=1", within, 200).await;
    assert_eq!(r.status, 200, "{what}: {}", r.body);
}

/// A server over 50 demo pods with the default limits as `set` changes them.
async fn start_with_limits(set: impl FnOnce(&mut LimitConfig)) -> common::TestServer {
    let mut limits = LimitConfig::default();
    set(&mut limits);
    common::start(
        50,
        ServerConfig {
            limits,
            ..ServerConfig::default()
        },
    )
    .await
}

/// Resets sent in small batches with pauses between them (20 HEADERS+RST_STREAM pairs per
/// write), with hyper's cap on streams reset before they were accepted switched off: the
/// cap on requests abandoned over time (`max_cancelled_requests`) cuts the connection off
/// on its own, however the resets are batched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rapid_reset_in_small_paced_batches_is_cut_off() {
    let s = start_with_limits(|l| l.max_h2_pending_resets = 0).await;
    let (refused, open) = rapid_reset(s.addr, Batches::Paced(20)).await;
    assert!(refused, "paced resets were not cut off");
    assert!(open.lines().all(|l| l.ends_with(" 0")), "{open}");
    still_serving(s.addr, 50).await;
}

/// The control for the tests above: with both caps switched off, the same attacks are not
/// cut off (so those tests' assertions measure the caps, not the client).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_reset_caps_rapid_reset_is_not_cut_off() {
    let s = start_with_limits(|l| {
        l.max_h2_pending_resets = 0;
        l.max_cancelled_requests = 0;
    })
    .await;
    for batches in [Batches::Burst, Batches::Paced(20)] {
        let (refused, _) = rapid_reset(s.addr, batches).await;
        assert!(!refused, "cut off although the caps are off");
    }
    still_serving(s.addr, 50).await;
}

/// How the resets leave the client.
#[derive(Clone, Copy)]
enum Batches {
    /// As fast as the client can: the server sees many streams reset before it accepted them.
    Burst,
    /// This many pairs, then a pause long enough for the server to accept them.
    Paced(usize),
}

/// Opens 5,000 h2c watch streams on one connection and resets each at once (CVE-2023-44487):
/// HEADERS and RST_STREAM leave in the same flush, so the server sees streams reset before
/// it accepted them. Returns whether the server cut the connection off, and the WATCH
/// in-flight gauge lines once settled (every watch the resets started must have ended).
async fn rapid_reset(addr: std::net::SocketAddr, batches: Batches) -> (bool, String) {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (mut client, conn) = h2::client::handshake(tcp).await.expect("h2c handshake");
    let conn = tokio::spawn(conn);
    let mut refused = false;
    for i in 0..5_000 {
        if futures::future::poll_fn(|cx| client.poll_ready(cx))
            .await
            .is_err()
        {
            refused = true;
            break;
        }
        let req = http::Request::get(format!("http://{addr}/api/v1/pods?watch=1"))
            .body(())
            .expect("req");
        match client.send_request(req, true) {
            Ok((_response, mut stream)) => stream.send_reset(h2::Reason::CANCEL),
            Err(_) => {
                refused = true;
                break;
            }
        }
        match batches {
            Batches::Burst if i % 100 == 99 => {
                // Let the connection task flush; the server's GOAWAY surfaces on `ready`.
                tokio::task::yield_now().await;
            }
            Batches::Paced(n) if i % n == n - 1 => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            _ => {}
        }
    }
    // Under load the server's GOAWAY may land only after the last reset was sent: the
    // connection then ends with that error rather than refusing a request. Wait for it
    // with the client still holding the connection, so only the server can end it (a
    // client that let go first would race the GOAWAY, and its own close is no cut-off).
    let mut conn = conn;
    if let Ok(Ok(Err(e))) = tokio::time::timeout(Duration::from_secs(5), &mut conn).await {
        refused |= e.is_go_away() || e.is_io();
    }
    drop(client);
    conn.abort();
    let gauge = |m: &str| {
        m.lines()
            .filter(|l| l.starts_with("apiserver_longrunning_requests") && l.contains("WATCH"))
            .map(str::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    };
    let open = common::poll_until(
        Duration::from_secs(10),
        || async { gauge(&common::get(addr, "/metrics").await.body) },
        |open| open.lines().all(|l| l.ends_with(" 0")),
    )
    .await;
    (refused, open)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_does_not_hold_up_others() {
    let s = common::start(20_000, ServerConfig::default()).await;
    let _stalled: Vec<TcpStream> = futures::future::join_all(
        (0..8).map(|_| stalled(s.addr, "/api/v1/pods?resourceVersion=0")),
    )
    .await;
    // Wait until all 8 are being served (their LISTs are in flight) before asking.
    wait_for_lists(s.addr, 8).await;
    for _ in 0..3 {
        still_serving(s.addr, 20_000).await;
    }
}

/// A flood of requests cannot flood the log: at most `request_log_per_second` INFO lines a
/// second, the rest counted in `listwatch_request_log_lines_suppressed_total`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_flood_is_logged_within_its_budget_and_counted() {
    let s = common::start(
        10,
        ServerConfig {
            request_log_per_second: 5,
            ..ServerConfig::default()
        },
    )
    .await;
    let started = std::time::Instant::now();
    for _ in 0..300 {
        let r = common::get(s.addr, "/api/v1/namespaces/demo-0/pods?limit=1").await;
        assert_eq!(r.status, 200);
    }
    // At most 5 logged in each second the flood spanned; every other one counted.
    let seconds = started.elapsed().as_secs() + 1;
    let floor = 300u64.saturating_sub(5 * seconds);
    let m = common::get(s.addr, "/metrics").await.body;
    let suppressed: u64 = m
        .lines()
        .find_map(|l| l.strip_prefix("listwatch_request_log_lines_suppressed_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no suppressed counter in {m}"));
    assert!(
        suppressed >= floor && suppressed <= 300,
        "{suppressed} suppressed of 300 in {seconds} s"
    );
}
