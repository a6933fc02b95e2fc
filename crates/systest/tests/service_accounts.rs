//! Service-account and OIDC tokens end to end: tokens minted here as the cluster would mint
//! them (ES256 and RS256, legacy Secret-based and bound), a real client (kube-rs) using
//! them, and the cluster's RBAC deciding — all from the objects the cache holds.

mod common;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client, Config};
use listwatch_auth::authn::Authenticator;
use listwatch_auth::tokens::{OidcConfig, OidcTokens, ServiceAccountTokens};
use listwatch_testkit::jwt::sign;
use serde_json::{Value, json};

const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
const OIDC_ISSUER: &str = "https://login.example.com";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

/// A P-256 key: its private key for signing (PKCS#8 PEM), its public key (PEM), and its
/// JWK coordinates.
struct EcKey {
    private_pem: String,
    public_pem: String,
    x: String,
    y: String,
}

fn ec_key() -> EcKey {
    let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
    let raw = pair.public_key_raw().to_vec();
    // base64url without padding, for the JWK.
    let b64 = |b: &[u8]| {
        base64(b)
            .replace('+', "-")
            .replace('/', "_")
            .replace('=', "")
    };
    EcKey {
        private_pem: pair.serialize_pem(),
        public_pem: pair.public_key_pem(),
        x: b64(&raw[1..33]),
        y: b64(&raw[33..65]),
    }
}

/// Standard base64 with padding, as Go's JSON writes `[]byte`.
fn base64(data: &[u8]) -> String {
    let mut quoted = Vec::new();
    listwatch_protobuf::to_json::push_base64(&mut quoted, data);
    String::from_utf8(quoted)
        .expect("ascii")
        .trim_matches('"')
        .to_string()
}

/// An RSA key made by `openssl` (ring cannot generate RSA keys): its private PEM (PKCS#8)
/// and that file's path (kube-apiserver's `--service-account-key-file` takes the private key
/// file too).
fn rsa_key(dir: &std::path::Path) -> (String, std::path::PathBuf) {
    common::require("openssl");
    let private = dir.join("rsa.key");
    let ok = std::process::Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
        ])
        .arg(&private)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl")
        .success();
    assert!(ok, "openssl could not make an RSA key");
    (std::fs::read_to_string(&private).expect("key"), private)
}

fn client(addr: std::net::SocketAddr, token: &str) -> Client {
    let mut config = Config::new(format!("http://{addr}").parse().expect("url"));
    config.auth_info.token = Some(secrecy::SecretString::from(token.to_string()));
    Client::try_from(config).expect("client")
}

