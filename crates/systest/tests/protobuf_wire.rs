//! The protobuf wire against a real kube-apiserver 1.36 (`shared/reference/protobuf/`): the
//! same requests over the same objects (the storage corpus's etcd, restored with its
//! revisions) must get the same bytes. Where the content differs for a reason the test
//! states it (a list's own resourceVersion is the store's current one, not the capture's),
//! the comparison is item by item.

mod common;

use std::collections::BTreeMap;

use common::etcd::serve_corpus;
use serde_json::Value;

/// One exchange of the capture index.
struct Exchange {
    name: String,
    path: String,
    accept: String,
    status: u16,
    content_type: String,
    body: Vec<u8>,
}

fn exchanges() -> BTreeMap<String, Exchange> {
    let dir = listwatch_testkit::reference("protobuf");
    let index: Value =
        serde_json::from_slice(&std::fs::read(dir.join("index.json")).expect("index"))
            .expect("json");
    let mut out = BTreeMap::new();
    for e in index.as_array().expect("list") {
        let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let file = dir.join(s(&e["body_file"]));
        let mut body = std::fs::read(&file).expect("body");
        if e["stored_gzipped"].as_bool() == Some(true)
            || file.extension().is_some_and(|x| x == "gz")
        {
            body = listwatch_testkit::gunzip(&body);
        }
        let x = Exchange {
            name: s(&e["name"]),
            path: s(&e["path_and_query"]),
            accept: s(&e["request_headers"]["Accept"]),
            status: e["status"].as_u64().unwrap_or(0) as u16,
            content_type: s(&e["response_headers"]["Content-Type"]),
            body,
        };
        out.insert(x.name.clone(), x);
    }
    out
}

/// Top-level fields of a protobuf message: (number, wire type, bytes or varint value).
fn fields(b: &[u8]) -> Vec<(u32, u8, Vec<u8>, u64)> {
    let mut out = Vec::new();
    let mut i = 0;
    let varint = |b: &[u8], i: &mut usize| {
        let (mut v, mut s) = (0u64, 0);
        loop {
            let c = b[*i];
            *i += 1;
            v |= u64::from(c & 0x7f) << s;
            s += 7;
            if c < 0x80 {
                return v;
            }
        }
    };
    while i < b.len() {
        let key = varint(b, &mut i);
        let (tag, wt) = ((key >> 3) as u32, (key & 7) as u8);
        match wt {
            0 => {
                let v = varint(b, &mut i);
                out.push((tag, wt, Vec::new(), v));
            }
            2 => {
                let n = varint(b, &mut i) as usize;
                out.push((tag, wt, b[i..i + n].to_vec(), 0));
                i += n;
            }
            1 => {
                out.push((tag, wt, b[i..i + 8].to_vec(), 0));
                i += 8;
            }
            _ => panic!("wire type {wt}"),
        }
    }
    out
}

fn field(b: &[u8], tag: u32) -> Vec<u8> {
    fields(b)
        .into_iter()
        .find(|f| f.0 == tag)
        .map(|f| f.2)
        .unwrap_or_default()
}

/// `k8s\0` envelope → (typeMeta bytes, raw).
fn unwrap(body: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let rest = body.strip_prefix(b"k8s\0").expect("k8s\\0 prefix");
    (field(rest, 1), field(rest, 2))
}

/// An object message's `metadata.namespace/name`.
fn object_name(obj: &[u8]) -> String {
    let md = field(obj, 1);
    format!(
        "{}/{}",
        String::from_utf8_lossy(&field(&md, 3)),
        String::from_utf8_lossy(&field(&md, 1))
    )
}

/// A list body's ListMeta and items by name.
fn list_items(body: &[u8]) -> (Vec<u8>, Vec<u8>, BTreeMap<String, Vec<u8>>) {
    let (type_meta, raw) = unwrap(body);
    let mut items = BTreeMap::new();
    let mut list_meta = Vec::new();
    for (tag, _, bytes, _) in fields(&raw) {
        match tag {
            1 => list_meta = bytes,
            2 => {
                items.insert(object_name(&bytes), bytes);
            }
            _ => {}
        }
    }
    (type_meta, list_meta, items)
}

