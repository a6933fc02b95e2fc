//! `slow-readers`: half the clients LIST, half watch-list, each reading at `--read-rate-kib`
//! for `--hold` seconds. Deliberately a raw socket, not hyper: the client takes bytes off
//! the socket only as fast as its rate, so the server's send buffer fills and its writer
//! must stop (hyper would read ahead into its own buffers).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::list::{Counter, WATCH_LIST, with_query};
use crate::report::ClientResult;
use crate::{Args, net};

/// One slow reader: client `i` LISTs when even, watch-lists when odd (JSON).
pub async fn reader(
    args: Arc<Args>,
    host: String,
    start: Arc<tokio::sync::Barrier>,
    i: usize,
) -> ClientResult {
    start.wait().await;
    let t = Instant::now();
    let watch = i % 2 == 1;
    let path = with_query(
        &args.path,
        if watch {
            WATCH_LIST
        } else {
            "resourceVersion=0"
        },
    );
    let mut counter = Counter::new(watch, false);
    let mut res = ClientResult {
        requests: 1,
        ..Default::default()
    };
    let rate = args.read_rate_kib.unwrap_or(256).max(1);
    let read = read(&host, &path, rate, &mut counter, &mut res.wire_bytes);
    // Still reading when the hold ended is what a slow reader is expected to be.
    if let Ok(Err(e)) = tokio::time::timeout(Duration::from_secs(args.hold), read).await {
        res.error = Some(e);
    }
    res.body_bytes = res.wire_bytes;
    res.objects = counter.objects();
    res.seconds = t.elapsed().as_secs_f64();
    res
}

/// GETs `path` and reads its chunked body a tenth of a second's worth at a time.
async fn read(
    host: &str,
    path: &str,
    rate_kib: u64,
    counter: &mut Counter,
    wire: &mut u64,
) -> Result<(), String> {
    let mut s = net::connect(host).await?;
    let auth = net::bearer()
        .map(|b| format!("Authorization: {b}\r\n"))
        .unwrap_or_default();
    let head = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: listwatch-loadtest\r\n{auth}Connection: close\r\n\r\n"
    );
    s.write_all(head.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    // A small buffer: what the client has not read stays in the socket.
    let mut r = BufReader::with_capacity(4096, s);
    let mut line = String::new();
    r.read_line(&mut line).await.map_err(|e| e.to_string())?;
    if line.split(' ').nth(1) != Some("200") {
        return Err(format!("status line {:?}", line.trim_end()));
    }
    let mut chunked = false;
    loop {
        line.clear();
        r.read_line(&mut line).await.map_err(|e| e.to_string())?;
        if line == "\r\n" || line.is_empty() {
            break;
        }
        let l = line.to_ascii_lowercase();
        chunked |= l.starts_with("transfer-encoding:") && l.contains("chunked");
    }
    if !chunked {
        return Err("expected a chunked (streamed) body".into());
    }
    let step = (rate_kib as usize * 1024 / 10).max(1);
    let mut buf = vec![0u8; step.min(64 * 1024)];
    loop {
        line.clear();
        if r.read_line(&mut line).await.map_err(|e| e.to_string())? == 0 {
            return Ok(());
        }
        let mut n = usize::from_str_radix(line.trim(), 16).map_err(|e| e.to_string())?;
        if n == 0 {
            return Ok(());
        }
        while n > 0 {
            let k = n.min(buf.len());
            r.read_exact(&mut buf[..k])
                .await
                .map_err(|e| e.to_string())?;
            *wire += k as u64;
            counter.feed(&buf[..k])?;
            n -= k;
            let secs = k as f64 / (rate_kib as f64 * 1024.0);
            tokio::time::sleep(Duration::from_secs_f64(secs)).await;
        }
        let mut crlf = [0u8; 2];
        r.read_exact(&mut crlf).await.map_err(|e| e.to_string())?;
    }
}
