//! DELETE as kube-apiserver answers it on the embedded store: `DeleteOptions` validated
//! (`ValidateDeleteOptions`), dependents collected per `propagationPolicy` as kube's
//! garbage collector would leave them.

use listwatch_testkit::server as common;

use common::{get, json, request, start};
use listwatch_server::ServerConfig;

const CMS: &str = "/api/v1/namespaces/gc/configmaps";

async fn make(addr: std::net::SocketAddr, body: &str) -> serde_json::Value {
    let r = request(addr, "POST", CMS, Some(body)).await;
    assert_eq!(r.status, 201, "{}", r.body);
    json(&r.body)
}

/// DELETE of `CMS/name` (a name and a query) with `body`.
async fn delete(addr: std::net::SocketAddr, name: &str, body: Option<&str>) -> common::Raw {
    request(addr, "DELETE", &format!("{CMS}/{name}"), body).await
}

async fn owner_and_dependent(addr: std::net::SocketAddr, owner: &str, dep: &str) {
    let o = make(addr, &format!(r#"{{"metadata":{{"name":"{owner}"}}}}"#)).await;
    let uid = o["metadata"]["uid"].as_str().expect("uid");
    make(
        addr,
        &format!(
            r#"{{"metadata":{{"name":"{dep}","ownerReferences":[{{"apiVersion":"v1","kind":"ConfigMap","name":"{owner}","uid":"{uid}"}}]}}}}"#
        ),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependents_follow_the_propagation_policy() {
    let s = start(0, ServerConfig::default()).await;
    for (policy, owner, dep) in [
        (None, "o1", "d1"),
        (Some("Foreground"), "o2", "d2"),
        (Some("Orphan"), "o3", "d3"),
    ] {
        owner_and_dependent(s.addr, owner, dep).await;
        let body = policy.map(|p| format!(r#"{{"propagationPolicy":"{p}"}}"#));
        let r = delete(s.addr, owner, body.as_deref()).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let d = get(s.addr, &format!("{CMS}/{dep}")).await;
        if policy == Some("Orphan") {
            assert_eq!(d.status, 200, "{}", d.body);
            assert!(json(&d.body)["metadata"].get("ownerReferences").is_none());
        } else {
            assert_eq!(d.status, 404, "{policy:?}: {}", d.body);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_options_are_validated_as_kube_does() {
    let s = start(0, ServerConfig::default()).await;
    make(s.addr, r#"{"metadata":{"name":"kept"}}"#).await;
    let refused = [
        (
            "kept",
            Some(r#"{"propagationPolicy":"Sometimes"}"#),
            r#"Unsupported value: \"Sometimes\""#,
        ),
        (
            "kept?propagationPolicy=Orphan&orphanDependents=true",
            None,
            "cannot be both set",
        ),
    ];
    for (name, body, why) in refused {
        let r = delete(s.addr, name, body).await;
        assert_eq!(r.status, 422, "{}", r.body);
        assert!(r.body.contains(why), "{}", r.body);
    }
    assert_eq!(get(s.addr, &format!("{CMS}/kept")).await.status, 200);
    let r = delete(
        s.addr,
        "kept?gracePeriodSeconds=0&propagationPolicy=Background",
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(get(s.addr, &format!("{CMS}/kept")).await.status, 404);
}
