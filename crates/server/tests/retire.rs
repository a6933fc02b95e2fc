//! Removing a resource at runtime: 404 from then on, gone from discovery, and its open
//! watches end spread over the grace period, as on shutdown.

use listwatch_testkit::server as common;

use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_resource_at_runtime_ends_its_watches_spread_out() {
    let s = common::start(10, listwatch_server::ServerConfig::default()).await;
    let cms: Vec<common::Lines> = futures::future::join_all(
        (0..20).map(|_| common::stream_lines(s.addr, "/api/v1/configmaps?watch=1")),
    )
    .await;
    let mut pods = common::stream_lines(s.addr, "/api/v1/pods?watch=1&resourceVersion=0").await;
    // The pod watch's initial ADDED events (10 demo pods).
    for _ in 0..10 {
        common::next_line(&mut pods, 5)
            .await
            .expect("initial pod event");
    }
    // Every configmap watch registered (the server's own gauge), rather than a fixed wait.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !common::get(s.addr, "/metrics")
        .await
        .body
        .contains("apiserver_registered_watchers{resource=\"configmaps\"} 20")
    {
        assert!(
            Instant::now() < deadline,
            "the 20 configmap watches are not open"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let t0 = Instant::now();
    assert!(
        s.app
            .remove_resource("", "v1", "configmaps", Duration::from_secs(2))
    );
    let ends = futures::future::join_all(cms.into_iter().map(|mut l| async move {
        // A stream ends when the server closes it: next_line yields None.
        while common::next_line(&mut l, 10).await.is_some() {}
        t0.elapsed()
    }))
    .await;
    let first = ends.iter().min().copied().unwrap_or_default();
    let last = ends.iter().max().copied().unwrap_or_default();
    assert!(
        last <= Duration::from_millis(2800),
        "last configmap watch ended after {last:?}"
    );
    assert!(
        last - first >= Duration::from_millis(600),
        "ends spread over the grace period: {first:?}..{last:?}"
    );
    // Gone from paths and discovery; other resources untouched.
    assert_eq!(common::get(s.addr, "/api/v1/configmaps").await.status, 404);
    let d = common::json(&common::get(s.addr, "/api/v1").await.body);
    assert!(
        !d["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .any(|r| r["name"] == "configmaps")
    );
    assert_eq!(common::get(s.addr, "/api/v1/pods").await.status, 200);
    let body = r#"{"metadata":{"name":"after"},"spec":{"containers":[]}}"#;
    let r = common::request(
        s.addr,
        "POST",
        "/api/v1/namespaces/default/pods",
        Some(body),
    )
    .await;
    assert_eq!(r.status, 201);
    let e = common::next_line(&mut pods, 5)
        .await
        .expect("the pod watch still runs");
    assert!(e.contains("\"after\""), "{e}");
}
