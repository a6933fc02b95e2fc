//! What a run measures about the server (by pid, on this machine: RSS sampled every 100 ms,
//! CPU read at the moments a scenario names) and what each client did.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use listwatch_core::process;
use serde::Serialize;

/// The server process, read through /proc (nothing when no `--pid` was given).
#[derive(Clone, Copy)]
pub struct Server {
    pid: Option<u32>,
}

impl Server {
    /// The server with this pid, if known.
    pub fn new(pid: Option<u32>) -> Self {
        Server { pid }
    }

    /// Its resident set, in KiB.
    pub fn rss_kib(self) -> Option<u64> {
        process::rss_kib(self.pid?)
    }

    /// The CPU seconds it has used so far (user + system).
    pub fn cpu_s(self) -> Option<f64> {
        process::cpu_seconds(self.pid?)
    }
}

/// CPU seconds used between two readings.
pub fn cpu_delta(before: Option<f64>, after: Option<f64>) -> Option<f64> {
    before.zip(after).map(|(a, b)| b - a)
}

/// CPU seconds this harness process has used so far.
pub fn own_cpu_s() -> Option<f64> {
    process::cpu_seconds("self")
}

/// CPU seconds used over a measured window: the server's (user + system) and this
/// harness's.
#[derive(Serialize, Default, Clone, Copy)]
pub struct Cpu {
    /// The server's CPU (none without `--pid`).
    pub server_cpu_s: Option<f64>,
    /// This harness's CPU.
    pub client_cpu_s: Option<f64>,
}

/// The server's and this harness's CPU readings at the start of a window.
pub struct CpuMark {
    server: Server,
    server_s: Option<f64>,
    own_s: Option<f64>,
}

impl CpuMark {
    /// Reads both now.
    pub fn now(server: Server) -> Self {
        CpuMark {
            server,
            server_s: server.cpu_s(),
            own_s: own_cpu_s(),
        }
    }

    /// The CPU used from the mark until now.
    pub fn elapsed(&self) -> Cpu {
        Cpu {
            server_cpu_s: cpu_delta(self.server_s, self.server.cpu_s()),
            client_cpu_s: cpu_delta(self.own_s, own_cpu_s()),
        }
    }
}

/// Samples the server's RSS every 100 ms on its own thread until [`Sampler::finish`].
pub struct Sampler {
    running: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(f64, u64)>>,
    /// When sampling started (samples are seconds since then).
    pub t0: Instant,
}

