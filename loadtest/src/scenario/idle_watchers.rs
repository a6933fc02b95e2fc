//! `idle-watchers`: `--clients` watches with bookmarks on an idle resource, held for
//! `--hold` seconds; one HTTP/1.1 connection each, or `--h2-streams-per-conn` of them
//! multiplexed over each HTTP/2 (h2c) connection as client-go does. `--protobuf` asks for
//! protobuf watch frames.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use hyper::Method;

use crate::http::H2Sender as H2;
use crate::report::ClientResult;
use crate::{Args, http};

/// Runs every watcher (all start at once) and returns what each did.
pub async fn run(args: Arc<Args>, host: String) -> Result<Vec<ClientResult>, String> {
    let mut h2 = Vec::new();
    if let Some(k) = args.h2_streams_per_conn {
        for _ in 0..args.clients.div_ceil(k.max(1)) {
            h2.push(http::open_h2(&host).await?);
        }
    }
    let start = Arc::new(tokio::sync::Barrier::new(args.clients));
    let teardown = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..args.clients)
        .map(|i| {
            let conn = args.h2_streams_per_conn.map(|k| h2[i / k.max(1)].clone());
            let ends = (start.clone(), teardown.clone());
            tokio::spawn(watcher(args.clone(), host.clone(), conn, ends, i))
        })
        .collect();
    Ok(crate::join_all(handles).await)
}

/// One idle watch, on its own HTTP/1.1 connection or a stream of a shared HTTP/2 one.
async fn watcher(
    args: Arc<Args>,
    host: String,
    h2: Option<H2>,
    (start, teardown): (Arc<tokio::sync::Barrier>, Arc<AtomicBool>),
    index: usize,
) -> ClientResult {
    start.wait().await;
    // Spread over --ramp-seconds, as watches arrive in a running cluster (not all at once).
    if args.ramp_seconds > 0 {
        let at = args.ramp_seconds as f64 * index as f64 / args.clients.max(1) as f64;
        tokio::time::sleep(Duration::from_secs_f64(at)).await;
    }
    let t = Instant::now();
    let mut res = ClientResult {
        requests: 1,
        ..Default::default()
    };
    let path = format!(
        "/api/v1/namespaces/{}/configmaps?watch=1&resourceVersion=0&allowWatchBookmarks=true&timeoutSeconds={}",
        args.namespace,
        args.hold + 60
    );
    let until = tokio::time::Instant::now() + Duration::from_secs(args.hold);
    let accept = http::accept(args.form.protobuf, false, true);
    // Cut in the teardown (with --ramp-seconds, the first watches end while later ones
    // still hold, and the server closes a connection whose streams its clients reset
    // quickly: its rapid-reset guard).
    let mut torn = false;
    let run = async {
        let resp = match h2 {
            Some(mut send) => {
                let req = http::h2_request(Method::GET, &host, &path, accept.as_deref(), false)?;
                send.send_request(req).await.map_err(|e| e.to_string())?
            }
            None => {
                let req = http::request(Method::GET, &host, &path, accept.as_deref(), false, None)?;
                http::open(&host)
                    .await?
                    .send_request(req)
                    .await
                    .map_err(|e| e.to_string())?
            }
        };
        if resp.status() != 200 {
            return Err(format!("HTTP {}", resp.status()));
        }
        let mut body = http::Body::new(resp.into_body(), false);
        let r = async {
            while body.chunk().await?.is_some() {}
            Ok::<_, String>(())
        };
        // Reaching --hold is the normal end of an idle watch. All watches reach it within
        // milliseconds and drop their streams; the server's HTTP/2 stack then closes a
        // shared connection under the burst of stream resets, and a watch whose timer had
        // not yet fired reads that as a body error: once any watch has been held to the
        // end, that is teardown, not a failure.
        let r = match tokio::time::timeout_at(until, r).await {
            Err(_) => {
                teardown.store(true, Relaxed);
                Ok(())
            }
            Ok(Err(_)) if teardown.load(Relaxed) => {
                torn = true;
                Ok(())
            }
            Ok(r) => r,
        };
        res.wire_bytes = body.wire;
        r
    };
    if let Ok(Err(e)) = tokio::time::timeout_at(until, run).await {
        res.error = Some(e);
    }
    res.seconds = t.elapsed().as_secs_f64();
    // A watch the server ended before --hold is an error: `complete` then means every
    // watch was really held.
    if res.error.is_none() && !torn && res.seconds + 0.2 < args.hold as f64 {
        res.error = Some(format!(
            "watch ended after {:.1}s, before --hold {}s",
            res.seconds, args.hold
        ));
    }
    res
}
