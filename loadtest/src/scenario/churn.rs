//! `churn`: 4 keep-alive writers cycle create → update → delete over ConfigMaps at
//! `--write-rate` for `--hold` seconds while `--clients` watchers (from the RV before the
//! first write, JSON or `--protobuf`) receive the events.
//!
//! Watchers scan each event's resourceVersion (no decoding), so the harness does not eat
//! the CPU the server needs: every watcher checks its RVs strictly increase and folds them
//! into a hash; one in `--full-decode-every` also decodes every event in full, checks the
//! scan against it and keeps arrival times for latency. Every watcher must end with the
//! same count and hash as watcher 0, whose RVs hold every acknowledged write. The server's
//! CPU over the churn (writes and deliveries) is reported per delivered event.

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hyper::Method;
use serde::Serialize;

use crate::events::{self, Kind};
use crate::report::{ClientResult, Cpu, CpuMark, Server, Spread, pct, us_per_event};
use crate::writers::{self, Write};
use crate::{Args, http};

/// What the churn scenario reports.
#[derive(Serialize, Default)]
pub struct Report {
    /// Events each watcher received.
    pub events_per_watcher: Vec<u64>,
    /// Acknowledged writes.
    pub writes: u64,
    /// Failed writes.
    pub write_errors: u64,
    /// The first failures.
    pub write_error_samples: Vec<String>,
    /// Every watcher's RVs strictly increased.
    pub in_order: bool,
    /// Every watcher saw the same events, holding every acknowledged write.
    pub every_watcher_saw_every_event: bool,
    /// Write acknowledged → event received, over the fully decoding watchers.
    pub p50_ms: f64,
    /// 99th percentile of the same.
    pub p99_ms: f64,
    /// Slowest of the same.
    pub max_ms: f64,
    /// Watch events were protobuf frames.
    pub protobuf: bool,
    /// One watcher in this many decoded every event in full.
    pub full_decode_every: usize,
    /// Events whose full decode disagreed with the scanned resourceVersion.
    pub full_decode_mismatches: u64,
    /// Events delivered, all watchers.
    pub delivered_events: u64,
    /// The server's and this harness's CPU from the first write until the watchers stopped.
    #[serde(flatten)]
    pub cpu: Cpu,
    /// The server's CPU per delivered event, in microseconds (writes included).
    pub server_cpu_us_per_event: Option<f64>,
}

/// What one watcher saw.
#[derive(Default)]
struct Seen {
    count: u64,
    in_order: bool,
    last: u64,
    hash: u64,
    mismatches: u64,
    /// (RV, arrival) of every event, for a fully decoding watcher.
    arrivals: Vec<(u64, Instant)>,
}