impl Sampler {
    /// Starts sampling `server`.
    pub fn start(server: Server) -> Self {
        let running = Arc::new(AtomicBool::new(true));
        let t0 = Instant::now();
        let thread = {
            let running = running.clone();
            std::thread::spawn(move || {
                let mut samples = Vec::new();
                while running.load(Ordering::Relaxed) {
                    if let Some(k) = server.rss_kib() {
                        samples.push((t0.elapsed().as_secs_f64(), k));
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                samples
            })
        };
        Sampler {
            running,
            thread,
            t0,
        }
    }

    /// Stops and returns the samples: (seconds since start, KiB).
    pub fn finish(self) -> Vec<(f64, u64)> {
        self.running.store(false, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// What one client did.
#[derive(Serialize, Default, Clone)]
pub struct ClientResult {
    /// Objects received (list items, initial ADDED events, watch events).
    pub objects: u64,
    /// Response bytes on the wire.
    pub wire_bytes: u64,
    /// Response bytes after inflating.
    pub body_bytes: u64,
    /// Seconds from start to the end of its work.
    pub seconds: f64,
    /// Requests made.
    pub requests: u32,
    /// Its first request's timings (list scenarios).
    #[serde(flatten)]
    pub first: FirstRequest,
    /// What went wrong, if anything.
    pub error: Option<String>,
}

impl ClientResult {
    /// A watcher's result: `objects` events received over its one watch request, which
    /// ended as `watched` says (the bytes it received on the wire, or what went wrong).
    pub fn of_watch(objects: u64, watched: Result<u64, String>) -> Self {
        let (wire_bytes, error) = match watched {
            Ok(wire) => (wire, None),
            Err(e) => (0, Some(e)),
        };
        ClientResult {
            objects,
            wire_bytes,
            requests: 1,
            error,
            ..Default::default()
        }
    }
}

/// What a client's first request took, in milliseconds (each `None` until timed).
#[derive(Serialize, Default, Clone, Copy)]
pub struct FirstRequest {
    /// Opening its connection (before it was sent).
    pub connect_ms: Option<f64>,
    /// From its bytes going to the kernel until the response's first bytes reached the
    /// socket (plain HTTP/1.1; see `net::Arrival`).
    pub arrival_ms: Option<f64>,
    /// From sending it to the response head.
    pub headers_ms: Option<f64>,
    /// From sending it to the first body byte.
    pub first_byte_ms: Option<f64>,
}

impl FirstRequest {
    /// The earlier observer of the response's first bytes, `arrival` or `headers` (both see
    /// them only after they reached the socket: the poll(2) thread waits for a core too,
    /// `headers` counts from before the first write), so the tighter bound.
    fn seen_ms(&self) -> Option<f64> {
        Some(self.arrival_ms?.min(self.headers_ms?))
    }
}

/// `cpu_s` CPU seconds spread over `events` delivered events, in microseconds each (none
/// when no event was delivered).
pub fn us_per_event(cpu_s: Option<f64>, events: u64) -> Option<f64> {
    cpu_s
        .filter(|_| events > 0)
        .map(|s| s * 1e6 / events as f64)
}

/// The value at fraction `p` of sorted `v` (0 when empty).
pub fn pct(v: &[f64], p: f64) -> f64 {
    v.get(((v.len() as f64 * p) as usize).min(v.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0.0)
}

/// Milliseconds of a duration.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The median and the largest of some samples.
#[derive(Clone, Copy, Default, Debug, PartialEq)]
pub struct Spread {
    /// The median.
    pub p50: f64,
    /// The largest.
    pub max: f64,
}

impl Spread {
    /// The spread of `sorted` (ascending); `None` when it is empty.
    pub fn of(sorted: &[f64]) -> Option<Spread> {
        Some(Spread {
            p50: pct(sorted, 0.5),
            max: *sorted.last()?,
        })
    }
}

/// First-byte latency over every client's first request, from sending it (its connection's
/// setup apart: a storm of new connections is the listener's and the client's work), in ms.
/// Reported as `<what>_p50_ms` and `<what>_max_ms` for each, in this order.
pub struct FirstByte {
    /// Time to open the connection the first request went on.
    pub connect: Spread,
    /// Time from the request's bytes going to the kernel until the response's first bytes
    /// reached the client's socket: the server's figure, without the harness's own delays in
    /// writing and reading (plain HTTP/1.1).
    pub arrival: Option<Spread>,
    /// Each client's earlier observer, `arrival` or `headers` ([`FirstRequest`]).
    pub seen: Option<Spread>,
    /// Time to the response head.
    pub headers: Spread,
    /// Time to the first body byte.
    pub first_byte: Spread,
}

impl FirstByte {
    /// Summarizes the clients' first requests (`None` when none got a response).
    pub fn of(clients: &[ClientResult]) -> Option<Self> {
        let spread = |f: fn(&FirstRequest) -> Option<f64>| {
            let mut v: Vec<f64> = clients.iter().filter_map(|c| f(&c.first)).collect();
            v.sort_by(f64::total_cmp);
            Spread::of(&v)
        };
        Some(FirstByte {
            headers: spread(|f| f.headers_ms)?,
            connect: spread(|f| f.connect_ms).unwrap_or_default(),
            arrival: spread(|f| f.arrival_ms),
            seen: spread(FirstRequest::seen_ms),
            first_byte: spread(|f| f.first_byte_ms).unwrap_or_default(),
        })
    }
}

impl Serialize for FirstByte {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let spreads = [
            ("connect", Some(self.connect)),
            ("arrival", self.arrival),
            ("seen", self.seen),
            ("headers", Some(self.headers)),
            ("first_byte", Some(self.first_byte)),
        ];
        let mut map = s.serialize_map(Some(2 * spreads.len()))?;
        for (what, spread) in spreads {
            map.serialize_entry(&format!("{what}_p50_ms"), &spread.map(|s| s.p50))?;
            map.serialize_entry(&format!("{what}_max_ms"), &spread.map(|s| s.max))?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(arrival: Option<f64>, headers: f64) -> ClientResult {
        ClientResult {
            first: FirstRequest {
                arrival_ms: arrival,
                headers_ms: Some(headers),
                first_byte_ms: Some(headers),
                ..FirstRequest::default()
            },
            ..ClientResult::default()
        }
    }

    #[test]
    fn first_bytes_seen_take_each_clients_earlier_observer() {
        // The arrival thread woke late for the first client, the harness read the head late
        // for the second: each client's first bytes were seen by 15 and 20 ms.
        let f = FirstByte::of(&[client(Some(89.0), 15.0), client(Some(20.0), 70.0)])
            .expect("responses");
        assert_eq!(f.arrival.map(|a| a.max), Some(89.0));
        assert_eq!(f.headers.max, 70.0);
        assert_eq!(f.seen.map(|s| s.max), Some(20.0));
        assert_eq!(f.seen.map(|s| s.p50), Some(20.0));
        // Without an arrival thread (HTTP/2, TLS) there is no second observer.
        let f = FirstByte::of(&[client(None, 15.0)]).expect("responses");
        assert_eq!(f.seen, None);
    }
}
