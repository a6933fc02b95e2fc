//! `listwatch-loadtest`: N concurrent clients against any apiserver URL (listwatch or
//! kube-apiserver), consuming bodies as streams (counting objects, keeping nothing), while a
//! sampler reads the server's RSS from /proc every 100 ms. Writes a JSON report.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

mod chart;
mod informer;
mod net;

#[derive(Clone, Copy, Debug, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Scenario {
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
}

#[derive(Parser)]
#[command(
    name = "listwatch-loadtest",
    about = "Concurrent LIST / watch-list load with server RSS sampling"
)]
struct Args {
    /// Base URL (http://host:port) of the apiserver.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// Bearer token, if the server wants one.
    #[arg(long)]
    token: Option<String>,
    /// CA bundle (PEM) to trust for an https:// URL.
    #[arg(long)]
    ca_file: Option<PathBuf>,
    /// Accept any server certificate (https:// URLs).
    #[arg(long)]
    insecure_skip_tls_verify: bool,
    /// idle-watchers only: multiplex this many watches per HTTP/2 (h2c) connection, as
    /// client-go does, instead of one HTTP/1.1 connection per watch.
    #[arg(long)]
    h2_streams_per_conn: Option<usize>,
    /// Where to write a PNG chart of the server's RSS over time (default: next to --out).
    #[arg(long)]
    chart: Option<PathBuf>,
    /// PID of the server process, to sample its RSS (same machine).
    #[arg(long)]
    pid: Option<u32>,
    /// What each client does.
    #[arg(long, value_enum)]
    scenario: Scenario,
    /// Concurrent clients (all start at the same instant).
    #[arg(long, default_value_t = 1)]
    clients: usize,
    /// Collection path.
    #[arg(long, default_value = "/api/v1/pods")]
    path: String,
    /// Ask for gzip.
    #[arg(long)]
    gzip: bool,
    /// list / watchlist scenarios: ask for `application/vnd.kubernetes.protobuf`.
    #[arg(long)]
    protobuf: bool,
    /// list / watchlist scenarios: ask for PartialObjectMetadata (what metadata informers,
    /// the garbage collector and quota ask for).
    #[arg(long)]
    metadata_only: bool,
    /// Objects each client must receive (the report's `complete` checks it).
    #[arg(long)]
    expect: Option<u64>,
    /// Where to write the JSON report.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Read rate limit per client in KiB/s (slow-readers; optional elsewhere).
    #[arg(long)]
    read_rate_kib: Option<u64>,
    /// Seconds to hold watches / keep writing / keep slow readers reading.
    #[arg(long, default_value_t = 10)]
    hold: u64,
    /// Writes per second (churn).
    #[arg(long, default_value_t = 100)]
    write_rate: u64,
    /// Namespace for churn writes and idle watches.
    #[arg(long, default_value = "loadtest")]
    namespace: String,
    /// Informer scenarios: informers per client (they share the client's rate limiter).
    #[arg(long, default_value_t = 1)]
    informers: usize,
    /// Informer scenarios: decode every object but keep only its key (32 full stores of
    /// 40,000 typed Pods do not fit this machine's memory).
    #[arg(long)]
    discard_objects: bool,
}

#[derive(Serialize, Default, Clone)]
struct ClientResult {
    objects: u64,
    wire_bytes: u64,
    body_bytes: u64,
    seconds: f64,
    requests: u32,
    error: Option<String>,
}

