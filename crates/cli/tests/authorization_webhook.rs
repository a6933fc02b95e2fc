//! `--authorization-mode Webhook` between real processes: an upstream listwatch on its
//! embedded store with RBAC answers SubjectAccessReviews; a front following it (`--source
//! apiserver`) asks it about every read it serves, and a second front names it as an
//! authorization webhook in a kubeconfig. Answers are cached for the TTLs given; an upstream
//! that cannot be asked is kube-apiserver's 500, never an allow.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use listwatch_testkit::{Killed, poll_until, send, spawn_server, wait_ready};

const TOKENS: &str =
    "admin-token,admin,1,\"system:masters\"\nalice-token,alice,2\nbob-token,bob,3\n";

fn kubeconfig(dir: &Path, name: &str, server: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
         clusters:\n- name: k\n  cluster:\n    server: {server}\n\
         users:\n- name: admin\n  user:\n    token: admin-token\n\
         contexts:\n- name: c\n  context:\n    cluster: k\n    user: admin\n"
    );
    std::fs::write(&path, text).expect("kubeconfig");
    path
}

/// `GET path` as the user whose token is `token`: the status and body.
async fn get(addr: std::net::SocketAddr, token: &str, path: &str) -> (u16, String) {
    let auth = format!("Bearer {token}");
    let r = send(addr, "GET", path, &[("Authorization", &auth)], None)
        .await
        .expect("an answer");
    (r.status, String::from_utf8_lossy(&r.body).into_owned())
}

async fn create(addr: std::net::SocketAddr, path: &str, body: &str) {
    let r = send(
        addr,
        "POST",
        path,
        &[
            ("Authorization", "Bearer admin-token"),
            ("Content-Type", "application/json"),
        ],
        Some(body.as_bytes()),
    )
    .await
    .expect("an answer");
    assert_eq!(
        r.status,
        201,
        "{path}: {}",
        String::from_utf8_lossy(&r.body)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_served_here_are_authorized_by_the_upstream_s_access_reviews() {
    let dir = std::env::temp_dir().join(format!("listwatch-authz-webhook-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let tokens = dir.join("tokens.csv");
    std::fs::write(&tokens, TOKENS).expect("tokens");
    let bin = env!("CARGO_BIN_EXE_listwatch");
    let (up, up_addr) = spawn_server(
        Command::new(bin)
            .args(["serve", "--listen", "127.0.0.1:0", "--demo-pods", "10"])
            .args(["--authorization-mode", "RBAC", "--token-auth-file"])
            .arg(&tokens),
    );
    let up = Killed(up);
    assert_eq!(wait_ready(up_addr, Duration::from_secs(20)).await, 200);
    create(
        up_addr,
        "/api/v1/namespaces",
        r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team"}}"#,
    )
    .await;
    create(
        up_addr,
        "/apis/rbac.authorization.k8s.io/v1/namespaces/team/roles",
        r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"pod-reader","namespace":"team"},
            "rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["get","list","watch"]}]}"#,
    )
    .await;
    create(
        up_addr,
        "/apis/rbac.authorization.k8s.io/v1/namespaces/team/rolebindings",
        r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"alice-reads","namespace":"team"},
            "roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"pod-reader"},
            "subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"alice"}]}"#,
    )
    .await;

    let upstream = format!("http://{up_addr}");
    let admin = kubeconfig(&dir, "upstream.kubeconfig", &upstream);
    let (front, addr) = spawn_server(
        Command::new(bin)
            .args(["serve", "--listen", "127.0.0.1:0", "--source", "apiserver"])
            .arg("--upstream-kubeconfig")
            .arg(&admin)
            .args(["--authorization-mode", "Webhook", "--token-auth-file"])
            .arg(&tokens)
            .args(["--authorization-webhook-cache-authorized-ttl", "1s"])
            .args(["--authorization-webhook-cache-unauthorized-ttl", "1s"]),
    );
    let _front = Killed(front);
    assert_eq!(wait_ready(addr, Duration::from_secs(30)).await, 200);

    let team_pods = "/api/v1/namespaces/team/pods";
    let (status, body) = get(addr, "alice-token", team_pods).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"PodList\""), "{body}");
    let (status, body) = get(addr, "bob-token", team_pods).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("User \\\"bob\\\" cannot list resource \\\"pods\\\""),
        "{body}"
    );
    let (status, body) = get(addr, "alice-token", "/api/v1/pods").await;
    assert_eq!(
        status, 403,
        "alice may not list every namespace's pods: {body}"
    );
    // A review asked here is answered with the upstream's decision.
    let auth = [
        ("Authorization", "Bearer admin-token"),
        ("Content-Type", "application/json"),
    ];
    let review = br#"{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"alice","resourceAttributes":{"verb":"watch","resource":"pods","namespace":"team"}}}"#;
    let r = send(
        addr,
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        &auth,
        Some(review),
    )
    .await
    .expect("review");
    let v: serde_json::Value = serde_json::from_slice(&r.body).expect("json");
    assert_eq!(
        (r.status, &v["status"]["allowed"]),
        (201, &serde_json::json!(true)),
        "{v}"
    );

    // A front that names the upstream as its webhook in a kubeconfig decides the same.
    let sar = format!("{upstream}/apis/authorization.k8s.io/v1/subjectaccessreviews");
    let webhook = kubeconfig(&dir, "webhook.kubeconfig", &sar);
    let (other, other_addr) = spawn_server(
        Command::new(bin)
            .args(["serve", "--listen", "127.0.0.1:0", "--demo-pods", "3"])
            .args(["--authorization-mode", "Webhook", "--token-auth-file"])
            .arg(&tokens)
            .arg("--authorization-webhook-config-file")
            .arg(&webhook),
    );
    let _other = Killed(other);
    assert_eq!(wait_ready(other_addr, Duration::from_secs(20)).await, 200);
    assert_eq!(get(other_addr, "alice-token", team_pods).await.0, 200);
    assert_eq!(get(other_addr, "bob-token", team_pods).await.0, 403);

    // Access taken away upstream is taken away here once the cached answer expires.
    let r = send(
        up_addr,
        "DELETE",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/team/rolebindings/alice-reads",
        &[("Authorization", "Bearer admin-token")],
        None,
    )
    .await
    .expect("delete");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let status = poll_until(
        Duration::from_secs(10),
        || async { get(addr, "alice-token", team_pods).await.0 },
        |s| *s == 403,
    )
    .await;
    assert_eq!(status, 403, "alice still reads after her binding went");

    // An upstream that cannot be asked: 500, as kube-apiserver answers when its webhook
    // fails — never a read let through.
    drop(up);
    let (status, body) = get(addr, "alice-token", "/api/v1/namespaces/team/configmaps").await;
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("authorization webhook"), "{body}");
}
