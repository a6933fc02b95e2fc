//! Views: resources kube-apiserver serves by converting, on read, objects it stores as
//! another resource (`events.k8s.io/v1` Events are stored `core/v1` Events, `autoscaling/v1`
//! HPAs are stored `autoscaling/v2` ones). Here each view is a store of its own, kept in
//! step with its source store by a task that follows the source's event log and ingests
//! each changed object converted once, at the same resourceVersion. LIST, GET, WATCH,
//! continue tokens, RV waits, protobuf, Tables and field selectors then read it like any
//! other store, and conversion costs once per change, not once per request.
//!
//! [`Views`] wraps any [`Source`]: it adds the view stores to the source's registry, runs
//! one task per view (ended by [`Source::close`]), answers a view's consistent reads,
//! progress requests and readiness through its source store, and refuses writes to a
//! view (405, not written through yet).

mod event;
mod hpa;
mod json;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use listwatch_core::{ApiError, ResourceInfo};
use listwatch_store::{
    Change, Event, EventType, Record, Store, StoreConfig, StoreError, WatchCursor,
};
use parking_lot::Mutex;
use serde_json::Value;
use tokio::task::JoinHandle;

use crate::Registry;
use crate::source::{BoxFuture, Source, SourceWriter, WriteRequest, WriteResult};

pub use event::core_event_to_events_v1;
pub use hpa::hpa_v2_to_v1;
pub use json::ConvertError;

/// One converter: stored object JSON (the source's version) → the view's JSON.
type Convert = fn(&Value) -> Result<Vec<u8>, ConvertError>;

/// What `convert` makes of the JSON text `stored`, as text (the converters' unit tests).
#[cfg(test)]
fn converted_text(convert: Convert, stored: &str) -> String {
    let v: Value = serde_json::from_str(stored).unwrap();
    String::from_utf8(convert(&v).unwrap()).unwrap()
}

/// A resource served as a conversion of another: where it comes from and how.
struct ViewDef {
    /// `(group, version, resource)` of the source store.
    source: (&'static str, &'static str, &'static str),
    info: fn() -> ResourceInfo,
    convert: Convert,
}

const VIEWS: &[ViewDef] = &[
    ViewDef {
        source: ("", "v1", "events"),
        info: event::info,
        convert: |v| event::core_event_to_events_v1(v),
    },
    ViewDef {
        source: ("autoscaling", "v2", "horizontalpodautoscalers"),
        info: hpa::info,
        convert: |v| hpa::hpa_v2_to_v1(v),
    },
];

/// The resources served as views, as [`Views::start`] adds them (discovery, docs).
pub fn view_resources() -> Vec<ResourceInfo> {
    VIEWS.iter().map(|d| (d.info)()).collect()
}

struct Link {
    source: Arc<Store>,
    target: Arc<Store>,
}

/// A [`Source`] that also serves views of some of its resources (see the module docs).
pub struct Views {
    inner: Arc<dyn Source>,
    links: Vec<Link>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Views {
    /// Wraps `inner`, adding a view store for each view whose source resource `inner`
    /// serves, and starts the tasks that keep them. Must run inside a tokio runtime.
    pub fn start(inner: Arc<dyn Source>, config: &StoreConfig) -> Arc<Views> {
        let registry = inner.registry().clone();
        let mut links = Vec::new();
        let mut tasks = Vec::new();
        for def in VIEWS {
            let (g, v, r) = def.source;
            let Some(source) = registry.get(g, v, r) else {
                continue;
            };
            let Some(target) = registry.add_view((def.info)(), source.rv(), config) else {
                continue;
            };
            // The first conversion is done here, so a view is ready as soon as its source.
            let cursor = sync(&source, &target, def.convert);
            tasks.push(tokio::spawn(follow(
                source.clone(),
                target.clone(),
                def.convert,
                cursor,
            )));
            links.push(Link { source, target });
        }
        Arc::new(Views {
            inner,
            links,
            tasks: Mutex::new(tasks),
        })
    }

    /// The source store `store` is a view of, or `store` itself.
    fn origin<'a>(&'a self, store: &'a Store) -> &'a Store {
        self.links
            .iter()
            .find(|l| std::ptr::eq(Arc::as_ptr(&l.target), store))
            .map_or(store, |l| &l.source)
    }

    fn is_view(&self, store: &Store) -> bool {
        !std::ptr::eq(self.origin(store), store)
    }
}

impl Source for Views {
    fn registry(&self) -> &Registry {
        self.inner.registry()
    }

    fn consistent_revision<'a>(&'a self, store: &'a Store) -> BoxFuture<'a, Result<u64, ApiError>> {
        // A view reaches a revision right after its source store does.
        self.inner.consistent_revision(self.origin(store))
    }

    fn request_progress(&self, store: &Store) {
        self.inner.request_progress(self.origin(store));
    }

    fn is_ready(&self, store: &Store) -> bool {
        let origin = self.origin(store);
        self.inner.is_ready(origin) && (std::ptr::eq(origin, store) || store.is_ready())
    }

    fn skipped_values(&self) -> Vec<(String, &'static str, u64)> {
        self.inner.skipped_values()
    }

    // The wrapped source's own metrics (the upstream source's probes, relists, resumes):
    // without this they never reached `/metrics`, where docs/gateway.md says they are.
    fn metrics_text(&self) -> String {
        self.inner.metrics_text()
    }

    fn writer(&self) -> Option<&dyn SourceWriter> {
        self.inner.writer().map(|_| self as &dyn SourceWriter)
    }

