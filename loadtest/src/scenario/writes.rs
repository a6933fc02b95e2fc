//! `writes`: `--writes` ConfigMap creates of `--body-kib` KiB each over `--clients`
//! keep-alive connections, as fast as the server answers: what passing writes through a
//! front listwatch costs against sending them to the upstream directly (issue 26).

use std::sync::Arc;
use std::time::Instant;

use hyper::Method;
use serde::Serialize;

use crate::Args;
use crate::writers::{self, Write};

/// What the writes scenario reports.
#[derive(Serialize, Default)]
pub struct Report {
    /// Writes answered 2xx.
    pub writes: u64,
    /// Writes that failed.
    pub errors: u64,
    /// The first few failures.
    pub first_errors: Vec<String>,
    /// Request body size of each write.
    pub body_bytes: usize,
    /// From the first write to the last answer.
    pub seconds: f64,
    /// Writes per second over that time.
    pub writes_per_s: f64,
}

/// Runs the writes against `host`.
pub async fn run(args: Arc<Args>, host: String) -> Report {
    let value = "x".repeat(args.body_kib as usize * 1024);
    let (tx, rx) = tokio::sync::mpsc::channel(1024);
    let path = format!("/api/v1/namespaces/{}/configmaps", args.namespace);
    let n = args.writes;
    let ns = args.namespace.clone();
    let body_bytes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let size = body_bytes.clone();
    tokio::spawn(async move {
        for i in 0..n {
            let body = format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"w-{i}","namespace":"{ns}"}},"data":{{"v":"{value}"}}}}"#
            );
            size.store(body.len(), std::sync::atomic::Ordering::Relaxed);
            let w = Write {
                method: Method::POST,
                path: path.clone(),
                body: Some(body),
                tag: 0,
            };
            if tx.send(w).await.is_err() {
                break;
            }
        }
    });
    let started = Instant::now();
    let log = writers::bulk(&host, args.clients, rx).await;
    let seconds = started.elapsed().as_secs_f64();
    Report {
        writes: log.writes,
        errors: log.errors,
        first_errors: log.first_errors,
        body_bytes: body_bytes.load(std::sync::atomic::Ordering::Relaxed),
        seconds,
        writes_per_s: log.writes as f64 / seconds.max(1e-9),
    }
}
