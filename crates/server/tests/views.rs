//! events.k8s.io/v1 Events and autoscaling/v1 HPAs are views of what the embedded store
//! holds as core/v1 Events and autoscaling/v2 HPAs (crates/sources/src/views.rs): writes
//! to the stored version show up converted, at the same resourceVersion, in every read.

use listwatch_testkit::server as common;

use std::time::Duration;

use common::{answered, get, get_expecting, json, next_line, stream_lines};
use listwatch_server::ServerConfig;
use serde_json::Value;

fn rv(v: &Value) -> String {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The next watch event that is not a BOOKMARK.
async fn next_event(lines: &mut common::Lines) -> Value {
    loop {
        let line = next_line(lines, 10).await.expect("watch event within 10 s");
        let e = json(&line);
        if e["type"] != "BOOKMARK" {
            return e;
        }
    }
}

/// A LIST as a `meta.k8s.io/v1` Table.
async fn table(addr: std::net::SocketAddr, path: &str) -> Value {
    let r = listwatch_testkit::get_with(
        addr,
        path,
        &[("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")],
    )
    .await;
    assert_eq!(r.status, 200, "{path}");
    serde_json::from_slice(&r.body).expect("Table JSON")
}

/// POSTs the core/v1 Event `core` to namespace `team`; asserts it was created.
async fn post_core_event(addr: std::net::SocketAddr, core: &str) -> common::Raw {
    answered(
        addr,
        "POST",
        "/api/v1/namespaces/team/events",
        Some(core),
        201,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_core_event_appears_converted_in_an_events_k8s_io_watch_at_its_rv() {
    let server = common::start(0, ServerConfig::default()).await;
    let list = get_expecting(
        server.addr,
        "/apis/events.k8s.io/v1/namespaces/team/events",
        200,
    )
    .await;
    let from = rv(&json(&list.body));
    let mut watch = stream_lines(
        server.addr,
        &format!("/apis/events.k8s.io/v1/namespaces/team/events?watch=1&resourceVersion={from}"),
    )
    .await;

    let core = r#"{"apiVersion":"v1","kind":"Event","metadata":{"name":"web.1","namespace":"team"},"involvedObject":{"kind":"Pod","namespace":"team","name":"web","apiVersion":"v1"},"reason":"Pulled","message":"image pulled","source":{"component":"kubelet","host":"node-1"},"count":2,"type":"Normal","reportingComponent":"kubelet","reportingInstance":"node-1"}"#;
    let created = post_core_event(server.addr, core).await;
    let created = json(&created.body);

    let added = next_event(&mut watch).await;
    assert_eq!(added["type"], "ADDED", "{added}");
    let o = &added["object"];
    assert_eq!(o["apiVersion"], "events.k8s.io/v1");
    assert_eq!(rv(o), rv(&created), "the view's event has the write's RV");
    assert_eq!(o["note"], "image pulled");
    assert_eq!(o["regarding"]["name"], "web");
    assert_eq!(o["reportingController"], "kubelet");
    assert_eq!(o["deprecatedSource"]["host"], "node-1");
    assert_eq!(o["deprecatedCount"], 2);
    assert!(o.get("message").is_none() && o.get("involvedObject").is_none());

    // An update and a delete follow, each at its own RV.
    let mut changed = created.clone();
    changed["message"] = "image pulled again".into();
    let updated = answered(
        server.addr,
        "PUT",
        "/api/v1/namespaces/team/events/web.1",
        Some(&changed.to_string()),
        200,
    )
    .await;
    let modified = next_event(&mut watch).await;
    assert_eq!(modified["type"], "MODIFIED", "{modified}");
    assert_eq!(modified["object"]["note"], "image pulled again");
    assert_eq!(rv(&modified["object"]), rv(&json(&updated.body)));

    answered(
        server.addr,
        "DELETE",
        "/api/v1/namespaces/team/events/web.1",
        None,
        200,
    )
    .await;
    let gone = next_event(&mut watch).await;
    assert_eq!(gone["type"], "DELETED", "{gone}");
    assert_eq!(gone["object"]["metadata"]["name"], "web.1");
    assert!(
        rv(&gone["object"]).parse::<u64>().unwrap() > rv(&json(&updated.body)).parse().unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_read_like_any_resource_and_refuse_writes() {
    let server = common::start(0, ServerConfig::default()).await;
    let core = r#"{"apiVersion":"v1","kind":"Event","metadata":{"name":"db.1","namespace":"team"},"involvedObject":{"kind":"Pod","namespace":"team","name":"db"},"reason":"BackOff","message":"back-off","type":"Warning","reportingComponent":"kubelet","reportingInstance":""}"#;
    let created = post_core_event(server.addr, core).await;

    // A consistent GET right after the write waits for the view to reach the write.
    let got = get_expecting(
        server.addr,
        "/apis/events.k8s.io/v1/namespaces/team/events/db.1",
        200,
    )
    .await;
    assert_eq!(rv(&json(&got.body)), rv(&json(&created.body)));

    // events.k8s.io's field labels: regarding.*, not involvedObject.*.
    let sel = get(
        server.addr,
        "/apis/events.k8s.io/v1/events?fieldSelector=regarding.name%3Ddb,type%3DWarning",
    )
    .await;
    assert_eq!(sel.status, 200, "{}", sel.body);
    assert_eq!(json(&sel.body)["items"].as_array().map(Vec::len), Some(1));
    let none = get(
        server.addr,
        "/apis/events.k8s.io/v1/events?fieldSelector=regarding.name%3Dweb",
    )
    .await;
    assert_eq!(json(&none.body)["items"].as_array().map(Vec::len), Some(0));
    get_expecting(
        server.addr,
        "/apis/events.k8s.io/v1/events?fieldSelector=involvedObject.name%3Ddb",
        400,
    )
    .await;

    // Writes to a view: 405 for now.
    answered(
        server.addr,
        "POST",
        "/apis/events.k8s.io/v1/namespaces/team/events",
        Some(r#"{"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"name":"x"},"eventTime":null}"#),
        405,
    )
    .await;
    answered(
        server.addr,
        "DELETE",
        "/apis/events.k8s.io/v1/namespaces/team/events/db.1",
        None,
        405,
    )
    .await;
    assert_eq!(
        get(server.addr, "/api/v1/namespaces/team/events/db.1")
            .await
            .status,
        200,
        "the stored event is untouched"
    );

    // An autoscaling/v2 HPA read as autoscaling/v1.
    let hpa = r#"{"apiVersion":"autoscaling/v2","kind":"HorizontalPodAutoscaler","metadata":{"name":"web","namespace":"team"},"spec":{"scaleTargetRef":{"apiVersion":"apps/v1","kind":"Deployment","name":"web"},"minReplicas":2,"maxReplicas":10,"metrics":[{"type":"Resource","resource":{"name":"cpu","target":{"type":"Utilization","averageUtilization":70}}}]}}"#;
    let created = answered(
        server.addr,
        "POST",
        "/apis/autoscaling/v2/namespaces/team/horizontalpodautoscalers",
        Some(hpa),
        201,
    )
    .await;
    let v1 = get_expecting(
        server.addr,
        "/apis/autoscaling/v1/namespaces/team/horizontalpodautoscalers/web",
        200,
    )
    .await;
    let v1 = json(&v1.body);
    assert_eq!(v1["apiVersion"], "autoscaling/v1");
    assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 70);
    assert_eq!(rv(&v1), rv(&json(&created.body)));

    // Discovery lists both as kube-apiserver does (autoscaling prefers v2).
    let group = json(&get(server.addr, "/apis/autoscaling").await.body);
    assert_eq!(group["preferredVersion"]["version"], "v2");
    assert_eq!(group["versions"][1]["version"], "v1");
    let events = json(&get(server.addr, "/apis/events.k8s.io/v1").await.body);
    assert_eq!(events["resources"][0]["name"], "events");
    assert_eq!(events["resources"][0]["shortNames"][0], "ev");
    // Tables: kube-apiserver prints the stored object, so a view's Table is its source's.
    for (view, stored) in [
        (
            "/apis/events.k8s.io/v1/namespaces/team/events",
            "/api/v1/namespaces/team/events",
        ),
        (
            "/apis/autoscaling/v1/namespaces/team/horizontalpodautoscalers",
            "/apis/autoscaling/v2/namespaces/team/horizontalpodautoscalers",
        ),
    ] {
        let (a, b) = (
            table(server.addr, view).await,
            table(server.addr, stored).await,
        );
        assert_eq!(a["columnDefinitions"], b["columnDefinitions"], "{view}");
        // Ages are read at each request: mask them (two requests may straddle a second).
        let cells = |t: &Value| -> Vec<Vec<String>> {
            t["rows"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| {
                    r["cells"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|c| {
                            let c = c.as_str().map_or_else(|| c.to_string(), str::to_string);
                            let age = c.len() > 1
                                && c.ends_with('s')
                                && c[..c.len() - 1].bytes().all(|b| b.is_ascii_digit());
                            if age { "<age>".into() } else { c }
                        })
                        .collect()
                })
                .collect()
        };
        assert_eq!(cells(&a), cells(&b), "{view}");
        assert_eq!(cells(&a).len(), 1, "{view}: {a}");
    }
    let hpa_row = table(
        server.addr,
        "/apis/autoscaling/v1/namespaces/team/horizontalpodautoscalers",
    )
    .await;
    assert_eq!(hpa_row["rows"][0]["cells"][2], "cpu: <unknown>/70%");

    // Protobuf and PartialObjectMetadata, by the views' kinds.
    for path in [
        "/apis/events.k8s.io/v1/namespaces/team/events/db.1",
        "/apis/autoscaling/v1/namespaces/team/horizontalpodautoscalers/web",
    ] {
        for accept in [
            "application/vnd.kubernetes.protobuf",
            "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io",
        ] {
            let r = listwatch_testkit::get_with(server.addr, path, &[("Accept", accept)]).await;
            assert_eq!(
                r.status,
                200,
                "{path} as {accept}: {}",
                String::from_utf8_lossy(&r.body)
            );
            let ct = r
                .headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            assert!(
                ct.starts_with(accept.split(';').next().unwrap()),
                "{path}: {ct}"
            );
        }
    }

    // Readiness covers the views.
    let ready = common::poll_until(
        Duration::from_secs(5),
        || async { get(server.addr, "/readyz").await.status },
        |s| *s == 200,
    )
    .await;
    assert_eq!(ready, 200);
}
