//! etcd as a follower's [`Backend`]: the resource's prefix listed page by page at one
//! revision, then watched from the next with `prev_kv` and progress notifications. The
//! state machine (load, follow, resume, relist, readiness, backoff, counters) is
//! `listwatch_sources::follower`'s, shared with the apiserver source.
//!
//! What makes the cache unsafe here (a relist follows): the watch's revision compacted, an
//! update or delete without `prev_kv`, a delete of an object the cache never held, an event
//! at or below the cache's RV, etcd's revision going backwards.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, EventType, GetOptions, WatchOptions, WatchResponse};
use listwatch_core::ResourceInfo;
use listwatch_sources::follower::{Backend, Ended, Follower, FollowerSet};
use listwatch_store::{Change, Record, Store, StoreError};
use tracing::{debug, info, warn};

use crate::EtcdError;
use crate::client::CurrentClient;
use crate::config::{EtcdConfig, ProgressOrder};
use crate::decode::ValueDecoder;
use crate::layout::{prefix_end, store_key};

/// A watched key-value, independent of the client library (so the checks are testable).
#[derive(Clone, Debug)]
pub struct WatchedKv {
    /// etcd key.
    pub key: Vec<u8>,
    /// Value (the object's JSON).
    pub value: Vec<u8>,
    /// Revision that created the key.
    pub create_revision: i64,
    /// Revision of this version.
    pub mod_revision: i64,
}

/// A watch event: put or delete, with the previous version when etcd sent it.
#[derive(Clone, Debug)]
pub struct WatchedEvent {
    /// `true` for a delete.
    pub delete: bool,
    /// The key-value (for a delete: key and the delete's revision).
    pub kv: WatchedKv,
    /// The version before this event (`prev_kv`).
    pub prev: Option<WatchedKv>,
}

/// Why the cache can no longer be trusted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct Unsafe(pub String);

/// Starts a follower of `store`, one of `set`'s, with etcd as its backend.
pub(crate) fn follow(
    store: Arc<Store>,
    set: &Arc<FollowerSet>,
    clients: &Arc<CurrentClient>,
    config: &Arc<EtcdConfig>,
) -> (Arc<Follower>, tokio::task::JoinHandle<()>) {
    let follower = Follower::new(store, set.clone());
    let backend = EtcdBackend {
        clients: clients.clone(),
        config: config.clone(),
    };
    let task = tokio::spawn(follower.clone().run(backend, None));
    (follower, task)
}

/// etcd behind one resource's follower.
struct EtcdBackend {
    /// The client in use, taken anew for each list and watch: one renewed with new TLS
    /// files is used from the next list or resumed watch on.
    clients: Arc<CurrentClient>,
    config: Arc<EtcdConfig>,
}

impl Backend for EtcdBackend {
    const NAME: &'static str = "etcd";

    async fn list(&mut self, follower: &Follower) -> Result<u64, Ended> {
        let rev = list(follower, &self.clients.get(), &self.config)
            .await
            .map_err(|e| Ended::Disconnected(e.to_string()))?;
        Ok(u64::try_from(rev).unwrap_or(0))
    }

    async fn watch(&mut self, follower: &Follower, from: u64, last: &mut u64) -> Ended {
        let mut rev = i64::try_from(from).unwrap_or(i64::MAX);
        let ended = watch(follower, &self.clients.get(), &self.config, &mut rev).await;
        *last = (*last).max(u64::try_from(rev).unwrap_or(0));
        ended
    }
}

