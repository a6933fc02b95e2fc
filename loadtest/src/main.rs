//! `listwatch-loadtest`: N concurrent clients against any apiserver URL (listwatch or
//! kube-apiserver), consuming bodies as streams (counting objects, keeping nothing), while a
//! sampler reads the server's RSS from /proc every 100 ms and its CPU around what a scenario
//! measures. Writes a JSON report. Scenarios are in `scenario/`, one module each.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use serde::Serialize;

mod chart;
mod count;
mod events;
mod http;
mod net;
mod report;
mod scenario;
mod writers;

use report::{ClientResult, Cpu, CpuMark, FirstByte, Sampler, Server, cpu_delta};
use scenario::{
    churn, idle_watchers, informers, kubelet_storm, list, relist_storm, slow_readers, writes,
};

#[derive(Clone, Copy, Debug, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Scenario {
    /// LIST with resourceVersion=0 (served from the cache).
    List,
    /// LIST with limit=500, following continue tokens.
    ListPaged,
    /// LIST with resourceVersion unset (consistent read).
    ListConsistent,
    /// watch-list until the initial-events-end bookmark.
    Watchlist,
    /// Half the clients LIST, half watch-list, all reading at `--read-rate-kib`, for `--hold`.
    SlowReaders,
    /// `--clients` watches with bookmarks on an idle resource, held open for `--hold`.
    IdleWatchers,
    /// Every client LISTs and watches, then all drop and relist at the same instant.
    RelistStorm,
    /// `--write-rate` writes/s for `--hold` seconds while `--clients` watchers receive them.
    Churn,
    /// client-go informers: `--clients` clients, each with client-go's default rate limiter
    /// (5/s, burst 10) shared by its `--informers` informers, LIST (rv=0, limit=500) + WATCH.
    Informers,
    /// The same informers in watch-list mode.
    InformersWatchlist,
    /// Informers sync (LIST + WATCH), then all relist at once as after a 410 (rv="", paged).
    InformersRelist,
    /// `--clients` nodes: `--pods` pods from `--pods-from` spread over them, every node's
    /// watch-list (fieldSelector=spec.nodeName) at once, then pod churn on the nodes.
    KubeletStorm,
    /// `--writes` ConfigMap creates of `--body-kib` KiB over `--clients` keep-alive
    /// connections, as fast as answered (pass-through cost against going direct).
    Writes,
}

