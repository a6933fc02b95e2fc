//! The system tests' helpers: the server's own test helpers (one copy, in
//! crates/server/tests/common) plus real etcd members.
#![allow(dead_code, unused_imports)]

#[path = "../../../server/tests/common/mod.rs"]
mod server;

pub mod etcd;
pub use server::*;

/// Runs `cmd` to its end, asserts that it succeeded (its stderr the message) and returns
/// its stdout.
pub async fn succeed(cmd: &mut tokio::process::Command) -> String {
    let out = cmd.output().await.expect("command runs");
    assert!(
        out.status.success(),
        "{:?}: {}",
        cmd.as_std(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf8")
}
