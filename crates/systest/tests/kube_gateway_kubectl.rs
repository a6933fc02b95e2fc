//! The gateway (`listwatch serve --source apiserver`, TLS) in front of a real kube-apiserver
//! 1.36 with etcd over mutual TLS, used as its users use it (issue 49, "gateway in front"):
//! - kubectl's day-one workflow through it — apply (twice: the second is unchanged), apply
//!   --server-side, patch (strategic, merge, json), edit, label, scale (a Deployment's scale
//!   subresource), auth can-i, explain, get -o json/yaml/wide, delete — each step's effect
//!   read back through the gateway (listwatch serves the reads) and, where it tells
//!   something, compared with the same read straight from kube-apiserver;
//! - the client's identity reaches kube-apiserver in each `--upstream-identity` mode
//!   (front-proxy with the run's front-proxy-client certificate, impersonate with the
//!   admin's credential, forward with the client's own token): a service account with a
//!   grant in one namespace writes there (passed through) and reads there (served here), one
//!   without is refused both, and kube-apiserver names the real user (`kubectl auth whoami`
//!   through the gateway, and the user its 403 names);
//! - read-your-write across two gateways over one kube-apiserver: writers through gateway A
//!   (creates, updates, deletes), consistent LISTs (no resourceVersion) through gateway B,
//!   each read checked against every write acknowledged before it started, and a watch
//!   through B that delivers every write once, in order.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use listwatch_testkit::TempDir;
use listwatch_testkit::kube::{KubeCluster, KubeRun, Listwatch, front_proxy_identity};
use listwatch_testkit::workload::{Subject, Workload, template_containers};

listwatch_testkit::kube_tests!(
    kubectl_s_day_one_workflow_through_the_gateway,
    the_client_s_identity_reaches_kube_apiserver_in_every_identity_mode,
    writes_through_one_gateway_are_in_consistent_reads_through_another
);

/// Whether kubectl's error says Forbidden (`Error from server (Forbidden)` for reads,
/// `... is forbidden: User ...` for some writes).
fn forbidden(text: &str) -> bool {
    text.to_lowercase().contains("forbidden")
}

/// The sum of the gateway's `apiserver_request_total` samples (requests listwatch served
/// itself, not passed through) for `verb` and `resource`.
fn served(cluster: &KubeCluster, lw: &Listwatch, verb: &str, resource: &str) -> f64 {
    listwatch_testkit::metric_sum(
        &lw.metrics(&cluster.file("ca.pem"), &cluster.admin_token),
        "apiserver_request_total",
        &[
            &format!("verb=\"{verb}\""),
            &format!("resource=\"{resource}\""),
        ],
    )
}

const DAY_ONE: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: web, namespace: day1, labels: {app: web}}
  spec:
    replicas: 1
    selector: {matchLabels: {app: web}}
    template:
      metadata: {labels: {app: web}}
      spec:
        containers:
        - {name: c, image: "nginx:1.27", ports: [{containerPort: 80}]}
        - {name: sidecar, image: "busybox:1.36"}
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: settings, namespace: day1}
  data: {color: blue, size: large}
"#;