#[derive(Parser)]
#[command(
    name = "listwatch-loadtest",
    about = "Concurrent LIST / watch-list load with server RSS sampling"
)]
pub(crate) struct Args {
    /// The apiserver and how to reach it.
    #[command(flatten)]
    pub target: net::Target,
    /// idle-watchers only: multiplex this many watches per HTTP/2 (h2c) connection, as
    /// client-go does, instead of one HTTP/1.1 connection per watch.
    #[arg(long)]
    pub h2_streams_per_conn: Option<usize>,
    /// idle-watchers only: start the watches spread evenly over this many seconds instead of
    /// all at once; each is still held for --hold (keep --hold above it).
    #[arg(long, default_value_t = 0)]
    pub ramp_seconds: u64,
    /// Every streamed request (a LIST, a watch-list, a kubelet-storm node's watch) on an
    /// HTTP/2 connection of its own, as each kubelet has, instead of HTTP/1.1.
    #[arg(long)]
    pub h2: bool,
    /// Where to write a PNG chart of the server's RSS over time (default: next to --out).
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// PID of the server process, to sample its RSS (same machine).
    #[arg(long)]
    pub pid: Option<u32>,
    /// What each client does.
    #[arg(long, value_enum)]
    pub scenario: Scenario,
    /// Concurrent clients (all start at the same instant).
    #[arg(long, default_value_t = 1)]
    pub clients: usize,
    /// Collection path.
    #[arg(long, default_value = "/api/v1/pods")]
    pub path: String,
    /// How requests ask for their bodies.
    #[command(flatten)]
    pub form: http::Form,
    /// list / watchlist scenarios: ask for PartialObjectMetadata (what metadata informers,
    /// the garbage collector and quota ask for).
    #[arg(long)]
    pub metadata_only: bool,
    /// Objects each client must receive (the report's `complete` checks it).
    #[arg(long)]
    pub expect: Option<u64>,
    /// Where to write the JSON report.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Read rate limit per client in KiB/s (slow-readers; optional elsewhere).
    #[arg(long)]
    pub read_rate_kib: Option<u64>,
    /// Seconds to hold watches / keep writing / keep slow readers reading.
    #[arg(long, default_value_t = 10)]
    pub hold: u64,
    /// Writes per second (churn).
    #[arg(long, default_value_t = 100)]
    pub write_rate: u64,
    /// Namespace for churn writes and idle watches.
    #[arg(long, default_value = "loadtest")]
    pub namespace: String,
    /// Informer scenarios: informers per client (they share the client's rate limiter).
    #[arg(long, default_value_t = 1)]
    pub informers: usize,
    /// churn: one watcher in this many decodes every event in full (and measures latency);
    /// the others only scan resourceVersions.
    #[arg(long, default_value_t = 10)]
    pub full_decode_every: usize,
    /// kubelet-storm: an NDJSON(.gz) file of Pods to create, spread over the nodes.
    #[arg(long)]
    pub pods_from: Option<PathBuf>,
    /// kubelet-storm: how many pods to create, cycling through --pods-from (default: once).
    #[arg(long)]
    pub pods: Option<u64>,
    /// kubelet-storm: the pods are there already (`spec.nodeName` =
    /// `storm-node-<i % clients>` for the file's `i`-th pod): create none, expect each
    /// node's share.
    #[arg(long)]
    pub pods_exist: bool,
    /// writes: how many creates.
    #[arg(long, default_value_t = 10_000)]
    pub writes: u64,
    /// writes: KiB of data in each ConfigMap (0: a small object).
    #[arg(long, default_value_t = 0)]
    pub body_kib: u64,
    /// Informer scenarios: decode every object but keep only its key (32 full stores of
    /// 40,000 typed Pods do not fit this machine's memory).
    #[arg(long)]
    pub discard_objects: bool,
}

/// What the informer scenarios report.
#[derive(Serialize)]
struct InformerSummary {
    mode: informers::Mode,
    informers_per_client: usize,
    /// Objects were decoded but not kept (`--discard-objects`).
    discard_objects: bool,
    informers: usize,
    /// Slowest informer's time to sync.
    sync_s_max: f64,
    /// Requests made until synced, all informers (LIST pages + WATCH).
    requests_to_sync: u32,
    /// Relist mode: the slowest relist and the requests the relists made.
    relist_s_max: Option<f64>,
    relist_requests: Option<u32>,
    /// CPU the client process used (decoding every object into a typed Pod).
    client_cpu_s: Option<f64>,
    per_informer: Vec<informers::InformerResult>,
}

#[derive(Serialize)]
struct Report {
    scenario: Scenario,
    clients: usize,
    url: String,
    path: String,
    #[serde(flatten)]
    form: http::Form,
    metadata_only: bool,
    /// Seconds into the samples where measuring started (after a scenario's set-up).
    measured_from_s: f64,
    idle_rss_kib: Option<u64>,
    peak_rss_kib: Option<u64>,
    peak_minus_idle_kib: Option<u64>,
    duration_s: f64,
    /// The server's CPU (user + system) over the measured part of the run, and this
    /// harness's over the same.
    #[serde(flatten)]
    cpu: Cpu,
    total_wire_bytes: u64,
    objects_per_client: Vec<u64>,
    complete: bool,
    rss_samples_kib: Vec<(f64, u64)>,
    /// List scenarios: time to the response head and to the first body byte.
    first_byte: Option<FirstByte>,
    /// Churn only: delivery latency, ordering, server CPU per event.
    churn: Option<churn::Report>,
    /// Kubelet storm only: per-node events, sync times, server CPU per node LIST.
    kubelet: Option<kubelet_storm::Report>,
    /// Idle watchers only: (peak - idle) / watchers (the peak is the start burst, every
    /// request in flight at once).
    bytes_per_watcher: Option<f64>,
    /// Idle watchers only: (median RSS over the last third of the time all are held - idle)
    /// / watchers: what holding them costs once the allocator has given the start burst back.
    settled_bytes_per_watcher: Option<f64>,
    /// Informer scenarios: sync times, requests, client CPU.
    informers: Option<InformerSummary>,
    /// Writes only: writes, errors, rate.
    writes: Option<writes::Report>,
    per_client: Vec<ClientResult>,
}

