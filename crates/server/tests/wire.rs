//! Wire compatibility over real HTTP: the scenarios of shared/reference/ replayed against
//! listwatch, comparing status codes, reasons, messages, causes and exact bytes.

use listwatch_testkit::server as common;

use std::time::{Duration, Instant};

use common::{answered, get, json, next_line, request, start, stream_lines};
use listwatch_core::ContinueToken;
use listwatch_server::ServerConfig;

fn cfg() -> ServerConfig {
    ServerConfig {
        rv_wait: Duration::from_secs(1),
        bookmark_interval: Duration::from_secs(1),
        ..ServerConfig::default()
    }
}

async fn create_cm(addr: std::net::SocketAddr, ns: &str, name: &str, v: &str) -> serde_json::Value {
    let body = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","labels":{{"app":"a"}}}},"data":{{"k":"{v}"}}}}"#
    );
    let r = answered(
        addr,
        "POST",
        &format!("/api/v1/namespaces/{ns}/configmaps"),
        Some(&body),
        201,
    )
    .await;
    json(&r.body)
}

/// A GET of all namespaces' ConfigMaps with `query` (a LIST or a WATCH): what the reference
/// scenarios read again and again.
async fn configmaps(a: std::net::SocketAddr, query: &str) -> common::Raw {
    get(a, &format!("/api/v1/configmaps?{query}")).await
}