/// Reads the whole prefix at one revision, page by page, and replaces the store with it.
async fn list(follower: &Follower, client: &Client, config: &EtcdConfig) -> Result<i64, EtcdError> {
    let store = follower.store();
    let info = store.info().clone();
    let relist = follower.relisting();
    let prefix = info.etcd_prefix.as_bytes().to_vec();
    let end = prefix_end(&prefix);
    // A 10,000-key page of real objects is tens of MB: lift gRPC's 4 MiB default, as
    // kube-apiserver does for its etcd client.
    let kv = client.kv_client().max_decoding_message_size(MAX_MESSAGE);
    let mut from = prefix.clone();
    let mut revision = 0;
    let mut records = Vec::new();
    let mut skipped = 0;
    loop {
        let mut opts = GetOptions::new()
            .with_range(end.clone())
            .with_limit(config.page_size);
        if revision > 0 {
            opts = opts.with_revision(revision);
        }
        let resp = call(config.request_timeout, || {
            let mut kv = kv.clone();
            let (from, opts) = (from.clone(), opts.clone());
            async move { kv.get(from, Some(opts)).await }
        })
        .await?;
        if revision == 0 {
            revision = resp.header().ok_or(EtcdError::NoHeader)?.revision();
        }
        for kv in resp.kvs() {
            match ingest(
                &info,
                &config.decoder,
                kv.key(),
                kv.value(),
                kv.mod_revision(),
            ) {
                Some(r) => records.push(r),
                None => skipped += 1,
            }
        }
        match (resp.more(), resp.kvs().last()) {
            (true, Some(last)) => {
                from = last.key().to_vec();
                from.push(0);
            }
            _ => break,
        }
    }
    let n = records.len();
    let rv = u64::try_from(revision).unwrap_or(0);
    store.replace(rv, records);
    follower.count_skipped(skipped);
    info!(resource = %info.resource, objects = n, skipped, revision, relist, "listed from etcd");
    Ok(revision)
}

/// Watches from `*last + 1` until the watch ends; `*last` advances with every applied
/// event and every ordered progress notification.
async fn watch(follower: &Follower, client: &Client, config: &EtcdConfig, last: &mut i64) -> Ended {
    let info = follower.store().info().clone();
    let opts = WatchOptions::new()
        .with_prefix()
        .with_prev_key()
        .with_progress_notify()
        .with_start_revision(*last + 1);
    let stream = match call(config.request_timeout, || {
        let mut w = client.watch_client().max_decoding_message_size(MAX_MESSAGE);
        let (prefix, opts) = (info.etcd_prefix.clone(), opts.clone());
        async move { w.watch(prefix, Some(opts)).await }
    })
    .await
    {
        Ok(s) => s,
        Err(e) => return Ended::Disconnected(e.to_string()),
    };
    let (mut requests, mut responses) = stream.split();
    let mut tick = tokio::time::interval(config.progress_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut state = Watch {
        follower,
        id: None,
        header_rev: *last,
        order: config.progress_order,
        decoder: &config.decoder,
    };
    loop {
        tokio::select! {
            _ = follower.progress_requested() => {
                if let Err(e) = requests.request_progress().await {
                    return Ended::Disconnected(e.to_string());
                }
            }
            _ = tick.tick() => {
                if let Err(e) = requests.request_progress().await {
                    return Ended::Disconnected(e.to_string());
                }
            }
            msg = responses.message() => {
                let resp = match msg {
                    Ok(Some(r)) => r,
                    Ok(None) => return Ended::Disconnected("watch stream closed".into()),
                    Err(e) => return Ended::Disconnected(e.to_string()),
                };
                if let Err(end) = state.on_response(&resp, last) {
                    return end;
                }
            }
        }
    }
}

/// One open watch's bookkeeping.
struct Watch<'a> {
    follower: &'a Follower,
    /// Our watch's id, once etcd confirmed it.
    id: Option<i64>,
    /// Highest header revision seen: etcd's revision never goes backwards on one stream.
    header_rev: i64,
    order: ProgressOrder,
    decoder: &'a ValueDecoder,
}

