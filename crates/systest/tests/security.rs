//! TLS with HTTP/2 by ALPN, bearer tokens from kube-apiserver's CSV token file, client
//! certificates (CN = user, O = groups), an ABAC policy file, and the 401/403 `Status`
//! bodies kube-apiserver sends — driven by a raw rustls client, kube-rs and kubectl.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::etcd::TempDir;
use common::tls::{Ca, Https, Leaf, write};
use listwatch_auth::abac::PolicyAuthorizer;
use listwatch_auth::authn::Authenticator;
use listwatch_auth::tls::tls_config;
use listwatch_server::{App, ServeOptions, ServerConfig, serve_with};
use listwatch_sources::demo;

const TOKENS: &str = "# token,user,uid,groups\n\
tok-admin,admin,1,\"system:masters\"\n\
tok-alice,alice,2,\"dev,qa\"\n";

const POLICY: &str = r#"# ABAC, one rule per line
{"apiVersion":"abac.authorization.kubernetes.io/v1beta1","kind":"Policy","spec":{"group":"system:masters","namespace":"*","resource":"*","apiGroup":"*"}}
{"apiVersion":"abac.authorization.kubernetes.io/v1beta1","kind":"Policy","spec":{"user":"alice","namespace":"team-a","resource":"pods","readonly":true}}
{"apiVersion":"abac.authorization.kubernetes.io/v1beta1","kind":"Policy","spec":{"group":"readers-b","namespace":"team-b","resource":"*","apiGroup":"*","readonly":true}}
"#;

/// kube-apiserver 1.36's 401 body, byte for byte (reference transcript 16).
const UNAUTHORIZED: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}"#;

struct Secured {
    addr: std::net::SocketAddr,
    ca: Ca,
    dir: TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Secured {
    /// A client of this server trusting its CA, offering `alpn`, with `cert` if any.
    fn https<'a>(&'a self, alpn: &'a [&'a str], cert: Option<&'a Leaf>) -> Https<'a> {
        Https {
            addr: self.addr,
            ca: &self.ca,
            alpn,
            cert,
        }
    }
}