fn kubectl_s_day_one_workflow_through_the_gateway(KubeRun(test, started, cluster): KubeRun) {
    let scratch = TempDir::new("kube-day-one");
    let dir = &scratch.0;
    let lw = cluster.gateway(dir, "gateway", &[]);
    let gw = cluster.kubeconfig_for(&dir.join("gw.kubeconfig"), &lw.url(), &cluster.admin_token);
    let direct = cluster.kubeconfig.clone();
    // kubectl through the gateway, which must succeed: its stdout.
    let ok = |args: &[&str]| -> String {
        let (ok, text) = cluster.kubectl_as(&gw, args);
        assert!(ok, "kubectl {} through the gateway: {text}", args.join(" "));
        text
    };
    let ok_in = |args: &[&str], stdin: &str| -> String {
        let out = cluster.kubectl_with(&gw, args, Some(stdin));
        let what = format!("kubectl {} through the gateway", args.join(" "));
        listwatch_testkit::process::stdout_of_success(&what, &out)
    };
    // The same read through the gateway and straight from kube-apiserver: equal, returned.
    let same = |args: &[&str]| -> String {
        let ours = ok(args);
        let (fine, theirs) = cluster.kubectl_as(&direct, args);
        assert!(
            fine,
            "kubectl {} from kube-apiserver: {theirs}",
            args.join(" ")
        );
        assert_eq!(
            ours,
            theirs,
            "kubectl {}: the gateway's (left) and kube-apiserver's (right) differ",
            args.join(" ")
        );
        ours
    };
    let json = |args: &[&str]| -> serde_json::Value {
        serde_json::from_str(&same(args)).expect("kubectl -o json is JSON")
    };

    ok(&["create", "namespace", "day1"]);
    ok(&["create", "serviceaccount", "default", "-n", "day1"]);

    // apply: created, then unchanged (and nothing written: the resourceVersion stays).
    let applied = ok_in(&["apply", "-f", "-"], DAY_ONE);
    assert_eq!(
        applied, "deployment.apps/web created\nconfigmap/settings created\n",
        "first apply"
    );
    let web = json(&["get", "deployment", "web", "-n", "day1", "-o", "json"]);
    assert_eq!(web["spec"]["replicas"], 1);
    let rv = web["metadata"]["resourceVersion"].clone();
    let again = ok_in(&["apply", "-f", "-"], DAY_ONE);
    assert_eq!(
        again, "deployment.apps/web unchanged\nconfigmap/settings unchanged\n",
        "second apply"
    );
    let web = json(&["get", "deployment", "web", "-n", "day1", "-o", "json"]);
    assert_eq!(
        web["metadata"]["resourceVersion"], rv,
        "an unchanged apply wrote"
    );

    // apply --server-side: created, then changed; kubectl is the field manager (Apply).
    let ssa = |value: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: ssa, namespace: day1}}\ndata: {{mode: {value}}}\n"
        )
    };
    let out = ok_in(&["apply", "--server-side", "-f", "-"], &ssa("one"));
    assert_eq!(out, "configmap/ssa serverside-applied\n");
    let out = ok_in(&["apply", "--server-side", "-f", "-"], &ssa("two"));
    assert_eq!(out, "configmap/ssa serverside-applied\n");
    let cm = json(&[
        "get",
        "configmap",
        "ssa",
        "-n",
        "day1",
        "-o",
        "json",
        "--show-managed-fields",
    ]);
    assert_eq!(cm["data"]["mode"], "two");
    let managers = cm["metadata"]["managedFields"]
        .as_array()
        .expect("managedFields");
    assert!(
        managers
            .iter()
            .any(|m| m["manager"] == "kubectl" && m["operation"] == "Apply"),
        "no server-side apply manager: {managers:?}"
    );

    // patch, three ways: each patched object read back.
    let patched = |kind: &str, name: &str, how: &str, patch: &str| {
        ok(&[
            "patch", kind, name, "-n", "day1", "--type", how, "-p", patch,
        ]);
        json(&["get", kind, name, "-n", "day1", "-o", "json"])
    };
    let web = patched(
        "deployment",
        "web",
        "strategic",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"nginx:1.28"}]}}}}"#,
    );
    let containers = template_containers(&web);
    // Strategic: the list merged by name (the sidecar kept, c's ports kept).
    assert_eq!(containers.len(), 2, "strategic patch: {containers:?}");
    assert_eq!(containers[0]["image"], "nginx:1.28");
    assert_eq!(containers[0]["ports"][0]["containerPort"], 80);
    assert_eq!(containers[1]["name"], "sidecar");
    let cm = patched(
        "configmap",
        "settings",
        "merge",
        r#"{"data":{"shape":"round","size":null}}"#,
    );
    assert_eq!(
        cm["data"],
        serde_json::json!({"color": "blue", "shape": "round"}),
        "merge patch"
    );
    let cm = patched(
        "configmap",
        "settings",
        "json",
        r#"[{"op":"replace","path":"/data/shape","value":"square"},{"op":"add","path":"/data/weight","value":"9"}]"#,
    );
    assert_eq!(
        cm["data"],
        serde_json::json!({"color": "blue", "shape": "square", "weight": "9"}),
        "json patch"
    );

    // edit: kubectl reads the object through the gateway, runs the editor, patches.
    let editor = dir.join("editor.sh");
    std::fs::write(
        &editor,
        "#!/bin/sh\nsed -i 's/color: blue/color: green/' \"$1\"\n",
    )
    .expect("editor script");
    let status = Command::new("chmod")
        .arg("+x")
        .arg(&editor)
        .status()
        .expect("chmod");
    assert!(status.success());
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&gw)
        .args(["edit", "configmap", "settings", "-n", "day1"])
        .env("KUBE_EDITOR", &editor)
        .stdin(Stdio::null())
        .output()
        .expect("kubectl edit");
    assert_eq!(
        listwatch_testkit::process::stdout_of_success("kubectl edit", &out),
        "configmap/settings edited\n"
    );
    let cm = json(&["get", "configmap", "settings", "-n", "day1", "-o", "json"]);
    assert_eq!(cm["data"]["color"], "green", "edit");

    // label: the label selector read (served here) finds it, and only it.
    ok(&["label", "configmap", "settings", "-n", "day1", "tier=front"]);
    let found = same(&[
        "get",
        "configmaps",
        "-n",
        "day1",
        "-l",
        "tier=front",
        "-o",
        "name",
    ]);
    assert_eq!(found, "configmap/settings\n", "label");

    // scale: the scale subresource (passed through; no controller acts on it).
    let out = ok(&[
        "scale",
        "deployment",
        "web",
        "-n",
        "day1",
        "--replicas",
        "3",
    ]);
    assert_eq!(out, "deployment.apps/web scaled\n");
    let web = json(&["get", "deployment", "web", "-n", "day1", "-o", "json"]);
    assert_eq!(web["spec"]["replicas"], 3, "scale");
    let scale = json(&[
        "get",
        "deployment",
        "web",
        "-n",
        "day1",
        "--subresource",
        "scale",
        "-o",
        "json",
    ]);
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["spec"]["replicas"], 3);

    // auth can-i: the admin may; a service account without a grant may not.
    let can = ok(&["auth", "can-i", "patch", "deployments", "-n", "day1"]);
    assert_eq!(can, "yes\n");
    ok(&["create", "serviceaccount", "nobody", "-n", "day1"]);
    let token = ok(&["create", "token", "nobody", "-n", "day1"]);
    let nobody = cluster.kubeconfig_for(&dir.join("nobody.kubeconfig"), &lw.url(), token.trim());
    let out = cluster.kubectl_with(
        &nobody,
        &["auth", "can-i", "get", "configmaps", "-n", "day1"],
        None,
    );
    assert!(
        !out.status.success() && out.stdout == b"no\n",
        "can-i of nobody: {} {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let (allowed, text) = cluster.kubectl_as(&nobody, &["get", "configmaps", "-n", "day1"]);
    assert!(!allowed && forbidden(&text), "nobody read: {text}");

    // explain: the OpenAPI schema, passed through.
    let explained = same(&["explain", "deployment.spec.replicas"]);
    assert!(
        explained.contains("FIELD: replicas <integer>"),
        "explain: {explained}"
    );

    // get in kubectl's output formats: the same as kube-apiserver's (the Age column aside).
    same(&["get", "deployment", "web", "-n", "day1", "-o", "yaml"]);
    same(&["get", "configmaps", "-n", "day1", "-o", "json"]);
    same(&["get", "configmaps", "-n", "day1", "-o", "yaml"]);
    let without_age = |text: &str| -> Vec<Vec<String>> {
        let mut lines = text.lines();
        let header: Vec<&str> = lines
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        let age = header.iter().position(|h| *h == "AGE");
        text.lines()
            .map(|l| {
                l.split_whitespace()
                    .enumerate()
                    .filter(|(i, _)| Some(*i) != age)
                    .map(|(_, c)| c.to_string())
                    .collect()
            })
            .collect()
    };
    for args in [
        &["get", "deployments", "-n", "day1", "-o", "wide"][..],
        &["get", "configmaps", "-n", "day1", "-o", "wide"],
        &["get", "configmaps", "-n", "day1"],
    ] {
        let ours = ok(args);
        let (fine, theirs) = cluster.kubectl_as(&direct, args);
        assert!(fine, "{theirs}");
        assert_eq!(
            without_age(&ours),
            without_age(&theirs),
            "kubectl {}: gateway (left), kube-apiserver (right)",
            args.join(" ")
        );
    }
    let wide = ok(&["get", "deployments", "-n", "day1", "-o", "wide"]);
    assert!(
        wide.contains("nginx:1.28,busybox:1.36") && wide.contains("app=web"),
        "-o wide: {wide}"
    );

    // delete: gone for both.
    let out = ok(&["delete", "configmap", "settings", "ssa", "-n", "day1"]);
    assert_eq!(
        out,
        "configmap \"settings\" deleted\nconfigmap \"ssa\" deleted\n"
    );
    ok(&["delete", "deployment", "web", "-n", "day1"]);
    for kc in [&gw, &direct] {
        for what in ["configmap/settings", "configmap/ssa", "deployment/web"] {
            let (found, text) = cluster.kubectl_as(kc, &["get", what, "-n", "day1"]);
            assert!(
                !found && text.contains("NotFound"),
                "{what} after delete: {text}"
            );
        }
    }
    let left = same(&["get", "configmaps", "-n", "day1", "-o", "name"]);
    assert!(
        !left.contains("settings") && !left.contains("ssa"),
        "after delete: {left}"
    );

    // The reads above were listwatch's (served here, not passed through).
    assert!(served(&cluster, &lw, "GET", "deployments") >= 5.0);
    assert!(served(&cluster, &lw, "LIST", "configmaps") >= 3.0);
    eprintln!("{test}: {:.1} s", started.elapsed().as_secs_f64());
}

