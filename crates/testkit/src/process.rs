//! What tests do around the processes they start: a scratch directory, the lines a child
//! writes read on a thread, a command's outcome as text, a server killed when dropped.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

/// A scratch directory of this process, emptied when made and removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// `<temp>/listwatch-<tag>-<pid>-<n>`: unique to this process and call.
    pub fn new(tag: &str) -> TempDir {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("listwatch-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("temp dir");
        TempDir(p)
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The lines of a child's pipe (its log, a watch `curl -N` prints), read on a thread of
/// their own so the child never blocks on a full pipe.
pub struct PipeLines(std::sync::mpsc::Receiver<String>);

impl PipeLines {
    /// Starts reading `pipe` line by line.
    pub fn read(pipe: impl std::io::Read + Send + 'static) -> PipeLines {
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        PipeLines(rx)
    }

    /// The first line for which `want` holds within `within` (the lines before it are
    /// read and dropped); `None` when none comes in time or the pipe ends.
    pub fn find(&self, within: Duration, want: impl Fn(&str) -> bool) -> Option<String> {
        let deadline = Instant::now() + within;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.0.recv_timeout(left) {
                Ok(line) if want(&line) => return Some(line),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
        None
    }
}

/// Whether a command succeeded, and its stdout (or, when it failed, its stderr: where
/// kubectl says `Forbidden`).
pub fn outcome(out: Output) -> (bool, String) {
    let ok = out.status.success();
    let text = if ok { out.stdout } else { out.stderr };
    (ok, String::from_utf8_lossy(&text).into_owned())
}

/// The stdout of a command that must have succeeded (`what` and its stderr the message
/// when it did not).
pub fn stdout_of_success(what: &str, out: &Output) -> String {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A child process killed (and reaped) when dropped: a server a test started.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `BIN serve --listen 127.0.0.1:0 ARGS`, where `bin` is the `listwatch` binary under test
/// (`env!("CARGO_BIN_EXE_listwatch")` in the cli's tests), started with
/// [`crate::spawn_server`]: the process and the address it serves on.
pub fn serve<I, S>(bin: &str, args: I) -> (std::process::Child, std::net::SocketAddr)
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    crate::spawn_server(
        std::process::Command::new(bin)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args),
    )
}
