//! kube-apiserver 1.36's answers to 3,375 SubjectAccessReviews (`shared/reference/authz/`)
//! over the RBAC objects and pods of the storage corpus: listwatch's chained authorizer
//! (system:masters → Node → RBAC), reading the same objects through the etcd source, must
//! give the same allow/deny for every one, and kube-apiserver's reason for every refusal.

mod common;

use std::io::BufRead;

use common::etcd::serve_corpus;
use listwatch_auth::Attributes;
use listwatch_auth::rbac::ClusterAuthorizer;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_decision_matches_kube_apiserver() {
    let (_etcd, server) = serve_corpus().await;
    let authz = ClusterAuthorizer::new(server.source.registry());
    let file = listwatch_testkit::reference("authz/subjectaccessreviews.jsonl.gz");
    let reader = std::io::BufReader::new(flate2::read::GzDecoder::new(
        std::fs::File::open(file).expect("reviews"),
    ));
    let (mut equal, mut total, mut allowed, mut same_reason) = (0, 0, 0, 0);
    let mut refusal_reasons = 0;
    let mut failures = Vec::new();
    for line in reader.lines() {
        let o: Value = serde_json::from_str(&line.expect("line")).expect("json");
        let want = o["status"]["allowed"].as_bool().unwrap_or(false);
        let got = authz.decide(&Attributes::from_review_spec(&o["spec"]));
        total += 1;
        if got.allowed == want {
            equal += 1;
            allowed += usize::from(want);
            // A refusal's reason is the Node authorizer's (RBAC gives none): word for word.
            if !want {
                let reason = o["status"]["reason"].as_str().unwrap_or_default();
                if got.reason == reason {
                    refusal_reasons += 1;
                } else if failures.len() < 30 {
                    failures.push(format!(
                        "{} → reason {:?}, want {reason:?}",
                        o["spec"], got.reason
                    ));
                }
            }
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
        "{equal} of {total} decisions equal ({allowed} allowed; {same_reason} RBAC reasons and {refusal_reasons} refusal reasons word for word)"
    );
    assert!(
        failures.is_empty(),
        "{} differ:\n{}",
        total - equal,
        failures.join("\n")
    );
    assert_eq!(total, 3375);
    assert_eq!(refusal_reasons, total - allowed);
}

/// Test authentication: `Authorization: Bearer <user>[|<group>,<group>…]`.
struct BearerIsUser;

impl listwatch_auth::Authenticate for BearerIsUser {
    fn authenticate<'a>(
        &'a self,
        request: &'a http::request::Parts,
        _cert_user: Option<&'a listwatch_auth::User>,
    ) -> listwatch_auth::AuthFuture<'a> {
        let user = request
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or(listwatch_core::ApiError::Unauthorized)
            .map(|token| {
                let (name, groups) = token.split_once('|').unwrap_or((token, ""));
                listwatch_auth::User::in_groups(name, groups, ',')
            });
        Box::pin(std::future::ready(user))
    }
}

