//! `EmbeddedSource`: the default, in-process source of truth. One revision counter across
//! all resources (like etcd), optimistic concurrency on `metadata.resourceVersion`, and
//! every committed write applied to the resource's store before the write returns.

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use listwatch_core::{ApiError, ObjectRef, Propagation, ResourceInfo, WriteOptions};
use listwatch_store::{Change, Record, Store, StoreConfig};
use parking_lot::Mutex;

use crate::objects::DeleteStep;
use crate::source::{BoxFuture, Source, SourceWriter, WriteOp, WriteRequest, WriteResult};
use crate::{Registry, crd, objects};

/// The embedded store: serves writes and keeps the registry's stores current.
pub struct EmbeddedSource {
    registry: Registry,
    revision: Mutex<u64>,
    /// The custom resources served now, by (group, version, resource): what the stored
    /// CRDs serve (kept by [`EmbeddedSource::reconcile_crds`]).
    custom: Mutex<BTreeSet<crd::Key>>,
}

impl EmbeddedSource {
    /// A source over `registry`, continuing from its stores' newest RV.
    pub fn new(registry: Registry) -> Arc<Self> {
        let rv = registry.stores().iter().map(|s| s.rv()).max().unwrap_or(1);
        let source = Arc::new(EmbeddedSource {
            registry,
            revision: Mutex::new(rv),
            custom: Mutex::new(BTreeSet::new()),
        });
        source.reconcile_crds(rv);
        source
    }

    /// The registry this source feeds.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The newest committed revision (what a consistent read must reach).
    pub fn revision(&self) -> u64 {
        *self.revision.lock()
    }

    /// Bulk-loads objects into `store` (one revision each, as etcd would assign), adding
    /// to what it holds; no watch events are generated. Returns how many were loaded.
    pub fn seed(
        &self,
        store: &Arc<Store>,
        objects: impl IntoIterator<Item = Vec<u8>>,
    ) -> Result<usize, String> {
        let mut records = Vec::new();
        for obj in objects {
            records.push(self.ingest_for_seed(store, &obj)?);
        }
        let n = records.len();
        self.install(store, records);
        Ok(n)
    }

    /// Ingests one object of a bulk load at the next revision (see [`Self::install`]).
    pub fn ingest_for_seed(&self, store: &Store, json: &[u8]) -> Result<Record, String> {
        let mut rev = self.revision.lock();
        let rec = Record::ingest(json, store.info(), *rev + 1)
            .map_err(|e| format!("{}: {e}", store.info().resource))?;
        *rev += 1;
        Ok(rec)
    }

    /// Adds bulk-loaded records to `store` at the current revision, without events.
    pub fn install(&self, store: &Arc<Store>, records: Vec<Record>) {
        let rev = self.revision.lock();
        let existing: Vec<Arc<Record>> = store.current().items().values().cloned().collect();
        store.replace(
            *rev,
            existing
                .into_iter()
                .chain(records.into_iter().map(Arc::new)),
        );
        let rv = *rev;
        drop(rev);
        self.progress_others(store, rv);
        if is_crds(store) {
            self.reconcile_crds(rv);
        }
    }

    fn progress_others(&self, store: &Arc<Store>, rv: u64) {
        // Views follow their source store in their own time: a mark here would get ahead
        // of the converted change.
        for s in self.registry.source_stores() {
            if !Arc::ptr_eq(&s, store) {
                s.progress(rv);
            }
        }
    }

    /// POST: creates an object (`generateName`, `uid`, `creationTimestamp` filled in).
    pub fn create(
        &self,
        store: &Arc<Store>,
        namespace: Option<&str>,
        body: &[u8],
    ) -> Result<WriteResult, ApiError> {
        self.create_with(store, namespace, body, WriteOptions::default())
    }

