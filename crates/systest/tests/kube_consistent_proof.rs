//! Consistent reads through the gateway (`--source apiserver`) of an idle collection in
//! front of a real kube-apiserver 1.36: the cache of a large collection is proven current by
//! a short watch's bookmark (a small one by its metadata alone), not by a full LIST. Each burst of
//! consistent reads costs the upstream at most a quarter of one full LIST of the
//! collection, and every read contains every write acknowledged before it.

use std::time::Duration;

use listwatch_testkit::TempDir;
use listwatch_testkit::kube::KubeRun;
use listwatch_testkit::workload::Workload;

listwatch_testkit::kube_tests!(consistent_reads_of_an_idle_collection_are_proven_by_a_bookmark);

/// Pods in the idle collection.
const PODS: usize = 1_000;
/// Bursts of consistent reads, and reads in each.
const BURSTS: usize = 4;
const READS: usize = 8;

/// A pod as a workload's would look: labels, an owner, a container with env and resources.
fn pod(i: usize) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("web-{i}"), "namespace": "default",
            "labels": {"app": "web", "tier": "frontend", "pod-template-hash": "5d8f7c9b4"}},
        "spec": {"containers": [{"name": "web", "image": "registry.example/web:1.2.3",
            "ports": [{"containerPort": 8080, "name": "http"}],
            "env": [{"name": "MODE", "value": "production"}, {"name": "LOG_LEVEL", "value": "info"}],
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
            "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}}}]}
    })
}

/// The counter `name` in a `/metrics` text.
fn counter(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

fn consistent_reads_of_an_idle_collection_are_proven_by_a_bookmark(
    KubeRun(_, _, cluster): KubeRun,
) {
    cluster.apply(&Workload::new().service_accounts("default", &["default"]));
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List",
        "items": (0..PODS).map(pod).collect::<Vec<_>>()});
    cluster.kubectl_ok_with(
        &["create", "-f", "-", "-o", "name"],
        Some(&list.to_string()),
    );

    let dir = TempDir::new("proof");
    let lw = cluster.gateway(&dir, "serving", &[]);
    let upstream = cluster.url();
    let ca = cluster.file("ca.pem");
    let admin = format!("Authorization: Bearer {}", cluster.admin_token);
    // One full LIST of the collection as the upstream serves it (JSON, as the follower
    // and the old proof read it).
    let full = std::process::Command::new("curl")
        .args(["-s", "--cacert"])
        .arg(&ca)
        .args(["-H", &admin])
        .arg(format!("{upstream}/api/v1/namespaces/default/pods"))
        .output()
        .expect("curl");
    let full_bytes = full.stdout.len() as u64;
    assert!(full_bytes > 1_000_000, "{PODS} pods in {full_bytes} bytes");
    let metrics =
        || String::from_utf8_lossy(&lw.curl(&ca, &["-H", &admin, "/metrics"]).stdout).into_owned();
    let me = cluster.kubeconfig_for(
        &dir.join("admin.kubeconfig"),
        &lw.url(),
        &cluster.admin_token,
    );

    let before = metrics();
    for burst in 0..BURSTS {
        // An acknowledged write of a pod through the gateway, then a write elsewhere, so
        // the upstream's RV moves past anything the pods stream will deliver.
        let name = format!("acked-{burst}");
        let out = cluster.kubectl_with(
            &me,
            &[
                "run",
                &name,
                "-n",
                "default",
                "--image",
                "registry.example/x:1",
                "--restart",
                "Never",
            ],
            None,
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(300));
        cluster.kubectl_ok(&[
            "create",
            "configmap",
            &format!("moves-rv-{burst}"),
            "-n",
            "default",
        ]);
        let reads: Vec<_> = (0..READS)
            .map(|_| {
                std::process::Command::new("curl")
                    .args(["-s", "--cacert"])
                    .arg(&ca)
                    .args(["-H", &admin])
                    .arg(format!("{}/api/v1/namespaces/default/pods", lw.url()))
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .expect("curl")
            })
            .collect();
        for r in reads {
            let out = r.wait_with_output().expect("read");
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a PodList");
            let names: Vec<&str> = v["items"]
                .as_array()
                .expect("items")
                .iter()
                .filter_map(|p| p["metadata"]["name"].as_str())
                .collect();
            assert_eq!(names.len(), PODS + burst + 1, "burst {burst}");
            for b in 0..=burst {
                assert!(
                    names.contains(&format!("acked-{b}").as_str()),
                    "burst {burst} lacks acked-{b}"
                );
            }
        }
    }
    let after = metrics();
    let delta = |name: &str| counter(&after, name) - counter(&before, name);
    let (probes, by_stream, lists, bytes) = (
        delta("listwatch_upstream_consistent_probes_total"),
        delta("listwatch_upstream_consistent_by_stream_total"),
        delta("listwatch_upstream_proof_lists_total"),
        delta("listwatch_upstream_proof_bytes_total"),
    );
    let (watches, by_bookmark) = (
        delta("listwatch_upstream_proof_watches_total"),
        delta("listwatch_upstream_consistent_by_bookmark_total"),
    );
    let per_burst = bytes / BURSTS as u64;
    eprintln!(
        "{PODS} pods: full JSON LIST {full_bytes} B; {BURSTS} bursts of {READS} consistent reads: {probes} probes, {by_stream} caught up by the stream, {watches} proof watches ({by_bookmark} proved by a bookmark), {lists} proof LISTs; {bytes} B read ({per_burst} B a burst, {:.3} of a full LIST)",
        per_burst as f64 / full_bytes as f64
    );
    assert!(
        probes >= BURSTS as u64,
        "every burst asked the upstream for its RV"
    );
    // Each burst's first probe finds the pods stream idle short of the ConfigMap's RV;
    // with more than a page of pods the proof is a short watch's bookmark, never a LIST.
    assert!(
        by_bookmark >= 1 && watches >= by_bookmark,
        "{watches} proof watches, {by_bookmark} proved by a bookmark"
    );
    assert_eq!(lists, 0, "a proof fell back to a metadata LIST");
    assert!(
        per_burst * 4 <= full_bytes,
        "{per_burst} B a burst against a full LIST of {full_bytes} B"
    );

    // A collection of a page or less (services: `kubernetes` alone) is compared item by
    // item instead: one metadata LIST, quicker than waiting for a bookmark.
    cluster.kubectl_ok(&["create", "configmap", "moves-rv-last", "-n", "default"]);
    let services = lw.curl(&ca, &["-H", &admin, "/api/v1/services"]);
    assert!(
        String::from_utf8_lossy(&services.stdout).contains("\"name\":\"kubernetes\""),
        "{}",
        String::from_utf8_lossy(&services.stdout)
    );
    let last = metrics();
    let lists_now = |m: &str| counter(m, "listwatch_upstream_proof_lists_total");
    assert_eq!(
        lists_now(&last) - lists_now(&after),
        1,
        "the services read was proven by one metadata LIST"
    );
}
