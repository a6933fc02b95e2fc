//! kubectl (the machine's binary, unmodified) against a listwatch server.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{json, request, start};
use listwatch_server::ServerConfig;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

fn kubectl(addr: std::net::SocketAddr) -> Command {
    common::require("kubectl");
    let mut c = Command::new("kubectl");
    // No kubeconfig: the server flag is all kubectl needs for plain HTTP.
    c.env("KUBECONFIG", "/dev/null")
        .arg("--server")
        .arg(format!("http://{addr}"));
    c
}

async fn run(addr: std::net::SocketAddr, args: &[&str]) -> String {
    common::succeed(kubectl(addr).args(args)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_pods_all_namespaces_and_one_as_json() {
    let s = start(120, ServerConfig::default()).await;
    let out = run(s.addr, &["get", "pods", "-A"]).await;
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("NAMESPACE") && lines[0].contains("NAME"),
        "{}",
        lines[0]
    );
    assert_eq!(lines.len(), 121);
    assert!(
        lines
            .iter()
            .any(|l| l.split_whitespace().take(2).eq(["demo-3", "pod-2"]))
    );
    // kubectl pages with limit=500 and follows continue tokens.
    let out = run(
        s.addr,
        &["get", "pods", "-A", "--chunk-size=7", "-o", "name"],
    )
    .await;
    assert_eq!(out.lines().count(), 120);
    let pod = json(
        &run(
            s.addr,
            &["get", "pod", "pod-5", "-n", "demo-2", "-o", "json"],
        )
        .await,
    );
    assert_eq!(pod["metadata"]["name"], "pod-5");
    assert_eq!(pod["kind"], "Pod");
    let out = run(
        s.addr,
        &[
            "get",
            "pods",
            "-n",
            "demo-1",
            "--field-selector",
            "status.phase=Pending",
            "-o",
            "name",
        ],
    )
    .await;
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        vec![
            "pod/pod-0",
            "pod/pod-100",
            "pod/pod-20",
            "pod/pod-40",
            "pod/pod-60",
            "pod/pod-80"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_watch_sees_added_modified_deleted() {
    let s = start(0, ServerConfig::default()).await;
    let mut child = kubectl(s.addr)
        .args([
            "get",
            "configmaps",
            "-n",
            "w",
            "-w",
            "--output-watch-events",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    // Write only once kubectl's watch is registered (a fixed sleep races under load).
    let mut watching = false;
    for _ in 0..200 {
        let m = common::get(s.addr, "/metrics").await.body;
        if m.lines()
            .any(|l| l == r#"apiserver_registered_watchers{resource="configmaps"} 1"#)
        {
            watching = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(watching, "kubectl never started watching");
    let ns = "/api/v1/namespaces/w/configmaps";
    assert_eq!(
        request(s.addr, "POST", ns, Some(r#"{"metadata":{"name":"c1"}}"#))
            .await
            .status,
        201
    );
    assert_eq!(
        request(
            s.addr,
            "PUT",
            &format!("{ns}/c1"),
            Some(r#"{"metadata":{"name":"c1"},"data":{"a":"b"}}"#)
        )
        .await
        .status,
        200
    );
    assert_eq!(
        request(s.addr, "DELETE", &format!("{ns}/c1"), None)
            .await
            .status,
        200
    );
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .expect("line in time")
            .expect("read")
            .expect("line");
        // Columns: EVENT NAME AGE (after one header line).
        let cols: Vec<&str> = line.split_whitespace().take(2).collect();
        if cols[0] != "EVENT" {
            seen.push(cols.join(" "));
        }
    }
    assert_eq!(seen, vec!["ADDED c1", "MODIFIED c1", "DELETED c1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_raw_watch_list() {
    let s = start(25, ServerConfig::default()).await;
    let out = run(
        s.addr,
        &["get", "--raw", "/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1"],
    )
    .await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 26);
    assert!(lines[..25].iter().all(|l| json(l)["type"] == "ADDED"));
    let rv = s.source.revision();
    assert_eq!(
        lines[25],
        format!(
            r#"{{"type":"BOOKMARK","object":{{"kind":"Pod","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}","annotations":{{"k8s.io/initial-events-end":"true"}}}},"spec":{{"containers":null}},"status":{{}}}}}}"#
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_resources_from_aggregated_discovery() {
    let s = start(0, ServerConfig::default()).await;
    let cache = std::env::temp_dir().join(format!("lw-kube-cache-{}", s.addr.port()));
    let out = kubectl(s.addr)
        .args(["api-resources", "-v=6", "--cache-dir"])
        .arg(&cache)
        .output()
        .await
        .expect("kubectl");
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for r in [
        "pods",
        "configmaps",
        "secrets",
        "nodes",
        "namespaces",
        "deployments",
        "statefulsets",
    ] {
        assert!(
            stdout.lines().any(|l| l.starts_with(r)),
            "{r} missing:\n{stdout}"
        );
    }
    // Aggregated discovery: /api and /apis answer everything; no per-group-version requests.
    assert!(stderr.contains("/apis?"), "{stderr}");
    assert!(
        !stderr.contains("/api/v1?") && !stderr.contains("/apis/apps/v1?"),
        "legacy fan-out happened:\n{stderr}"
    );
    let _ = std::fs::remove_dir_all(cache);
}

/// `kubectl auth can-i` under the default `AlwaysAllow`: kube-apiserver answers yes, for
/// resources and non-resource paths alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_can_i_is_answered_under_always_allow() {
    let s = start(0, ServerConfig::default()).await;
    assert_eq!(
        run(s.addr, &["auth", "can-i", "list", "pods"]).await,
        "yes\n"
    );
    assert_eq!(
        run(
            s.addr,
            &["auth", "can-i", "delete", "secrets", "-n", "kube-system"]
        )
        .await,
        "yes\n"
    );
    assert_eq!(
        run(s.addr, &["auth", "can-i", "get", "/healthz"]).await,
        "yes\n"
    );
}

/// `kubectl … --dry-run=server` and `kubectl diff` leave the store as it was: kubectl sends
/// `dryRun=All` in the query for create and in the DeleteOptions body for delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_dry_runs_and_diff_leave_the_store_as_it_was() {
    let s = start(0, ServerConfig::default()).await;
    run(s.addr, &["create", "configmap", "kept", "-n", "default"]).await;
    let list = || async { json(&common::get(s.addr, "/api/v1/configmaps").await.body) };
    let before = list().await;
    let dir = std::env::temp_dir().join(format!("lw-dry-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let manifest = dir.join("fresh.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fresh\n  namespace: default\ndata:\n  a: \"1\"\n",
    )
    .expect("write");
    let manifest = manifest.to_str().expect("path");
    let out = run(
        s.addr,
        &[
            "delete",
            "configmap",
            "kept",
            "-n",
            "default",
            "--dry-run=server",
        ],
    )
    .await;
    assert!(out.contains("(server dry run)"), "{out}");
    let out = run(
        s.addr,
        &[
            "create",
            "-f",
            manifest,
            "--dry-run=server",
            "--validate=false",
        ],
    )
    .await;
    assert!(out.contains("(server dry run)"), "{out}");
    // diff dry-run-creates the object it does not find and shows it; exit 1 = differences.
    let diff = kubectl(s.addr)
        .env("KUBECTL_EXTERNAL_DIFF", "diff -u")
        .args(["diff", "-f", manifest])
        .output()
        .await
        .expect("kubectl diff");
    let shown = String::from_utf8_lossy(&diff.stdout);
    assert_eq!(
        diff.status.code(),
        Some(1),
        "{shown}{}",
        String::from_utf8_lossy(&diff.stderr)
    );
    assert!(shown.contains("+  name: fresh"), "{shown}");
    let after = list().await;
    assert_eq!(after, before, "a dry run changed the store");
    let names: Vec<_> = after["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["metadata"]["name"].clone())
        .collect();
    assert_eq!(names, vec![serde_json::json!("kept")]);
}