    /// [`Self::create`] with `options` (dry run: the object as it would be created, no
    /// `resourceVersion` yet, as kube-apiserver answers).
    pub fn create_with(
        &self,
        store: &Arc<Store>,
        namespace: Option<&str>,
        body: &[u8],
        options: WriteOptions,
    ) -> Result<WriteResult, ApiError> {
        let info = store.info().clone();
        let new = objects::prepare_create(&info, namespace, body)?;
        if let Some(ns) = namespace
            && self.namespace_terminating(ns)
        {
            // kube's NamespaceLifecycle admission.
            return Err(ApiError::ServerResponse {
                code: 403,
                message: format!(
                    "{} \"{}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                    ObjectRef::new(&info, &new.name).group_resource(),
                    new.name
                ),
            });
        }
        let mut rev = self.revision.lock();
        if store.current().get(&new.key).is_some() {
            return Err(ApiError::AlreadyExists(ObjectRef::new(&info, &new.name)));
        }
        if options.dry_run {
            // Checked as the commit would check it; the answer is the prepared object.
            Record::ingest(&new.json, &info, *rev + 1)
                .map_err(|e| ApiError::BadRequest(e.to_string()))?;
            return Ok(WriteResult {
                code: 201,
                body: Bytes::from(new.json),
            });
        }
        self.commit_answering(store, &mut rev, &new.json, 201)
    }

    /// PUT: replaces an object; a stale `metadata.resourceVersion` is a 409 Conflict. With
    /// `options` (dry run: the object as it would be, at the `resourceVersion` it has now).
    pub fn update_with(
        &self,
        store: &Arc<Store>,
        namespace: Option<&str>,
        name: &str,
        body: &[u8],
        options: WriteOptions,
    ) -> Result<WriteResult, ApiError> {
        let info = store.info().clone();
        let replacement = objects::prepare_update(&info, namespace, name, body)?;
        let mut rev = self.revision.lock();
        let current = store.current();
        let Some(existing) = current.get(&replacement.key) else {
            return Err(ApiError::NotFound(ObjectRef::new(&info, name)));
        };
        let json = replacement.merge(&info, existing.bytes(), existing.rv())?;
        if objects::deletes_on_update(&info, &json) {
            // The last finalizer of a deleting object is gone: the update deletes it.
            let answer = answer_at(&json, &info, *rev + 1)?;
            if !options.dry_run {
                self.remove(store, &mut rev, replacement.key.clone());
                drop(rev);
                self.collect_garbage(&json, namespace, Propagation::Background);
                if let Some(ns) = namespace {
                    self.finish_namespace(ns);
                }
            }
            return Ok(answer);
        }
        if options.dry_run {
            return answer_at(&json, &info, existing.rv());
        }
        self.commit_answering(store, &mut rev, &json, 200)
    }

    /// DELETE: removes an object and answers with a success `Status`. With `options` (dry
    /// run: the same answer, nothing removed).
    pub fn delete_with(
        &self,
        store: &Arc<Store>,
        namespace: Option<&str>,
        name: &str,
        options: WriteOptions,
    ) -> Result<WriteResult, ApiError> {
        let info = store.info().clone();
        let key = info.key(namespace.unwrap_or(""), name);
        let mut rev = self.revision.lock();
        let Some(existing) = store.current().get(&key).cloned() else {
            return Err(ApiError::NotFound(ObjectRef::new(&info, name)));
        };
        match objects::delete_step(&info, existing.bytes())? {
            // Still finalized: answered with the object as it is, as kube does.
            DeleteStep::Pending => Ok(WriteResult {
                code: 200,
                body: existing.bytes().clone(),
            }),
            DeleteStep::Mark(json) => {
                if options.dry_run {
                    return answer_at(&json, &info, existing.rv());
                }
                let body = self.commit(store, &mut rev, &json)?;
                drop(rev);
                if objects::is_namespace(&info) {
                    // The namespace controller's work, in-process: delete what the
                    // namespace holds, then the namespace once nothing is left.
                    self.empty_namespace(name);
                }
                Ok(WriteResult { code: 200, body })
            }
            DeleteStep::Remove => {
                if !options.dry_run {
                    self.remove(store, &mut rev, key);
                    drop(rev);
                    self.collect_garbage(existing.bytes(), namespace, options.propagation);
                    if let Some(ns) = namespace {
                        self.finish_namespace(ns);
                    }
                }
                Ok(WriteResult {
                    code: 200,
                    body: objects::delete_status(&info, name, existing.bytes()),
                })
            }
        }
    }

