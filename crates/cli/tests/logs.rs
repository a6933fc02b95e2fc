//! The request log of the real binary: every line of a request sits in its span, which
//! names the request (id, method, path) and, once authenticated, its user.

use std::process::{Command, Stdio};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_lines_carry_the_request_span_with_its_user() {
    let dir = std::env::temp_dir().join(format!("listwatch-logs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let tokens = dir.join("tokens.csv");
    std::fs::write(&tokens, "secret-token,alice,1,\"team\"\n").expect("tokens");
    let mut child = Command::new(env!("CARGO_BIN_EXE_listwatch"))
        .args(["serve", "--listen", "127.0.0.1:0", "--demo-pods", "5"])
        .arg("--token-auth-file")
        .arg(&tokens)
        .args(["--request-log-per-second", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start");
    let log = listwatch_testkit::PipeLines::read(child.stdout.take().expect("stdout"));
    let next_line = |want: &dyn Fn(&str) -> bool| -> String {
        log.find(Duration::from_secs(20), want)
            .expect("no such log line within 20 s")
    };
    let serving = next_line(&|l| l.contains("listen="));
    let addr: std::net::SocketAddr = serving
        .split("listen=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|a| a.parse().ok())
        .expect("listen address");
    let r = listwatch_testkit::get_with(
        addr,
        "/api/v1/pods?limit=1",
        &[("Authorization", "Bearer secret-token")],
    )
    .await;
    assert_eq!(r.status, 200);
    let line = next_line(&|l| l.contains("uri=/api/v1/pods?limit=1"));
    assert!(
        line.contains("request{id=")
            && line.contains("method=GET")
            && line.contains("path=\"/api/v1/pods\"")
            && line.contains("user=\"alice\""),
        "{line}"
    );
    let _ = child.kill();
    let _ = child.wait();
}
