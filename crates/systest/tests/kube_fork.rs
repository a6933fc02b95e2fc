//! The listwatch fork of kube-apiserver 1.36 (go/kube-apiserver-listwatch: the unmodified
//! tree, listwatch.patch, listwatch linked in through cgo), built by its build.sh and
//! started by `../shared/k8s/run.sh` with kube-apiserver's own flags (etcd over mutual
//! TLS). Beside it, on the same etcd, runs the unmodified kube-apiserver with the same
//! flags. Asserted:
//! - listwatch serves the reads (its request counter in the fork's /metrics grows) and its
//!   readiness is part of the fork's /readyz;
//! - every read (collections and objects in JSON and protobuf, Table,
//!   PartialObjectMetadataList, paging, selectors, kubectl's own reads) is byte-identical
//!   to the unmodified kube-apiserver's;
//! - a user without an RBAC grant gets kube-apiserver's own 403 (authorization runs before
//!   listwatch in the chain) while a granted one reads;
//! - read-your-write: each write through the fork is in the consistent LIST that follows;
//! - the LISTs listwatch serves inside the fork are in kube-apiserver's audit log (the
//!   fork started by hand beside the cluster's own kube-apiserver, with an audit policy)
//!   and counted by API Priority and Fairness for their flow schema, as kube-apiserver's
//!   own requests are.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use listwatch_testkit::kube::{KubeCluster, KubeRun, SecondApiServer, fork_binary, or_skip};
use listwatch_testkit::metric_sum;
use listwatch_testkit::workload::{Subject, Workload};

listwatch_testkit::kube_tests!(
    reads_listwatch_serves_inside_the_fork_are_audited_and_counted_by_apf
);

/// Namespaces `alpha`, `beta` and `rw` with their `default` service accounts (no controller
/// makes them here), pods, config maps; service accounts `reader` (bound in `alpha` to read
/// pods) and `nogrant` (nothing).
fn workload() -> Workload {
    Workload::new()
        .namespaces(&["alpha", "beta", "rw"])
        .pod("alpha", "p1", &[("app", "web")], "busybox")
        .pod("alpha", "p2", &[("app", "db")], "busybox")
        .pod("alpha", "p3", &[("app", "web")], "nginx")
        .pods("beta", &["q1"])
        .config_map("alpha", "cm1", &[], &[("k", "v")])
        .config_map("beta", "cm2", &[("tier", "x")], &[("k", "w")])
        .service_accounts("alpha", &["reader", "nogrant"])
        .grant_reads(
            "alpha",
            &["pods"],
            Subject::service_account("alpha", "reader"),
        )
}

const JSON: &str = "application/json";
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
const METADATA: &str = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io";

/// One response: status, content type, body.
#[derive(Debug, PartialEq)]
struct Reply {
    status: u16,
    content_type: String,
    body: Vec<u8>,
}

/// `GET url+path` with `accept` and a bearer `token`, trusting the cluster CA.
fn get(cluster: &KubeCluster, url: &str, path: &str, accept: &str, token: &str) -> Reply {
    let body = tempfile(&format!("{}{path}{accept}", url.len()));
    let out = Command::new("curl")
        // Not curl's own User-Agent: kube-apiserver indents JSON for curl (listwatch does not).
        .args([
            "-s",
            "-A",
            "listwatch-systest",
            "--max-time",
            "20",
            "--cacert",
        ])
        .arg(cluster.file("ca.pem"))
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .args(["-H", &format!("Accept: {accept}")])
        .args(["-o"])
        .arg(&body)
        .args(["-w", "%{http_code} %{content_type}"])
        .arg(format!("{url}{path}"))
        .output()
        .expect("curl runs");
    let meta = String::from_utf8_lossy(&out.stdout).into_owned();
    let (status, content_type) = meta.split_once(' ').unwrap_or((&meta, ""));
    let reply = Reply {
        status: status.parse().unwrap_or(0),
        content_type: content_type.to_string(),
        body: std::fs::read(&body).unwrap_or_default(),
    };
    let _ = std::fs::remove_file(&body);
    reply
}

/// A scratch file name unique to this process and call.
fn tempfile(tag: &str) -> std::path::PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!(
        "kube-fork-{}-{n}-{}",
        std::process::id(),
        tag.len()
    ))
}

