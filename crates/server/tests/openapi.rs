//! `/openapi/v2` and `/openapi/v3` over real HTTP: negotiation, ETags, 304s, the v3 index's
//! hashed URLs and their cache headers, as kube-apiserver's kube-openapi handlers answer.

use listwatch_testkit::server as common;

use common::{json, start};
use listwatch_server::ServerConfig;
use listwatch_testkit::get_with;

#[tokio::test]
async fn v3_index_hashed_documents_and_conditional_gets() {
    let s = start(0, ServerConfig::default()).await;
    let index = get_with(s.addr, "/openapi/v3", &[]).await;
    assert_eq!(index.status, 200);
    assert!(index.header("etag").is_some_and(|e| e.len() == 130));
    let index = json(std::str::from_utf8(&index.body).expect("utf8"));
    let url = index["paths"]["apis/apps/v1"]["serverRelativeURL"]
        .as_str()
        .expect("apps/v1 listed")
        .to_string();
    let hash = url.split("hash=").nth(1).expect("hash").to_string();

    let doc = get_with(s.addr, &url, &[]).await;
    assert_eq!(doc.status, 200);
    assert_eq!(doc.header("cache-control"), Some("public, immutable"));
    assert!(doc.header("expires").is_some());
    assert_eq!(doc.header("etag"), Some(format!("\"{hash}\"").as_str()));
    let d = json(std::str::from_utf8(&doc.body).expect("utf8"));
    assert!(d["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"].is_object());

    // Unhashed: no immutable caching; a matching If-None-Match is a 304 without a body.
    let plain = get_with(s.addr, "/openapi/v3/apis/apps/v1", &[]).await;
    assert_eq!(plain.status, 200);
    assert!(plain.header("cache-control").is_none());
    let etag = format!("\"{hash}\"");
    let again = get_with(
        s.addr,
        "/openapi/v3/apis/apps/v1",
        &[("If-None-Match", &etag)],
    )
    .await;
    assert_eq!(again.status, 304);
    assert!(again.body.is_empty());

    // A stale hash is redirected to the current document.
    let stale = get_with(s.addr, "/openapi/v3/apis/apps/v1?hash=0ABC", &[]).await;
    assert_eq!(stale.status, 301);
    assert_eq!(stale.header("location"), Some(url.as_str()));

    let missing = get_with(s.addr, "/openapi/v3/apis/nothing.example/v1", &[]).await;
    assert_eq!(missing.status, 404);
}

#[tokio::test]
async fn v2_in_json_and_protobuf_by_accept() {
    let s = start(0, ServerConfig::default()).await;
    let j = get_with(s.addr, "/openapi/v2", &[("Accept", "application/json")]).await;
    assert_eq!(j.status, 200);
    assert_eq!(j.header("content-type"), Some("application/json"));
    let v2 = json(std::str::from_utf8(&j.body).expect("utf8"));
    assert_eq!(v2["swagger"], "2.0");
    assert!(v2["definitions"]["io.k8s.api.core.v1.ConfigMap"].is_object());
    // kubectl's Accept for the document its client-side validation reads.
    let p = get_with(
        s.addr,
        "/openapi/v2",
        &[(
            "Accept",
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
        )],
    )
    .await;
    assert_eq!(p.status, 200);
    assert_eq!(
        p.header("content-type"),
        Some("application/com.github.proto-openapi.spec.v2.v1.0+protobuf")
    );
    assert_eq!(p.header("etag"), j.header("etag"));
    // Document.swagger (field 1) comes first: "2.0".
    assert_eq!(&p.body[..5], b"\x0a\x032.0");
    let none = get_with(s.addr, "/openapi/v2", &[("Accept", "text/html")]).await;
    assert_eq!(none.status, 406);
}
