//! The system tests' helpers: the server's own test helpers (one copy, in
//! listwatch-testkit's `server` module) plus real etcd members.
#![allow(dead_code, unused_imports)]

pub mod etcd;
pub use listwatch_testkit::server::*;

/// Runs `cmd` to its end, asserts that it succeeded (its stderr the message) and returns
/// its stdout.
pub async fn succeed(cmd: &mut tokio::process::Command) -> String {
    let out = cmd.output().await.expect("command runs");
    assert!(
        out.status.success(),
        "{:?}: {}",
        cmd.as_std(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf8")
}

/// Every distinct kubectl (by its version line) on `PATH`, at `/usr/bin/kubectl` and at
/// `$LISTWATCH_EXTRA_KUBECTL` (where scripts/test installs the newest).
pub fn kubectls() -> Vec<std::path::PathBuf> {
    require("kubectl");
    let mut found: Vec<(String, std::path::PathBuf)> = Vec::new();
    let path = std::env::var("PATH").unwrap_or_default();
    let candidates = path
        .split(':')
        .map(|d| std::path::Path::new(d).join("kubectl"))
        .chain([std::path::PathBuf::from("/usr/bin/kubectl")])
        .chain(std::env::var_os("LISTWATCH_EXTRA_KUBECTL").map(std::path::PathBuf::from));
    for bin in candidates {
        let Ok(out) = std::process::Command::new(&bin)
            .args(["version", "--client"])
            .output()
        else {
            continue;
        };
        let version = String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .to_string();
        if out.status.success() && !found.iter().any(|(v, _)| *v == version) {
            found.push((version, bin));
        }
    }
    found.into_iter().map(|(_, b)| b).collect()
}

/// A front listwatch on 127.0.0.1: the apiserver source following `upstream`, the gateway
/// passing the rest to it; returned once ready.
pub async fn front(upstream: std::net::SocketAddr) -> std::net::SocketAddr {
    let addr = front_serving(upstream, listwatch_server::ServeOptions::default()).await;
    assert_eq!(
        listwatch_testkit::wait_ready(addr, std::time::Duration::from_secs(20)).await,
        200
    );
    addr
}

/// [`front`] served with `options` (TLS, say), returned once its source has the
/// upstream's discovery; the caller waits for it to be ready over its own transport.
pub async fn front_serving(
    upstream: std::net::SocketAddr,
    options: listwatch_server::ServeOptions,
) -> std::net::SocketAddr {
    use listwatch_gateway::{Gateway, GatewayConfig, Identity};
    let url = format!("http://{upstream}");
    let source = listwatch_upstream::UpstreamSource::start(
        &listwatch_kubeclient::ClientConfig::new(url.clone()),
        &Default::default(),
    )
    .await
    .expect("the upstream's discovery");
    let app = listwatch_server::App::new(source, listwatch_server::ServerConfig::default(), None);
    app.set_pass_through(
        Gateway::new(GatewayConfig::new(url, Identity::Forward)).expect("gateway"),
    );
    let (listener, addr) = listwatch_testkit::listen_local().await;
    tokio::spawn(listwatch_server::serve_with(
        app,
        listener,
        options,
        std::future::pending(),
    ));
    addr
}
