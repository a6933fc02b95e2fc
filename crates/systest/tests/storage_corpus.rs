//! What a real kube-apiserver 1.36 wrote to etcd with default settings
//! (`shared/reference/storage/`: protobuf values, secrets encrypted with aescbc, aesgcm and
//! secretbox, JSON custom resources), restored from its snapshot with every revision, then
//! served by listwatch: every view of an object must read as the JSON kube-apiserver served
//! for it (member order aside; 655 of 655, the one Lease kube-apiserver renewed after the
//! capture apart from that renewal).

mod common;

use std::collections::BTreeMap;
use std::io::BufRead;

use common::etcd::serve_corpus;
use listwatch_core::builtin_resources;
use serde_json::Value;

struct View {
    key: String,
    resource: (String, String, String),
    path: String,
    json: Value,
}

fn corpus() -> Vec<View> {
    let file = listwatch_testkit::reference("storage/etcd-1.36-default.jsonl.gz");
    let gz = std::fs::File::open(file).expect("corpus");
    let reader = std::io::BufReader::new(flate2::read::GzDecoder::new(gz));
    let mut views = Vec::new();
    for line in reader.lines() {
        let line = line.expect("line");
        let o: Value = serde_json::from_str(&line).expect("corpus line");
        for s in o["served"].as_array().into_iter().flatten() {
            let g = |k: &str| s[k].as_str().unwrap_or_default().to_string();
            views.push(View {
                key: o["key"].as_str().unwrap_or_default().to_string(),
                resource: (g("group"), g("version"), g("resource")),
                path: g("api_path"),
                json: s["json"].clone(),
            });
        }
    }
    views
}

