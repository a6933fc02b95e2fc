//! `--source apiserver`: listwatch's stores kept equal to an upstream kube-apiserver.
//! Discovery decides what is served; one follower per resource loads it by watch-list (or
//! paged LIST + WATCH) and follows its events; consistent reads learn the upstream's RV
//! and, for a resource whose stream has nothing newer, prove the cache current by a
//! watch's bookmark or a metadata LIST.

mod bookmark;
mod client;
mod discovery;
mod follower;
mod metadata;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use listwatch_core::ApiError;
use listwatch_kubeclient::ClientConfig;
use listwatch_sources::{BoxFuture, Registry, Source};
use listwatch_store::{Store, StoreConfig};
use tracing::{debug, info, warn};

use crate::client::{ListPage, Upstream, parse_rv};
use crate::discovery::collection_path;

/// Why the apiserver source failed.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// Bad URL or TLS material.
    #[error("upstream configuration: {0}")]
    Config(String),
    /// Connecting or reading failed, or no answer in time.
    #[error("upstream unreachable: {0}")]
    Http(String),
    /// The upstream answered with a non-success code.
    #[error("upstream answered {0}: {1}")]
    Status(u16, String),
    /// An answer that is not what the API promises.
    #[error("upstream answer not understood: {0}")]
    Json(String),
}

impl From<UpstreamError> for ApiError {
    fn from(e: UpstreamError) -> Self {
        ApiError::Unavailable(e.to_string())
    }
}

/// How long a consistent read waits for the stream to deliver the upstream's RV before
/// proving the cache current by a LIST (a write acknowledged a moment ago is usually
/// delivered within it; an idle resource never is).
pub const STREAM_GRACE: Duration = Duration::from_millis(200);

/// How often the upstream's discovery is read again for resources that came or went
/// (sooner after a CRD or APIService changes: see [`UpstreamSource::rediscover_loop`]).
pub const REDISCOVER: Duration = Duration::from_secs(60);

/// After a CRD or APIService changes, how long to let the upstream's discovery catch up
/// before reading it (kube-apiserver publishes a new CRD's resource once it is established).
const SETTLE: Duration = Duration::from_secs(1);

/// A resource by (group, version, resource).
type Key = (String, String, String);

/// Rounds of "LIST, compare, wait for the stream" before a consistent read gives up
/// proving and leaves the wait to the handler (which then fails rather than serve stale).
const PROOF_ROUNDS: usize = 3;

/// Per resource: the coalescing of consistent-read probes.
#[derive(Default)]
struct Probe {
    /// Probes started so far.
    started: AtomicU64,
    /// The newest finished probe: its number and the RV it established.
    done: tokio::sync::Mutex<(u64, u64)>,
}

/// Counters of the consistent-read path.
#[derive(Default, Debug)]
pub struct ConsistentStats {
    /// `LIST limit=1` probes of the upstream's RV.
    pub probes: AtomicU64,
    /// Reads that shared another read's probe.
    pub coalesced: AtomicU64,
    /// Probes the stream answered within [`STREAM_GRACE`].
    pub by_stream: AtomicU64,
    /// Metadata-only LISTs made to prove an idle resource's cache current.
    pub proof_lists: AtomicU64,
    /// Short watches opened to prove a large idle resource unchanged by a bookmark.
    pub proof_watches: AtomicU64,
    /// Probes such a bookmark settled.
    pub by_bookmark: AtomicU64,
    /// Bytes the proof LISTs and proof watches read from the upstream.
    pub proof_bytes: AtomicU64,
}

/// The apiserver source.
pub struct UpstreamSource {
    registry: Registry,
    up: Arc<Upstream>,
    stores: StoreConfig,
    probes: parking_lot::Mutex<HashMap<String, Arc<Probe>>>,
    /// Each followed resource's follower.
    followers: parking_lot::Mutex<HashMap<Key, tokio::task::JoinHandle<()>>>,
    /// The loop that follows the upstream's discovery.
    rediscovery: parking_lot::Mutex<Option<tokio::task::JoinHandle<()>>>,
    stats: ConsistentStats,
    /// How often each followed resource's stream was resumed or relisted.
    counts: follower::FollowerCounts,
}

fn key_of(info: &listwatch_core::ResourceInfo) -> Key {
    (
        info.group.clone(),
        info.version.clone(),
        info.resource.clone(),
    )
}