    /// The garbage collector's work for a removed owner (`owner`: its JSON), in-process:
    /// its dependents (objects whose `ownerReferences` name its uid, in its namespace, or
    /// anywhere for a cluster-scoped owner) are deleted (Background, Foreground) or lose
    /// that reference (Orphan).
    fn collect_garbage(&self, owner: &[u8], namespace: Option<&str>, propagation: Propagation) {
        let Some(uid) = serde_json::from_slice::<serde_json::Value>(owner)
            .ok()
            .and_then(|v| Some(v.get("metadata")?.get("uid")?.as_str()?.to_string()))
        else {
            return;
        };
        let names_owner = |refs: &serde_json::Value| {
            refs.as_array().is_some_and(|a| {
                a.iter()
                    .any(|r| r.get("uid").and_then(|u| u.as_str()) == Some(uid.as_str()))
            })
        };
        // A namespace's objects are one key range (`ns/name`); no namespace: every object.
        let prefix = namespace.map_or(String::new(), namespace_prefix);
        for store in self.registry.source_stores() {
            let snap = store.current();
            let dependents: Vec<Arc<Record>> = snap
                .range(&prefix, false, &prefix)
                .filter(|r| {
                    serde_json::from_slice::<serde_json::Value>(r.bytes())
                        .ok()
                        .is_some_and(|v| names_owner(&v["metadata"]["ownerReferences"]))
                })
                .cloned()
                .collect();
            for dep in dependents {
                let ns = Some(dep.namespace()).filter(|n| !n.is_empty());
                let result = match propagation {
                    Propagation::Orphan => self.orphan(&store, &dep, &uid),
                    _ => self
                        .delete_with(&store, ns, dep.name(), WriteOptions::default())
                        .map(|_| ()),
                };
                if let Err(e) = result {
                    tracing::warn!(name = dep.name(), error = %e, "collecting a dependent");
                }
            }
        }
    }

    /// Removes the `ownerReferences` entry naming `uid` from `dep`.
    fn orphan(&self, store: &Arc<Store>, dep: &Record, uid: &str) -> Result<(), ApiError> {
        let mut v: serde_json::Value =
            serde_json::from_slice(dep.bytes()).map_err(|e| ApiError::Internal(e.to_string()))?;
        if let Some(refs) = v["metadata"]["ownerReferences"].as_array_mut() {
            refs.retain(|r| r.get("uid").and_then(|u| u.as_str()) != Some(uid));
        }
        // kube's GC patches the reference out; an emptied list is omitted, as Go omits it.
        if v["metadata"]["ownerReferences"]
            .as_array()
            .is_some_and(|a| a.is_empty())
            && let Some(m) = v["metadata"].as_object_mut()
        {
            m.remove("ownerReferences");
        }
        let json = serde_json::to_vec(&v).map_err(|e| ApiError::Internal(e.to_string()))?;
        let mut rev = self.revision.lock();
        self.commit(store, &mut rev, &json).map(|_| ())
    }

    /// Removes `key` from `store` at the next revision.
    fn remove(&self, store: &Arc<Store>, rev: &mut u64, key: String) {
        *rev += 1;
        let rv = *rev;
        for s in std::iter::once(store.clone()).chain(self.other_versions(store)) {
            let key = key.clone();
            if let Err(e) = s.apply([Change::Delete { key, rv }]) {
                tracing::error!(error = %e, "removing an object from its store");
            }
        }
        self.progress_others(store, rv);
        if is_crds(store) {
            self.reconcile_crds(rv);
        }
    }

    /// For a custom resource, the stores of its other served versions: one object stored
    /// once is read in every served version (a CRD's `None` conversion: only `apiVersion`
    /// differs). Empty for every other resource.
    fn other_versions(&self, store: &Store) -> Vec<Arc<Store>> {
        let i = store.info();
        let custom = self.custom.lock();
        let is_custom = custom
            .iter()
            .any(|(g, v, r)| *g == i.group && *v == i.version && *r == i.resource);
        if !is_custom {
            return Vec::new();
        }
        custom
            .iter()
            .filter(|(g, v, r)| *g == i.group && *r == i.resource && *v != i.version)
            .filter_map(|(g, v, r)| self.registry.get(g, v, r))
            .filter(|s| !s.is_retired())
            .collect()
    }

