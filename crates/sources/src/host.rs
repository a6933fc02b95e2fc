//! `HostFedSource`: a source fed by an embedding host (an apiserver fork) that keeps its own
//! write path. The host pushes committed changes with the RVs it committed them at and
//! progress marks; listwatch never invents RVs. When the host's stream is inconsistent (a
//! gap it reports, an RV going backwards, a delete of an unknown object), the resource
//! relists through the host's callback — every open watch on it ends with 410 and clients
//! relist, exactly as after a kube-apiserver watch-cache reset.

use std::sync::Arc;

use listwatch_core::ResourceInfo;
use listwatch_store::{Change, Record, Store, StoreError};
use parking_lot::Mutex;

use crate::Registry;
use crate::source::{BoxFuture, Source};

/// The host's answer to a relist: the RV it read at and every object's JSON.
pub struct Relisted {
    /// The revision the list was read at.
    pub rv: u64,
    /// Every object of the resource, as JSON.
    pub objects: Vec<Vec<u8>>,
}

/// Called to read a resource's full state when its stream can no longer be trusted.
pub type RelistFn = dyn Fn(&ResourceInfo) -> Result<Relisted, String> + Send + Sync;

/// A committed change reported by the host.
#[derive(Clone, Debug)]
pub enum HostChange<'a> {
    /// Created or updated object (its JSON; the RV is spliced in by listwatch).
    Put(&'a [u8]),
    /// Deleted object.
    Delete {
        /// Namespace ("" for cluster-scoped).
        namespace: &'a str,
        /// Name.
        name: &'a str,
    },
}

/// Why a fed change was not applied as is.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FeedError {
    /// No served resource has this group/version/resource.
    #[error("resource {0} is not served")]
    UnknownResource(String),
    /// The object could not be ingested (bad JSON, no name).
    #[error("object rejected: {0}")]
    BadObject(String),
    /// The stream was inconsistent and the resource was relisted instead.
    #[error("inconsistent stream for {resource} ({why}); relisted at {rv}")]
    Relisted {
        /// The resource.
        resource: String,
        /// What was wrong.
        why: String,
        /// RV of the relist.
        rv: u64,
    },
    /// The stream was inconsistent and the relist failed; the resource keeps its last
    /// consistent state and stays unready until a relist succeeds.
    #[error("inconsistent stream for {resource} ({why}); relist failed: {error}")]
    RelistFailed {
        /// The resource.
        resource: String,
        /// What was wrong.
        why: String,
        /// The callback's error.
        error: String,
    },
}

/// A source fed by the host.
pub struct HostFedSource {
    registry: Registry,
    relist: Box<RelistFn>,
    /// Newest RV the host has reported (changes or progress): a consistent read waits for it.
    revision: Mutex<u64>,
}

impl HostFedSource {
    /// A source over `registry` starting at `rv`, with the host's relist callback.
    pub fn new(registry: Registry, rv: u64, relist: Box<RelistFn>) -> Arc<Self> {
        Arc::new(HostFedSource {
            registry,
            relist,
            revision: Mutex::new(rv),
        })
    }

    /// The registry this source feeds.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The newest RV the host reported.
    pub fn revision(&self) -> u64 {
        *self.revision.lock()
    }

    fn store(&self, group: &str, version: &str, resource: &str) -> Result<Arc<Store>, FeedError> {
        self.registry
            .get(group, version, resource)
            .ok_or_else(|| FeedError::UnknownResource(format!("{group}/{version}/{resource}")))
    }

    /// Applies changes the host committed at `rv` (all of one transaction).
    pub fn apply(
        &self,
        group: &str,
        version: &str,
        resource: &str,
        rv: u64,
        changes: &[HostChange<'_>],
    ) -> Result<(), FeedError> {
        let store = self.store(group, version, resource)?;
        let mut batch = Vec::with_capacity(changes.len());
        for c in changes {
            batch.push(match c {
                HostChange::Put(json) => Change::Put(
                    Record::ingest(json, store.info(), rv)
                        .map_err(|e| FeedError::BadObject(e.to_string()))?,
                ),
                HostChange::Delete { namespace, name } => Change::Delete {
                    key: store.info().key(namespace, name),
                    rv,
                },
            });
        }
        let mut rev = self.revision.lock();
        match store.apply(batch) {
            Ok(()) => {
                *rev = (*rev).max(rv);
                drop(rev);
                self.progress_all(rv);
                Ok(())
            }
            Err(e @ (StoreError::Backwards { .. } | StoreError::UnknownDelete(_))) => {
                drop(rev);
                self.relist_store(&store, e.to_string())
            }
            Err(e) => Err(FeedError::BadObject(e.to_string())),
        }
    }

    /// "Nothing happened up to `rv`" for every resource: waits on that RV complete and
    /// bookmarks may report it.
    pub fn progress(&self, rv: u64) {
        let mut rev = self.revision.lock();
        *rev = (*rev).max(rv);
        drop(rev);
        self.progress_all(rv);
    }

    fn progress_all(&self, rv: u64) {
        // Views follow their source store's marks themselves.
        for s in self.registry.source_stores() {
            s.progress(rv);
        }
    }

    /// The host lost track of `resource` (e.g. its own watch broke): relist it now.
    pub fn gap(&self, group: &str, version: &str, resource: &str) -> Result<(), FeedError> {
        let store = self.store(group, version, resource)?;
        self.relist_store(&store, "gap reported by the host".into())
    }

    fn relist_store(&self, store: &Arc<Store>, why: String) -> Result<(), FeedError> {
        let info = store.info().clone();
        tracing::warn!(resource = %info.resource, %why, "inconsistent host stream; relisting");
        let relisted = (self.relist)(&info).map_err(|error| FeedError::RelistFailed {
            resource: info.resource.clone(),
            why: why.clone(),
            error,
        })?;
        let mut records = Vec::with_capacity(relisted.objects.len());
        for o in &relisted.objects {
            let rv = Record::existing_rv(o)
                .filter(|rv| *rv <= relisted.rv)
                .unwrap_or(relisted.rv);
            records.push(
                Record::ingest(o, &info, rv).map_err(|e| FeedError::BadObject(e.to_string()))?,
            );
        }
        store.replace(relisted.rv, records);
        let mut rev = self.revision.lock();
        *rev = (*rev).max(relisted.rv);
        Err(FeedError::Relisted {
            resource: info.resource.clone(),
            why,
            rv: relisted.rv,
        })
    }
}

impl Source for HostFedSource {
    fn registry(&self) -> &Registry {
        &self.registry
    }

    fn consistent_revision<'a>(
        &'a self,
        _: &'a Store,
    ) -> BoxFuture<'a, Result<u64, listwatch_core::ApiError>> {
        // The host reports changes and progress as it commits them: its newest report is
        // the newest state there is to read.
        let rv = HostFedSource::revision(self);
        Box::pin(async move { Ok(rv) })
    }
}
