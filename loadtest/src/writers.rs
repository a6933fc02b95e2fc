//! Writers over keep-alive connections: paced at a rate for a while (churn), or as fast as
//! the server takes them (creating a scenario's objects). Every acknowledged write is kept
//! with its resourceVersion, when it was acknowledged and a tag (e.g. the node a pod is
//! on), so watchers can be checked against what was written.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::Method;
use tokio::sync::Mutex;

use crate::http::{KeepAlive, rv_of};

/// One write: method, path, JSON body; `tag` groups its acknowledgement.
pub struct Write {
    /// POST, PUT, PATCH (a JSON merge patch) or DELETE.
    pub method: Method,
    /// Collection or object path.
    pub path: String,
    /// JSON body, if any.
    pub body: Option<String>,
    /// Which group the write counts for (the node of a pod; 0 when unused).
    pub tag: usize,
}

/// An acknowledged write.
pub struct Ack {
    /// The resourceVersion the server answered with (a DELETE may answer with a `Status`,
    /// which has none).
    pub rv: Option<u64>,
    /// When the answer arrived.
    pub at: Instant,
    /// The write's tag.
    pub tag: usize,
}

/// What a set of writers did.
#[derive(Default)]
pub struct Log {
    /// Writes answered with 2xx.
    pub writes: u64,
    /// Writes that failed (an error or another status).
    pub errors: u64,
    /// The first few failures, for the report.
    pub first_errors: Vec<String>,
    /// Every 2xx answer.
    pub acks: Vec<Ack>,
}

impl Log {
    fn merge(&mut self, other: Log) {
        self.writes += other.writes;
        self.errors += other.errors;
        let room = 5usize.saturating_sub(self.first_errors.len());
        self.first_errors
            .extend(other.first_errors.into_iter().take(room));
        self.acks.extend(other.acks);
    }

    async fn send(&mut self, conn: &mut KeepAlive, w: Write) {
        match conn.call(w.method, &w.path, w.body).await {
            Ok((code, body)) if code < 300 => {
                self.writes += 1;
                self.acks.push(Ack {
                    rv: rv_of(&body),
                    at: Instant::now(),
                    tag: w.tag,
                });
            }
            r => {
                self.errors += 1;
                if self.first_errors.len() < 5 {
                    self.first_errors.push(match r {
                        Ok((code, body)) => format!(
                            "{} {}: HTTP {code} {}",
                            w.path,
                            w.tag,
                            String::from_utf8_lossy(&body[..body.len().min(200)])
                        ),
                        Err(e) => format!("{}: {e}", w.path),
                    });
                }
            }
        }
    }
}

/// `writers` keep-alive connections, each writing `rate / writers` per second until `hold`
/// has passed; writer `w`'s `i`-th write is `plan(w, i)`.
pub async fn paced(
    host: &str,
    writers: u64,
    rate: u64,
    hold: Duration,
    plan: Arc<dyn Fn(u64, u64) -> Write + Send + Sync>,
) -> Log {
    let stop = Instant::now() + hold;
    let period = Duration::from_secs_f64(writers as f64 / rate.max(1) as f64);
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let (host, plan) = (host.to_string(), plan.clone());
            tokio::spawn(async move {
                let mut conn = KeepAlive::new(&host);
                let mut log = Log::default();
                let mut tick = tokio::time::interval(period);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mut i = 0;
                while Instant::now() < stop {
                    tick.tick().await;
                    log.send(&mut conn, plan(w, i)).await;
                    i += 1;
                }
                log
            })
        })
        .collect();
    gather(tasks).await
}

/// `conns` keep-alive connections sending everything `writes` yields, as fast as the
/// server answers.
pub async fn bulk(host: &str, conns: usize, writes: tokio::sync::mpsc::Receiver<Write>) -> Log {
    let writes = Arc::new(Mutex::new(writes));
    let tasks: Vec<_> = (0..conns.max(1))
        .map(|_| {
            let (host, writes) = (host.to_string(), writes.clone());
            tokio::spawn(async move {
                let mut conn = KeepAlive::new(&host);
                let mut log = Log::default();
                loop {
                    let next = writes.lock().await.recv().await;
                    let Some(w) = next else { break };
                    log.send(&mut conn, w).await;
                }
                log
            })
        })
        .collect();
    gather(tasks).await
}

/// The writers' logs as one.
async fn gather(tasks: Vec<tokio::task::JoinHandle<Log>>) -> Log {
    let mut log = Log::default();
    for t in tasks {
        if let Ok(l) = t.await {
            log.merge(l);
        }
    }
    log
}
