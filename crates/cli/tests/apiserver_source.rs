//! `listwatch serve --source apiserver --upstream URL` as two real processes: an upstream
//! listwatch on its embedded store with demo pods, and a front following it. Reads come
//! from the front's caches (equal to the upstream's), writes pass through and are seen by
//! the front's watches and consistent reads.

use std::net::SocketAddr;
use std::time::Duration;

use listwatch_testkit::{Killed, send, serve, try_stream_lines, wait_ready};

/// An upstream listwatch with `pods` demo pods and a front following it with `flags`,
/// ready: both processes (killed when dropped) and the front's address.
async fn upstream_and_front(pods: usize, flags: &[&str]) -> ([Killed; 2], SocketAddr, SocketAddr) {
    let bin = env!("CARGO_BIN_EXE_listwatch");
    let (up, up_addr) = serve(bin, ["--demo-pods", &pods.to_string()]);
    let up = Killed(up);
    let upstream = format!("http://{up_addr}");
    let (front, addr) = serve(
        bin,
        ["--source", "apiserver", "--upstream", &upstream]
            .iter()
            .chain(flags),
    );
    let front = Killed(front);
    assert_eq!(wait_ready(addr, Duration::from_secs(20)).await, 200);
    ([up, front], up_addr, addr)
}

fn items(body: &[u8]) -> Vec<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_slice(body).expect("json");
    v["items"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_front_listwatch_serves_the_upstream_s_objects() {
    // The upstream here lets everyone in; without AlwaysAllow the front would authorize
    // with the cluster's rules (below).
    let (_servers, up_addr, addr) =
        upstream_and_front(200, &["--authorization-mode", "AlwaysAllow"]).await;

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
    listwatch_testkit::next_added(&mut watch, "w").await;
}

/// In front of a cluster, named no authorization mode and given no credential to ask the
/// upstream with, listwatch authorizes its reads with the cluster's RBAC objects it follows,
/// never AlwaysAllow: here there are none, so an anonymous read is refused, while the
/// public health paths stay open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_front_of_a_cluster_reads_are_not_open_by_default() {
    let (_servers, up_addr, addr) = upstream_and_front(5, &[]).await;
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
