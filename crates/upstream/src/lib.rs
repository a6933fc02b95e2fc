//! `--source apiserver`: listwatch's stores kept equal to an upstream kube-apiserver.
//! Discovery decides what is served; one follower per resource loads it by watch-list (or
//! paged LIST + WATCH) and follows its events; consistent reads learn the upstream's RV
//! and, for a resource whose stream has nothing newer, prove the cache current by a LIST.

mod client;
mod discovery;
mod follower;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use listwatch_core::ApiError;
use listwatch_gateway::GatewayConfig;
use listwatch_sources::{BoxFuture, Registry, Source};
use listwatch_store::{Store, StoreConfig};

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
    /// Full LISTs made to prove an idle resource's cache current.
    pub proof_lists: AtomicU64,
}

/// The apiserver source.
pub struct UpstreamSource {
    registry: Registry,
    up: Arc<Upstream>,
    probes: parking_lot::Mutex<HashMap<String, Arc<Probe>>>,
    tasks: parking_lot::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    stats: ConsistentStats,
}

impl UpstreamSource {
    /// Discovers what the upstream `config` names serves, makes a store per followable
    /// resource and starts its follower. Stores are unready until their first sync.
    pub async fn start(
        config: &GatewayConfig,
        stores: &StoreConfig,
    ) -> Result<Arc<Self>, UpstreamError> {
        let up = Arc::new(Upstream::new(config)?);
        let resources = discovery::discover(&up).await?;
        let registry = Registry::new(resources, 1, stores);
        let mut tasks = Vec::new();
        for store in registry.stores() {
            store.set_ready(false);
            tasks.push(tokio::spawn(follower::run(store, up.clone())));
        }
        Ok(Arc::new(UpstreamSource {
            registry,
            up,
            probes: parking_lot::Mutex::default(),
            tasks: parking_lot::Mutex::new(tasks),
            stats: ConsistentStats::default(),
        }))
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
    /// with nothing newer to deliver, by proving the cache current: a full LIST (at
    /// `a ≥ r`) whose every item is in the cache at the same RV, with the same count, shows
    /// that the upstream's collection at `a` is the cache's, so the store is advanced to
    /// `a`. (An object created and deleted in between leaves no trace in the LIST; its
    /// events, arriving later at or below the store's RV, make the follower relist.)
    async fn establish(&self, store: &Store, path: &str) -> Result<u64, UpstreamError> {
        self.stats.probes.fetch_add(1, Ordering::Relaxed);
        let page: ListPage = self.up.get_json(&format!("{path}?limit=1")).await?;
        let target = parse_rv(&page.metadata.resource_version)?;
        if store.wait_for(target, STREAM_GRACE).await.is_ok() {
            self.stats.by_stream.fetch_add(1, Ordering::Relaxed);
            return Ok(target);
        }
        for _ in 0..PROOF_ROUNDS {
            if !store.is_ready() || store.rv() >= target {
                break;
            }
            let snap = store.current();
            self.stats.proof_lists.fetch_add(1, Ordering::Relaxed);
            let (at, items) = self.up.list_all(path, follower::PAGE).await?;
            let mut same = items.len() == snap.len();
            let mut newest = 0;
            for o in &items {
                let (key, rv) = follower::key_and_rv(store, o.get())?;
                newest = newest.max(rv);
                same &= snap.get(&key).is_some_and(|r| r.rv() == rv);
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

impl Source for UpstreamSource {
    fn registry(&self) -> &Registry {
        &self.registry
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
        let tasks = std::mem::take(&mut *self.tasks.lock());
        Box::pin(async move {
            for t in tasks {
                t.abort();
                let _ = t.await;
            }
        })
    }
}
