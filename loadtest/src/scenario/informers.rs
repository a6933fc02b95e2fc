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
//! Requests go through hyper's HTTP/1.1 client (`http.rs`), gzip asked for as Go's
//! transport does. With `--protobuf` they ask for protobuf as client-go's typed clients
//! configured for it do; each list (or event object) is transcoded to JSON by
//! `listwatch-protobuf` and decoded into typed Pods, so the store is the same.

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use listwatch_protobuf::{JsonWriter, Schema};

use crate::events::{EventReader, Kind};
use crate::http::{self, Body, Form};

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

/// A page, its items left undecoded: each is decoded into a typed Pod on its own, so with
/// `--discard-objects` no more than one typed Pod is alive at a time (8 informers holding
/// 40,000 typed Pods each at once took more memory than a shared machine had).
#[derive(Deserialize)]
struct PodList<'a> {
    metadata: ListMeta,
    #[serde(borrow)]
    items: Vec<&'a serde_json::value::RawValue>,
}

/// An event's object, left undecoded until the store wants it typed.
#[derive(Deserialize)]
struct WatchEvent<'a> {
    #[serde(borrow)]
    object: &'a serde_json::value::RawValue,
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

/// A GET on a fresh connection, JSON asked for as client-go's default does (or protobuf).
async fn get(host: &str, path: &str, form: Form, watch: bool) -> Result<(u16, Body), String> {
    let accept =
        http::accept(form.protobuf, false, watch).unwrap_or_else(|| "application/json".to_string());
    http::get(host, path, Some(&accept), form.gzip).await
}

/// A protobuf object or list (`k8s\0` envelope) as the JSON kube-apiserver would serve.
fn protobuf_to_json(raw: &[u8]) -> Result<Vec<u8>, String> {
    let schema = Schema::kubernetes();
    let mut json = Vec::with_capacity(raw.len() * 2);
    listwatch_protobuf::storage_to_json(&mut JsonWriter::new(schema), schema, raw, &mut json)
        .map_err(|e| format!("protobuf: {e}"))?;
    Ok(json)
}

/// Decodes one LIST page as the reflector does (protobuf through JSON), each pod into
/// `store`; returns the page's metadata.
fn decode_page(
    mut bytes: Vec<u8>,
    protobuf: bool,
    store: &mut PodStore,
) -> Result<ListMeta, String> {
    if protobuf {
        bytes = protobuf_to_json(&bytes)?;
    }
    let page: PodList = serde_json::from_slice(&bytes).map_err(|e| format!("decode: {e}"))?;
    for raw in page.items {
        let p: Pod = serde_json::from_str(raw.get()).map_err(|e| format!("pod: {e}"))?;
        store.insert(p);
    }
    Ok(page.metadata)
}

/// Reads a whole body (as client-go does for a LIST: it decodes the complete response),
/// counting its bytes on the wire.
async fn read_all(mut body: Body, wire: &mut u64) -> Result<Vec<u8>, String> {
    let mut all = Vec::new();
    let r = async {
        while let Some(c) = body.chunk().await? {
            all.extend_from_slice(&c);
        }
        Ok::<_, String>(())
    }
    .await;
    *wire += body.wire;
    r.map(|()| all)
}

