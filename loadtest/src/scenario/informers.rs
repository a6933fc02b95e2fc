//! The client-go informer scenario: what a controller's informers do on start, the way
//! client-go 1.36 does it, so the number of requests and the time to sync are measured as a
//! real client would see them.
//!
//! - Every client has client-go's default token-bucket rate limiter (5 requests/s, burst 10),
//!   shared by its informers.
//! - LIST mode (the reflector's ListAndWatch): `resourceVersion=0&limit=500`, following
//!   `continue` tokens, each page decoded into typed Pods (k8s-openapi) and kept in the
//!   informer's store; then a WATCH from the list's RV with bookmarks.
//! - watch-list mode: `sendInitialEvents=true&resourceVersionMatch=NotOlderThan` until the
//!   `k8s.io/initial-events-end` bookmark, every ADDED object decoded and stored.
//! - relist: once synced, every informer relists as after a 410 (`resourceVersion=""`,
//!   paged by `limit=500`, consistent), all at once.
//!
//! Requests go through hyper's HTTP/1.1 client, gzip asked for as Go's transport does.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use crate::net;

/// client-go's default client-side rate limit: 5 requests/s, bursts of 10.
const QPS: f64 = 5.0;
const BURST: f64 = 10.0;
/// client-go's reflector page size.
const PAGE: u32 = 500;

/// How an informer fills its store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// LIST (paged as client-go asks) then WATCH.
    List,
    /// watch-list (streaming list).
    WatchList,
    /// LIST then WATCH, then a consistent relist of every informer at once.
    Relist,
}

/// golang.org/x/time/rate as client-go uses it: a full bucket at the start.
pub struct TokenBucket {
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    /// A bucket of `BURST` tokens refilled at `QPS`.
    pub fn client_go_default() -> Self {
        TokenBucket {
            state: Mutex::new((BURST, Instant::now())),
        }
    }

    /// Waits for a token (requests queue in arrival order on the lock).
    pub async fn acquire(&self) {
        let mut g = self.state.lock().await;
        let (tokens, at) = *g;
        let now = Instant::now();
        let tokens = (tokens + now.duration_since(at).as_secs_f64() * QPS).min(BURST);
        if tokens >= 1.0 {
            *g = (tokens - 1.0, now);
            return;
        }
        let wait = Duration::from_secs_f64((1.0 - tokens) / QPS);
        tokio::time::sleep(wait).await;
        *g = (0.0, Instant::now());
    }
}

/// What one informer did.
#[derive(Serialize, Default, Clone)]
pub struct InformerResult {
    /// Objects in its store when synced.
    pub objects: u64,
    /// Requests made until synced (and for the relist, until relisted).
    pub requests: u32,
    /// Response bytes on the wire (compressed when gzip).
    pub wire_bytes: u64,
    /// Seconds from start until synced.
    pub sync_s: f64,
    /// Seconds the relist took (relist mode).
    pub relist_s: Option<f64>,
    /// Requests the relist made (relist mode).
    pub relist_requests: Option<u32>,
    /// What went wrong, if anything.
    pub error: Option<String>,
}

#[derive(Deserialize)]
struct ListMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
    #[serde(rename = "continue")]
    continue_token: Option<String>,
}

#[derive(Deserialize)]
struct PodList {
    metadata: ListMeta,
    items: Vec<Pod>,
}

#[derive(Deserialize)]
struct WatchEvent<'a> {
    #[serde(rename = "type")]
    kind: String,
    #[serde(borrow)]
    object: &'a serde_json::value::RawValue,
}

#[derive(Deserialize)]
struct BookmarkMeta {
    metadata: BookmarkObjectMeta,
}

#[derive(Deserialize)]
struct BookmarkObjectMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
    annotations: Option<HashMap<String, String>>,
}

/// One informer's store: typed objects by namespace/name, as client-go's indexer keeps them
/// — or, with `--discard-objects`, only their keys (the objects are still decoded).
#[derive(Default)]
struct PodStore {
    discard: bool,
    pods: HashMap<String, Pod>,
    keys: HashSet<String>,
}

