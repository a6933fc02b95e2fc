//! The listener's accept queue: thousands of clients connecting at once (kubelets after an
//! apiserver restart) wait in the kernel until the server accepts them, rather than being
//! reset once tokio's default backlog of 1,024 is full.

use std::net::TcpStream;
use std::time::Duration;

use rustix::process::{Pid, Resource, Signal, getrlimit, kill_process, setrlimit};

#[test]
fn connections_beyond_tokios_default_backlog_wait_to_be_accepted() {
    let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    // The kernel caps any backlog at somaxconn (4,096 since Linux 5.4), and the test needs
    // a descriptor per connection: where either allows no more than tokio's 1,024, there
    // is nothing to show.
    let files = raise_open_file_limit(2200);
    let n = somaxconn.min(2000).min(files.saturating_sub(100));
    if n <= 1100 {
        eprintln!("somaxconn {somaxconn}, open files {files}: not above tokio's 1,024, skipped");
        return;
    }

    let (mut child, addr) =
        listwatch_testkit::serve(env!("CARGO_BIN_EXE_listwatch"), ["--demo-pods", "10"]);
    let pid = i32::try_from(child.id())
        .ok()
        .and_then(Pid::from_raw)
        .expect("pid");
    // Stopped, the server accepts nothing: every connection must wait in the queue.
    kill_process(pid, Signal::STOP).expect("SIGSTOP");
    let mut held = Vec::with_capacity(n);
    for i in 0..n {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
            Ok(s) => held.push(s),
            Err(e) => {
                let _ = kill_process(pid, Signal::CONT);
                let _ = child.kill();
                panic!("connection {i} of {n} was not queued: {e}");
            }
        }
    }
    kill_process(pid, Signal::CONT).expect("SIGCONT");
    drop(held);
    let _ = child.kill();
    let _ = child.wait();
}

/// Raises this process's soft limit on open files to `want` (at most the hard limit);
/// returns the limit now in force.
fn raise_open_file_limit(want: u64) -> usize {
    let mut lim = getrlimit(Resource::Nofile);
    if lim.current.is_some_and(|c| c < want) {
        lim.current = Some(lim.maximum.map_or(want, |m| want.min(m)));
        setrlimit(Resource::Nofile, lim).expect("setrlimit");
    }
    lim.current
        .map_or(usize::MAX, |c| usize::try_from(c).unwrap_or(usize::MAX))
}
