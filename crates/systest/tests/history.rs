//! The history checker (issue 14): two listwatch replicas over one etcd, writers through a
//! replica and straight into etcd, a consistent read through the other replica after every
//! acknowledged write, client-go-like watchers (410 → relist, disconnect → rewatch from the
//! last RV), and faults: etcd SIGKILL + restart, compaction while a replica is cut off, a
//! replica killed and started again (and, with `HISTORY_MEMBERS=3`, each member of a
//! 3-member cluster killed in turn). etcd's own history (a direct watch that sees every
//! revision) is the truth each client's view is checked against; the counts are printed.
//!
//! CI runs a short seeded run. The long run is a documented command (docs/etcd.md):
//! `HISTORY_SECONDS=600 HISTORY_SEED=7 cargo test --release -p listwatch-server --test history -- --nocapture`.
//! `planted_early_progress_is_caught` shows the checker finds a planted bug (a progress mark
//! applied before the watch delivered the events it covers).

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::etcd::{Etcd, EtcdServer, Proxy};
use etcd_client::{CompactionOptions, EventType, GetOptions, WatchOptions};
use listwatch_etcd::EtcdConfig;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const NS: &str = "hist";
const PREFIX: &str = "/registry/configmaps/hist/";
const NAMES: usize = 16;

/// What the checker found.
#[derive(Debug, Default)]
struct Counts {
    writes: u64,
    reads: u64,
    reads_unavailable: u64,
    stale_reads: u64,
    watch_events: u64,
    lost: u64,
    phantom: u64,
    duplicated: u64,
    reordered: u64,
    relists: u64,
    rewatches: u64,
    faults: Vec<String>,
}

/// One event in etcd's history.
#[derive(Clone, Debug, PartialEq, Eq)]
struct TruthEvent {
    rev: u64,
    name: String,
    kind: &'static str,
}

/// Every revision that touched the namespace, from a direct etcd watch.
#[derive(Default)]
struct Truth {
    events: Vec<TruthEvent>,
    seen: u64,
}

/// A watcher's view between two lists: the list it started from and what it was sent.
#[derive(Default, Debug)]
struct Segment {
    list_rv: u64,
    events: Vec<(String, String, u64)>,
    /// Highest RV the watcher was told of (events and bookmarks).
    reached: u64,
}

/// Where the replicas are now (a killed replica comes back on another port).
struct Replicas {
    a: Mutex<SocketAddr>,
    b: Mutex<SocketAddr>,
}

fn cm(name: &str, v: u64) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"{NS}"}},"data":{{"v":"{v}"}}}}"#
    )
}

/// etcd's linearizable current revision.
async fn etcd_revision(c: &mut etcd_client::Client) -> Option<u64> {
    let r = tokio::time::timeout(Duration::from_secs(3), c.get("/health-probe", None))
        .await
        .ok()?
        .ok()?;
    r.header().map(|h| h.revision() as u64)
}

/// The namespace's objects (name → mod revision) in etcd at `rev`; `None` if compacted or
/// unreachable.
async fn etcd_at(c: &mut etcd_client::Client, rev: u64) -> Option<BTreeMap<String, u64>> {
    let opts = GetOptions::new().with_prefix().with_revision(rev as i64);
    let r = tokio::time::timeout(Duration::from_secs(3), c.get(PREFIX, Some(opts)))
        .await
        .ok()?
        .ok()?;
    Some(
        r.kvs()
            .iter()
            .map(|kv| {
                let k = String::from_utf8_lossy(kv.key());
                (k[PREFIX.len()..].to_string(), kv.mod_revision() as u64)
            })
            .collect(),
    )
}

/// A list's RV and content (name → RV), from a replica.
fn parse_list(body: &str) -> Option<(u64, BTreeMap<String, u64>)> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    let rv = v["metadata"]["resourceVersion"].as_str()?.parse().ok()?;
    let mut items = BTreeMap::new();
    for i in v["items"].as_array()? {
        items.insert(
            i["metadata"]["name"].as_str()?.to_string(),
            i["metadata"]["resourceVersion"].as_str()?.parse().ok()?,
        );
    }
    Some((rv, items))
}

