//! The example host, driven by kube-rs: writes made through the host's own endpoint appear
//! in kube-rs watches and lists served by the embedded listwatch; requests listwatch does not
//! serve reach the host; the host's user is authorized per namespace.

#[path = "../examples/host.rs"]
#[allow(dead_code)]
mod host;

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ListParams;
use kube::runtime::watcher::{self, InitialListStrategy};
use kube::runtime::{WatchStreamExt, reflector};
use kube::{Api, Client, Config, ResourceExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn raw(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    user: Option<&str>,
    body: &str,
) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let user = user
        .map(|u| format!("X-Remote-User: {u}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\n{user}Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.expect("write");
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.expect("read");
    let text = String::from_utf8_lossy(&out).to_string();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, text)
}

fn names(cms: &[std::sync::Arc<ConfigMap>]) -> Vec<String> {
    let mut v: Vec<String> = cms
        .iter()
        .map(|c| format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any()))
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_writes_reach_kube_rs_watchers_and_lists() {
    let (listener, addr) = listwatch_testkit::listen_local().await;
    tokio::spawn(host::serve(listener));
    let post = |ns: &'static str, name: &'static str| async move {
        raw(
            addr,
            "POST",
            &format!("/api/v1/namespaces/{ns}/configmaps"),
            None,
            &format!(r#"{{"metadata":{{"name":"{name}"}},"data":{{"k":"v"}}}}"#),
        )
        .await
    };
    assert_eq!(post("team-a", "before").await.0, 201);

    let client = Client::try_from(Config::new(format!("http://{addr}").parse().expect("url")))
        .expect("client");
    let api: Api<ConfigMap> = Api::all(client.clone());
    let (reader, writer) = reflector::store();
    let cfg = watcher::Config {
        initial_list_strategy: InitialListStrategy::StreamingList,
        ..watcher::Config::default()
    };
    let driver = tokio::spawn(
        reflector(writer, watcher::watcher(api.clone(), cfg))
            .applied_objects()
            .for_each(|_| async {}),
    );
    tokio::time::timeout(Duration::from_secs(10), reader.wait_until_ready())
        .await
        .expect("ready")
        .expect("ready");
    assert_eq!(names(&reader.state()), ["team-a/before"]);

    for (ns, name) in [("team-a", "x"), ("team-b", "y"), ("team-b", "z")] {
        assert_eq!(post(ns, name).await.0, 201);
    }
    assert_eq!(
        raw(
            addr,
            "DELETE",
            "/api/v1/namespaces/team-b/configmaps/y",
            None,
            ""
        )
        .await
        .0,
        200
    );
    let want = ["team-a/before", "team-a/x", "team-b/z"];
    let mut ok = false;
    for _ in 0..50 {
        if names(&reader.state()) == want {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ok, "watch saw {:?}", names(&reader.state()));
    // A consistent LIST (RV unset) through kube-rs sees the same.
    let listed = api.list(&ListParams::default()).await.expect("list");
    let mut listed: Vec<String> = listed
        .items
        .iter()
        .map(|c| format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any()))
        .collect();
    listed.sort();
    assert_eq!(listed, want);
    driver.abort();

    // Not a read of a served resource: handed back to the host (its 405 for PUT).
    assert_eq!(
        raw(
            addr,
            "PUT",
            "/api/v1/namespaces/team-a/configmaps/x",
            None,
            "{}"
        )
        .await
        .0,
        405
    );
    // Namespace-scoped user: its namespace is fine, the cluster-wide list is 403.
    let (code, _) = raw(
        addr,
        "GET",
        "/api/v1/namespaces/team-a/configmaps",
        Some("alice"),
        "",
    )
    .await;
    assert_eq!(code, 200);
    let (code, body) = raw(addr, "GET", "/api/v1/configmaps", Some("alice"), "").await;
    assert_eq!(code, 403);
    assert!(body.contains(r#""message":"configmaps is forbidden: User \"alice\" cannot list resource \"configmaps\" in API group \"\" at the cluster scope","reason":"Forbidden""#), "{body}");
    let (code, _) = raw(
        addr,
        "GET",
        "/api/v1/namespaces/team-b/configmaps?watch=1",
        Some("alice"),
        "",
    )
    .await;
    assert_eq!(code, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backwards_rv_relists_and_expires_watches() {
    use http_body_util::BodyExt;
    use listwatch::{Builder, FeedError, Outcome, Relisted};
    let (lw, feed) = Builder::new().start_rv(1).host_fed(|info| {
        assert_eq!(info.resource, "configmaps");
        Ok(Relisted {
            rv: 20,
            objects: vec![
                br#"{"metadata":{"name":"truth","namespace":"d","resourceVersion":"19"}}"#.to_vec(),
            ],
        })
    });
    feed.put(
        "",
        "v1",
        "configmaps",
        10,
        br#"{"metadata":{"name":"a","namespace":"d"}}"#,
    )
    .expect("put");
    let get = |path: &str| {
        http::Request::get(path)
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .expect("request")
    };
    let Outcome::Handled(resp) = lw
        .handle(get(
            "/api/v1/configmaps?watch=1&resourceVersion=10&timeoutSeconds=5",
        ))
        .await
    else {
        panic!("watch not handled")
    };
    let mut body = resp.into_body();
    let err = feed
        .put(
            "",
            "v1",
            "configmaps",
            5,
            br#"{"metadata":{"name":"b","namespace":"d"}}"#,
        )
        .expect_err("backwards");
    assert!(matches!(err, FeedError::Relisted { rv: 20, .. }), "{err:?}");
    let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
        .await
        .expect("in time")
        .expect("frame")
        .expect("ok");
    let line = String::from_utf8(frame.into_data().expect("data").to_vec()).expect("utf8");
    assert!(
        line.starts_with(r#"{"type":"ERROR","object":{"kind":"Status""#)
            && line.contains(r#""code":410"#),
        "{line}"
    );
    let Outcome::Handled(resp) = lw.handle(get("/api/v1/configmaps")).await else {
        panic!("list not handled")
    };
    let list = resp.into_body().collect().await.expect("body").to_bytes();
    let list: serde_json::Value = serde_json::from_slice(&list).expect("json");
    assert_eq!(list["metadata"]["resourceVersion"], "20");
    assert_eq!(list["items"][0]["metadata"]["name"], "truth");
    assert_eq!(list["items"][0]["metadata"]["resourceVersion"], "19");
    let Outcome::NotHandled(_) = lw
        .handle(
            http::Request::post("/api/v1/namespaces/d/configmaps")
                .body(http_body_util::Empty::<bytes::Bytes>::new())
                .expect("r"),
        )
        .await
    else {
        panic!("writes must be handed back")
    };
}

/// The example host answers discovery through the facade, so kubectl (the machine's
/// binary, unmodified) lists what listwatch serves there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_finds_and_lists_the_hosts_resources() {
    let (listener, addr) = listwatch_testkit::listen_local().await;
    tokio::spawn(host::serve(listener));
    let (code, body) = raw(addr, "GET", "/api/v1", None, "").await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(r#""name":"configmaps""#), "{body}");
    let (code, body) = raw(
        addr,
        "POST",
        "/api/v1/namespaces/team-a/configmaps",
        Some("alice"),
        r#"{"metadata":{"name":"found"}}"#,
    )
    .await;
    assert!(code == 201 || code == 200, "{body}");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("kubectl")
            .env("KUBECONFIG", "/dev/null")
            .args(["--server", &format!("http://{addr}"), "--as", "alice"])
            .args(["get", "configmaps", "-n", "team-a", "-o", "name"])
            .output()
            .expect("kubectl on PATH (scripts/test installs it)")
    })
    .await
    .expect("join");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("configmap/found"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A host feeding core/v1 Events gets events.k8s.io/v1 served too: the view converts each
/// fed Event once, at the RV the host gave it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fed_core_events_are_served_as_events_k8s_io() {
    use http_body_util::BodyExt;
    use listwatch::{Builder, Outcome, Relisted};
    let (lw, feed) = Builder::new().start_rv(1).host_fed(|_| {
        Ok(Relisted {
            rv: 1,
            objects: vec![],
        })
    });
    feed.put(
        "",
        "v1",
        "events",
        10,
        br#"{"apiVersion":"v1","kind":"Event","metadata":{"name":"e","namespace":"d"},"involvedObject":{"kind":"Pod","name":"p"},"message":"hello","reportingComponent":"","reportingInstance":""}"#,
    )
    .expect("put");
    let request = http::Request::get("/apis/events.k8s.io/v1/namespaces/d/events/e")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .expect("request");
    let Outcome::Handled(resp) = lw.handle(request).await else {
        panic!("events.k8s.io not handled")
    };
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    let e: serde_json::Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(e["apiVersion"], "events.k8s.io/v1");
    assert_eq!(e["note"], "hello");
    assert_eq!(e["regarding"]["name"], "p");
    assert_eq!(e["metadata"]["resourceVersion"], "10");
    lw.close(Duration::from_millis(10)).await;
}
