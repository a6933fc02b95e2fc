//! `list` (resourceVersion=0, from the cache), `list-paged` (limit=500 + continue),
//! `list-consistent` (resourceVersion unset) and `watchlist` (until the initial-events-end
//! bookmark): each client streams its body through a counter, keeping nothing, and times
//! its first request's connection, and from sending it to the response head and to the first
//! body byte.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::count::{ListCounter, ListMeta};
use crate::events::InitialEvents;
use crate::report::{ClientResult, FirstRequest, ms};
use crate::{Args, Scenario, http};

/// The query of a watch-list as client-go's reflector sends it.
pub const WATCH_LIST: &str =
    "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true";

/// Counts a LIST's items or a watch-list's initial events.
pub enum Counter {
    /// A LIST body.
    List(ListCounter),
    /// A watch-list body, until the initial-events-end bookmark.
    Watch(InitialEvents),
}

impl Counter {
    /// A counter for a LIST (or a watch-list, `watch`) in JSON or protobuf.
    pub fn new(watch: bool, protobuf: bool) -> Self {
        if watch {
            Counter::Watch(InitialEvents::new(protobuf))
        } else {
            Counter::List(ListCounter::new(protobuf))
        }
    }

    /// Reads the next bytes of the body.
    pub fn feed(&mut self, data: &[u8]) -> Result<(), String> {
        match self {
            Counter::List(c) => c.feed(data),
            Counter::Watch(c) => c.feed(data),
        }
    }

    /// Objects so far.
    pub fn objects(&self) -> u64 {
        match self {
            Counter::List(c) => c.items(),
            Counter::Watch(c) => c.added,
        }
    }

    /// A watch-list's initial events are all in.
    pub fn done(&self) -> bool {
        matches!(self, Counter::Watch(c) if c.done)
    }
}

/// `path` with `query` appended.
pub fn with_query(path: &str, query: &str) -> String {
    let sep = if path.contains('?') { '&' } else { '?' };
    format!("{path}{sep}{query}")
}

/// One GET streamed through a counter (`watch`: a watch-list, read until its initial events
/// are in); adds its bytes and requests to `res` and, for a client's first request, the
/// time to connect, and from sending it to the response head and to the first body byte.
/// Returns the objects and, for a LIST, the list's metadata.
pub async fn fetch(
    args: &Args,
    host: &str,
    path: &str,
    watch: bool,
    res: &mut ClientResult,
) -> Result<(u64, ListMeta), String> {
    let accept = http::accept(args.form.protobuf, args.metadata_only, watch);
    let asked = Instant::now();
    let first = res.first.headers_ms.is_none();
    let (status, mut body, timing) =
        http::get_timed(host, path, accept.as_deref(), args.form.gzip, first).await?;
    let sent = timing.sent;
    let head = sent.elapsed();
    res.requests += 1;
    if status != 200 {
        return Err(format!("HTTP {status}"));
    }
    let mut counter = Counter::new(watch, args.form.protobuf);
    let mut first_byte = None;
    let read = async {
        while let Some(chunk) = body.chunk().await? {
            first_byte.get_or_insert_with(|| sent.elapsed());
            counter.feed(&chunk)?;
            if counter.done() {
                break;
            }
            if let Some(rate) = args.read_rate_kib {
                let secs = chunk.len() as f64 / (rate.max(1) as f64 * 1024.0);
                tokio::time::sleep(Duration::from_secs_f64(secs)).await;
            }
        }
        Ok::<_, String>(())
    };
    let r = read.await;
    if first {
        res.first = FirstRequest {
            connect_ms: Some(ms(sent - asked)),
            arrival_ms: timing.arrival.and_then(|a| a.round_trip()).map(ms),
            headers_ms: Some(ms(head)),
            first_byte_ms: first_byte.map(ms),
        };
    }
    res.wire_bytes += body.wire;
    res.body_bytes += body.decoded;
    r?;
    let meta = match &counter {
        Counter::List(c) => c.meta(),
        Counter::Watch(_) => ListMeta::default(),
    };
    Ok((counter.objects(), meta))
}

/// One client of the list scenarios: starts with the others, then lists (every page, for
/// `list-paged`).
pub async fn client(
    args: Arc<Args>,
    host: String,
    start: Arc<tokio::sync::Barrier>,
) -> ClientResult {
    start.wait().await;
    let t = Instant::now();
    let mut res = ClientResult::default();
    let base = &args.path;
    let watch = matches!(args.scenario, Scenario::Watchlist);
    let mut next = Some(match args.scenario {
        Scenario::List => with_query(base, "resourceVersion=0"),
        Scenario::ListPaged => with_query(base, "limit=500"),
        Scenario::Watchlist => with_query(base, WATCH_LIST),
        _ => base.clone(),
    });
    while let Some(path) = next.take() {
        match fetch(&args, &host, &path, watch, &mut res).await {
            Ok((n, meta)) => {
                res.objects += n;
                if let (Scenario::ListPaged, Some(c)) = (args.scenario, meta.continue_token)
                    && !c.is_empty()
                {
                    next = Some(with_query(base, &format!("limit=500&continue={c}")));
                }
            }
            Err(e) => res.error = Some(e),
        }
    }
    res.seconds = t.elapsed().as_secs_f64();
    res
}
