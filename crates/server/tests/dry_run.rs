//! Server-side dry run (`dryRun=All`) on the embedded store: each write is checked and
//! answered as it would be, nothing is committed, the revision does not move and no watcher
//! sees it; an unknown value is refused as kube-apiserver's `ValidateDryRun` refuses it.

use listwatch_testkit::server as common;

use common::{answered, get, json, put_scale, request, start};
use listwatch_server::ServerConfig;

const CMS: &str = "/api/v1/namespaces/dry/configmaps";

/// The list's resourceVersion and item names.
async fn state(addr: std::net::SocketAddr) -> (String, Vec<String>) {
    let list = json(&get(addr, CMS).await.body);
    let names = list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|i| i["metadata"]["name"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default();
    (
        list["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        names,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_writes_answer_as_the_write_and_change_nothing() {
    let s = start(0, ServerConfig::default()).await;
    let created = answered(
        s.addr,
        "POST",
        CMS,
        Some(r#"{"metadata":{"name":"kept"},"data":{"a":"1"}}"#),
        201,
    )
    .await;
    let kept_rv = json(&created.body)["metadata"]["resourceVersion"].clone();
    let before = state(s.addr).await;
    let mut watch = common::stream_lines(
        s.addr,
        &format!("{CMS}?watch=1&resourceVersion={}", before.0),
    )
    .await;

    // Create: the object as it would be made (uid, creationTimestamp), no resourceVersion.
    let r = answered(
        s.addr,
        "POST",
        &format!("{CMS}?dryRun=All"),
        Some(r#"{"metadata":{"name":"new"},"data":{"b":"2"}}"#),
        201,
    )
    .await;
    let o = json(&r.body);
    assert_eq!(o["metadata"]["name"], "new");
    assert_eq!(o["data"]["b"], "2");
    assert!(o["metadata"]["uid"].is_string() && o["metadata"]["creationTimestamp"].is_string());
    assert!(o["metadata"].get("resourceVersion").is_none(), "{}", r.body);
    // A dry-run create of what exists is refused as the real one would be.
    answered(
        s.addr,
        "POST",
        &format!("{CMS}?dryRun=All"),
        Some(r#"{"metadata":{"name":"kept"}}"#),
        409,
    )
    .await;

    // Update: the object as it would be, at the resourceVersion it has now.
    let r = answered(
        s.addr,
        "PUT",
        &format!("{CMS}/kept?dryRun=All"),
        Some(r#"{"metadata":{"name":"kept"},"data":{"a":"changed"}}"#),
        200,
    )
    .await;
    let o = json(&r.body);
    assert_eq!(o["data"]["a"], "changed");
    assert_eq!(o["metadata"]["resourceVersion"], kept_rv);

    // Delete: the real answer, nothing removed.
    answered(
        s.addr,
        "DELETE",
        &format!("{CMS}/kept?dryRun=All"),
        None,
        200,
    )
    .await;
    answered(
        s.addr,
        "DELETE",
        &format!("{CMS}/missing?dryRun=All"),
        None,
        404,
    )
    .await;

    // Nothing moved: same RV, same objects, the stored object unchanged.
    assert_eq!(state(s.addr).await, before);
    assert_eq!(
        json(&get(s.addr, &format!("{CMS}/kept")).await.body)["data"]["a"],
        "1"
    );
    // The watch saw none of it: the next event is a real write made now.
    let real = request(s.addr, "POST", CMS, Some(r#"{"metadata":{"name":"real"}}"#)).await;
    assert_eq!(real.status, 201);
    let event = common::next_line(&mut watch, 10).await.expect("an event");
    assert!(
        event.contains(r#""name":"real""#),
        "a dry run reached the watch: {event}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_dry_run_value_is_refused_as_kube_apiserver_does() {
    let s = start(0, ServerConfig::default()).await;
    for (method, path, kind, body) in [
        (
            "POST",
            CMS.to_string(),
            "CreateOptions",
            Some(r#"{"metadata":{"name":"x"}}"#),
        ),
        (
            "PUT",
            format!("{CMS}/x"),
            "UpdateOptions",
            Some(r#"{"metadata":{"name":"x"}}"#),
        ),
        ("DELETE", format!("{CMS}/x"), "DeleteOptions", None),
    ] {
        let r = request(
            s.addr,
            method,
            &format!("{path}?dryRun=All&dryRun=Foo"),
            body,
        )
        .await;
        assert_eq!(r.status, 422, "{method}: {}", r.body);
        let st = json(&r.body);
        assert_eq!(st["reason"], "Invalid");
        assert_eq!(
            st["message"],
            format!(
                r#"{kind}.meta.k8s.io "" is invalid: dryRun: Unsupported value: []string{{"All", "Foo"}}: supported values: "All""#
            )
        );
        assert_eq!(
            st["details"]["causes"][0]["reason"],
            "FieldValueNotSupported"
        );
        assert_eq!(st["details"]["causes"][0]["field"], "dryRun");
    }
    assert!(state(s.addr).await.1.is_empty(), "a refused dry run wrote");
}

/// The subresources take `dryRun=All` too: a scale and a status write are answered as they
/// would be, and the object (and the revision) stay as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_scale_and_status_writes_change_nothing() {
    let s = start(0, ServerConfig::default()).await;
    let deploys = "/apis/apps/v1/namespaces/dry/deployments";
    let deploy = r#"{"metadata":{"name":"d"},"spec":{"replicas":1,"selector":{"matchLabels":{"a":"1"}},"template":{"metadata":{"labels":{"a":"1"}}}}}"#;
    let made = answered(s.addr, "POST", deploys, Some(deploy), 201).await;
    let rv = json(&made.body)["metadata"]["resourceVersion"].clone();

    let scaled = put_scale(
        s.addr,
        &format!("{deploys}/d/scale?dryRun=All"),
        "d",
        7,
        None,
    )
    .await;
    assert_eq!(scaled.status, 200, "{}", scaled.body);
    assert_eq!(
        json(&scaled.body)["spec"]["replicas"],
        7,
        "answered as it would be"
    );

    let status = request(
        s.addr,
        "PUT",
        &format!("{deploys}/d/status?dryRun=All"),
        Some(r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},"spec":{"replicas":1,"selector":{"matchLabels":{"a":"1"}},"template":{"metadata":{"labels":{"a":"1"}}}},"status":{"replicas":5,"readyReplicas":5}}"#),
    )
    .await;
    assert_eq!(status.status, 200, "{}", status.body);
    assert_eq!(json(&status.body)["status"]["readyReplicas"], 5);

    let now = json(&get(s.addr, &format!("{deploys}/d")).await.body);
    assert_eq!(now["spec"]["replicas"], 1, "scale committed: {now}");
    assert!(
        now["status"]["readyReplicas"].is_null(),
        "status committed: {now}"
    );
    assert_eq!(now["metadata"]["resourceVersion"], rv);
}
