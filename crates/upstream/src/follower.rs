//! The upstream kube-apiserver as a follower's [`Backend`]: the collection loaded by
//! watch-list (or paged LIST where refused), then followed by a watch from the last RV. The
//! state machine (load, follow, resume, relist, readiness, backoff, counters) is
//! `listwatch_sources::follower`'s, shared with the etcd source.
//!
//! What makes the cache unsafe here (a relist follows): 410 Gone (the answer or an `ERROR`
//! event), an event the cache cannot take (at or below its RV and not a repeat, an object
//! that cannot be read).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use listwatch_core::scan::{self, Span};
use listwatch_sources::follower::{Backend, Ended, Follower, FollowerSet, Synced};
use listwatch_store::{Change, Record, Store};
use serde::Deserialize;
use tracing::{debug, info};

use crate::UpstreamError;
use crate::client::{Lines, Upstream, parse_rv, unsupported};
use crate::discovery::collection_path;
use listwatch_kubeclient::percent_encode;

/// Items per LIST page (kube's reflector pages by 500).
pub(crate) const PAGE: usize = 500;
/// A watch silent this long is taken as dead and resumed.
const IDLE: Duration = Duration::from_secs(300);

/// What the upstream's followers share (backoff, `/metrics` counters), held by [`Upstream`].
pub(crate) type FollowerCounts = Arc<FollowerSet>;

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
pub(crate) fn watch_event(line: &[u8]) -> Option<(&str, Span)> {
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

/// An event's object as far as its metadata and a Status's code.
#[derive(Deserialize)]
pub(crate) struct Object {
    #[serde(default)]
    pub(crate) metadata: Meta,
    #[serde(default)]
    code: u16,
}

/// An object's name, namespace and resourceVersion.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Meta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    pub(crate) resource_version: String,
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

/// Follows `store`'s resource on `up` forever, counted in `counts`; `synced` is told after
/// the first sync.
pub(crate) async fn run(
    store: Arc<Store>,
    up: Arc<Upstream>,
    counts: FollowerCounts,
    synced: Synced,
) {
    let follower = Follower::new(store, counts);
    let backend = ApiserverBackend { up, open: None };
    follower.run(backend, synced).await;
}

/// The upstream behind one resource's follower.
struct ApiserverBackend {
    up: Arc<Upstream>,
    /// A watch-list past its initial events, and the RV it was listed at: the watch that
    /// follows that list.
    open: Option<(u64, Lines)>,
}

impl Backend for ApiserverBackend {
    const NAME: &'static str = "upstream";

    /// Loads the collection by watch-list (its stream then kept for [`Self::watch`]), or by
    /// paged LIST where the upstream refuses watch-list.
    async fn list(&mut self, follower: &Follower) -> Result<u64, Ended> {
        self.open = None;
        let store = follower.store();
        let info = store.info().clone();
        let path = collection_path(&info);
        let q = format!(
            "{path}?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"
        );
        let resp = self.up.get(&q).await?;
        if resp.status().is_success() {
            let mut lines = Lines::new(resp);
            let mut initial = Vec::new();
            loop {
                let line = match lines.next(IDLE).await {
                    Ok(Some(l)) => l,
                    Ok(None) => {
                        return Err(Ended::Disconnected(
                            "watch-list ended before its initial events".into(),
                        ));
                    }
                    Err(e) => return Err(Ended::Disconnected(e)),
                };
                let Some((kind, object)) = watch_event(&line) else {
                    return Err(Ended::Disconnected("bad watch event".into()));
                };
                let json = &line[object.0..object.1];
                match kind {
                    // Copied out (as before): a slice would keep the read buffer it shares
                    // with neighbouring lines alive, slack included, until the install.
                    "ADDED" => initial.push(Bytes::copy_from_slice(json)),
                    "BOOKMARK"
                        if memchr::memmem::find(json, b"\"k8s.io/initial-events-end\"")
                            .is_some() =>
                    {
                        let (_, rv) = key_and_rv(store, json)
                            .map_err(|e| Ended::Disconnected(e.to_string()))?;
                        install(store, rv, initial.iter().map(|o| &o[..]))
                            .map_err(|e| Ended::Relist(e.to_string()))?;
                        info!(resource = %info.resource, objects = initial.len(), rv, "synced from the upstream (watch-list)");
                        self.open = Some((rv, lines));
                        return Ok(rv);
                    }
                    "BOOKMARK" => {}
                    "ERROR" => return Err(error_event(json)),
                    other => {
                        return Err(Ended::Relist(format!(
                            "{other} event among a watch-list's initial events"
                        )));
                    }
                }
            }
        }
        if !unsupported(resp.status()) {
            return Err(UpstreamError::Status(resp.status().as_u16(), "watch-list".into()).into());
        }
        debug!(resource = %info.resource, status = %resp.status(), "watch-list refused; LIST + WATCH");
        let (rv, items) = self.up.list_all(&path, PAGE).await?;
        install(store, rv, items.iter().map(|o| o.get().as_bytes()))
            .map_err(|e| Ended::Relist(e.to_string()))?;
        info!(resource = %info.resource, objects = items.len(), rv, "synced from the upstream (LIST)");
        Ok(rv)
    }

    /// Follows the watch-list just made, or watches from `from`.
    async fn watch(&mut self, follower: &Follower, from: u64, last: &mut u64) -> Ended {
        let store = follower.store();
        if let Some((rv, lines)) = self.open.take()
            && rv == from
        {
            return stream(store, lines, last).await;
        }
        let path = collection_path(store.info());
        let q = format!(
            "{path}?watch=1&allowWatchBookmarks=true&resourceVersion={}",
            percent_encode(&from.to_string())
        );
        let resp = match self.up.get(&q).await {
            Ok(r) => r,
            Err(e) => return e.into(),
        };
        if !resp.status().is_success() {
            let code = resp.status().as_u16();
            return UpstreamError::Status(code, "watch".into()).into();
        }
        stream(store, Lines::new(resp), last).await
    }
}

/// Applies a watch's live events to the store; `*last` follows the newest RV seen.
async fn stream(store: &Store, mut lines: Lines, last: &mut u64) -> Ended {
    loop {
        let line: Bytes = match lines.next(IDLE).await {
            Ok(Some(l)) => l,
            Ok(None) => return Ended::Closed,
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
