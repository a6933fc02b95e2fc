//! The deployment artifacts (`deploy/`, docs/deploy.md) against real things: each kustomize
//! base is accepted by kube-apiserver 1.36 (`kubectl apply --dry-run=server -k`) and passes
//! only flags `listwatch serve` knows; the gateway's ClusterRole is enough for listwatch to follow the cluster, review tokens and
//! access, and pass requests on as their clients (and grants no more); and
//! `deploy/image.sh` builds an image whose entrypoint, run from the image's own root
//! filesystem as the image's non-root user, is listwatch.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use listwatch_testkit::kube::{KubeCluster, listwatch_binary};
use listwatch_testkit::workload::{Subject, Workload, custom_resource_definition};

/// The repository's `deploy/` folder.
fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// `deploy/<base>` as kubectl's argument.
fn base(name: &str) -> String {
    deploy_dir().join(name).display().to_string()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Held by each test that starts a cluster: two starting at once on this test process can
/// pick overlapping ports (kube-apiserver's and the other etcd's peer port), and two
/// clusters at once only slow each other on a 2-core machine.
static ONE_CLUSTER: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A cluster for `test` alone (it holds [`ONE_CLUSTER`], whether or not a test holding it
/// before failed) with the namespace the gateway base names, which is left for the
/// operator to create (docs/deploy.md); `None` when the test is skipped.
fn cluster_with_listwatch_namespace(
    test: &str,
) -> Option<(std::sync::MutexGuard<'static, ()>, KubeCluster)> {
    let one = ONE_CLUSTER
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let cluster = KubeCluster::start_or_skip(test)?;
    cluster.kubectl_ok(&["create", "namespace", "listwatch"]);
    Some((one, cluster))
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A ServiceMonitor CRD of our own making: the Prometheus operator's cannot be fetched here.
/// Its schema keeps every field (`x-kubernetes-preserve-unknown-fields`), so the dry run
/// below proves the kind, group, version, scope and object metadata are accepted, not the
/// operator's validation of the endpoint fields.
fn service_monitor_crd() -> Workload {
    Workload::new().object(custom_resource_definition(
        "monitoring.coreos.com",
        "Namespaced",
        ("ServiceMonitor", "servicemonitors"),
        serde_json::json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
    ))
}

#[test]
fn each_kustomize_base_is_accepted_by_kube_apiserver() {
    let test = "each_kustomize_base_is_accepted_by_kube_apiserver";
    let Some((_one, cluster)) = cluster_with_listwatch_namespace(test) else {
        return;
    };
    // What a cluster has and this one lacks (no controllers): kube-system's `default`
    // service account, which admission looks up for the static pod.
    cluster.kubectl_ok(&["create", "serviceaccount", "default", "-n", "kube-system"]);

    let dry_run = |dir: &str| cluster.kubectl(&["apply", "--dry-run=server", "-k", &base(dir)]);
    let accepted = |dir: &str, want: &[&str]| {
        let out = dry_run(dir);
        assert!(
            out.status.success(),
            "kubectl apply --dry-run=server -k deploy/{dir}: {}",
            text(&out.stderr)
        );
        let said = text(&out.stdout);
        for object in want {
            assert!(
                said.contains(&format!("{object} created (server dry run)")),
                "deploy/{dir}: {object} not created in the dry run:\n{said}"
            );
        }
    };
    accepted(
        "gateway",
        &[
            "serviceaccount/listwatch",
            "clusterrole.rbac.authorization.k8s.io/listwatch",
            "clusterrolebinding.rbac.authorization.k8s.io/listwatch",
            "service/listwatch",
            "deployment.apps/listwatch",
            "poddisruptionbudget.policy/listwatch",
        ],
    );
    accepted("etcd-source", &["pod/listwatch-etcd"]);

    // The ServiceMonitor is refused where the Prometheus operator's CRD is missing: the
    // reason it is kept out of the gateway base.
    let out = dry_run("gateway/monitoring");
    assert!(
        !out.status.success() && text(&out.stderr).contains("ServiceMonitor"),
        "a ServiceMonitor without its CRD: {} {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    cluster.apply(&service_monitor_crd());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = dry_run("gateway/monitoring");
        if out.status.success() {
            assert!(
                text(&out.stdout).contains(
                    "servicemonitor.monitoring.coreos.com/listwatch created (server dry run)"
                ),
                "{}",
                text(&out.stdout)
            );
            break;
        }
        // The CRD's kind is served once it is established.
        assert!(
            Instant::now() < deadline,
            "deploy/gateway/monitoring with the CRD: {}",
            text(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn every_flag_the_manifests_pass_is_one_listwatch_serve_knows() {
    // What each base renders to (comments dropped), as the kubelet would run it.
    let help = Command::new(listwatch_binary())
        .args(["serve", "--help"])
        .output()
        .expect("listwatch serve --help");
    let help = text(&help.stdout);
    let mut checked = 0;
    for dir in ["gateway", "etcd-source"] {
        let rendered = run_ok("kubectl", &["kustomize", &base(dir)]);
        for line in text(&rendered.stdout).lines() {
            let Some(flag) = line.trim().strip_prefix("- --") else {
                continue;
            };
            let name = flag.split('=').next().unwrap_or(flag);
            assert!(
                help.contains(&format!("--{name}")),
                "deploy/{dir} passes --{name}, which `listwatch serve` does not know"
            );
            checked += 1;
        }
    }
    assert!(
        checked > 20,
        "only {checked} flags found in the rendered bases"
    );
}

/// Namespace `alpha` (with the `default` service account no controller makes here), a pod,
/// and service account `reader` bound there to read pods only; `listwatch`'s `default`
/// service account.
fn workload() -> Workload {
    Workload::new()
        .namespaces(&["alpha"])
        .service_accounts("listwatch", &["default"])
        .pods("alpha", &["p1"])
        .service_accounts("alpha", &["reader"])
        .grant_reads(
            "alpha",
            &["pods"],
            Subject::service_account("alpha", "reader"),
        )
}

#[test]
fn the_gateway_deployment_runs_as_its_pod_would_with_only_its_cluster_role() {
    let test = "the_gateway_deployment_runs_as_its_pod_would_with_only_its_cluster_role";
    let Some((_one, cluster)) = cluster_with_listwatch_namespace(test) else {
        return;
    };
    // The base's RBAC as it is applied (the Deployment is stored too; no controller runs it).
    cluster.kubectl_ok(&["apply", "-k", &base("gateway")]);
    cluster.apply(&workload());

    // What the role grants, and what it does not, asked as SubjectAccessReviews (kubectl
    // auth can-i cannot name `uids` and `userextras`, which no API serves): the gateway
    // writes and reads nothing with its own identity beyond list and watch. Each request is
    // written as for `kubectl auth can-i`: `VERB RESOURCE[.GROUP][/SUBRESOURCE] [-n NS]`.
    let allowed = |request: &str| {
        let words: Vec<&str> = request.split_whitespace().collect();
        let (verb, target) = (words[0], words[1]);
        let ns = match &words[2..] {
            [] => "",
            ["-n", ns] => *ns,
            rest => panic!("{request}: {rest:?} is not `-n NAMESPACE`"),
        };
        let (resource, subresource) = target.split_once('/').unwrap_or((target, ""));
        let (resource, group) = resource.split_once('.').unwrap_or((resource, ""));
        let review = format!(
            "apiVersion: authorization.k8s.io/v1\nkind: SubjectAccessReview\nspec:\n  \
             user: system:serviceaccount:listwatch:listwatch\n  \
             groups: [system:serviceaccounts, system:serviceaccounts:listwatch, system:authenticated]\n  \
             resourceAttributes: {{verb: {verb}, group: '{group}', resource: {resource}, \
             subresource: '{subresource}', namespace: '{ns}'}}\n"
        );
        let said = cluster.kubectl_ok_with(
            &["create", "-f", "-", "-o", "jsonpath={.status.allowed}"],
            Some(&review),
        );
        said.trim() == "true"
    };
    for (request, granted) in [
        ("list secrets", true),
        ("watch pods -n alpha", true),
        ("list customresourcedefinitions.apiextensions.k8s.io", true),
        ("watch widgets.example.com -n alpha", true),
        ("create tokenreviews.authentication.k8s.io", true),
        ("create subjectaccessreviews.authorization.k8s.io", true),
        ("impersonate users", true),
        ("impersonate groups", true),
        ("impersonate serviceaccounts -n alpha", true),
        ("impersonate uids.authentication.k8s.io", true),
        ("impersonate userextras.authentication.k8s.io/scopes", true),
        (
            "impersonate userextras.authentication.k8s.io/authentication.kubernetes.io/credential-id",
            true,
        ),
        ("get secrets -n alpha", false),
        ("create pods -n alpha", false),
        ("delete nodes", false),
        ("update clusterroles.rbac.authorization.k8s.io", false),
        ("create serviceaccounts/token -n alpha", false),
        ("get pods/log -n alpha", false),
        ("create pods/exec -n alpha", false),
    ] {
        let should = if granted { "should" } else { "should not" };
        assert_eq!(
            allowed(request),
            granted,
            "the ClusterRole {should} grant {request}"
        );
    }

    // The Deployment's own container, as its pod would run it: the arguments it was applied
    // with, the service account's token, the cluster CA and namespace where the kubelet
    // mounts them (a directory here), KUBERNETES_SERVICE_HOST/PORT, the serving certificate
    // where the Secret is mounted. Only the addresses change: servers here bind 127.0.0.1.
    let dir = std::env::temp_dir().join(format!("lw-kube-deploy-{}", std::process::id()));
    let mount = dir.join("serviceaccount");
    let serving = dir.join("serving");
    std::fs::create_dir_all(&mount).expect("dir");
    std::fs::create_dir_all(&serving).expect("dir");
    std::fs::write(
        mount.join("token"),
        cluster.service_account_token("listwatch", "listwatch"),
    )
    .expect("token");
    std::fs::copy(cluster.file("ca.pem"), mount.join("ca.crt")).expect("ca.crt");
    std::fs::write(mount.join("namespace"), "listwatch").expect("namespace");
    let (cert, key) = cluster.serving_cert(&serving, "listwatch");
    std::fs::rename(cert, serving.join("tls.crt")).expect("tls.crt");
    std::fs::rename(key, serving.join("tls.key")).expect("tls.key");
    let applied = cluster.kubectl_ok(&[
        "get",
        "deployment",
        "listwatch",
        "-n",
        "listwatch",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].args}",
    ]);
    let applied: Vec<String> = serde_json::from_str(&applied).expect("the container's args");
    let port = listwatch_testkit::unlisted_port();
    let sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount";
    let mut rewritten = 0;
    let args: Vec<String> = applied
        .iter()
        .map(|arg| {
            let new = match arg.as_str() {
                "--bind-address=0.0.0.0" => "--bind-address=127.0.0.1".to_string(),
                "--secure-port=6443" => format!("--secure-port={port}"),
                a if a.contains("/etc/listwatch/serving/") => {
                    a.replace("/etc/listwatch/serving", &serving.display().to_string())
                }
                a if a.contains(sa_dir) => a.replace(sa_dir, &mount.display().to_string()),
                a => return a.to_string(),
            };
            rewritten += 1;
            new
        })
        .collect();
    // Address, port, certificate, key and client CA: a manifest change shows here.
    assert_eq!(rewritten, 5, "the Deployment's args changed: {applied:?}");
    let log = dir.join("listwatch.log");
    let log_file = std::fs::File::create(&log).expect("log");
    let mut server = Killed(
        Command::new(listwatch_binary())
            .args(&args)
            .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
            .env("KUBERNETES_SERVICE_PORT", cluster.port.to_string())
            .env("LISTWATCH_SERVICE_ACCOUNT_DIR", &mount)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log"))
            .stderr(log_file)
            .spawn()
            .expect("listwatch starts"),
    );
    // Ready means every listable resource is followed: the role's list and watch suffice.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let out = Command::new("curl")
            .args(["-s", "--max-time", "2", "--cacert"])
            .arg(cluster.file("ca.pem"))
            .arg(format!("https://127.0.0.1:{port}/readyz"))
            .output()
            .expect("curl");
        if out.stdout == b"ok" {
            break;
        }
        if let Ok(Some(status)) = server.0.try_wait() {
            panic!(
                "listwatch {args:?} exited ({status}): {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "listwatch not ready with the ClusterRole's grants: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let server = format!("https://127.0.0.1:{port}");
    let reader = cluster.kubeconfig_for(
        &dir.join("reader.kubeconfig"),
        &server,
        &cluster.service_account_token("alpha", "reader"),
    );
    let admin =
        cluster.kubeconfig_for(&dir.join("admin.kubeconfig"), &server, &cluster.admin_token);

    // Served here: the reader's token reviewed upstream (tokenreviews), its read authorized
    // by the cluster's rules (subjectaccessreviews).
    let (ok, said) = cluster.kubectl_as(&reader, &["get", "pods", "-n", "alpha", "-o", "name"]);
    assert!(
        ok && said == "pod/p1\n",
        "reader lists alpha's pods: {said}"
    );
    let (ok, said) = cluster.kubectl_as(&reader, &["get", "secrets", "-n", "alpha"]);
    assert!(
        !ok && said.contains("Forbidden"),
        "reader lists secrets: {said}"
    );
    // Passed on as the client: a service account impersonated (serviceaccounts, groups,
    // uids, userextras) is refused by the upstream as itself, not the impersonation.
    let create = [
        "create",
        "configmap",
        "c",
        "-n",
        "alpha",
        "--from-literal=a=b",
    ];
    let (ok, said) = cluster.kubectl_as(&reader, &create);
    assert!(
        !ok && said.contains(
            r#"User "system:serviceaccount:alpha:reader" cannot create resource "configmaps""#
        ),
        "reader's create passed on as reader: {said}"
    );
    // The cluster's admin (system:masters, impersonated by user and group) writes through it.
    let (ok, said) = cluster.kubectl_as(&admin, &create);
    assert!(ok, "admin's create passed on: {said}");
    let stored = cluster.kubectl_ok(&[
        "get",
        "configmap",
        "c",
        "-n",
        "alpha",
        "-o",
        "jsonpath={.data.a}",
    ]);
    assert_eq!(stored, "b", "the configmap reached the cluster");
    // A client certificate of the cluster CA (the service-account ca.crt the Deployment
    // names as --client-ca-file), as a kubelet or an admin has: authenticated here, and
    // its user carried upstream.
    // An X.509 v3 client certificate, as kubeadm and the kubelet's CSRs make them (webpki
    // refuses v1 certificates).
    let (carol_cert, carol_key) = cluster.signed_cert(
        &dir,
        "carol",
        "/CN=carol",
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n",
    );
    let carol = cluster.kubeconfig_with(
        &dir.join("carol.kubeconfig"),
        &server,
        &[
            ("client-certificate", &carol_cert.display().to_string()),
            ("client-key", &carol_key.display().to_string()),
        ],
    );
    let (ok, said) = cluster.kubectl_as(&carol, &["get", "pods", "-n", "alpha"]);
    assert!(
        !ok && said.contains(r#"User "carol" cannot list resource "pods""#),
        "carol, no grant, served here: {said}"
    );
    let (ok, said) = cluster.kubectl_as(
        &carol,
        &[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
    );
    assert!(ok && said == "carol", "carol upstream: {said}");

    // What docs/deploy.md says to watch is there, for a caller allowed /metrics.
    let out = Command::new("curl")
        .args(["-s", "--max-time", "5", "--cacert"])
        .arg(cluster.file("ca.pem"))
        .arg("-H")
        .arg(format!("Authorization: Bearer {}", cluster.admin_token))
        .arg(format!("{server}/metrics"))
        .output()
        .expect("curl");
    let metrics = text(&out.stdout);
    for name in [
        "apiserver_request_total",
        "apiserver_storage_objects",
        "listwatch_watch_lag_events",
        // The source's own (relists and resumes appear per resource once one happens).
        "listwatch_upstream_consistent_probes_total",
        "listwatch_upstream_proof_lists_total",
        "listwatch_gateway_requests_total",
        "listwatch_gateway_upstream_errors_total",
        "process_resident_memory_bytes",
    ] {
        assert!(metrics.contains(name), "/metrics has no {name}:\n{metrics}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `program ARGS`, which must succeed: its output.
fn run_ok(program: &str, args: &[&str]) -> Output {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {}: {}",
        args.join(" "),
        text(&out.stderr)
    );
    out
}

/// The image's tags and its mount, removed when the test ends, pass or fail.
struct Image {
    podman: Vec<String>,
    names: Vec<String>,
    mounted: bool,
}

impl Drop for Image {
    fn drop(&mut self) {
        let podman = |args: &[&str]| {
            let _ = Command::new("podman")
                .args(&self.podman)
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        };
        if self.mounted {
            podman(&["image", "unmount", &self.names[0]]);
        }
        for name in &self.names {
            podman(&["rmi", name]);
        }
    }
}

#[test]
fn the_image_s_entrypoint_is_listwatch_run_as_its_non_root_user() {
    let test = "the_image_s_entrypoint_is_listwatch_run_as_its_non_root_user";
    for tool in ["buildah", "podman", "chroot"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            eprintln!("{test}: skipped: {tool} is missing (apt-get install buildah podman)");
            return;
        }
    }
    if !nix_root() {
        eprintln!("{test}: skipped: podman image mount and chroot need root");
        return;
    }
    let version = env!("CARGO_PKG_VERSION");
    // A repository of this run's own, so parallel runs and the operator's images are left alone.
    let repo = format!("localhost/listwatch-systest-{}", std::process::id());
    let out = Command::new(deploy_dir().join("image.sh"))
        .arg(listwatch_binary())
        .env("LISTWATCH_IMAGE", &repo)
        .stdin(Stdio::null())
        .output()
        .expect("deploy/image.sh runs");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "deploy/image.sh: {stderr}");
    let image = stdout.lines().last().unwrap_or_default().to_string();
    let mut cleanup = Image {
        podman: Vec::new(),
        names: vec![image.clone(), format!("{repo}:{version}")],
        mounted: false,
    };
    assert!(
        image.starts_with(&format!("{repo}:{version}-")),
        "the last line names the image: {stdout}"
    );
    // Built with vfs where overlay cannot mount: podman must look in the same storage.
    if let Some(driver) = stderr
        .lines()
        .find_map(|l| l.strip_prefix("image.sh: storage driver "))
    {
        cleanup.podman = vec!["--storage-driver".into(), driver.trim().into()];
    }
    let podman = |args: &[&str]| {
        let mut all: Vec<&str> = cleanup.podman.iter().map(String::as_str).collect();
        all.extend_from_slice(args);
        run_ok("podman", &all)
    };

    // The image's configuration: user, entrypoint, labels.
    let inspect = podman(&["image", "inspect", &image]);
    let inspect: serde_json::Value = serde_json::from_slice(&inspect.stdout).expect("inspect JSON");
    let config = &inspect[0]["Config"];
    let user = config["User"].as_str().unwrap_or_default().to_string();
    let uid = user.split(':').next().unwrap_or_default();
    assert!(
        uid.parse::<u32>().is_ok_and(|u| u != 0),
        "the image runs as a non-root uid: {config}"
    );
    let entrypoint: Vec<String> = config["Entrypoint"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(entrypoint, ["/listwatch"], "entrypoint: {config}");
    let labels = &config["Labels"];
    assert_eq!(
        labels["org.opencontainers.image.version"], version,
        "{labels}"
    );
    let head = run_ok(
        "git",
        &["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "HEAD"],
    );
    assert_eq!(
        labels["org.opencontainers.image.revision"],
        text(&head.stdout).trim(),
        "{labels}"
    );

    // Its root filesystem: the user is named there (not root), and the entrypoint runs as
    // that user from inside it, with nothing from the host.
    let mount = podman(&["image", "mount", &image]);
    cleanup.mounted = true;
    let root = text(&mount.stdout).trim().to_string();
    let passwd = std::fs::read_to_string(Path::new(&root).join("etc/passwd")).expect("/etc/passwd");
    assert!(
        passwd
            .lines()
            .any(|l| l.split(':').nth(2) == Some(uid) && !l.starts_with("root:")),
        "uid {uid} in the image's /etc/passwd: {passwd}"
    );
    let userspec = if user.contains(':') {
        user.clone()
    } else {
        format!("{user}:{user}")
    };
    let run = |args: &[&str]| {
        Command::new("chroot")
            .arg(format!("--userspec={userspec}"))
            .arg(&root)
            .args(&entrypoint)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("chroot runs")
    };
    let out = run(&["--version"]);
    let said = text(&out.stdout);
    assert!(
        out.status.success() && said.starts_with(&format!("listwatch {version}")),
        "{image}'s /listwatch --version: {said} {}",
        text(&out.stderr)
    );
    // It serves, too: the libraries copied in are all the server needs.
    let port = listwatch_testkit::unlisted_port();
    let _server = Killed(
        Command::new("chroot")
            .arg(format!("--userspec={userspec}"))
            .arg(&root)
            .args(&entrypoint)
            .args([
                "serve",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--demo-pods",
                "3",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chroot runs"),
    );
    let pods = listwatch_testkit::curl_until(
        &format!("http://127.0.0.1:{port}/api/v1/pods"),
        Duration::from_secs(30),
        |body| serde_json::from_slice::<serde_json::Value>(body).is_ok(),
    );
    let body = text(&pods);
    let list: serde_json::Value = serde_json::from_str(&body)
        .unwrap_or_else(|_| panic!("the image's listwatch serves: {body}"));
    let items = list["items"].as_array().map_or(0, Vec::len);
    assert_eq!(
        (list["kind"].as_str(), items),
        (Some("PodList"), 3),
        "{body}"
    );
}

/// Whether this process runs as root (podman's image mount and chroot need it).
fn nix_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| text(&o.stdout).trim() == "0")
}
