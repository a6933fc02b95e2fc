//! etcd going away and coming back, as kube-apiserver's clients need to see it: `/readyz`
//! fails within seconds, consistent reads fail fast with 503 + Retry-After instead of each
//! waiting for a timeout, open watches end once the outage passes its bound (so informers
//! relist elsewhere), and all of it recovers when etcd answers again.

mod common;

use std::time::{Duration, Instant};

use common::etcd::{Etcd, EtcdServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_outage_is_told_fast_and_recovered_from() {
    let mut etcd = Etcd::start(1).await;
    let server = EtcdServer::start(etcd.endpoints(), Duration::from_millis(200)).await;
    let cms = "/api/v1/namespaces/default/configmaps";
    assert_eq!(common::get(server.addr, cms).await.status, 200);
    let mut watch =
        common::stream_lines(server.addr, &format!("{cms}?watch=1&resourceVersion=0")).await;
    // Killed only once the watch is open (the server's own gauge).
    let open = common::poll_until(
        Duration::from_secs(10),
        || async { common::get(server.addr, "/metrics").await.body },
        |m| m.contains(r#"apiserver_registered_watchers{resource="configmaps"} 1"#),
    )
    .await;
    assert!(open.contains(r#"apiserver_registered_watchers{resource="configmaps"} 1"#));

    etcd.members[0].kill().await;
    let down = Instant::now();
    let ready = common::poll_until(
        Duration::from_secs(10),
        || async { common::get(server.addr, "/readyz?verbose").await },
        |r| r.status != 200,
    )
    .await;
    assert_eq!(ready.status, 500, "{}", ready.body);
    assert!(ready.body.contains("[-]etcd failed"), "{}", ready.body);
    eprintln!("readyz failing {:?} after etcd was killed", down.elapsed());

    // A consistent read fails at once, with the hint to retry.
    let asked = Instant::now();
    let r = common::get(server.addr, cms).await;
    let took = asked.elapsed();
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.header("retry-after"), Some("1"), "{:?}", r.headers);
    assert_eq!(common::json(&r.body)["reason"], "ServiceUnavailable");
    eprintln!("consistent LIST answered 503 in {took:?}");
    assert!(
        took < Duration::from_secs(5),
        "a consistent read waited {took:?}"
    );

    // The open watch ends once the outage passes its bound (15 s) and grace (5 s).
    let ended = tokio::time::timeout(Duration::from_secs(40), async {
        while common::next_line(&mut watch, 40).await.is_some() {}
    })
    .await;
    assert!(ended.is_ok(), "the watch stayed open through the outage");
    let ended_after = down.elapsed();
    eprintln!("open watch ended {ended_after:?} after etcd was killed");
    assert!(
        ended_after >= Duration::from_secs(10),
        "ended before the bound: {ended_after:?}"
    );

    etcd.members[0].restart();
    let ready = common::get_until(server.addr, "/readyz", Duration::from_secs(30), 200).await;
    assert_eq!(ready.status, 200, "not ready again after etcd came back");
    assert_eq!(common::get(server.addr, cms).await.status, 200);
    // New watches run normally again.
    let mut again = common::stream_lines(server.addr, &format!("{cms}?watch=1")).await;
    common::answered(
        server.addr,
        "POST",
        cms,
        Some(r#"{"metadata":{"name":"after-outage"}}"#),
        201,
    )
    .await;
    let event = common::next_line(&mut again, 10)
        .await
        .expect("an event after recovery");
    assert!(event.contains("after-outage"), "{event}");
}
