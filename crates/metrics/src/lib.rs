//! listwatch-metrics: one server's Prometheus metrics (kube-apiserver's names where a
//! counterpart exists) and its rate-limited request log. The server tells [`Metrics`] when
//! a response starts and ends ([`Metrics::started`], [`Metrics::finished`]); a scrape reads
//! the stores' stats, the process's RSS and the protobuf sharing window's counters and
//! renders the OpenMetrics text of `/metrics` ([`Metrics::render`]). Nothing here knows
//! HTTP: the server's response bodies do the counting of bytes.

use std::sync::Arc;
use std::time::Instant;

use listwatch_core::Verb;
use listwatch_store::{Store, StoreStats};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry as PromRegistry;

/// Labels of a request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    /// LIST, WATCH, GET, POST, PUT, DELETE.
    verb: String,
    /// Plural resource ("" for discovery and health).
    resource: String,
    /// HTTP status code.
    code: String,
}

/// Verb and resource.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerbResource {
    /// LIST, WATCH, …
    verb: String,
    /// Plural resource.
    resource: String,
}

/// Resource only.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabel {
    /// Plural resource.
    resource: String,
}

/// Resource and why a stored value was skipped.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SkipLabel {
    /// Plural resource.
    resource: String,
    /// `kms`, `encrypted`, `protobuf`, `invalid` or `layout`.
    reason: String,
}

/// All metrics of one server.
pub struct Metrics {
    registry: PromRegistry,
    requests: Family<RequestLabels, Counter>,
    duration: Family<VerbResource, Histogram>,
    bytes: Family<VerbResource, Counter>,
    longrunning: Family<VerbResource, Gauge>,
    watchers: Family<ResourceLabel, Gauge>,
    /// [`STORE_GAUGES`]' families, in its order, each with the stat it shows.
    store_gauges: Vec<(Family<ResourceLabel, Gauge>, StoreStat)>,
    skipped: Family<SkipLabel, Gauge>,
    rss: Gauge,
    /// Protobuf items served from another response's encoding / kept for others (issue 27).
    shared_hits: Counter,
    shared_kept: Counter,
    shared_held: Gauge,
    /// The app's window of shared protobuf items, whose counters the shared_* follow.
    sharing: listwatch_codec::Sharing,
    shared_waits: Counter,
    request_log: RequestLog,
    log_suppressed: Counter,
}

/// The value of a per-resource gauge in a store's stats.
type StoreStat = fn(&StoreStats) -> i64;

/// The per-resource gauges a scrape reads from each store's stats: name, help, value.
#[rustfmt::skip]
const STORE_GAUGES: [(&str, &str, StoreStat); 6] = [
    ("apiserver_storage_objects", "Objects in the store per resource", |s| s.objects as i64),
    ("listwatch_store_object_bytes", "Serialized bytes of stored objects per resource", |s| s.object_bytes as i64),
    ("listwatch_event_log_events", "Events held in the event log per resource", |s| s.events as i64),
    ("listwatch_event_log_oldest_resource_version", "Oldest RV a watch can start from", |s| s.oldest_rv as i64),
    ("listwatch_snapshots_retained", "Retained snapshots per resource", |s| s.snapshots as i64),
    ("listwatch_watch_lag_events", "Events the slowest open watch on the resource has yet to read",
        |s| i64::try_from(s.watcher_lag).unwrap_or(i64::MAX)),
];

/// Request-log lines at INFO per second when the server configures none.
pub const DEFAULT_REQUEST_LOG_PER_SECOND: u32 = 20;

impl Default for Metrics {
    /// The default request-log rate, over a window of shared items of its own.
    fn default() -> Self {
        Self::new(
            DEFAULT_REQUEST_LOG_PER_SECOND,
            listwatch_codec::Sharing::default(),
        )
    }
}

