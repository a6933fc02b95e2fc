//! kubectl (the machine's binary) through a listwatch gateway whose upstream is another
//! listwatch on its embedded store: discovery, `version` and writes (create, replace,
//! delete) pass through and land upstream.

use std::net::SocketAddr;
use std::sync::Arc;

use listwatch_gateway::{Gateway, GatewayConfig, Identity};
use listwatch_server::{App, ServeOptions, ServerConfig, serve_with};
use listwatch_sources::{EmbeddedSource, Registry};

async fn serve(app: Arc<App>) -> SocketAddr {
    let (listener, addr) = listwatch_testkit::listen_local().await;
    let options = ServeOptions::default();
    tokio::spawn(serve_with(app, listener, options, std::future::pending()));
    addr
}

fn app() -> Arc<App> {
    let registry = Registry::new(listwatch_core::builtin_resources(), 1, &Default::default());
    App::embedded(EmbeddedSource::new(registry), ServerConfig::default())
}

/// `kubectl --server http://addr args…`: success and stdout, or failure and stderr.
async fn kubectl(addr: SocketAddr, args: &[&str], stdin: Option<&str>) -> (bool, String) {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new("kubectl")
        .env("KUBECONFIG", "/dev/null")
        .arg("--server")
        .arg(format!("http://{addr}"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl is installed");
    let mut input = child.stdin.take().expect("stdin");
    input
        .write_all(stdin.unwrap_or_default().as_bytes())
        .await
        .expect("stdin");
    drop(input);
    listwatch_testkit::process::outcome(child.wait_with_output().await.expect("kubectl runs"))
}

/// `data.a` of configmap default/c1 as the upstream has it.
async fn upstream_value(upstream: SocketAddr) -> String {
    let get = [
        "get",
        "configmap",
        "c1",
        "-n",
        "default",
        "-o",
        "jsonpath={.data.a}",
    ];
    let (ok, out) = kubectl(upstream, &get, None).await;
    assert!(ok, "{out}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_writes_through_the_gateway_land_upstream() {
    let upstream = serve(app()).await;
    let front = app();
    // No authenticator on either: forward mode passes the (absent) credential as it came.
    front.set_pass_through(
        Gateway::new(GatewayConfig::new(
            format!("http://{upstream}"),
            Identity::Forward,
        ))
        .expect("gateway"),
    );
    let gw = serve(front).await;
    let (ok, out) = kubectl(gw, &["version", "-o", "json"], None).await;
    assert!(ok, "{out}");
    assert!(out.contains("serverVersion"), "{out}");
    let (ok, out) = kubectl(
        gw,
        &[
            "create",
            "configmap",
            "c1",
            "-n",
            "default",
            "--from-literal=a=b",
        ],
        None,
    )
    .await;
    assert!(ok, "{out}");
    assert_eq!(upstream_value(upstream).await, "b");
    let manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c1\n  namespace: default\ndata:\n  a: changed\n";
    let (ok, out) = kubectl(gw, &["replace", "-f", "-"], Some(manifest)).await;
    assert!(ok, "{out}");
    assert_eq!(upstream_value(upstream).await, "changed");
    let (ok, out) = kubectl(gw, &["delete", "configmap", "c1", "-n", "default"], None).await;
    assert!(ok, "{out}");
    let (ok, out) = kubectl(upstream, &["get", "configmap", "c1", "-n", "default"], None).await;
    assert!(!ok && out.contains("NotFound"), "{out}");
}
