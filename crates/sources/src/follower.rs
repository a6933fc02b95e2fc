//! One follower state machine for every source that keeps a [`Store`] equal to a remote
//! collection (etcd, an upstream kube-apiserver); the remote side is a [`Backend`].
//!
//! ```text
//!  Loading ──list ok──▶ Following ──disconnect──▶ Following (watch resumed from the last RV)
//!     ▲                    │
//!     │      compacted / 410 / an event the cache cannot take
//!     │                    ▼
//!  list failed          Unsafe ──▶ Relisting ──list ok──▶ Following (open watches got 410)
//! ```
//!
//! The store is ready (served) only while `Following`; otherwise readers get 429 rather
//! than data that may be stale. Every retry waits one backoff (100 ms doubling to 5 s by
//! default); the backoff starts afresh whenever an attempt moved the RV (a list completed, a
//! watch applied an event or a progress mark), so a follower that works for a while and
//! then loses its stream retries at once-ish, and one that cannot get anywhere backs off.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use listwatch_store::Store;
use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::sync::Notify;
use tracing::{debug, warn};

/// Where a follower is in its state machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FollowerState {
    /// First list in progress.
    Loading,
    /// Watching; the cache is exact at its RV.
    Following,
    /// The cache may be stale; a relist follows.
    Unsafe,
    /// Listing again after `Unsafe`.
    Relisting,
}

/// A follower's counters and state, for readiness and tests.
#[derive(Clone, Debug)]
pub struct FollowerStats {
    /// Current state.
    pub state: FollowerState,
    /// Times the cache was found unsafe and relisted (after the first load).
    pub relists: u64,
    /// Watches resumed from the last RV after a disconnect (no relist).
    pub resumes: u64,
    /// Values the backend could not read and skipped (etcd: protobuf it cannot decode,
    /// encryption without a key).
    pub skipped: u64,
    /// Why the cache was last declared unsafe.
    pub last_unsafe: Option<String>,
}

/// How one attempt (a list and the watch after it, or a resumed watch) ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// The stream broke or could not be opened (restart, network, timeout): resume from the
    /// last RV, or list again if there is none yet.
    Disconnected(String),
    /// The remote closed the watch as it may at any time (kube-apiserver at its request
    /// timeout): resume from the last RV; logged at DEBUG only.
    Closed,
    /// The cache can no longer be trusted (history compacted, 410, an event the cache cannot
    /// take): relist.
    Relist(String),
}

/// The remote side of a follower: how to load the whole collection and how to follow it.
pub trait Backend: Send + 'static {
    /// The source's name in log lines (`etcd`, `upstream`).
    const NAME: &'static str;

    /// Loads the whole collection into `follower`'s store at one RV (`Store::replace`,
    /// which ends open watches with 410 on a relist) and returns that RV.
    fn list(&mut self, follower: &Follower) -> impl Future<Output = Result<u64, Ended>> + Send;

    /// Watches from `from` (exclusive), applying events to `follower`'s store until the
    /// watch ends; `*last` follows the newest RV applied or vouched for by progress.
    fn watch(
        &mut self,
        follower: &Follower,
        from: u64,
        last: &mut u64,
    ) -> impl Future<Output = Ended> + Send;
}

/// What the followers of one source share: the backoff, the `/metrics` counters per
/// resource and the rate limit of their connection-trouble lines.
pub struct FollowerSet {
    min_backoff: Duration,
    max_backoff: Duration,
    resumes: Family<ResourceLabel, Counter>,
    relists: Family<ResourceLabel, Counter>,
    /// When (seconds since the epoch) the last connection-trouble line went out at WARN.
    last_warned: AtomicU64,
}

impl Default for FollowerSet {
    /// Backoff 100 ms doubling to 5 s.
    fn default() -> Self {
        FollowerSet::new(Duration::from_millis(100), Duration::from_secs(5))
    }
}

/// A followed resource, as `/metrics` names it (`pods`, `deployments.apps`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabel {
    resource: String,
}

/// Every source's followers' connection trouble: one WARN line per this long, the rest at
/// DEBUG (every follower meets the same outage at once).
const WARN_EVERY_SECS: u64 = 30;

impl FollowerSet {
    /// Followers that retry after `min_backoff`, doubling up to `max_backoff`.
    pub fn new(min_backoff: Duration, max_backoff: Duration) -> Self {
        FollowerSet {
            min_backoff,
            max_backoff,
            resumes: Family::default(),
            relists: Family::default(),
            last_warned: AtomicU64::new(0),
        }
    }