async fn start() -> Secured {
    let dir = TempDir::new("tls");
    let ca = Ca::new("listwatch-test-ca");
    let server = ca.server();
    let cert = write(&dir.0, "server.crt", &server.cert_pem);
    let key = write(&dir.0, "server.key", &server.key_pem);
    let client_ca = write(&dir.0, "client-ca.crt", &ca.cert_pem);
    let tokens = write(&dir.0, "tokens.csv", TOKENS);
    let policy = write(&dir.0, "policy.jsonl", POLICY);

    let (source, pods) = demo::pods_source();
    for (ns, n) in [("team-a", 2), ("team-b", 3)] {
        for i in 0..n {
            let body = format!(r#"{{"metadata":{{"name":"p{i}"}},"spec":{{"containers":[]}}}}"#);
            source
                .create(&pods, Some(ns), body.as_bytes())
                .expect("create");
        }
    }
    let (listener, addr) = listwatch_testkit::listen_local().await;
    let app = App::new(
        source,
        ServerConfig::default(),
        Some(Arc::new(
            PolicyAuthorizer::from_file(&policy).expect("policy"),
        )),
    );
    let options = ServeOptions {
        tls: Some(tls_config(&cert, &key, Some(&client_ca)).expect("tls")),
        authenticator: Some(Arc::new(
            Authenticator::from_token_file(&tokens, false).expect("tokens"),
        )),
        watch_grace: Duration::ZERO,
        ..ServeOptions::default()
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(serve_with(app, listener, options, async {
        let _ = rx.await;
    }));
    Secured {
        addr,
        ca,
        dir,
        _stop: tx,
    }
}

fn items(body: &str) -> usize {
    common::json(body)["items"].as_array().map_or(0, Vec::len)
}

#[tokio::test]
async fn tokens_policy_and_status_bodies_over_http2() {
    let s = start().await;
    let h2 = ["h2", "http/1.1"];
    let get = |path: &'static str, token: Option<&'static str>| {
        let s = &s;
        async move {
            s.https(&h2, None)
                .request("GET", path, token, None)
                .await
                .expect("request")
        }
    };

    let r = get("/api/v1/namespaces/team-a/pods", Some("tok-alice")).await;
    assert_eq!(r.version, http::Version::HTTP_2, "ALPN chose HTTP/2");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(items(&r.body), 2);

    // A user allowed one namespace: a cluster-wide LIST is 403, as with RBAC.
    let r = get("/api/v1/pods", Some("tok-alice")).await;
    assert_eq!(r.status, 403);
    let v = common::json(&r.body);
    assert_eq!(v["reason"], "Forbidden");
    assert_eq!(
        v["message"],
        "pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" at the cluster scope"
    );
    let r = get("/api/v1/namespaces/team-b/pods", Some("tok-alice")).await;
    assert_eq!(r.status, 403);
    assert!(
        r.body.contains("in the namespace \\\"team-b\\\""),
        "{}",
        r.body
    );
    // Watches are authorized as `watch`.
    let r = get("/api/v1/pods?watch=1", Some("tok-alice")).await;
    assert_eq!(r.status, 403);
    assert!(r.body.contains("cannot watch resource"), "{}", r.body);

    // No credentials (anonymous is off) and an unknown token: kube-apiserver's 401.
    let r = get("/api/v1/namespaces/team-a/pods", None).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.body.trim_end(), UNAUTHORIZED);
    let r = get("/api/v1/namespaces/team-a/pods", Some("nope")).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.body.trim_end(), UNAUTHORIZED);

    // readonly rules do not allow writes; the masters group may do anything.
    let cm = r#"{"metadata":{"name":"x"},"data":{}}"#;
    let r = s
        .https(&h2, None)
        .request(
            "POST",
            "/api/v1/namespaces/team-a/pods",
            Some("tok-alice"),
            Some(cm),
        )
        .await
        .expect("post");
    assert_eq!(r.status, 403, "{}", r.body);
    let r = get("/api/v1/pods", Some("tok-admin")).await;
    assert_eq!(r.status, 200);
    assert_eq!(items(&r.body), 5);

    // HTTP/1.1 over TLS works the same.
    let r = s
        .https(&["http/1.1"], None)
        .request(
            "GET",
            "/api/v1/namespaces/team-a/pods",
            Some("tok-alice"),
            None,
        )
        .await
        .expect("http/1.1");
    assert_eq!(r.version, http::Version::HTTP_11);
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn client_certificates_name_the_user_and_groups() {
    let s = start().await;
    let bob = s.ca.client("bob", &["readers-b"]);
    let r = s
        .https(&["h2"], Some(&bob))
        .request("GET", "/api/v1/namespaces/team-b/pods", None, None)
        .await
        .expect("request");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(items(&r.body), 3);
    let r = s
        .https(&["h2"], Some(&bob))
        .request("GET", "/api/v1/namespaces/team-a/pods", None, None)
        .await
        .expect("request");
    assert_eq!(r.status, 403);
    assert!(r.body.contains("User \\\"bob\\\""), "{}", r.body);

    // A certificate from a CA the server does not trust: refused during the handshake.
    let other = Ca::new("someone-else");
    let mallory = other.client("admin", &["system:masters"]);
    let r = s
        .https(&["h2"], Some(&mallory))
        .request("GET", "/api/v1/pods", None, None)
        .await;
    assert!(
        r.is_err(),
        "an untrusted client certificate must not get in"
    );
}

#[tokio::test]
async fn kube_rs_and_kubectl_connect_with_tls_and_a_token() {
    use k8s_openapi::api::core::v1::Pod;
    let s = start().await;
    let mut config = kube::Config::new(
        format!("https://127.0.0.1:{}", s.addr.port())
            .parse()
            .expect("url"),
    );
    config.root_cert = Some(vec![s.ca.cert_der.to_vec()]);
    config.auth_info.token = Some("tok-alice".to_string().into());
    let client = kube::Client::try_from(config).expect("client");
    let pods: kube::Api<Pod> = kube::Api::namespaced(client.clone(), "team-a");
    let list = pods.list(&Default::default()).await.expect("kube-rs list");
    assert_eq!(list.items.len(), 2);
    let all: kube::Api<Pod> = kube::Api::all(client);
    match all.list(&Default::default()).await {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 403);
            assert_eq!(e.reason, "Forbidden");
        }
        other => panic!("expected 403, got {other:?}"),
    }

    let ca = write(&s.dir.0, "ca.crt", &s.ca.cert_pem);
    let kubeconfig = write(
        &s.dir.0,
        "kubeconfig",
        &format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: lw\n  cluster:\n    server: https://127.0.0.1:{}\n    certificate-authority: {}\nusers:\n- name: alice\n  user:\n    token: tok-alice\ncontexts:\n- name: lw\n  context:\n    cluster: lw\n    user: alice\ncurrent-context: lw\n",
            s.addr.port(),
            ca.display()
        ),
    );
    common::require("kubectl");
    let names = common::succeed(
        tokio::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["get", "pods", "-n", "team-a", "-o", "name"]),
    )
    .await;
    assert_eq!(names, "pod/p0\npod/p1\n");
    let out = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["get", "pods", "-A"])
        .output()
        .await
        .expect("kubectl");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("forbidden"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The token file and ABAC policy over plain HTTP, behind the standalone authenticator
/// with anonymous requests off (the default).
async fn start_plain() -> (std::net::SocketAddr, TempDir) {
    let dir = TempDir::new("plain");
    let tokens = write(&dir.0, "tokens.csv", TOKENS);
    let policy = write(&dir.0, "policy.jsonl", POLICY);
    let (source, pods) = demo::pods_source();
    let body = br#"{"metadata":{"name":"p0"},"spec":{"containers":[]}}"#;
    source.create(&pods, Some("team-a"), body).expect("create");
    let app = App::new(
        source,
        ServerConfig::default(),
        Some(Arc::new(
            PolicyAuthorizer::from_file(&policy).expect("policy"),
        )),
    );
    let authn = Authenticator::from_token_file(&tokens, false).expect("tokens");
    (common::serve_authenticated(app, Arc::new(authn)).await, dir)
}

async fn send(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    authorization: Option<&str>,
    body: Option<&str>,
) -> Plain {
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(a) = authorization {
        headers.push(("Authorization", a));
    }
    let r = listwatch_testkit::send(addr, method, path, &headers, body.map(str::as_bytes))
        .await
        .expect("response");
    Plain {
        status: r.status,
        body: String::from_utf8_lossy(&r.body).into_owned(),
    }
}

/// A plain-HTTP answer: status and body text.
struct Plain {
    status: u16,
    body: String,
}

/// kube-apiserver's `system:public-info-viewer` paths answer probes without credentials
/// even with anonymous requests off; everything else (their sub-paths too) still needs
/// them, and a bad token is refused there as anywhere.
#[tokio::test]
async fn health_and_version_need_no_credentials() {
    let (addr, _dir) = start_plain().await;
    // Ready once the housekeeping loop has measured the protobuf lengths (a moment).
    listwatch_testkit::poll_until(
        Duration::from_secs(10),
        || send(addr, "GET", "/readyz", None, None),
        |r| r.status == 200,
    )
    .await;
    let open = [
        "/healthz",
        "/livez",
        "/readyz",
        "/readyz?verbose",
        "/version",
    ];
    let closed = [
        "/api",
        "/api/v1/namespaces/team-a/pods",
        "/readyz/ping",
        "/metrics",
    ];
    for (paths, status) in [(&open[..], 200), (&closed[..], 401)] {
        for path in paths {
            let r = send(addr, "GET", path, None, None).await;
            assert_eq!(r.status, status, "{path}: {}", r.body);
        }
    }
    let r = send(addr, "GET", "/version", None, None).await;
    assert!(
        common::json(&r.body)["gitVersion"].is_string(),
        "{}",
        r.body
    );
    let r = send(addr, "GET", "/healthz", Some("Bearer nope"), None).await;
    assert_eq!(r.status, 401);
}

/// The bearer scheme is matched case-insensitively, as kube-apiserver's bearer-token
/// authenticator does.
#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive() {
    let (addr, _dir) = start_plain().await;
    for auth in ["Bearer tok-alice", "bearer tok-alice", "BEARER tok-alice"] {
        let r = send(
            addr,
            "GET",
            "/api/v1/namespaces/team-a/pods",
            Some(auth),
            None,
        )
        .await;
        assert_eq!(r.status, 200, "{auth}: {}", r.body);
        assert_eq!(items(&r.body), 1, "{auth}");
    }
    let r = send(
        addr,
        "GET",
        "/api/v1/namespaces/team-a/pods",
        Some("Basic YTpi"),
        None,
    )
    .await;
    assert_eq!(r.status, 401);
}