    /// Makes the served custom resources what the stored CRDs serve, as kube-apiserver's
    /// CRD handler does: a newly served version gets an empty store at `rv`; a version no
    /// longer served (its CRD deleted, or the version unserved) is retired, its watches
    /// drained over [`crd::DRAIN`] and its objects gone with it (kube deletes a deleted
    /// CRD's objects).
    fn reconcile_crds(&self, rv: u64) {
        let Some(crds) =
            self.registry
                .get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        else {
            return;
        };
        let wanted = crd::served_by(&crds.current());
        let mut custom = self.custom.lock();
        custom.retain(|k| {
            let served = wanted.contains_key(k);
            if !served {
                crd::retire(&self.registry, k);
            }
            served
        });
        for (k, info) in wanted {
            if custom.contains(&k) {
                continue;
            }
            // A built-in of the same name (or one given with --resources) wins.
            if self
                .registry
                .add(info, rv, &StoreConfig::default())
                .is_some()
            {
                tracing::info!(group = %k.0, version = %k.1, resource = %k.2, "custom resource served");
                custom.insert(k);
            }
        }
    }

    /// The namespaces store, when namespaces are served.
    fn namespaces(&self) -> Option<Arc<Store>> {
        self.registry.get("", "v1", "namespaces")
    }

    /// Whether namespace `ns` exists and is being deleted.
    fn namespace_terminating(&self, ns: &str) -> bool {
        self.namespaces()
            .and_then(|s| s.current().get(ns).cloned())
            .and_then(|r| serde_json::from_slice::<serde_json::Value>(r.bytes()).ok())
            .is_some_and(|v| objects::is_deleting(&v))
    }

    /// Deletes every object in namespace `ns` (finalized ones are marked and stay until
    /// their finalizers go), then finishes the namespace if it is empty.
    fn empty_namespace(&self, ns: &str) {
        for store in self.registry.source_stores() {
            if !store.info().namespaced {
                continue;
            }
            let prefix = namespace_prefix(ns);
            let names: Vec<String> = store
                .current()
                .range(&prefix, false, &prefix)
                .map(|r| r.name().to_string())
                .collect();
            for name in names {
                if let Err(e) = self.delete_with(&store, Some(ns), &name, WriteOptions::default()) {
                    tracing::warn!(namespace = ns, name, error = %e, "deleting namespace content");
                }
            }
        }
        self.finish_namespace(ns);
    }

    /// A terminating namespace with nothing left in it loses its `kubernetes` finalizer
    /// (and goes, when it has no other finalizers), as the namespace controller finalizes it.
    fn finish_namespace(&self, ns: &str) {
        let Some(store) = self.namespaces() else {
            return;
        };
        let mut rev = self.revision.lock();
        let Some(record) = store.current().get(ns).cloned() else {
            return;
        };
        let Ok(mut obj) = serde_json::from_slice::<serde_json::Value>(record.bytes()) else {
            return;
        };
        if !objects::is_deleting(&obj) {
            return;
        }
        let prefix = namespace_prefix(ns);
        let occupied = self.registry.source_stores().iter().any(|s| {
            s.info().namespaced && s.current().range(&prefix, false, &prefix).next().is_some()
        });
        if occupied {
            return;
        }
        if objects::finalizers(&obj).is_empty() {
            self.remove(&store, &mut rev, record.key().to_string());
            return;
        }
        obj["spec"]["finalizers"] = serde_json::json!([]);
        if let Ok(json) = serde_json::to_vec(&obj)
            && let Err(e) = self.commit(&store, &mut rev, &json)
        {
            tracing::error!(namespace = ns, error = %e, "finalizing a namespace");
        }
    }

