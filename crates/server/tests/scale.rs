//! The `scale` subresource over HTTP: an autoscaling/v1 `Scale` of a Deployment, PUT and
//! PATCH change `spec.replicas` only, a stale `resourceVersion` is 409, and kinds without
//! the subresource answer 404.

use listwatch_testkit::server as common;

use common::{answered, get, json, put_scale, request_typed, start};
use listwatch_server::ServerConfig;

const DEPLOYS: &str = "/apis/apps/v1/namespaces/s/deployments";

/// Deployment `d`: one replica, selector `a=1,b=2`.
const DEPLOY_D: &str = r#"{"metadata":{"name":"d"},"spec":{"replicas":1,"selector":{"matchLabels":{"b":"2","a":"1"}},"template":{"metadata":{"labels":{"a":"1","b":"2"}}}}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_reads_and_writes_replicas_only() {
    let s = start(0, ServerConfig::default()).await;
    let made = answered(s.addr, "POST", DEPLOYS, Some(DEPLOY_D), 201).await;
    let old_rv = json(&made.body)["metadata"]["resourceVersion"].clone();
    let scale = json(&get(s.addr, &format!("{DEPLOYS}/d/scale")).await.body);
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["apiVersion"], "autoscaling/v1");
    assert_eq!(scale["spec"]["replicas"], 1);
    assert_eq!(scale["status"]["selector"], "a=1,b=2");
    assert_eq!(scale["metadata"]["resourceVersion"], old_rv);

    let r = request_typed(
        s.addr,
        "PATCH",
        &format!("{DEPLOYS}/d/scale"),
        "application/merge-patch+json",
        r#"{"spec":{"replicas":3}}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(json(&r.body)["spec"]["replicas"], 3);
    let d = json(&get(s.addr, &format!("{DEPLOYS}/d")).await.body);
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(d["spec"]["template"]["metadata"]["labels"]["a"], "1");

    // A PUT naming the first RV is stale now.
    let scale = format!("{DEPLOYS}/d/scale");
    let r = put_scale(s.addr, &scale, "d", 5, Some(&old_rv)).await;
    assert_eq!(r.status, 409, "{}", r.body);
    let r = put_scale(s.addr, &scale, "d", -1, None).await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(
        json(&get(s.addr, &format!("{DEPLOYS}/d")).await.body)["spec"]["replicas"],
        3
    );
    let r = get(s.addr, "/api/v1/namespaces/s/configmaps/x/scale").await;
    assert_eq!(r.status, 404, "{}", r.body);
}
