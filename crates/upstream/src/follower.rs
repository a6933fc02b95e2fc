//! One resource's follower: keeps a [`Store`] equal to the upstream's collection.
//!
//! ```text
//!  Loading ──watch-list (or LIST + WATCH)──▶ Following ──disconnect──▶ Following (resume at last RV)
//!                                               │
//!                          410, an event the cache cannot take
//!                                               ▼
//!                                           Relisting ──▶ Following (open watches got 410)
//! ```
//!
//! The store is unready (readers get 429) until the first sync and while relisting.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use listwatch_core::scan::{self, Span};
use listwatch_store::{Change, Record, Store};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use serde::Deserialize;
use tracing::{debug, info, warn};

use crate::UpstreamError;
use crate::client::{Lines, Upstream, encode, parse_rv, unsupported};
use crate::discovery::collection_path;

/// Items per LIST page (kube's reflector pages by 500).
pub(crate) const PAGE: usize = 500;
/// A watch silent this long is taken as dead and resumed.
const IDLE: Duration = Duration::from_secs(300);
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How one watch ended.
enum Ended {
    /// Broken stream (upstream restart, network, timeout): resume from the last RV.
    Disconnected(String),
    /// The cache can no longer be trusted (410, an impossible event): relist.
    Relist(String),
}

impl From<UpstreamError> for Ended {
    fn from(e: UpstreamError) -> Self {
        match e {
            UpstreamError::Status(410, m) => Ended::Relist(format!("410 Gone: {m}")),
            e => Ended::Disconnected(e.to_string()),
        }
    }
}

/// A watch event line's type and the span of its object, found by scanning (the object
/// is validated when it is ingested): parsed with serde_json, a 1 MB object was read
/// through twice more than it needs (event and metadata) before its ingest.
fn watch_event(line: &[u8]) -> Option<(&str, Span)> {
    // One pass, whichever member comes first (the first of a repeated one counts).
    let (mut kind, mut object) = (None, None);
    scan::for_each_member(line, scan::skip_ws(line, 0), |m| {
        match &line[m.key.0..m.key.1] {
            b"type" if kind.is_none() => kind = Some(m.value),
            b"object" if object.is_none() => object = Some(m.value),
            _ => {}
        }
    })?;
    let kind = scan::plain_string(line, kind?)?;
    Some((std::str::from_utf8(&line[kind.0..kind.1]).ok()?, object?))
}

#[derive(Deserialize)]
struct Object {
    #[serde(default)]
    metadata: Meta,
    #[serde(default)]
    code: u16,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Meta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    resource_version: String,
}

/// An object's store key and RV: read from `metadata` by scanning, which stops there (the
/// members after it, `data` or `spec`, are not read); with serde_json when a value is not
/// a plain string (escaped, or not a string, which is then refused as before).
pub(crate) fn key_and_rv(store: &Store, json: &[u8]) -> Result<(String, u64), UpstreamError> {
    let scanned = || {
        let md = scan::find_member(json, scan::skip_ws(json, 0), "metadata")?;
        if json.get(md.0) != Some(&b'{') {
            return None;
        }
        // One pass over metadata for the three (resourceVersion may follow managedFields);
        // the first of a repeated key counts, as a search finds it.
        let mut found: [Option<Option<&str>>; 3] = [None; 3];
        scan::for_each_member(json, md.0, |m| {
            let at = match &json[m.key.0..m.key.1] {
                b"namespace" => 0,
                b"name" => 1,
                b"resourceVersion" => 2,
                _ => return,
            };
            found[at].get_or_insert_with(|| {
                scan::plain_string(json, m.value)
                    .and_then(|s| std::str::from_utf8(&json[s.0..s.1]).ok())
            });
        })?;
        let [namespace, name, rv] = found.map(|f| f.unwrap_or(Some("")));
        Some((namespace?, name?, rv?))
    };
    if let Some((namespace, name, rv)) = scanned() {
        return Ok((store.info().key(namespace, name), parse_rv(rv)?));
    }
    let o: Object = serde_json::from_slice(json).map_err(|e| UpstreamError::Json(e.to_string()))?;
    Ok((
        store.info().key(&o.metadata.namespace, &o.metadata.name),
        parse_rv(&o.metadata.resource_version)?,
    ))
}

/// Ingests `items` listed at `rv` and replaces the store's content with them (ending every
/// open watch with 410 when it is a relist).
pub(crate) fn install<'a>(
    store: &Store,
    rv: u64,
    items: impl ExactSizeIterator<Item = &'a [u8]>,
) -> Result<(), UpstreamError> {
    let mut records = Vec::with_capacity(items.len());
    for o in items {
        let (_, orv) = key_and_rv(store, o)?;
        records.push(
            Record::ingest(o, store.info(), orv).map_err(|e| UpstreamError::Json(e.to_string()))?,
        );
    }
    store.replace(rv, records);
    Ok(())
}

/// Told once, when a follower's store first holds the upstream's collection.
pub(crate) type Synced = Option<tokio::sync::oneshot::Sender<()>>;