/// What a list of pods by `token` in `ns` (None: all namespaces) gets: Ok(count) or the
/// HTTP status of the refusal.
async fn list_pods(
    addr: std::net::SocketAddr,
    token: &str,
    ns: Option<&str>,
) -> Result<usize, u16> {
    let c = client(addr, token);
    let api: Api<Pod> = match ns {
        Some(ns) => Api::namespaced(c, ns),
        None => Api::all(c),
    };
    match api.list(&Default::default()).await {
        Ok(l) => Ok(l.items.len()),
        Err(kube::Error::Api(s)) => Err(s.code),
        Err(e) => panic!("unexpected error: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_account_and_oidc_tokens_with_rbac() {
    let dir = std::env::temp_dir().join(format!("lw-sa-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let ec = ec_key();
    let ec_pub = dir.join("sa-ec.pub");
    std::fs::write(&ec_pub, &ec.public_pem).expect("write");
    let (rsa_private, rsa_key_file) = rsa_key(&dir);
    let jwks = dir.join("jwks.json");
    std::fs::write(
        &jwks,
        json!({"keys": [{"kty": "EC", "crv": "P-256", "x": ec.x, "y": ec.y, "kid": "k1", "alg": "ES256", "use": "sig"}]}).to_string(),
    )
    .expect("write");
    let tokens = dir.join("tokens.csv");
    std::fs::write(&tokens, "admin-token,admin,1,\"system:masters\"\n").expect("write");

    // The cluster: an embedded store written through the API by the admin, served with the
    // cluster's own authorization (Node, RBAC).
    let registry = listwatch_sources::Registry::new(
        listwatch_core::builtin_resources(),
        1,
        &listwatch_store::StoreConfig::default(),
    );
    let source = listwatch_sources::EmbeddedSource::new(registry.clone());
    let app = listwatch_server::App::with_cluster_authorization(
        source.clone(),
        listwatch_server::ServerConfig::default(),
    );
    let sa = ServiceAccountTokens::from_key_files(
        &[&ec_pub, &rsa_key_file],
        vec![ISSUER.into()],
        vec!["api".into()],
        registry.clone(),
    )
    .expect("service-account keys");
    let oidc = OidcTokens::new(
        OidcConfig {
            issuer: OIDC_ISSUER.into(),
            client_id: "listwatch".into(),
            username_claim: "email".into(),
            username_prefix: None,
            groups_claim: Some("groups".into()),
            groups_prefix: "oidc:".into(),
        },
        &jwks,
    )
    .expect("oidc");
    let authenticator = Authenticator::from_token_file(&tokens, false)
        .expect("tokens")
        .with_token_authenticator(Arc::new(sa))
        .with_token_authenticator(Arc::new(oidc));
    let addr = common::serve_authenticated(app, Arc::new(authenticator)).await;
    let admin = |method: &'static str, path: String, body: Option<Value>| async move {
        let text = body.map(|b| b.to_string());
        let r = listwatch_testkit::send(
            addr,
            method,
            &path,
            &[
                ("Authorization", "Bearer admin-token"),
                ("Content-Type", "application/json"),
            ],
            text.as_deref().map(str::as_bytes),
        )
        .await
        .expect("response");
        assert!(
            r.status < 300,
            "{method} {path}: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
        serde_json::from_slice::<Value>(&r.body).unwrap_or(Value::Null)
    };
    let uid = |created: &Value| {
        created["metadata"]["uid"]
            .as_str()
            .expect("uid")
            .to_string()
    };
    // The service account first (the server gives it its uid), then its legacy token,
    // which its Secret holds.
    let sa_uid = uid(&admin(
        "POST",
        "/api/v1/namespaces/team-a/serviceaccounts".into(),
        Some(json!({"metadata": {"name": "reader", "namespace": "team-a"}})),
    )
    .await);
    let sa_uid = sa_uid.as_str();
    let legacy = sign(
        &json!({
            "iss": "kubernetes/serviceaccount",
            "sub": "system:serviceaccount:team-a:reader",
            "kubernetes.io/serviceaccount/namespace": "team-a",
            "kubernetes.io/serviceaccount/secret.name": "reader-token",
            "kubernetes.io/serviceaccount/service-account.name": "reader",
            "kubernetes.io/serviceaccount/service-account.uid": sa_uid,
        }),
        &rsa_private,
        jsonwebtoken::Algorithm::RS256,
    );
    let b64 = |s: &str| base64(s.as_bytes());
    for (path, body) in [
        (
            "/api/v1/namespaces/team-a/secrets",
            json!({"metadata": {"name": "reader-token", "namespace": "team-a", "annotations": {"kubernetes.io/service-account.name": "reader"}}, "type": "kubernetes.io/service-account-token", "data": {"token": b64(&legacy)}}),
        ),
        (
            "/api/v1/namespaces/team-b/pods",
            json!({"metadata": {"name": "other", "namespace": "team-b"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/namespaces/team-a/roles",
            json!({"metadata": {"name": "pod-reader", "namespace": "team-a"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]}),
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/namespaces/team-a/rolebindings",
            json!({"metadata": {"name": "reader-pods", "namespace": "team-a"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"}, "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "team-a"}]}),
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/namespaces/team-b/roles",
            json!({"metadata": {"name": "pod-reader", "namespace": "team-b"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]}),
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/namespaces/team-b/rolebindings",
            json!({"metadata": {"name": "devs", "namespace": "team-b"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"}, "subjects": [{"kind": "Group", "name": "oidc:devs", "apiGroup": "rbac.authorization.k8s.io"}]}),
        ),
    ] {
        admin("POST", path.to_string(), Some(body)).await;
    }
    let pod_uid = uid(&admin("POST", "/api/v1/namespaces/team-a/pods".into(), Some(json!({"metadata": {"name": "app", "namespace": "team-a"}, "spec": {"serviceAccountName": "reader", "containers": [{"name": "c", "image": "busybox"}]}}))).await);
    let pod_uid = pod_uid.as_str();
    let bound_claims = |pod: Value, exp: u64, aud: &str| {
        json!({
            "iss": ISSUER, "aud": [aud], "exp": exp, "iat": now(), "nbf": now(),
            "sub": "system:serviceaccount:team-a:reader",
            "kubernetes.io": {"namespace": "team-a", "serviceaccount": {"name": "reader", "uid": sa_uid}, "pod": pod},
        })
    };
    let bound = sign(
        &bound_claims(json!({"name": "app", "uid": pod_uid}), now() + 3600, "api"),
        &ec.private_pem,
        jsonwebtoken::Algorithm::ES256,
    );

    // Allowed in team-a, 403 in team-b and across namespaces; both kinds of token.
    for token in [&legacy, &bound] {
        assert_eq!(list_pods(addr, token, Some("team-a")).await, Ok(1));
        assert_eq!(list_pods(addr, token, Some("team-b")).await, Err(403));
        assert_eq!(list_pods(addr, token, None).await, Err(403));
    }
    // Refused outright (401): expired, another audience, bound to a pod that is not (this)
    // one, signed by a key the server does not have, a bad signature.
    let other_key = ec_key();
    for (why, token) in [
        (
            "expired",
            sign(
                &bound_claims(json!({"name": "app", "uid": pod_uid}), now() - 3600, "api"),
                &ec.private_pem,
                jsonwebtoken::Algorithm::ES256,
            ),
        ),
        (
            "audience",
            sign(
                &bound_claims(
                    json!({"name": "app", "uid": pod_uid}),
                    now() + 3600,
                    "vault",
                ),
                &ec.private_pem,
                jsonwebtoken::Algorithm::ES256,
            ),
        ),
        (
            "pod uid",
            sign(
                &bound_claims(
                    json!({"name": "app", "uid": "not-this-one"}),
                    now() + 3600,
                    "api",
                ),
                &ec.private_pem,
                jsonwebtoken::Algorithm::ES256,
            ),
        ),
        (
            "unknown key",
            sign(
                &bound_claims(json!({"name": "app", "uid": pod_uid}), now() + 3600, "api"),
                &other_key.private_pem,
                jsonwebtoken::Algorithm::ES256,
            ),
        ),
        ("tampered", format!("{}x", &bound[..bound.len() - 1])),
    ] {
        assert_eq!(
            list_pods(addr, &token, Some("team-a")).await,
            Err(401),
            "{why}"
        );
    }

    // OIDC: a group the cluster binds in team-b.
    let id_token = sign(
        &json!({"iss": OIDC_ISSUER, "aud": "listwatch", "exp": now() + 600, "iat": now(), "sub": "u-1", "email": "dev@example.com", "email_verified": true, "groups": ["devs"]}),
        &ec.private_pem,
        jsonwebtoken::Algorithm::ES256,
    );
    assert_eq!(list_pods(addr, &id_token, Some("team-b")).await, Ok(1));
    assert_eq!(list_pods(addr, &id_token, Some("team-a")).await, Err(403));
    let wrong_client = sign(
        &json!({"iss": OIDC_ISSUER, "aud": "someone-else", "exp": now() + 600, "sub": "u-1", "email": "dev@example.com"}),
        &ec.private_pem,
        jsonwebtoken::Algorithm::ES256,
    );
    assert_eq!(
        list_pods(addr, &wrong_client, Some("team-b")).await,
        Err(401)
    );

    // Delete the binding: the next request is denied.
    admin(
        "DELETE",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/team-a/rolebindings/reader-pods".into(),
        None,
    )
    .await;
    let code = common::poll_until(
        std::time::Duration::from_secs(10),
        || async { list_pods(addr, &bound, Some("team-a")).await },
        |r| *r == Err(403),
    )
    .await;
    assert_eq!(code, Err(403), "binding deleted");
    // Delete the pod the bound token is bound to: the token stops working.
    admin("DELETE", "/api/v1/namespaces/team-a/pods/app".into(), None).await;
    assert_eq!(
        list_pods(addr, &bound, Some("team-a")).await,
        Err(401),
        "bound pod deleted"
    );
    // Delete the legacy token's Secret: the token stops working.
    assert_eq!(
        list_pods(addr, &legacy, Some("team-a")).await,
        Err(403),
        "still authenticated"
    );
    admin(
        "DELETE",
        "/api/v1/namespaces/team-a/secrets/reader-token".into(),
        None,
    )
    .await;
    assert_eq!(
        list_pods(addr, &legacy, Some("team-a")).await,
        Err(401),
        "secret deleted"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