/// What a scenario hands back.
#[derive(Default)]
struct Outcome {
    per_client: Vec<ClientResult>,
    /// Measuring started here (after set-up); the run's start otherwise.
    measured_from: Option<Instant>,
    churn: Option<churn::Report>,
    kubelet: Option<kubelet_storm::Report>,
    informers: Option<InformerSummary>,
    writes: Option<writes::Report>,
}

/// Waits for every client, showing progress on a terminal (hidden when stderr is not one).
pub async fn join_all(handles: Vec<tokio::task::JoinHandle<ClientResult>>) -> Vec<ClientResult> {
    let bar = indicatif::ProgressBar::new(handles.len() as u64).with_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} {elapsed_precise} [{bar:40}] {pos}/{len} clients done {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.unwrap_or_else(|e| ClientResult {
            error: Some(e.to_string()),
            ..Default::default()
        }));
        bar.inc(1);
    }
    bar.finish_and_clear();
    out
}

/// Spawns `n` clients, client `i` being `client(i)`, and waits for them all.
async fn each_client<F>(n: usize, client: impl FnMut(usize) -> F) -> Outcome
where
    F: std::future::Future<Output = ClientResult> + Send + 'static,
{
    let handles = (0..n).map(client).map(tokio::spawn).collect();
    Outcome {
        per_client: join_all(handles).await,
        ..Default::default()
    }
}

async fn run_informers(args: Arc<Args>, host: String, mode: informers::Mode) -> Outcome {
    let cpu0 = report::own_cpu_s();
    let per = args.informers.max(1);
    let n = args.clients * per;
    let start = Arc::new(tokio::sync::Barrier::new(n));
    let relist = Arc::new(tokio::sync::Barrier::new(n));
    let mut handles = Vec::new();
    for _ in 0..args.clients {
        let limiter = Arc::new(informers::TokenBucket::client_go_default());
        for _ in 0..per {
            handles.push(tokio::spawn(informers::informer(
                host.clone(),
                args.path.clone(),
                mode,
                args.form,
                args.discard_objects,
                limiter.clone(),
                start.clone(),
                relist.clone(),
            )));
        }
    }
    let mut results = Vec::new();
    for h in handles {
        results.push(h.await.unwrap_or_else(|e| informers::InformerResult {
            error: Some(e.to_string()),
            ..Default::default()
        }));
    }
    let per_client = results
        .iter()
        .map(|r| ClientResult {
            objects: r.objects,
            wire_bytes: r.wire_bytes,
            seconds: r.sync_s,
            requests: r.requests,
            error: r.error.clone(),
            ..Default::default()
        })
        .collect();
    let summary = InformerSummary {
        mode,
        informers_per_client: per,
        discard_objects: args.discard_objects,
        informers: results.len(),
        sync_s_max: results.iter().map(|r| r.sync_s).fold(0.0, f64::max),
        requests_to_sync: results
            .iter()
            .map(|r| r.requests - r.relist_requests.unwrap_or(0))
            .sum(),
        relist_s_max: results.iter().filter_map(|r| r.relist_s).reduce(f64::max),
        relist_requests: results.iter().map(|r| r.relist_requests).sum(),
        client_cpu_s: cpu_delta(cpu0, report::own_cpu_s()),
        per_informer: results,
    };
    Outcome {
        per_client,
        informers: Some(summary),
        ..Default::default()
    }
}