impl Watch<'_> {
    /// Handles one watch response; `Err` ends the watch.
    fn on_response(&mut self, resp: &WatchResponse, last: &mut i64) -> Result<(), Ended> {
        let store = self.follower.store();
        if resp.created() {
            self.id = Some(resp.watch_id());
        }
        if resp.canceled() {
            if resp.compact_revision() > 0 {
                return Err(Ended::Relist(format!(
                    "watch from revision {} compacted (compact revision {})",
                    *last + 1,
                    resp.compact_revision()
                )));
            }
            return Err(Ended::Disconnected(format!(
                "watch canceled: {}",
                resp.cancel_reason()
            )));
        }
        let rev = resp.header().map_or(0, |h| h.revision());
        // Responses on our watch id are ordered; a requested progress response (another id
        // in etcd < 3.4.24 / 3.5.8) may overtake them (etcd#15220), so it is not compared.
        let own = Some(resp.watch_id()) == self.id;
        if rev > 0 && (own || !resp.events().is_empty()) {
            if rev < self.header_rev {
                return Err(Ended::Relist(format!(
                    "etcd revision went backwards ({rev} after {})",
                    self.header_rev
                )));
            }
            self.header_rev = rev;
        }
        if resp.events().is_empty() {
            if rev > 0 && !resp.created() {
                // A notification on our own watch id (etcd's periodic one) is sent through
                // the watch, after every event it covers, and only once the watch has caught
                // up: it is always safe. A requested one (watch id -1) is safe only where
                // etcd sends it the same way (see `ProgressOrder`).
                if own || self.order == ProgressOrder::Ordered {
                    store.progress(u64::try_from(rev).unwrap_or(0));
                    debug!(resource = %store.info().resource, rev, own, "progress");
                }
                if own {
                    *last = (*last).max(rev);
                }
            }
            return Ok(());
        }
        let events: Vec<WatchedEvent> = resp
            .events()
            .iter()
            .filter_map(|e| {
                let kv = e.kv()?;
                Some(WatchedEvent {
                    delete: e.event_type() == EventType::Delete,
                    kv: watched(kv),
                    prev: e.prev_kv().map(watched),
                })
            })
            .collect();
        let newest = events.iter().map(|e| e.kv.mod_revision).max().unwrap_or(0);
        let skipped = apply_events(store, self.decoder, &events).map_err(|u| Ended::Relist(u.0))?;
        self.follower.count_skipped(skipped);
        *last = (*last).max(newest);
        Ok(())
    }
}

fn watched(kv: &etcd_client::KeyValue) -> WatchedKv {
    WatchedKv {
        key: kv.key().to_vec(),
        value: kv.value().to_vec(),
        create_revision: kv.create_revision(),
        mod_revision: kv.mod_revision(),
    }
}

/// Largest gRPC message accepted from etcd (a list page, a catch-up watch response);
/// kube-apiserver's etcd client allows up to 2 GiB.
pub const MAX_MESSAGE: usize = i32::MAX as usize;

/// Ingests one stored value (JSON, protobuf, or either encrypted), or logs and skips it
/// when it cannot be read as an object of this resource.
fn ingest(
    info: &ResourceInfo,
    decoder: &ValueDecoder,
    key: &[u8],
    value: &[u8],
    mod_revision: i64,
) -> Option<Record> {
    let Some(_) = store_key(info, key) else {
        warn!(resource = %info.resource, key = %String::from_utf8_lossy(key), "key outside the resource's layout; skipped");
        decoder.count_skip(&info.resource, "layout");
        return None;
    };
    let json = match decoder.decode(key, value) {
        Ok(j) => j,
        Err(e) => {
            warn!(resource = %info.resource, key = %String::from_utf8_lossy(key), reason = e.reason(), error = %e, "value cannot be read; skipped");
            decoder.count_skip(&info.resource, e.reason());
            return None;
        }
    };
    let converted = crate::convert::on_read(&info.group, &info.resource, &json);
    let json = converted.as_deref().unwrap_or(&json);
    let defaulted = decoder
        .crd_defaulted(&info.group, &info.resource, json)
        .or_else(|| crate::convert::builtin_defaults_on_read(&info.group, &info.resource, json));
    let json = defaulted.as_deref().unwrap_or(json);
    let rv = u64::try_from(mod_revision).unwrap_or(0);
    match Record::ingest(json, info, rv) {
        Ok(r) => Some(r),
        Err(e) => {
            warn!(resource = %info.resource, key = %String::from_utf8_lossy(key), error = %e, "value is not an object of this resource; skipped");
            decoder.count_skip(&info.resource, "invalid");
            None
        }
    }
}