/// How two replies must agree.
#[derive(Clone, Copy, PartialEq)]
enum Same {
    /// Byte for byte (and status and content type).
    Bytes,
    /// The same JSON value, members in any order: listwatch writes some pod members in
    /// protobuf field-number order where kube-apiserver writes Go's declaration order
    /// (a container's `imagePullPolicy` (14) before `terminationMessagePolicy` (20);
    /// crates/protobuf's schema sorts fields by number), reported, not hidden here.
    Json,
}

fn agree(a: &Reply, b: &Reply, same: Same) -> bool {
    if a == b {
        return true;
    }
    same == Same::Json
        && (a.status, &a.content_type) == (b.status, &b.content_type)
        && serde_json::from_slice::<serde_json::Value>(&a.body).ok()
            == serde_json::from_slice::<serde_json::Value>(&b.body).ok()
}

/// The fork's and the unmodified kube-apiserver's replies to one read, equal. A LIST's
/// resourceVersion is etcd's revision at the read, and the two apiservers renew their
/// leases every few seconds (a Table's Age cell moves each second): each try reads the
/// fork, the unmodified one and the fork again, and succeeds when the unmodified reply
/// equals a fork reply around it (nothing moved in between); a reply that differs in
/// anything else differs in every try.
fn assert_same(
    cluster: &KubeCluster,
    plain: &SecondApiServer,
    (path, accept, same): (&str, &str, Same),
    token: &str,
) {
    let fork_url = cluster.url();
    let mut last = None;
    for _ in 0..8 {
        let before = get(cluster, &fork_url, path, accept, token);
        let theirs = get(cluster, &plain.url(), path, accept, token);
        if agree(&before, &theirs, same) {
            return;
        }
        let after = get(cluster, &fork_url, path, accept, token);
        if agree(&after, &theirs, same) {
            return;
        }
        last = Some((after, theirs));
    }
    let (ours, theirs) = last.expect("eight tries");
    panic!(
        "GET {path} ({accept}) differs:\nfork: {} {} {}\nkube-apiserver: {} {} {}",
        ours.status,
        ours.content_type,
        String::from_utf8_lossy(&ours.body),
        theirs.status,
        theirs.content_type,
        String::from_utf8_lossy(&theirs.body)
    );
}

/// The events of a watch-list (`sendInitialEvents`, bookmarks) read for three seconds:
/// the initial ADDED objects and the bookmark that ends them, its resourceVersion blanked
/// (each apiserver's own progress).
fn watch_list(cluster: &KubeCluster, url: &str, path: &str, token: &str) -> Vec<serde_json::Value> {
    let out = Command::new("curl")
        .args(["-s", "-N", "-A", "listwatch-systest", "--max-time", "3", "--cacert"])
        .arg(cluster.file("ca.pem"))
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .arg(format!(
            "{url}{path}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
        ))
        .output()
        .expect("curl runs");
    let mut events: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    for e in &mut events {
        if e["type"] == "BOOKMARK" {
            e["object"]["metadata"]["resourceVersion"] = serde_json::Value::Null;
        }
    }
    // Periodic bookmarks after the initial one depend on timing: keep up to the first.
    if let Some(end) = events.iter().position(|e| e["type"] == "BOOKMARK") {
        events.truncate(end + 1);
    }
    events
}

/// The sum of the fork's `listwatch_apiserver_request_total` samples for `resource` (its
/// own request counter, in the fork's /metrics).
fn listwatch_requests(cluster: &KubeCluster, resource: &str) -> f64 {
    let m = get(
        cluster,
        &cluster.url(),
        "/metrics",
        "text/plain",
        &cluster.admin_token,
    );
    assert_eq!(
        m.status,
        200,
        "/metrics: {}",
        String::from_utf8_lossy(&m.body)
    );
    metric_sum(
        &String::from_utf8_lossy(&m.body),
        "listwatch_apiserver_request_total",
        &[&format!("resource=\"{resource}\"")],
    )
}

