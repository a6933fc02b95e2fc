//! The apiserver source against a real upstream: listwatch on its embedded store (demo
//! pods) served over HTTP on 127.0.0.1, followed by a front listwatch
//! (`UpstreamSource` + the gateway for writes), as `listwatch serve --source apiserver
//! --upstream …` runs them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use listwatch_gateway::{Gateway, GatewayConfig, Identity};
use listwatch_kubeclient::ClientConfig;
use listwatch_server::{App, ServeOptions, ServerConfig, serve_with};
use listwatch_sources::{EmbeddedSource, Registry, Source, demo};
use listwatch_testkit::{listen_local, send, try_stream_lines};
use listwatch_upstream::UpstreamSource;

async fn serve(app: Arc<App>) -> SocketAddr {
    let (listener, addr) = listen_local().await;
    let options = ServeOptions::default();
    tokio::spawn(serve_with(app, listener, options, std::future::pending()));
    addr
}

/// The upstream: listwatch on its embedded store with 50 demo pods.
async fn upstream() -> SocketAddr {
    let registry = Registry::new(listwatch_core::builtin_resources(), 1, &Default::default());
    let source = EmbeddedSource::new(registry);
    let pods = source.registry().get("", "v1", "pods").expect("pods");
    source.seed(&pods, demo::demo_pods(50, 3)).expect("seed");
    serve(App::embedded(source, ServerConfig::default())).await
}

/// The front: reads from an `UpstreamSource` following `follow`, everything else passed to
/// `upstream`.
async fn front(follow: SocketAddr, upstream: SocketAddr) -> (SocketAddr, Arc<UpstreamSource>) {
    let source = UpstreamSource::start(
        &ClientConfig::new(format!("http://{follow}")),
        &Default::default(),
    )
    .await
    .expect("discovery");
    let app = App::new(source.clone(), ServerConfig::default(), None);
    let gw = GatewayConfig::new(format!("http://{upstream}"), Identity::Forward);
    app.set_pass_through(Gateway::new(gw).expect("gateway"));
    (serve(app).await, source)
}

/// An upstream and a front following it directly, the front ready: (upstream, front, the
/// front's source).
async fn ready_pair() -> (SocketAddr, SocketAddr, Arc<UpstreamSource>) {
    let up = upstream().await;
    let (front, source) = front(up, up).await;
    assert_eq!(ready(front).await, 200);
    (up, front, source)
}

/// A list's `metadata.resourceVersion`.
fn list_rv(list: &serde_json::Value) -> u64 {
    list["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .expect("rv")
}

async fn get(addr: SocketAddr, path: &str) -> (u16, serde_json::Value) {
    let r = send(addr, "GET", path, &[], None).await.expect("answer");
    let v = serde_json::from_slice(&r.body).unwrap_or(serde_json::Value::Null);
    (r.status, v)
}

async fn ready(addr: SocketAddr) -> u16 {
    listwatch_testkit::wait_ready(addr, Duration::from_secs(20)).await
}

fn configmap(name: &str) -> Vec<u8> {
    format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"default"}},"data":{{"a":"b"}}}}"#)
        .into_bytes()
}

async fn create(addr: SocketAddr, name: &str) {
    let r = send(
        addr,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &[("Content-Type", "application/json")],
        Some(&configmap(name)),
    )
    .await
    .expect("answer");
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
}

