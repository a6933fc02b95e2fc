//! listwatch in front of a real kube-apiserver 1.36 (etcd over mutual TLS), started as
//! docs/gateway.md says and with no `--authorization-mode`: the reads it serves from its
//! caches are authorized by the cluster's own rules (the upstream's SubjectAccessReviews),
//! and bearer tokens it cannot verify itself — a service account's, minted by the cluster,
//! with no key file given — are authenticated by the upstream's TokenReviews. kubectl is
//! the client, over TLS (it sends a token only over TLS).

use std::path::PathBuf;

use listwatch_testkit::TempDir;
use listwatch_testkit::kube::KubeRun;
use listwatch_testkit::workload::{Subject, Workload};

listwatch_testkit::kube_tests!(
    in_front_of_a_cluster_reads_follow_the_cluster_s_rbac_and_its_tokens
);

/// Namespaces `alpha` and `beta` (with the `default` service accounts no controller makes
/// here), each with pods and a secret; service accounts `reader` (bound in `alpha` to read
/// pods and secrets) and `nogrant` (nothing), and the token-file user `bob` bound the same
/// way in `beta`.
fn workload() -> Workload {
    Workload::new()
        .namespaces(&["alpha", "beta"])
        .pods("alpha", &["p1", "p2"])
        .pods("beta", &["q1"])
        .secret("alpha", "s", &[("k", "alpha-secret")])
        .secret("beta", "s", &[("k", "beta-secret")])
        .service_accounts("alpha", &["reader", "nogrant"])
        .grant_reads(
            "alpha",
            &["pods", "secrets"],
            Subject::service_account("alpha", "reader"),
        )
        .grant_reads("beta", &["pods", "secrets"], Subject::User("bob"))
}

fn in_front_of_a_cluster_reads_follow_the_cluster_s_rbac_and_its_tokens(
    KubeRun(_, _, cluster): KubeRun,
) {
    cluster.apply(&workload());
    let token = |sa: &str| cluster.service_account_token("alpha", sa);
    let (reader, nogrant) = (token("reader"), token("nogrant"));

    let dir = TempDir::new("kube-auth");
    let tokens = dir.join("tokens.csv");
    std::fs::write(
        &tokens,
        "alice-token,alice,alice-uid\nbob-token,bob,bob-uid\n",
    )
    .expect("tokens");
    // docs/gateway.md's way in, with no authorization mode and no service-account key.
    let lw = cluster.gateway(
        &dir,
        "listwatch",
        &["--token-auth-file".as_ref(), tokens.as_os_str()],
    );
    let server = lw.url();
    let kc = |name: &str, token: &str| -> PathBuf {
        cluster.kubeconfig_for(&dir.join(format!("{name}.kubeconfig")), &server, token)
    };
    let (alice, bob) = (kc("alice", "alice-token"), kc("bob", "bob-token"));
    let (reader, nogrant) = (kc("reader", &reader), kc("nogrant", &nogrant));
    let admin = kc("admin", &cluster.admin_token);
    let bogus = kc("bogus", "not-a-token");

    // No grant, whether listwatch knows the user (token file) or the cluster does (a
    // service account's token): 403 for pods and secrets, in a namespace and across all.
    for (who, kubeconfig) in [("alice", &alice), ("nogrant", &nogrant)] {
        for args in [
            &["get", "pods", "-n", "alpha"][..],
            &["get", "secrets", "-n", "alpha"],
            &["get", "pods", "-A"],
            &["get", "secrets", "-A"],
            &["get", "secret", "s", "-n", "beta", "-o", "yaml"],
        ] {
            let (ok, text) = cluster.kubectl_as(kubeconfig, args);
            assert!(!ok && text.contains("Forbidden"), "{who} {args:?}: {text}");
        }
    }
    // A RoleBinding in one namespace reads that namespace only.
    for (who, kubeconfig, mine, other) in [
        ("reader", &reader, "alpha", "beta"),
        ("bob", &bob, "beta", "alpha"),
    ] {
        let (ok, text) = cluster.kubectl_as(kubeconfig, &["get", "pods", "-n", mine, "-o", "name"]);
        assert!(ok, "{who} pods in {mine}: {text}");
        let want = if mine == "alpha" {
            "pod/p1\npod/p2\n"
        } else {
            "pod/q1\n"
        };
        assert_eq!(text, want, "{who} pods in {mine}");
        let (ok, text) = cluster.kubectl_as(
            kubeconfig,
            &["get", "secret", "s", "-n", mine, "-o", "jsonpath={.data.k}"],
        );
        assert!(ok, "{who} secret in {mine}: {text}");
        for args in [
            &["get", "pods", "-n", other][..],
            &["get", "secrets", "-n", other],
            &["get", "pods", "-A"],
        ] {
            let (ok, text) = cluster.kubectl_as(kubeconfig, args);
            assert!(!ok && text.contains("Forbidden"), "{who} {args:?}: {text}");
        }
    }
    // The cluster's own admin token (unknown to listwatch) is reviewed upstream:
    // system:masters reads everything.
    let (ok, text) = cluster.kubectl_as(&admin, &["get", "pods", "-A", "-o", "name"]);
    assert!(ok && text.lines().count() == 3, "admin: {text}");
    // A token nobody knows is a 401.
    let (ok, text) = cluster.kubectl_as(&bogus, &["get", "pods", "-n", "alpha"]);
    assert!(!ok && text.contains("Unauthorized"), "bogus: {text}");
}