    fn refuse_write(&self) -> ApiError {
        self.inner.refuse_write()
    }

    fn health(&self) -> Result<(), String> {
        self.inner.health()
    }

    fn health_check_name(&self) -> &'static str {
        self.inner.health_check_name()
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let tasks: Vec<JoinHandle<()>> = std::mem::take(&mut *self.tasks.lock());
            for t in &tasks {
                t.abort();
            }
            for t in tasks {
                let _ = t.await;
            }
            self.inner.close().await;
        })
    }
}

/// Writes to a view are refused (405): kube-apiserver converts them into the stored
/// version, which is not written here yet.
impl SourceWriter for Views {
    fn write<'a>(
        &'a self,
        write: WriteRequest<'a>,
    ) -> BoxFuture<'a, Result<WriteResult, ApiError>> {
        match self.inner.writer() {
            Some(w) if !self.is_view(write.store) => w.write(write),
            _ => Box::pin(async { Err(ApiError::MethodNotAllowed) }),
        }
    }
}

/// How many source events one step converts at most (one RV is never split).
const BATCH: usize = 512;

/// Converts `source`'s current snapshot into `target` and opens a cursor on the source
/// after it; `None` when the source's history moved on meanwhile (sync again).
fn sync(source: &Arc<Store>, target: &Store, convert: Convert) -> Option<WatchCursor> {
    let snap = source.current();
    let records: Vec<Record> = snap
        .items()
        .values()
        .filter_map(|r| converted(target, r, convert))
        .collect();
    target.replace(snap.rv(), records);
    target.set_ready(true);
    source.watch_from(snap.rv()).ok()
}

/// Keeps `target` equal to `source` converted: from `cursor` (opened by [`sync`]), every
/// event of the source's log and every progress mark; a full [`sync`] again whenever the
/// source's history no longer reaches back to where the view is (the source relisted).
async fn follow(
    source: Arc<Store>,
    target: Arc<Store>,
    convert: Convert,
    mut cursor: Option<WatchCursor>,
) {
    loop {
        let Some(mut c) = cursor.take() else {
            // A resync right after a failed one must not starve the runtime.
            tokio::task::yield_now().await;
            cursor = sync(&source, &target, convert);
            continue;
        };
        let mut events: Vec<Arc<Event>> = Vec::new();
        loop {
            events.clear();
            if c.poll(BATCH, &mut events).is_err() {
                break; // the source's log moved past us (a relist): convert it all again
            }
            if !events.is_empty() && apply(&target, &events, convert).is_err() {
                break;
            }
            target.progress(c.rv());
            if events.len() >= BATCH {
                continue;
            }
            // New events, or a progress mark on the source (its clock moves, its log not).
            let next = target.rv() + 1;
            tokio::select! {
                _ = c.changed() => {}
                _ = source.wait_for(next, Duration::from_secs(3600)) => {}
            }
        }
        target.set_ready(false);
    }
}

fn converted(target: &Store, r: &Record, convert: Convert) -> Option<Record> {
    let out = serde_json::from_slice::<Value>(r.bytes())
        .map_err(|e| ConvertError::Json(e.to_string()))
        .and_then(|v| convert(&v));
    let json = match out {
        Ok(json) => json,
        Err(e) => {
            tracing::warn!(resource = %target.info().resource, key = %r.key(), error = %e, "not converted");
            return None;
        }
    };
    match Record::ingest(&json, target.info(), r.rv()) {
        Ok(rec) => Some(rec),
        Err(e) => {
            tracing::warn!(resource = %target.info().resource, key = %r.key(), error = %e, "converted object not ingested");
            None
        }
    }
}

fn apply(target: &Store, events: &[Arc<Event>], convert: Convert) -> Result<(), StoreError> {
    let current = target.current();
    let mut put: HashSet<String> = HashSet::new();
    let mut changes = Vec::with_capacity(events.len());
    for e in events {
        let key = target.info().key(e.object.namespace(), e.object.name());
        let held = current.get(&key).is_some() || put.contains(&key);
        match e.kind {
            EventType::Added | EventType::Modified => {
                match converted(target, &e.object, convert) {
                    Some(rec) => {
                        put.insert(key);
                        changes.push(Change::Put(rec));
                    }
                    // No longer representable: the view drops it rather than keep it stale.
                    None if held => {
                        put.remove(&key);
                        changes.push(Change::Delete { key, rv: e.rv });
                    }
                    None => {}
                }
            }
            EventType::Deleted if held => {
                put.remove(&key);
                changes.push(Change::Delete { key, rv: e.rv });
            }
            EventType::Deleted => {}
        }
    }
    target.apply(changes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source with metrics of its own and no resources.
    struct Metered(Registry);

    impl Source for Metered {
        fn registry(&self) -> &Registry {
            &self.0
        }

        fn consistent_revision<'a>(&'a self, _: &'a Store) -> BoxFuture<'a, Result<u64, ApiError>> {
            Box::pin(async { Ok(1) })
        }

        fn metrics_text(&self) -> String {
            "# TYPE listwatch_metered counter\nlistwatch_metered_total 7\n".into()
        }
    }

    #[test]
    fn the_wrapped_source_s_metrics_are_the_views_metrics() {
        let views = Views::start(
            Arc::new(Metered(Registry::default())),
            &StoreConfig::default(),
        );
        assert_eq!(
            views.metrics_text(),
            "# TYPE listwatch_metered counter\nlistwatch_metered_total 7\n"
        );
    }
}