impl UpstreamSource {
    /// Discovers what the upstream `config` names serves, makes a store per followable
    /// resource and starts its follower. Stores are unready until their first sync.
    pub async fn start(
        config: &ClientConfig,
        stores: &StoreConfig,
    ) -> Result<Arc<Self>, UpstreamError> {
        let up = Arc::new(Upstream::new(config)?);
        let found = discovery::discover(&up).await?;
        let registry = Registry::new(found.resources, 1, stores);
        let mut followers = HashMap::new();
        let counts = follower::FollowerCounts::default();
        for store in registry.stores() {
            store.set_ready(false);
            let key = key_of(store.info());
            followers.insert(
                key,
                tokio::spawn(follower::run(store, up.clone(), counts.clone(), None)),
            );
        }
        let source = Arc::new(UpstreamSource {
            registry,
            up,
            stores: stores.clone(),
            probes: parking_lot::Mutex::default(),
            followers: parking_lot::Mutex::new(followers),
            rediscovery: parking_lot::Mutex::default(),
            stats: ConsistentStats::default(),
            counts,
        });
        let watcher = tokio::spawn(Self::rediscover_loop(Arc::downgrade(&source)));
        *source.rediscovery.lock() = Some(watcher);
        Ok(source)
    }

    /// Reads the upstream's discovery again every [`REDISCOVER`], and [`SETTLE`] after the
    /// followed CRDs or APIServices change, so that resources that come (a new CRD, an
    /// aggregated API coming up) are followed and those that go are retired.
    async fn rediscover_loop(source: std::sync::Weak<UpstreamSource>) {
        let mut seen = None;
        loop {
            let Some(triggers) = source.upgrade().map(|s| s.discovery_triggers()) else {
                return;
            };
            let fingerprint = |t: &[Arc<Store>]| -> Vec<(usize, u64)> {
                t.iter()
                    .map(|s| {
                        let snap = s.current();
                        let newest = snap.items().values().map(|r| r.rv()).max().unwrap_or(0);
                        (snap.len(), newest)
                    })
                    .collect()
            };
            let before = fingerprint(&triggers);
            if seen.is_none() {
                seen = Some(before.clone());
            }
            let deadline = tokio::time::Instant::now() + REDISCOVER;
            // Wakes on any progress of a trigger store; goes back to sleep unless its
            // objects changed (bookmarks move the clock too).
            loop {
                let woke = tokio::time::timeout_at(deadline, any_progress(&triggers)).await;
                if woke.is_err() || seen.as_ref() != Some(&fingerprint(&triggers)) {
                    break;
                }
            }
            if seen.as_ref() != Some(&fingerprint(&triggers)) {
                tokio::time::sleep(SETTLE).await;
            }
            seen = Some(fingerprint(&triggers));
            let Some(s) = source.upgrade() else { return };
            if let Err(e) = s.rediscover().await {
                warn!(error = %e, "rediscovery failed; what is followed stays as it is");
            }
        }
    }

    /// The followed stores whose changes change what the upstream serves (at most two).
    fn discovery_triggers(&self) -> Vec<Arc<Store>> {
        [
            ("apiextensions.k8s.io", "v1", "customresourcedefinitions"),
            ("apiregistration.k8s.io", "v1", "apiservices"),
        ]
        .iter()
        .filter_map(|(g, v, r)| self.registry.get(g, v, r))
        .collect()
    }