/// Pages a LIST as the reflector's pager does; returns the list's RV.
async fn list(
    host: &str,
    base: &str,
    rv: &str,
    form: Form,
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
        let (code, body) = get(host, &path, form, false).await?;
        let bytes = read_all(body, &mut res.wire_bytes).await?;
        if code != 200 {
            return Err(format!("LIST {path}: HTTP {code}"));
        }
        // Off the runtime's workers, as client-go decodes on a goroutine Go preempts: eight
        // informers decoding 40,000 pods each on the two workers held them for seconds, and
        // another informer's TLS handshake, never polled meanwhile, outlived the server's
        // deadline for it (the run then counted a server fault that was the harness's).
        // The store goes with the page, so each pod is stored (or, discarding, dropped) as it
        // is decoded, as before: a page's pods are never all held at once.
        let protobuf = form.protobuf;
        let mut taken = std::mem::take(store);
        let (taken, decoded) = tokio::task::spawn_blocking(move || {
            let decoded = decode_page(bytes, protobuf, &mut taken);
            (taken, decoded)
        })
        .await
        .map_err(|e| format!("decode: {e}"))?;
        *store = taken;
        let metadata = decoded?;
        if list_rv.is_empty() {
            list_rv = metadata.resource_version.unwrap_or_default();
        }
        match metadata.continue_token.filter(|c| !c.is_empty()) {
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
    form: Form,
    limiter: &TokenBucket,
    res: &mut InformerResult,
) -> Result<(), String> {
    limiter.acquire().await;
    res.requests += 1;
    let path =
        format!("{base}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=300");
    let (code, _body) = get(host, &path, form, true).await?;
    if code != 200 {
        return Err(format!("WATCH: HTTP {code}"));
    }
    Ok(())
}

/// watch-list until the initial-events-end bookmark, every ADDED object decoded and stored.
async fn watch_list(
    host: &str,
    base: &str,
    form: Form,
    limiter: &TokenBucket,
    store: &mut PodStore,
    res: &mut InformerResult,
) -> Result<(), String> {
    limiter.acquire().await;
    res.requests += 1;
    let path = format!(
        "{base}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=600"
    );
    let (code, mut body) = get(host, &path, form, true).await?;
    if code != 200 {
        return Err(format!("watch-list: HTTP {code}"));
    }
    let mut events = EventReader::new(form.protobuf);
    let r = async {
        while let Some(chunk) = body.chunk().await? {
            let flow = events.feed(&chunk, |ev| {
                match ev.kind {
                    Kind::Added | Kind::Modified if form.protobuf => {
                        let json = protobuf_to_json(ev.raw)?;
                        let p: Pod =
                            serde_json::from_slice(&json).map_err(|e| format!("pod: {e}"))?;
                        store.insert(p);
                    }
                    Kind::Added | Kind::Modified => {
                        let e: WatchEvent<'_> =
                            serde_json::from_slice(ev.raw).map_err(|e| format!("event: {e}"))?;
                        let p: Pod = serde_json::from_str(e.object.get())
                            .map_err(|e| format!("pod: {e}"))?;
                        store.insert(p);
                    }
                    Kind::Bookmark if ev.initial_end && ev.rv.is_some() => {
                        return Ok(ControlFlow::Break(()));
                    }
                    Kind::Bookmark => {}
                    other => return Err(format!("unexpected {other:?} event in the initial list")),
                }
                Ok(ControlFlow::Continue(()))
            })?;
            if flow.is_break() {
                return Ok(());
            }
        }
        Err("watch-list ended before the initial-events-end bookmark".into())
    }
    .await;
    res.wire_bytes += body.wire;
    r
}

/// One informer: syncs (and, in relist mode, relists once every informer of the run has
/// synced).
#[allow(clippy::too_many_arguments)]
pub async fn informer(
    host: String,
    base: String,
    mode: Mode,
    form: Form,
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
        Mode::WatchList => watch_list(&host, &base, form, &limiter, &mut store, &mut res).await,
        Mode::List | Mode::Relist => {
            match list(&host, &base, "0", form, &limiter, &mut store, &mut res).await {
                Ok(rv) => {
                    res.sync_s = t.elapsed().as_secs_f64();
                    start_watch(&host, &base, &rv, form, &limiter, &mut res).await
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
        match list(&host, &base, "", form, &limiter, &mut store, &mut res).await {
            Ok(_) => {
                res.relist_s = Some(t.elapsed().as_secs_f64());
                res.relist_requests = Some(res.requests - before);
            }
            Err(e) => res.error = Some(e),
        }
    }
    res
}
