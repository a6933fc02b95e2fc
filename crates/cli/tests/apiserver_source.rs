//! `listwatch serve --source apiserver --upstream URL` as two real processes: an upstream
//! listwatch on its embedded store with demo pods, and a front following it. Reads come
//! from the front's caches (equal to the upstream's), writes pass through and are seen by
//! the front's watches and consistent reads.

use std::process::{Child, Command};
use std::time::Duration;

use listwatch_testkit::{next_line, send, spawn_server, try_stream_lines, wait_ready};

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn items(body: &[u8]) -> Vec<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_slice(body).expect("json");
    v["items"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_front_listwatch_serves_the_upstream_s_objects() {
    let (up, up_addr) = spawn_server(Command::new(env!("CARGO_BIN_EXE_listwatch")).args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--demo-pods",
        "200",
    ]));
    let _up = Killed(up);
    let upstream = format!("http://{up_addr}");
    let (front, addr) = spawn_server(Command::new(env!("CARGO_BIN_EXE_listwatch")).args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--source",
        "apiserver",
        "--upstream",
        &upstream,
        // The upstream here lets everyone in; without this the front would authorize
        // with the cluster's rules (below).
        "--authorization-mode",
        "AlwaysAllow",
    ]));
    let _front = Killed(front);
    assert_eq!(wait_ready(addr, Duration::from_secs(20)).await, 200);

    let theirs = send(up_addr, "GET", "/api/v1/pods", &[], None)
        .await
        .expect("upstream");
    let ours = send(addr, "GET", "/api/v1/pods", &[], None)
        .await
        .expect("front");
    assert_eq!((theirs.status, ours.status), (200, 200));
    let (theirs, ours) = (items(&theirs.body), items(&ours.body));
    assert_eq!(theirs.len(), 200);
    assert_eq!(ours, theirs);

    let mut watch = try_stream_lines(addr, "/api/v1/namespaces/default/configmaps?watch=1")
        .await
        .expect("watch");
    let body =
        br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"w","namespace":"default"}}"#;
    let created = send(
        addr,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &[("Content-Type", "application/json")],
        Some(body),
    )
    .await
    .expect("create");
    assert_eq!(
        created.status,
        201,
        "{}",
        String::from_utf8_lossy(&created.body)
    );
    let list = send(
        addr,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        &[],
        None,
    )
    .await
    .expect("list");
    let names: Vec<_> = items(&list.body)
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(names.contains(&"w".to_string()), "{names:?}");
    let line = next_line(&mut watch, 10).await.expect("an event");
    assert!(
        line.contains("\"ADDED\"") && line.contains("\"w\""),
        "{line}"
    );
}

/// In front of a cluster, named no authorization mode and given no credential to ask the
/// upstream with, listwatch authorizes its reads with the cluster's RBAC objects it follows,
/// never AlwaysAllow: here there are none, so an anonymous read is refused, while the
/// public health paths stay open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_front_of_a_cluster_reads_are_not_open_by_default() {
    let (up, up_addr) = spawn_server(Command::new(env!("CARGO_BIN_EXE_listwatch")).args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--demo-pods",
        "5",
    ]));
    let _up = Killed(up);
    let upstream = format!("http://{up_addr}");
    let (front, addr) = spawn_server(Command::new(env!("CARGO_BIN_EXE_listwatch")).args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--source",
        "apiserver",
        "--upstream",
        &upstream,
    ]));
    let _front = Killed(front);
    assert_eq!(wait_ready(addr, Duration::from_secs(20)).await, 200);
    for path in [
        "/api/v1/pods",
        "/api/v1/secrets",
        "/api/v1/namespaces/default/pods/x",
    ] {
        let r = send(addr, "GET", path, &[], None).await.expect("answer");
        assert_eq!(
            r.status,
            403,
            "{path}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
    let up = send(up_addr, "GET", "/api/v1/pods", &[], None)
        .await
        .expect("upstream");
    assert_eq!(up.status, 200, "the upstream itself is open");
}
