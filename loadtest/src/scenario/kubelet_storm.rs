//! `kubelet-storm`: what a cluster's kubelets do when the apiserver restarts. `--clients`
//! nodes; `--pods` pods (from `--pods-from`, an NDJSON(.gz) of Pods, cycled and renamed
//! `<name>-<k>` until there are enough) are created with `spec.nodeName` round-robin over
//! the nodes; then every node opens its node-scoped watch-list
//! (`fieldSelector=spec.nodeName=<node>`, protobuf with `--protobuf` as kubelets ask) at
//! the same instant, and once all are synced, pods are churned on the nodes (create →
//! update → delete at `--write-rate` for `--hold` seconds). The update is a merge patch of
//! a label (kube-apiserver refuses a PUT of the template: its defaulted spec fields are
//! immutable) and the delete has `gracePeriodSeconds=0` (a bound pod otherwise waits for
//! its kubelet, and no kubelet runs here).
//!
//! With `--pods-exist` nothing is created: the pods are already there, `spec.nodeName`
//! round-robin over the nodes in file order (one load shared by several servers on one
//! etcd, e.g. `loadtest/scripts/versus.sh`), and each node expects its share of them.
//!
//! Reported: per node, events received vs expected (its pods, then every acknowledged
//! write on it); time to sync; the server's CPU per node LIST (the storm's CPU over the
//! nodes) and per churn event delivered; peak − idle RSS from the storm on.

use std::io::BufRead;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hyper::Method;
use serde::Serialize;
use serde_json::Value;

use super::churn::delivered;
use super::list::{WATCH_LIST, with_query};
use crate::events::{self, Kind};
use crate::report::{ClientResult, Server, Spread, cpu_delta, own_cpu_s, us_per_event};
use crate::writers::{self, Write};
use crate::{Args, http};

/// What the kubelet storm reports.
#[derive(Serialize, Default)]
pub struct Report {
    /// Nodes (one watcher each).
    pub nodes: usize,
    /// Pods created before the storm.
    pub pods: u64,
    /// Seconds the pods took to create (not measured against the server).
    pub create_s: f64,
    /// Pods that could not be created.
    pub create_errors: u64,
    /// The first failures (creates or churn writes).
    pub error_samples: Vec<String>,
    /// Watch-lists were protobuf.
    pub protobuf: bool,
    /// Watch-lists answered 429 and asked again after `Retry-After`, as client-go does
    /// (at most 10 times each).
    pub retries_after_429: u64,
    /// Watch-lists that ended with an ERROR event before their node synced and were asked
    /// again from scratch after a second, as a kubelet's reflector relists (at most
    /// `RELISTS_AFTER_ERROR` times a node).
    pub relists_after_error: u64,
    /// The first such ERROR event's message (its `Status`), as the server sent it.
    pub first_error_event: Option<String>,
    /// With `--h2`: the server's RSS once every node's connection is open (each node's
    /// watch-list and its retries then go on it, as a kubelet's), before any request. The
    /// storm's CPU and sync times then leave the connections' setup out; a connection that
    /// dies is not dialled again (the node fails).
    pub connected_rss_kib: Option<u64>,
    /// With `--h2`: peak RSS from the storm's start until every node synced, less
    /// `connected_rss_kib`: what the storm itself costs beyond the connections it finds open.
    pub sync_peak_minus_connected_kib: Option<u64>,
    /// Peak RSS from the storm's start until every node synced, less the idle RSS before
    /// any node connected (sampled every 10 ms; the run's `rss_samples_kib` are 100 ms).
    pub sync_peak_minus_idle_kib: Option<u64>,
    /// Time from the storm's start until a node's initial-events-end bookmark: median.
    pub sync_s_p50: f64,
    /// The same, slowest node.
    pub sync_s_max: f64,
    /// Server CPU from the storm's start until every node synced.
    pub storm_server_cpu_s: Option<f64>,
    /// That CPU per node LIST, in milliseconds.
    pub server_cpu_ms_per_node_list: Option<f64>,
    /// Churn: acknowledged writes and failures.
    pub churn_writes: u64,
    /// Churn writes that failed.
    pub churn_write_errors: u64,
    /// Events delivered during the churn, all nodes.
    pub churn_events: u64,
    /// Server CPU from the first churn write until every node had its events.
    pub churn_server_cpu_s: Option<f64>,
    /// That CPU per churn event delivered, in microseconds (writes included).
    pub server_cpu_us_per_event: Option<f64>,
    /// This harness's CPU over the storm and the churn.
    pub client_cpu_s: Option<f64>,
    /// Per node: events received (initial ADDED, then churn events).
    pub received: Vec<u64>,
    /// Per node: events expected (its pods, then acknowledged writes on it).
    pub expected: Vec<u64>,
    /// Every node received exactly its pods, then an event for every acknowledged write on
    /// it (plus at most one per delete: kube-apiserver's MODIFIED before a bound pod's
    /// DELETED).
    pub every_node_got_its_events: bool,
}