/// Records etcd's history of the namespace (re-watching from the last revision after an
/// etcd restart) until `stop`.
async fn record_truth(etcd_urls: Vec<String>, truth: Arc<Mutex<Truth>>, stop: Arc<AtomicBool>) {
    let mut from = 1i64;
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut c) = etcd_client::Client::connect(etcd_urls.clone(), None).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let opts = WatchOptions::new()
            .with_prefix()
            .with_start_revision(from)
            .with_progress_notify();
        let Ok(mut stream) = c.watch(PREFIX, Some(opts)).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        loop {
            let msg = tokio::select! {
                m = stream.message() => m,
                _ = tokio::time::sleep(Duration::from_millis(200)) => {
                    if stop.load(Ordering::Relaxed) { return; }
                    continue;
                }
            };
            let Ok(Some(resp)) = msg else { break };
            assert!(
                !resp.canceled() || resp.compact_revision() == 0,
                "the truth recorder must never fall behind a compaction"
            );
            let mut t = truth.lock();
            for e in resp.events() {
                let Some(kv) = e.kv() else { continue };
                let k = String::from_utf8_lossy(kv.key());
                let kind = match e.event_type() {
                    EventType::Delete => "DELETED",
                    EventType::Put if kv.create_revision() == kv.mod_revision() => "ADDED",
                    EventType::Put => "MODIFIED",
                };
                t.events.push(TruthEvent {
                    rev: kv.mod_revision() as u64,
                    name: k[PREFIX.len()..].to_string(),
                    kind,
                });
                from = kv.mod_revision() + 1;
            }
            if let Some(h) = resp.header() {
                t.seen = t.seen.max(h.revision() as u64);
            }
        }
    }
}

