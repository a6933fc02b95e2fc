//! etcd as production clusters run it: client URLs over TLS with client-certificate
//! authentication (kubeadm, k3s, OpenShift). listwatch follows it with kube-apiserver's
//! `--etcd-cafile/--etcd-certfile/--etcd-keyfile` material, refuses to start — saying why —
//! with a CA that does not verify etcd or without a client certificate, and is read-only
//! over etcd unless a lab asks otherwise.

mod common;

use std::time::Duration;

use common::etcd::{EtcdServer, TempDir, free_port};
use common::tls::{Ca, Leaf};
use listwatch_etcd::{EtcdConfig, EtcdSource, EtcdTls};
use listwatch_sources::Registry;

/// One etcd member serving clients over https with `--client-cert-auth`; killed on drop.
struct TlsEtcd {
    url: String,
    peer: String,
    ca: Ca,
    client: Leaf,
    child: tokio::process::Child,
    dir: TempDir,
}

impl TlsEtcd {
    async fn start() -> TlsEtcd {
        common::require("etcd");
        let dir = TempDir::new("etcd-tls");
        let ca = Ca::new("etcd-ca");
        let server = ca.server();
        let client = ca.client("kube-apiserver-etcd-client", &[]);
        std::fs::write(dir.0.join("server.crt"), &server.cert_pem).expect("write");
        std::fs::write(dir.0.join("server.key"), &server.key_pem).expect("write");
        std::fs::write(dir.0.join("ca.crt"), &ca.cert_pem).expect("write");
        let (client_port, peer_port) = (free_port(), free_port());
        let url = format!("https://127.0.0.1:{client_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let child = Self::spawn(&dir, &url, &peer);
        let etcd = TlsEtcd {
            url,
            peer,
            ca,
            client,
            child,
            dir,
        };
        // Healthy once a client with the right certificate can write.
        etcd.until_written(
            &etcd.client,
            "/registry/configmaps/default/before",
            "before",
        )
        .await;
        etcd
    }

    /// etcd on `url`, trusting the client CAs in `dir`'s `ca.crt`.
    fn spawn(dir: &TempDir, url: &str, peer: &str) -> tokio::process::Child {
        common::etcd::spawn_etcd(
            tokio::process::Command::new("etcd")
                .arg("--data-dir")
                .arg(dir.0.join("data"))
                .args(["--listen-client-urls", url, "--advertise-client-urls", url])
                .args([
                    "--listen-peer-urls",
                    peer,
                    "--initial-advertise-peer-urls",
                    peer,
                ])
                .arg("--initial-cluster")
                .arg(format!("default={peer}"))
                .arg("--cert-file")
                .arg(dir.0.join("server.crt"))
                .arg("--key-file")
                .arg(dir.0.join("server.key"))
                .arg("--trusted-ca-file")
                .arg(dir.0.join("ca.crt"))
                .arg("--client-cert-auth")
                .arg("--experimental-watch-progress-notify-interval=100ms"),
        )
    }

    /// Restarts etcd (same data, same URLs) trusting client certificates of `ca` only
    /// (its serving certificate stays the first CA's): every client connection drops.
    async fn restart_trusting(&mut self, ca: &Ca) {
        self.child.kill().await.expect("kill etcd");
        std::fs::write(self.dir.0.join("ca.crt"), &ca.cert_pem).expect("write");
        self.child = Self::spawn(&self.dir, &self.url, &self.peer);
    }

    /// Polls until `leaf` can write `name` under `key`.
    async fn until_written(&self, leaf: &Leaf, key: &str, name: &str) {
        let ok = common::poll_until(
            Duration::from_secs(20),
            || async { self.put_as(leaf, key, name).await },
            |ok| *ok,
        )
        .await;
        assert!(ok, "TLS etcd did not take a write from {name}'s client");
    }

    fn tls(&self) -> EtcdTls {
        EtcdTls {
            ca_pem: Some(self.ca.cert_pem.clone().into_bytes()),
            cert_pem: Some(self.client.cert_pem.clone().into_bytes()),
            key_pem: Some(self.client.key_pem.clone().into_bytes()),
            reload_from: None,
        }
    }

    /// Writes a ConfigMap named `name` under `key` with an etcd client over mutual TLS.
    async fn put(&self, key: &str, name: &str) -> bool {
        self.put_as(&self.client, key, name).await
    }

    /// [`TlsEtcd::put`] presenting `leaf`.
    async fn put_as(&self, leaf: &Leaf, key: &str, name: &str) -> bool {
        let options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_tls(
                etcd_client::TlsOptions::new()
                    .ca_certificate(etcd_client::Certificate::from_pem(&self.ca.cert_pem))
                    .identity(etcd_client::Identity::from_pem(
                        &leaf.cert_pem,
                        &leaf.key_pem,
                    )),
            );
        let Ok(mut c) = etcd_client::Client::connect([self.url.as_str()], Some(options)).await
        else {
            return false;
        };
        let value = format!(
            r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"default","uid":"u-{name}","creationTimestamp":"2026-01-01T00:00:00Z"}},"data":{{"k":"v"}}}}"#
        );
        tokio::time::timeout(Duration::from_secs(2), c.put(key, value, None))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

fn registry() -> Registry {
    Registry::new(
        listwatch_core::builtin_resources(),
        1,
        &listwatch_store::StoreConfig::default(),
    )
}