/// Namespace `team` (with its `default` service account, which no controller makes here),
/// the service accounts `writer` (bound in `team` to read and write config maps) and
/// `nogrant` (no grant), and a config map to read.
fn team() -> Workload {
    Workload::new()
        .namespaces(&["team"])
        .service_accounts("team", &["writer", "nogrant"])
        .config_map("team", "existing", &[], &[("k", "v")])
        .grant(
            "team",
            ("configmaps", "writer"),
            &["configmaps"],
            &["*"],
            Subject::service_account("team", "writer"),
        )
}

fn the_client_s_identity_reaches_kube_apiserver_in_every_identity_mode(
    KubeRun(test, started, cluster): KubeRun,
) {
    cluster.apply(&team());
    let token = |sa: &str| cluster.service_account_token("team", sa);
    let (writer_token, nogrant_token) = (token("writer"), token("nogrant"));
    eprintln!(
        "{test}: cluster up at {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let scratch = TempDir::new("kube-identity");
    let dir = &scratch.0;
    // listwatch's own identity upstream is deploy/'s: the service account `listwatch` with
    // deploy/gateway/rbac.yaml's ClusterRole (list and watch everything, token and access
    // reviews, impersonation), not the admin: nothing passed through can borrow its rights.
    let rbac = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/gateway/rbac.yaml"),
    )
    .expect("deploy/gateway/rbac.yaml");
    let cluster_role = rbac.split("\n---\n").next().expect("the ClusterRole");
    cluster.kubectl_ok_with(&["apply", "-f", "-"], Some(cluster_role));
    cluster.kubectl_ok(&["create", "namespace", "listwatch-system"]);
    cluster.kubectl_ok(&[
        "create",
        "serviceaccount",
        "listwatch",
        "-n",
        "listwatch-system",
    ]);
    cluster.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        "listwatch",
        "--clusterrole",
        "listwatch",
        "--serviceaccount",
        "listwatch-system:listwatch",
    ]);
    let own = cluster.service_account_token("listwatch-system", "listwatch");
    let own = cluster.kubeconfig_for(&dir.join("listwatch.kubeconfig"), &cluster.url(), &own);
    let (proxy_cert, proxy_key) = (
        cluster.file("front-proxy-client.pem"),
        cluster.file("front-proxy-client.key"),
    );
    let modes: [(&str, Vec<&std::ffi::OsStr>); 3] = [
        ("front-proxy", front_proxy_identity(&proxy_cert, &proxy_key)),
        // listwatch's own token may impersonate (deploy's ClusterRole).
        (
            "impersonate",
            vec!["--upstream-identity".as_ref(), "impersonate".as_ref()],
        ),
        (
            "forward",
            vec!["--upstream-identity".as_ref(), "forward".as_ref()],
        ),
    ];
    for (mode, extra) in &modes {
        let lw = cluster.gateway_as(dir, &format!("gw-{mode}"), &own, extra);
        let kc = |who: &str, token: &str| {
            cluster.kubeconfig_for(
                &dir.join(format!("{who}-{mode}.kubeconfig")),
                &lw.url(),
                token,
            )
        };
        let (writer, nogrant) = (kc("writer", &writer_token), kc("nogrant", &nogrant_token));
        // kubectl ARGS as `who`, which must be refused: Forbidden, the text naming `names`.
        let refused = |who: &Path, args: &[&str], names: &str, what: &str| {
            let (ok, text) = cluster.kubectl_as(who, args);
            assert!(
                !ok && forbidden(&text) && text.contains(names),
                "{mode}: {what}: {text}"
            );
        };
        let name = format!("by-{mode}");

        // kube-apiserver sees the service account, not listwatch's or the proxy's identity.
        let (ok, who) = cluster.kubectl_as(
            &writer,
            &[
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ],
        );
        assert!(ok, "{mode}: whoami: {who}");
        assert_eq!(who, "system:serviceaccount:team:writer", "{mode}: whoami");
        let (ok, groups) = cluster.kubectl_as(
            &writer,
            &["auth", "whoami", "-o", "jsonpath={.status.userInfo.groups}"],
        );
        assert!(
            ok && groups.contains("system:serviceaccounts:team")
                && !groups.contains("system:masters"),
            "{mode}: whoami groups: {groups}"
        );

        // The grant writes (passed through) and reads (served here) in its namespace.
        let (ok, text) = cluster.kubectl_as(
            &writer,
            &[
                "create",
                "configmap",
                &name,
                "-n",
                "team",
                "--from-literal=mode=x",
            ],
        );
        assert!(ok, "{mode}: writer creates: {text}");
        let (ok, text) =
            cluster.kubectl_as(&writer, &["get", "configmaps", "-n", "team", "-o", "name"]);
        assert!(
            ok && text.contains(&format!("configmap/{name}\n"))
                && text.contains("configmap/existing\n"),
            "{mode}: writer lists: {text}"
        );
        let (ok, text) = cluster.kubectl_as(
            &writer,
            &[
                "get",
                "configmap",
                &name,
                "-n",
                "team",
                "-o",
                "jsonpath={.data.mode}",
            ],
        );
        assert!(ok && text == "x", "{mode}: writer reads: {text}");
        let default = ["get", "configmaps", "-n", "default"];
        refused(&writer, &default, "", "writer in default");
        refused(
            &writer,
            &["create", "configmap", &name, "-n", "default"],
            "system:serviceaccount:team:writer",
            "writer writes in default",
        );

        // No grant: refused reading (here) and writing (by kube-apiserver, which names the
        // user it saw).
        for args in [
            &["get", "configmaps", "-n", "team"][..],
            &["get", "configmap", "existing", "-n", "team"],
        ] {
            refused(&nogrant, args, "", &format!("nogrant {args:?}"));
        }
        refused(
            &nogrant,
            &["create", "configmap", &format!("{name}-no"), "-n", "team"],
            "User \"system:serviceaccount:team:nogrant\"",
            "nogrant writes",
        );
        refused(
            &nogrant,
            &[
                "patch",
                "configmap",
                "existing",
                "-n",
                "team",
                "-p",
                r#"{"data":{"k":"w"}}"#,
            ],
            "system:serviceaccount:team:nogrant",
            "nogrant patches",
        );
        // Impersonation (kubectl --as) of reads served here: authorized as kube-apiserver
        // does, then the read runs as the one impersonated; writes reach kube-apiserver as
        // that user too.
        let admin = kc("admin", &cluster.admin_token);
        let as_sa = |sa: &str| format!("--as=system:serviceaccount:team:{sa}");
        let (ok, text) = cluster.kubectl_as(
            &admin,
            &[
                &as_sa("writer"),
                "get",
                "configmaps",
                "-n",
                "team",
                "-o",
                "name",
            ],
        );
        assert!(
            ok && text.contains("configmap/existing\n"),
            "{mode}: admin as writer lists: {text}"
        );
        let as_nogrant: [&str; 5] = [&as_sa("nogrant"), "get", "configmaps", "-n", "team"];
        refused(
            &admin,
            &as_nogrant,
            "system:serviceaccount:team:nogrant",
            "admin as nogrant lists",
        );
        let (ok, who) = cluster.kubectl_as(
            &admin,
            &[
                &as_sa("writer"),
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ],
        );
        assert!(
            ok && who == "system:serviceaccount:team:writer",
            "{mode}: admin as writer: whoami {who}"
        );
        // The writer may not impersonate: refused before anything is read.
        refused(&writer, &as_nogrant, "impersonate", "writer as nogrant");

        // What was written is there for the admin, straight from kube-apiserver; what was
        // refused is not.
        let names = cluster.kubectl_ok(&["get", "configmaps", "-n", "team", "-o", "name"]);
        assert!(
            names.contains(&format!("configmap/{name}\n")),
            "{mode}: {names}"
        );
        assert!(
            !names.contains(&format!("configmap/{name}-no")),
            "{mode}: {names}"
        );
        let k = cluster.kubectl_ok(&[
            "get",
            "configmap",
            "existing",
            "-n",
            "team",
            "-o",
            "jsonpath={.data.k}",
        ]);
        assert_eq!(k, "v", "{mode}: nogrant's patch landed");

        // The reads were listwatch's: LISTs and GETs served here, allowed and refused.
        assert!(
            served(&cluster, &lw, "LIST", "configmaps") >= 3.0,
            "{mode}: listwatch served no LIST: {}",
            lw.log_text()
        );
        assert!(served(&cluster, &lw, "GET", "configmaps") >= 2.0, "{mode}");
        eprintln!(
            "{test}: {mode} done at {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
    eprintln!("{test}: {:.1} s", started.elapsed().as_secs_f64());
}

/// One write's place in the history: the name's sequence number, whether it left the
/// object (or deleted it), when it was sent and when it was acknowledged.
#[derive(Clone, Debug)]
struct Write {
    seq: u64,
    deleted: bool,
    sent: Instant,
    acked: Option<Instant>,
}

/// A kube client for the server `kubeconfig` names.
async fn client(kubeconfig: &Path) -> kube::Client {
    let config = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(config, &Default::default())
        .await
        .expect("kube config");
    kube::Client::try_from(config).expect("kube client")
}

fn writes_through_one_gateway_are_in_consistent_reads_through_another(
    KubeRun(test, started, cluster): KubeRun,
) {
    cluster.kubectl_ok(&["create", "namespace", "ryw"]);
    cluster.kubectl_ok(&["create", "serviceaccount", "default", "-n", "ryw"]);
    let scratch = TempDir::new("kube-two-gateways");
    let dir = &scratch.0;
    let (a, b) = (
        cluster.gateway(dir, "gw-a", &[]),
        cluster.gateway(dir, "gw-b", &[]),
    );
    let kc_a = cluster.kubeconfig_for(&dir.join("a.kubeconfig"), &a.url(), &cluster.admin_token);
    let kc_b = cluster.kubeconfig_for(&dir.join("b.kubeconfig"), &b.url(), &cluster.admin_token);
    let seconds: u64 = std::env::var("KUBE_RYW_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (history, reads, watched) = runtime.block_on(async {
        use futures::StreamExt as _;
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
        let (ca, cb) = (client(&kc_a).await, client(&kc_b).await);
        // name → its writes, in order (one writer per name).
        let history: Arc<parking_lot::Mutex<BTreeMap<String, Vec<Write>>>> = Arc::default();
        // A watch through B from before the first write: every event, per name.
        let watch_api = Api::<ConfigMap>::namespaced(cb.clone(), "ryw");
        let from = watch_api
            .list(&ListParams::default())
            .await
            .expect("LIST through B")
            .metadata
            .resource_version
            .expect("a list resourceVersion");
        let mut stream = watch_api
            .watch(&WatchParams::default().timeout(290), &from)
            .await
            .expect("watch through B")
            .boxed();
        let watched: Arc<parking_lot::Mutex<BTreeMap<String, Vec<Option<u64>>>>> = Arc::default();
        let watcher = {
            let watched = watched.clone();
            tokio::spawn(async move {
                while let Some(event) = stream.next().await {
                    let (cm, deleted) = match event {
                        Ok(WatchEvent::Added(cm) | WatchEvent::Modified(cm)) => (cm, false),
                        Ok(WatchEvent::Deleted(cm)) => (cm, true),
                        Ok(WatchEvent::Bookmark(_)) => continue,
                        Ok(WatchEvent::Error(e)) => {
                            eprintln!("the watch through B ended: {e:?}");
                            return;
                        }
                        Err(e) => {
                            eprintln!("the watch through B failed: {e}");
                            return;
                        }
                    };
                    let seq = cm.data.as_ref().and_then(|d| d.get("seq")?.parse().ok());
                    let name = cm.metadata.name.unwrap_or_default();
                    watched
                        .lock()
                        .entry(name)
                        .or_default()
                        .push(if deleted { None } else { seq });
                }
                eprintln!("the watch through B ended");
            })
        };
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let mut writers = Vec::new();
        for w in 0..2 {
            let (api, history) = (
                Api::<ConfigMap>::namespaced(ca.clone(), "ryw"),
                history.clone(),
            );
            writers.push(tokio::spawn(async move {
                let mut seq = 0u64;
                let mut present = [false; 4];
                while Instant::now() < deadline {
                    for (i, here) in present.iter_mut().enumerate() {
                        let name = format!("w{w}-{i}");
                        seq += 1;
                        let sent = Instant::now();
                        // Create, update once, delete, over and over: each name's sequence
                        // number in its data.
                        let deleted = *here && seq.is_multiple_of(3);
                        history.lock().entry(name.clone()).or_default().push(Write {
                            seq,
                            deleted,
                            sent,
                            acked: None,
                        });
                        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
                            "metadata": {"name": name},
                            "data": {"seq": seq.to_string()},
                        }))
                        .expect("config map");
                        let result = if deleted {
                            api.delete(&name, &DeleteParams::default())
                                .await
                                .map(|_| ())
                        } else if *here {
                            api.replace(&name, &PostParams::default(), &cm)
                                .await
                                .map(|_| ())
                        } else {
                            api.create(&PostParams::default(), &cm).await.map(|_| ())
                        };
                        if let Err(e) = result {
                            panic!("write {seq} of {name} through gateway A: {e}");
                        }
                        *here = !deleted;
                        let acked = Instant::now();
                        if let Some(last) = history.lock().get_mut(&name).and_then(|v| v.last_mut())
                        {
                            last.acked = Some(acked);
                        }
                    }
                }
            }));
        }
        // Readers: consistent LISTs through gateway B, each kept with when it started.
        let mut readers = Vec::new();
        for _ in 0..2 {
            let api = Api::<ConfigMap>::namespaced(cb.clone(), "ryw");
            readers.push(tokio::spawn(async move {
                let mut reads = Vec::new();
                while Instant::now() < deadline {
                    let began = Instant::now();
                    let list = api
                        .list(&ListParams::default())
                        .await
                        .unwrap_or_else(|e| panic!("consistent LIST through gateway B: {e}"));
                    let ended = Instant::now();
                    let seen: BTreeMap<String, u64> = list
                        .items
                        .iter()
                        .filter_map(|cm| {
                            let seq = cm.data.as_ref()?.get("seq")?.parse().ok()?;
                            Some((cm.metadata.name.clone()?, seq))
                        })
                        .collect();
                    reads.push((began, ended, seen));
                }
                reads
            }));
        }
        for w in writers {
            w.await.expect("writer");
        }
        let mut reads = Vec::new();
        for r in readers {
            reads.extend(r.await.expect("reader"));
        }
        let history = history.lock().clone();
        // The watch has every write's event once the count is reached (or 30 s pass).
        let total: usize = history.values().map(Vec::len).sum();
        let until = Instant::now() + Duration::from_secs(30);
        while watched.lock().values().map(Vec::len).sum::<usize>() < total && Instant::now() < until
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        watcher.abort();
        let watched = watched.lock().clone();
        (history, reads, watched)
    });

    // The watch through B: each name's events are its writes, each once, in order (a
    // deletion's event carries the last state, not the delete's sequence number).
    for (name, writes) in &history {
        let want: Vec<Option<u64>> = writes
            .iter()
            .map(|w| (!w.deleted).then_some(w.seq))
            .collect();
        let got = watched.get(name).cloned().unwrap_or_default();
        assert_eq!(
            got, want,
            "the watch through B of {name}: events (left; None a deletion) and writes through A (right)"
        );
    }

    // Each read against every write acknowledged before it began: the read shows that
    // write or a later one of the same name that was sent before the read ended.
    let mut stale = Vec::new();
    let writes: usize = history.values().map(Vec::len).sum();
    for (began, ended, seen) in &reads {
        for (name, writes) in &history {
            let Some(floor) = writes
                .iter()
                .rev()
                .find(|w| w.acked.is_some_and(|t| t < *began))
            else {
                continue;
            };
            let possible = |w: &&Write| w.seq >= floor.seq && w.sent < *ended;
            let fine = match seen.get(name) {
                Some(seq) => writes
                    .iter()
                    .filter(possible)
                    .any(|w| w.seq == *seq && !w.deleted),
                None => writes.iter().filter(possible).any(|w| w.deleted),
            };
            if !fine {
                stale.push(format!(
                    "{name}: read saw {:?}, write {} ({}) was acknowledged before it began",
                    seen.get(name),
                    floor.seq,
                    if floor.deleted { "delete" } else { "write" }
                ));
            }
        }
    }
    eprintln!(
        "{test}: {writes} writes through A, {} consistent LISTs through B, {} stale; {:.1} s",
        reads.len(),
        stale.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        writes >= 40 && reads.len() >= 20,
        "too little ran: {writes} writes, {} reads",
        reads.len()
    );
    assert!(
        stale.is_empty(),
        "stale reads through B:\n{}",
        stale.join("\n")
    );
    // B served them (not passed through to kube-apiserver).
    assert!(served(&cluster, &b, "LIST", "configmaps") >= reads.len() as f64);
}