    /// One discovery pass: a resource no longer served is retired (404 here, so a front
    /// passes its reads on; its watches drained) and its follower stopped; a new one gets a
    /// store that is served once its follower has synced it (until then a front passes
    /// its reads to the upstream, so nothing is served half-loaded).
    pub async fn rediscover(&self) -> Result<(), UpstreamError> {
        let found = discovery::discover(&self.up).await?;
        let mut wanted: HashMap<Key, listwatch_core::ResourceInfo> = found
            .resources
            .into_iter()
            .map(|i| (key_of(&i), i))
            .collect();
        let mut followers = self.followers.lock();
        followers.retain(|key, task| {
            let kept = wanted.contains_key(key)
                || found
                    .unanswered
                    .iter()
                    .any(|(g, v)| *g == key.0 && *v == key.1);
            if !kept {
                task.abort();
                listwatch_sources::crd::retire(&self.registry, key);
            }
            kept
        });
        wanted.retain(|k, _| !followers.contains_key(k));
        for (key, info) in wanted {
            let store = Store::new(
                Arc::new(info),
                1,
                Vec::<listwatch_store::Record>::new(),
                self.stores.clone(),
            );
            store.set_ready(false);
            let (synced, first_sync) = tokio::sync::oneshot::channel();
            let registry = self.registry.clone();
            let follow = follower::run(
                store.clone(),
                self.up.clone(),
                self.counts.clone(),
                Some(synced),
            );
            info!(group = %key.0, version = %key.1, resource = %key.2, "new upstream resource; following it");
            let task = tokio::spawn(async move {
                tokio::pin!(follow);
                tokio::select! {
                    _ = &mut follow => {}
                    Ok(()) = first_sync => {
                        let i = store.info();
                        if registry.insert(store.clone()) {
                            info!(group = %i.group, version = %i.version, resource = %i.resource, "new upstream resource synced; served here");
                        }
                        follow.await;
                    }
                }
            });
            followers.insert(key, task);
        }
        Ok(())
    }

    /// The consistent-read counters.
    pub fn stats(&self) -> &ConsistentStats {
        &self.stats
    }

    /// The RV a consistent read of `store` may be served at, established once for every
    /// read that arrived before the probe started (a burst costs at most two probes).
    async fn consistent(&self, store: &Store) -> Result<u64, UpstreamError> {
        let path = collection_path(store.info());
        let probe = self.probes.lock().entry(path.clone()).or_default().clone();
        let arrived = probe.started.load(Ordering::SeqCst);
        let mut done = probe.done.lock().await;
        if done.0 > arrived {
            self.stats.coalesced.fetch_add(1, Ordering::Relaxed);
            return Ok(done.1);
        }
        let n = probe.started.fetch_add(1, Ordering::SeqCst) + 1;
        let rv = self.establish(store, &path).await?;
        *done = (n, rv);
        Ok(rv)
    }

    /// Learns the upstream's current RV `r` (`LIST limit=1`, RV unset: a quorum read) and
    /// makes the store reach it: by the stream within [`STREAM_GRACE`], or, for a resource
    /// with nothing newer to deliver, by proving the cache current. A collection over one
    /// page is proven by a short watch from the cache's RV whose bookmark, at or past `r`
    /// with no event before it, shows nothing changed (`bookmark.rs`). Otherwise, or when no
    /// bookmark proves it, by a LIST of the collection's metadata alone
    /// (`PartialObjectMetadataList`, protobuf where offered) at `a ≥ r` whose every item is
    /// in the cache at the same RV, with the same count: the upstream's collection at `a` is
    /// the cache's. Either way the store is advanced only if it has not moved meanwhile. (An
    /// object created and deleted in between leaves no trace in the LIST; its events,
    /// arriving later at or below the store's RV, make the follower relist.)
    async fn establish(&self, store: &Store, path: &str) -> Result<u64, UpstreamError> {
        self.stats.probes.fetch_add(1, Ordering::Relaxed);
        let page: ListPage = self.up.get_json(&format!("{path}?limit=1")).await?;
        let target = parse_rv(&page.metadata.resource_version)?;
        if store.wait_for(target, STREAM_GRACE).await.is_ok() {
            self.stats.by_stream.fetch_add(1, Ordering::Relaxed);
            return Ok(target);
        }
        let info = store.info();
        // A bookmark proves a large collection unchanged for a few hundred bytes; it takes a
        // second or two, so a small one (one page of metadata) is compared item by item.
        let mut by_watch = store.current().len() > follower::PAGE;
        for _ in 0..PROOF_ROUNDS {
            if !store.is_ready() || store.rv() >= target {
                break;
            }
            if by_watch {
                let from = store.rv();
                let mut bytes = 0;
                self.stats.proof_watches.fetch_add(1, Ordering::Relaxed);
                let shown = bookmark::prove(&self.up, path, from, target, &mut bytes).await;
                self.stats
                    .proof_bytes
                    .fetch_add(bytes as u64, Ordering::Relaxed);
                match shown {
                    bookmark::Shown::Unchanged(at) => {
                        // Only if the stream applied nothing since `from`.
                        if store.progress_from(from, at) {
                            self.stats.by_bookmark.fetch_add(1, Ordering::Relaxed);
                            return Ok(target);
                        }
                        continue;
                    }
                    bookmark::Shown::Changed(at) => {
                        // The stream has that event to deliver: wait for it, prove again.
                        let _ = store.wait_for(at.min(target), Duration::from_secs(1)).await;
                        continue;
                    }
                    bookmark::Shown::Unknown(why) => {
                        debug!(resource = %path, %why, "no bookmark proof: comparing metadata");
                        by_watch = false;
                    }
                }
            }
            let snap = store.current();
            self.stats.proof_lists.fetch_add(1, Ordering::Relaxed);
            let (at, items, bytes) = metadata::list_all(&self.up, path, follower::PAGE).await?;
            self.stats
                .proof_bytes
                .fetch_add(bytes as u64, Ordering::Relaxed);
            let mut same = items.len() == snap.len();
            let mut newest = 0;
            for o in &items {
                let rv = parse_rv(&o.resource_version)?;
                newest = newest.max(rv);
                same &= snap
                    .get(&info.key(&o.namespace, &o.name))
                    .is_some_and(|r| r.rv() == rv);
            }
            // Only if nothing was applied or replaced since the snapshot compared.
            if same && store.progress_from(snap.rv(), at) {
                return Ok(target);
            }
            // The stream has yet to deliver what the LIST shows: wait for it, prove again.
            let _ = store
                .wait_for(newest.max(snap.rv() + 1).min(at), Duration::from_secs(1))
                .await;
        }
        // Not proven: the handler waits for `target` and fails rather than serve stale.
        Ok(target)
    }
}