#[derive(Serialize, Default)]
struct Latency {
    events_per_watcher: Vec<u64>,
    writes: u64,
    write_errors: u64,
    in_order: bool,
    every_watcher_saw_every_event: bool,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

/// What the informer scenarios report.
#[derive(Serialize)]
struct InformerSummary {
    mode: informer::Mode,
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
    per_informer: Vec<informer::InformerResult>,
}

#[derive(Serialize)]
struct Report {
    scenario: Scenario,
    clients: usize,
    url: String,
    path: String,
    gzip: bool,
    protobuf: bool,
    metadata_only: bool,
    idle_rss_kib: Option<u64>,
    peak_rss_kib: Option<u64>,
    peak_minus_idle_kib: Option<u64>,
    duration_s: f64,
    total_wire_bytes: u64,
    objects_per_client: Vec<u64>,
    complete: bool,
    rss_samples_kib: Vec<(f64, u64)>,
    /// Churn only: delivery latency and ordering.
    churn: Option<Latency>,
    /// Idle watchers only: (peak - idle) / watchers.
    bytes_per_watcher: Option<f64>,
    /// Informer scenarios: sync times, requests, client CPU.
    informers: Option<InformerSummary>,
    per_client: Vec<ClientResult>,
}

fn rss_kib(pid: u32) -> Option<u64> {
    listwatch_server::metrics::rss_kib(pid)
}

/// Counts the objects of a LIST body by JSON structure: objects whose parent is the array at
/// depth 2 (`{"items":[{…},{…}]}`), across chunk boundaries, without keeping the body.
#[derive(Default)]
struct ItemCounter {
    stack: Vec<u8>,
    in_string: bool,
    escape: bool,
    items: u64,
}

impl ItemCounter {
    fn feed(&mut self, data: &[u8]) {
        for &c in data {
            if self.in_string {
                if self.escape {
                    self.escape = false;
                } else if c == b'\\' {
                    self.escape = true;
                } else if c == b'"' {
                    self.in_string = false;
                }
                continue;
            }
            match c {
                b'"' => self.in_string = true,
                b'{' | b'[' => {
                    if c == b'{' && self.stack.len() == 2 && self.stack[1] == b'[' {
                        self.items += 1;
                    }
                    self.stack.push(c);
                }
                b'}' | b']' => {
                    self.stack.pop();
                }
                _ => {}
            }
        }
    }
}

/// Counts watch events until the initial-events-end bookmark.
#[derive(Default)]
struct EventCounter {
    line: Vec<u8>,
    added: u64,
    done: bool,
}

impl EventCounter {
    fn feed(&mut self, data: &[u8]) {
        for &c in data {
            if c == b'\n' {
                if self.line.starts_with(br#"{"type":"ADDED""#) {
                    self.added += 1;
                } else if self
                    .line
                    .windows(25)
                    .any(|w| w == b"k8s.io/initial-events-end")
                {
                    self.done = true;
                }
                self.line.clear();
            } else if self.line.len() < 256 || c == b'"' {
                // Only the line's head (type) and the bookmark annotation matter; bookmark lines
                // are short, object lines are truncated to keep memory flat.
                self.line.push(c);
            }
        }
    }
}

/// Reads a protobuf stream without keeping it: varint headers gathered across chunk
/// boundaries, everything else skipped by count.
#[derive(Default)]
struct ProtoScanner {
    /// Bytes of the header being read (a key and a length, or a frame's length).
    head: Vec<u8>,
    /// Bytes still to skip in the current value.
    skip: u64,
}

/// Counts the items of a protobuf LIST: `k8s\0`, then `runtime.Unknown` whose field 2
/// (`raw`) is the list, whose fields 2 are the items.
#[derive(Default)]
struct ProtoItemCounter {
    scan: ProtoScanner,
    magic_left: usize,
    /// Inside `raw`: bytes of it left.
    in_raw: Option<u64>,
    items: u64,
}

/// A varint and its length, if `b` holds a whole one.
fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &c) in b.iter().enumerate().take(10) {
        v |= u64::from(c & 0x7f) << (7 * i);
        if c < 0x80 {
            return Some((v, i + 1));
        }
    }
    None
}

impl ProtoItemCounter {
    fn new() -> Self {
        ProtoItemCounter {
            magic_left: 4,
            ..Default::default()
        }
    }

    fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.magic_left > 0 {
                let n = self.magic_left.min(data.len());
                self.magic_left -= n;
                data = &data[n..];
                continue;
            }
            if self.scan.skip > 0 {
                let n = (self.scan.skip.min(data.len() as u64)) as usize;
                self.scan.skip -= n as u64;
                if let Some(left) = self.in_raw.as_mut() {
                    *left = left.saturating_sub(n as u64);
                }
                if self.in_raw == Some(0) {
                    self.in_raw = None;
                }
                data = &data[n..];
                continue;
            }
            // A field header: key varint then length varint (all fields here are
            // length-delimited).
            self.scan.head.push(data[0]);
            data = &data[1..];
            let Some((key, k)) = varint(&self.scan.head) else {
                continue;
            };
            let Some((len, l)) = varint(&self.scan.head[k..]) else {
                continue;
            };
            let header = (k + l) as u64;
            self.scan.head.clear();
            match &mut self.in_raw {
                None if key >> 3 == 2 => self.in_raw = Some(len),
                None => self.scan.skip = len,
                Some(left) => {
                    *left = left.saturating_sub(header);
                    if key >> 3 == 2 {
                        self.items += 1;
                    }
                    self.scan.skip = len;
                }
            }
            if self.in_raw == Some(0) {
                self.in_raw = None;
            }
        }
    }
}

/// Counts protobuf watch frames until the initial-events-end bookmark: each frame is a
/// 4-byte length and a `WatchEvent` (type first); small frames (bookmarks) are kept whole
/// to find the annotation, object frames only their head.
#[derive(Default)]
struct ProtoEventCounter {
    head: Vec<u8>,
    frame: Vec<u8>,
    left: usize,
    added: u64,
    done: bool,
}

impl ProtoEventCounter {
    fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.left == 0 {
                self.head.push(data[0]);
                data = &data[1..];
                if self.head.len() == 4 {
                    self.left = u32::from_be_bytes([
                        self.head[0],
                        self.head[1],
                        self.head[2],
                        self.head[3],
                    ]) as usize;
                    self.head.clear();
                    self.frame.clear();
                }
                continue;
            }
            let n = self.left.min(data.len());
            if self.frame.len() < 1024 {
                let keep = n.min(1024 - self.frame.len());
                self.frame.extend_from_slice(&data[..keep]);
            }
            self.left -= n;
            data = &data[n..];
            if self.left == 0 {
                if self.frame.starts_with(b"\x0a\x05ADDED") {
                    self.added += 1;
                } else if self
                    .frame
                    .windows(25)
                    .any(|w| w == b"k8s.io/initial-events-end")
                {
                    self.done = true;
                }
            }
        }
    }
}

enum Sink {
    List(ItemCounter),
    Watch(EventCounter),
    ProtoList(ProtoItemCounter),
    ProtoWatch(ProtoEventCounter),
}

