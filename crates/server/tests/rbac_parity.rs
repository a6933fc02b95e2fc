//! kube-apiserver 1.36's answers to 3,375 SubjectAccessReviews (`shared/reference/authz/`)
//! over the RBAC objects and pods of the storage corpus: listwatch's chained authorizer
//! (system:masters → Node → RBAC), reading the same objects through the etcd source, must
//! give the same allow/deny for every one.

mod common;

use std::io::BufRead;

use common::etcd::{Etcd, EtcdServer};
use listwatch_etcd::{Decryptor, EtcdConfig, ValueDecoder};
use listwatch_server::rbac::{Attributes, ClusterAuthorizer, ResourceAttributes};
use serde_json::Value;

fn attributes(spec: &Value) -> Attributes {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let groups = spec["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .map(s)
        .collect();
    match spec.get("resourceAttributes") {
        Some(r) => Attributes {
            user: s(&spec["user"]),
            groups,
            verb: s(&r["verb"]),
            resource: Some(ResourceAttributes {
                group: s(&r["group"]),
                resource: s(&r["resource"]),
                subresource: s(&r["subresource"]),
                namespace: s(&r["namespace"]),
                name: s(&r["name"]),
            }),
            path: String::new(),
        },
        None => Attributes {
            user: s(&spec["user"]),
            groups,
            verb: s(&spec["nonResourceAttributes"]["verb"]),
            resource: None,
            path: s(&spec["nonResourceAttributes"]["path"]),
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_decision_matches_kube_apiserver() {
    let etcd = Etcd::restore(&listwatch_testkit::reference("storage/etcd-snapshot.db.gz")).await;
    let decryptor = Decryptor::from_file(&listwatch_testkit::reference(
        "storage/encryption-config.yaml",
    ))
    .expect("encryption config");
    let server = EtcdServer::start_with(EtcdConfig {
        endpoints: etcd.endpoints(),
        decoder: ValueDecoder::new(Some(decryptor)),
        ..EtcdConfig::default()
    })
    .await;
    let authz = ClusterAuthorizer::new(server.source.registry());
    let file = listwatch_testkit::reference("authz/subjectaccessreviews.jsonl.gz");
    let reader = std::io::BufReader::new(flate2::read::GzDecoder::new(
        std::fs::File::open(file).expect("reviews"),
    ));
    let (mut equal, mut total, mut allowed, mut same_reason) = (0, 0, 0, 0);
    let mut failures = Vec::new();
    for line in reader.lines() {
        let o: Value = serde_json::from_str(&line.expect("line")).expect("json");
        let want = o["status"]["allowed"].as_bool().unwrap_or(false);
        let got = authz.decide(&attributes(&o["spec"]));
        total += 1;
        if got.allowed == want {
            equal += 1;
            allowed += usize::from(want);
            // Reasons name the first binding found; kube-apiserver visits its informer's
            // bindings in map order, so only the wording is comparable, not which binding.
            let reason = o["status"]["reason"].as_str().unwrap_or_default();
            if want && reason.starts_with("RBAC:") {
                assert!(
                    got.reason.starts_with("RBAC: allowed by "),
                    "reason {:?}",
                    got.reason
                );
                same_reason += usize::from(got.reason == reason);
            }
        } else if failures.len() < 30 {
            failures.push(format!("{} → want {want}, got {}", o["spec"], got.allowed));
        }
    }
    eprintln!(
        "{equal} of {total} decisions equal ({allowed} allowed; {same_reason} RBAC reasons word for word)"
    );
    assert!(
        failures.is_empty(),
        "{} differ:\n{}",
        total - equal,
        failures.join("\n")
    );
    assert_eq!(total, 3375);
}