/// Under ABAC, access reviews are answered by the policy: the masters group may create
/// them, and the answer for alice follows her rules (with ABAC's reason when it does not
/// allow); alice herself has no rule to create reviews.
#[tokio::test]
async fn access_reviews_follow_the_abac_policy() {
    let (addr, _dir) = start_plain().await;
    // "May alice list pods in `ns`?", asked with `authorization`.
    let review = |authorization: &'static str, ns: &'static str| async move {
        let body = format!(
            r#"{{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{{"user":"alice","resourceAttributes":{{"verb":"list","resource":"pods","namespace":"{ns}"}}}}}}"#
        );
        send(
            addr,
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            Some(authorization),
            Some(&body),
        )
        .await
    };
    let r = review("Bearer tok-admin", "team-a").await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        common::json(&r.body)["status"]["allowed"],
        true,
        "{}",
        r.body
    );
    let r = review("Bearer tok-admin", "team-b").await;
    assert_eq!(r.status, 201, "{}", r.body);
    let v = common::json(&r.body);
    assert_eq!(v["status"]["allowed"], false, "{}", r.body);
    assert_eq!(v["status"]["reason"], "No policy matched.");
    let r = review("Bearer tok-alice", "team-a").await;
    assert_eq!(r.status, 403, "{}", r.body);
}
