//! A kubectl day-one workflow against the embedded store, run with every kubectl found
//! (the machine's, 1.32 here, and the newest the test command installs): create with
//! validation, apply twice with a change, patch in three forms, label, annotate, edit,
//! scale, explain, delete with a finalizer, delete a namespace. After each step the stored
//! object is compared with what kube-apiserver would hold; the rule followed is named at
//! each assertion.

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;

use common::{front, get, json, kubectls, start};
use listwatch_server::ServerConfig;
use listwatch_testkit::workload::template_containers;
use serde_json::Value;
use tokio::process::Command;

struct Kubectl {
    bin: PathBuf,
    addr: std::net::SocketAddr,
    dir: PathBuf,
}

impl Kubectl {
    fn cmd(&self) -> Command {
        let mut c = Command::new(&self.bin);
        c.env("KUBECONFIG", "/dev/null")
            .arg("--server")
            .arg(format!("http://{}", self.addr))
            .arg("--cache-dir")
            .arg(self.dir.join("cache"));
        c
    }

    /// Runs kubectl; `(success, stdout, stderr)`.
    async fn try_run(&self, args: &[&str]) -> (bool, String, String) {
        let o = self.cmd().args(args).output().await.expect("kubectl runs");
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into(),
            String::from_utf8_lossy(&o.stderr).into(),
        )
    }

    async fn run(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.try_run(args).await;
        assert!(ok, "{} {args:?}: {err}", self.bin.display());
        out
    }

    /// `kubectl VERB deployment web -n day1 ARGS…`: a step on the workflow's Deployment;
    /// `(success, stdout, stderr)`.
    async fn try_on_web(&self, verb: &str, args: &[&str]) -> (bool, String, String) {
        self.try_run(&[&[verb, "deployment", "web", "-n", "day1"], args].concat())
            .await
    }

    /// [`Kubectl::try_on_web`], which must succeed.
    async fn on_web(&self, verb: &str, args: &[&str]) -> String {
        self.run(&[&[verb, "deployment", "web", "-n", "day1"], args].concat())
            .await
    }

    fn file(&self, name: &str, text: &str) -> String {
        let p = self.dir.join(name);
        std::fs::write(&p, text).expect("write manifest");
        p.display().to_string()
    }
}

/// Deployment `web` in `day1` as the workflow applies it: `replicas` of nginx `image` on
/// port 80. The first apply (`first`) also has the label `stage: one` and a busybox
/// sidecar; the second removes both (and changes the image and the replicas).
fn deployment(replicas: u32, image: &str, first: bool) -> String {
    let (stage, sidecar) = if first {
        (
            "\n    stage: one",
            "\n      - name: side\n        image: busybox:1.36",
        )
    } else {
        ("", "")
    };
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: day1
  labels:
    app: web{stage}
spec:
  replicas: {replicas}
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: web
        image: {image}
        ports:
        - containerPort: 80{sidecar}
"#
    )
}

const DEPLOYMENT: &str = "/apis/apps/v1/namespaces/day1/deployments/web";

async fn object(addr: std::net::SocketAddr, path: &str) -> Value {
    let r = get(addr, path).await;
    assert_eq!(r.status, 200, "{path}: {}", r.body);
    json(&r.body)
}

