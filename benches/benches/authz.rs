//! What authorization costs the read path (docs/security.md): the cluster authorizer
//! (system:masters → Node → RBAC) over 1,000 RoleBindings and 1,000 ClusterRoleBindings,
//! against AlwaysAllow (no authorizer), per request: an allowed namespaced LIST (found by
//! the last RoleBinding of its namespace), a denied one (every binding visited), and a
//! whole `App::handle` of a small LIST with and without RBAC; and verifying a bearer
//! service-account token (RS256 legacy, ES256 bound), which every request carrying one
//! pays.

use criterion::{Criterion, criterion_group, criterion_main};
use http_body_util::BodyExt;
use listwatch_auth::rbac::ClusterAuthorizer;
use listwatch_auth::{Attributes, User};
use listwatch_core::builtin_resources;
use listwatch_sources::{EmbeddedSource, Registry};
use listwatch_store::{Record, StoreConfig};

listwatch_benches::jemalloc!();

fn fill(registry: &Registry, resource: &str, objects: Vec<serde_json::Value>) {
    let store = registry
        .get("rbac.authorization.k8s.io", "v1", resource)
        .or_else(|| registry.get("", "v1", resource))
        .expect("store");
    let records: Vec<Record> = objects
        .iter()
        .map(|o| {
            Record::ingest(&serde_json::to_vec(o).expect("json"), store.info(), 2).expect("ingest")
        })
        .collect();
    store.replace(2, records);
}