impl PodStore {
    fn insert(&mut self, p: Pod) {
        let k = key(&p);
        if self.discard {
            self.keys.insert(k);
        } else {
            self.pods.insert(k, p);
        }
    }

    fn clear(&mut self) {
        self.pods.clear();
        self.keys.clear();
    }

    fn len(&self) -> usize {
        self.pods.len() + self.keys.len()
    }
}

fn key(p: &Pod) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or(""),
        p.metadata.name.as_deref().unwrap_or("")
    )
}

/// A GET through hyper's client on a fresh HTTP/1.1 connection: the status and the body
/// stream.
async fn get(
    host: &str,
    path: &str,
    gzip: bool,
) -> Result<(u16, bool, hyper::body::Incoming), String> {
    let io = hyper_util::rt::TokioIo::new(net::connect(host).await?);
    let (mut send, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let mut req = hyper::Request::get(path)
        .header("host", host)
        .header("accept", "application/json")
        .header("user-agent", "listwatch-loadtest/informer");
    if gzip {
        req = req.header("accept-encoding", "gzip");
    }
    if let Some(v) = net::auth_header().strip_prefix("Authorization: ") {
        req = req.header("authorization", v.trim_end());
    }
    let req = req.body(Empty::<Bytes>::new()).map_err(|e| e.to_string())?;
    let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
    let gz = resp
        .headers()
        .get("content-encoding")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
    Ok((resp.status().as_u16(), gz, resp.into_body()))
}

/// Reads a whole body (as client-go does for a LIST: it decodes the complete response).
async fn read_all(
    mut body: hyper::body::Incoming,
    gz: bool,
    wire: &mut u64,
) -> Result<Vec<u8>, String> {
    let mut raw = Vec::new();
    while let Some(f) = body.frame().await {
        let f = f.map_err(|e| e.to_string())?;
        if let Some(d) = f.data_ref() {
            *wire += d.len() as u64;
            raw.extend_from_slice(d);
        }
    }
    if !gz {
        return Ok(raw);
    }
    let mut out = Vec::with_capacity(raw.len() * 8);
    flate2::read::GzDecoder::new(&raw[..])
        .read_to_end(&mut out)
        .map_err(|e| format!("gzip: {e}"))?;
    Ok(out)
}

/// Pages a LIST as the reflector's pager does; returns the list's RV.
async fn list(
    host: &str,
    base: &str,
    rv: &str,
    gzip: bool,
    limiter: &TokenBucket,
    store: &mut PodStore,
    res: &mut InformerResult,
) -> Result<String, String> {
    let mut cont = String::new();
    let mut list_rv = String::new();
    store.clear();
    loop {
        limiter.acquire().await;
        res.requests += 1;
        let path = if cont.is_empty() {
            format!("{base}?resourceVersion={rv}&limit={PAGE}")
        } else {
            format!("{base}?limit={PAGE}&continue={cont}")
        };
        let (code, gz, body) = get(host, &path, gzip).await?;
        let bytes = read_all(body, gz, &mut res.wire_bytes).await?;
        if code != 200 {
            return Err(format!("LIST {path}: HTTP {code}"));
        }
        let page: PodList = serde_json::from_slice(&bytes).map_err(|e| format!("decode: {e}"))?;
        if list_rv.is_empty() {
            list_rv = page.metadata.resource_version.unwrap_or_default();
        }
        for p in page.items {
            store.insert(p);
        }
        match page.metadata.continue_token.filter(|c| !c.is_empty()) {
            Some(c) => cont = c,
            None => return Ok(list_rv),
        }
    }
}

/// Opens the reflector's WATCH from `rv` and checks it starts (200).
async fn start_watch(
    host: &str,
    base: &str,
    rv: &str,
    gzip: bool,
    limiter: &TokenBucket,
    res: &mut InformerResult,
) -> Result<(), String> {
    limiter.acquire().await;
    res.requests += 1;
    let path =
        format!("{base}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=300");
    let (code, _, _body) = get(host, &path, gzip).await?;
    if code != 200 {
        return Err(format!("WATCH: HTTP {code}"));
    }
    Ok(())
}

/// watch-list until the initial-events-end bookmark, every ADDED object decoded and stored.
async fn watch_list(
    host: &str,
    base: &str,
    gzip: bool,
    limiter: &TokenBucket,
    store: &mut PodStore,
    res: &mut InformerResult,
) -> Result<(), String> {
    limiter.acquire().await;
    res.requests += 1;
    let path = format!(
        "{base}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=600"
    );
    let (code, gz, mut body) = get(host, &path, gzip).await?;
    if code != 200 {
        return Err(format!("watch-list: HTTP {code}"));
    }
    let mut inflate = gz.then(|| flate2::write::GzDecoder::new(Vec::new()));
    let mut pending: Vec<u8> = Vec::new();
    while let Some(f) = body.frame().await {
        let f = f.map_err(|e| e.to_string())?;
        let Some(d) = f.data_ref() else { continue };
        res.wire_bytes += d.len() as u64;
        match inflate.as_mut() {
            Some(g) => {
                std::io::Write::write_all(g, d).map_err(|e| format!("gzip: {e}"))?;
                std::io::Write::flush(g).map_err(|e| format!("gzip: {e}"))?;
                pending.append(g.get_mut());
            }
            None => pending.extend_from_slice(d),
        }
        let mut start = 0;
        while let Some(nl) = pending[start..].iter().position(|b| *b == b'\n') {
            let line = &pending[start..start + nl];
            start += nl + 1;
            let ev: WatchEvent<'_> =
                serde_json::from_slice(line).map_err(|e| format!("event: {e}"))?;
            match ev.kind.as_str() {
                "ADDED" | "MODIFIED" => {
                    let p: Pod =
                        serde_json::from_str(ev.object.get()).map_err(|e| format!("pod: {e}"))?;
                    store.insert(p);
                }
                "BOOKMARK" => {
                    let b: BookmarkMeta = serde_json::from_str(ev.object.get())
                        .map_err(|e| format!("bookmark: {e}"))?;
                    let end = b
                        .metadata
                        .annotations
                        .is_some_and(|a| a.contains_key("k8s.io/initial-events-end"));
                    if end && b.metadata.resource_version.is_some() {
                        return Ok(());
                    }
                }
                other => return Err(format!("unexpected {other} event in the initial list")),
            }
        }
        pending.drain(..start);
    }
    Err("watch-list ended before the initial-events-end bookmark".into())
}

/// One informer: syncs (and, in relist mode, relists once every informer of the run has
/// synced).
#[allow(clippy::too_many_arguments)]
pub async fn informer(
    host: String,
    base: String,
    mode: Mode,
    gzip: bool,
    discard: bool,
    limiter: Arc<TokenBucket>,
    start: Arc<tokio::sync::Barrier>,
    relist: Arc<tokio::sync::Barrier>,
) -> InformerResult {
    let mut res = InformerResult::default();
    let mut store = PodStore {
        discard,
        ..Default::default()
    };
    start.wait().await;
    let t = Instant::now();
    let synced = match mode {
        Mode::WatchList => watch_list(&host, &base, gzip, &limiter, &mut store, &mut res).await,
        Mode::List | Mode::Relist => {
            match list(&host, &base, "0", gzip, &limiter, &mut store, &mut res).await {
                Ok(rv) => {
                    res.sync_s = t.elapsed().as_secs_f64();
                    start_watch(&host, &base, &rv, gzip, &limiter, &mut res).await
                }
                Err(e) => Err(e),
            }
        }
    };
    if res.sync_s == 0.0 {
        res.sync_s = t.elapsed().as_secs_f64();
    }
    res.objects = store.len() as u64;
    if let Err(e) = synced {
        res.error = Some(e);
    }
    if mode == Mode::Relist {
        // As after a 410 on every watch at once: a consistent, paged relist.
        relist.wait().await;
        let before = res.requests;
        let t = Instant::now();
        match list(&host, &base, "", gzip, &limiter, &mut store, &mut res).await {
            Ok(_) => {
                res.relist_s = Some(t.elapsed().as_secs_f64());
                res.relist_requests = Some(res.requests - before);
            }
            Err(e) => res.error = Some(e),
        }
    }
    res
}

/// The CPU seconds this process has used (user + system), from /proc (Linux clock ticks
/// are 100/s).
pub fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}