    /// [`Self::commit`], answered with `code` and the object as committed (a create's 201, an
    /// update's 200).
    fn commit_answering(
        &self,
        store: &Arc<Store>,
        rev: &mut u64,
        bytes: &[u8],
        code: u16,
    ) -> Result<WriteResult, ApiError> {
        let body = self.commit(store, rev, bytes)?;
        Ok(WriteResult { code, body })
    }

    fn commit(&self, store: &Arc<Store>, rev: &mut u64, bytes: &[u8]) -> Result<Bytes, ApiError> {
        let rv = *rev + 1;
        let crds = is_crds(store);
        // No CRD controllers run here: a written CRD is established at once.
        let established = crds
            .then(|| {
                crd::established(
                    bytes,
                    &listwatch_core::time::rfc3339(listwatch_core::time::unix_now()),
                )
            })
            .flatten();
        let bytes = established.as_deref().unwrap_or(bytes);
        let record = Record::ingest(bytes, store.info(), rv)
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let out = record.bytes().clone();
        let others = self.other_versions(store);
        // The other versions first: each ingest can fail, and nothing is applied then.
        let mut copies = Vec::new();
        for s in &others {
            let json = with_api_version(record.bytes(), &s.info().api_version())?;
            copies.push((
                s,
                Record::ingest(&json, s.info(), rv)
                    .map_err(|e| ApiError::Internal(e.to_string()))?,
            ));
        }
        store
            .apply([Change::Put(record)])
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        for (s, copy) in copies {
            if let Err(e) = s.apply([Change::Put(copy)]) {
                tracing::error!(error = %e, "storing a custom resource's other version");
            }
        }
        *rev = rv;
        self.progress_others(store, rv);
        if crds {
            self.reconcile_crds(rv);
        }
        Ok(out)
    }
}

/// Whether `store` holds CustomResourceDefinitions.
fn is_crds(store: &Store) -> bool {
    let i = store.info();
    i.group == "apiextensions.k8s.io" && i.resource == "customresourcedefinitions"
}

/// `json` with its `apiVersion` set to `api_version`.
fn with_api_version(json: &[u8], api_version: &str) -> Result<Vec<u8>, ApiError> {
    let mut v: serde_json::Value =
        serde_json::from_slice(json).map_err(|e| ApiError::Internal(e.to_string()))?;
    v["apiVersion"] = serde_json::Value::String(api_version.to_string());
    serde_json::to_vec(&v).map_err(|e| ApiError::Internal(e.to_string()))
}

/// A 200 answering with `json` as it would be stored at `rv` (checked as a commit checks it).
fn answer_at(json: &[u8], info: &ResourceInfo, rv: u64) -> Result<WriteResult, ApiError> {
    let record = Record::ingest(json, info, rv).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    Ok(WriteResult {
        code: 200,
        body: record.bytes().clone(),
    })
}

impl Source for EmbeddedSource {
    fn registry(&self) -> &Registry {
        &self.registry
    }

    fn consistent_revision<'a>(&'a self, _: &'a Store) -> BoxFuture<'a, Result<u64, ApiError>> {
        // Every write is applied to its store before it is acknowledged.
        let rv = EmbeddedSource::revision(self);
        Box::pin(async move { Ok(rv) })
    }

    fn writer(&self) -> Option<&dyn SourceWriter> {
        Some(self)
    }
}

impl SourceWriter for EmbeddedSource {
    fn write<'a>(
        &'a self,
        write: WriteRequest<'a>,
    ) -> BoxFuture<'a, Result<WriteResult, ApiError>> {
        let (store, ns, options) = (write.store, write.namespace, write.options);
        let r = match write.op {
            WriteOp::Create { body } => self.create_with(store, ns, body, options),
            WriteOp::Update { name, body } => self.update_with(store, ns, name, body, options),
            WriteOp::Delete { name } => self.delete_with(store, ns, name, options),
        };
        Box::pin(async move { r })
    }
}

/// The key prefix of namespace `ns`'s objects in a namespaced store (keys are `ns/name`):
/// walking it visits that namespace only, not the whole collection.
fn namespace_prefix(ns: &str) -> String {
    format!("{ns}/")
}