impl Metrics {
    /// Metrics whose request log writes at most `log_per_second` INFO lines a second (0: every
    /// request; the rest go to DEBUG and are counted), reporting `sharing`'s counters.
    pub fn new(log_per_second: u32, sharing: listwatch_codec::Sharing) -> Self {
        let mut registry = PromRegistry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let duration = Family::<VerbResource, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 16))
        });
        let bytes = Family::<VerbResource, Counter>::default();
        let longrunning = Family::<VerbResource, Gauge>::default();
        let watchers = Family::<ResourceLabel, Gauge>::default();
        let skipped = Family::<SkipLabel, Gauge>::default();
        let rss = Gauge::default();
        let (shared_hits, shared_kept, shared_held, shared_waits) = (
            Counter::default(),
            Counter::default(),
            Gauge::default(),
            Counter::default(),
        );
        let log_suppressed = Counter::default();
        // One line per metric: name, help, value.
        macro_rules! register {
            ($($name:literal, $help:literal, $m:ident;)*) => { $(registry.register($name, $help, $m.clone());)* };
        }
        register! {
            "listwatch_request_log_lines_suppressed", "Requests logged at DEBUG only because the INFO request log was at its rate limit", log_suppressed;
            "apiserver_request", "Requests by verb, resource and HTTP code", requests;
            "apiserver_request_duration_seconds", "Time until a response (or stream) ended", duration;
            "listwatch_response_bytes", "Bytes sent in response bodies", bytes;
            "apiserver_longrunning_requests", "LISTs and watches in flight", longrunning;
            "apiserver_registered_watchers", "Open watches per resource", watchers;
        }
        let store_gauges: Vec<_> = STORE_GAUGES
            .iter()
            .map(|&(name, help, stat)| {
                let family = Family::<ResourceLabel, Gauge>::default();
                registry.register(name, help, family.clone());
                (family, stat)
            })
            .collect();
        register! {
            "listwatch_source_values_skipped", "Stored values the source could not read (KMS-encrypted, no key, malformed) and skipped so far", skipped;
            "process_resident_memory_bytes", "Resident set size", rss;
            "listwatch_shared_protobuf_item_hits", "Protobuf list items and initial events copied from a concurrent response's encoding", shared_hits;
            "listwatch_shared_protobuf_items_kept", "Protobuf items a response transcoded and kept for concurrent ones", shared_kept;
            "listwatch_shared_protobuf_item_bytes", "Bytes of protobuf items held for concurrent responses now", shared_held;
            "listwatch_shared_protobuf_item_waits", "Times a protobuf LIST or watch-list waited for an item a concurrent response was transcoding", shared_waits;
        }
        Metrics {
            registry,
            requests,
            duration,
            bytes,
            longrunning,
            watchers,
            store_gauges,
            skipped,
            rss,
            shared_hits,
            shared_kept,
            shared_held,
            shared_waits,
            sharing,
            request_log: RequestLog::new(log_per_second),
            log_suppressed,
        }
    }

    /// A response to `request` starts: a LIST or WATCH answered 200 counts as long-running
    /// (a watch as a registered watcher too) until [`Self::finished`].
    pub fn started(&self, request: &RequestInfo) {
        self.add_longrunning(request, 1);
    }

    /// The response to `request` ended (or was dropped) after `sent` body bytes: counted,
    /// its duration observed, the gauges of [`Self::started`] given back, and the request
    /// log line written (at DEBUG, and counted, beyond the INFO rate).
    pub fn finished(&self, request: &RequestInfo, sent: u64) {
        self.add_longrunning(request, -1);
        let i = request;
        let verb = i.verb.metric_label();
        let vr = VerbResource {
            verb: verb.into(),
            resource: i.resource.clone(),
        };
        let secs = i.start.elapsed().as_secs_f64();
        self.requests
            .get_or_create(&RequestLabels {
                verb: verb.into(),
                resource: i.resource.clone(),
                code: i.code.to_string(),
            })
            .inc();
        self.duration.get_or_create(&vr).observe(secs);
        self.bytes.get_or_create(&vr).inc_by(sent);
        match self.request_log.admit() {
            Some(0) => {
                tracing::info!(verb, resource = %i.resource, uri = %i.uri, code = i.code, ms = secs * 1e3, bytes = sent, "request");
            }
            Some(suppressed) => {
                tracing::info!(verb, resource = %i.resource, uri = %i.uri, code = i.code, ms = secs * 1e3, bytes = sent, suppressed, "request");
            }
            None => {
                self.log_suppressed.inc();
                tracing::debug!(verb, resource = %i.resource, uri = %i.uri, code = i.code, ms = secs * 1e3, bytes = sent, "request");
            }
        }
    }

    /// Adds `by` to the long-running gauges when `request` is one (a LIST or WATCH answered
    /// 200; a watch is a registered watcher too).
    fn add_longrunning(&self, request: &RequestInfo, by: i64) {
        if request.code != 200 || !matches!(request.verb, Verb::List | Verb::Watch) {
            return;
        }
        let resource = request.resource.clone();
        let verb = request.verb.metric_label().into();
        if request.verb == Verb::Watch {
            let watchers = self.watchers.get_or_create(&ResourceLabel {
                resource: resource.clone(),
            });
            watchers.inc_by(by);
        }
        let longrunning = self
            .longrunning
            .get_or_create(&VerbResource { verb, resource });
        longrunning.inc_by(by);
    }

    /// Renders the exposition (OpenMetrics text), refreshing store and process gauges first:
    /// `stores`' stats, the source's `skipped` values (resource, reason, count), and `more`
    /// (other registries' text, without `# EOF`: the source's, the pass-through's) before
    /// the end.
    pub fn render<'a>(
        &self,
        stores: impl Iterator<Item = &'a Arc<Store>>,
        skipped: Vec<(String, &'static str, u64)>,
        more: &str,
    ) -> String {
        for (resource, reason, n) in skipped {
            let l = SkipLabel {
                resource,
                reason: reason.to_string(),
            };
            self.skipped
                .get_or_create(&l)
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        for s in stores {
            let st = s.stats();
            let l = ResourceLabel {
                resource: s.info().resource.clone(),
            };
            for (family, stat) in &self.store_gauges {
                family.get_or_create(&l).set(stat(&st));
            }
        }
        self.rss.set(rss_bytes() as i64);
        let shared = self.sharing.stats();
        // The counters follow the codec's own: add what they gained since the last scrape.
        self.shared_hits
            .inc_by(shared.hits.saturating_sub(self.shared_hits.get()));
        self.shared_kept
            .inc_by(shared.kept.saturating_sub(self.shared_kept.get()));
        self.shared_waits
            .inc_by(shared.waits.saturating_sub(self.shared_waits.get()));
        self.shared_held
            .set(i64::try_from(shared.held).unwrap_or(i64::MAX));
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        let end = out.rfind("# EOF").unwrap_or(out.len());
        out.insert_str(end, more);
        out
    }
}

