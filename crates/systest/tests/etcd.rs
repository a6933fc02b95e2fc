//! listwatch following a real etcd (Debian's `etcd-server`), started by the tests on
//! 127.0.0.1: contents in kube-apiserver's layout, consistent reads across two replicas,
//! etcd restarts, compaction while cut off, and a 3-member cluster losing a member — with
//! the unmodified kube-rs reflector as the client that must end equal to etcd.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::etcd::{Etcd, EtcdServer, Proxy};
use etcd_client::{CompactionOptions, GetOptions};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::watcher::{self, InitialListStrategy};
use kube::runtime::{WatchStreamExt, reflector};
use kube::{Api, Client, Config, ResourceExt};

fn kube_client(addr: std::net::SocketAddr) -> Client {
    let config = Config::new(format!("http://{addr}").parse().expect("url"));
    Client::try_from(config).expect("client")
}

/// An object as kube-apiserver stores it with `--storage-media-type=application/json`:
/// kind and apiVersion first, no resourceVersion.
fn stored(kind: &str, api_version: &str, ns: &str, name: &str, extra: &str) -> String {
    format!(
        r#"{{"kind":"{kind}","apiVersion":"{api_version}","metadata":{{"name":"{name}","namespace":"{ns}","uid":"uid-{name}","creationTimestamp":"2026-11-22T00:00:00Z","labels":{{"app":"{name}"}}}}{extra}}}"#
    )
}

fn pod(ns: &str, name: &str, image: &str) -> String {
    stored(
        "Pod",
        "v1",
        ns,
        name,
        &format!(
            r#","spec":{{"containers":[{{"name":"c","image":"{image}"}}]}},"status":{{"phase":"Running"}}"#
        ),
    )
}

fn configmap(ns: &str, name: &str, v: &str) -> String {
    stored(
        "ConfigMap",
        "v1",
        ns,
        name,
        &format!(r#","data":{{"v":"{v}"}}"#),
    )
}

/// Puts configmap `default/<name>` straight into etcd (kube-apiserver's layout); returns
/// the revision of the write.
async fn put_cm(c: &mut etcd_client::Client, name: &str, v: &str) -> i64 {
    c.put(
        format!("/registry/configmaps/default/{name}"),
        configmap("default", name, v),
        None,
    )
    .await
    .expect("put")
    .header()
    .expect("header")
    .revision()
}

/// Puts pod `<ns>/<name>` running `image` straight into etcd; returns the write's revision.
async fn put_pod(c: &mut etcd_client::Client, ns: &str, name: &str, image: &str) -> i64 {
    c.put(
        format!("/registry/pods/{ns}/{name}"),
        pod(ns, name, image),
        None,
    )
    .await
    .expect("put pod")
    .header()
    .expect("header")
    .revision()
}

/// The counters of the follower of `resource` in `s`.
fn follower_stats(s: &EtcdServer, resource: &str) -> listwatch_etcd::FollowerStats {
    s.source
        .stats()
        .into_iter()
        .find(|(r, _)| r == resource)
        .expect("a follower of the resource")
        .1
}

/// `key → mod_revision` of everything under `prefix`, and etcd's revision.
async fn etcd_state(c: &mut etcd_client::Client, prefix: &str) -> (i64, BTreeMap<String, i64>) {
    let resp = c
        .get(prefix, Some(GetOptions::new().with_prefix()))
        .await
        .expect("etcd range");
    let rev = resp.header().expect("header").revision();
    let m = resp
        .kvs()
        .iter()
        .filter(|kv| kv.value().starts_with(b"{"))
        .map(|kv| {
            let k = String::from_utf8_lossy(&kv.key()[prefix.len()..]).to_string();
            (k, kv.mod_revision())
        })
        .collect();
    (rev, m)
}

/// `namespace/name → resourceVersion` of a listwatch LIST, and the list's RV.
async fn lw_state(addr: std::net::SocketAddr, path: &str) -> (i64, BTreeMap<String, i64>) {
    let mut r = common::get(addr, path).await;
    // As client-go does, honour a 429's Retry-After (a cache relisting after etcd reordered
    // a progress notification, etcd#15220; counted in the follower's stats).
    for _ in 0..5 {
        if r.status != 429 {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        r = common::get(addr, path).await;
    }
    assert_eq!(r.status, 200, "{path}: {}", r.body);
    let v = common::json(&r.body);
    let rv = v["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("list rv");
    let m = v["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|o| {
            let m = &o["metadata"];
            let key = match m["namespace"].as_str() {
                Some(ns) => format!("{ns}/{}", m["name"].as_str().unwrap_or("")),
                None => m["name"].as_str().unwrap_or("").to_string(),
            };
            (
                key,
                m["resourceVersion"]
                    .as_str()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(-1),
            )
        })
        .collect();
    (rv, m)
}

/// A kube-rs reflector over configmaps; returns its reader and the task driving it.
async fn reflect(
    addr: std::net::SocketAddr,
) -> (reflector::Store<ConfigMap>, tokio::task::JoinHandle<()>) {
    let api: Api<ConfigMap> = Api::all(kube_client(addr));
    let (reader, writer) = reflector::store();
    let cfg = watcher::Config {
        initial_list_strategy: InitialListStrategy::StreamingList,
        bookmarks: true,
        ..watcher::Config::default()
    };
    // The default backoff retries 410s and dropped connections, as informers do.
    let stream = reflector(writer, watcher::watcher(api, cfg).default_backoff()).applied_objects();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while stream.next().await.is_some() {}
    });
    tokio::time::timeout(Duration::from_secs(20), reader.wait_until_ready())
        .await
        .expect("reflector ready in time")
        .expect("reflector ready");
    (reader, task)
}

