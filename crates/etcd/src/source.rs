//! `EtcdSource`: a follower per served resource over one etcd client, the revision a
//! consistent read must reach, and the write verbs as etcd transactions.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp};
use listwatch_core::{ApiError, ObjectRef, ResourceInfo, WriteOptions};
use listwatch_sources::follower::{Follower, FollowerSet, FollowerStats};
use listwatch_sources::{
    BoxFuture, Registry, Source, SourceWriter, WriteOp, WriteRequest, WriteResult, objects,
};
use listwatch_store::{Record, Store};

use crate::EtcdError;
use crate::client::{CurrentClient, connect};
use crate::config::{EtcdConfig, EtcdTlsFiles, ProgressOrder, READ_ONLY, TLS_RELOAD_CHECK};
use crate::follower::{call, follow};
use crate::layout::etcd_key;

/// How long a custom resource's open watches take to end once its CRD stops serving it.
pub const CRD_DRAIN: Duration = listwatch_sources::crd::DRAIN;

/// Serves what the CRD cache says, again after each change to it.
async fn follow_crds(source: std::sync::Weak<EtcdSource>, crds: Arc<Store>) {
    loop {
        let mut cursor = match crds.watch_from(crds.rv()) {
            Ok(c) => c,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if crds.is_ready() {
            match source.upgrade() {
                Some(s) => s.reconcile_crds(&crds.current()),
                None => return,
            }
        }
        let mut events = Vec::new();
        let was_ready = crds.is_ready();
        loop {
            // Readiness (a first list, a relist) does not pass through the log: look again
            // every second too.
            let _ = tokio::time::timeout(Duration::from_secs(1), cursor.changed()).await;
            if crds.is_ready() != was_ready {
                break;
            }
            events.clear();
            // A cursor too far behind (a relist replaced the cache): reconcile afresh.
            if cursor.poll(1024, &mut events).is_err() || !events.is_empty() {
                break;
            }
        }
    }
}

/// The etcd source: followers keep the registry's stores equal to etcd; writes go to etcd.
pub struct EtcdSource {
    client: Arc<CurrentClient>,
    registry: Registry,
    config: Arc<EtcdConfig>,
    followers: parking_lot::Mutex<HashMap<(String, String, String), Arc<Follower>>>,
    /// What the followers share: backoff, `/metrics` counters, log rate limit.
    follower_set: Arc<FollowerSet>,
    /// The followers' tasks (and the CRD reconciler's), owned so [`Source::close`] can end
    /// and await them.
    tasks: parking_lot::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Custom resources' followers by (group, version, resource), aborted when their CRD
    /// stops serving them.
    custom: parking_lot::Mutex<HashMap<(String, String, String), tokio::task::AbortHandle>>,
    /// Since when etcd has not answered, and why (None: it answers).
    down: parking_lot::Mutex<Option<Outage>>,
    /// The RV of the CRD snapshot [`EtcdSource::reconcile_crds`] last made the served custom
    /// resources (and their read-time defaults) equal to: a consistent read of a custom
    /// resource waits until it covers its CRD's last change.
    crds_applied: tokio::sync::watch::Sender<u64>,
}

/// etcd not answering: since when, the cause, and whether open watches were ended for it.
struct Outage {
    since: std::time::Instant,
    cause: String,
    watches_ended: bool,
}

/// How often the source asks etcd whether it answers (a linearizable one-key read).
const HEALTH_PROBE_EVERY: Duration = Duration::from_secs(1);

/// How long etcd may be down before open watches are ended, so their clients relist
/// elsewhere rather than sit on a watch that can no longer be kept current.
pub const WATCH_OUTAGE_BOUND: Duration = Duration::from_secs(15);

/// Over how long the watches ended for an outage end (spread, as on shutdown).
const WATCH_OUTAGE_GRACE: Duration = Duration::from_secs(5);

/// Probes etcd every [`HEALTH_PROBE_EVERY`]: one WARN line when it stops answering (with
/// the cause), one INFO line when it answers again; past [`WATCH_OUTAGE_BOUND`] the open
/// watches of every resource are ended.
async fn watch_health(source: std::sync::Weak<EtcdSource>) {
    loop {
        tokio::time::sleep(HEALTH_PROBE_EVERY).await;
        let Some(s) = source.upgrade() else { return };
        let probe = call(Duration::from_secs(2), || {
            let mut kv = s.client.get().kv_client();
            async move {
                kv.get(
                    "/registry/health",
                    Some(GetOptions::new().with_count_only()),
                )
                .await
            }
        })
        .await;
        let mut down = s.down.lock();
        match (probe, down.as_mut()) {
            (Ok(_), Some(outage)) => {
                tracing::info!(after = ?outage.since.elapsed(), "etcd answers again");
                if outage.watches_ended {
                    for store in s.registry.stores() {
                        store.cancel_drain();
                    }
                }
                *down = None;
            }
            (Ok(_), None) => {}
            (Err(e), None) => {
                let cause = e.to_string();
                tracing::warn!(endpoints = ?s.config.endpoints, %cause, "etcd does not answer: consistent reads fail with 503 and /readyz fails until it does");
                *down = Some(Outage {
                    since: std::time::Instant::now(),
                    cause,
                    watches_ended: false,
                });
            }
            (Err(e), Some(outage)) => {
                outage.cause = e.to_string();
                if !outage.watches_ended && outage.since.elapsed() >= WATCH_OUTAGE_BOUND {
                    tracing::warn!(after = ?outage.since.elapsed(), "etcd still does not answer: ending open watches so their clients relist");
                    for store in s.registry.stores() {
                        store.drain_watches(WATCH_OUTAGE_GRACE);
                    }
                    outage.watches_ended = true;
                }
            }
        }
    }
}

/// Looks at etcd's TLS files every [`TLS_RELOAD_CHECK`]; when one changed (kubeadm and
/// cert-manager renew them in place), reads them again and makes new requests use a client
/// built from them. A file half written, or a client that cannot be built, keeps the old
/// client and is tried again at the next look.
async fn follow_tls_files(source: std::sync::Weak<EtcdSource>, files: EtcdTlsFiles) {
    let mut seen = files.stamps();
    loop {
        tokio::time::sleep(TLS_RELOAD_CHECK).await;
        let Some(s) = source.upgrade() else { return };
        let now = files.stamps();
        if now == seen {
            continue;
        }
        let tls = match files.read() {
            Ok(tls) => tls,
            Err(e) => {
                tracing::warn!(error = %e, "etcd TLS files changed but cannot be read; keeping the current connection");
                continue;
            }
        };
        match connect(&s.config.endpoints, Some(&tls)).await {
            Ok(client) => {
                s.client.replace(client);
                seen = now;
                tracing::info!(files = ?files, "etcd TLS files reloaded: new requests use them");
            }
            Err(e) => {
                tracing::warn!(error = %e, "etcd TLS files changed but no client could be made with them; keeping the current one")
            }
        }
    }
}

impl EtcdSource {
    /// Connects to etcd and starts a follower for every resource of `registry` (on the
    /// current tokio runtime). Stores stay unready until their first list completes.
    pub async fn start(registry: Registry, config: EtcdConfig) -> Result<Arc<Self>, EtcdError> {
        let client = Arc::new(CurrentClient::new(
            connect(&config.endpoints, config.tls.as_ref()).await?,
        ));
        let mut config = config;
        // The first answer proves etcd reachable (address, TLS, credentials): a start-up
        // that cannot reach etcd fails here with the cause rather than serving nothing.
        let version = call(config.request_timeout.min(Duration::from_secs(5)), || {
            let mut c = client.get();
            async move { c.status().await }
        })
        .await?
        .version()
        .to_string();
        if progress_may_overtake_events(&version) {
            tracing::info!(%version, "etcd before 3.4.31/3.5.13 may send requested progress notifications ahead of events (etcd#15220, etcd#17507): consistent reads of resources without recent writes are proven current by a keys-only read of their prefix instead");
            config.progress_order = ProgressOrder::OwnWatchOnly;
        }
        let config = Arc::new(config);
        let follower_set = Arc::new(FollowerSet::new(config.min_backoff, config.max_backoff));
        let mut followers = HashMap::new();
        let mut tasks = Vec::new();
        for store in registry.stores() {
            let (f, task) = follow(store.clone(), &follower_set, &client, &config);
            tasks.push(task);
            let i = store.info();
            followers.insert((i.group.clone(), i.version.clone(), i.resource.clone()), f);
        }
        let source = Arc::new(EtcdSource {
            client,
            registry,
            config,
            followers: parking_lot::Mutex::new(followers),
            follower_set,
            tasks: parking_lot::Mutex::new(tasks),
            custom: parking_lot::Mutex::new(HashMap::new()),
            down: parking_lot::Mutex::new(None),
            crds_applied: tokio::sync::watch::Sender::new(0),
        });
        let health = tokio::spawn(watch_health(Arc::downgrade(&source)));
        source.tasks.lock().push(health);
        if let Some(files) = source
            .config
            .tls
            .as_ref()
            .and_then(|t| t.reload_from.clone())
        {
            let task = tokio::spawn(follow_tls_files(Arc::downgrade(&source), files));
            source.tasks.lock().push(task);
        }
        if let Some(crds) =
            source
                .registry
                .get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        {
            // Weak: the reconciler must not keep the source alive.
            let task = tokio::spawn(follow_crds(Arc::downgrade(&source), crds));
            source.tasks.lock().push(task);
        }
        Ok(source)
    }

    /// Makes the served custom resources equal to what the CRDs in `crds` serve: new
    /// versions get a store and a follower, versions no longer served are retired (their
    /// watches drain over [`CRD_DRAIN`]) and their followers stopped.
    fn reconcile_crds(&self, crds: &listwatch_store::Snapshot) {
        let wanted = listwatch_sources::crd::served_by(crds);
        let mut custom = self.custom.lock();
        // A CRD whose schema defaults changed is served anew: its objects are read again
        // with the new defaults (kube-apiserver builds a new storage for the CRD, and its
        // open watches end, the same way).
        let redefaulted = self
            .config
            .decoder
            .set_crd_defaults(listwatch_sources::crd::read_defaults_by(crds));
        let gone: Vec<_> = custom
            .keys()
            .filter(|k| {
                !wanted.contains_key(*k) || redefaulted.iter().any(|(g, r)| *g == k.0 && *r == k.2)
            })
            .cloned()
            .collect();
        for key in gone {
            if let Some(task) = custom.remove(&key) {
                task.abort();
            }
            self.followers.lock().remove(&key);
            listwatch_sources::crd::retire(&self.registry, &key);
        }
        for (key, info) in wanted {
            if custom.contains_key(&key) {
                continue;
            }
            let info = info.under_etcd_root(&self.config.prefix);
            if self
                .registry
                .get(&key.0, &key.1, &key.2)
                .is_some_and(|s| !s.is_retired())
            {
                // A built-in of the same name (or given with --resources): it wins.
                continue;
            }
            let Some(store) = self
                .registry
                .add(info, 1, &listwatch_store::StoreConfig::default())
            else {
                continue;
            };
            let (f, task) = follow(store, &self.follower_set, &self.client, &self.config);
            custom.insert(key.clone(), task.abort_handle());
            self.followers.lock().insert(key.clone(), f);
            self.tasks.lock().push(task);
            tracing::info!(group = %key.0, version = %key.1, resource = %key.2, "serving custom resource");
        }
        drop(custom);
        self.crds_applied.send_replace(crds.rv());
    }

    /// The registry this source keeps.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Every resource's follower state and counters, ordered by resource.
    pub fn stats(&self) -> Vec<(String, FollowerStats)> {
        let followers = self.followers.lock();
        let mut v: Vec<_> = followers
            .iter()
            .map(|((g, _, r), f)| {
                let name = if g.is_empty() {
                    r.clone()
                } else {
                    format!("{r}.{g}")
                };
                (name, f.stats())
            })
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    fn follower(&self, info: &ResourceInfo) -> Option<Arc<Follower>> {
        self.followers
            .lock()
            .get(&(
                info.group.clone(),
                info.version.clone(),
                info.resource.clone(),
            ))
            .cloned()
    }

    /// etcd's current revision (a linearizable point read of one key, O(log n) in etcd
    /// whatever the collection's size), after asking `store`'s follower for a progress
    /// notification so the cache reaches it promptly: what a consistent read waits for.
    pub async fn consistent_revision(&self, store: &Store) -> Result<u64, ApiError> {
        // Known down: fail now (clients retry on 503) rather than each waiting for a timeout.
        if let Some(cause) = self.unhealthy() {
            return Err(ApiError::Unavailable(format!(
                "etcd is not answering consistent reads: {cause}"
            )));
        }
        // A custom resource's revision comes with its CRD's last change (the same one
        // linearizable read, of the CRD's key rather than the collection's prefix): the
        // schema its objects are defaulted with must be at least that new.
        let crd_key = self.crd_key_of(store);
        let key = crd_key
            .clone()
            .unwrap_or_else(|| store.info().etcd_prefix.clone().into_bytes());
        let resp = call(self.config.request_timeout, || {
            let mut kv = self.client.get().kv_client();
            let key = key.clone();
            // Keys only: the CRD's mod_revision is all this read needs, not its schema.
            async move { kv.get(key, Some(GetOptions::new().with_keys_only())).await }
        })
        .await?;
        let rev = resp.header().ok_or(EtcdError::NoHeader)?.revision();
        let rev = u64::try_from(rev).unwrap_or(0);
        if crd_key.is_some() {
            let crd_rev = resp.kvs().first().map_or(0, |kv| kv.mod_revision());
            self.await_crd_applied(store, u64::try_from(crd_rev).unwrap_or(0))
                .await?;
        }
        #[cfg(feature = "fault-injection")]
        if self.config.fault_early_progress {
            store.progress(rev);
        }
        self.request_progress(store);
        if self.config.progress_order == ProgressOrder::OwnWatchOnly && store.rv() < rev {
            // An etcd whose requested progress cannot be trusted: prove the cache current
            // instead of waiting for a periodic notification (minutes on default flags).
            self.prove_current(store, rev).await?;
        }
        Ok(rev)
    }

    /// The etcd key of the CRD that serves custom resource `store` (`<plural>.<group>`);
    /// `None` for a built-in resource. A retired store counts as a custom resource: its
    /// CRD may have just stopped serving it, or changed its schema.
    fn crd_key_of(&self, store: &Store) -> Option<Vec<u8>> {
        let i = store.info();
        let key = (i.group.clone(), i.version.clone(), i.resource.clone());
        if !store.is_retired() && !self.custom.lock().contains_key(&key) {
            return None;
        }
        let crds = self
            .registry
            .get("apiextensions.k8s.io", "v1", "customresourcedefinitions")?;
        let name = format!("{}.{}", i.resource, i.group);
        Some(etcd_key(crds.info(), &crds.info().key("", &name)))
    }

    /// Waits until the CRDs are applied as of `crd_rev` (the last change of the CRD that
    /// serves custom resource `store`; 0 when it is gone), so that `store`'s objects are
    /// read with that schema's defaults: kube-apiserver decodes a stored custom resource
    /// with its CRD's current defaults, and the CRD store's follower and the reconciler run
    /// apart from `store`'s follower, so `store` can reach etcd's revision first. A schema
    /// whose defaults changed gets a new store ([`Self::reconcile_crds`]): a read of the
    /// retired one is refused with 429 (`Retry-After: 1`), as while a cache reloads, so its
    /// client reads again from the new store.
    async fn await_crd_applied(&self, store: &Store, crd_rev: u64) -> Result<(), ApiError> {
        let mut applied = self.crds_applied.subscribe();
        let wait = applied.wait_for(|rv| *rv >= crd_rev);
        if !matches!(
            tokio::time::timeout(self.config.request_timeout, wait).await,
            Ok(Ok(_))
        ) {
            return Err(ApiError::Timeout(format!(
                "the CustomResourceDefinition of {} at revision {crd_rev} is not applied yet",
                store.info().group_resource()
            )));
        }
        if store.is_retired() {
            return Err(ApiError::TooManyRequests(
                "storage is (re)initializing: its CustomResourceDefinition changed".into(),
            ));
        }
        Ok(())
    }

    /// Advances `store` to etcd's revision once the cache is shown equal to etcd for its
    /// prefix: a keys-only range read of the prefix filtered to keys modified after the
    /// cache's RV `c` (etcd applies `min_mod_revision` after counting, so the response's
    /// `count` is the prefix's whole count) returns no key, and that count equals the
    /// cache's. Nothing modified since `c` and nothing deleted (a deletion alone would
    /// lower the count; one with a re-creation shows as a modified key) means etcd at the
    /// response's revision holds what the cache holds at `c`. Otherwise waits for the watch
    /// to deliver the newest modification and proves again; gives up (the caller then
    /// waits as before) after a few rounds. Cost: one request transferring the keys
    /// modified since the cache's RV (usually none), an O(keys) index scan in etcd.
    async fn prove_current(&self, store: &Store, target: u64) -> Result<(), ApiError> {
        let prefix = store.info().etcd_prefix.clone();
        for _ in 0..8 {
            if !store.is_ready() {
                return Ok(());
            }
            let snap = store.current();
            let (cached_rv, cached) = (snap.rv(), snap.len());
            if cached_rv >= target {
                return Ok(());
            }
            let after = i64::try_from(cached_rv + 1).unwrap_or(i64::MAX);
            let resp = call(self.config.request_timeout, || {
                let mut kv = self.client.get().kv_client();
                let prefix = prefix.clone();
                let options = GetOptions::new()
                    .with_prefix()
                    .with_keys_only()
                    .with_min_mod_revision(after);
                async move { kv.get(prefix, Some(options)).await }
            })
            .await?;
            let at = resp.header().ok_or(EtcdError::NoHeader)?.revision();
            let at = u64::try_from(at).unwrap_or(0);
            let count = usize::try_from(resp.count()).unwrap_or(usize::MAX);
            if resp.kvs().is_empty() && count == cached {
                store.progress(at);
                return Ok(());
            }
            // Changes the watch has yet to deliver: wait for the newest, then prove again.
            let newest = resp
                .kvs()
                .iter()
                .map(|kv| u64::try_from(kv.mod_revision()).unwrap_or(0))
                .max()
                .unwrap_or(cached_rv + 1);
            let _ = store.wait_for(newest, Duration::from_millis(500)).await;
        }
        Ok(())
    }

    /// Why etcd is known not to answer, if it is.
    pub fn unhealthy(&self) -> Option<String> {
        self.down.lock().as_ref().map(|o| o.cause.clone())
    }

    /// Asks `store`'s follower for a progress notification now (a reader waits for an RV
    /// the cache has not reached).
    pub fn request_progress(&self, store: &Store) {
        if let Some(f) = self.follower(store.info()) {
            f.request_progress();
        }
    }

    /// POST: creates the object if its key is free (`create_revision == 0`).
    async fn create(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        body: &[u8],
        options: WriteOptions,
    ) -> Result<WriteResult, ApiError> {
        let new = objects::prepare_create(info, namespace, body)?;
        let key = etcd_key(info, &new.key);
        if options.dry_run {
            if self.read(&key).await?.is_some() {
                return Err(ApiError::AlreadyExists(ObjectRef::new(info, &new.name)));
            }
            return Ok(WriteResult {
                code: 201,
                body: new.json.into(),
            });
        }
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, new.json.clone(), None)]);
        let resp = self.txn(txn).await?;
        if !resp.succeeded() {
            return Err(ApiError::AlreadyExists(ObjectRef::new(info, &new.name)));
        }
        let rev = resp.header().ok_or(EtcdError::NoHeader)?.revision();
        Ok(WriteResult {
            code: 201,
            body: with_rv(info, &new.json, rev)?,
        })
    }

    /// PUT: replaces the object if it is still the version read (`mod_revision` compare);
    /// a body without `resourceVersion` retries on a concurrent change, one with it gets
    /// 409 Conflict, as kube-apiserver's optimistic concurrency.
    async fn update(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
        body: &[u8],
        options: WriteOptions,
    ) -> Result<WriteResult, ApiError> {
        let replacement = objects::prepare_update(info, namespace, name, body)?;
        let key = etcd_key(info, &replacement.key);
        for _ in 0..16 {
            let Some((value, mod_rev)) = self.read(&key).await? else {
                return Err(ApiError::NotFound(ObjectRef::new(info, name)));
            };
            let json = replacement.merge(info, &value, u64::try_from(mod_rev).unwrap_or(0))?;
            if options.dry_run {
                return Ok(WriteResult {
                    code: 200,
                    body: with_rv(info, &json, mod_rev)?,
                });
            }
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    mod_rev,
                )])
                .and_then([TxnOp::put(key.clone(), json.clone(), None)]);
            let resp = self.txn(txn).await?;
            if resp.succeeded() {
                let rev = resp.header().ok_or(EtcdError::NoHeader)?.revision();
                return Ok(WriteResult {
                    code: 200,
                    body: with_rv(info, &json, rev)?,
                });
            }
        }
        Err(ApiError::Conflict(ObjectRef::new(info, name)))
    }

    /// DELETE: removes the object if it is still the version read.
    async fn delete(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
        options: WriteOptions,
    ) -> Result<WriteResult, ApiError> {
        let key = etcd_key(info, &info.key(namespace.unwrap_or(""), name));
        for _ in 0..16 {
            let Some((value, mod_rev)) = self.read(&key).await? else {
                return Err(ApiError::NotFound(ObjectRef::new(info, name)));
            };
            if options.dry_run {
                return Ok(WriteResult {
                    code: 200,
                    body: objects::delete_status(info, name, &value),
                });
            }
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    mod_rev,
                )])
                .and_then([TxnOp::delete(key.clone(), None)]);
            let resp = self.txn(txn).await?;
            if resp.succeeded() {
                return Ok(WriteResult {
                    code: 200,
                    body: objects::delete_status(info, name, &value),
                });
            }
        }
        Err(ApiError::Conflict(ObjectRef::new(info, name)))
    }

    async fn txn(&self, txn: Txn) -> Result<etcd_client::TxnResponse, ApiError> {
        Ok(call(self.config.request_timeout, || {
            let mut kv = self.client.get().kv_client();
            let txn = txn.clone();
            async move { kv.txn(txn).await }
        })
        .await?)
    }

    /// The value and mod revision stored at `key` (a linearizable read).
    async fn read(&self, key: &[u8]) -> Result<Option<(Vec<u8>, i64)>, ApiError> {
        let resp = call(self.config.request_timeout, || {
            let mut kv = self.client.get().kv_client();
            let key = key.to_vec();
            async move { kv.get(key, Some(GetOptions::new())).await }
        })
        .await?;
        Ok(resp
            .kvs()
            .first()
            .map(|kv| (kv.value().to_vec(), kv.mod_revision())))
    }
}