/// Starts an etcd source with `tls`, expecting a refusal; returns its message and hint.
async fn refused(url: &str, tls: EtcdTls) -> String {
    let started = EtcdSource::start(
        registry(),
        EtcdConfig {
            endpoints: vec![url.to_string()],
            tls: Some(tls),
            ..EtcdConfig::default()
        },
    )
    .await;
    match started {
        Ok(_) => panic!("started against TLS etcd with the wrong credentials"),
        Err(e) => {
            let said = format!("{e}{}", e.hint());
            eprintln!("refused: {said}");
            said
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_etcd_over_mutual_tls_and_says_why_it_cannot() {
    let etcd = TlsEtcd::start().await;
    let server = EtcdServer::start_with(EtcdConfig {
        endpoints: vec![etcd.url.clone()],
        tls: Some(etcd.tls()),
        ..EtcdConfig::default()
    })
    .await;
    let list =
        common::get_expecting(server.addr, "/api/v1/namespaces/default/configmaps", 200).await;
    assert!(list.body.contains(r#""name":"before""#), "{}", list.body);
    // A watch sees what is written to etcd after it started.
    let mut watch = common::stream_lines(
        server.addr,
        "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=0",
    )
    .await;
    assert!(
        common::next_line(&mut watch, 10).await.is_some(),
        "initial ADDED"
    );
    assert!(
        etcd.put("/registry/configmaps/default/after", "after")
            .await
    );
    listwatch_testkit::next_added(&mut watch, "after").await;

    // Read-only by default: a write is 405 saying where writes belong, and etcd is untouched.
    let post = post_written(server.addr).await;
    assert_eq!(post.status, 405, "{}", post.body);
    let status = common::json(&post.body);
    assert_eq!(status["reason"], "MethodNotAllowed");
    assert_eq!(status["message"], listwatch_etcd::READ_ONLY);
    common::answered(
        server.addr,
        "DELETE",
        "/api/v1/namespaces/default/configmaps/before",
        None,
        405,
    )
    .await;
    let after = common::get(server.addr, "/api/v1/namespaces/default/configmaps/before").await;
    assert_eq!(after.status, 200, "the refused DELETE removed the object");

    // With the lab opt-in the same write lands.
    let lab = EtcdServer::start_with(EtcdConfig {
        endpoints: vec![etcd.url.clone()],
        tls: Some(etcd.tls()),
        unsafe_direct_writes: true,
        ..EtcdConfig::default()
    })
    .await;
    let post = post_written(lab.addr).await;
    assert_eq!(post.status, 201, "{}", post.body);

    // A CA that did not sign etcd's certificate.
    let other = Ca::new("not-etcd-ca");
    let e = refused(
        &etcd.url,
        EtcdTls {
            ca_pem: Some(other.cert_pem.clone().into_bytes()),
            ..etcd.tls()
        },
    )
    .await;
    assert!(e.contains("did not verify against --etcd-cafile"), "{e}");
    // No client certificate: etcd refuses the handshake.
    let e = refused(
        &etcd.url,
        EtcdTls {
            cert_pem: None,
            key_pem: None,
            ..etcd.tls()
        },
    )
    .await;
    assert!(e.contains("give --etcd-certfile and --etcd-keyfile"), "{e}");
}

/// POSTs the ConfigMap `default/written` to the server at `addr`.
async fn post_written(addr: std::net::SocketAddr) -> common::Raw {
    common::request(
        addr,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"written"}}"#),
    )
    .await
}

/// Replaces `path`'s content at once (as kubeadm's and cert-manager's renewals do).
fn replace(path: &std::path::Path, text: &str) {
    let new = path.with_extension("new");
    std::fs::write(&new, text).expect("write");
    std::fs::rename(&new, path).expect("rename");
}

/// kube-apiserver's etcd client certificate renewed in place (a new CA, as a CA rotation
/// does): the etcd source reads the files again and, once etcd trusts only the new CA and
/// every old connection is gone, follows etcd with the new certificate. Read once at
/// start-up, the follower would retry the old certificate forever and never see `after`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_etcd_client_certificate_is_used_without_a_restart() {
    let mut etcd = TlsEtcd::start().await;
    let files = TempDir::new("etcd-client-files");
    let (cert, key, ca) = (
        files.0.join("client.crt"),
        files.0.join("client.key"),
        files.0.join("ca.crt"),
    );
    std::fs::write(&cert, &etcd.client.cert_pem).expect("write");
    std::fs::write(&key, &etcd.client.key_pem).expect("write");
    std::fs::write(&ca, &etcd.ca.cert_pem).expect("write");
    let tls = listwatch_etcd::EtcdTlsFiles {
        ca: Some(ca),
        cert: Some(cert.clone()),
        key: Some(key.clone()),
    }
    .read()
    .expect("readable");
    let server = EtcdServer::start_with(EtcdConfig {
        endpoints: vec![etcd.url.clone()],
        tls: Some(tls),
        ..EtcdConfig::default()
    })
    .await;
    let list =
        common::get_expecting(server.addr, "/api/v1/namespaces/default/configmaps", 200).await;
    assert!(list.body.contains(r#""name":"before""#), "{}", list.body);

    let renewed_ca = Ca::new("etcd-client-ca-2");
    let renewed = renewed_ca.client("kube-apiserver-etcd-client", &[]);
    replace(&cert, &renewed.cert_pem);
    replace(&key, &renewed.key_pem);
    etcd.restart_trusting(&renewed_ca).await;
    etcd.until_written(&renewed, "/registry/configmaps/default/after", "after")
        .await;
    let after = common::get_until(
        server.addr,
        "/api/v1/namespaces/default/configmaps/after",
        listwatch_etcd::TLS_RELOAD_CHECK * 4,
        200,
    )
    .await;
    assert_eq!(
        after.status, 200,
        "the etcd source did not follow etcd with the renewed client certificate"
    );
}