/// Watch frames → (type, envelope) per event.
fn frames(mut body: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    while body.len() >= 4 {
        let n = u32::from_be_bytes([body[0], body[1], body[2], body[3]]) as usize;
        let ev = &body[4..4 + n];
        let kind = String::from_utf8_lossy(&field(ev, 1)).to_string();
        let raw = field(&field(ev, 2), 1);
        out.push((kind, raw));
        body = &body[4 + n..];
    }
    assert!(body.is_empty(), "trailing bytes after the last frame");
    out
}

/// The recorded exchange `name` and listwatch's answer to the same request.
async fn replay<'x>(
    addr: std::net::SocketAddr,
    exchanges: &'x BTreeMap<String, Exchange>,
    name: &str,
) -> (&'x Exchange, listwatch_testkit::Response) {
    let want = &exchanges[name];
    let got = listwatch_testkit::get_with(addr, &want.path, &[("Accept", &want.accept)]).await;
    (want, got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_answers_equal_kube_apiservers() {
    common::require("etcdctl");
    let (_etcd, server) = serve_corpus().await;
    let x = exchanges();
    let mut failures = Vec::new();
    let mut same = 0;
    let mut check = |name: &str, ok: bool, why: String| {
        if ok {
            same += 1;
        } else {
            failures.push(format!("{name}: {why}"));
        }
    };

    // Whole bodies equal: single objects, errors, refusals.
    for name in [
        "get-pod",
        "get-node",
        "get-configmap",
        "get-secret",
        "get-deployment",
        "err-404",
        "err-400-selector",
        "err-410-list-exact",
        "pom-get-pod",
        "pom-get-pod-json",
        "widgets-as-protobuf",
    ] {
        let (want, got) = replay(server.addr, &x, name).await;
        let body_ok = if name == "widgets-as-protobuf" {
            // Same Status but for the media types named: listwatch does not name YAML,
            // which it does not serve (docs/protobuf.md).
            let (_, raw) = unwrap(&got.body);
            field(&raw, 4) == b"NotAcceptable"
                && fields(&raw).iter().any(|f| f.0 == 6 && f.3 == 406)
        } else if name.ends_with("-json") {
            let g: Value = serde_json::from_slice(&got.body).expect("json");
            let w: Value = serde_json::from_slice(&want.body).expect("json");
            g == w
        } else {
            got.body == want.body
        };
        check(
            name,
            got.status == want.status
                && got.header("content-type") == Some(&want.content_type)
                && body_ok,
            format!(
                "{} {:?} ({} bytes), want {} {:?} ({} bytes)",
                got.status,
                got.header("content-type"),
                got.body.len(),
                want.status,
                want.content_type,
                want.body.len()
            ),
        );
    }

    // Lists: the same envelope and items, byte for byte; the list's own resourceVersion
    // (and a continue token, which carries it) is the store's current one.
    for name in [
        "list-pods-page1",
        "list-pods-all",
        "list-nodes",
        "list-secrets",
        "list-pods-q",
        "pom-list-pods",
    ] {
        let (want, got) = replay(server.addr, &x, name).await;
        assert_eq!(got.status, 200, "{name}");
        assert_eq!(
            got.header("content-type"),
            Some(want.content_type.as_str()),
            "{name}"
        );
        let (gt, gm, gi) = list_items(&got.body);
        let (wt, wm, wi) = list_items(&want.body);
        let differing: Vec<&String> = wi
            .iter()
            .filter(|(k, v)| gi.get(*k) != Some(v))
            .map(|(k, _)| k)
            .collect();
        check(
            name,
            gt == wt
                && gi.len() == wi.len()
                && differing.is_empty()
                && field(&gm, 1) == field(&wm, 1),
            format!(
                "{} items, want {}; differing: {differing:?}",
                gi.len(),
                wi.len()
            ),
        );
        if name == "list-pods-page1" {
            // Page 2 with the token this listwatch gave: the next five, as kube-apiserver's.
            let token = String::from_utf8(field(&gm, 3)).expect("continue token");
            assert!(!token.is_empty(), "a limited list has a continue token");
            let remaining = fields(&gm).iter().find(|f| f.0 == 4).map(|f| f.3);
            let want_remaining = fields(&wm).iter().find(|f| f.0 == 4).map(|f| f.3);
            check(
                "list-pods-page1 remainingItemCount",
                remaining == want_remaining,
                format!("{remaining:?}, want {want_remaining:?}"),
            );
            let page2 = &x["list-pods-page2"];
            let path = format!("/api/v1/namespaces/wl-1/pods?limit=5&continue={token}");
            let got =
                listwatch_testkit::get_with(server.addr, &path, &[("Accept", &page2.accept)]).await;
            let (_, _, gi) = list_items(&got.body);
            let (_, _, wi) = list_items(&page2.body);
            check(
                "list-pods-page2",
                gi == wi,
                format!("{:?} vs {:?}", gi.keys(), wi.keys()),
            );
        }
    }

    // gzip: the same list, compressed.
    {
        let want = &x["list-pods-all-gzip"];
        let got = listwatch_testkit::get_with(
            server.addr,
            &want.path,
            &[("Accept", &want.accept), ("Accept-Encoding", "gzip")],
        )
        .await;
        let plain = listwatch_testkit::gunzip(&got.body);
        let want_plain = listwatch_testkit::gunzip(&want.body);
        let (_, _, gi) = list_items(&plain);
        let (_, _, wi) = list_items(&want_plain);
        check(
            "list-pods-all-gzip",
            got.header("content-encoding") == Some("gzip") && gi == wi,
            format!("{} items vs {}", gi.len(), wi.len()),
        );
    }

    // Watch-list: the same initial events, then the initial-events-end bookmark (at the
    // store's current resourceVersion).
    for name in ["watchlist-pods", "pom-watch-pods"] {
        let (want, got) = replay(server.addr, &x, name).await;
        assert_eq!(
            got.header("content-type"),
            Some(want.content_type.as_str()),
            "{name}"
        );
        let g = frames(&got.body);
        let w = frames(&want.body);
        let events = |f: &[(String, Vec<u8>)]| -> BTreeMap<String, Vec<u8>> {
            f.iter()
                .filter(|(k, _)| k == "ADDED")
                .map(|(_, env)| (object_name(&unwrap(env).1), env.clone()))
                .collect()
        };
        let (ge, we) = (events(&g), events(&w));
        let last_is_end = |f: &[(String, Vec<u8>)]| {
            f.last().is_some_and(|(k, env)| {
                k == "BOOKMARK" && {
                    let md = field(&unwrap(env).1, 1);
                    // annotations (field 12): k8s.io/initial-events-end=true
                    fields(&md).iter().any(|f| {
                        f.0 == 12
                            && field(&f.2, 1) == b"k8s.io/initial-events-end"
                            && field(&f.2, 2) == b"true"
                    })
                }
            })
        };
        let bookmark_shape = |f: &[(String, Vec<u8>)]| {
            f.last().map(|(_, env)| {
                let (tm, raw) = unwrap(env);
                let mut md = field(&raw, 1);
                // Without its resourceVersion (field 6), the bookmark object is the same.
                md = fields(&md)
                    .into_iter()
                    .filter(|f| f.0 != 6)
                    .map(|f| f.2)
                    .collect::<Vec<_>>()
                    .concat();
                (tm, md, fields(&raw).len())
            })
        };
        check(
            name,
            ge == we
                && last_is_end(&g)
                && last_is_end(&w)
                && bookmark_shape(&g) == bookmark_shape(&w),
            format!(
                "{} initial events vs {}; end bookmark {} / {}",
                ge.len(),
                we.len(),
                last_is_end(&g),
                last_is_end(&w)
            ),
        );
    }

    // Refusals and fallbacks of negotiation.
    for name in [
        "table-pods-pb",
        "widgets-pb-or-json",
        "list-pods-all-json",
        "pom-list-pods-json",
    ] {
        let (want, got) = replay(server.addr, &x, name).await;
        check(
            name,
            got.status == want.status
                && got.header("content-type") == Some(want.content_type.as_str()),
            format!(
                "{} {:?}, want {} {}",
                got.status,
                got.header("content-type"),
                want.status,
                want.content_type
            ),
        );
    }

    // A watch from a compacted resourceVersion: one ERROR frame with a 410 Expired Status.
    {
        let (want, got) = replay(server.addr, &x, "err-410-watch").await;
        let g = frames(&got.body);
        let w = frames(&want.body);
        let status = |f: &[(String, Vec<u8>)]| {
            f.first().map(|(k, env)| {
                let (tm, raw) = unwrap(env);
                (
                    k.clone(),
                    tm,
                    field(&raw, 2),
                    field(&raw, 4),
                    fields(&raw).iter().find(|f| f.0 == 6).map(|f| f.3),
                )
            })
        };
        check(
            "err-410-watch",
            g.len() == 1 && status(&g) == status(&w),
            format!("{:?} vs {:?}", status(&g), status(&w)),
        );
    }

    listwatch_testkit::assert_no_differences(&failures, same + failures.len(), 25);
}

/// A protobuf body decoded with prost's messages: `k8s\0` + `runtime.Unknown` → raw.
fn pb_unknown(body: &[u8]) -> k8s_pb::apimachinery::pkg::runtime::Unknown {
    use prost::Message;
    let rest = body.strip_prefix(b"k8s\0").expect("k8s\\0 prefix");
    k8s_pb::apimachinery::pkg::runtime::Unknown::decode(rest).expect("runtime.Unknown")
}

/// Watch frames decoded with prost: (type, Pod).
fn pb_events(mut body: &[u8]) -> Vec<(String, k8s_pb::api::core::v1::Pod)> {
    use prost::Message;
    let mut out = Vec::new();
    while body.len() >= 4 {
        let n = u32::from_be_bytes([body[0], body[1], body[2], body[3]]) as usize;
        let ev = k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent::decode(&body[4..4 + n])
            .expect("WatchEvent");
        let kind = ev.r#type().to_string();
        let raw = ev.object.and_then(|o| o.raw).expect("event object");
        let unknown = pb_unknown(&raw);
        let tm = unknown.type_meta.clone().expect("typeMeta");
        assert_eq!((tm.api_version(), tm.kind()), ("v1", "Pod"));
        let pod = k8s_pb::api::core::v1::Pod::decode(unknown.raw()).expect("Pod");
        out.push((kind, pod));
        body = &body[4 + n..];
    }
    assert!(body.is_empty(), "a partial frame");
    out
}

fn rv_of(pod: &k8s_pb::api::core::v1::Pod) -> u64 {
    pod.metadata
        .as_ref()
        .and_then(|m| m.resource_version.as_deref())
        .and_then(|v| v.parse().ok())
        .expect("resourceVersion")
}

/// An informer over protobuf, with a decoder that is not ours (prost, from Kubernetes'
/// .proto files): LIST, watch-list to its initial-events-end bookmark, resume a watch from
/// that bookmark and see a create and a delete; every object read as protobuf carries
/// every field of the JSON form of the same object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protobuf_informer_lists_watches_and_resumes() {
    use prost::Message;
    const PB: &str = "application/vnd.kubernetes.protobuf";
    let s = common::start(300, listwatch_server::ServerConfig::default()).await;
    let get = |path: String, accept: &'static str| async move {
        listwatch_testkit::get_with(s.addr, &path, &[("Accept", accept)]).await
    };

    // LIST: a PodList whose every item, re-read through our schema's protobuf → JSON
    // (checked against kube-apiserver's fixtures), is the JSON item at the same RV.
    let list = get("/api/v1/pods".into(), PB).await;
    assert_eq!(list.status, 200);
    assert_eq!(list.header("content-type"), Some(PB));
    let unknown = pb_unknown(&list.body);
    let tm = unknown.type_meta.clone().expect("typeMeta");
    assert_eq!((tm.api_version(), tm.kind()), ("v1", "PodList"));
    let pods = k8s_pb::api::core::v1::PodList::decode(unknown.raw()).expect("PodList");
    let list_rv: u64 = pods
        .metadata
        .as_ref()
        .and_then(|m| m.resource_version.clone())
        .expect("rv")
        .parse()
        .expect("rv");
    assert_eq!(pods.items.len(), 300);
    let json = get(
        format!("/api/v1/pods?resourceVersion={list_rv}&resourceVersionMatch=Exact"),
        "application/json",
    )
    .await;
    let json: Value = serde_json::from_slice(&json.body).expect("json list");
    let by_name: BTreeMap<String, &Value> = json["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| (i["metadata"]["name"].as_str().expect("name").to_string(), i))
        .collect();
    let schema = listwatch_protobuf::Schema::kubernetes();
    let pod_id = schema.kind("v1", "Pod").expect("Pod");
    let mut reader = listwatch_protobuf::JsonWriter::new(schema);
    for pod in &pods.items {
        let name = pod
            .metadata
            .as_ref()
            .and_then(|m| m.name.clone())
            .expect("name");
        let mut out = Vec::new();
        reader
            .write_message(pod_id, &pod.encode_to_vec(), None, &mut out)
            .expect("protobuf → JSON");
        let got: Value = serde_json::from_slice(&out).expect("json");
        let diff = listwatch_testkit::json_diff(&got, by_name[&name], 5);
        assert!(
            diff.is_empty(),
            "{name} differs from its JSON form:\n{}",
            diff.join("\n")
        );
        // And a few fields read straight off prost's struct.
        let spec = pod.spec.as_ref().expect("spec");
        assert_eq!(
            spec.containers[0].image(),
            by_name[&name]["spec"]["containers"][0]["image"]
                .as_str()
                .expect("image")
        );
        assert_eq!(
            rv_of(pod).to_string(),
            by_name[&name]["metadata"]["resourceVersion"]
                .as_str()
                .expect("rv")
        );
    }

    // Watch-list: 300 ADDED, then the bookmark that ends the initial events.
    let wl = get(
        "/api/v1/pods?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1".into(),
        PB,
    )
    .await;
    assert_eq!(
        wl.header("content-type"),
        Some("application/vnd.kubernetes.protobuf;stream=watch")
    );
    let events = pb_events(&wl.body);
    assert_eq!(events.iter().filter(|(t, _)| t == "ADDED").count(), 300);
    let (kind, bookmark) = events.last().expect("events");
    assert_eq!(kind, "BOOKMARK");
    let annotations = &bookmark.metadata.as_ref().expect("metadata").annotations;
    assert_eq!(
        annotations
            .get("k8s.io/initial-events-end")
            .map(String::as_str),
        Some("true")
    );
    let resume = rv_of(bookmark);
    assert!(resume >= list_rv);

    // Changes after the bookmark, seen by a watch resumed from it.
    let mut created: Value = (*by_name.values().next().expect("a pod")).clone();
    created["metadata"] = serde_json::json!({"name": "informer-new", "namespace": "demo-1"});
    common::answered(
        s.addr,
        "POST",
        "/api/v1/namespaces/demo-1/pods",
        Some(&created.to_string()),
        201,
    )
    .await;
    let victim = pods.items[0].metadata.as_ref().expect("metadata");
    let path = format!(
        "/api/v1/namespaces/{}/pods/{}",
        victim.namespace(),
        victim.name()
    );
    common::answered(s.addr, "DELETE", &path, None, 200).await;
    let watch = get(format!("/api/v1/pods?watch=1&resourceVersion={resume}&allowWatchBookmarks=true&timeoutSeconds=1"), PB).await;
    let events = pb_events(&watch.body);
    let seen: Vec<(String, String, u64)> = events
        .iter()
        .filter(|(t, _)| t != "BOOKMARK")
        .map(|(t, p)| {
            (
                t.clone(),
                p.metadata
                    .as_ref()
                    .map(|m| m.name().to_string())
                    .unwrap_or_default(),
                rv_of(p),
            )
        })
        .collect();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(
        (seen[0].0.as_str(), seen[0].1.as_str()),
        ("ADDED", "informer-new")
    );
    assert_eq!(
        (seen[1].0.as_str(), seen[1].1.as_str()),
        ("DELETED", victim.name())
    );
    assert!(resume < seen[0].2 && seen[0].2 < seen[1].2, "{seen:?}");
    // The same watch in JSON: the same events at the same RVs.
    let watch = get(
        format!("/api/v1/pods?watch=1&resourceVersion={resume}&timeoutSeconds=1"),
        "application/json",
    )
    .await;
    let json_seen: Vec<(String, String, u64)> = String::from_utf8_lossy(&watch.body)
        .lines()
        .map(|l| {
            let e: Value = serde_json::from_str(l).expect("event");
            (
                e["type"].as_str().unwrap_or_default().to_string(),
                e["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                e["object"]["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .parse()
                    .unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(seen, json_seen);
}