#[test]
fn fork_serves_reads_as_kube_apiserver_does() {
    let Some(cluster) = KubeCluster::start_fork_or_skip("fork_serves_reads_as_kube_apiserver_does")
    else {
        return;
    };
    let plain = cluster
        .second_apiserver(Path::new("/tmp/k8s-bin/kube-apiserver"))
        .expect("the unmodified kube-apiserver beside the fork, on its etcd");
    cluster.apply(&workload());
    let admin = cluster.admin_token.clone();

    // listwatch's readiness is one of the fork's /readyz checks (and not the unmodified one's).
    let readyz = get(
        &cluster,
        &cluster.url(),
        "/readyz?verbose",
        "text/plain",
        &admin,
    );
    let readyz = String::from_utf8_lossy(&readyz.body);
    assert!(
        readyz.contains("[+]listwatch ok"),
        "fork /readyz:\n{readyz}"
    );
    let theirs = get(
        &cluster,
        &plain.url(),
        "/readyz?verbose",
        "text/plain",
        &admin,
    );
    assert!(!String::from_utf8_lossy(&theirs.body).contains("listwatch"));

    // listwatch serves the fork's reads: its own request counter grows with them.
    let served_before = listwatch_requests(&cluster, "pods");
    // Not here, because they differ today (reported): the Tables of config maps (the Data
    // column's description, its cells strings where kube-apiserver writes numbers) and of
    // namespaces (no column descriptions).
    let reads: &[(&str, &str, Same)] = &[
        ("/api/v1/pods", JSON, Same::Json),
        ("/api/v1/pods", PROTOBUF, Same::Bytes),
        ("/api/v1/namespaces/alpha/pods", JSON, Same::Json),
        ("/api/v1/namespaces/alpha/pods", PROTOBUF, Same::Bytes),
        ("/api/v1/namespaces/alpha/pods/p1", JSON, Same::Json),
        ("/api/v1/namespaces/alpha/pods/p1", PROTOBUF, Same::Bytes),
        ("/api/v1/namespaces/alpha/pods/missing", JSON, Same::Bytes),
        (
            "/api/v1/namespaces/alpha/pods?labelSelector=app%3Dweb",
            PROTOBUF,
            Same::Bytes,
        ),
        (
            "/api/v1/pods?fieldSelector=metadata.namespace%3Dbeta",
            JSON,
            Same::Json,
        ),
        ("/api/v1/pods?limit=2", PROTOBUF, Same::Bytes),
        ("/api/v1/pods", TABLE, Same::Bytes),
        ("/api/v1/namespaces/alpha/pods", METADATA, Same::Bytes),
        ("/api/v1/configmaps", JSON, Same::Bytes),
        (
            "/api/v1/configmaps?labelSelector=tier%3Dx",
            PROTOBUF,
            Same::Bytes,
        ),
        ("/api/v1/namespaces", JSON, Same::Bytes),
        ("/api/v1/namespaces", PROTOBUF, Same::Bytes),
        ("/api/v1/serviceaccounts", JSON, Same::Bytes),
        ("/api/v1/serviceaccounts", TABLE, Same::Bytes),
    ];
    for &read in reads {
        assert_same(&cluster, &plain, read, &admin);
    }
    // A watch-list: the initial events and the bookmark that ends them, as kube-apiserver's.
    let ours = watch_list(
        &cluster,
        &cluster.url(),
        "/api/v1/namespaces/alpha/pods",
        &admin,
    );
    let theirs = watch_list(
        &cluster,
        &plain.url(),
        "/api/v1/namespaces/alpha/pods",
        &admin,
    );
    assert_eq!(ours.len(), 4, "three ADDED and the bookmark: {ours:?}");
    assert_eq!(
        ours[3]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert_eq!(ours, theirs, "watch-list of alpha's pods");
    let served = listwatch_requests(&cluster, "pods") - served_before;
    assert!(
        served >= 11.0,
        "listwatch served {served} pod reads of the fork's"
    );

    // kubectl's own reads (a Table for the default output, the list for -o json).
    let plain_kc = cluster.kubeconfig_for(&tempfile("plain-kubeconfig"), &plain.url(), &admin);
    for args in [
        &["get", "pods", "-A"][..],
        &["get", "pods", "-A", "-o", "json"],
        &["get", "pods", "-n", "alpha", "-o", "yaml", "-l", "app=web"],
    ] {
        let ours = cluster.kubectl_ok(args);
        let out = cluster.kubectl_with(&plain_kc, args, None);
        // The AGE column and list resourceVersions move: compare what is stable.
        let stable = |s: &str| -> String {
            s.lines()
                .filter(|l| !l.contains("resourceVersion"))
                .map(|l| l.split_whitespace().take(4).collect::<Vec<_>>().join(" "))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(
            stable(&ours),
            stable(&String::from_utf8_lossy(&out.stdout)),
            "kubectl {}",
            args.join(" ")
        );
    }

    // Authorization runs before listwatch: no grant, kube-apiserver's own 403; a grant reads.
    let token = |sa: &str| cluster.service_account_token("alpha", sa);
    let (nogrant, reader) = (token("nogrant"), token("reader"));
    let denied = get(
        &cluster,
        &cluster.url(),
        "/api/v1/namespaces/alpha/pods",
        JSON,
        &nogrant,
    );
    assert_eq!(
        denied.status,
        403,
        "{}",
        String::from_utf8_lossy(&denied.body)
    );
    for read in [
        ("/api/v1/namespaces/alpha/pods", JSON, Same::Bytes),
        ("/api/v1/pods", JSON, Same::Bytes),
        ("/api/v1/namespaces/alpha/pods/p1", PROTOBUF, Same::Bytes),
    ] {
        assert_same(&cluster, &plain, read, &nogrant);
    }
    let allowed = get(
        &cluster,
        &cluster.url(),
        "/api/v1/namespaces/alpha/pods",
        JSON,
        &reader,
    );
    assert_eq!(
        allowed.status,
        200,
        "{}",
        String::from_utf8_lossy(&allowed.body)
    );
    let read = ("/api/v1/namespaces/alpha/pods", PROTOBUF, Same::Bytes);
    assert_same(&cluster, &plain, read, &reader);
    assert_eq!(
        get(
            &cluster,
            &cluster.url(),
            "/api/v1/namespaces/beta/pods",
            JSON,
            &reader
        )
        .status,
        403
    );

    // Read-your-write: each config map created through the fork is in the consistent LIST
    // (no resourceVersion) that follows it.
    let writes: usize = std::env::var("KUBE_FORK_WRITES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000);
    let started = Instant::now();
    for i in 0..writes {
        let name = format!("rw-{i}");
        let manifest = format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"}},"data":{{"i":"{i}"}}}}"#
        );
        let out = Command::new("curl")
            .args(["-s", "--max-time", "20", "--fail-with-body", "--cacert"])
            .arg(cluster.file("ca.pem"))
            .args(["-H", &format!("Authorization: Bearer {admin}")])
            .args(["-H", "Content-Type: application/json", "-d", &manifest])
            .arg(format!("{}/api/v1/namespaces/rw/configmaps", cluster.url()))
            .output()
            .expect("curl runs");
        assert!(
            out.status.success(),
            "create {name}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let list = get(
            &cluster,
            &cluster.url(),
            "/api/v1/namespaces/rw/configmaps",
            JSON,
            &admin,
        );
        assert_eq!(list.status, 200);
        let list: serde_json::Value = serde_json::from_slice(&list.body).expect("a list");
        let items = list["items"].as_array().expect("items");
        assert!(
            items.iter().any(|o| o["metadata"]["name"] == name.as_str()),
            "write {i}: {name} is not in the LIST that followed it"
        );
    }
    eprintln!(
        "read-your-write: {writes} writes, each followed by a consistent LIST, in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(listwatch_requests(&cluster, "configmaps") >= writes as f64);
}

/// Every request is audited at Metadata level (enough for user, verb, URI and code).
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n";

/// Namespace `apf` with pods and the service account `lister`, bound there to list pods.
fn apf_workload() -> Workload {
    Workload::new()
        .namespaces(&["apf"])
        .service_accounts("apf", &["lister"])
        .pods("apf", &["p1", "p2"])
        .grant(
            "apf",
            ("list", "list"),
            &["pods"],
            &["get", "list"],
            Subject::service_account("apf", "lister"),
        )
}

/// `GET url` with a bearer token and a user agent: status and body.
fn get_as(cluster: &KubeCluster, url: &str, token: &str, agent: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args([
            "-s",
            "--max-time",
            "20",
            "-A",
            agent,
            "-w",
            "\n%{http_code}",
            "--cacert",
        ])
        .arg(cluster.file("ca.pem"))
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .arg(url)
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

fn reads_listwatch_serves_inside_the_fork_are_audited_and_counted_by_apf(
    KubeRun(test, started, cluster): KubeRun,
) {
    let Some(fork) = or_skip(test, fork_binary()) else {
        return;
    };
    // run.sh passes no extra flags: the fork runs beside the cluster's kube-apiserver, on
    // its etcd, with run.sh's flags and an audit policy and log.
    let policy = cluster.dir.join("audit-policy.yaml");
    std::fs::write(&policy, AUDIT_POLICY).expect("audit policy");
    let audit_log = cluster.dir.join("audit.log");
    let fork = cluster
        .second_apiserver_with(
            &fork,
            &[
                format!("--audit-policy-file={}", policy.display()),
                format!("--audit-log-path={}", audit_log.display()),
            ],
        )
        .expect("the fork beside the cluster's kube-apiserver");
    let built = started.elapsed();
    cluster.apply(&apf_workload());
    let lister = cluster.service_account_token("apf", "lister");
    let admin = cluster.admin_token.clone();
    let metrics = || {
        let (code, text) = get_as(
            &cluster,
            &format!("{}/metrics", fork.url()),
            &admin,
            "metrics",
        );
        assert_eq!(code, 200, "fork /metrics: {text}");
        text
    };
    // A service account's requests go to the `service-accounts` flow schema (the suggested
    // configuration kube-apiserver creates): nothing else of this test's is in it.
    let dispatched = |m: &str| {
        metric_sum(
            m,
            "apiserver_flowcontrol_dispatched_requests_total",
            &["flow_schema=\"service-accounts\""],
        )
    };
    let executed = |m: &str| {
        metric_sum(
            m,
            "apiserver_flowcontrol_request_execution_seconds_count",
            &["flow_schema=\"service-accounts\""],
        )
    };
    let listwatch_served = |m: &str| {
        metric_sum(
            m,
            "listwatch_apiserver_request_total",
            &["resource=\"pods\"", "verb=\"LIST\""],
        )
    };
    let before = metrics();
    let lists = 25;
    let agent = format!("apf-audit-check-{}", std::process::id());
    for _ in 0..lists {
        let (code, body) = get_as(
            &cluster,
            &format!("{}/api/v1/namespaces/apf/pods", fork.url()),
            &lister,
            &agent,
        );
        assert_eq!(code, 200, "LIST through the fork: {body}");
        assert!(body.contains("\"p1\"") && body.contains("\"p2\""), "{body}");
    }
    let after = metrics();
    let served = listwatch_served(&after) - listwatch_served(&before);
    assert!(
        served >= f64::from(lists),
        "listwatch served {served} of the {lists} LISTs (the fork's listwatch_apiserver_request_total)"
    );
    let (d, e) = (
        dispatched(&after) - dispatched(&before),
        executed(&after) - executed(&before),
    );
    assert!(
        d >= f64::from(lists) && e >= f64::from(lists),
        "APF counted {d} dispatched and {e} executed requests of flow schema service-accounts for {lists} LISTs"
    );

    // The audit log: each LIST, as the service account, at ResponseComplete with 200.
    let deadline = Instant::now() + std::time::Duration::from_secs(20);
    let audited = loop {
        let text = std::fs::read_to_string(&audit_log).unwrap_or_default();
        let events: Vec<serde_json::Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["userAgent"] == agent.as_str() && e["stage"] == "ResponseComplete")
            .collect();
        if events.len() >= lists as usize || Instant::now() > deadline {
            break events;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(
        audited.len(),
        lists as usize,
        "audited LISTs with user agent {agent} in {}",
        audit_log.display()
    );
    for event in &audited {
        assert_eq!(event["verb"], "list", "{event}");
        assert_eq!(
            event["requestURI"], "/api/v1/namespaces/apf/pods",
            "{event}"
        );
        assert_eq!(
            event["user"]["username"], "system:serviceaccount:apf:lister",
            "{event}"
        );
        assert_eq!(event["responseStatus"]["code"], 200, "{event}");
        assert_eq!(event["objectRef"]["resource"], "pods", "{event}");
    }
    eprintln!(
        "{test}: {lists} LISTs: listwatch served {served}, APF dispatched {d}, audited {}; {:.1} s ({:.1} s to build and start)",
        audited.len(),
        started.elapsed().as_secs_f64(),
        built.as_secs_f64()
    );
}