impl Sink {
    fn feed(&mut self, d: &[u8]) {
        match self {
            Sink::List(c) => c.feed(d),
            Sink::Watch(c) => c.feed(d),
            Sink::ProtoList(c) => c.feed(d),
            Sink::ProtoWatch(c) => c.feed(d),
        }
    }
    fn objects(&self) -> u64 {
        match self {
            Sink::List(c) => c.items,
            Sink::Watch(c) => c.added,
            Sink::ProtoList(c) => c.items,
            Sink::ProtoWatch(c) => c.added,
        }
    }
    fn done(&self) -> bool {
        matches!(
            self,
            Sink::Watch(EventCounter { done: true, .. })
                | Sink::ProtoWatch(ProtoEventCounter { done: true, .. })
        )
    }
}

/// One GET, body streamed through `sink`; returns (wire bytes, body bytes, continue token).
async fn get(
    args: &Args,
    host: &str,
    path: &str,
    sink: &mut Sink,
) -> Result<(u64, u64, Option<String>), String> {
    let mut s = net::connect(host).await?;
    let auth = net::auth_header();
    let enc = if args.gzip {
        "Accept-Encoding: gzip\r\n"
    } else {
        ""
    };
    let accept = accept_header(args, matches!(sink, Sink::Watch(_) | Sink::ProtoWatch(_)));
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: listwatch-loadtest\r\n{auth}{enc}{accept}Connection: close\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut r = BufReader::with_capacity(64 * 1024, s);
    let mut line = String::new();
    r.read_line(&mut line).await.map_err(|e| e.to_string())?;
    let code: u16 = line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let (mut chunked, mut gz, mut length) = (false, false, None::<u64>);
    loop {
        line.clear();
        r.read_line(&mut line).await.map_err(|e| e.to_string())?;
        if line == "\r\n" || line.is_empty() {
            break;
        }
        let l = line.to_ascii_lowercase();
        chunked |= l.starts_with("transfer-encoding:") && l.contains("chunked");
        gz |= l.starts_with("content-encoding:") && l.contains("gzip");
        if let Some(v) = l.strip_prefix("content-length:") {
            length = v.trim().parse().ok();
        }
    }
    if code != 200 {
        return Err(format!("HTTP {code}"));
    }
    let mut wire = 0u64;
    let mut body = 0u64;
    let mut inflate = gz.then(|| (flate2::Decompress::new(false), 10usize));
    let mut out = vec![0u8; 256 * 1024];
    let mut tail: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut feed =
        |data: &[u8], sink: &mut Sink, body: &mut u64, tail: &mut Vec<u8>| -> Result<(), String> {
            let mut data = data;
            match inflate.as_mut() {
                None => {
                    *body += data.len() as u64;
                    sink.feed(data);
                    keep_tail(tail, data);
                }
                Some((d, skip)) => {
                    let s = (*skip).min(data.len());
                    data = &data[s..];
                    *skip -= s;
                    while !data.is_empty() {
                        let (i0, o0) = (d.total_in(), d.total_out());
                        d.decompress(data, &mut out, flate2::FlushDecompress::None)
                            .map_err(|e| e.to_string())?;
                        let used = (d.total_in() - i0) as usize;
                        let produced = (d.total_out() - o0) as usize;
                        *body += produced as u64;
                        sink.feed(&out[..produced]);
                        keep_tail(tail, &out[..produced]);
                        data = &data[used..];
                        if used == 0 && produced == 0 {
                            break;
                        }
                    }
                }
            }
            Ok(())
        };
    if chunked {
        loop {
            line.clear();
            if r.read_line(&mut line).await.map_err(|e| e.to_string())? == 0 {
                break;
            }
            let mut n = usize::from_str_radix(line.trim(), 16).map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            wire += n as u64;
            while n > 0 {
                // With a read rate, take a tenth of a second's worth at a time and pause.
                let step = args
                    .read_rate_kib
                    .map_or(usize::MAX, |r| (r as usize * 1024 / 10).max(1));
                let k = n.min(buf.len()).min(step);
                r.read_exact(&mut buf[..k])
                    .await
                    .map_err(|e| e.to_string())?;
                feed(&buf[..k], sink, &mut body, &mut tail)?;
                n -= k;
                if let Some(rate) = args.read_rate_kib {
                    tokio::time::sleep(Duration::from_secs_f64(
                        k as f64 / (rate.max(1) as f64 * 1024.0),
                    ))
                    .await;
                }
            }
            let mut crlf = [0u8; 2];
            r.read_exact(&mut crlf).await.map_err(|e| e.to_string())?;
            if sink.done() {
                break;
            }
        }
    } else {
        let mut left = length.unwrap_or(u64::MAX);
        while left > 0 {
            let n = r.read(&mut buf).await.map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            wire += n as u64;
            left = left.saturating_sub(n as u64);
            feed(&buf[..n], sink, &mut body, &mut tail)?;
        }
    }
    Ok((wire, body, continue_token(&tail)))
}