/// A client-go-like watcher on one replica: LIST (consistent), WATCH from its RV with
/// bookmarks; on 410 relist, on a dropped stream rewatch from the last RV.
async fn watcher(
    replicas: Arc<Replicas>,
    on_a: bool,
    segments: Arc<Mutex<Vec<Segment>>>,
    counts: Arc<Mutex<Counts>>,
    stop: Arc<AtomicBool>,
) {
    let addr = || {
        if on_a {
            *replicas.a.lock()
        } else {
            *replicas.b.lock()
        }
    };
    'relist: while !stop.load(Ordering::Relaxed) {
        let r = common::try_request(
            addr(),
            "GET",
            &format!("/api/v1/namespaces/{NS}/configmaps"),
            None,
        )
        .await;
        let Some((list_rv, _)) = r
            .filter(|r| r.status == 200)
            .and_then(|r| parse_list(&r.body))
        else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        counts.lock().relists += 1;
        segments.lock().push(Segment {
            list_rv,
            reached: list_rv,
            ..Default::default()
        });
        let mut from = list_rv;
        while !stop.load(Ordering::Relaxed) {
            let path = format!(
                "/api/v1/namespaces/{NS}/configmaps?watch=1&resourceVersion={from}&allowWatchBookmarks=true&timeoutSeconds=3"
            );
            let Some(mut lines) = common::try_stream_lines(addr(), &path).await else {
                // The replica is down (restarting): try again shortly.
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let mut got_any = false;
            while let Some(line) = common::next_line(&mut lines, 5).await {
                got_any = true;
                let Ok(ev) = serde_json::from_str::<serde_json::Value>(&line) else {
                    continue;
                };
                let kind = ev["type"].as_str().unwrap_or("").to_string();
                if kind == "ERROR" {
                    // 410: relist, as client-go does.
                    continue 'relist;
                }
                let rv: u64 = ev["object"]["metadata"]["resourceVersion"]
                    .as_str()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                let name = ev["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                let mut segs = segments.lock();
                let Some(seg) = segs.last_mut() else { continue };
                if kind != "BOOKMARK" {
                    seg.events.push((kind, name, rv));
                }
                seg.reached = seg.reached.max(rv);
                from = from.max(rv);
            }
            if !got_any {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            counts.lock().rewatches += 1;
        }
    }
}

/// Checks one watcher's segments against etcd's history.
fn check_watcher(segments: &[Segment], truth: &[TruthEvent], counts: &mut Counts) {
    for seg in segments {
        counts.watch_events += seg.events.len() as u64;
        let want: Vec<&TruthEvent> = truth
            .iter()
            .filter(|e| e.rev > seg.list_rv && e.rev <= seg.reached)
            .collect();
        let mut seen = HashSet::new();
        let mut last = 0;
        for (kind, name, rv) in &seg.events {
            if *rv < last {
                counts.reordered += 1;
            }
            last = last.max(*rv);
            if !seen.insert((*rv, name.clone())) {
                counts.duplicated += 1;
                continue;
            }
            if !want
                .iter()
                .any(|e| e.rev == *rv && e.name == *name && e.kind == kind)
            {
                counts.phantom += 1;
            }
        }
        for e in &want {
            if !seen.contains(&(e.rev, e.name.clone())) {
                counts.lost += 1;
            }
        }
    }
}

#[derive(Debug)]
struct Run {
    seed: u64,
    seconds: u64,
    members: usize,
    early_progress: bool,
    /// etcd with frequent periodic progress notifications (else etcd's defaults).
    progress_notify: bool,
}

impl Run {
    /// `seconds` of traffic seeded by `HISTORY_SEED` (else `seed`), on one etcd member with
    /// frequent progress notifications, nothing planted.
    fn new(seed: u64, seconds: u64) -> Run {
        Run {
            seed: env("HISTORY_SEED", seed),
            seconds,
            members: 1,
            early_progress: false,
            progress_notify: true,
        }
    }
}

/// Enough traffic to judge, and no stale read, lost, phantom, duplicated or reordered
/// event.
fn assert_clean(c: &Counts) {
    assert!(
        c.writes > 50 && c.reads > 50,
        "too little traffic to judge: {c:?}"
    );
    assert_eq!(
        (c.stale_reads, c.lost, c.phantom, c.duplicated, c.reordered),
        (0, 0, 0, 0, 0),
        "{c:?}"
    );
}

async fn replica(endpoints: Vec<String>, early_progress: bool) -> EtcdServer {
    EtcdServer::start_with(EtcdConfig {
        endpoints,
        progress_interval: Duration::from_millis(500),
        page_size: 100,
        fault_early_progress: early_progress,
        // The checker's clients write through the replicas.
        unsafe_direct_writes: true,
        ..EtcdConfig::default()
    })
    .await
}

/// The checker's run `cfg` on etcd; its counts, printed too.
async fn run(cfg: Run) -> Counts {
    common::require("etcd");
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let mut etcd = Etcd::start_with(cfg.members, cfg.progress_notify).await;
    // Replica B reaches etcd through a proxy the test can cut (first member).
    let proxy = Proxy::start(etcd.members[0].client_port).await;
    let mut b_endpoints = vec![proxy.url()];
    b_endpoints.extend(etcd.endpoints().into_iter().skip(1));
    let mut a = replica(etcd.endpoints(), cfg.early_progress).await;
    let b = replica(b_endpoints, cfg.early_progress).await;
    let replicas = Arc::new(Replicas {
        a: Mutex::new(a.addr),
        b: Mutex::new(b.addr),
    });
    let stop = Arc::new(AtomicBool::new(false));
    let truth = Arc::new(Mutex::new(Truth::default()));
    let counts = Arc::new(Mutex::new(Counts::default()));
    let recorder = tokio::spawn(record_truth(etcd.endpoints(), truth.clone(), stop.clone()));
    let views: Vec<Arc<Mutex<Vec<Segment>>>> = (0..2).map(|_| Arc::default()).collect();
    let watchers: Vec<_> = views
        .iter()
        .enumerate()
        .map(|(i, v)| {
            tokio::spawn(watcher(
                replicas.clone(),
                i == 0,
                v.clone(),
                counts.clone(),
                stop.clone(),
            ))
        })
        .collect();

    let mut direct = etcd.client().await;
    let mut exists: HashMap<String, bool> = HashMap::new();
    let started = Instant::now();
    let total = Duration::from_secs(cfg.seconds);
    // Faults at fixed fractions of the run, in a seeded order.
    let mut faults = vec![
        "etcd-restart",
        "compaction-while-cut-off",
        "replica-restart",
    ];
    if cfg.members == 3 {
        faults.push("member-loss");
    }
    for i in (1..faults.len()).rev() {
        faults.swap(i, rng.random_range(0..=i));
    }
    let fault_at: Vec<Duration> = (0..faults.len())
        .map(|i| total.mul_f64((i as f64 + 1.0) / (faults.len() as f64 + 1.0)))
        .collect();
    let mut next_fault = 0;
    let mut v = 0u64;
    while started.elapsed() < total {
        if next_fault < faults.len() && started.elapsed() >= fault_at[next_fault] {
            let f = faults[next_fault];
            next_fault += 1;
            counts.lock().faults.push(f.to_string());
            match f {
                "etcd-restart" => {
                    etcd.members[0].kill().await;
                    tokio::time::sleep(Duration::from_millis(rng.random_range(500..2000))).await;
                    etcd.members[0].restart();
                    etcd.wait_healthy().await;
                    direct = etcd.client().await;
                }
                "compaction-while-cut-off" => {
                    proxy.cut();
                    for _ in 0..20 {
                        v += 1;
                        let name = format!("n{}", rng.random_range(0..NAMES));
                        let _ = direct
                            .put(format!("{PREFIX}{name}"), cm(&name, v), None)
                            .await;
                        exists.insert(name, true);
                    }
                    // Wait for the truth recorder to see everything, then compact it away.
                    if let Some(rev) = etcd_revision(&mut direct).await {
                        for _ in 0..100 {
                            if truth.lock().seen >= rev {
                                break;
                            }
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        let _ = direct
                            .compact(rev as i64, Some(CompactionOptions::new().with_physical()))
                            .await;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    proxy.restore();
                }
                "replica-restart" => {
                    // SIGKILL of a replica: it is gone at once, a new one starts cold.
                    drop(a);
                    a = replica(etcd.endpoints(), cfg.early_progress).await;
                    *replicas.a.lock() = a.addr;
                }
                "member-loss" => {
                    for m in 0..etcd.members.len() {
                        etcd.members[m].kill().await;
                        tokio::time::sleep(Duration::from_secs(2)).await;
                        etcd.members[m].restart();
                        etcd.wait_healthy().await;
                    }
                    direct = etcd.client().await;
                }
                _ => {}
            }
            continue;
        }
        // One write, through replica A or straight into etcd.
        v += 1;
        let name = format!("n{}", rng.random_range(0..NAMES));
        let present = *exists.get(&name).unwrap_or(&false);
        let through_a = rng.random_bool(0.5);
        let delete = present && rng.random_bool(0.3);
        // The acknowledged write's revision, when its answer carries one.
        let acked: Option<Option<u64>> = if through_a {
            let a_addr = *replicas.a.lock();
            let path = format!("/api/v1/namespaces/{NS}/configmaps");
            let r = if delete {
                common::try_request(a_addr, "DELETE", &format!("{path}/{name}"), None).await
            } else if present {
                common::try_request(
                    a_addr,
                    "PUT",
                    &format!("{path}/{name}"),
                    Some(&cm(&name, v)),
                )
                .await
            } else {
                common::try_request(a_addr, "POST", &path, Some(&cm(&name, v))).await
            };
            let Some(r) = r else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            match r.status {
                200 | 201 => Some(
                    serde_json::from_str::<serde_json::Value>(&r.body)
                        .ok()
                        .and_then(|o| o["metadata"]["resourceVersion"].as_str()?.parse().ok()),
                ),
                // Conflicts with the direct writer and outages are not acknowledged writes.
                _ => None,
            }
        } else if delete {
            direct
                .delete(format!("{PREFIX}{name}"), None)
                .await
                .ok()
                .map(|r| r.header().map(|h| h.revision() as u64))
        } else {
            direct
                .put(format!("{PREFIX}{name}"), cm(&name, v), None)
                .await
                .ok()
                .map(|r| r.header().map(|h| h.revision() as u64))
        };
        let Some(acked) = acked else {
            // What etcd holds decides whether the name exists now.
            if let Ok(g) = direct.get(format!("{PREFIX}{name}"), None).await {
                exists.insert(name.clone(), !g.kvs().is_empty());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        exists.insert(name.clone(), !delete);
        counts.lock().writes += 1;
        // The write is acknowledged: a consistent read through the other replica, at once,
        // must show at least its revision (a delete through A carries none: etcd's current
        // revision, read first, stands in for it).
        let w = match acked {
            Some(w) => w,
            None => match etcd_revision(&mut direct).await {
                Some(w) => w,
                None => continue,
            },
        };
        let b_addr = *replicas.b.lock();
        let Some(r) = common::try_request(
            b_addr,
            "GET",
            &format!("/api/v1/namespaces/{NS}/configmaps"),
            None,
        )
        .await
        else {
            continue;
        };
        counts.lock().reads += 1;
        if r.status != 200 {
            counts.lock().reads_unavailable += 1;
            continue;
        }
        let Some((rv, items)) = parse_list(&r.body) else {
            counts.lock().stale_reads += 1;
            continue;
        };
        let stale = if rv < w {
            true
        } else {
            match etcd_at(&mut direct, rv).await {
                Some(want) => want != items,
                None => false, // compacted meanwhile: not checkable
            }
        };
        if stale {
            counts.lock().stale_reads += 1;
            eprintln!("stale read: write acknowledged at ≤{w}, consistent LIST answered RV {rv}");
        }
    }
    // Let the watchers catch up with the last writes, then stop everyone.
    tokio::time::sleep(Duration::from_secs(4)).await;
    stop.store(true, Ordering::Relaxed);
    for w in watchers {
        let _ = tokio::time::timeout(Duration::from_secs(15), w).await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), recorder).await;
    let truth = truth.lock().events.clone();
    let mut counts = Arc::try_unwrap(counts)
        .map(Mutex::into_inner)
        .unwrap_or_default();
    for v in &views {
        check_watcher(&v.lock(), &truth, &mut counts);
    }
    drop((a, b));
    println!("history checker, {cfg:?}: {counts:?}");
    counts
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_stale_reads_and_no_lost_events_under_faults() {
    let mut cfg = Run::new(1, env("HISTORY_SECONDS", 40));
    cfg.members = env("HISTORY_MEMBERS", 1) as usize;
    let c = run(cfg).await;
    assert_clean(&c);
    assert!(c.watch_events > 0, "the watchers saw nothing: {c:?}");
}

/// The same run with a planted bug — each consistent read applies etcd's revision to the
/// cache before the watch delivered the events up to it — must be caught.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn planted_early_progress_is_caught() {
    let mut cfg = Run::new(1, 15);
    cfg.early_progress = true;
    let c = run(cfg).await;
    assert!(
        c.stale_reads + c.lost + c.phantom > 0,
        "the checker missed a planted early progress mark: {c:?}"
    );
}

/// The checker on etcd as Debian ships it (3.4.23, which may send requested progress
/// notifications ahead of events) started with its default flags — no periodic progress
/// notifications for 10 minutes: consistent reads are answered by proving the cache current
/// (`EtcdSource::prove_current`) and are never stale.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_stale_reads_on_etcd_without_the_progress_notify_flag() {
    let mut cfg = Run::new(2, 20);
    cfg.progress_notify = false;
    assert_clean(&run(cfg).await);
}

/// On the same etcd, a consistent read of a resource nobody writes, after writes to
/// another: answered at once (it waited for a 10-minute periodic notification before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_resource_answers_consistent_reads_promptly_without_the_flag() {
    let etcd = Etcd::start_with(1, false).await;
    let server = replica(etcd.endpoints(), false).await;
    let mut slowest = Duration::ZERO;
    for i in 0..5 {
        common::answered(
            server.addr,
            "POST",
            "/api/v1/namespaces/default/configmaps",
            Some(&format!(r#"{{"metadata":{{"name":"busy-{i}"}}}}"#)),
            201,
        )
        .await;
        let asked = std::time::Instant::now();
        // Hang guard only; the figure is printed (docs/etcd.md).
        let r = tokio::time::timeout(
            Duration::from_secs(8),
            common::get(server.addr, "/api/v1/namespaces/default/secrets"),
        )
        .await
        .expect("a consistent read of an idle resource hung");
        assert_eq!(r.status, 200, "{}", r.body);
        slowest = slowest.max(asked.elapsed());
    }
    println!("idle resource, consistent LIST after a write elsewhere: slowest of 5 {slowest:?}");
}