/// The name of node `k`.
fn node(k: usize) -> String {
    format!("storm-node-{k}")
}

/// Reads `file` (NDJSON, gzipped when it ends in .gz) line by line.
fn lines(file: &Path) -> Result<Box<dyn Iterator<Item = std::io::Result<String>>>, String> {
    let f = std::fs::File::open(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let r: Box<dyn std::io::Read> = if file.extension().is_some_and(|e| e == "gz") {
        Box::new(flate2::read::GzDecoder::new(f))
    } else {
        Box::new(f)
    };
    Ok(Box::new(
        std::io::BufReader::with_capacity(1 << 20, r).lines(),
    ))
}

/// A pod of the file, renamed for its round `k` and put on `node` (`namespace` too, when
/// given); what the server owns is left out.
fn place(pod: &mut Value, k: u64, node: &str, namespace: Option<&str>) -> Option<String> {
    let meta = pod.get_mut("metadata")?.as_object_mut()?;
    let name = format!("{}-{k}", meta.get("name")?.as_str()?);
    meta.insert("name".into(), name.into());
    if let Some(ns) = namespace {
        meta.insert("namespace".into(), ns.into());
    }
    for f in ["uid", "resourceVersion", "creationTimestamp"] {
        meta.remove(f);
    }
    let spec = pod
        .as_object_mut()?
        .entry("spec")
        .or_insert_with(|| Value::Object(Default::default()));
    spec.as_object_mut()?.insert("nodeName".into(), node.into());
    pod.get("metadata")?
        .get("namespace")?
        .as_str()
        .map(str::to_string)
}

/// Feeds `pods` creates, cycling through `file`, node `i % nodes` for the `i`-th.
fn produce(
    file: PathBuf,
    pods: u64,
    nodes: usize,
    out: tokio::sync::mpsc::Sender<Write>,
) -> Result<(), String> {
    let mut i = 0u64;
    for round in 0.. {
        let mut any = false;
        for line in lines(&file)? {
            if i == pods {
                return Ok(());
            }
            let line = line.map_err(|e| e.to_string())?;
            if line.trim().is_empty() {
                continue;
            }
            let mut pod: Value = serde_json::from_str(&line).map_err(|e| e.to_string())?;
            let tag = (i % nodes as u64) as usize;
            let ns = place(&mut pod, round, &node(tag), None)
                .ok_or("a pod without metadata.name and metadata.namespace")?;
            let w = Write {
                method: Method::POST,
                path: format!("/api/v1/namespaces/{ns}/pods"),
                body: Some(pod.to_string()),
                tag,
            };
            if out.blocking_send(w).is_err() {
                return Ok(());
            }
            i += 1;
            any = true;
        }
        if !any {
            return Err(format!("{}: no pods", file.display()));
        }
    }
    Ok(())
}

/// How many times a node relists after an ERROR event before it fails.
const RELISTS_AFTER_ERROR: u32 = 3;

/// How a node's error starts when the server ended its watch-list with an ERROR event.
const ERROR_EVENT: &str = "ERROR event";

/// The message of an ERROR event's `Status`: JSON's `object.message`, or in a protobuf
/// event the longest run of printable text (the message is the Status's one long string).
fn status_message(raw: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<Value>(raw)
        && let Some(m) = v["object"]["message"].as_str()
    {
        return m.chars().take(200).collect();
    }
    // The run may start with the field's length byte when that byte is printable.
    raw.split(|b| !(b.is_ascii_graphic() || *b == b' '))
        .max_by_key(|run| run.len())
        .map(|run| {
            String::from_utf8_lossy(run)
                .trim_start_matches(|c: char| !c.is_ascii_alphanumeric())
                .chars()
                .take(200)
                .collect()
        })
        .unwrap_or_default()
}

/// The first pod of `file`, the template of the churned pods.
fn template(file: &Path) -> Result<Value, String> {
    let first = lines(file)?
        .find(|l| l.as_ref().map_or(true, |l| !l.trim().is_empty()))
        .ok_or("no pods")?
        .map_err(|e| e.to_string())?;
    serde_json::from_str(&first).map_err(|e| e.to_string())
}

/// What one node's watcher saw.
#[derive(Default)]
struct NodeSeen {
    initial: u64,
    after: u64,
    synced: Option<Instant>,
}

/// Runs the scenario; returns the instant measuring starts (after the pods are created).
pub async fn run(
    args: Arc<Args>,
    host: String,
    server: Server,
) -> Result<(Vec<ClientResult>, Report, Instant), String> {
    let nodes = args.clients.max(1);
    let file = args
        .pods_from
        .clone()
        .ok_or("kubelet-storm needs --pods-from FILE (an NDJSON of Pods)")?;
    let mut report = Report {
        nodes,
        protobuf: args.form.protobuf,
        ..Default::default()
    };

    // Create the pods.
    let pods = match args.pods {
        Some(p) => p,
        None => lines(&file)?
            .filter(|l| l.as_ref().is_ok_and(|l| !l.trim().is_empty()))
            .count() as u64,
    };
    let mut expected = vec![0u64; nodes];
    if args.pods_exist {
        for i in 0..pods {
            expected[(i % nodes as u64) as usize] += 1;
        }
        report.pods = pods;
    } else {
        let t = Instant::now();
        let (tx, rx) = tokio::sync::mpsc::channel(256);
        let producer = {
            let file = file.clone();
            tokio::task::spawn_blocking(move || produce(file, pods, nodes, tx))
        };
        let created = writers::bulk(&host, 8, rx).await;
        producer.await.map_err(|e| e.to_string())??;
        report.create_s = t.elapsed().as_secs_f64();
        report.pods = created.writes;
        report.create_errors = created.errors;
        report.error_samples = created.first_errors;
        for a in &created.acks {
            expected[a.tag] += 1;
        }
    }
    let initial_expected = expected.clone();
    // Let the server settle before taking its idle RSS.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let measured_from = Instant::now();
    let idle_rss = server.rss_kib();

    // The storm: every node's watch-list at once.
    let progress: Arc<Vec<AtomicU64>> = Arc::new((0..nodes).map(|_| AtomicU64::new(0)).collect());
    let synced = Arc::new(AtomicUsize::new(0));
    let retried = Arc::new(AtomicU64::new(0));
    let relisted = Arc::new(AtomicU64::new(0));
    let first_error_event = Arc::new(std::sync::Mutex::new(None::<String>));
    let connected = Arc::new(tokio::sync::Barrier::new(nodes + 1));
    let start = Arc::new(tokio::sync::Barrier::new(nodes + 1));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let watchers: Vec<_> = (0..nodes)
        .map(|k| {
            let path = with_query(
                "/api/v1/pods",
                &format!("{WATCH_LIST}&fieldSelector=spec.nodeName%3D{}", node(k)),
            );
            let (host, stopped, progress, synced, protobuf, retried) = (
                host.clone(),
                stopped.clone(),
                progress.clone(),
                synced.clone(),
                args.form.protobuf,
                retried.clone(),
            );
            let (relisted, first_error_event) = (relisted.clone(), first_error_event.clone());
            let (connected, start, h2) = (connected.clone(), start.clone(), args.h2);
            tokio::spawn(async move {
                let mut seen = NodeSeen::default();
                let conn = if h2 {
                    Some(http::open_h2(&host).await)
                } else {
                    None
                };
                connected.wait().await;
                start.wait().await;
                let mut relists_left = RELISTS_AFTER_ERROR;
                let r = match conn.transpose() {
                    Err(e) => Err(format!("connect: {e}")),
                    Ok(mut send) => loop {
                        let on = |ev: events::Event<'_>, at: Instant| {
                            match (ev.kind, seen.synced) {
                                (Kind::Bookmark, None) if ev.initial_end => {
                                    seen.synced = Some(at);
                                    synced.fetch_add(1, Ordering::Relaxed);
                                }
                                (Kind::Bookmark, _) => {}
                                (Kind::Added, None) => seen.initial += 1,
                                (Kind::Error, _) => {
                                    return Err(format!(
                                        "{ERROR_EVENT}: {}",
                                        status_message(ev.raw)
                                    ));
                                }
                                (_, None) => {
                                    return Err(format!("{:?} before initial-events-end", ev.kind));
                                }
                                (_, Some(_)) => seen.after += 1,
                            }
                            progress[k].store(seen.initial + seen.after, Ordering::Relaxed);
                            Ok(ControlFlow::Continue(()))
                        };
                        let r = events::watch_retrying(
                            &host,
                            send.as_mut(),
                            &path,
                            protobuf,
                            stopped.clone(),
                            on,
                            10,
                            &retried,
                        )
                        .await;
                        match r {
                            // A reflector relists after an ERROR event (kube-apiserver's cacher
                            // sends one when it cannot serve the watch-list in time): so does a
                            // node that has not synced yet, from scratch.
                            Err(e)
                                if e.starts_with(ERROR_EVENT)
                                    && seen.synced.is_none()
                                    && relists_left > 0 =>
                            {
                                relists_left -= 1;
                                relisted.fetch_add(1, Ordering::Relaxed);
                                if let Ok(mut first) = first_error_event.lock() {
                                    first.get_or_insert(e);
                                }
                                seen.initial = 0;
                                tokio::time::sleep(Duration::from_secs(1)).await;
                            }
                            r => break r,
                        }
                    },
                };
                if r.is_err() {
                    // Count a failed node as done, so the storm's wait ends.
                    synced.fetch_add(usize::from(seen.synced.is_none()), Ordering::Relaxed);
                }
                (seen, r)
            })
        })
        .collect();
    connected.wait().await;
    if args.h2 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        report.connected_rss_kib = server.rss_kib();
    }
    let (cpu0, own0) = (server.cpu_s(), own_cpu_s());
    start.wait().await;
    let storm = Instant::now();
    // A server that never ends the initial events (no watch-list) fails the nodes at 10 min.
    let give_up = storm + Duration::from_secs(600);
    let mut sync_peak = server.rss_kib();
    while synced.load(Ordering::Relaxed) < nodes && Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(10)).await;
        sync_peak = sync_peak.max(server.rss_kib());
    }
    let cpu1 = server.cpu_s();
    report.sync_peak_minus_idle_kib = idle_rss.zip(sync_peak).map(|(i, p)| p.saturating_sub(i));
    report.sync_peak_minus_connected_kib = report
        .connected_rss_kib
        .zip(sync_peak)
        .map(|(c, p)| p.saturating_sub(c));
    report.retries_after_429 = retried.load(Ordering::Relaxed);
    report.relists_after_error = relisted.load(Ordering::Relaxed);
    report.first_error_event = first_error_event.lock().ok().and_then(|f| f.clone());
    report.storm_server_cpu_s = cpu_delta(cpu0, cpu1);
    report.server_cpu_ms_per_node_list = report.storm_server_cpu_s.map(|s| s * 1e3 / nodes as f64);

    // The churn: pods created, updated and deleted on the nodes in turn.
    let pod = Arc::new(template(&file)?);
    let ns = args.namespace.clone();
    let writer_count = 4u64;
    let plan = Arc::new(move |w: u64, i: u64| {
        let j = i / 3;
        let tag = ((j * writer_count + w) % nodes as u64) as usize;
        let mut p = (*pod).clone();
        let name = format!("churn-{w}-{j}");
        let _ = place(&mut p, 0, &node(tag), Some(&ns));
        if let Some(m) = p["metadata"].as_object_mut() {
            m.insert("name".into(), name.clone().into());
        }
        p["metadata"]["labels"]["churn"] = Value::from(i.to_string());
        let coll = format!("/api/v1/namespaces/{ns}/pods");
        let (method, path, body) = match i % 3 {
            0 => (Method::POST, coll, Some(p.to_string())),
            1 => (
                Method::PATCH,
                format!("{coll}/{name}"),
                Some(
                    serde_json::json!({"metadata": {"labels": {"churn": i.to_string()}}})
                        .to_string(),
                ),
            ),
            _ => (
                Method::DELETE,
                format!("{coll}/{name}?gracePeriodSeconds=0"),
                None,
            ),
        };
        // A delete's tag is its node's plus `nodes`: see `deletes` below.
        let tag = tag + nodes * usize::from(method == Method::DELETE);
        Write {
            method,
            path,
            body,
            tag,
        }
    });
    let cpu2 = server.cpu_s();
    let log = writers::paced(
        &host,
        writer_count,
        args.write_rate,
        Duration::from_secs(args.hold),
        plan,
    )
    .await;
    // kube-apiserver answers the delete of a bound pod with two events (MODIFIED with its
    // deletionTimestamp, then DELETED), listwatch's embedded store with one: a node may get
    // one more event than it expects per delete on it, never fewer.
    let mut deletes = vec![0u64; nodes];
    for a in &log.acks {
        expected[a.tag % nodes] += 1;
        deletes[a.tag % nodes] += u64::from(a.tag >= nodes);
    }
    delivered(&progress, |k| expected[k], Duration::from_secs(10)).await;
    let _ = stop.send(true);
    let (cpu3, own1) = (server.cpu_s(), own_cpu_s());
    report.churn_writes = log.writes;
    report.churn_write_errors = log.errors;
    report.error_samples.extend(log.first_errors);
    report.churn_server_cpu_s = cpu_delta(cpu2, cpu3);
    report.client_cpu_s = cpu_delta(own0, own1);

    let mut results = Vec::new();
    let mut sync = Vec::new();
    let mut exact = true;
    for (k, w) in watchers.into_iter().enumerate() {
        let (seen, r) = w
            .await
            .unwrap_or_else(|e| (NodeSeen::default(), Err(e.to_string())));
        report.churn_events += seen.after;
        report.received.push(seen.initial + seen.after);
        let got = seen.initial + seen.after;
        exact &= seen.initial == initial_expected[k]
            && got >= expected[k]
            && got <= expected[k] + deletes[k];
        let mut result = ClientResult::of_watch(seen.initial, r);
        match seen.synced {
            Some(at) => {
                result.seconds = at.saturating_duration_since(storm).as_secs_f64();
                sync.push(result.seconds);
            }
            None => {
                result.error.get_or_insert_with(|| "never synced".into());
            }
        }
        results.push(result);
    }
    sync.sort_by(f64::total_cmp);
    let sync = Spread::of(&sync).unwrap_or_default();
    (report.sync_s_p50, report.sync_s_max) = (sync.p50, sync.max);
    report.server_cpu_us_per_event = us_per_event(report.churn_server_cpu_s, report.churn_events);
    report.expected = expected;
    report.every_node_got_its_events = exact && report.create_errors == 0 && log.errors == 0;
    Ok((results, report, measured_from))
}
