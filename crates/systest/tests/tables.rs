//! kubectl Tables: the Table JSON structure against kube-apiserver's (shared/reference), and
//! what kubectl prints with it.

mod common;

use common::{json, start};
use listwatch_server::ServerConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TABLE_ACCEPT: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

async fn get_with_accept(addr: std::net::SocketAddr, path: &str, accept: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .expect("write");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.expect("read");
    let text = String::from_utf8(raw).expect("utf8");
    let (head, body) = text.split_once("\r\n\r\n").expect("split");
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("code");
    // De-chunk when needed.
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut out = String::new();
        let mut rest = body;
        while let Some((size, after)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            out.push_str(&after[..n]);
            rest = &after[n + 2..];
        }
        out
    } else {
        body.to_string()
    };
    (code, body)
}

fn reference_table() -> Option<serde_json::Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/reference/kube-apiserver-1.36-more-wire.txt"
    );
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find(|l| l.starts_with(r#"{"kind":"Table""#))
        .map(json)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_table_matches_kube_apiserver_structure() {
    let s = start(30, ServerConfig::default()).await;
    let (code, body) = get_with_accept(
        s.addr,
        "/api/v1/namespaces/demo-1/pods?limit=2",
        TABLE_ACCEPT,
    )
    .await;
    assert_eq!(code, 200);
    let t = json(&body);
    assert_eq!(
        (t["kind"].as_str(), t["apiVersion"].as_str()),
        (Some("Table"), Some("meta.k8s.io/v1"))
    );
    assert!(t["metadata"]["continue"].is_string());
    assert_eq!(t["metadata"]["remainingItemCount"], 6);
    let rows = t["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2);
    let cells = rows[0]["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 9);
    assert_eq!(
        (
            cells[0].as_str(),
            cells[1].as_str(),
            cells[2].as_str(),
            cells[3].as_str()
        ),
        (Some("pod-0"), Some("0/2"), Some("Pending"), Some("0"))
    );
    assert_eq!(cells[6], "node-0");
    assert_eq!(cells[7], "<none>");
    let obj = &rows[0]["object"];
    assert_eq!(
        (obj["kind"].as_str(), obj["apiVersion"].as_str()),
        (Some("PartialObjectMetadata"), Some("meta.k8s.io/v1"))
    );
    let (_, full) = get_with_accept(
        s.addr,
        "/api/v1/namespaces/demo-1/pods/pod-0",
        "application/json",
    )
    .await;
    assert_eq!(
        obj["metadata"],
        json(&full)["metadata"],
        "row metadata is the object's metadata"
    );
    assert!(
        body.contains(r#""\u003cnone\u003e""#),
        "Go escapes < and > in cells"
    );
    if let Some(reference) = reference_table() {
        assert_eq!(t["columnDefinitions"], reference["columnDefinitions"]);
        let keys =
            |v: &serde_json::Value| v.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>());
        assert_eq!(keys(&t), keys(&reference));
        assert_eq!(keys(&rows[0]), keys(&reference["rows"][0]));
        assert_eq!(keys(obj), keys(&reference["rows"][0]["object"]));
    }
    // Watch: every event's object is a one-row Table.
    let (_, body) = get_with_accept(s.addr, "/api/v1/namespaces/demo-1/pods?watch=1&fieldSelector=metadata.name%3Dpod-0&timeoutSeconds=1", TABLE_ACCEPT).await;
    let ev = json(body.lines().next().expect("event"));
    assert_eq!(ev["type"], "ADDED");
    assert_eq!(ev["object"]["kind"], "Table");
    assert_eq!(ev["object"]["rows"].as_array().expect("rows").len(), 1);
    // Tables have no protobuf form: a client accepting only that gets 406 (in JSON, as
    // kube-apiserver answers it).
    let (code, body) = get_with_accept(
        s.addr,
        "/api/v1/pods",
        "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io",
    )
    .await;
    assert_eq!(code, 406);
    assert_eq!(json(&body)["reason"], "NotAcceptable");
}

async fn kubectl(addr: std::net::SocketAddr, args: &[&str]) -> String {
    common::require("kubectl");
    common::succeed(
        tokio::process::Command::new("kubectl")
            .env("KUBECONFIG", "/dev/null")
            .arg("--server")
            .arg(format!("http://{addr}"))
            .args(args),
    )
    .await
}

fn header(out: &str) -> Vec<String> {
    let line = out.lines().next().unwrap_or("");
    line.split("  ")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_prints_real_cluster_columns() {
    let s = start(12, ServerConfig::default()).await;
    let out = kubectl(s.addr, &["get", "pods", "-A"]).await;
    assert_eq!(
        header(&out),
        ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    );
    let row: Vec<&str> = out
        .lines()
        .nth(1)
        .expect("row")
        .split_whitespace()
        .collect();
    assert_eq!(&row[..5], ["demo-1", "pod-0", "0/2", "Pending", "0"]);
    let out = kubectl(s.addr, &["get", "pods", "-n", "demo-2", "-o", "wide"]).await;
    assert_eq!(
        header(&out),
        [
            "NAME",
            "READY",
            "STATUS",
            "RESTARTS",
            "AGE",
            "IP",
            "NODE",
            "NOMINATED NODE",
            "READINESS GATES"
        ]
    );
    assert!(
        out.lines().nth(1).expect("row").split_whitespace().eq([
            "pod-1",
            "0/2",
            "Running",
            "0",
            out.lines()
                .nth(1)
                .expect("row")
                .split_whitespace()
                .nth(4)
                .expect("age"),
            "10.0.0.1",
            "node-1",
            "<none>",
            "<none>"
        ])
    );
    common::request(
        s.addr,
        "POST",
        "/api/v1/namespaces/w/configmaps",
        Some(r#"{"metadata":{"name":"c1"},"data":{"a":"1","b":"2"}}"#),
    )
    .await;
    common::request(
        s.addr,
        "POST",
        "/api/v1/namespaces/w/secrets",
        Some(r#"{"metadata":{"name":"s1"},"type":"Opaque","data":{"k":"dg=="}}"#),
    )
    .await;
    let out = kubectl(s.addr, &["get", "cm,secrets", "-n", "w"]).await;
    let blocks: Vec<&str> = out.split("\n\n").collect();
    assert_eq!(header(blocks[0]), ["NAME", "DATA", "AGE"]);
    assert!(
        blocks[0]
            .lines()
            .nth(1)
            .expect("row")
            .split_whitespace()
            .take(2)
            .eq(["configmap/c1", "2"])
    );
    assert_eq!(header(blocks[1]), ["NAME", "TYPE", "DATA", "AGE"]);
    assert!(
        blocks[1]
            .lines()
            .nth(1)
            .expect("row")
            .split_whitespace()
            .take(3)
            .eq(["secret/s1", "Opaque", "1"])
    );
}