impl Source for EtcdSource {
    fn registry(&self) -> &Registry {
        &self.registry
    }

    fn consistent_revision<'a>(&'a self, store: &'a Store) -> BoxFuture<'a, Result<u64, ApiError>> {
        Box::pin(EtcdSource::consistent_revision(self, store))
    }

    fn request_progress(&self, store: &Store) {
        EtcdSource::request_progress(self, store);
    }

    fn writer(&self) -> Option<&dyn SourceWriter> {
        // Writes into the cluster's etcd would bypass kube-apiserver's admission,
        // defaulting, validation and encryption at rest: only when a lab asks for it.
        self.config
            .unsafe_direct_writes
            .then_some(self as &dyn SourceWriter)
    }

    fn refuse_write(&self) -> ApiError {
        ApiError::ReadOnly(READ_ONLY.into())
    }

    fn skipped_values(&self) -> Vec<(String, &'static str, u64)> {
        self.config.decoder.skipped()
    }

    /// Per followed resource, watches resumed and relists.
    fn metrics_text(&self) -> String {
        self.follower_set.metrics_text()
    }

    fn health(&self) -> Result<(), String> {
        self.unhealthy().map_or(Ok(()), Err)
    }

    fn health_check_name(&self) -> &'static str {
        "etcd"
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        let tasks = std::mem::take(&mut *self.tasks.lock());
        Box::pin(async move {
            for t in &tasks {
                t.abort();
            }
            for t in tasks {
                // A cancelled follower ends with a JoinError; only a panic is news.
                if let Err(e) = t.await
                    && e.is_panic()
                {
                    tracing::error!(error = %e, "etcd follower panicked");
                }
            }
        })
    }
}

