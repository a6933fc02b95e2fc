//! The official Python `kubernetes` client (installed by scripts/test) against listwatch: paging
//! with `_continue` and `watch.Watch().stream` from a resourceVersion.

mod common;

use listwatch_server::ServerConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_client_lists_pages_and_watches() {
    common::require("python-kubernetes");
    let s = common::start(45, ServerConfig::default()).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/client_check.py");
    let out = tokio::process::Command::new("python3")
        .arg(script)
        .arg(format!("http://{}", s.addr))
        .arg("45")
        .output()
        .await
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "python client failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("python client ok: 45 pods in 7 pages"),
        "{stdout}"
    );
}
