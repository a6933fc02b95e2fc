//! A CRD's schema defaults, changed, then a custom resource read at once through listwatch
//! beside a real kube-apiserver 1.36: every consistent read (GET, LIST, watch-list — no
//! `resourceVersion`) made after the CRD's update was acknowledged is defaulted with the
//! new schema, as kube-apiserver decodes a stored custom resource with its CRD's current
//! structural defaults. Kubernetes' conformance spec "custom resource defaulting for
//! requests and from storage works" failed once on the etcd source for want of this
//! (docs/e2e.md).
//!
//! Each round changes the default of a field the stored object leaves out, through
//! kube-apiserver, and reads the object from listwatch in the same curl process right after
//! the update's answer (so the read follows the write by a millisecond or so). A `429`
//! (a resource's cache reloading, `Retry-After: 1`) is retried as client-go retries it; the
//! first object served must carry the new default.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use listwatch_testkit::kube::{KubeCluster, Listwatch};
use serde_json::Value;

/// Rounds of "change the default, read at once" per source.
const ROUNDS: usize = 24;

const GROUP: &str = "crd-race.example.com";
const CRD_NAME: &str = "gadgets.crd-race.example.com";
const OBJECT: &str = "/apis/crd-race.example.com/v1/namespaces/default/gadgets";

/// The CRD: one version whose `spec.mode` the stored object leaves unset.
fn crd() -> Value {
    serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {"group": GROUP, "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"mode": {"type": "string"}}}}}}}]}
    })
}

/// One consistent read of the custom resource `g`.
#[derive(Clone, Copy, Debug)]
enum Read {
    Get,
    List,
    WatchList,
}

impl Read {
    const ALL: [Read; 3] = [Read::Get, Read::List, Read::WatchList];

    /// Its path on listwatch (no `resourceVersion`: a consistent read).
    fn path(self) -> String {
        match self {
            Read::Get => format!("{OBJECT}/g"),
            Read::List => OBJECT.to_string(),
            Read::WatchList => format!(
                "{OBJECT}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1"
            ),
        }
    }

    /// `spec.mode` of `g` in an answer to this read (`None`: not there, or no default).
    fn mode(self, body: &[u8]) -> Option<String> {
        let object = match self {
            Read::Get => serde_json::from_slice::<Value>(body).ok()?,
            Read::List => {
                let list: Value = serde_json::from_slice(body).ok()?;
                list["items"].as_array()?.first()?.clone()
            }
            // The first event of the stream: `g` as an ADDED initial event.
            Read::WatchList => {
                let first = body.split(|b| *b == b'\n').next()?;
                serde_json::from_slice::<Value>(first).ok()?["object"].clone()
            }
        };
        object["spec"]["mode"].as_str().map(str::to_string)
    }
}

/// The HTTP code curl wrote to `-w` output's line `n`.
fn code(out: &[u8], n: usize) -> u16 {
    String::from_utf8_lossy(out)
        .lines()
        .nth(n)
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(0)
}

/// Sets the CRD's default of `spec.mode` to `mode` through kube-apiserver, then (in the same
/// curl process, as soon as the update is answered) makes `read` on listwatch; returns the
/// update's and the read's codes and the read's body.
fn update_then_read(
    cluster: &KubeCluster,
    lw: &Listwatch,
    dir: &Path,
    mode: &str,
    read: Read,
) -> (u16, u16, Vec<u8>) {
    let patch = serde_json::json!([{"op": "add",
        "path": "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/mode/default",
        "value": mode}]);
    let admin = format!("Authorization: Bearer {}", cluster.admin_token);
    let ca = cluster.file("ca.pem");
    let body = dir.join("read.json");
    let out = Command::new("curl")
        .args(["-s", "--max-time", "10", "--cacert"])
        .arg(&ca)
        .args(["-H", &admin, "-o", "/dev/null", "-w", "%{http_code}\n"])
        .args([
            "-X",
            "PATCH",
            "-H",
            "Content-Type: application/json-patch+json",
        ])
        .args(["-d", &patch.to_string()])
        .arg(format!(
            "{}/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}",
            cluster.url()
        ))
        .arg("--next")
        .args(["-s", "--max-time", "10", "--cacert"])
        .arg(&ca)
        .args(["-H", &admin, "-w", "%{http_code}\n", "-o"])
        .arg(&body)
        .arg(format!("{}{}", lw.url(), read.path()))
        .output()
        .expect("curl");
    let read_body = std::fs::read(&body).unwrap_or_default();
    (code(&out.stdout, 0), code(&out.stdout, 1), read_body)
}

