//! The etcd source reads a custom resource with the schema defaults of its CRD as of the
//! read's revision: a CRD's default changed in etcd, then at once (in the same process,
//! microseconds later) a consistent read of a custom resource that leaves the field out
//! (GET, LIST, watch-list: no `resourceVersion`) is served with the new default, never the
//! old one. The CRD's follower and reconciler run apart from the custom resource's
//! follower, which can reach etcd's revision first (docs/e2e.md).

mod common;

use std::time::{Duration, Instant};

use common::etcd::{Etcd, EtcdServer};
use serde_json::{Value, json};

/// Rounds of "change the default, read at once".
const ROUNDS: usize = 60;

const CRD_KEY: &str =
    "/registry/apiextensions.k8s.io/customresourcedefinitions/gadgets.crd-race.example.com";
const CR_KEY: &str = "/registry/crd-race.example.com/gadgets/default/g";
const OBJECTS: &str = "/apis/crd-race.example.com/v1/namespaces/default/gadgets";

/// The CRD as kube-apiserver stores it once established, `spec.mode` defaulting to `mode`.
fn crd(mode: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.crd-race.example.com", "uid": "0b9e3c1a-0000-4000-8000-000000000001",
            "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"group": "crd-race.example.com", "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "mode": {"type": "string", "default": mode}}}}}}}]},
        "status": {"acceptedNames": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "NoConflicts", "message": "no conflicts found"},
                {"type": "Established", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"}],
            "storedVersions": ["v1"]}
    })
}

/// A consistent read of `g`: its path, and where `g` is in its answer.
#[derive(Clone, Copy, Debug)]
enum Read {
    Get,
    List,
    WatchList,
}

impl Read {
    const ALL: [Read; 3] = [Read::Get, Read::List, Read::WatchList];

    fn path(self) -> String {
        match self {
            Read::Get => format!("{OBJECTS}/g"),
            Read::List => OBJECTS.to_string(),
            Read::WatchList => format!(
                "{OBJECTS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1"
            ),
        }
    }

    /// `spec.mode` of `g` in an answer to this read.
    fn mode(self, body: &[u8]) -> Option<String> {
        let object = match self {
            Read::Get => serde_json::from_slice::<Value>(body).ok()?,
            Read::List => serde_json::from_slice::<Value>(body).ok()?["items"]
                .as_array()?
                .first()?
                .clone(),
            // The first event: `g` as an ADDED initial event.
            Read::WatchList => {
                let first = body.split(|b| *b == b'\n').next()?;
                serde_json::from_slice::<Value>(first).ok()?["object"].clone()
            }
        };
        object["spec"]["mode"].as_str().map(str::to_string)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consistent_reads_of_custom_resources_follow_their_crd_s_new_defaults() {
    let etcd = Etcd::start(1).await;
    let mut kv = etcd.client().await;
    kv.put(CRD_KEY, crd("mode-initial").to_string(), None)
        .await
        .expect("put CRD");
    let cr = json!({"apiVersion": "crd-race.example.com/v1", "kind": "Gadget",
        "metadata": {"name": "g", "namespace": "default", "uid": "0b9e3c1a-0000-4000-8000-000000000002",
            "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": {}});
    kv.put(CR_KEY, cr.to_string(), None).await.expect("put CR");
    let server = EtcdServer::start(etcd.endpoints(), Duration::from_secs(5)).await;
    let read = |path: String| async move {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let r = listwatch_testkit::get_with(server.addr, &path, &[]).await;
            // Refused while a cache (re)loads (`Retry-After: 1`): clients read again.
            if r.status != 429 && r.status != 404 {
                return r;
            }
            assert!(Instant::now() < deadline, "{path}: {} for 30 s", r.status);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let first = read(Read::Get.path()).await;
    assert_eq!(Read::Get.mode(&first.body).as_deref(), Some("mode-initial"));

    let mut stale = Vec::new();
    for round in 0..ROUNDS {
        let r = Read::ALL[round % Read::ALL.len()];
        let mode = format!("mode-{round}");
        kv.put(CRD_KEY, crd(&mode).to_string(), None)
            .await
            .expect("put CRD");
        let answer = read(r.path()).await;
        assert_eq!(
            answer.status,
            200,
            "round {round}: {r:?}: {}",
            String::from_utf8_lossy(&answer.body)
        );
        let got = r.mode(&answer.body);
        if got.as_deref() != Some(mode.as_str()) {
            stale.push(format!(
                "round {round}: {r:?} served mode {got:?}, want {mode}"
            ));
        }
    }
    eprintln!("{ROUNDS} rounds: {} stale", stale.len());
    assert!(
        stale.is_empty(),
        "reads served with an older schema's defaults:\n{}",
        stale.join("\n")
    );
}
