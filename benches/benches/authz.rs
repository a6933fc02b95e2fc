//! What authorization costs the read path (docs/security.md): the cluster authorizer
//! (system:masters → Node → RBAC) over 1,000 RoleBindings and 1,000 ClusterRoleBindings,
//! against AlwaysAllow (no authorizer), per request: an allowed namespaced LIST (found by
//! the last RoleBinding of its namespace), a denied one (every binding visited), and a
//! whole `App::handle` of a small LIST with and without RBAC.

use criterion::{Criterion, criterion_group, criterion_main};
use http_body_util::BodyExt;
use listwatch_core::builtin_resources;
use listwatch_server::auth::User;
use listwatch_server::rbac::{Attributes, ClusterAuthorizer, ResourceAttributes};
use listwatch_sources::{EmbeddedSource, Registry};
use listwatch_store::{Record, StoreConfig};

#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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
    let ask = |user: &str, ns: &str| Attributes {
        user: user.into(),
        groups: vec!["system:authenticated".into()],
        verb: "list".into(),
        resource: Some(ResourceAttributes {
            resource: "pods".into(),
            namespace: ns.into(),
            ..ResourceAttributes::default()
        }),
        path: String::new(),
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

criterion_group!(benches, authz);
criterion_main!(benches);