const STATUS_PREFIX: &str =
    r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_scenarios() {
    let s = start(0, cfg()).await;
    let a = s.addr;
    create_cm(a, "default", "anchor-cm", "v").await;
    let cm2 = create_cm(a, "default", "anchor-cm2", "v2").await;
    let rv2: u64 = cm2["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .parse()
        .expect("num");

    // 3. LIST limit=1: continue token and remainingItemCount, byte-compatible token.
    let r = configmaps(a, "limit=1").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert!(r.body.ends_with("}\n"));
    let page = json(&r.body);
    assert_eq!(page["kind"], "ConfigMapList");
    assert_eq!(page["apiVersion"], "v1");
    assert_eq!(page["metadata"]["remainingItemCount"], 1);
    assert_eq!(page["items"].as_array().expect("items").len(), 1);
    assert!(
        page["items"][0].get("kind").is_none(),
        "list items carry no kind, as kube-apiserver"
    );
    let token = page["metadata"]["continue"]
        .as_str()
        .expect("continue")
        .to_string();
    assert_eq!(
        token,
        ContinueToken::encode(rv2 as i64, "", "default/anchor-cm")
    );
    assert!(r.body.starts_with(&format!(r#"{{"kind":"ConfigMapList","apiVersion":"v1","metadata":{{"resourceVersion":"{rv2}","continue":"{token}","remainingItemCount":1}},"items":[{{"metadata":{{"name":"anchor-cm","namespace":"default","uid":""#)));
    // A write between pages must not show up in page 2 (consistent snapshot).
    create_cm(a, "default", "anchor-cm3", "v3").await;
    let r = configmaps(a, &format!("limit=1&continue={token}")).await;
    let page2 = json(&r.body);
    assert_eq!(page2["metadata"]["resourceVersion"], rv2.to_string());
    assert_eq!(page2["items"][0]["metadata"]["name"], "anchor-cm2");
    assert!(page2["metadata"].get("continue").is_none());

    // 4. watch-list: ADDED for each object, then the initial-events-end bookmark.
    let r = configmaps(a, "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1").await;
    assert_eq!(r.status, 200);
    let lines: Vec<&str> = r.body.lines().collect();
    assert_eq!(lines.len(), 4, "{}", r.body);
    for l in &lines[..3] {
        assert!(l.starts_with(r#"{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"anchor-cm"#), "{l}");
    }
    let now = rv2 + 1;
    assert_eq!(
        lines[3],
        format!(
            r#"{{"type":"BOOKMARK","object":{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"resourceVersion":"{now}","annotations":{{"k8s.io/initial-events-end":"true"}}}}}}}}"#
        )
    );
    // 4b. no match: the bookmark alone.
    let r = get(a, "/api/v1/namespaces/default/configmaps?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1&fieldSelector=metadata.name%3Dnope").await;
    assert_eq!(r.body.lines().count(), 1);
    assert!(r.body.contains("k8s.io/initial-events-end"));
    // 4c. without allowWatchBookmarks: no bookmark.
    let r = configmaps(
        a,
        "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1",
    )
    .await;
    assert_eq!(r.body.lines().count(), 3);
    assert!(!r.body.contains("BOOKMARK"));

    // 5. too large RV: wait, then 504 + ResourceVersionTooLarge + Retry-After.
    let t = Instant::now();
    let r = configmaps(
        a,
        "resourceVersion=999999999&resourceVersionMatch=NotOlderThan",
    )
    .await;
    assert!(t.elapsed() >= Duration::from_millis(900));
    assert_eq!(r.status, 504);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(
        r.body,
        format!(
            r#"{STATUS_PREFIX}"Timeout: Too large resource version: 999999999, current: {now}","reason":"Timeout","details":{{"causes":[{{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}}],"retryAfterSeconds":1}},"code":504}}
"#
        )
    );
    let r = configmaps(a, "resourceVersion=999999999&resourceVersionMatch=Exact").await;
    assert_eq!(r.status, 504);
    // 5d. watch from a future RV: 200 and nothing until the timeout.
    let r = configmaps(a, "watch=1&resourceVersion=999999999&timeoutSeconds=1").await;
    assert_eq!((r.status, r.body.as_str()), (200, ""));

    // 6. Exact RV=1 while history reaches back: an empty list at RV 1.
    let r = configmaps(a, "resourceVersionMatch=Exact&resourceVersion=1").await;
    assert_eq!(
        r.body,
        "{\"kind\":\"ConfigMapList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"1\"},\"items\":[]}\n"
    );
    // 6b. watch from RV 1 replays the creations.
    let r = configmaps(a, "watch=1&resourceVersion=1&timeoutSeconds=1").await;
    assert_eq!(
        r.body
            .lines()
            .filter(|l| l.starts_with(r#"{"type":"ADDED""#))
            .count(),
        3
    );

    // 7. "compaction": the store relists, history before it is gone.
    let store = common::core_store(&s.source, "configmaps");
    s.source.seed(&store, []).expect("relist");
    let compacted = s.source.revision();
    let r = configmaps(a, "resourceVersionMatch=Exact&resourceVersion=1").await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (
            410,
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"The resourceVersion for the provided list is too old.\",\"reason\":\"Expired\",\"code\":410}\n"
        )
    );
    let r = configmaps(a, "limit=1&resourceVersion=1&resourceVersionMatch=Exact").await;
    assert_eq!(r.status, 410);
    let r = get(
        a,
        "/api/v1/namespaces/default/configmaps?resourceVersion=1&resourceVersionMatch=NotOlderThan",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(json(&r.body)["items"].as_array().expect("items").len(), 3);
    let r = configmaps(a, "watch=1&resourceVersion=1&timeoutSeconds=2").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.body,
        format!(
            "{{\"type\":\"ERROR\",\"object\":{STATUS_PREFIX}\"too old resource version: 1 ({compacted})\",\"reason\":\"Expired\",\"code\":410}}}}\n"
        )
    );
    // 9b. the old continue token: 410 with the inconsistent token to resume from.
    let r = configmaps(a, &format!("limit=1&continue={token}")).await;
    assert_eq!(r.status, 410);
    let st = json(&r.body);
    assert_eq!(st["reason"], "Expired");
    let inconsistent = st["metadata"]["continue"].as_str().expect("token");
    assert_eq!(
        inconsistent,
        "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6LTEsInN0YXJ0IjoiZGVmYXVsdC9hbmNob3ItY21cdTAwMDAifQ"
    );
    let r = configmaps(a, &format!("limit=1&continue={inconsistent}")).await;
    assert_eq!(json(&r.body)["items"][0]["metadata"]["name"], "anchor-cm2");

    // 10–17. errors, byte for byte.
    let cases: &[(&str, u16, &str)] = &[
        (
            "/api/v1/configmaps?limit=1&continue=not-a-valid-token",
            400,
            r#""invalid continue token: continue key is not valid: illegal base64 data at input byte 16","reason":"BadRequest","code":400}"#,
        ),
        (
            "/api/v1/configmaps?limit=1&continue=eyJ2IjoieCJ9",
            400,
            r#""invalid continue token: continue key is not valid: server does not recognize this encoded version x","reason":"BadRequest","code":400}"#,
        ),
        (
            "/api/v1/configmaps?limit=1&resourceVersion=5&continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NzAsInN0YXJ0IjoiL2RlZmF1bHQvYW5jaG9yLWNtXHUwMDAwIn0",
            400,
            r#""specifying resource version is not allowed when using continue","reason":"BadRequest","code":400}"#,
        ),
        (
            "/api/v1/configmaps?labelSelector=a%20b%20c",
            400,
            r#""unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt","reason":"BadRequest","code":400}"#,
        ),
        (
            "/api/v1/configmaps?labelSelector=app%3D%21%21%21",
            400,
            r#""unable to parse requirement: found '!', expected: identifier","reason":"BadRequest","code":400}"#,
        ),
        (
            "/api/v1/configmaps?fieldSelector=data.k%3Dv",
            400,
            r#""\"data.k\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"","reason":"BadRequest","code":400}"#,
        ),
        (
            "/api/v1/configmaps?resourceVersionMatch=Exact",
            422,
            r#""ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided","reason":"Invalid","details":{"group":"meta.k8s.io","kind":"ListOptions","causes":[{"reason":"FieldValueForbidden","message":"Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided","field":"resourceVersionMatch"}]},"code":422}"#,
        ),
        (
            "/api/v1/configmaps?sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
            422,
            r#""ListOptions.meta.k8s.io \"\" is invalid: [resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided, sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list]","reason":"Invalid","details":{"group":"meta.k8s.io","kind":"ListOptions","causes":[{"reason":"FieldValueForbidden","message":"Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided","field":"resourceVersionMatch"},{"reason":"FieldValueForbidden","message":"Forbidden: sendInitialEvents is forbidden for list","field":"sendInitialEvents"}]},"code":422}"#,
        ),
        (
            "/api/v1/namespaces/default/configmaps/does-not-exist",
            404,
            r#""configmaps \"does-not-exist\" not found","reason":"NotFound","details":{"name":"does-not-exist","kind":"configmaps"},"code":404}"#,
        ),
        (
            "/api/v1/foos",
            404,
            r#""the server could not find the requested resource","reason":"NotFound","details":{},"code":404}"#,
        ),
        (
            "/api/v1/configmaps?resourceVersion=abc",
            400,
            r#""invalid resource version: resourceVersion: Invalid value: \"abc\": strconv.ParseUint: parsing \"abc\": invalid syntax","reason":"BadRequest","code":400}"#,
        ),
        (
            "/api/v1/configmaps?watch=1&resourceVersion=abc",
            400,
            r#""invalid resource version: resourceVersion: Invalid value: \"abc\": strconv.ParseUint: parsing \"abc\": invalid syntax","reason":"BadRequest","code":400}"#,
        ),
        (
            "/api/v1/configmaps?timeoutSeconds=abc",
            400,
            r#""strconv.ParseInt: parsing \"abc\": invalid syntax","reason":"BadRequest","code":400}"#,
        ),
        (
            "/api/v1/pods?fieldSelector=spec.foo%3Dbar",
            400,
            r#""field label not supported: spec.foo","reason":"BadRequest","code":400}"#,
        ),
    ];
    for (path, code, tail) in cases {
        let r = get(a, path).await;
        assert_eq!(r.status, *code, "{path}: {}", r.body);
        assert_eq!(r.body, format!("{STATUS_PREFIX}{tail}\n"), "{path}");
    }
    let r = request(
        a,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"anchor-cm"}}"#),
    )
    .await;
    assert_eq!(
        r.body,
        format!(
            "{STATUS_PREFIX}{}\n",
            r#""configmaps \"anchor-cm\" already exists","reason":"AlreadyExists","details":{"name":"anchor-cm","kind":"configmaps"},"code":409}"#
        )
    );
    let r = request(a, "PUT", "/api/v1/namespaces/default/configmaps/anchor-cm", Some(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"anchor-cm","namespace":"default","resourceVersion":"1"},"data":{"k":"x"}}"#)).await;
    assert_eq!(
        r.body,
        format!(
            "{STATUS_PREFIX}{}\n",
            r#""Operation cannot be fulfilled on configmaps \"anchor-cm\": the object has been modified; please apply your changes to the latest version and try again","reason":"Conflict","details":{"name":"anchor-cm","kind":"configmaps"},"code":409}"#
        )
    );
    for q in ["limit=0", "limit=-1"] {
        let r = configmaps(a, q).await;
        assert_eq!(
            json(&r.body)["items"].as_array().expect("items").len(),
            3,
            "{q}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_selectors_and_get() {
    let s = start(40, cfg()).await;
    let a = s.addr;
    let r = get(a, "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-3").await;
    let items = json(&r.body)["items"].as_array().expect("items").clone();
    assert!(!items.is_empty());
    assert!(items.iter().all(|p| p["spec"]["nodeName"] == "node-3"));
    let r = get(
        a,
        "/api/v1/pods?fieldSelector=status.phase%3DPending,metadata.namespace%3Ddemo-1",
    )
    .await;
    let items = json(&r.body)["items"].as_array().expect("items").clone();
    assert!(
        items
            .iter()
            .all(|p| p["status"]["phase"] == "Pending" && p["metadata"]["namespace"] == "demo-1")
    );
    // demo-1 holds pods 0, 4, …, 36; pods 0 and 20 are Pending.
    assert_eq!(items.len(), 2);
    let r = get(
        a,
        "/api/v1/namespaces/demo-1/pods?labelSelector=track%20in%20(canary),env%3Dproduction",
    )
    .await;
    let items = json(&r.body)["items"].as_array().expect("items").clone();
    assert!(
        !items.is_empty()
            && items
                .iter()
                .all(|p| p["metadata"]["labels"]["track"] == "canary")
    );
    let r = get(a, "/api/v1/pods?labelSelector=!track").await;
    assert_eq!(json(&r.body)["items"].as_array().expect("items").len(), 0);
    let r = get(a, "/api/v1/namespaces/demo-1/pods/pod-0").await;
    let pod = json(&r.body);
    assert_eq!(
        (pod["kind"].as_str(), pod["metadata"]["name"].as_str()),
        (Some("Pod"), Some("pod-0"))
    );
    // Paging across namespaces concatenates to the full list.
    let mut names = Vec::new();
    let mut cont = String::new();
    loop {
        let r = get(a, &format!("/api/v1/pods?limit=7&continue={cont}")).await;
        let page = json(&r.body);
        names.extend(
            page["items"]
                .as_array()
                .expect("items")
                .iter()
                .map(|p| p["metadata"]["name"].as_str().expect("name").to_string()),
        );
        match page["metadata"]["continue"].as_str() {
            Some(c) => cont = c.to_string(),
            None => break,
        }
    }
    assert_eq!(names.len(), 40);
    let mut dedup = names.clone();
    dedup.sort();
    dedup.dedup();
    assert_eq!(dedup.len(), 40);

    // client-go's reflector lists with resourceVersion=0&limit=500: like kube-apiserver's
    // watch cache, any-data-will-do reads ignore limit (one response, no continue token),
    // while consistent and exact reads page.
    for q in [
        "resourceVersion=0&limit=7",
        "resourceVersion=0&resourceVersionMatch=NotOlderThan&limit=7",
        "resourceVersion=1&resourceVersionMatch=NotOlderThan&limit=7",
    ] {
        let page = json(&get(a, &format!("/api/v1/pods?{q}")).await.body);
        assert_eq!(page["items"].as_array().expect("items").len(), 40, "{q}");
        assert!(page["metadata"].get("continue").is_none(), "{q}");
        assert!(page["metadata"].get("remainingItemCount").is_none(), "{q}");
    }
    let rv = json(&get(a, "/api/v1/pods?limit=1").await.body)["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_string();
    for q in [
        "limit=7".to_string(),
        format!("resourceVersion={rv}&limit=7"),
        format!("resourceVersion={rv}&resourceVersionMatch=Exact&limit=7"),
    ] {
        let page = json(&get(a, &format!("/api/v1/pods?{q}")).await.body);
        assert_eq!(page["items"].as_array().expect("items").len(), 7, "{q}");
        assert_eq!(page["metadata"]["remainingItemCount"], 33, "{q}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_filter_transitions_and_bookmarks() {
    let s = start(0, cfg()).await;
    let a = s.addr;
    create_cm(a, "ns1", "x", "1").await;
    let rv = s.source.revision();
    let mut w = stream_lines(a, &format!("/api/v1/namespaces/ns1/configmaps?watch=1&labelSelector=app%3Da&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=30")).await;
    // Stop matching → DELETED carrying the update's RV; match again → ADDED.
    let put = |app: &'static str| {
        format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"x","labels":{{"app":"{app}"}}}}}}"#
        )
    };
    let r = request(
        a,
        "PUT",
        "/api/v1/namespaces/ns1/configmaps/x",
        Some(&put("b")),
    )
    .await;
    let off_rv = json(&r.body)["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_string();
    let l = next_line(&mut w, 5).await.expect("event");
    let e = json(&l);
    assert_eq!(e["type"], "DELETED");
    assert_eq!(e["object"]["metadata"]["resourceVersion"], off_rv.as_str());
    assert_eq!(
        e["object"]["metadata"]["labels"]["app"], "a",
        "the last matching state"
    );
    request(
        a,
        "PUT",
        "/api/v1/namespaces/ns1/configmaps/x",
        Some(&put("a")),
    )
    .await;
    assert_eq!(
        json(&next_line(&mut w, 5).await.expect("event"))["type"],
        "ADDED"
    );
    // A write elsewhere advances the RV; the next idle bookmark reports it.
    let other = create_cm(a, "other", "y", "1").await;
    let other_rv = other["metadata"]["resourceVersion"]
        .as_str()
        .expect("rv")
        .to_string();
    let b = json(&next_line(&mut w, 5).await.expect("bookmark"));
    assert_eq!(b["type"], "BOOKMARK");
    assert_eq!(
        b["object"]["metadata"]["resourceVersion"],
        other_rv.as_str()
    );
    assert!(b["object"]["metadata"].get("annotations").is_none());
    // Delete while matching → DELETED.
    request(a, "DELETE", "/api/v1/namespaces/ns1/configmaps/x", None).await;
    let mut saw_delete = false;
    for _ in 0..3 {
        let e = json(&next_line(&mut w, 5).await.expect("event"));
        if e["type"] == "DELETED" {
            saw_delete = true;
            break;
        }
    }
    assert!(saw_delete);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_documents() {
    let s = start(0, cfg()).await;
    let r = get(s.addr, "/api/v1").await;
    let d = json(&r.body);
    assert_eq!(d["kind"], "APIResourceList");
    assert!(
        d["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .any(|r| r["name"] == "pods" && r["kind"] == "Pod" && r["namespaced"] == true)
    );
    let d = json(&get(s.addr, "/apis").await.body);
    let groups = listwatch_testkit::member_strings(&d["groups"], "name");
    for g in [
        "apps",
        "batch",
        "rbac.authorization.k8s.io",
        "apiextensions.k8s.io",
    ] {
        assert!(groups.contains(&g), "{g} missing from /apis: {groups:?}");
    }
    let d = json(&get(s.addr, "/apis/apps/v1").await.body);
    let resources = listwatch_testkit::member_strings(&d["resources"], "name");
    assert!(resources.contains(&"deployments"), "{resources:?}");
    // Ready once the housekeeping loop has measured the pods' protobuf lengths (a moment).
    let r = common::get_until(s.addr, "/readyz", Duration::from_secs(10), 200).await;
    assert_eq!(r.body, "ok");
    assert_eq!(get(s.addr, "/apis/nope/v1").await.status, 404);

    // A cache its source no longer vouches for (being relisted): reads get kube-apiserver's
    // 429 "storage is (re)initializing" and /readyz names it, never stale data.
    let pods = common::core_store(&s.source, "pods");
    pods.set_ready(false);
    let r = get(s.addr, "/api/v1/pods").await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(json(&r.body)["message"], "storage is (re)initializing");
    let r = get(s.addr, "/readyz").await;
    assert_eq!(r.status, 500);
    assert!(r.body.contains("[-]cache pods not ready"), "{}", r.body);
    assert!(r.body.contains("[+]cache configmaps ok"), "{}", r.body);
    pods.set_ready(true);
    assert_eq!(get(s.addr, "/api/v1/pods").await.status, 200);
}

/// A storm of protobuf LISTs right after readiness must not wait while the first of them
/// measure the collection's protobuf lengths: `/readyz` waits for the housekeeping loop's
/// first pass over the loaded caches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_waits_for_the_protobuf_lengths() {
    // 20,000 pods take ~0.3 s to measure (release), far longer than one request.
    let s = start(20_000, cfg()).await;
    let r = get(s.addr, "/readyz?verbose").await;
    assert_eq!(r.status, 500, "{}", r.body);
    assert!(
        r.body.contains("[-]protobuf-lengths not measured yet"),
        "{}",
        r.body
    );
    assert!(r.body.contains("[+]cache pods ok"), "{}", r.body);
    let r = common::get_until(s.addr, "/readyz?verbose", Duration::from_secs(60), 200).await;
    assert!(r.body.contains("[+]protobuf-lengths ok"), "{}", r.body);
    // What readiness stands for: a protobuf LIST of the pods states its length from the
    // snapshot, without a pass over 20,000 records.
    let pods = common::core_store(&s.source, "pods");
    let snap = pods.current();
    for form in [
        listwatch_store::record::EncodedForm::Object,
        listwatch_store::record::EncodedForm::Metadata,
    ] {
        assert!(snap.encoded_total(form).is_some(), "{form:?} not measured");
    }
}

/// The lengths pass that readiness waits for is one that began with every cache loaded:
/// while one is still loading (here: pods marked so), readiness keeps failing on it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_waits_for_a_lengths_pass_over_loaded_caches() {
    let (source, pods) = listwatch_sources::demo::pods_source();
    source
        .seed(&pods, listwatch_sources::demo::demo_pods(100, 4))
        .expect("seed");
    let store = common::core_store(&source, "pods");
    store.set_ready(false);
    let (addr, _app, _stop) = common::serve_views(source.clone(), cfg()).await;
    // Long enough for many 20 ms retries and a one-second pass.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let r = get(addr, "/readyz?verbose").await;
    assert_eq!(r.status, 500, "{}", r.body);
    assert!(
        r.body.contains("[-]protobuf-lengths not measured yet"),
        "{}",
        r.body
    );
    store.set_ready(true);
    let r = listwatch_testkit::poll_until(
        Duration::from_secs(10),
        || get(addr, "/readyz?verbose"),
        |r| r.status == 200,
    )
    .await;
    assert!(r.body.contains("[+]protobuf-lengths ok"), "{}", r.body);
}

/// After start the housekeeping loop keeps measuring only the protobuf forms LISTs have
/// asked of a resource: objects created later are measured once a protobuf LIST of their
/// resource has been served, in that LIST's form only (measuring every new object in both
/// forms was 10 % of a small create on a gateway's front).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lengths_stay_measured_only_in_the_forms_lists_ask() {
    use listwatch_store::record::EncodedForm::{Metadata, Object};
    let s = start(10, cfg()).await;
    listwatch_testkit::wait_ready(s.addr, Duration::from_secs(10)).await;
    let cms = common::core_store(&s.source, "configmaps");
    let measured_in = |form| {
        let cms = cms.clone();
        listwatch_testkit::poll_until(
            Duration::from_secs(10),
            move || {
                let cms = cms.clone();
                async move { cms.current() }
            },
            move |snap| snap.encoded_total(form).is_some(),
        )
    };
    create_cm(s.addr, "default", "before-any-list", "1").await;
    // A housekeeping pass (one a second) sees the write with no form asked for.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    // A namespace's protobuf LIST sums only its own items: the whole snapshot's total comes
    // from the next pass, which measures the newly asked form without waiting for a write.
    let r = listwatch_testkit::send(
        s.addr,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        &[("Accept", "application/vnd.kubernetes.protobuf")],
        None,
    )
    .await
    .expect("connect");
    assert_eq!(r.status, 200);
    assert!(r.body.starts_with(b"k8s\0"));
    assert!(
        measured_in(Object).await.encoded_total(Object).is_some(),
        "the listed form is measured"
    );
    // After a write too; and, in the same pass right after it, not the form no LIST asked for.
    create_cm(s.addr, "default", "after-a-list", "2").await;
    assert!(measured_in(Object).await.encoded_total(Object).is_some());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        cms.current().encoded_total(Metadata).is_none(),
        "no LIST asked for metadata"
    );
}

fn metric(text: &str, name_and_labels: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name_and_labels))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_metrics_follow_requests_and_watchers() {
    let s = start(15, cfg()).await;
    let a = s.addr;
    get(a, "/api/v1/pods").await;
    get(a, "/api/v1/namespaces/demo-1/pods/nope").await;
    let mut w = stream_lines(
        a,
        "/api/v1/pods?watch=1&resourceVersion=0&timeoutSeconds=30",
    )
    .await;
    assert!(next_line(&mut w, 5).await.is_some());
    let m = get(a, "/metrics").await;
    assert!(
        m.header("content-type")
            .is_some_and(|c| c.starts_with("application/openmetrics-text"))
    );
    let t = &m.body;
    assert_eq!(
        metric(
            t,
            r#"apiserver_request_total{verb="LIST",resource="pods",code="200"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(
            t,
            r#"apiserver_request_total{verb="GET",resource="pods",code="404"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(t, r#"apiserver_registered_watchers{resource="pods"}"#),
        Some(1.0)
    );
    assert_eq!(
        metric(t, r#"apiserver_storage_objects{resource="pods"}"#),
        Some(15.0)
    );
    assert!(
        metric(
            t,
            r#"listwatch_response_bytes_total{verb="LIST",resource="pods"}"#
        )
        .is_some_and(|b| b > 15.0 * 4000.0)
    );
    assert!(metric(t, "process_resident_memory_bytes").is_some_and(|b| b > 1e6));
    drop(w);
    // The watch's connection closes; the gauge returns to zero once the server notices.
    let mut zero = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if metric(
            &get(a, "/metrics").await.body,
            r#"apiserver_registered_watchers{resource="pods"}"#,
        ) == Some(0.0)
        {
            zero = true;
            break;
        }
    }
    assert!(zero, "watcher gauge did not return to 0");
}