/// Applies one watch response's events to `store` as one batch. Returns how many values
/// were skipped (not JSON), or why the cache can no longer be trusted: a change to an
/// existing key without `prev_kv` (etcd could not say what it replaced, k8s#123072), a
/// delete of a key the cache does not hold, or an event not after the store's RV.
pub fn apply_events(
    store: &Store,
    decoder: &ValueDecoder,
    events: &[WatchedEvent],
) -> Result<u64, Unsafe> {
    let info = store.info().clone();
    let current = store.current();
    let mut changes = Vec::with_capacity(events.len());
    let mut put_in_batch: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut skipped = 0;
    for e in events {
        let created = !e.delete && e.kv.create_revision == e.kv.mod_revision;
        if !created && e.prev.is_none() {
            return Err(Unsafe(format!(
                "{} event for {} at revision {} without prev_kv",
                if e.delete { "delete" } else { "update" },
                String::from_utf8_lossy(&e.kv.key),
                e.kv.mod_revision
            )));
        }
        let Some(key) = store_key(&info, &e.kv.key) else {
            skipped += 1;
            continue;
        };
        let rv = u64::try_from(e.kv.mod_revision).unwrap_or(0);
        // Held by the cache or put earlier in this batch (a catch-up response can carry
        // thousands of events, so no scan over the batch per event).
        let held = current.get(key).is_some() || put_in_batch.contains(key);
        if e.delete {
            if held {
                changes.push(Change::Delete {
                    key: key.to_string(),
                    rv,
                });
            } else if e
                .prev
                .as_ref()
                .is_some_and(|p| ingest(&info, decoder, &p.key, &p.value, p.mod_revision).is_some())
            {
                // etcd says a readable object existed and we never saw it.
                return Err(Unsafe(format!(
                    "delete of {key} at revision {rv}, which the cache does not hold"
                )));
            } else {
                // A value we skipped (not JSON) went away: nothing to do.
                skipped += 1;
            }
            continue;
        }
        match ingest(&info, decoder, &e.kv.key, &e.kv.value, e.kv.mod_revision) {
            Some(r) => {
                put_in_batch.insert(key);
                changes.push(Change::Put(r));
            }
            None => {
                skipped += 1;
                // Never keep serving the version this unreadable value replaced.
                if held {
                    changes.push(Change::Delete {
                        key: key.to_string(),
                        rv,
                    });
                }
            }
        }
    }
    match store.apply(changes) {
        Ok(()) => Ok(skipped),
        Err(e @ (StoreError::Backwards { .. } | StoreError::UnknownDelete(_))) => {
            Err(Unsafe(e.to_string()))
        }
        Err(e) => Err(Unsafe(format!("event not applicable: {e}"))),
    }
}

/// Runs one etcd call with a time limit, retrying while the connection to the chosen
/// member cannot even be opened (a killed member in a cluster: the request never reached
/// etcd, so repeating it is safe even for a write).
pub(crate) async fn call<T, Fut>(
    limit: Duration,
    mut f: impl FnMut() -> Fut,
) -> Result<T, EtcdError>
where
    Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    // Out of time after undeliverable attempts, the cause is what they failed with
    // ("connection refused", a certificate refused), not a timeout.
    let mut undelivered: Option<etcd_client::Error> = None;
    loop {
        match tokio::time::timeout_at(deadline, f()).await {
            Err(_) => return Err(undelivered.map_or(EtcdError::Timeout(limit), EtcdError::from)),
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) if never_sent(&e) && tokio::time::Instant::now() < deadline => {
                debug!(error = %e, "etcd member unreachable; retrying");
                undelivered = Some(e);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(Err(e)) => return Err(e.into()),
        }
    }
}

/// Whether `e` says the request could not be delivered at all (connection refused).
fn never_sent(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::TransportError(_) => true,
        etcd_client::Error::GRpcStatus(s) => {
            s.code() == tonic::Code::Unavailable && s.message().contains("connect")
        }
        _ => false,
    }
}