/// What kubectl prints with ages masked and columns re-spaced (widths follow the ages).
fn normalized(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.starts_with("$ "))
        .map(|l| {
            l.split_whitespace()
                .map(|w| {
                    let t = w.trim_start_matches('(');
                    let age = !t.is_empty()
                        && t.chars().next().is_some_and(|c| c.is_ascii_digit())
                        && t.chars().all(|c| c.is_ascii_digit() || "smhdy".contains(c))
                        && t.chars().last().is_some_and(|c| "smhdy".contains(c));
                    if age { "<age>" } else { w }
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// kubectl 1.32 against listwatch over the corpus prints what it printed against
/// kube-apiserver (`storage/kubectl-views/`), ages aside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reads_the_corpus_as_it_read_kube_apiserver() {
    common::require("kubectl");
    let (_etcd, server) = serve_corpus().await;
    let dir = listwatch_testkit::reference("storage/kubectl-views");
    let mut compared = 0;
    let mut failures = Vec::new();
    for view in [
        "get_all_corpus-a.txt",
        "get_nodes_wide.txt",
        "get_deployments_-A_wide.txt",
        "get_services_-A_wide.txt",
        "get_events_-A.txt",
        "get_namespaces.txt",
        "get_jobs_-A.txt",
        "get_cronjobs_-A.txt",
        "get_hpa_-A.txt",
        "get_widgets_-A.txt",
        "get_widgets_-A_wide.txt",
        "get_pods_corpus-a_wide.txt",
        "get_pvc+pv_-A.txt",
        "get_csr.txt",
        "get_endpointslices_-A.txt",
        "get_ingresses_-A.txt",
        "get_leases_-A.txt",
        "get_storageclasses.txt",
        "get_clusterroles.txt",
        "get_crds.txt",
    ] {
        let want = std::fs::read_to_string(dir.join(view)).expect("view");
        let cmd = want
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("$ kubectl "))
            .expect("command line");
        let out = tokio::process::Command::new("kubectl")
            .arg("--server")
            .arg(format!("http://{}", server.addr))
            .args(cmd.split_whitespace())
            .output()
            .await
            .expect("kubectl");
        let got = String::from_utf8_lossy(&out.stdout);
        if normalized(&got) == normalized(&want) {
            compared += 1;
        } else {
            failures.push(format!("kubectl {cmd}\n--- got\n{got}--- want\n{want}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(compared, 20);

    // `kubectl api-resources -o wide`: every row but VERBS (listwatch advertises what it
    // serves: no patch or deletecollection) equals kube-apiserver's; rows it lacks are the
    // create-only review APIs, bindings and componentstatuses.
    let out = tokio::process::Command::new("kubectl")
        .arg("--server")
        .arg(format!("http://{}", server.addr))
        .args(["api-resources", "-o", "wide"])
        .output()
        .await
        .expect("kubectl");
    let rows = |text: &str| -> BTreeMap<(String, String), Vec<String>> {
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with("$ ")).collect();
        let header = lines[0];
        let cols = [
            "NAME",
            "SHORTNAMES",
            "APIVERSION",
            "NAMESPACED",
            "KIND",
            "VERBS",
            "CATEGORIES",
        ];
        let pos: Vec<usize> = cols
            .iter()
            .map(|c| header.find(c).expect("column"))
            .collect();
        lines[1..]
            .iter()
            .map(|l| {
                let cell = |i: usize| {
                    let end = pos.get(i + 1).copied().unwrap_or(l.len()).min(l.len());
                    l.get(pos[i].min(end)..end).unwrap_or("").trim().to_string()
                };
                let v: Vec<String> = (0..cols.len()).filter(|i| *i != 5).map(cell).collect();
                ((cell(0), cell(2)), v)
            })
            .collect()
    };
    let ours = rows(&String::from_utf8_lossy(&out.stdout));
    let theirs = rows(&std::fs::read_to_string(dir.join("api-resources_wide.txt")).expect("view"));
    for (k, v) in &ours {
        assert_eq!(Some(v), theirs.get(k), "api-resources row {k:?}");
    }
    let missing: Vec<&str> = theirs
        .keys()
        .filter(|k| !ours.contains_key(*k))
        .map(|k| k.0.as_str())
        .collect();
    for m in &missing {
        assert!(
            m.ends_with("reviews") || ["bindings", "componentstatuses"].contains(m),
            "api-resources lacks {m}"
        );
    }
    assert!(ours.len() >= 60, "only {} api-resources rows", ours.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_builtin_view_reads_as_kube_apiserver_served_it() {
    let (_etcd, server) = serve_corpus().await;
    // Built-in resources and the views of them (events.k8s.io/v1, autoscaling/v1).
    let mut served: Vec<(String, String, String)> = builtin_resources()
        .iter()
        .chain(&listwatch_sources::views::view_resources())
        .map(|r| (r.group.clone(), r.version.clone(), r.resource.clone()))
        .collect();
    // The corpus's CRDs (widgets v1 + v1beta1, clusterthings v1) are followed live: wait
    // until discovery serves them.
    for (g, v, r) in [
        ("example.com", "v1", "widgets"),
        ("example.com", "v1beta1", "widgets"),
        ("example.com", "v1", "clusterthings"),
    ] {
        let path = format!("/apis/{g}/{v}/{r}");
        let mut ok = false;
        for _ in 0..100 {
            if common::get(server.addr, &path).await.status == 200 {
                ok = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert!(ok, "{path} not served from its CRD");
        served.push((g.into(), v.into(), r.into()));
    }
    let views = corpus();
    assert!(views.len() > 600, "corpus has {} views", views.len());
    let mut equal = 0;
    let mut types = BTreeMap::new();
    let mut failures = Vec::new();
    let mut not_served = BTreeMap::new();
    let mut changed_after_capture = Vec::new();
    let mut crds = Vec::new();
    for v in &views {
        if !served.contains(&v.resource) {
            *not_served
                .entry(format!(
                    "{}/{}/{}",
                    v.resource.0, v.resource.1, v.resource.2
                ))
                .or_insert(0) += 1;
            continue;
        }
        let r = common::get(server.addr, &v.path).await;
        if r.status != 200 {
            failures.push(format!(
                "{} ({}): HTTP {} {}",
                v.path, v.key, r.status, r.body
            ));
            continue;
        }
        let mut got: Value = serde_json::from_str(&r.body).expect("JSON body");
        let rv = |j: &Value| {
            j["metadata"]["resourceVersion"]
                .as_str()
                .map(str::to_string)
        };
        if rv(&got) != rv(&v.json) {
            // Written again after kube-apiserver served the captured JSON: its own lease,
            // renewed once more before the snapshot (whose compaction keeps no older
            // revision). Compared apart from what a renewal writes.
            changed_after_capture.push(v.key.clone());
            as_captured_renewal(&mut got, &v.json);
        }
        let diff = listwatch_testkit::json_diff(&got, &v.json, 6);
        if v.resource.2 == "customresourcedefinitions" {
            // Stored as apiextensions v1beta1 JSON, served as v1 (crates/etcd/src/convert.rs).
            crds.push(v.key.clone());
        }
        if diff.is_empty() {
            equal += 1;
            *types.entry(v.resource.2.clone()).or_insert(0) += 1;
        } else {
            failures.push(format!(
                "{} ({}):\n    {}",
                v.path,
                v.key,
                diff.join("\n    ")
            ));
        }
    }
    eprintln!(
        "{equal} of {} views equal, {} resource types; renewed after the capture (equal apart from the renewal): {changed_after_capture:?}; CRDs among them (v1beta1 storage): {}; not served: {not_served:?}",
        views.len(),
        types.len(),
        crds.len()
    );
    assert!(
        changed_after_capture
            .iter()
            .all(|k| k.starts_with("/registry/leases/"))
            && changed_after_capture.len() <= 2,
        "only kube-apiserver's own leases may differ in resourceVersion: {changed_after_capture:?}"
    );
    assert_eq!(crds.len(), 2, "the corpus's two CRDs");
    // Every value of every followed resource was readable (secrets in all four encryption
    // phases included): nothing counted as skipped.
    let metrics = common::get(server.addr, "/metrics").await.body;
    let skipped: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("listwatch_source_values_skipped{"))
        .collect();
    assert!(skipped.is_empty(), "values skipped: {skipped:?}");
    assert!(
        failures.is_empty(),
        "{} views differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        types.len() >= 50,
        "only {} resource types compared",
        types.len()
    );
    // Every view of every stored object, events.k8s.io/v1 and autoscaling/v1 included.
    assert!(not_served.is_empty(), "not served: {not_served:?}");
    assert_eq!((equal, views.len()), (655, 655));
}

/// `got` with what a Lease renewal rewrites (`resourceVersion`, `spec.renewTime`, each
/// managed-fields entry's `time`) taken from the captured JSON.
fn as_captured_renewal(got: &mut Value, captured: &Value) {
    got["metadata"]["resourceVersion"] = captured["metadata"]["resourceVersion"].clone();
    if let Some(t) = captured["spec"].get("renewTime") {
        got["spec"]["renewTime"] = t.clone();
    }
    let times: Vec<Value> = captured["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| m["time"].clone())
        .collect();
    if let Some(fields) = got["metadata"]["managedFields"].as_array_mut() {
        for (m, t) in fields.iter_mut().zip(times) {
            if !t.is_null() {
                m["time"] = t;
            }
        }
    }
}

/// Deleting a CRD in etcd: its resources leave discovery and answer 404, and their open
/// watches end (drained over the grace period), as kube-apiserver does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_crd_stops_serving_its_resources() {
    let (etcd, server) = serve_corpus().await;
    let mut watch = common::stream_lines(
        server.addr,
        "/apis/example.com/v1/widgets?watch=1&resourceVersion=0",
    )
    .await;
    for _ in 0..5 {
        common::next_line(&mut watch, 5)
            .await
            .expect("initial widget event");
    }
    let discovery = common::get(server.addr, "/apis/example.com/v1").await;
    assert!(discovery.body.contains("\"widgets\""), "{}", discovery.body);
    etcd.client()
        .await
        .delete(
            "/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.example.com",
            None,
        )
        .await
        .expect("delete CRD");
    let gone = common::get_until(
        server.addr,
        "/apis/example.com/v1/widgets",
        std::time::Duration::from_secs(10),
        404,
    )
    .await;
    assert_eq!(
        gone.status, 404,
        "widgets still served after its CRD was deleted"
    );
    let d = common::get(server.addr, "/apis/example.com/v1").await;
    assert!(
        !d.body.contains("\"widgets\""),
        "discovery still lists widgets: {}",
        d.body
    );
    assert!(
        d.body.contains("\"clusterthings\""),
        "the other CRD stays: {}",
        d.body
    );
    // The open watch ends within the drain period (plus slack).
    let secs = listwatch_etcd::CRD_DRAIN.as_secs() + 5;
    assert!(
        listwatch_testkit::ends_within(&mut watch, secs).await,
        "widget watch still open {secs} s after its CRD was deleted"
    );
}