/// The `Accept` line for `--protobuf` / `--metadata-only` (none for plain JSON).
fn accept_header(args: &Args, watch: bool) -> String {
    let media = if args.protobuf {
        "application/vnd.kubernetes.protobuf"
    } else {
        "application/json"
    };
    let form = match (args.metadata_only, watch) {
        (false, _) => String::new(),
        (true, true) => ";as=PartialObjectMetadata;g=meta.k8s.io;v=v1".into(),
        (true, false) => ";as=PartialObjectMetadataList;g=meta.k8s.io;v=v1".into(),
    };
    let stream = if watch && args.protobuf {
        ";stream=watch"
    } else {
        ""
    };
    if form.is_empty() && !args.protobuf {
        return String::new();
    }
    format!("Accept: {media}{form}{stream}\r\n")
}

/// Keeps the first 4 KiB of a body (where `metadata.continue` is), nothing more.
fn keep_tail(head: &mut Vec<u8>, data: &[u8]) {
    if head.len() < 4096 {
        let take = (4096 - head.len()).min(data.len());
        head.extend_from_slice(&data[..take]);
    }
}

fn continue_token(head: &[u8]) -> Option<String> {
    let s = String::from_utf8_lossy(head);
    let i = s.find(r#""continue":""#)? + r#""continue":""#.len();
    let rest = &s[i..];
    Some(rest[..rest.find('"')?].to_string())
}

async fn client(args: Arc<Args>, host: String, start: Arc<tokio::sync::Barrier>) -> ClientResult {
    start.wait().await;
    let t = Instant::now();
    let mut res = ClientResult::default();
    let base = &args.path;
    let sep = if base.contains('?') { '&' } else { '?' };
    let mut sink = match (args.scenario, args.protobuf) {
        (Scenario::Watchlist, false) => Sink::Watch(EventCounter::default()),
        (Scenario::Watchlist, true) => Sink::ProtoWatch(ProtoEventCounter::default()),
        (_, false) => Sink::List(ItemCounter::default()),
        (_, true) => Sink::ProtoList(ProtoItemCounter::new()),
    };
    let mut next = match args.scenario {
        Scenario::List => Some(format!("{base}{sep}resourceVersion=0")),
        Scenario::ListConsistent => Some(base.clone()),
        Scenario::ListPaged => Some(format!("{base}{sep}limit=500")),
        Scenario::Watchlist => Some(format!(
            "{base}{sep}watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
        )),
        // The other scenarios have their own client functions.
        Scenario::SlowReaders
        | Scenario::IdleWatchers
        | Scenario::RelistStorm
        | Scenario::Churn
        | Scenario::Informers
        | Scenario::InformersWatchlist
        | Scenario::InformersRelist => None,
    };
    while let Some(path) = next.take() {
        // A paged list restarts item counting per page; keep the running total.
        let before = sink.objects();
        match &mut sink {
            Sink::List(c) => {
                *c = ItemCounter {
                    items: before,
                    ..Default::default()
                }
            }
            Sink::ProtoList(c) => {
                *c = ProtoItemCounter {
                    items: before,
                    ..ProtoItemCounter::new()
                }
            }
            _ => {}
        }
        match get(&args, &host, &path, &mut sink).await {
            Ok((wire, body, token)) => {
                res.wire_bytes += wire;
                res.body_bytes += body;
                res.requests += 1;
                if let (Scenario::ListPaged, Some(t)) = (args.scenario, token) {
                    next = Some(format!("{base}{sep}limit=500&continue={t}"));
                }
            }
            Err(e) => res.error = Some(e),
        }
    }
    res.objects = sink.objects();
    res.seconds = t.elapsed().as_secs_f64();
    res
}

/// One small request (writes, RV probes); returns status and body.
async fn request(
    host: &str,
    method: &str,
    path: &str,
    body: &str,
) -> Result<(u16, Vec<u8>), String> {
    let mut s = net::connect(host).await?;
    s.write_all(
        format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\n{}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", net::auth_header(), body.len())
            .as_bytes(),
    )
    .await
    .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.map_err(|e| e.to_string())?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no header end")?;
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = &raw[split + 4..];
    if !head.contains("transfer-encoding: chunked") {
        return Ok((code, body.to_vec()));
    }
    // LIST responses stream: undo the chunked framing.
    let mut out = Vec::with_capacity(body.len());
    let mut rest = body;
    while let Some(nl) = rest.windows(2).position(|w| w == b"\r\n") {
        let n = usize::from_str_radix(String::from_utf8_lossy(&rest[..nl]).trim(), 16)
            .map_err(|e| e.to_string())?;
        if n == 0 || rest.len() < nl + 2 + n {
            break;
        }
        out.extend_from_slice(&rest[nl + 2..nl + 2 + n]);
        rest = &rest[(nl + 4 + n).min(rest.len())..];
    }
    Ok((code, out))
}

/// A keep-alive HTTP/1.1 connection for back-to-back small requests (the churn writers).
struct KeepAlive {
    host: String,
    conn: Option<BufReader<net::Conn>>,
}

impl KeepAlive {
    async fn request(
        &mut self,
        method: &str,
        path: &str,
        body: &str,
    ) -> Result<(u16, Vec<u8>), String> {
        if self.conn.is_none() {
            self.conn = Some(BufReader::new(net::connect(&self.host).await?));
        }
        let r = self.try_request(method, path, body).await;
        if r.is_err() {
            self.conn = None;
        }
        r
    }

    async fn try_request(
        &mut self,
        method: &str,
        path: &str,
        body: &str,
    ) -> Result<(u16, Vec<u8>), String> {
        let host = self.host.clone();
        let c = self.conn.as_mut().ok_or("no connection")?;
        c.get_mut()
            .write_all(format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\n{}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", net::auth_header(), body.len()).as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut line = String::new();
        c.read_line(&mut line).await.map_err(|e| e.to_string())?;
        let code = line
            .split(' ')
            .nth(1)
            .and_then(|v| v.parse().ok())
            .ok_or("bad status line")?;
        let mut len = 0usize;
        loop {
            line.clear();
            c.read_line(&mut line).await.map_err(|e| e.to_string())?;
            if line == "\r\n" || line.is_empty() {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; len];
        c.read_exact(&mut body).await.map_err(|e| e.to_string())?;
        Ok((code, body))
    }
}

/// The `metadata.resourceVersion` of a JSON body (object or list).
fn rv_of(body: &[u8]) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v["metadata"]["resourceVersion"].as_str()?.parse().ok()
}

/// Streams a watch, calling `on_line` for each event line with its arrival time, until it
/// returns false or `until` passes.
async fn watch_lines(
    host: &str,
    path: &str,
    until: Instant,
    mut on_line: impl FnMut(&[u8], Instant) -> bool,
) -> Result<(), String> {
    let mut s = net::connect(host).await?;
    s.write_all(
        format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\n{}Connection: close\r\n\r\n",
            net::auth_header()
        )
        .as_bytes(),
    )
    .await
    .map_err(|e| e.to_string())?;
    let mut r = BufReader::new(s);
    let mut line = String::new();
    loop {
        line.clear();
        r.read_line(&mut line).await.map_err(|e| e.to_string())?;
        if line == "\r\n" || line.is_empty() {
            break;
        }
    }
    let mut pending: Vec<u8> = Vec::new();
    loop {
        line.clear();
        let read = tokio::time::timeout_at(until.into(), r.read_line(&mut line)).await;
        let Ok(read) = read else { return Ok(()) };
        if read.map_err(|e| e.to_string())? == 0 {
            return Ok(());
        }
        let n = usize::from_str_radix(line.trim(), 16).map_err(|e| e.to_string())?;
        if n == 0 {
            return Ok(());
        }
        let mut buf = vec![0u8; n + 2];
        r.read_exact(&mut buf).await.map_err(|e| e.to_string())?;
        let now = Instant::now();
        pending.extend_from_slice(&buf[..n]);
        while let Some(i) = pending.iter().position(|c| *c == b'\n') {
            let l: Vec<u8> = pending.drain(..=i).collect();
            if !on_line(&l, now) {
                return Ok(());
            }
        }
    }
}

/// Slow readers: even clients LIST, odd clients watch-list, all rate-limited, for `--hold`.
async fn slow_reader(
    args: Arc<Args>,
    host: String,
    start: Arc<tokio::sync::Barrier>,
    i: usize,
) -> ClientResult {
    start.wait().await;
    let t = Instant::now();
    let base = &args.path;
    let (path, mut sink) = if i.is_multiple_of(2) {
        (
            format!("{base}?resourceVersion=0"),
            Sink::List(ItemCounter::default()),
        )
    } else {
        (
            format!(
                "{base}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
            ),
            Sink::Watch(EventCounter::default()),
        )
    };
    let mut res = ClientResult {
        requests: 1,
        ..Default::default()
    };
    match tokio::time::timeout(
        Duration::from_secs(args.hold),
        get(&args, &host, &path, &mut sink),
    )
    .await
    {
        Ok(Ok((w, b, _))) => {
            res.wire_bytes = w;
            res.body_bytes = b;
        }
        Ok(Err(e)) => res.error = Some(e),
        Err(_) => {} // still reading when the hold ended: expected for slow readers
    }
    res.objects = sink.objects();
    res.seconds = t.elapsed().as_secs_f64();
    res
}

/// An idle watcher with bookmarks, held open for `--hold`.
async fn idle_watcher(
    args: Arc<Args>,
    host: String,
    start: Arc<tokio::sync::Barrier>,
) -> ClientResult {
    start.wait().await;
    let t = Instant::now();
    let path = format!(
        "/api/v1/namespaces/{}/configmaps?watch=1&resourceVersion=0&allowWatchBookmarks=true&timeoutSeconds={}",
        args.namespace,
        args.hold + 60
    );
    let until = Instant::now() + Duration::from_secs(args.hold);
    let mut res = ClientResult {
        requests: 1,
        ..Default::default()
    };
    if let Err(e) = watch_lines(&host, &path, until, |_, _| true).await {
        res.error = Some(e);
    }
    res.seconds = t.elapsed().as_secs_f64();
    held_for(&mut res, args.hold);
    res
}

/// An idle watch must stay open for all of `--hold`: one that the server ended early is
/// an error (so the report's `complete` means every watch was really held).
fn held_for(res: &mut ClientResult, hold: u64) {
    if res.error.is_none() && res.seconds + 0.2 < hold as f64 {
        res.error = Some(format!(
            "watch ended after {:.1}s, before --hold {hold}s",
            res.seconds
        ));
    }
}

/// An idle watch as one stream of a shared HTTP/2 connection: reads bookmarks until --hold.
async fn idle_watcher_h2(
    args: Arc<Args>,
    mut send: hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>>,
    host: String,
    start: Arc<tokio::sync::Barrier>,
) -> ClientResult {
    use http_body_util::BodyExt;
    start.wait().await;
    let t = Instant::now();
    let mut res = ClientResult {
        requests: 1,
        ..Default::default()
    };
    let uri = format!(
        "http://{host}/api/v1/namespaces/{}/configmaps?watch=1&resourceVersion=0&allowWatchBookmarks=true&timeoutSeconds={}",
        args.namespace,
        args.hold + 60
    );
    let mut req = hyper::Request::get(uri);
    let auth = net::auth_header();
    if let Some(v) = auth.strip_prefix("Authorization: ") {
        req = req.header("authorization", v.trim_end());
    }
    let until = tokio::time::Instant::now() + Duration::from_secs(args.hold);
    let run = async {
        let req = req
            .body(http_body_util::Empty::new())
            .map_err(|e| e.to_string())?;
        let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
        if resp.status() != 200 {
            return Err(format!("HTTP {}", resp.status()));
        }
        let mut body = resp.into_body();
        while let Some(f) = body.frame().await {
            let f = f.map_err(|e| e.to_string())?;
            if let Some(d) = f.data_ref() {
                res.wire_bytes += d.len() as u64;
            }
        }
        Ok::<_, String>(())
    };
    // Reaching --hold (the timeout) is the normal end of an idle watch.
    if let Ok(Err(e)) = tokio::time::timeout_at(until, run).await {
        res.error = Some(e);
    }
    res.seconds = t.elapsed().as_secs_f64();
    held_for(&mut res, args.hold);
    res
}

/// Relist storm: LIST, watch from its RV, then everyone drops the watch and relists at once.
async fn relist_storm(
    args: Arc<Args>,
    host: String,
    start: Arc<tokio::sync::Barrier>,
    relist: Arc<tokio::sync::Barrier>,
) -> ClientResult {
    start.wait().await;
    let t = Instant::now();
    let base = &args.path;
    let mut res = ClientResult::default();
    let mut sink = Sink::List(ItemCounter::default());
    let rv = match get(
        &args,
        &host,
        &format!("{base}?resourceVersion=0"),
        &mut sink,
    )
    .await
    {
        Ok(_) => request(&host, "GET", &format!("{base}?limit=1"), "")
            .await
            .ok()
            .and_then(|(_, b)| rv_of(&b)),
        Err(e) => {
            res.error = Some(e);
            None
        }
    };
    let watch_path = format!(
        "{base}?watch=1&resourceVersion={}&allowWatchBookmarks=true",
        rv.unwrap_or(0)
    );
    let h = host.clone();
    let watch = tokio::spawn(async move {
        watch_lines(
            &h,
            &watch_path,
            Instant::now() + Duration::from_secs(3600),
            |_, _| true,
        )
        .await
    });
    relist.wait().await;
    watch.abort();
    let mut sink = Sink::List(ItemCounter::default());
    match get(
        &args,
        &host,
        &format!("{base}?resourceVersion=0"),
        &mut sink,
    )
    .await
    {
        Ok((w, b, _)) => {
            res.wire_bytes = w;
            res.body_bytes = b;
            res.requests = 2;
        }
        Err(e) => res.error = Some(e),
    }
    res.objects = sink.objects();
    res.seconds = t.elapsed().as_secs_f64();
    res
}

/// Churn: a writer cycles create → update → delete over 100 names at `--write-rate` for
/// `--hold` seconds while `--clients` watchers receive the events.
async fn churn(args: Arc<Args>, host: String) -> (Vec<ClientResult>, Latency) {
    let ns = args.namespace.clone();
    let coll = format!("/api/v1/namespaces/{ns}/configmaps");
    // The RV every watcher starts from; without it a watch would begin with synthetic ADDED
    // events for the current state (RV "0" semantics) and the ordering check would be void.
    let Some(start_rv) = request(&host, "GET", &coll, "")
        .await
        .ok()
        .and_then(|(_, b)| rv_of(&b))
    else {
        eprintln!("churn: could not read the collection's resourceVersion");
        return (Vec::new(), Latency::default());
    };
    type Seen = Vec<(u64, Instant)>;
    // Watchers stop 5 s after the last write: ample to deliver everything on loopback.
    let deadline = Instant::now() + Duration::from_millis(300) + Duration::from_secs(args.hold + 5);
    let mut watchers = Vec::new();
    for _ in 0..args.clients {
        let (h, path) = (
            host.clone(),
            format!("{coll}?watch=1&resourceVersion={start_rv}"),
        );
        watchers.push(tokio::spawn(async move {
            let mut seen: Seen = Vec::new();
            let r = watch_lines(&h, &path, deadline, |line, at| {
                if let Ok(v) = serde_json::from_slice::<serde_json::Value>(line)
                    && let Some(rv) = v["object"]["metadata"]["resourceVersion"]
                        .as_str()
                        .and_then(|s| s.parse().ok())
                {
                    seen.push((rv, at));
                }
                true
            })
            .await;
            (seen, r.err())
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Writers: 4 keep-alive connections, each at a quarter of the rate, over disjoint names.
    let stop = Instant::now() + Duration::from_secs(args.hold);
    let writers = 4u64;
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (host, coll) = (host.clone(), coll.clone());
        let period = Duration::from_secs_f64(writers as f64 / args.write_rate.max(1) as f64);
        tasks.push(tokio::spawn(async move {
            let mut conn = KeepAlive { host, conn: None };
            let mut acks: Vec<(u64, Instant)> = Vec::new();
            let (mut writes, mut errors) = (0u64, 0u64);
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut i = 0u64;
            while Instant::now() < stop {
                tick.tick().await;
                let name = format!("churn-{w}-{}", (i / 3) % 25);
                let body = format!(r#"{{"metadata":{{"name":"{name}"}},"data":{{"i":"{i}"}}}}"#);
                let r = match i % 3 {
                    0 => conn.request("POST", &coll, &body).await,
                    1 => conn.request("PUT", &format!("{coll}/{name}"), &body).await,
                    _ => conn.request("DELETE", &format!("{coll}/{name}"), "").await,
                };
                match r {
                    Ok((code, b)) if code < 300 => {
                        writes += 1;
                        if let Some(rv) = rv_of(&b) {
                            acks.push((rv, Instant::now()));
                        }
                    }
                    _ => errors += 1,
                }
                i += 1;
            }
            (writes, errors, acks)
        }));
    }
    let mut acks: std::collections::HashMap<u64, Instant> = Default::default();
    let (mut writes, mut write_errors) = (0u64, 0u64);
    for t in tasks {
        if let Ok((w, e, a)) = t.await {
            writes += w;
            write_errors += e;
            acks.extend(a);
        }
    }
    let mut results = Vec::new();
    let mut lat: Vec<f64> = Vec::new();
    let mut in_order = true;
    let mut per = Vec::new();
    let mut sequences: Vec<Vec<u64>> = Vec::new();
    for w in watchers {
        let (seen, err) = w
            .await
            .unwrap_or_else(|e| (Vec::new(), Some(e.to_string())));
        let ordered = seen.windows(2).all(|p| p[0].0 < p[1].0);
        in_order &= ordered;
        per.push(seen.len() as u64);
        for (rv, at) in &seen {
            if let Some(ack) = acks.get(rv) {
                lat.push(at.saturating_duration_since(*ack).as_secs_f64() * 1e3);
            }
        }
        sequences.push(seen.iter().map(|(rv, _)| *rv).collect());
        results.push(ClientResult {
            objects: seen.len() as u64,
            requests: 1,
            error: err,
            ..Default::default()
        });
    }
    // No lost events: every watcher saw the same RV sequence, it holds every acknowledged
    // write, and it is at least as long as the writes acknowledged.
    let first = sequences.first().cloned().unwrap_or_default();
    let first_set: std::collections::HashSet<u64> = first.iter().copied().collect();
    let all = sequences.iter().all(|s| *s == first)
        && acks.keys().all(|rv| first_set.contains(rv))
        && first.len() as u64 >= writes;
    lat.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    };
    let latency = Latency {
        events_per_watcher: per,
        writes,
        write_errors,
        in_order,
        every_watcher_saw_every_event: all,
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
        max_ms: lat.last().copied().unwrap_or(0.0),
    };
    (results, latency)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Arc::new(Args::parse());
    let host = net::init(
        &args.url,
        args.ca_file.as_deref(),
        args.insecure_skip_tls_verify,
        args.token.as_deref(),
    )?;
    let pid = args.pid;
    let idle = pid.and_then(rss_kib);
    let running = Arc::new(AtomicBool::new(true));
    let t0 = Instant::now();
    let sampler = {
        let running = running.clone();
        std::thread::spawn(move || {
            let mut samples = Vec::new();
            while running.load(Ordering::Relaxed) {
                if let Some(k) = pid.and_then(rss_kib) {
                    samples.push((t0.elapsed().as_secs_f64(), k));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            samples
        })
    };
    let barrier = Arc::new(tokio::sync::Barrier::new(args.clients));
    let relist = Arc::new(tokio::sync::Barrier::new(args.clients));
    let start = Instant::now();
    let mut per_client = Vec::new();
    let mut churn_report = None;
    let mut informer_report = None;
    if let Some(mode) = match args.scenario {
        Scenario::Informers => Some(informer::Mode::List),
        Scenario::InformersWatchlist => Some(informer::Mode::WatchList),
        Scenario::InformersRelist => Some(informer::Mode::Relist),
        _ => None,
    } {
        let cpu0 = informer::cpu_seconds();
        let n = args.clients * args.informers.max(1);
        let start = Arc::new(tokio::sync::Barrier::new(n));
        let relist = Arc::new(tokio::sync::Barrier::new(n));
        let mut handles = Vec::new();
        for _ in 0..args.clients {
            let limiter = Arc::new(informer::TokenBucket::client_go_default());
            for _ in 0..args.informers.max(1) {
                handles.push(tokio::spawn(informer::informer(
                    host.clone(),
                    args.path.clone(),
                    mode,
                    args.gzip,
                    args.discard_objects,
                    limiter.clone(),
                    start.clone(),
                    relist.clone(),
                )));
            }
        }
        let mut results = Vec::new();
        for h in handles {
            results.push(h.await.unwrap_or_else(|e| informer::InformerResult {
                error: Some(e.to_string()),
                ..Default::default()
            }));
        }
        per_client = results
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
        informer_report = Some(InformerSummary {
            mode,
            informers_per_client: args.informers.max(1),
            discard_objects: args.discard_objects,
            informers: results.len(),
            sync_s_max: results.iter().map(|r| r.sync_s).fold(0.0, f64::max),
            requests_to_sync: results
                .iter()
                .map(|r| r.requests - r.relist_requests.unwrap_or(0))
                .sum(),
            relist_s_max: results.iter().filter_map(|r| r.relist_s).reduce(f64::max),
            relist_requests: results.iter().map(|r| r.relist_requests).sum(),
            client_cpu_s: cpu0.zip(informer::cpu_seconds()).map(|(a, b)| b - a),
            per_informer: results,
        });
    } else if let Scenario::Churn = args.scenario {
        let (results, latency) = churn(args.clone(), host.clone()).await;
        per_client = results;
        churn_report = Some(latency);
    } else {
        let mut h2 = Vec::new();
        if let (Scenario::IdleWatchers, Some(k)) = (args.scenario, args.h2_streams_per_conn) {
            for _ in 0..args.clients.div_ceil(k.max(1)) {
                let io = hyper_util::rt::TokioIo::new(net::connect(&host).await?);
                let (send, conn) =
                    hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .max_concurrent_reset_streams(0)
                        .handshake(io)
                        .await?;
                tokio::spawn(conn);
                h2.push(send);
            }
        }
        let handles: Vec<_> = (0..args.clients)
            .map(|i| {
                if let Some(k) = args.h2_streams_per_conn.filter(|_| !h2.is_empty()) {
                    let send = h2[i / k.max(1)].clone();
                    return tokio::spawn(idle_watcher_h2(
                        args.clone(),
                        send,
                        host.clone(),
                        barrier.clone(),
                    ));
                }
                let (a, h, b) = (args.clone(), host.clone(), barrier.clone());
                match a.scenario {
                    Scenario::SlowReaders => tokio::spawn(slow_reader(a, h, b, i)),
                    Scenario::IdleWatchers => tokio::spawn(idle_watcher(a, h, b)),
                    Scenario::RelistStorm => tokio::spawn(relist_storm(a, h, b, relist.clone())),
                    _ => tokio::spawn(client(a, h, b)),
                }
            })
            .collect();
        // Hidden automatically when stderr is not a terminal (CI, redirected runs).
        let bar = indicatif::ProgressBar::new(handles.len() as u64).with_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {elapsed_precise} [{bar:40}] {pos}/{len} clients done {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.enable_steady_tick(Duration::from_millis(200));
        for h in handles {
            per_client.push(h.await.unwrap_or_else(|e| ClientResult {
                error: Some(e.to_string()),
                ..Default::default()
            }));
            bar.inc(1);
        }
        bar.finish_and_clear();
    }
    let duration = start.elapsed().as_secs_f64();
    running.store(false, Ordering::Relaxed);
    let samples = sampler.join().unwrap_or_default();
    let peak = samples.iter().map(|s| s.1).max().or(idle);
    let objects: Vec<u64> = per_client.iter().map(|c| c.objects).collect();
    let expect_ok = match args.scenario {
        // Slow readers are cut off by --hold; they must only have made progress.
        Scenario::SlowReaders => objects.iter().all(|o| *o > 0),
        // Every watch held for --hold (an early end is a client error, see held_for).
        Scenario::IdleWatchers => !per_client.is_empty(),
        Scenario::Churn => churn_report
            .as_ref()
            .is_some_and(|c| c.in_order && c.every_watcher_saw_every_event && c.writes > 0),
        _ => args.expect.is_none_or(|e| objects.iter().all(|o| *o == e)),
    };
    let complete = per_client.iter().all(|c| c.error.is_none()) && expect_ok;
    let report = Report {
        scenario: args.scenario,
        clients: args.clients,
        url: args.url.clone(),
        path: args.path.clone(),
        gzip: args.gzip,
        protobuf: args.protobuf,
        metadata_only: args.metadata_only,
        idle_rss_kib: idle,
        peak_rss_kib: peak,
        peak_minus_idle_kib: idle.zip(peak).map(|(i, p)| p.saturating_sub(i)),
        duration_s: duration,
        total_wire_bytes: per_client.iter().map(|c| c.wire_bytes).sum(),
        objects_per_client: objects,
        complete,
        rss_samples_kib: samples,
        bytes_per_watcher: match (args.scenario, idle.zip(peak)) {
            (Scenario::IdleWatchers, Some((i, p))) => {
                Some(p.saturating_sub(i) as f64 * 1024.0 / args.clients.max(1) as f64)
            }
            _ => None,
        },
        churn: churn_report,
        informers: informer_report,
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
    eprintln!(
        "{:?} clients={} duration={:.2}s idle={:?}KiB peak={:?}KiB peak-idle={:?}KiB complete={}",
        report.scenario,
        report.clients,
        report.duration_s,
        report.idle_rss_kib,
        report.peak_rss_kib,
        report.peak_minus_idle_kib,
        report.complete
    );
    if !report.complete {
        std::process::exit(2);
    }
    Ok(())
}
