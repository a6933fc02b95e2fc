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
use tokio::net::TcpStream;

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
    /// Objects each client must receive (the report's `complete` checks it).
    #[arg(long)]
    expect: Option<u64>,
    /// Where to write the JSON report.
    #[arg(long)]
    out: Option<PathBuf>,
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

#[derive(Serialize)]
struct Report {
    scenario: Scenario,
    clients: usize,
    url: String,
    path: String,
    gzip: bool,
    idle_rss_kib: Option<u64>,
    peak_rss_kib: Option<u64>,
    peak_minus_idle_kib: Option<u64>,
    duration_s: f64,
    total_wire_bytes: u64,
    objects_per_client: Vec<u64>,
    complete: bool,
    rss_samples_kib: Vec<(f64, u64)>,
    per_client: Vec<ClientResult>,
}

fn rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
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

enum Sink {
    List(ItemCounter),
    Watch(EventCounter),
}

impl Sink {
    fn feed(&mut self, d: &[u8]) {
        match self {
            Sink::List(c) => c.feed(d),
            Sink::Watch(c) => c.feed(d),
        }
    }
    fn objects(&self) -> u64 {
        match self {
            Sink::List(c) => c.items,
            Sink::Watch(c) => c.added,
        }
    }
    fn done(&self) -> bool {
        matches!(self, Sink::Watch(c) if c.done)
    }
}

/// One GET, body streamed through `sink`; returns (wire bytes, body bytes, continue token).
async fn get(
    args: &Args,
    host: &str,
    path: &str,
    sink: &mut Sink,
) -> Result<(u64, u64, Option<String>), String> {
    let mut s = TcpStream::connect(host).await.map_err(|e| e.to_string())?;
    let auth = args
        .token
        .as_ref()
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let enc = if args.gzip {
        "Accept-Encoding: gzip\r\n"
    } else {
        ""
    };
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: listwatch-loadtest\r\n{auth}{enc}Connection: close\r\n\r\n").as_bytes())
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
                let k = n.min(buf.len());
                r.read_exact(&mut buf[..k])
                    .await
                    .map_err(|e| e.to_string())?;
                feed(&buf[..k], sink, &mut body, &mut tail)?;
                n -= k;
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
    let mut sink = match args.scenario {
        Scenario::Watchlist => Sink::Watch(EventCounter::default()),
        _ => Sink::List(ItemCounter::default()),
    };
    let mut next = match args.scenario {
        Scenario::List => Some(format!("{base}{sep}resourceVersion=0")),
        Scenario::ListConsistent => Some(base.clone()),
        Scenario::ListPaged => Some(format!("{base}{sep}limit=500")),
        Scenario::Watchlist => Some(format!(
            "{base}{sep}watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
        )),
    };
    while let Some(path) = next.take() {
        // A paged list restarts item counting per page; keep the running total.
        let before = sink.objects();
        if let Sink::List(c) = &mut sink {
            *c = ItemCounter {
                items: before,
                ..Default::default()
            };
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

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Arc::new(Args::parse());
    let host = args
        .url
        .strip_prefix("http://")
        .ok_or("only http:// URLs are supported so far")?
        .trim_end_matches('/')
        .to_string();
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
    let start = Instant::now();
    let handles: Vec<_> = (0..args.clients)
        .map(|_| tokio::spawn(client(args.clone(), host.clone(), barrier.clone())))
        .collect();
    let mut per_client = Vec::new();
    for h in handles {
        per_client.push(h.await.unwrap_or_else(|e| ClientResult {
            error: Some(e.to_string()),
            ..Default::default()
        }));
    }
    let duration = start.elapsed().as_secs_f64();
    running.store(false, Ordering::Relaxed);
    let samples = sampler.join().unwrap_or_default();
    let peak = samples.iter().map(|s| s.1).max().or(idle);
    let objects: Vec<u64> = per_client.iter().map(|c| c.objects).collect();
    let complete = per_client.iter().all(|c| c.error.is_none())
        && args.expect.is_none_or(|e| objects.iter().all(|o| *o == e));
    let report = Report {
        scenario: args.scenario,
        clients: args.clients,
        url: args.url.clone(),
        path: args.path.clone(),
        gzip: args.gzip,
        idle_rss_kib: idle,
        peak_rss_kib: peak,
        peak_minus_idle_kib: idle.zip(peak).map(|(i, p)| p.saturating_sub(i)),
        duration_s: duration,
        total_wire_bytes: per_client.iter().map(|c| c.wire_bytes).sum(),
        objects_per_client: objects,
        complete,
        rss_samples_kib: samples,
        per_client,
    };
    let json = serde_json::to_string_pretty(&report)?;
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
