//! kube-rs, unmodified, against listwatch: reflectors in both initial-list strategies stay
//! equal to the server's state through a burst of creates, updates and deletes, and the
//! list / initial-events boundary is where the client expects it.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::watcher::{self, Event, InitialListStrategy};
use kube::runtime::{WatchStreamExt, reflector};
use kube::{Api, Client, Config, ResourceExt};
use listwatch_server::ServerConfig;

fn client(addr: std::net::SocketAddr) -> Client {
    let config = Config::new(format!("http://{addr}").parse().expect("url"));
    Client::try_from(config).expect("client")
}

fn cm(name: &str, v: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"burst": "yes"}},
        "data": {"v": v}
    }))
    .expect("configmap")
}

async fn server_state(api: &Api<ConfigMap>) -> BTreeMap<String, String> {
    api.list(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .map(|c| {
            (
                format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any()),
                c.resource_version().unwrap_or_default(),
            )
        })
        .collect()
}

/// Where the reflector's client points.
#[derive(Clone, Copy, Debug)]
enum Endpoint {
    /// listwatch on its embedded store.
    Direct,
    /// A front listwatch following that one (`--source apiserver`), every write passed
    /// through to it: the reflector's reads come from the front's caches.
    Front,
}

async fn reflector_converges(strategy: InitialListStrategy, endpoint: Endpoint) {
    let s = common::start(
        0,
        ServerConfig {
            bookmark_interval: Duration::from_secs(1),
            ..ServerConfig::default()
        },
    )
    .await;
    let addr = match endpoint {
        Endpoint::Direct => s.addr,
        Endpoint::Front => common::front(s.addr).await,
    };
    let c = client(addr);
    let ns_api: Api<ConfigMap> = Api::namespaced(c.clone(), "team-a");
    let all: Api<ConfigMap> = Api::all(c.clone());
    for i in 0..40 {
        ns_api
            .create(&PostParams::default(), &cm(&format!("pre-{i}"), "0"))
            .await
            .expect("create");
    }
    let (reader, writer) = reflector::store();
    let cfg = watcher::Config {
        initial_list_strategy: strategy.clone(),
        page_size: Some(7),
        ..watcher::Config::default()
    };
    let stream = reflector(writer, watcher::watcher(all.clone(), cfg)).applied_objects();
    let driver = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(r) = stream.next().await {
            r.expect("watcher error");
        }
    });
    tokio::time::timeout(Duration::from_secs(10), reader.wait_until_ready())
        .await
        .expect("ready in time")
        .expect("ready");
    assert_eq!(reader.state().len(), 40);

    // A burst through the API: creates in two namespaces, updates, deletes.
    let other: Api<ConfigMap> = Api::namespaced(c.clone(), "team-b");
    for i in 0..60 {
        let api = if i % 2 == 0 { &ns_api } else { &other };
        api.create(&PostParams::default(), &cm(&format!("burst-{i}"), "0"))
            .await
            .expect("create");
    }
    for i in 0..40 {
        let mut obj = ns_api.get(&format!("pre-{i}")).await.expect("get");
        obj.data = Some([("v".to_string(), "updated".to_string())].into());
        ns_api
            .replace(&obj.name_any(), &PostParams::default(), &obj)
            .await
            .expect("replace");
    }
    for i in (0..40).step_by(3) {
        ns_api
            .delete(&format!("pre-{i}"), &DeleteParams::default())
            .await
            .expect("delete");
    }
    let want = server_state(&all).await;
    assert_eq!(want.len(), 40 + 60 - 14);
    let mut got = BTreeMap::new();
    for _ in 0..100 {
        got = reader
            .state()
            .iter()
            .map(|c| {
                (
                    format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any()),
                    c.resource_version().unwrap_or_default(),
                )
            })
            .collect();
        if got == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        got, want,
        "reflector ({strategy:?}, {endpoint:?}) equals the server's state"
    );
    assert!(
        reader
            .state()
            .iter()
            .filter(|c| c.namespace().as_deref() == Some("team-a")
                && !c.name_any().starts_with("burst"))
            .all(
                |c| c.data.as_ref().and_then(|d| d.get("v")).map(String::as_str) == Some("updated")
            )
    );
    driver.abort();
}

/// A test of [`reflector_converges`] for each way a reflector starts and endpoint it reads.
macro_rules! reflector_tests {
    ($($name:ident: $strategy:ident, $endpoint:ident;)+) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                reflector_converges(InitialListStrategy::$strategy, Endpoint::$endpoint).await;
            }
        )+
    };
}

// Through a front: informers of a client whose only endpoint is a front listwatch sync from
// its caches while their own writes go through it to the upstream.
reflector_tests! {
    reflector_list_watch: ListWatch, Direct;
    reflector_streaming_list: StreamingList, Direct;
    reflector_list_watch_through_a_front: ListWatch, Front;
    reflector_streaming_list_through_a_front: StreamingList, Front;
}

/// The initial phase ends exactly after the existing objects, and live events follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_events_boundary() {
    for strategy in [
        InitialListStrategy::ListWatch,
        InitialListStrategy::StreamingList,
    ] {
        let s = common::start(250, ServerConfig::default()).await;
        let c = client(s.addr);
        let pods: Api<Pod> = Api::all(c.clone());
        let cfg = watcher::Config {
            initial_list_strategy: strategy.clone(),
            page_size: Some(100),
            ..watcher::Config::default()
        };
        let mut events = std::pin::pin!(watcher::watcher(pods, cfg));
        let mut initial = 0;
        loop {
            match tokio::time::timeout(Duration::from_secs(10), events.try_next())
                .await
                .expect("event in time")
                .expect("ok")
                .expect("some")
            {
                Event::Init => {}
                Event::InitApply(_) => initial += 1,
                Event::InitDone => break,
                other => panic!("{strategy:?}: live event before InitDone: {other:?}"),
            }
        }
        assert_eq!(initial, 250, "{strategy:?}");
        let ns: Api<ConfigMap> = Api::namespaced(c.clone(), "x");
        ns.create(&PostParams::default(), &cm("unrelated", "0"))
            .await
            .expect("create");
        let pods_ns: Api<Pod> = Api::namespaced(c.clone(), "demo-1");
        pods_ns
            .delete("pod-0", &DeleteParams::default())
            .await
            .expect("delete");
        match tokio::time::timeout(Duration::from_secs(10), events.try_next())
            .await
            .expect("event in time")
            .expect("ok")
            .expect("some")
        {
            Event::Delete(p) => assert_eq!(p.name_any(), "pod-0"),
            other => panic!("{strategy:?}: expected the delete, got {other:?}"),
        }
    }
}