/// `read` on listwatch until it is not refused with 429 (client-go retries those); its
/// code and body.
fn read_again(lw: &Listwatch, cluster: &KubeCluster, read: Read) -> (u16, Vec<u8>) {
    let admin = format!("Authorization: Bearer {}", cluster.admin_token);
    let out = lw.curl(
        &cluster.file("ca.pem"),
        &["-H", &admin, "-w", "\n%{http_code}", &read.path()],
    );
    let text = out.stdout;
    let cut = text.iter().rposition(|b| *b == b'\n').unwrap_or(0);
    let code = String::from_utf8_lossy(&text[cut..])
        .trim()
        .parse()
        .unwrap_or(0);
    (code, text[..cut].to_vec())
}

/// Runs the rounds against `lw`; the reads whose first object lacked the new default.
fn rounds(cluster: &KubeCluster, lw: &Listwatch, dir: &Path) -> Vec<String> {
    let mut stale = Vec::new();
    let mut retried = 0;
    for round in 0..ROUNDS {
        let read = Read::ALL[round % Read::ALL.len()];
        let mode = format!("mode-{round}");
        let (updated, mut status, mut body) = update_then_read(cluster, lw, dir, &mode, read);
        assert_eq!(updated, 200, "round {round}: the CRD update failed");
        let deadline = Instant::now() + Duration::from_secs(30);
        while status == 429 {
            assert!(Instant::now() < deadline, "round {round}: 429 for 30 s");
            retried += 1;
            std::thread::sleep(Duration::from_millis(100));
            (status, body) = read_again(lw, cluster, read);
        }
        assert_eq!(
            status,
            200,
            "round {round}: {read:?}: {}",
            String::from_utf8_lossy(&body)
        );
        let got = read.mode(&body);
        if got.as_deref() != Some(mode.as_str()) {
            stale.push(format!(
                "round {round}: {read:?} served mode {got:?}, want {mode}"
            ));
        }
    }
    eprintln!(
        "{ROUNDS} rounds: {} stale, {retried} reads retried after 429",
        stale.len()
    );
    stale
}

/// Creates the CRD and `g` through kube-apiserver, waiting until it serves `g`.
fn write_crd_and_object(cluster: &KubeCluster) {
    cluster.kubectl_ok_with(&["create", "-f", "-"], Some(&crd().to_string()));
    cluster.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        &format!("crd/{CRD_NAME}"),
        "--timeout=60s",
    ]);
    let object = serde_json::json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Gadget",
        "metadata": {"name": "g", "namespace": "default"}, "spec": {}});
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // kube-apiserver serves a just-established CRD's resource a moment later.
        let out = cluster.kubectl_with(
            &cluster.kubeconfig,
            &["create", "-f", "-"],
            Some(&object.to_string()),
        );
        if out.status.success() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "creating g: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until listwatch serves `g`.
fn wait_served(cluster: &KubeCluster, lw: &Listwatch) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while read_again(lw, cluster, Read::Get).0 != 200 {
        assert!(
            Instant::now() < deadline,
            "listwatch does not serve g: {}",
            lw.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn etcd_source_reads_custom_resources_with_the_schema_of_their_revision() {
    let test = "etcd_source_reads_custom_resources_with_the_schema_of_their_revision";
    let Some(cluster) = KubeCluster::start_or_skip(test) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("lw-crd-defaults-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    write_crd_and_object(&cluster);
    let lw = cluster.etcd_source(&dir, "etcd-source", &[]);
    wait_served(&cluster, &lw);
    let stale = rounds(&cluster, &lw, &dir);
    assert!(
        stale.is_empty(),
        "{test}: reads served with an older schema's defaults:\n{}",
        stale.join("\n")
    );
    let _ = std::fs::remove_dir_all(&dir);
}
