//! kubectl's OpenAPI users against listwatch on its embedded store: `kubectl explain`
//! (OpenAPI v3), client-side validation of `kubectl create -f` (OpenAPI v2 protobuf) and
//! `kubectl edit` (validation, then its patch).

mod common;

use std::path::{Path, PathBuf};

use common::{json, start};
use listwatch_server::ServerConfig;
use tokio::process::Command;

/// kubectl at `addr`, with a cache directory of its own (OpenAPI and discovery are cached
/// on disk by server address).
fn kubectl(addr: std::net::SocketAddr, dir: &Path) -> Command {
    common::require("kubectl");
    let mut c = Command::new("kubectl");
    c.env("KUBECONFIG", "/dev/null")
        .arg("--server")
        .arg(format!("http://{addr}"))
        .arg("--cache-dir")
        .arg(dir.join("cache"));
    c
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lw-openapi-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

async fn run(c: &mut Command) -> Out {
    let o = c.output().await.expect("kubectl runs");
    Out {
        ok: o.status.success(),
        stdout: String::from_utf8_lossy(&o.stdout).into(),
        stderr: String::from_utf8_lossy(&o.stderr).into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_reads_the_v3_documents() {
    let s = start(0, ServerConfig::default()).await;
    let dir = scratch("explain");
    let out = run(kubectl(s.addr, &dir).args(["explain", "pod.spec.containers"])).await;
    assert!(out.ok, "{}", out.stderr);
    assert!(out.stdout.contains("KIND:       Pod"), "{}", out.stdout);
    assert!(out.stdout.contains("VERSION:    v1"), "{}", out.stdout);
    assert!(
        out.stdout.contains("FIELD: containers <[]Container>"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("List of containers belonging to the pod"),
        "{}",
        out.stdout
    );
    // The Container fields, with their types and the one required field.
    assert!(
        out.stdout.contains("name\t<string> -required-"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("ports\t<[]ContainerPort>"),
        "{}",
        out.stdout
    );
    let out = run(kubectl(s.addr, &dir).args(["explain", "deployments.spec.replicas"])).await;
    assert!(out.ok, "{}", out.stderr);
    assert!(out.stdout.contains("GROUP:      apps"), "{}", out.stdout);
    assert!(
        out.stdout.contains("FIELD: replicas <integer>"),
        "{}",
        out.stdout
    );
    let out = run(kubectl(s.addr, &dir).args(["explain", "pod.spec.nothere"])).await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains("field \"nothere\" does not exist"),
        "{}",
        out.stderr
    );
    let _ = std::fs::remove_dir_all(dir);
}

const DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx
        ports:
        - containerPort: 80
        resources:
          limits: {cpu: 500m, memory: 1Gi}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_validates_against_the_served_schema() {
    let s = start(0, ServerConfig::default()).await;
    let dir = scratch("create");
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("manifest");
        p
    };
    let cm = write(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: default\ndata:\n  a: \"1\"\n",
    );
    let deploy = write("deploy.yaml", DEPLOYMENT);
    // Validation on (kubectl's default, --validate=strict): both are accepted and stored.
    for (m, path) in [
        (&cm, "/api/v1/namespaces/default/configmaps/settings"),
        (&deploy, "/apis/apps/v1/namespaces/default/deployments/web"),
    ] {
        let out = run(kubectl(s.addr, &dir).arg("create").arg("-f").arg(m)).await;
        assert!(out.ok, "{}: {}", m.display(), out.stderr);
        assert_eq!(common::get(s.addr, path).await.status, 200);
    }
    // An unknown field and a mistyped one are refused before anything is sent.
    let unknown = write(
        "unknown.yaml",
        &DEPLOYMENT
            .replace("name: web\n  namespace", "name: web2\n  namespace")
            .replace("  replicas: 2\n", "  replicas: 2\n  foo: bar\n"),
    );
    let out = run(kubectl(s.addr, &dir).arg("create").arg("-f").arg(&unknown)).await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains(r#"unknown field "foo""#)
            && out.stderr.contains("io.k8s.api.apps.v1.DeploymentSpec"),
        "{}",
        out.stderr
    );
    let mistyped = write(
        "mistyped.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: other\n  namespace: default\ndata: [1, 2]\n",
    );
    let out = run(kubectl(s.addr, &dir).arg("create").arg("-f").arg(&mistyped)).await;
    assert!(!out.ok);
    assert!(out.stderr.contains("ConfigMap.data"), "{}", out.stderr);
    for path in [
        "/apis/apps/v1/namespaces/default/deployments/web2",
        "/api/v1/namespaces/default/configmaps/other",
    ] {
        assert_eq!(common::get(s.addr, path).await.status, 404, "{path}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// `kubectl edit` validates the edited object client-side, then patches it. The editor is a
/// script that changes one value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edit_with_a_scripted_editor() {
    use std::os::unix::fs::PermissionsExt;
    let s = start(0, ServerConfig::default()).await;
    let dir = scratch("edit");
    let ns = "/api/v1/namespaces/default/configmaps";
    common::answered(
        s.addr,
        "POST",
        ns,
        Some(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"settings"},"data":{"a":"1"}}"#),
        201,
    )
    .await;
    let editor = dir.join("editor.sh");
    std::fs::write(
        &editor,
        "#!/bin/sh\nsed -i 's/^  a: \"1\"$/  a: \"2\"/' \"$1\"\n",
    )
    .expect("editor");
    std::fs::set_permissions(&editor, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let out = run(kubectl(s.addr, &dir).env("KUBE_EDITOR", &editor).args([
        "edit",
        "configmap",
        "settings",
        "-n",
        "default",
    ]))
    .await;
    // Validation passed either way (kubectl says "is invalid" when it does not).
    assert!(!out.stderr.contains("is invalid"), "{}", out.stderr);
    assert!(!out.stderr.contains("failed validation"), "{}", out.stderr);
    let discovery = json(&common::get(s.addr, "/api/v1").await.body);
    let patchable = discovery["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .any(|r| {
            r["name"] == "configmaps"
                && r["verbs"]
                    .as_array()
                    .is_some_and(|v| v.contains(&"patch".into()))
        });
    let now = json(&common::get(s.addr, &format!("{ns}/settings")).await.body);
    if patchable {
        assert!(out.ok, "{}", out.stderr);
        assert!(
            out.stdout.contains("configmap/settings edited"),
            "{}",
            out.stdout
        );
        assert_eq!(now["data"]["a"], "2");
    } else {
        // Without PATCH the edit stops at the server's 405, after validation.
        assert!(!out.ok);
        assert!(
            out.stderr.contains("does not allow this method"),
            "{}",
            out.stderr
        );
        assert_eq!(now["data"]["a"], "1");
    }
    let _ = std::fs::remove_dir_all(dir);
}