fn reflected(reader: &reflector::Store<ConfigMap>) -> BTreeMap<String, i64> {
    reader
        .state()
        .iter()
        .map(|c| {
            (
                format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any()),
                c.resource_version()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(-1),
            )
        })
        .collect()
}

/// Polls until the reflector holds exactly etcd's configmaps (key and revision).
async fn assert_converges(reader: &reflector::Store<ConfigMap>, etcd: &mut etcd_client::Client) {
    let mut last = (BTreeMap::new(), BTreeMap::new());
    for _ in 0..300 {
        let (_, want) = etcd_state(etcd, "/registry/configmaps/").await;
        let got = reflected(reader);
        if got == want {
            return;
        }
        last = (got, want);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "reflector never equalled etcd:\n got  {:?}\n want {:?}",
        last.0, last.1
    );
}

async fn create_cm(api: &Api<ConfigMap>, name: &str) {
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name}, "data": {"v": "0"}
    }))
    .expect("configmap");
    // Retried: during a leader election etcd refuses writes for a moment.
    for attempt in 0.. {
        match api.create(&PostParams::default(), &cm).await {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 409 && attempt > 0 => return,
            Err(e) if attempt < 100 => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("create {name}: {e}"),
        }
    }
}

/// listwatch over `etcd` with `n` configmaps `<prefix>-<i>` created through its API, and a
/// kube-rs reflector over configmaps that has synced.
async fn reflected_server(
    etcd: &Etcd,
    prefix: &str,
    n: usize,
) -> (
    EtcdServer,
    Api<ConfigMap>,
    reflector::Store<ConfigMap>,
    tokio::task::JoinHandle<()>,
) {
    let s = EtcdServer::start(etcd.endpoints(), Duration::from_secs(1)).await;
    let api: Api<ConfigMap> = Api::namespaced(kube_client(s.addr), "default");
    for i in 0..n {
        create_cm(&api, &format!("{prefix}-{i}")).await;
    }
    let (reader, driver) = reflect(s.addr).await;
    (s, api, reader, driver)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_etcd_contents_in_kube_apiserver_layout() {
    let etcd = Etcd::start(1).await;
    let mut c = etcd.client().await;
    for i in 0..250 {
        let ns = ["default", "team-a", "team-b"][i % 3];
        put_pod(&mut c, ns, &format!("web-{i}"), "nginx:1").await;
    }
    for i in 0..5 {
        c.put(
            format!("/registry/deployments/default/d{i}"),
            stored(
                "Deployment",
                "apps/v1",
                "default",
                &format!("d{i}"),
                r#","spec":{"replicas":1}"#,
            ),
            None,
        )
        .await
        .expect("put deployment");
    }
    // A protobuf envelope with no object in it (unreadable) and a key outside the layout:
    // both skipped with a log line, never a crash or a bogus object.
    c.put(
        "/registry/pods/default/proto",
        b"k8s\0\n\x09\n\x02v1\x12\x03Pod".to_vec(),
        None,
    )
    .await
    .expect("put protobuf");
    c.put("/registry/pods/stray", "{}", None)
        .await
        .expect("put stray");

    let s = EtcdServer::start(etcd.endpoints(), Duration::from_secs(1)).await;

    // LIST (consistent read) equals etcd at the list's RV, object RVs = mod_revision.
    let (etcd_rev, want) = etcd_state(&mut c, "/registry/pods/").await;
    let want: BTreeMap<_, _> = want.into_iter().filter(|(k, _)| k != "stray").collect();
    let (rv, got) = lw_state(s.addr, "/api/v1/pods").await;
    assert_eq!(got.len(), 250);
    assert_eq!(got, want);
    assert_eq!(
        rv, etcd_rev,
        "a consistent LIST is at etcd's current revision"
    );
    let (_, deps) = lw_state(s.addr, "/apis/apps/v1/namespaces/default/deployments").await;
    assert_eq!(
        deps.len(),
        5,
        "deployments live under /registry/deployments/"
    );
    let pods_stats = follower_stats(&s, "pods");
    assert_eq!(
        pods_stats.skipped, 2,
        "protobuf value and stray key skipped"
    );
    // … and said in /metrics, by reason.
    let metrics = common::get(s.addr, "/metrics").await.body;
    for reason in ["invalid", "layout"] {
        let line =
            format!("listwatch_source_values_skipped{{resource=\"pods\",reason=\"{reason}\"}} 1");
        assert!(metrics.contains(&line), "no {line:?} in /metrics");
    }

    // Watch-list: initial events equal etcd's contents at the bookmark's RV.
    let mut lines = common::stream_lines(
        s.addr,
        "/api/v1/namespaces/team-a/pods?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan",
    )
    .await;
    let mut initial = BTreeMap::new();
    let bookmark_rv: i64 = loop {
        let l = common::next_line(&mut lines, 10)
            .await
            .expect("initial event");
        let e = common::json(&l);
        let m = &e["object"]["metadata"];
        let rv: i64 = m["resourceVersion"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .expect("rv");
        if e["type"] == "BOOKMARK" {
            assert_eq!(m["annotations"]["k8s.io/initial-events-end"], "true");
            break rv;
        }
        assert_eq!(e["type"], "ADDED");
        initial.insert(format!("team-a/{}", m["name"].as_str().unwrap_or("")), rv);
    };
    let (_, at) = etcd_state(&mut c, "/registry/pods/team-a/").await;
    let at: BTreeMap<_, _> = at
        .into_iter()
        .map(|(k, v)| (format!("team-a/{k}"), v))
        .collect();
    assert_eq!(initial, at);
    assert!(bookmark_rv >= etcd_rev);

    // Live events carry etcd's revisions; a delete arrives as DELETED.
    let upd_rev = put_pod(&mut c, "team-a", "web-1", "nginx:2").await;
    let del = c
        .delete("/registry/pods/team-a/web-4", None)
        .await
        .expect("delete");
    let del_rev = del.header().expect("header").revision();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let l = common::next_line(&mut lines, 10).await.expect("live event");
        let e = common::json(&l);
        if e["type"] == "BOOKMARK" {
            continue;
        }
        let m = &e["object"]["metadata"];
        seen.push((
            e["type"].as_str().unwrap_or("").to_string(),
            m["name"].as_str().unwrap_or("").to_string(),
            m["resourceVersion"]
                .as_str()
                .and_then(|s| s.parse::<i64>().ok())
                .unwrap_or(0),
        ));
    }
    assert_eq!(
        seen,
        vec![
            ("MODIFIED".into(), "web-1".into(), upd_rev),
            ("DELETED".into(), "web-4".into(), del_rev)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_read_their_writes_and_never_go_back_in_time() {
    let etcd = Etcd::start(1).await;
    // Long progress-request period: reads must bring an idle cache forward themselves.
    let a = EtcdServer::start(etcd.endpoints(), Duration::from_secs(600)).await;
    let b = EtcdServer::start(etcd.endpoints(), Duration::from_secs(600)).await;
    let on_a: Api<ConfigMap> = Api::namespaced(kube_client(a.addr), "default");

    // After its own write on A, a consistent LIST on B always sees it.
    for i in 0..30 {
        create_cm(&on_a, &format!("w{i}")).await;
        let (_, on_b) = lw_state(b.addr, "/api/v1/namespaces/default/configmaps").await;
        assert!(on_b.contains_key(&format!("default/w{i}")), "B misses w{i}");
    }

    // Pods on B are idle (the writes were configmaps). A client lists pods on A and then
    // watches on B with A's RV: B catches up first, and never shows older data.
    // (On etcd with etcd#15220 — the 3.4.23 these tests run — only etcd's periodic progress
    // notifications move an idle cache, every 100 ms here, so B may or may not be behind
    // at this instant; either way it must not answer older than A.)
    let (rv_a, _) = lw_state(a.addr, "/api/v1/pods").await;
    let (rv_b, _) = lw_state(
        b.addr,
        &format!("/api/v1/pods?resourceVersion={rv_a}&resourceVersionMatch=NotOlderThan"),
    )
    .await;
    assert!(rv_b >= rv_a, "B answered at {rv_b}, older than A's {rv_a}");
    let mut watch = common::stream_lines(
        b.addr,
        &format!("/api/v1/pods?watch=1&resourceVersion={rv_a}"),
    )
    .await;
    let mut c = etcd.client().await;
    let put_rev = put_pod(&mut c, "default", "late", "x").await;
    let l = common::next_line(&mut watch, 10).await.expect("event");
    let e = common::json(&l);
    assert_eq!(e["type"], "ADDED");
    assert_eq!(
        e["object"]["metadata"]["resourceVersion"],
        put_rev.to_string()
    );

    // An RV etcd has not reached: wait, then 504 with cause ResourceVersionTooLarge.
    let r = common::get_expecting(
        b.addr,
        &format!(
            "/api/v1/pods?resourceVersion={}&resourceVersionMatch=NotOlderThan",
            rv_a + 100_000
        ),
        504,
    )
    .await;
    assert!(r.body.contains("ResourceVersionTooLarge"), "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_etcd_across_a_restart() {
    let mut etcd = Etcd::start(1).await;
    let (s, api, reader, driver) = reflected_server(&etcd, "before", 20).await;

    etcd.members[0].kill().await;
    // etcd is down: a consistent read cannot be served and must not fall back to the cache.
    let r = common::get(s.addr, "/api/v1/configmaps").await;
    assert!(
        matches!(r.status, 503 | 504 | 500),
        "consistent read without etcd: {} {}",
        r.status,
        r.body
    );
    etcd.members[0].restart();
    etcd.wait_healthy().await;

    for i in 0..20 {
        create_cm(&api, &format!("after-{i}")).await;
    }
    for i in (0..20).step_by(2) {
        api.delete(&format!("before-{i}"), &DeleteParams::default())
            .await
            .expect("delete");
    }
    let mut c = etcd.client().await;
    assert_converges(&reader, &mut c).await;
    assert_eq!(reflected(&reader).len(), 30);
    let cms = &follower_stats(&s, "configmaps");
    assert!(cms.resumes >= 1, "the follower resumed its watch: {cms:?}");
    driver.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_while_cut_off_relists_expires_watchers_and_converges() {
    let etcd = Etcd::start(1).await;
    let proxy = Proxy::start(etcd.members[0].client_port).await;
    let s = EtcdServer::start(vec![proxy.url()], Duration::from_secs(1)).await;
    let mut c = etcd.client().await;
    for i in 0..30 {
        put_cm(&mut c, &format!("cm-{i}"), "0").await;
    }
    let (reader, driver) = reflect(s.addr).await;
    assert_converges(&reader, &mut c).await;
    let (rv0, _) = lw_state(s.addr, "/api/v1/configmaps").await;
    let mut raw_watch = common::stream_lines(
        s.addr,
        &format!("/api/v1/configmaps?watch=1&resourceVersion={rv0}"),
    )
    .await;

    // Cut listwatch off, change etcd behind its back and compact away the history it
    // would resume from.
    proxy.cut();
    for i in 0..10 {
        c.delete(format!("/registry/configmaps/default/cm-{i}"), None)
            .await
            .expect("delete");
    }
    for i in 10..15 {
        put_cm(&mut c, &format!("cm-{i}"), "1").await;
    }
    let last = put_cm(&mut c, "new", "1").await;
    c.compact(last, Some(CompactionOptions::new().with_physical()))
        .await
        .expect("compact");
    let r = common::get(s.addr, "/api/v1/configmaps").await;
    assert_ne!(
        r.status, 200,
        "a consistent read while cut off from etcd must not serve the cache"
    );

    proxy.restore();
    // The follower resumes, finds its revision compacted, relists; open watches end with
    // 410 so clients relist too.
    let mut expired = false;
    while let Some(l) = common::next_line(&mut raw_watch, 30).await {
        if l.contains("\"ERROR\"") {
            assert!(l.contains("\"code\":410"), "{l}");
            expired = true;
            break;
        }
    }
    assert!(expired, "the open watch ended with 410 after the relist");
    assert_converges(&reader, &mut c).await;
    let (_, now) = lw_state(s.addr, "/api/v1/configmaps").await;
    assert!(
        !now.contains_key("default/cm-0"),
        "a deleted object was kept"
    );
    assert_eq!(now.len(), 21);
    let cms = &follower_stats(&s, "configmaps");
    assert!(cms.relists >= 1, "{cms:?}");
    assert!(
        cms.last_unsafe
            .as_deref()
            .unwrap_or("")
            .contains("compacted"),
        "{cms:?}"
    );
    driver.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_member_cluster_loses_and_regains_each_member() {
    let mut etcd = Etcd::start(3).await;
    let (_s, api, reader, driver) = reflected_server(&etcd, "base", 10).await;
    for m in 0..3 {
        etcd.members[m].kill().await;
        for i in 0..5 {
            create_cm(&api, &format!("m{m}-{i}")).await;
        }
        for attempt in 0.. {
            match api
                .delete(&format!("base-{m}"), &DeleteParams::default())
                .await
            {
                Ok(_) => break,
                Err(_) if attempt < 100 => tokio::time::sleep(Duration::from_millis(100)).await,
                Err(e) => panic!("delete: {e}"),
            }
        }
        let mut c = etcd.client().await;
        assert_converges(&reader, &mut c).await;
        etcd.members[m].restart();
        etcd.wait_healthy().await;
    }
    let mut c = etcd.client().await;
    assert_converges(&reader, &mut c).await;
    assert_eq!(reflected(&reader).len(), 10 + 15 - 3);
    driver.abort();
}

/// A list page of real objects is tens of MB (10,000 pods ≈ 60 MB): it must pass gRPC's
/// message limit, which is 4 MiB unless raised (found loading 40,000 protobuf pods).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pages_larger_than_grpc_default_limit_load() {
    let etcd = Etcd::start(1).await;
    let mut c = etcd.client().await;
    let big = "x".repeat(512 * 1024);
    for i in 0..12 {
        let cm = serde_json::json!({"kind": "ConfigMap", "apiVersion": "v1",
            "metadata": {"name": format!("big-{i}"), "namespace": "default"}, "data": {"blob": big}});
        c.put(
            format!("/registry/configmaps/default/big-{i}"),
            serde_json::to_vec(&cm).expect("json"),
            None,
        )
        .await
        .expect("put");
    }
    // Default page size (10,000 keys): the whole 6 MiB collection in one response.
    let server = EtcdServer::start_with(listwatch_etcd::EtcdConfig {
        endpoints: etcd.endpoints(),
        ..listwatch_etcd::EtcdConfig::default()
    })
    .await;
    let r = common::get(server.addr, "/api/v1/namespaces/default/configmaps").await;
    assert_eq!(r.status, 200);
    let items = serde_json::from_str::<serde_json::Value>(&r.body).expect("json")["items"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(items, 12);
}