    /// Adds `listwatch_follower_resumes_total{resource}` and
    /// `listwatch_follower_relists_total{resource}` to `registry` (a resource appears once
    /// it has one).
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register(
            "listwatch_follower_resumes",
            "Followed watches resumed from their last resourceVersion after a disconnect",
            self.resumes.clone(),
        );
        registry.register(
            "listwatch_follower_relists",
            "Followed resources relisted (history compacted, 410, or a cache found unsafe)",
            self.relists.clone(),
        );
    }

    /// [`Self::register`]'s metrics in OpenMetrics text, without `# EOF`.
    pub fn metrics_text(&self) -> String {
        let mut registry = prometheus_client::registry::Registry::default();
        self.register(&mut registry);
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode_registry(&mut text, &registry);
        text
    }

    /// Whether a connection-trouble line may go out at WARN now.
    fn warn_due(&self) -> bool {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let last = self.last_warned.load(Ordering::Relaxed);
        now >= last + WARN_EVERY_SECS
            && self
                .last_warned
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

/// Told once, when a follower's store first holds the remote collection.
pub type Synced = Option<tokio::sync::oneshot::Sender<()>>;

/// One resource's follower: its store, state and counters; [`Follower::run`] drives it.
pub struct Follower {
    store: Arc<Store>,
    set: Arc<FollowerSet>,
    label: ResourceLabel,
    nudge: Notify,
    status: Mutex<FollowerStats>,
}

impl Follower {
    /// A follower of `store` (marked unready until its first list) sharing `set`.
    pub fn new(store: Arc<Store>, set: Arc<FollowerSet>) -> Arc<Follower> {
        store.set_ready(false);
        let label = ResourceLabel {
            resource: store.info().group_resource(),
        };
        Arc::new(Follower {
            store,
            set,
            label,
            nudge: Notify::new(),
            status: Mutex::new(FollowerStats {
                state: FollowerState::Loading,
                relists: 0,
                resumes: 0,
                skipped: 0,
                last_unsafe: None,
            }),
        })
    }

    /// The store this follower keeps.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// State and counters.
    pub fn stats(&self) -> FollowerStats {
        self.status.lock().clone()
    }

    /// Asks the backend to report progress now (etcd: a progress notification), so the
    /// store's RV reaches the remote's without waiting for the next periodic mark.
    pub fn request_progress(&self) {
        self.nudge.notify_one();
    }

    /// Completes when [`Self::request_progress`] was called (for a backend's watch loop).
    pub async fn progress_requested(&self) {
        self.nudge.notified().await;
    }

    /// Counts values the backend skipped.
    pub fn count_skipped(&self, n: u64) {
        if n > 0 {
            self.status.lock().skipped += n;
        }
    }

    /// Whether the current list is a relist (the first load is not).
    pub fn relisting(&self) -> bool {
        self.status.lock().state != FollowerState::Loading
    }

    fn set_state(&self, state: FollowerState) {
        self.status.lock().state = state;
        self.store.set_ready(state == FollowerState::Following);
    }

    /// Runs forever: load, follow, resume after a disconnect and relist whenever the cache
    /// becomes unsafe; `synced` is told after the first list.
    pub async fn run<B: Backend>(self: Arc<Self>, mut backend: B, mut synced: Synced) {
        let resource = self.store.info().resource.clone();
        let source = B::NAME;
        let mut resume: Option<u64> = None;
        let mut backoff = self.set.min_backoff;
        loop {
            let start = resume.unwrap_or(0);
            let mut last = start;
            let ended = match resume {
                Some(rv) => backend.watch(&self, rv, &mut last).await,
                None => {
                    if self.relisting() {
                        self.set_state(FollowerState::Relisting);
                    }
                    match backend.list(&self).await {
                        Ok(rv) => {
                            self.set_state(FollowerState::Following);
                            if let Some(tell) = synced.take() {
                                let _ = tell.send(());
                            }
                            last = rv;
                            backend.watch(&self, rv, &mut last).await
                        }
                        Err(ended) => ended,
                    }
                }
            };
            if last > start {
                // The attempt got somewhere: the next failure's backoff starts afresh.
                backoff = self.set.min_backoff;
            }
            match ended {
                Ended::Disconnected(why) | Ended::Relist(why) if last == 0 => {
                    // Nothing listed yet: list again.
                    self.trouble(format_args!("{source} list failed; retrying: {why}"));
                }
                Ended::Closed if last == 0 => {}
                Ended::Closed => {
                    debug!(%source, %resource, rv = last, "watch closed by the remote; resuming");
                    self.resumed();
                    resume = Some(last);
                }
                Ended::Disconnected(why) => {
                    self.trouble(format_args!(
                        "{source} watch ended; resuming from {last}: {why}"
                    ));
                    self.resumed();
                    resume = Some(last);
                }
                Ended::Relist(why) => {
                    warn!(%source, %resource, %why, "cache unsafe; relisting");
                    self.set.relists.get_or_create(&self.label).inc();
                    {
                        let mut s = self.status.lock();
                        s.relists += 1;
                        s.last_unsafe = Some(why);
                    }
                    self.set_state(FollowerState::Unsafe);
                    resume = None;
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(self.set.max_backoff);
        }
    }

    fn resumed(&self) {
        self.set.resumes.get_or_create(&self.label).inc();
        self.status.lock().resumes += 1;
    }

    /// Logs connection trouble: at WARN once per [`WARN_EVERY_SECS`] across the set.
    fn trouble(&self, what: std::fmt::Arguments<'_>) {
        let resource = &self.store.info().resource;
        if self.set.warn_due() {
            warn!(%resource, "{what} (such lines: one per {WARN_EVERY_SECS} s)");
        } else {
            debug!(%resource, "{what}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use listwatch_store::{Record, StoreConfig};

    /// A backend that plays a script of answers and reports each call, with what the
    /// follower looked like to it then (state, store ready).
    struct Script {
        lists: Vec<Result<u64, Ended>>,
        watches: Vec<(u64, Ended)>,
        calls: tokio::sync::mpsc::UnboundedSender<(String, FollowerState, bool)>,
    }

    impl Backend for Script {
        const NAME: &'static str = "script";

        async fn list(&mut self, follower: &Follower) -> Result<u64, Ended> {
            let seen = (follower.stats().state, follower.store().is_ready());
            let _ = self.calls.send(("list".into(), seen.0, seen.1));
            if self.lists.is_empty() {
                std::future::pending::<()>().await;
            }
            let answer = self.lists.remove(0);
            if let Ok(rv) = answer {
                follower.store().replace(rv, Vec::<Record>::new());
            }
            answer
        }

        async fn watch(&mut self, follower: &Follower, from: u64, last: &mut u64) -> Ended {
            let seen = (follower.stats().state, follower.store().is_ready());
            let _ = self.calls.send((format!("watch {from}"), seen.0, seen.1));
            if self.watches.is_empty() {
                std::future::pending::<()>().await;
            }
            let (to, ended) = self.watches.remove(0);
            *last = to;
            ended
        }
    }

    #[tokio::test]
    async fn loads_resumes_relists_and_is_ready_only_while_following() {
        let info = Arc::new(listwatch_core::builtin_resource("configmaps").expect("configmaps"));
        let store = Store::new(info, 1, Vec::<Record>::new(), StoreConfig::default());
        store.set_ready(true);
        let set = Arc::new(FollowerSet::new(
            Duration::from_millis(1),
            Duration::from_millis(4),
        ));
        let follower = Follower::new(store.clone(), set.clone());
        assert!(!store.is_ready(), "unready until the first list");
        let (tx, mut calls) = tokio::sync::mpsc::unbounded_channel();
        let script = Script {
            lists: vec![Err(Ended::Disconnected("down".into())), Ok(5), Ok(9)],
            watches: vec![
                (7, Ended::Disconnected("reset".into())),
                (8, Ended::Closed),
                (8, Ended::Relist("compacted".into())),
            ],
            calls: tx,
        };
        let (synced, first_sync) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(follower.clone().run(script, Some(synced)));
        use FollowerState::*;
        let want = [
            ("list", Loading, false),
            ("list", Loading, false),
            ("watch 5", Following, true),
            // Resumed where the broken watch got to, still served.
            ("watch 7", Following, true),
            ("watch 8", Following, true),
            // Unsafe: unready at once, and listed again.
            ("list", Relisting, false),
            ("watch 9", Following, true),
        ];
        for (call, state, ready) in want {
            let got = tokio::time::timeout(Duration::from_secs(5), calls.recv())
                .await
                .expect("the follower goes on")
                .expect("a call");
            assert_eq!(got, (call.to_string(), state, ready), "at {call}");
        }
        first_sync.await.expect("told of the first sync");
        let stats = follower.stats();
        assert_eq!(
            (stats.state, stats.resumes, stats.relists),
            (Following, 2, 1)
        );
        assert_eq!(stats.last_unsafe.as_deref(), Some("compacted"));
        assert!(store.is_ready());
        let text = set.metrics_text();
        assert!(
            text.contains("listwatch_follower_resumes_total{resource=\"configmaps\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("listwatch_follower_relists_total{resource=\"configmaps\"} 1"),
            "{text}"
        );
        task.abort();
    }
}