/// The same decisions over HTTP (`SubjectAccessReview`), `SelfSubjectAccessReview` for the
/// requester, and the read path itself authorized by the cluster's RBAC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reviews_and_reads_over_http_follow_rbac() {
    let (etcd, server) = serve_corpus().await;
    let app = listwatch_server::App::with_cluster_authorization(
        server.source.clone(),
        listwatch_server::ServerConfig::default(),
    );
    let addr = common::serve_authenticated(app, std::sync::Arc::new(BearerIsUser)).await;
    let post = |token: &'static str, path: &'static str, body: String| async move {
        let auth = format!("Bearer {token}");
        listwatch_testkit::send(
            addr,
            "POST",
            path,
            &[
                ("Authorization", auth.as_str()),
                ("Content-Type", "application/json"),
            ],
            Some(body.as_bytes()),
        )
        .await
        .expect("response")
    };
    let sar = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    let file = listwatch_testkit::reference("authz/subjectaccessreviews.jsonl.gz");
    let reader = std::io::BufReader::new(flate2::read::GzDecoder::new(
        std::fs::File::open(file).expect("reviews"),
    ));
    let (mut equal, mut total) = (0, 0);
    for line in reader.lines() {
        let o: Value = serde_json::from_str(&line.expect("line")).expect("json");
        let body = serde_json::json!({"kind": "SubjectAccessReview", "apiVersion": "authorization.k8s.io/v1", "spec": o["spec"]});
        let r = post("kube-admin|system:masters", sar, body.to_string()).await;
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        let got: Value = serde_json::from_slice(&r.body).expect("review");
        total += 1;
        equal += usize::from(got["status"]["allowed"] == o["status"]["allowed"]);
    }
    assert_eq!((equal, total), (3375, 3375), "decisions over HTTP");

    // Who may not create reviews is told so.
    let body = serde_json::json!({"spec": {"user": "bob", "resourceAttributes": {"verb": "get", "resource": "pods"}}});
    assert_eq!(post("nobody", sar, body.to_string()).await.status, 403);

    // kubectl auth can-i: a SelfSubjectAccessReview for the requester.
    let can_i = |ns: &'static str| {
        serde_json::json!({"spec": {"resourceAttributes": {"verb": "get", "resource": "pods", "namespace": ns}}}).to_string()
    };
    let ssar = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    let yes: Value = serde_json::from_slice(
        &post("alice|system:authenticated", ssar, can_i("team-a"))
            .await
            .body,
    )
    .expect("json");
    let no: Value = serde_json::from_slice(
        &post("alice|system:authenticated", ssar, can_i("team-b"))
            .await
            .body,
    )
    .expect("json");
    assert_eq!(
        (
            yes["status"]["allowed"].as_bool(),
            no["status"]["allowed"].as_bool()
        ),
        (Some(true), Some(false))
    );

    // kubectl posts its review as protobuf: the same answer (the body is what kubectl
    // sends; our encoder writes kube-apiserver's exact bytes for every type).
    let pb_review = |ns: &str| {
        let json = serde_json::json!({"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1", "metadata": {}, "spec": {"resourceAttributes": {"verb": "get", "resource": "pods", "namespace": ns}}});
        listwatch_protobuf::ProtoEncoder::new(listwatch_protobuf::Schema::kubernetes())
            .storage_value(json.to_string().as_bytes())
            .expect("encode review")
    };
    for (ns, allowed) in [("team-a", true), ("team-b", false)] {
        let r = listwatch_testkit::send(
            addr,
            "POST",
            ssar,
            &[
                ("Authorization", "Bearer alice|system:authenticated"),
                ("Content-Type", "application/vnd.kubernetes.protobuf"),
            ],
            Some(&pb_review(ns)),
        )
        .await
        .expect("response");
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        let got: Value = serde_json::from_slice(&r.body).expect("json answer");
        assert_eq!(got["status"]["allowed"].as_bool(), Some(allowed), "{ns}");
    }

    // The read path: alice lists pods in team-a, and is refused in team-b with
    // kube-apiserver's message.
    let get = |path: &'static str| async move {
        listwatch_testkit::get_with(
            addr,
            path,
            &[("Authorization", "Bearer alice|system:authenticated")],
        )
        .await
    };
    assert_eq!(get("/api/v1/namespaces/team-a/pods").await.status, 200);
    let denied = get("/api/v1/namespaces/team-b/pods").await;
    assert_eq!(denied.status, 403);
    let status: Value = serde_json::from_slice(&denied.body).expect("status");
    assert_eq!(
        status["message"],
        "pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"team-b\""
    );

    // A kubelet: node-1 runs the corpus's rich pod (corpus-a), and va-1 is attached to it.
    // The request's field selector reaches the Node authorizer: its pods only with
    // spec.nodeName=node-1 (not through the legacy /watch/ prefix, which kube-apiserver
    // authorizes without selectors), its own Node (by a metadata.name selector too), the
    // config map and service account its pod uses, its VolumeAttachment.
    let as_node = |node: &str, path: &str| {
        let (node, path) = (node.to_string(), path.to_string());
        async move {
            let auth = format!("Bearer system:node:{node}|system:nodes,system:authenticated");
            listwatch_testkit::get_with(addr, &path, &[("Authorization", auth.as_str())])
                .await
                .status
        }
    };
    // node | status | path (kube-root-ca.crt: allowed, its pod mounts it, but absent: no
    // controller-manager ran)
    const NODE_READS: &str = "
        node-1 200 /api/v1/pods?fieldSelector=spec.nodeName%3Dnode-1
        node-1 200 /api/v1/namespaces/corpus-a/pods?fieldSelector=spec.nodeName==node-1
        node-1 200 /api/v1/pods?fieldSelector=spec.nodeName%3Dnode-1&watch=1&timeoutSeconds=1
        node-1 403 /api/v1/watch/pods?fieldSelector=spec.nodeName%3Dnode-1&timeoutSeconds=1
        node-1 403 /api/v1/pods
        node-1 403 /api/v1/pods?fieldSelector=spec.nodeName%3Dnode-2
        node-1 200 /api/v1/namespaces/corpus-a/pods/rich-pod
        node-2 403 /api/v1/namespaces/corpus-a/pods/rich-pod
        node-1 200 /api/v1/nodes/node-1
        node-1 200 /api/v1/nodes?fieldSelector=metadata.name%3Dnode-1
        node-1 403 /api/v1/nodes
        node-1 403 /api/v1/nodes/node-2
        node-1 200 /api/v1/namespaces/corpus-a/configmaps/settings
        node-1 404 /api/v1/namespaces/corpus-a/configmaps/kube-root-ca.crt
        node-1 403 /api/v1/namespaces/corpus-a/configmaps/empty
        node-1 200 /api/v1/namespaces/corpus-a/configmaps?fieldSelector=metadata.name%3Dsettings
        node-1 403 /api/v1/namespaces/team-a/configmaps/allowed-cm
        node-1 200 /api/v1/namespaces/corpus-a/serviceaccounts/default
        node-1 200 /apis/storage.k8s.io/v1/volumeattachments/va-1
        node-2 403 /apis/storage.k8s.io/v1/volumeattachments/va-1
        node-1 200 /apis/storage.k8s.io/v1/csinodes/node-1
    ";
    for line in NODE_READS.lines().filter(|l| !l.trim().is_empty()) {
        let mut cols = line.split_whitespace();
        let (node, code, path) = (
            cols.next().expect("node"),
            cols.next()
                .and_then(|c| c.parse::<u16>().ok())
                .expect("status"),
            cols.next().expect("path"),
        );
        assert_eq!(as_node(node, path).await, code, "{node}: GET {path}");
    }

    // Delete the RoleBinding in etcd: as soon as the cache has the deletion, alice is denied.
    etcd.client()
        .await
        .delete("/registry/rolebindings/team-a/alice-pods", None)
        .await
        .expect("delete binding");
    let code = common::poll_until(
        std::time::Duration::from_secs(10),
        || async { get("/api/v1/namespaces/team-a/pods").await.status },
        |c| *c == 403,
    )
    .await;
    assert_eq!(code, 403, "still allowed after the binding was deleted");
}