/// Returns once any of `stores` moves past its RV now (for at most [`REDISCOVER`]).
async fn any_progress(stores: &[Arc<Store>]) {
    let next = |s: &Arc<Store>| s.rv() + 1;
    match stores {
        [] => std::future::pending().await,
        [a] => {
            let _ = a.wait_for(next(a), REDISCOVER).await;
        }
        [a, b, ..] => {
            tokio::select! {
                _ = a.wait_for(next(a), REDISCOVER) => {}
                _ = b.wait_for(next(b), REDISCOVER) => {}
            }
        }
    }
}

impl Source for UpstreamSource {
    fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Consistent reads' upstream probes and proof LISTs; per followed resource, streams
    /// resumed and relists.
    fn metrics_text(&self) -> String {
        use prometheus_client::metrics::counter::ConstCounter;
        let mut r = prometheus_client::registry::Registry::default();
        let s = &self.stats;
        for (name, help, count) in [
            (
                "listwatch_upstream_consistent_probes",
                "Consistent reads that asked the upstream for its resourceVersion (LIST limit=1)",
                &s.probes,
            ),
            (
                "listwatch_upstream_consistent_coalesced",
                "Consistent reads that shared another read's probe",
                &s.coalesced,
            ),
            (
                "listwatch_upstream_consistent_by_stream",
                "Probes the followed stream caught up with within the grace period",
                &s.by_stream,
            ),
            (
                "listwatch_upstream_proof_lists",
                "Metadata-only LISTs made to prove an idle resource's cache current",
                &s.proof_lists,
            ),
            (
                "listwatch_upstream_proof_watches",
                "Short watches opened to prove a large idle resource unchanged by a bookmark",
                &s.proof_watches,
            ),
            (
                "listwatch_upstream_consistent_by_bookmark",
                "Probes a proof watch's bookmark settled",
                &s.by_bookmark,
            ),
            (
                "listwatch_upstream_proof_bytes",
                "Bytes the proof LISTs and proof watches read from the upstream",
                &s.proof_bytes,
            ),
        ] {
            r.register(name, help, ConstCounter::new(count.load(Ordering::Relaxed)));
        }
        self.counts.register(&mut r);
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode_registry(&mut text, &r);
        text
    }

    fn consistent_revision<'a>(&'a self, store: &'a Store) -> BoxFuture<'a, Result<u64, ApiError>> {
        Box::pin(async move { Ok(self.consistent(store).await?) })
    }

    fn health_check_name(&self) -> &'static str {
        "upstream"
    }

    fn refuse_write(&self) -> ApiError {
        ApiError::MethodNotAllowed
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        let mut tasks: Vec<_> = self.followers.lock().drain().map(|(_, t)| t).collect();
        tasks.extend(self.rediscovery.lock().take());
        Box::pin(async move {
            for t in tasks {
                t.abort();
                let _ = t.await;
            }
        })
    }
}