/// The request log's rate limit: a budget of INFO lines per wall-clock second, so a flood
/// of requests cannot flood the disk; the requests over budget are counted (and logged at
/// DEBUG), and the next INFO line says how many were left out before it.
struct RequestLog {
    per_second: u32,
    started: Instant,
    /// (second since `started`, lines logged in it, lines suppressed since the last one logged)
    window: parking_lot::Mutex<(u64, u32, u64)>,
}

impl RequestLog {
    fn new(per_second: u32) -> Self {
        RequestLog {
            per_second,
            started: Instant::now(),
            window: parking_lot::Mutex::new((0, 0, 0)),
        }
    }

    /// `Some(n)`: log this request at INFO, `n` lines having been suppressed since the last.
    fn admit(&self) -> Option<u64> {
        self.admit_at(self.started.elapsed().as_secs())
    }

    fn admit_at(&self, second: u64) -> Option<u64> {
        if self.per_second == 0 {
            return Some(0);
        }
        let mut w = self.window.lock();
        if w.0 != second {
            w.0 = second;
            w.1 = 0;
        }
        if w.1 < self.per_second {
            w.1 += 1;
            Some(std::mem::take(&mut w.2))
        } else {
            w.2 += 1;
            None
        }
    }
}

/// Resident set size of this process (0 where /proc is unavailable).
pub fn rss_bytes() -> u64 {
    listwatch_core::process::rss_kib("self").map_or(0, |kib| kib * 1024)
}

/// Whether request log lines (this crate's, INFO) are written at all.
pub fn request_log_enabled() -> bool {
    tracing::enabled!(tracing::Level::INFO)
}

/// What is known about a request when its response starts.
pub struct RequestInfo {
    /// The request's verb.
    pub verb: Verb,
    /// Resource label.
    pub resource: String,
    /// Path and query, for the log (exact size: a watch holds it for life; empty when the
    /// log line would not be written).
    pub uri: Box<str>,
    /// HTTP status.
    pub code: u16,
    /// When the request arrived.
    pub start: Instant,
}

#[cfg(test)]
mod tests {
    use super::RequestLog;

    #[test]
    fn the_request_log_keeps_to_its_budget_and_counts_the_rest() {
        let log = RequestLog::new(3);
        let second0: Vec<_> = (0..10).map(|_| log.admit_at(0)).collect();
        assert_eq!(&second0[..3], &[Some(0), Some(0), Some(0)]);
        assert!(second0[3..].iter().all(Option::is_none), "{second0:?}");
        // The next second's first line reports the 7 left out.
        assert_eq!(log.admit_at(1), Some(7));
        assert_eq!(log.admit_at(1), Some(0));
        let unlimited = RequestLog::new(0);
        assert!((0..1000).all(|_| unlimited.admit_at(0) == Some(0)));
    }
}
