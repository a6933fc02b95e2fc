//! PATCH over HTTP on the embedded store: each patch type applied and stored, a stale
//! `resourceVersion` in the patch answered 409, an unknown or apply media type 415, a JSON
//! patch whose `test` fails 422, `dryRun=All` answered without storing, and the metric's
//! `PATCH` / `APPLY` verb labels.

use listwatch_testkit::server as common;

use common::{get, json, request, request_typed, start};
use listwatch_server::ServerConfig;

const CM: &str = "/api/v1/namespaces/p/configmaps/cm";
const MERGE: &str = "application/merge-patch+json";
const JSON: &str = "application/json-patch+json";
const SMP: &str = "application/strategic-merge-patch+json";

/// PATCH of `path` with `patch` of media type `ct`.
async fn patch(s: &common::TestServer, path: &str, ct: &str, patch: &str) -> common::Raw {
    request_typed(s.addr, "PATCH", path, ct, patch).await
}

async fn setup() -> (common::TestServer, String) {
    let s = start(0, ServerConfig::default()).await;
    let made = request(
        s.addr,
        "POST",
        "/api/v1/namespaces/p/configmaps",
        Some(r#"{"metadata":{"name":"cm","labels":{"a":"1"}},"data":{"k":"v"}}"#),
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.body);
    let rv = json(&made.body)["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_string();
    (s, rv)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_patch_type_is_applied_and_stored() {
    let (s, rv) = setup().await;
    let r = patch(&s, CM, MERGE, r#"{"data":{"m":"1","k":null}}"#).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let after = json(&r.body);
    assert_eq!(after["data"], serde_json::json!({"m": "1"}));
    assert_ne!(after["metadata"]["resourceVersion"], rv.as_str());
    let add_j =
        r#"[{"op":"test","path":"/data/m","value":"1"},{"op":"add","path":"/data/j","value":"2"}]"#;
    let r = patch(&s, CM, JSON, add_j).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let labels = r#"{"metadata":{"labels":{"b":"2","a":null}}}"#;
    let r = patch(&s, CM, SMP, labels).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let stored = json(&get(s.addr, CM).await.body);
    assert_eq!(stored["data"], serde_json::json!({"m": "1", "j": "2"}));
    assert_eq!(stored["metadata"]["labels"], serde_json::json!({"b": "2"}));
    assert_eq!(stored["metadata"]["uid"], after["metadata"]["uid"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_resource_version_in_the_patch_is_409() {
    let (s, rv) = setup().await;
    let r = patch(&s, CM, MERGE, r#"{"data":{"k":"2"}}"#).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // The patch names the RV of the first version: stale now.
    let body = format!(r#"{{"metadata":{{"resourceVersion":"{rv}"}},"data":{{"k":"3"}}}}"#);
    let r = patch(&s, CM, MERGE, &body).await;
    assert_eq!(r.status, 409, "{}", r.body);
    let status = json(&r.body);
    assert_eq!(status["reason"], "Conflict");
    assert_eq!(json(&get(s.addr, CM).await.body)["data"]["k"], "2");
    // The current RV is accepted.
    let now = json(&get(s.addr, CM).await.body)["metadata"]["resourceVersion"].clone();
    let body = format!(r#"{{"metadata":{{"resourceVersion":{now}}},"data":{{"k":"3"}}}}"#);
    let r = patch(&s, CM, MERGE, &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_and_apply_media_types_are_415() {
    let (s, _) = setup().await;
    for ct in ["text/plain", "application/apply-patch+yaml"] {
        let r = patch(&s, CM, ct, r#"{"data":{"k":"2"}}"#).await;
        assert_eq!(r.status, 415, "{ct}: {}", r.body);
        assert!(r.body.contains("415: Unsupported Media Type"), "{}", r.body);
    }
    assert_eq!(json(&get(s.addr, CM).await.body)["data"]["k"], "v");
    let metrics = get(s.addr, "/metrics").await.body;
    for verb in ["PATCH", "APPLY"] {
        let label = format!("verb=\"{verb}\"");
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("apiserver_request_total") && l.contains(&label)),
            "no {verb} in metrics"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_json_patch_test_is_422_and_missing_object_404() {
    let (s, _) = setup().await;
    let failing =
        r#"[{"op":"test","path":"/data/k","value":"other"},{"op":"remove","path":"/data/k"}]"#;
    let r = patch(&s, CM, JSON, failing).await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(json(&get(s.addr, CM).await.body)["data"]["k"], "v");
    let r = patch(&s, "/api/v1/namespaces/p/configmaps/none", MERGE, "{}").await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(json(&r.body)["reason"], "NotFound");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_patch_answers_without_storing() {
    let (s, rv) = setup().await;
    let dry = r#"{"data":{"k":"dry"}}"#;
    let r = patch(&s, &format!("{CM}?dryRun=All"), MERGE, dry).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let answered = json(&r.body);
    assert_eq!(answered["data"]["k"], "dry");
    assert_eq!(answered["metadata"]["resourceVersion"], rv.as_str());
    let stored = json(&get(s.addr, CM).await.body);
    assert_eq!(stored["data"]["k"], "v");
    assert_eq!(stored["metadata"]["resourceVersion"], rv.as_str());
    let r = patch(&s, &format!("{CM}?dryRun=Some"), MERGE, dry).await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(r.body.contains("PatchOptions"), "{}", r.body);
}
