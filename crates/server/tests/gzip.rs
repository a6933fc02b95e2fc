//! gzip: LIST bodies decode to the plain body; a compressed watch-list stays live — each
//! event decodes as soon as it arrives — and is one gzip member that single-member decoders
//! (curl, tower-http) read to the end.

use listwatch_testkit::server as common;

use std::time::Duration;

use common::{request, start};
use listwatch_server::ServerConfig;
use listwatch_testkit::gunzip;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

async fn raw_get(addr: std::net::SocketAddr, path: &str, gzip: bool) -> (String, Vec<u8>) {
    let headers: &[(&str, &str)] = if gzip {
        &[("Accept-Encoding", "gzip")]
    } else {
        &[]
    };
    let r = listwatch_testkit::send(addr, "GET", path, headers, None)
        .await
        .expect("response");
    let head = r
        .headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect::<String>();
    (head.to_ascii_lowercase(), r.body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_gzip_round_trips_and_small_bodies_stay_plain() {
    let s = start(300, ServerConfig::default()).await;
    let (plain_head, plain) = raw_get(s.addr, "/api/v1/pods?resourceVersion=0", false).await;
    let (gz_head, gz) = raw_get(s.addr, "/api/v1/pods?resourceVersion=0", true).await;
    assert!(!plain_head.contains("content-encoding"));
    assert!(gz_head.contains("content-encoding: gzip"), "{gz_head}");
    assert!(
        gz.len() * 5 < plain.len(),
        "{} vs {}",
        gz.len(),
        plain.len()
    );
    assert_eq!(gunzip(&gz), plain);
    let (head, _) = raw_get(s.addr, "/api/v1/configmaps", true).await;
    assert!(
        !head.contains("content-encoding"),
        "tiny responses are not compressed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gzip_watch_list_delivers_each_event_promptly() {
    let s = start(200, ServerConfig::default()).await;
    let addr = s.addr;
    let mut sock = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let path = "/api/v1/namespaces/demo-1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=6";
    sock.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n").as_bytes(),
    )
    .await
    .expect("write");
    let mut r = BufReader::new(sock);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).await.expect("head");
        if line == "\r\n" {
            break;
        }
        head.push_str(&line.to_ascii_lowercase());
    }
    assert!(head.contains("content-encoding: gzip"), "{head}");
    // Inflate incrementally: strip the 10-byte gzip header, feed raw deflate as it comes.
    let mut inflate = flate2::Decompress::new(false);
    let mut wire = Vec::new();
    let mut text = Vec::new();
    let mut header_skipped = false;
    let mut wrote = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let mut line = String::new();
        tokio::time::timeout_at(deadline, r.read_line(&mut line))
            .await
            .expect("event in time")
            .expect("size");
        let n = usize::from_str_radix(line.trim(), 16).expect("hex");
        assert!(n > 0, "stream ended early");
        let mut buf = vec![0u8; n + 2];
        r.read_exact(&mut buf).await.expect("chunk");
        wire.extend_from_slice(&buf[..n]);
        let mut input: &[u8] = &buf[..n];
        if !header_skipped {
            input = &input[10..];
            header_skipped = true;
        }
        let mut out = vec![0u8; 1 << 20];
        let before = inflate.total_out();
        inflate
            .decompress(input, &mut out, flate2::FlushDecompress::Sync)
            .expect("inflate");
        text.extend_from_slice(&out[..(inflate.total_out() - before) as usize]);
        let s_text = String::from_utf8_lossy(&text);
        if !wrote && s_text.contains("k8s.io/initial-events-end") {
            assert_eq!(
                s_text
                    .lines()
                    .filter(|l| l.contains(r#""type":"ADDED""#))
                    .count(),
                50
            );
            let r = request(addr, "DELETE", "/api/v1/namespaces/demo-1/pods/pod-0", None).await;
            assert_eq!(r.status, 200);
            wrote = true;
        }
        if wrote && s_text.contains(r#""type":"DELETED""#) {
            break;
        }
    }
    // Read to the end: the whole body is one gzip member a single-member decoder accepts.
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).await.expect("size") == 0 {
            break;
        }
        let n = usize::from_str_radix(line.trim(), 16).expect("hex");
        if n == 0 {
            break;
        }
        let mut buf = vec![0u8; n + 2];
        r.read_exact(&mut buf).await.expect("chunk");
        wire.extend_from_slice(&buf[..n]);
    }
    let all = String::from_utf8(gunzip(&wire)).expect("utf8");
    assert!(all.starts_with(r#"{"type":"ADDED""#));
    assert!(all.contains(r#""type":"DELETED""#));
}