fn names(list: &serde_json::Value) -> Vec<String> {
    list["items"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|i| i["metadata"]["name"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_through_the_front_equals_the_upstream_s() {
    let (up, front, _) = ready_pair().await;
    let (s1, theirs) = get(up, "/api/v1/pods").await;
    let (s2, ours) = get(front, "/api/v1/pods").await;
    assert_eq!((s1, s2), (200, 200));
    assert_eq!(theirs["items"].as_array().map(Vec::len), Some(50));
    let diff = listwatch_testkit::json_diff(&ours["items"], &theirs["items"], 5);
    assert!(diff.is_empty(), "{diff:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_through_the_front_shows_in_a_watch_on_the_front() {
    let (_, front, _) = ready_pair().await;
    let (_, list) = get(front, "/api/v1/namespaces/default/configmaps").await;
    let rv = list_rv(&list);
    let mut lines = try_stream_lines(
        front,
        &format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}"),
    )
    .await
    .expect("watch");
    create(front, "through").await;
    listwatch_testkit::next_added(&mut lines, "through").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consistent_list_after_a_write_contains_it() {
    let (up, front, source) = ready_pair().await;
    for i in 0..5 {
        let name = format!("c{i}");
        create(front, &name).await;
        let (s, list) = get(
            front,
            "/api/v1/namespaces/default/configmaps?resourceVersion=",
        )
        .await;
        assert_eq!(s, 200);
        assert!(
            names(&list).contains(&name),
            "{name} missing: {:?}",
            names(&list)
        );
    }
    // An idle resource (pods: nothing written since the sync) behind a moved RV: the
    // stream brings nothing, so the cache is proven current by a LIST, and the read is
    // answered at the upstream's RV.
    let (s, list) = get(front, "/api/v1/pods").await;
    assert_eq!(s, 200, "{list}");
    assert_eq!(names(&list).len(), 50);
    let at = list_rv(&list);
    let (_, theirs) = get(up, "/api/v1/namespaces/default/configmaps?limit=1").await;
    let now = list_rv(&theirs);
    assert!(at >= now, "pods read at {at}, before the upstream's {now}");
    let proofs = source.stats().proof_lists.load(Ordering::Relaxed);
    assert!(proofs >= 1);
    // The proof read metadata alone: less than a quarter of the full LIST per proof.
    let full = listwatch_testkit::send(up, "GET", "/api/v1/pods", &[], None)
        .await
        .expect("full LIST")
        .body
        .len() as u64;
    let bytes = source.stats().proof_bytes.load(Ordering::Relaxed);
    assert!(
        bytes * 4 <= full * proofs,
        "{proofs} proofs read {bytes} B; the full LIST is {full} B"
    );
    // What the consistent reads cost the upstream is on the front's /metrics.
    let r = listwatch_testkit::send(front, "GET", "/metrics", &[], None)
        .await
        .expect("metrics");
    let metrics = String::from_utf8_lossy(&r.body);
    let value = |name: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{name} missing from {metrics}"))
    };
    assert!(value("listwatch_upstream_proof_lists_total") >= proofs);
    assert!(value("listwatch_upstream_proof_bytes_total") >= bytes);
    assert!(value("listwatch_upstream_consistent_probes_total") >= 1);
    assert!(metrics.ends_with("# EOF\n"), "{metrics}");
}

/// Issue 26's history check in this mode: a write acknowledged through one front is in the
/// next consistent read through another front over the same upstream, however the two
/// fronts' streams are timed (each front proves its cache current against the upstream's
/// RV before it answers; a front that answered from its cache alone would miss writes its
/// own stream has not delivered yet).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_through_one_front_is_in_a_consistent_read_through_another() {
    let up = upstream().await;
    let (a, _) = front(up, up).await;
    let (b, b_source) = front(up, up).await;
    assert_eq!(ready(a).await, 200);
    assert_eq!(ready(b).await, 200);
    let mut written = Vec::new();
    for i in 0..20 {
        // Alternate which front takes the write and which reads.
        let (w, r) = if i % 2 == 0 { (a, b) } else { (b, a) };
        let name = format!("h{i}");
        create(w, &name).await;
        written.push(name.clone());
        let (s, list) = get(r, "/api/v1/namespaces/default/configmaps?resourceVersion=").await;
        assert_eq!(s, 200, "{list}");
        let listed = names(&list);
        let missing: Vec<&String> = written.iter().filter(|n| !listed.contains(n)).collect();
        assert!(
            missing.is_empty(),
            "write {i}: {missing:?} missing from a consistent LIST"
        );
        // A consistent GET of the object just written, through the other front.
        let (s, obj) = get(r, &format!("/api/v1/namespaces/default/configmaps/{name}")).await;
        assert_eq!(s, 200, "write {i}: consistent GET: {obj}");
    }
    // b's reads each asked the upstream for its RV (or shared a probe): none was answered
    // from the cache alone.
    let stats = b_source.stats();
    let asked = stats.probes.load(Ordering::Relaxed) + stats.coalesced.load(Ordering::Relaxed);
    assert!(asked >= 20, "{stats:?}");
}

type Seen = Arc<parking_lot::Mutex<Vec<String>>>;

/// A relay to `to` that holds every watch until `open` says so (discovery and LISTs pass),
/// records every path and query, and with `no_watch_list` makes the upstream refuse
/// watch-list with 422 Invalid (as an apiserver without the WatchList feature does) by
/// spoiling its `resourceVersionMatch`.
async fn relay(
    to: SocketAddr,
    open: tokio::sync::watch::Receiver<bool>,
    no_watch_list: bool,
) -> (SocketAddr, Seen) {
    let (listener, addr) = listen_local().await;
    let seen = Seen::default();
    let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .build_http::<Empty<Bytes>>();
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let (client, open, log) = (client.clone(), open.clone(), log.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: http::Request<Incoming>| {
                    let (client, mut open, log) = (client.clone(), open.clone(), log.clone());
                    async move {
                        let mut pq = req
                            .uri()
                            .path_and_query()
                            .map_or("/".to_string(), |p| p.as_str().to_string());
                        log.lock().push(pq.clone());
                        if pq.contains("watch=1") {
                            let _ = open.wait_for(|o| *o).await;
                        }
                        if no_watch_list {
                            pq = pq.replace(
                                "resourceVersionMatch=NotOlderThan",
                                "resourceVersionMatch=Exact",
                            );
                        }
                        let out = http::Request::get(format!("http://{to}{pq}"))
                            .body(Empty::new())
                            .expect("request");
                        client.request(out).await
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(conn), svc)
                    .await;
            });
        }
    });
    (addr, seen)
}