/// The workflow with kubectl `bin` against the apiserver at `addr` (the embedded store, or
/// a front listwatch passing writes to it), each step's effect read back there.
async fn workflow(bin: PathBuf, addr: SocketAddr) {
    let dir = std::env::temp_dir().join(format!(
        "lw-day-one-{}-{}-{}",
        std::process::id(),
        addr.port(),
        bin.display().to_string().replace('/', "_")
    ));
    std::fs::create_dir_all(&dir).expect("scratch");
    let k = Kubectl { bin, addr, dir };

    // create, validation on: a namespace, then a ConfigMap from a file; a misspelt field
    // is refused client-side by the OpenAPI schema (as against kube-apiserver).
    k.run(&["create", "namespace", "day1"]).await;
    let ns = object(addr, "/api/v1/namespaces/day1").await;
    // kube's namespace strategy: spec.finalizers [kubernetes], status.phase Active.
    assert_eq!(ns["spec"]["finalizers"], serde_json::json!(["kubernetes"]));
    assert_eq!(ns["status"]["phase"], "Active");
    let cm = k.file(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: day1\ndata:\n  a: \"1\"\n",
    );
    k.run(&["create", "--validate=strict", "-f", &cm]).await;
    let bad = k.file(
        "bad.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\n  namespace: day1\ndatta:\n  a: \"1\"\n",
    );
    let (ok, _, err) = k
        .try_run(&["create", "--validate=strict", "-f", &bad])
        .await;
    assert!(!ok && err.contains("datta"), "{err}");

    // apply twice: the second is a strategic merge patch computed from the last-applied
    // annotation (kubectl's three-way merge), so what the manifest dropped is dropped.
    let f = k.file("deploy.yaml", &deployment(1, "nginx:1.25", true));
    k.run(&["apply", "-f", &f]).await;
    let d = object(addr, DEPLOYMENT).await;
    let annotation = "kubectl.kubernetes.io/last-applied-configuration";
    assert!(d["metadata"]["annotations"][annotation].is_string(), "{d}");
    let f = k.file("deploy.yaml", &deployment(3, "nginx:1.27", false));
    let out = k.run(&["apply", "-f", &f]).await;
    assert!(out.contains("configured"), "{out}");
    let d = object(addr, DEPLOYMENT).await;
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(d["metadata"]["labels"], serde_json::json!({"app": "web"}));
    let containers = template_containers(&d);
    assert_eq!(containers.len(), 1, "{d}");
    assert_eq!(containers[0]["image"], "nginx:1.27");
    assert_eq!(containers[0]["ports"][0]["containerPort"], 80);
    let last: Value = serde_json::from_str(
        d["metadata"]["annotations"][annotation]
            .as_str()
            .expect("annotation"),
    )
    .expect("last-applied is JSON");
    assert_eq!(last["spec"]["replicas"], 3);

    // patch, three forms.
    k.on_web(
        "patch",
        &["--type=merge", "-p", r#"{"spec":{"replicas":2}}"#],
    )
    .await;
    k.on_web("patch", &[
        "--type=json", "-p",
        r#"[{"op":"test","path":"/spec/replicas","value":2},{"op":"replace","path":"/spec/paused","value":true}]"#,
    ])
    .await;
    let (ok, _, err) = k
        .try_on_web(
            "patch",
            &[
                "--type=json",
                "-p",
                r#"[{"op":"test","path":"/spec/replicas","value":9}]"#,
            ],
        )
        .await;
    // A failed `test` is 422 with kube's generic message.
    assert!(
        !ok && err.contains("the server rejected our request"),
        "{err}"
    );
    // Strategic: containers merge by name (patchMergeKey), so the image is kept.
    k.on_web("patch", &[
        "--type=strategic", "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"web","env":[{"name":"MODE","value":"day1"}]}]}}}}"#,
    ])
    .await;
    let d = object(addr, DEPLOYMENT).await;
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(d["spec"]["paused"], true);
    let c = &template_containers(&d)[0];
    assert_eq!(c["image"], "nginx:1.27");
    assert_eq!(
        c["env"],
        serde_json::json!([{"name": "MODE", "value": "day1"}])
    );

    // label and annotate (patches of metadata); a stale --resource-version is refused.
    k.on_web("label", &["tier=front"]).await;
    k.on_web("annotate", &["note=hello"]).await;
    let (ok, _, err) = k
        .try_on_web("label", &["x=y", "--resource-version=1"])
        .await;
    assert!(!ok && err.contains("the object has been modified"), "{err}");
    let d = object(addr, DEPLOYMENT).await;
    assert_eq!(d["metadata"]["labels"]["tier"], "front");
    assert_eq!(d["metadata"]["annotations"]["note"], "hello");
    assert!(d["metadata"]["labels"].get("x").is_none());

    // edit with a scripted editor.
    use std::os::unix::fs::PermissionsExt;
    let editor = k.dir.join("editor.sh");
    std::fs::write(
        &editor,
        "#!/bin/sh\nsed -i 's/^  a: \"1\"$/  a: \"2\"/' \"$1\"\n",
    )
    .expect("editor");
    std::fs::set_permissions(&editor, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let o = k
        .cmd()
        .env("KUBE_EDITOR", &editor)
        .args(["edit", "configmap", "settings", "-n", "day1"])
        .output()
        .await
        .expect("kubectl edit");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let c = object(addr, "/api/v1/namespaces/day1/configmaps/settings").await;
    assert_eq!(c["data"]["a"], "2");

    // scale: through the scale subresource (autoscaling/v1 Scale).
    k.on_web("scale", &["--replicas=4"]).await;
    assert_eq!(object(addr, DEPLOYMENT).await["spec"]["replicas"], 4);
    let scale = object(addr, &format!("{DEPLOYMENT}/scale")).await;
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["spec"]["replicas"], 4);
    assert_eq!(scale["status"]["selector"], "app=web");

    // explain (OpenAPI v3).
    let out = k.run(&["explain", "deployment.spec.replicas"]).await;
    assert!(out.contains("replicas") && out.contains("integer"), "{out}");

    // delete with a finalizer: kept with deletionTimestamp (grace period 0, kube's
    // non-graceful kinds) until the finalizer is removed; then gone.
    let held = k.file(
        "held.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: held\n  namespace: day1\n  finalizers: [example.com/keep]\n",
    );
    k.run(&["create", "-f", &held]).await;
    k.run(&["delete", "configmap", "held", "-n", "day1", "--wait=false"])
        .await;
    let h = object(addr, "/api/v1/namespaces/day1/configmaps/held").await;
    assert!(h["metadata"]["deletionTimestamp"].is_string(), "{h}");
    assert_eq!(h["metadata"]["deletionGracePeriodSeconds"], 0);
    // A deleting object takes no new finalizers.
    let (ok, _, err) = k
        .try_run(&[
            "patch",
            "configmap",
            "held",
            "-n",
            "day1",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":["example.com/keep","example.com/more"]}}"#,
        ])
        .await;
    assert!(!ok && err.contains("no new finalizers"), "{err}");

    // delete the namespace: Terminating while `held` keeps a finalizer, its other
    // objects deleted, no new content; gone once the finalizer is removed.
    k.run(&["delete", "namespace", "day1", "--wait=false"])
        .await;
    let ns = object(addr, "/api/v1/namespaces/day1").await;
    assert_eq!(ns["status"]["phase"], "Terminating");
    assert!(ns["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(get(addr, DEPLOYMENT).await.status, 404);
    assert_eq!(
        get(addr, "/api/v1/namespaces/day1/configmaps/settings")
            .await
            .status,
        404
    );
    let (ok, _, err) = k
        .try_run(&["create", "configmap", "late", "-n", "day1"])
        .await;
    assert!(!ok && err.contains("being terminated"), "{err}");
    k.run(&[
        "patch",
        "configmap",
        "held",
        "-n",
        "day1",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ])
    .await;
    assert_eq!(
        get(addr, "/api/v1/namespaces/day1/configmaps/held")
            .await
            .status,
        404
    );
    assert_eq!(get(addr, "/api/v1/namespaces/day1").await.status, 404);
    let (ok, _, err) = k.try_run(&["get", "namespace", "day1"]).await;
    assert!(!ok && err.contains("not found"), "{err}");

    // A CRD: established as kube's CRD controllers would (kubectl waits on the condition),
    // its kind served with validation from its schema, gone with it.
    let crd = k.file("crd.yaml", &crd());
    k.run(&["apply", "-f", &crd]).await;
    k.run(&[
        "wait",
        "--for=condition=Established",
        "crd/gadgets.example.com",
        "--timeout=10s",
    ])
    .await;
    let gadget = k.file("gadget.yaml", GADGET);
    k.run(&["apply", "-f", &gadget]).await;
    let listed = k.run(&["get", "gadgets", "-o", "json"]).await;
    assert_eq!(json(&listed)["items"][0]["spec"]["size"], 3, "{listed}");
    let bad = k.file("bad.yaml", &GADGET.replace("size: 3", "size: three"));
    let (ok, _, err) = k.try_run(&["apply", "-f", &bad]).await;
    // Client-side validation against the CRD's schema (kube's error names the field).
    assert!(!ok && err.contains("size"), "{err}");
    k.run(&["delete", "crd", "gadgets.example.com"]).await;
    let (ok, _, err) = k.try_run(&["get", "gadgets"]).await;
    assert!(!ok, "{err}");
    let _ = std::fs::remove_dir_all(&k.dir);
}

/// Gadgets: cluster-scoped, their `spec.size` an integer.
fn crd() -> String {
    listwatch_testkit::workload::custom_resource_definition(
        "example.com",
        "Cluster",
        ("Gadget", "gadgets"),
        serde_json::json!({"type": "object", "properties": {"size": {"type": "integer"}}}),
    )
    .to_string()
}

const GADGET: &str = r#"apiVersion: example.com/v1
kind: Gadget
metadata:
  name: g
spec:
  size: 3
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_day_one_workflow_with_every_kubectl() {
    let bins = kubectls();
    assert!(!bins.is_empty());
    // scripts/test installs the newest beside the machine's: both must run.
    if std::env::var_os("LISTWATCH_EXTRA_KUBECTL").is_some() {
        assert!(bins.len() >= 2, "only {bins:?} found");
    }
    for bin in bins {
        eprintln!("day one with {}", bin.display());
        let s = start(0, ServerConfig::default()).await;
        workflow(bin, s.addr).await;
    }
}

/// Issue 26: the same workflow with a kubeconfig naming only a front listwatch that follows
/// an upstream (here listwatch on its embedded store) with the apiserver source and passes
/// everything it does not serve (writes, subresources, discovery, OpenAPI, the CRD's kind it
/// does not follow) to it; every read-back goes through the front as a consistent read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_day_one_workflow_through_a_front_listwatch() {
    for bin in kubectls() {
        eprintln!("day one through the front with {}", bin.display());
        let up = start(0, ServerConfig::default()).await;
        let front = front(up.addr).await;
        workflow(bin, front).await;
    }
}
