//! `Registry`: the served resource types and the store behind each.

use std::collections::BTreeMap;
use std::sync::Arc;

use listwatch_core::ResourceInfo;
use listwatch_store::{Store, StoreConfig};

/// Every served resource with its store, looked up by (group, version, resource).
#[derive(Clone, Default)]
pub struct Registry {
    stores: BTreeMap<(String, String, String), Arc<Store>>,
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
        Registry { stores }
    }

    /// The store for `group/version/resource`.
    pub fn get(&self, group: &str, version: &str, resource: &str) -> Option<&Arc<Store>> {
        self.stores
            .get(&(group.to_string(), version.to_string(), resource.to_string()))
    }

    /// The store whose kind is `kind` in `api_version` (`v1`, `apps/v1`).
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<&Arc<Store>> {
        self.stores
            .values()
            .find(|s| s.info().kind == kind && s.info().api_version() == api_version)
    }

    /// All stores, ordered by group, version, resource.
    pub fn stores(&self) -> impl Iterator<Item = &Arc<Store>> {
        self.stores.values()
    }

    /// Group/version pairs served, in order (core first).
    pub fn group_versions(&self) -> Vec<(String, String)> {
        let mut gvs: Vec<(String, String)> = self
            .stores
            .keys()
            .map(|(g, v, _)| (g.clone(), v.clone()))
            .collect();
        gvs.dedup();
        gvs
    }
}