/// An upstream, a [`relay`] to it with its watches `open` or held, and a front following
/// the relay (writes go to the upstream directly): (upstream, front, the relay's gate, what
/// the relay saw).
async fn relayed(
    open: bool,
    no_watch_list: bool,
) -> (
    SocketAddr,
    SocketAddr,
    tokio::sync::watch::Sender<bool>,
    Seen,
) {
    let up = upstream().await;
    let (gate, opened) = tokio::sync::watch::channel(open);
    let (relay, seen) = relay(up, opened, no_watch_list).await;
    let (front, _) = front(relay, up).await;
    (up, front, gate, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_watch_list_the_source_lists_by_pages_then_watches() {
    let (up, front, _open, seen) = relayed(true, true).await;
    assert_eq!(ready(front).await, 200);
    let (_, theirs) = get(up, "/api/v1/pods").await;
    let (_, ours) = get(front, "/api/v1/pods").await;
    assert_eq!(ours["items"], theirs["items"]);
    let paged = seen.lock().iter().any(|q| q == "/api/v1/pods?limit=500");
    assert!(paged, "no paged LIST of pods: {:?}", seen.lock());
    create(front, "after-list").await;
    let (_, list) = get(
        front,
        "/api/v1/namespaces/default/configmaps?resourceVersion=",
    )
    .await;
    assert!(names(&list).contains(&"after-list".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_fails_until_every_resource_is_synced() {
    let (_, front, open, _) = relayed(false, false).await;
    let r = send(front, "GET", "/readyz?verbose", &[], None)
        .await
        .expect("answer");
    assert_eq!(r.status, 500, "{}", String::from_utf8_lossy(&r.body));
    assert!(String::from_utf8_lossy(&r.body).contains("[-]cache pods not ready"));
    let (s, _) = get(front, "/api/v1/pods").await;
    assert_eq!(
        s, 429,
        "reads wait for the sync rather than see an empty cache"
    );
    open.send_replace(true);
    assert_eq!(ready(front).await, 200);
}

const CRD: &str = r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
 "metadata":{"name":"widgets.example.com"},
 "spec":{"group":"example.com","scope":"Namespaced",
  "names":{"plural":"widgets","singular":"widget","kind":"Widget"},
  "versions":[
   {"name":"v1","served":true,"storage":true,
    "schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}"#;

const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";

async fn post(addr: SocketAddr, path: &str, body: &str) {
    let r = send(
        addr,
        "POST",
        path,
        &[("Content-Type", "application/json")],
        Some(body.as_bytes()),
    )
    .await
    .expect("answer");
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
}

/// Polls `done` every 50 ms for up to 20 s.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..400 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("not within 20 s: {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_created_after_start_is_followed_and_retired_when_deleted() {
    let (up, front, source) = ready_pair().await;
    let widgets = || source.registry().get("example.com", "v1", "widgets");
    assert!(widgets().is_none());

    post(
        up,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        CRD,
    )
    .await;
    let widget = r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w1"},"spec":{"color":"red"}}"#;
    post(up, WIDGETS, widget).await;
    // Rediscovered on the followed CRD's arrival (long before the periodic pass), and
    // served here only once synced.
    eventually("the new resource is followed and synced", || {
        widgets().is_some_and(|s| s.is_ready() && s.current().len() == 1)
    })
    .await;
    let (status, list) = get(front, WIDGETS).await;
    assert_eq!(status, 200);
    assert_eq!(names(&list), ["w1"]);
    // A write through the front reaches the new follower's store.
    let second = widget.replace("w1", "w2");
    post(front, WIDGETS, &second).await;
    eventually("the write is followed", || {
        widgets().is_some_and(|s| s.current().len() == 2)
    })
    .await;

    let r = send(
        up,
        "DELETE",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com",
        &[],
        None,
    )
    .await
    .expect("answer");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    eventually("the resource is retired", || {
        widgets().is_some_and(|s| s.is_retired())
    })
    .await;
    // No longer served here: passed on, and the upstream no longer has it either.
    let (status, _) = get(front, WIDGETS).await;
    assert_eq!(status, 404);
    // Readiness never counted the late resource.
    assert_eq!(ready(front).await, 200);
}