impl SourceWriter for EtcdSource {
    fn write<'a>(
        &'a self,
        write: WriteRequest<'a>,
    ) -> BoxFuture<'a, Result<WriteResult, ApiError>> {
        // Written to etcd only: the store catches up through the watch.
        let (info, ns, options) = (write.store.info(), write.namespace, write.options);
        match write.op {
            WriteOp::Create { body } => Box::pin(self.create(info, ns, body, options)),
            WriteOp::Update { name, body } => Box::pin(self.update(info, ns, name, body, options)),
            WriteOp::Delete { name } => Box::pin(self.delete(info, ns, name, options)),
        }
    }
}

/// Whether etcd `version` may send a requested progress notification ahead of events it
/// covers: etcd#15220 (fixed in 3.4.24 / 3.5.8) and etcd#17507 (newly created watches, fixed
/// in 3.4.31 / 3.5.13 — kube-apiserver's own floor for consistent reads from its cache).
/// Unknown counts as yes.
fn progress_may_overtake_events(version: &str) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    match (
        parts.next().flatten(),
        parts.next().flatten(),
        parts.next().flatten(),
    ) {
        (Some(3), Some(4), Some(p)) => p < 31,
        (Some(3), Some(5), Some(p)) => p < 13,
        (Some(3), Some(m), Some(_)) => m < 4,
        (Some(major), Some(_), Some(_)) => major < 3,
        _ => true,
    }
}

/// The written JSON as clients see it: with the revision etcd assigned as its RV.
fn with_rv(info: &ResourceInfo, json: &[u8], rev: i64) -> Result<bytes::Bytes, ApiError> {
    let rv = u64::try_from(rev).unwrap_or(0);
    Record::ingest(json, info, rv)
        .map(|r| r.bytes().clone())
        .map_err(|e| ApiError::Internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn etcd_versions_with_the_progress_reorder() {
        use super::progress_may_overtake_events as old;
        assert!(old("3.4.23"));
        assert!(old("3.4.30"));
        assert!(!old("3.4.31"));
        assert!(old("3.5.12"));
        assert!(!old("3.5.13"));
        assert!(!old("3.6.0"));
        assert!(old(""));
    }
}