impl Seen {
    fn add(&mut self, rv: u64) {
        self.in_order &= rv > self.last;
        self.last = rv;
        self.count += 1;
        // FNV-1a over the RV sequence: equal hashes and counts mean equal sequences.
        for b in rv.to_le_bytes() {
            self.hash = (self.hash ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
}

/// Waits until every watcher's progress reaches `expected(i)`, or `grace` passes.
pub async fn delivered(progress: &[AtomicU64], expected: impl Fn(usize) -> u64, grace: Duration) {
    let until = Instant::now() + grace;
    while Instant::now() < until
        && progress
            .iter()
            .enumerate()
            .any(|(i, p)| p.load(Ordering::Relaxed) < expected(i))
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs the scenario.
pub async fn run(args: Arc<Args>, host: String, server: Server) -> (Vec<ClientResult>, Report) {
    let coll = format!("/api/v1/namespaces/{}/configmaps", args.namespace);
    // Watch from the collection's RV: with none (RV "0") a watch would begin with synthetic
    // ADDED events for what exists and the ordering check would be void.
    let Some(start_rv) = http::call(&host, Method::GET, &coll, None)
        .await
        .ok()
        .and_then(|(_, b)| http::rv_of(&b))
    else {
        eprintln!("churn: could not read the collection's resourceVersion");
        return (Vec::new(), Report::default());
    };
    let every = args.full_decode_every.max(1);
    let progress: Arc<Vec<AtomicU64>> =
        Arc::new((0..args.clients).map(|_| AtomicU64::new(0)).collect());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let watchers: Vec<_> = (0..args.clients)
        .map(|i| {
            let path = format!("{coll}?watch=1&resourceVersion={start_rv}");
            let (host, stopped, progress, protobuf) = (
                host.clone(),
                stopped.clone(),
                progress.clone(),
                args.form.protobuf,
            );
            tokio::spawn(async move {
                let full = i % every == 0;
                let mut seen = Seen {
                    in_order: true,
                    hash: 0xcbf2_9ce4_8422_2325,
                    ..Default::default()
                };
                let r = events::watch(&host, &path, protobuf, stopped, |ev, at| {
                    if ev.kind == Kind::Bookmark {
                        return Ok(ControlFlow::Continue(()));
                    }
                    let rv = ev.rv.ok_or("event without a resourceVersion")?;
                    if full {
                        if events::full_rv(&ev, protobuf)? != Some(rv) {
                            seen.mismatches += 1;
                        }
                        seen.arrivals.push((rv, at));
                    }
                    seen.add(rv);
                    progress[i].store(seen.count, Ordering::Relaxed);
                    Ok(ControlFlow::Continue(()))
                })
                .await;
                (seen, r)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cpu = CpuMark::now(server);
    let plan = {
        let coll = coll.clone();
        Arc::new(move |w: u64, i: u64| {
            let name = format!("churn-{w}-{}", (i / 3) % 25);
            let body = format!(r#"{{"metadata":{{"name":"{name}"}},"data":{{"i":"{i}"}}}}"#);
            let (method, path, body) = match i % 3 {
                0 => (Method::POST, coll.clone(), Some(body)),
                1 => (Method::PUT, format!("{coll}/{name}"), Some(body)),
                _ => (Method::DELETE, format!("{coll}/{name}"), None),
            };
            Write {
                method,
                path,
                body,
                tag: 0,
            }
        })
    };
    let log = writers::paced(
        &host,
        4,
        args.write_rate,
        Duration::from_secs(args.hold),
        plan,
    )
    .await;
    // Every acknowledged write is one event for every watcher.
    let want = log.writes;
    delivered(&progress, |_| want, Duration::from_secs(5)).await;
    let _ = stop.send(true);
    let cpu = cpu.elapsed();

    let acks: HashMap<u64, Instant> = log
        .acks
        .iter()
        .filter_map(|a| Some((a.rv?, a.at)))
        .collect();
    let mut results = Vec::new();
    let mut report = Report {
        writes: log.writes,
        write_errors: log.errors,
        write_error_samples: log.first_errors,
        in_order: true,
        protobuf: args.form.protobuf,
        full_decode_every: every,
        ..Default::default()
    };
    let mut lat = Vec::new();
    let mut reference: Option<(u64, u64, HashSet<u64>)> = None;
    let mut same = true;
    for w in watchers {
        let (seen, r) = w
            .await
            .unwrap_or_else(|e| (Seen::default(), Err(e.to_string())));
        report.in_order &= seen.in_order;
        report.full_decode_mismatches += seen.mismatches;
        report.events_per_watcher.push(seen.count);
        for (rv, at) in &seen.arrivals {
            if let Some(ack) = acks.get(rv) {
                lat.push(at.saturating_duration_since(*ack).as_secs_f64() * 1e3);
            }
        }
        match &reference {
            None => {
                let rvs = seen.arrivals.iter().map(|(rv, _)| *rv).collect();
                reference = Some((seen.count, seen.hash, rvs));
            }
            Some((count, hash, _)) => same &= seen.count == *count && seen.hash == *hash,
        }
        results.push(ClientResult::of_watch(seen.count, r));
    }
    let (count, _, rvs) = reference.unwrap_or_default();
    report.every_watcher_saw_every_event =
        same && acks.keys().all(|rv| rvs.contains(rv)) && count >= log.writes;
    report.delivered_events = report.events_per_watcher.iter().sum();
    lat.sort_by(f64::total_cmp);
    let spread = Spread::of(&lat).unwrap_or_default();
    (report.p50_ms, report.max_ms) = (spread.p50, spread.max);
    report.p99_ms = pct(&lat, 0.99);
    report.cpu = cpu;
    report.server_cpu_us_per_event = us_per_event(cpu.server_cpu_s, report.delivered_events);
    (results, report)
}