/// Marks `store` current (readers served again) and tells `synced`, the first time.
fn mark_synced(store: &Store, synced: &mut Synced) {
    store.set_ready(true);
    if let Some(tell) = synced.take() {
        let _ = tell.send(());
    }
}

/// Follows `store`'s resource on `up` forever; `synced` is told after the first sync.
/// Per followed resource (`pods`, `deployments.apps`): streams resumed after a disconnect and
/// relists (for `/metrics`).
#[derive(Default)]
pub(crate) struct FollowerCounts {
    pub resumes: Family<ResourceLabel, Counter>,
    pub relists: Family<ResourceLabel, Counter>,
}

/// A followed resource, as `/metrics` names it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResourceLabel {
    resource: String,
}

pub(crate) async fn run(store: Arc<Store>, up: Arc<Upstream>, mut synced: Synced) {
    store.set_ready(false);
    let info = store.info().clone();
    let mut resume: Option<u64> = None;
    let mut backoff = MIN_BACKOFF;
    let label = ResourceLabel {
        resource: info.group_resource(),
    };
    loop {
        let start = resume.unwrap_or(0);
        let mut last = start;
        let ended = match resume {
            Some(rv) => follow(&store, &up, rv, &mut last, &mut synced).await,
            None => sync_and_follow(&store, &up, &mut last, &mut synced).await,
        };
        if last > start {
            // The stream worked for a while: the next failure's backoff starts afresh.
            backoff = MIN_BACKOFF;
        }
        match ended {
            Ended::Disconnected(why) => {
                debug!(resource = %info.resource, %why, rv = last, "upstream watch ended; resuming");
                up.counts.resumes.get_or_create(&label).inc();
                if last > 0 {
                    resume = Some(last);
                }
            }
            Ended::Relist(why) => {
                warn!(resource = %info.resource, %why, "cache unsafe; relisting from the upstream");
                up.counts.relists.get_or_create(&label).inc();
                store.set_ready(false);
                resume = None;
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Loads the collection by watch-list, or by paged LIST where the upstream refuses
/// watch-list, then follows it.
async fn sync_and_follow(
    store: &Store,
    up: &Upstream,
    last: &mut u64,
    synced: &mut Synced,
) -> Ended {
    let info = store.info().clone();
    let path = collection_path(&info);
    let q = format!(
        "{path}?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"
    );
    let resp = match up.get(&q).await {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    if resp.status().is_success() {
        let mut lines = Lines::new(resp);
        let mut initial = Vec::new();
        loop {
            let line = match lines.next(IDLE).await {
                Ok(Some(l)) => l,
                Ok(None) => {
                    return Ended::Disconnected(
                        "watch-list ended before its initial events".into(),
                    );
                }
                Err(e) => return Ended::Disconnected(e),
            };
            let Some((kind, object)) = watch_event(&line) else {
                return Ended::Disconnected("bad watch event".into());
            };
            let json = &line[object.0..object.1];
            match kind {
                // Copied out (as before): a slice would keep the read buffer it shares
                // with neighbouring lines alive, slack included, until the install.
                "ADDED" => initial.push(Bytes::copy_from_slice(json)),
                "BOOKMARK"
                    if memchr::memmem::find(json, b"\"k8s.io/initial-events-end\"").is_some() =>
                {
                    let rv = match key_and_rv(store, json) {
                        Ok((_, rv)) => rv,
                        Err(e) => return Ended::Disconnected(e.to_string()),
                    };
                    if let Err(e) = install(store, rv, initial.iter().map(|o| &o[..])) {
                        return Ended::Relist(e.to_string());
                    }
                    info!(resource = %info.resource, objects = initial.len(), rv, "synced from the upstream (watch-list)");
                    mark_synced(store, synced);
                    *last = rv;
                    return stream(store, lines, last).await;
                }
                "BOOKMARK" => {}
                "ERROR" => return error_event(json),
                other => {
                    return Ended::Relist(format!(
                        "{other} event among a watch-list's initial events"
                    ));
                }
            }
        }
    }
    if !unsupported(resp.status()) {
        return UpstreamError::Status(resp.status().as_u16(), "watch-list".into()).into();
    }
    debug!(resource = %info.resource, status = %resp.status(), "watch-list refused; LIST + WATCH");
    let (rv, items) = match up.list_all(&path, PAGE).await {
        Ok(l) => l,
        Err(e) => return e.into(),
    };
    if let Err(e) = install(store, rv, items.iter().map(|o| o.get().as_bytes())) {
        return Ended::Relist(e.to_string());
    }
    info!(resource = %info.resource, objects = items.len(), rv, "synced from the upstream (LIST)");
    mark_synced(store, synced);
    *last = rv;
    follow(store, up, rv, last, synced).await
}

/// Watches from `rv` (exclusive) until the watch ends.
async fn follow(
    store: &Store,
    up: &Upstream,
    rv: u64,
    last: &mut u64,
    synced: &mut Synced,
) -> Ended {
    let path = collection_path(store.info());
    let q = format!(
        "{path}?watch=1&allowWatchBookmarks=true&resourceVersion={}",
        encode(&rv.to_string())
    );
    let resp = match up.get(&q).await {
        Ok(r) => r,
        Err(e) => return e.into(),
    };
    if !resp.status().is_success() {
        let code = resp.status().as_u16();
        return UpstreamError::Status(code, "watch".into()).into();
    }
    mark_synced(store, synced);
    stream(store, Lines::new(resp), last).await
}

/// Applies a watch's live events to the store; `*last` follows the newest RV seen.
async fn stream(store: &Store, mut lines: Lines, last: &mut u64) -> Ended {
    loop {
        let line: Bytes = match lines.next(IDLE).await {
            Ok(Some(l)) => l,
            Ok(None) => return Ended::Disconnected("watch ended".into()),
            Err(e) => return Ended::Disconnected(e),
        };
        let Some((kind, object)) = watch_event(&line) else {
            return Ended::Disconnected("bad watch event".into());
        };
        let json = &line[object.0..object.1];
        if kind == "ERROR" {
            return error_event(json);
        }
        let (key, rv) = match key_and_rv(store, json) {
            Ok(k) => k,
            Err(e) => return Ended::Relist(e.to_string()),
        };
        if let Err(why) = apply(store, kind, json, key, rv) {
            return Ended::Relist(why);
        }
        *last = (*last).max(rv);
    }
}

/// Applies one event. An event at or below the store's RV (the store was declared current
/// past it by a consistent read's proof, `consistent`) is only a repeat when the cache
/// holds exactly that object version; anything else means watchers missed it: relist.
fn apply(store: &Store, kind: &str, json: &[u8], key: String, rv: u64) -> Result<(), String> {
    if kind == "BOOKMARK" {
        store.progress(rv);
        return Ok(());
    }
    if rv <= store.rv() {
        let repeat = kind != "DELETED" && store.current().get(&key).is_some_and(|r| r.rv() == rv);
        return if repeat {
            Ok(())
        } else {
            Err(format!(
                "{kind} {key} at {rv}, at or below the cache's {}",
                store.rv()
            ))
        };
    }
    let change = match kind {
        "ADDED" | "MODIFIED" => {
            Change::Put(Record::ingest(json, store.info(), rv).map_err(|e| e.to_string())?)
        }
        "DELETED" => Change::Delete { key, rv },
        other => return Err(format!("unknown watch event type {other}")),
    };
    store.apply([change]).map_err(|e| e.to_string())
}

/// An `ERROR` event: 410 (history gone) relists, anything else reconnects.
fn error_event(json: &[u8]) -> Ended {
    match serde_json::from_slice::<Object>(json) {
        Ok(o) if o.code == 410 => Ended::Relist("410 Gone in the watch".into()),
        _ => Ended::Disconnected(format!(
            "watch error: {}",
            String::from_utf8_lossy(&json[..json.len().min(300)])
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(resource: &str) -> Arc<Store> {
        let info = Arc::new(listwatch_core::builtin_resource(resource).expect("resource"));
        Store::new(
            info,
            1,
            Vec::<Record>::new(),
            listwatch_store::StoreConfig::default(),
        )
    }

    #[test]
    fn key_and_rv_are_read_from_metadata_as_serde_json_would() {
        let cms = store("configmaps");
        let key = |json: &str| key_and_rv(&cms, json.as_bytes()).map_err(|e| e.to_string());
        let want = |ns: &str, name: &str, rv| Ok((cms.info().key(ns, name), rv));
        assert_eq!(
            key(
                r#"{"metadata":{"name":"a","namespace":"ns","managedFields":[{"f":{"f:x":{}}}],"resourceVersion":"7"},"data":{"k":"v"}}"#
            ),
            want("ns", "a", 7)
        );
        // The first of a repeated key, as a search (and Go's decoder keeps the last: the
        // object is refused at ingest for it).
        assert_eq!(
            key(r#"{"metadata":{"name":"a","name":"b","resourceVersion":"3"}}"#),
            want("", "a", 3)
        );
        // Escaped: decoded by serde_json.
        assert_eq!(
            key(r#"{"metadata":{"name":"\u0061b","namespace":"ns","resourceVersion":"9"}}"#),
            want("ns", "ab", 9)
        );
        assert!(key(r#"{"metadata":{"name":"a","resourceVersion":"x"}}"#).is_err());
        assert!(key(r#"{"metadata":{"name":7,"resourceVersion":"1"}}"#).is_err());
        assert!(key(r#"{"metadata":"#).is_err());
    }

    #[test]
    fn watch_events_are_split_without_parsing_the_object() {
        let line = br#"{"type":"MODIFIED","object":{"metadata":{"name":"a"},"data":{"k":"v"}}}"#;
        let (kind, object) = watch_event(line).expect("event");
        assert_eq!(kind, "MODIFIED");
        assert_eq!(
            &line[object.0..object.1],
            br#"{"metadata":{"name":"a"},"data":{"k":"v"}}"#
        );
        assert!(watch_event(br#"{"type":"ADDED"}"#).is_none());
        assert!(watch_event(br#"{"type":"ADDED","object":{"#).is_none());
        assert!(watch_event(b"not json").is_none());
    }
}
