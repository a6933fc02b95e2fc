//! `Registry`: the served resource types and the store behind each.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use listwatch_core::ResourceInfo;
use listwatch_store::{Store, StoreConfig};
use parking_lot::RwLock;

type Key = (String, String, String);

/// Every served resource with its store, looked up by (group, version, resource). Clones
/// share one table: resources added at run time (custom resources of a CRD) are seen by
/// every holder.
#[derive(Clone, Default)]
pub struct Registry {
    stores: Arc<RwLock<BTreeMap<Key, Arc<Store>>>>,
    /// Resources served as views of another resource (`views`): their stores follow their
    /// source store, never the source of truth, so sources do not write or progress them.
    views: Arc<RwLock<BTreeSet<Key>>>,
}

impl Registry {
    /// An empty store at `rv` for each resource.
    pub fn new(
        resources: impl IntoIterator<Item = ResourceInfo>,
        rv: u64,
        config: &StoreConfig,
    ) -> Self {
        let stores = resources
            .into_iter()
            .map(|r| {
                let r = r.normalized();
                (
                    (r.group.clone(), r.version.clone(), r.resource.clone()),
                    Store::new(
                        Arc::new(r),
                        rv,
                        Vec::<listwatch_store::Record>::new(),
                        config.clone(),
                    ),
                )
            })
            .collect();
        Registry {
            stores: Arc::new(RwLock::new(stores)),
            views: Arc::default(),
        }
    }

    /// The store for `group/version/resource`.
    pub fn get(&self, group: &str, version: &str, resource: &str) -> Option<Arc<Store>> {
        self.stores
            .read()
            .get(&(group.to_string(), version.to_string(), resource.to_string()))
            .cloned()
    }

    /// The store whose kind is `kind` in `api_version` (`v1`, `apps/v1`).
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<Arc<Store>> {
        self.stores
            .read()
            .values()
            .find(|s| s.info().kind == kind && s.info().api_version() == api_version)
            .cloned()
    }

    /// All stores now, ordered by group, version, resource.
    pub fn stores(&self) -> Vec<Arc<Store>> {
        self.stores.read().values().cloned().collect()
    }

    /// Adds an empty store at `rv` for `info` (a custom resource version), replacing a
    /// retired one of the same name. Returns the new store, or `None` when a live store of
    /// that name exists.
    pub fn add(&self, info: ResourceInfo, rv: u64, config: &StoreConfig) -> Option<Arc<Store>> {
        self.insert_empty(info, rv, config, false)
    }

    /// Adds an empty, not yet ready store at `rv` for `info`, kept by a view of another
    /// resource (`views`) rather than by the source. `None` when a store of that name exists.
    pub fn add_view(
        &self,
        info: ResourceInfo,
        rv: u64,
        config: &StoreConfig,
    ) -> Option<Arc<Store>> {
        self.insert_empty(info, rv, config, true)
    }

    /// [`Registry::add`] (`view` false: may replace a retired store) and
    /// [`Registry::add_view`] (`view` true: never replaces one, starts not ready).
    fn insert_empty(
        &self,
        info: ResourceInfo,
        rv: u64,
        config: &StoreConfig,
        view: bool,
    ) -> Option<Arc<Store>> {
        let info = info.normalized();
        let key = (
            info.group.clone(),
            info.version.clone(),
            info.resource.clone(),
        );
        let mut stores = self.stores.write();
        if stores.get(&key).is_some_and(|s| view || !s.is_retired()) {
            return None;
        }
        let store = Store::new(
            Arc::new(info),
            rv,
            Vec::<listwatch_store::Record>::new(),
            config.clone(),
        );
        if view {
            store.set_ready(false);
            self.views.write().insert(key.clone());
        }
        stores.insert(key, store.clone());
        Some(store)
    }

    /// Serves `store`, built and loaded elsewhere (a resource an apiserver source found
    /// after start, inserted once synced), replacing a retired store of the same name.
    /// `false` when a live store of that name exists.
    pub fn insert(&self, store: Arc<Store>) -> bool {
        let i = store.info();
        let key = (i.group.clone(), i.version.clone(), i.resource.clone());
        let mut stores = self.stores.write();
        if stores.get(&key).is_some_and(|s| !s.is_retired()) {
            return false;
        }
        stores.insert(key, store);
        true
    }

    /// Whether `store` is kept by a view (see [`Registry::add_view`]).
    pub fn is_view(&self, store: &Store) -> bool {
        let i = store.info();
        self.views
            .read()
            .contains(&(i.group.clone(), i.version.clone(), i.resource.clone()))
    }

    /// The stores the source itself keeps (every store but views), for sources that
    /// advance all their stores' clocks at once.
    pub fn source_stores(&self) -> Vec<Arc<Store>> {
        let views = self.views.read();
        self.stores
            .read()
            .iter()
            .filter(|(k, _)| !views.contains(*k))
            .map(|(_, s)| s.clone())
            .collect()
    }

    /// Group/version pairs served, in order (core first), retired resources left out.
    pub fn group_versions(&self) -> Vec<(String, String)> {
        let mut gvs: Vec<(String, String)> = self
            .stores
            .read()
            .iter()
            .filter(|(_, s)| !s.is_retired())
            .map(|((g, v, _), _)| (g.clone(), v.clone()))
            .collect();
        gvs.dedup();
        // Within a group, kube-apiserver's preference: GA, then beta, then alpha, higher
        // numbers first (v2 > v1 > v1beta2 > v1beta1 > v1alpha1 > anything else).
        gvs.sort_by(|(ga, va), (gb, vb)| {
            ga.cmp(gb)
                .then_with(|| version_priority(vb).cmp(&version_priority(va)))
                .then_with(|| va.cmp(vb))
        });
        gvs
    }
}

/// Sort key of a Kubernetes API version: (stability, major, minor); larger is preferred.
fn version_priority(v: &str) -> (u8, u32, u32) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let Ok(major) = rest[..digits].parse::<u32>() else {
        return (0, 0, 0);
    };
    let tail = &rest[digits..];
    let (stability, minor) = match tail {
        "" => (3, 0),
        _ if tail.starts_with("beta") => (2, tail[4..].parse().unwrap_or(0)),
        _ if tail.starts_with("alpha") => (1, tail[5..].parse().unwrap_or(0)),
        _ => (0, 0),
    };
    (stability, major, minor)
}