fn registry() -> Registry {
    let registry = Registry::new(builtin_resources(), 1, &StoreConfig::default());
    let meta = |name: String, ns: Option<String>| match ns {
        Some(ns) => serde_json::json!({"name": name, "namespace": ns}),
        None => serde_json::json!({"name": name}),
    };
    let mut roles = vec![
        serde_json::json!({"metadata": meta("pod-reader".into(), None),
        "rules": [{"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["pods"]}]}),
    ];
    let mut crbs = Vec::new();
    for i in 0..1000 {
        roles.push(serde_json::json!({"metadata": meta(format!("role-{i}"), None),
            "rules": [{"verbs": ["get"], "apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": [format!("d-{i}")]}]}));
        crbs.push(
            serde_json::json!({"metadata": meta(format!("crb-{i}"), None),
            "subjects": [{"kind": "User", "name": format!("user-{i}")}],
            "roleRef": {"kind": "ClusterRole", "name": format!("role-{i}")}}),
        );
    }
    let rbs: Vec<_> = (0..1000)
        .map(|i| {
            serde_json::json!({"metadata": meta(format!("rb-{i}"), Some(format!("ns-{}", i % 100))),
                "subjects": [{"kind": "User", "name": format!("user-{i}")}],
                "roleRef": {"kind": "ClusterRole", "name": "pod-reader"}})
        })
        .collect();
    fill(&registry, "clusterroles", roles);
    fill(&registry, "clusterrolebindings", crbs);
    fill(&registry, "rolebindings", rbs);
    let pods: Vec<_> = (0..10)
        .map(|i| serde_json::json!({"metadata": meta(format!("p-{i}"), Some("ns-99".into())), "spec": {"containers": []}}))
        .collect();
    fill(&registry, "pods", pods);
    registry
}

fn authz(c: &mut Criterion) {
    let registry = registry();
    let a = ClusterAuthorizer::new(&registry);
    let pods = registry.get("", "v1", "pods").expect("pods").info().clone();
    let ask = |user: &str, ns: &str| {
        let user = User {
            name: user.into(),
            groups: vec!["system:authenticated".into()],
            ..User::default()
        };
        Attributes::resource(user, "list", &pods, Some(ns), "")
    };
    // user-999's binding is the last of ns-99's ten.
    let allowed = ask("user-999", "ns-99");
    let denied = ask("user-999", "ns-1");
    assert!(a.decide(&allowed).allowed && !a.decide(&denied).allowed);
    let mut g = c.benchmark_group("authz");
    g.bench_function("decide_allowed_1000_bindings", |b| {
        b.iter(|| a.decide(&allowed))
    });
    g.bench_function("decide_denied_1000_bindings", |b| {
        b.iter(|| a.decide(&denied))
    });

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let source = EmbeddedSource::new(registry.clone());
    let open = listwatch_server::App::new(source.clone(), Default::default(), None);
    let rbac = listwatch_server::App::with_cluster_authorization(source, Default::default());
    let request = || {
        let mut req = http::Request::get("/api/v1/namespaces/ns-99/pods")
            .body(
                http_body_util::Empty::<bytes::Bytes>::new()
                    .map_err(|e| -> Box<dyn std::error::Error + Send + Sync> { match e {} })
                    .boxed_unsync(),
            )
            .expect("request");
        req.extensions_mut().insert(User {
            name: "user-999".into(),
            groups: vec!["system:authenticated".into()],
            ..User::default()
        });
        req
    };
    for (name, app) in [
        ("list_10_pods_always_allow", &open),
        ("list_10_pods_rbac_1000_bindings", &rbac),
    ] {
        assert_eq!(rt.block_on(app.handle(request())).status(), 200, "{name}");
        g.bench_function(name, |b| {
            b.iter(|| {
                rt.block_on(async {
                    let r = app.handle(request()).await;
                    r.into_body().collect().await.map(|b| b.to_bytes().len())
                })
            })
        });
    }
    g.finish();
}

/// A key made by `openssl` (`genpkey` arguments): its PKCS#8 PEM and the file holding it.
fn openssl_key(dir: &std::path::Path, name: &str, args: &[&str]) -> (String, std::path::PathBuf) {
    let path = dir.join(name);
    let ok = std::process::Command::new("openssl")
        .arg("genpkey")
        .args(args)
        .arg("-out")
        .arg(&path)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "openssl genpkey");
    (std::fs::read_to_string(&path).expect("key"), path)
}

fn tokens(c: &mut Criterion) {
    use listwatch_auth::tokens::{ServiceAccountTokens, TokenAuthenticator};
    let dir = std::env::temp_dir().join(format!("lw-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (rsa, rsa_file) = openssl_key(
        &dir,
        "rsa.key",
        &["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"],
    );
    let (ec, ec_file) = openssl_key(
        &dir,
        "ec.key",
        &["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"],
    );
    let registry = Registry::new(builtin_resources(), 1, &StoreConfig::default());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let sign = |claims: &serde_json::Value, pem: &str, alg: jsonwebtoken::Algorithm| {
        let key = match alg {
            jsonwebtoken::Algorithm::ES256 => {
                jsonwebtoken::EncodingKey::from_ec_pem(pem.as_bytes())
            }
            _ => jsonwebtoken::EncodingKey::from_rsa_pem(pem.as_bytes()),
        }
        .expect("key");
        jsonwebtoken::encode(&jsonwebtoken::Header::new(alg), claims, &key).expect("sign")
    };
    let legacy = sign(
        &serde_json::json!({"iss": "kubernetes/serviceaccount",
            "kubernetes.io/serviceaccount/namespace": "ns", "kubernetes.io/serviceaccount/secret.name": "t",
            "kubernetes.io/serviceaccount/service-account.name": "sa", "kubernetes.io/serviceaccount/service-account.uid": "u1"}),
        &rsa,
        jsonwebtoken::Algorithm::RS256,
    );
    let bound = sign(
        &serde_json::json!({"iss": "https://k8s", "aud": ["https://k8s"], "exp": now + 3600, "iat": now,
            "kubernetes.io": {"namespace": "ns", "serviceaccount": {"name": "sa", "uid": "u1"}, "pod": {"name": "p", "uid": "u2"}}}),
        &ec,
        jsonwebtoken::Algorithm::ES256,
    );
    // A Secret's `data.token` is base64, as Go writes `[]byte` (a quoted JSON string).
    let mut quoted = Vec::new();
    listwatch_protobuf::to_json::push_base64(&mut quoted, legacy.as_bytes());
    let b64 = String::from_utf8(quoted)
        .expect("ascii")
        .trim_matches('"')
        .to_string();
    fill(
        &registry,
        "serviceaccounts",
        vec![serde_json::json!({"metadata": {"name": "sa", "namespace": "ns", "uid": "u1"}})],
    );
    fill(
        &registry,
        "secrets",
        vec![
            serde_json::json!({"metadata": {"name": "t", "namespace": "ns", "uid": "u3"}, "data": {"token": b64}}),
        ],
    );
    fill(
        &registry,
        "pods",
        vec![serde_json::json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u2"}})],
    );
    let sa = ServiceAccountTokens::from_key_files(
        &[&rsa_file, &ec_file],
        vec!["https://k8s".into()],
        vec![],
        registry,
    )
    .expect("keys");
    let mut g = c.benchmark_group("tokens");
    for (name, token) in [("legacy_rs256", &legacy), ("bound_es256", &bound)] {
        assert!(
            matches!(sa.authenticate_token(token), Some(Ok(_))),
            "{name}"
        );
        g.bench_function(name, |b| {
            b.iter(|| sa.authenticate_token(token).map(|r| r.is_ok()))
        });
    }
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, authz, tokens);
criterion_main!(benches);