async fn run(args: Arc<Args>, host: String, server: Server) -> Result<Outcome, String> {
    let start = || Arc::new(tokio::sync::Barrier::new(args.clients));
    Ok(match args.scenario {
        Scenario::Informers => run_informers(args, host, informers::Mode::List).await,
        Scenario::InformersWatchlist => run_informers(args, host, informers::Mode::WatchList).await,
        Scenario::InformersRelist => run_informers(args, host, informers::Mode::Relist).await,
        Scenario::Churn => {
            let (per_client, r) = churn::run(args, host, server).await;
            Outcome {
                per_client,
                churn: Some(r),
                ..Default::default()
            }
        }
        Scenario::KubeletStorm => {
            let (per_client, r, from) = kubelet_storm::run(args, host, server).await?;
            Outcome {
                per_client,
                kubelet: Some(r),
                measured_from: Some(from),
                ..Default::default()
            }
        }
        Scenario::Writes => Outcome {
            writes: Some(writes::run(args, host).await),
            ..Default::default()
        },
        Scenario::IdleWatchers => Outcome {
            per_client: idle_watchers::run(args, host).await?,
            ..Default::default()
        },
        Scenario::SlowReaders => {
            let b = start();
            each_client(args.clients, |i| {
                slow_readers::reader(args.clone(), host.clone(), b.clone(), i)
            })
            .await
        }
        Scenario::RelistStorm => {
            let (b, relist) = (start(), start());
            each_client(args.clients, |_| {
                relist_storm::client(args.clone(), host.clone(), b.clone(), relist.clone())
            })
            .await
        }
        Scenario::List | Scenario::ListPaged | Scenario::ListConsistent | Scenario::Watchlist => {
            let b = start();
            each_client(args.clients, |_| {
                list::client(args.clone(), host.clone(), b.clone())
            })
            .await
        }
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Arc::new(Args::parse());
    let host = net::init(&args.target)?;
    http::streams_over_h2(args.h2);
    let server = Server::new(args.pid);
    let sampler = Sampler::start(server);
    let (t0, idle0, cpu) = (sampler.t0, server.rss_kib(), CpuMark::now(server));
    let outcome = run(args.clone(), host, server).await?;
    let cpu = cpu.elapsed();
    let end = Instant::now();
    let samples = sampler.finish();
    // A scenario with a set-up (creating objects) measures from where it says.
    let from = outcome.measured_from.unwrap_or(t0);
    let from_s = from.saturating_duration_since(t0).as_secs_f64();
    let measured: Vec<u64> = samples
        .iter()
        .filter(|s| s.0 >= from_s)
        .map(|s| s.1)
        .collect();
    let idle = match outcome.measured_from {
        Some(_) => measured.first().copied(),
        None => idle0,
    };
    let peak = measured.iter().copied().max().or(idle);
    let per_client = outcome.per_client;
    let objects: Vec<u64> = per_client.iter().map(|c| c.objects).collect();
    let expect_ok = match args.scenario {
        // Slow readers are cut off by --hold; they must only have made progress.
        Scenario::SlowReaders => objects.iter().all(|o| *o > 0),
        // Every watch held for --hold (an early end is a client error).
        Scenario::IdleWatchers => !per_client.is_empty(),
        Scenario::Churn => outcome.churn.as_ref().is_some_and(|c| {
            c.in_order
                && c.every_watcher_saw_every_event
                && c.writes > 0
                && c.full_decode_mismatches == 0
        }),
        Scenario::KubeletStorm => outcome
            .kubelet
            .as_ref()
            .is_some_and(|k| k.every_node_got_its_events),
        Scenario::Writes => outcome
            .writes
            .as_ref()
            .is_some_and(|w| w.errors == 0 && w.writes == args.writes),
        _ => args.expect.is_none_or(|e| objects.iter().all(|o| *o == e)),
    };
    let complete = per_client.iter().all(|c| c.error.is_none()) && expect_ok;
    let list_like = matches!(
        args.scenario,
        Scenario::List | Scenario::ListPaged | Scenario::ListConsistent | Scenario::Watchlist
    );
    // Idle watchers: the median RSS over the last third of the time all are held.
    let settled_bytes_per_watcher = match (args.scenario, idle) {
        (Scenario::IdleWatchers, Some(i)) => {
            // Every watch is open from the end of the ramp to the end of the first one's hold.
            let (ramp, hold) = (args.ramp_seconds as f64, args.hold as f64);
            let first = from_s + ramp + (hold - ramp).max(0.0) * 2.0 / 3.0;
            let mut last_third: Vec<f64> = samples
                .iter()
                .filter(|s| s.0 >= first && s.0 <= from_s + hold - 0.5)
                .map(|s| s.1 as f64)
                .collect();
            last_third.sort_by(f64::total_cmp);
            (!last_third.is_empty()).then(|| {
                (report::pct(&last_third, 0.5) - i as f64).max(0.0) * 1024.0
                    / args.clients.max(1) as f64
            })
        }
        _ => None,
    };
    let report = Report {
        scenario: args.scenario,
        clients: args.clients,
        url: args.target.url.clone(),
        path: args.path.clone(),
        form: args.form,
        metadata_only: args.metadata_only,
        measured_from_s: from_s,
        idle_rss_kib: idle,
        peak_rss_kib: peak,
        peak_minus_idle_kib: idle.zip(peak).map(|(i, p)| p.saturating_sub(i)),
        duration_s: end.saturating_duration_since(from).as_secs_f64(),
        cpu: Cpu {
            server_cpu_s: match &outcome.kubelet {
                Some(k) => k
                    .storm_server_cpu_s
                    .zip(k.churn_server_cpu_s)
                    .map(|(a, b)| a + b),
                None => cpu.server_cpu_s,
            },
            ..cpu
        },
        total_wire_bytes: per_client.iter().map(|c| c.wire_bytes).sum(),
        objects_per_client: objects,
        complete,
        rss_samples_kib: samples,
        first_byte: if list_like {
            FirstByte::of(&per_client)
        } else {
            None
        },
        bytes_per_watcher: match (args.scenario, idle.zip(peak)) {
            (Scenario::IdleWatchers, Some((i, p))) => {
                Some(p.saturating_sub(i) as f64 * 1024.0 / args.clients.max(1) as f64)
            }
            _ => None,
        },
        settled_bytes_per_watcher,
        churn: outcome.churn,
        kubelet: outcome.kubelet,
        informers: outcome.informers,
        writes: outcome.writes,
        per_client,
    };
    let json = serde_json::to_string_pretty(&report)?;
    let chart = args
        .chart
        .clone()
        .or_else(|| args.out.as_ref().map(|p| p.with_extension("png")));
    if let Some(png) = &chart
        && !report.rss_samples_kib.is_empty()
    {
        let title = format!(
            "{:?}, {} clients: peak-idle {} MiB",
            report.scenario,
            report.clients,
            report.peak_minus_idle_kib.unwrap_or(0) / 1024
        );
        if let Err(e) = chart::rss_png(png, &title, &report.rss_samples_kib) {
            eprintln!("chart {}: {e}", png.display());
        }
    }
    match &args.out {
        Some(p) => std::fs::write(p, &json)?,
        None => println!("{json}"),
    }
    if let Some((peak, settled)) = report
        .bytes_per_watcher
        .zip(report.settled_bytes_per_watcher)
    {
        eprintln!("per watcher: {peak:.0} B at the peak, {settled:.0} B settled");
    }
    eprintln!(
        "{:?} clients={} duration={:.2}s idle={:?}KiB peak={:?}KiB peak-idle={:?}KiB server-cpu={:?}s complete={}",
        report.scenario,
        report.clients,
        report.duration_s,
        report.idle_rss_kib,
        report.peak_rss_kib,
        report.peak_minus_idle_kib,
        report.cpu.server_cpu_s,
        report.complete
    );
    if !report.complete {
        std::process::exit(2);
    }
    Ok(())
}
