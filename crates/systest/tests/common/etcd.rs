//! Real etcd for tests: members on 127.0.0.1 with free ports and temporary data dirs
//! (killed when dropped), a TCP proxy that can cut listwatch off from etcd, and listwatch
//! servers following etcd.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use listwatch_core::builtin_resources;
use listwatch_etcd::{EtcdConfig, EtcdSource};
use listwatch_server::ServerConfig;
use listwatch_sources::Registry;
use listwatch_store::StoreConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};

/// Starts `etcd` (a `tokio::process::Command` for it, its flags set) quietly, killed when
/// the child is dropped; etcd must be on PATH.
pub fn spawn_etcd(etcd: &mut Command) -> Child {
    etcd.env("ETCD_UNSUPPORTED_ARCH", "")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("etcd on PATH (Debian: etcd-server)")
}

/// A port for an etcd this process starts (see [`listwatch_testkit::unlisted_port`]).
pub fn free_port() -> u16 {
    listwatch_testkit::unlisted_port()
}

/// A temporary directory removed when dropped (the one of every test).
pub use listwatch_testkit::TempDir;

/// One etcd member process.
pub struct Member {
    pub name: String,
    pub client_port: u16,
    pub peer_port: u16,
    dir: PathBuf,
    cluster: String,
    state: &'static str,
    child: Option<Child>,
    /// Started with `--experimental-watch-progress-notify-interval=100ms`.
    progress_notify: bool,
}

impl Member {
    pub fn client_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    fn spawn(&mut self) {
        super::require("etcd");
        let mut etcd = Command::new("etcd");
        if self.progress_notify {
            // Debian's 3.4.23 has etcd#15220: listwatch trusts only etcd's periodic progress
            // notifications on such an etcd; frequent ones keep the other tests quick. The
            // proof of currency works without them (history.rs runs both ways).
            etcd.arg("--experimental-watch-progress-notify-interval=100ms");
        }
        let child = spawn_etcd(
            etcd.arg("--name")
                .arg(&self.name)
                .arg("--data-dir")
                .arg(self.dir.join(&self.name))
                .arg("--listen-client-urls")
                .arg(self.client_url())
                .arg("--advertise-client-urls")
                .arg(self.client_url())
                .arg("--listen-peer-urls")
                .arg(format!("http://127.0.0.1:{}", self.peer_port))
                .arg("--initial-advertise-peer-urls")
                .arg(format!("http://127.0.0.1:{}", self.peer_port))
                .arg("--initial-cluster")
                .arg(&self.cluster)
                .arg("--initial-cluster-state")
                .arg(self.state)
                .arg("--initial-cluster-token")
                .arg(format!("lw-{}", self.dir.display())),
        );
        self.child = Some(child);
    }

    /// SIGKILL, as a crash.
    pub async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
            let _ = c.wait().await;
        }
    }

    /// Starts again on the same data dir and ports.
    pub fn restart(&mut self) {
        self.state = "existing";
        self.spawn();
    }
}

/// An etcd cluster of `n` members on loopback; killed when dropped.
pub struct Etcd {
    pub members: Vec<Member>,
    _dir: TempDir,
}

impl Etcd {
    pub async fn start(n: usize) -> Etcd {
        Self::start_with(n, true).await
    }

    /// `n` members, with or without frequent periodic progress notifications.
    pub async fn start_with(n: usize, progress_notify: bool) -> Etcd {
        let dir = TempDir::new("etcd");
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let cluster = ports
            .iter()
            .enumerate()
            .map(|(i, (_, p))| format!("m{i}=http://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut members: Vec<Member> = ports
            .iter()
            .enumerate()
            .map(|(i, (c, p))| Member {
                name: format!("m{i}"),
                client_port: *c,
                peer_port: *p,
                dir: dir.0.clone(),
                cluster: cluster.clone(),
                state: "new",
                child: None,
                progress_notify,
            })
            .collect();
        for m in &mut members {
            m.spawn();
        }
        let etcd = Etcd { members, _dir: dir };
        etcd.wait_healthy().await;
        etcd
    }

    /// One member whose data is an `etcdctl snapshot save` file (gzipped), restored with
    /// every revision kept, so resourceVersions match the cluster the snapshot came from.
    pub async fn restore(snapshot_gz: &std::path::Path) -> Etcd {
        super::require("etcdctl");
        let dir = TempDir::new("etcd-restore");
        let (client_port, peer_port) = (free_port(), free_port());
        let db = dir.0.join("snapshot.db");
        let gz = std::fs::read(snapshot_gz).expect("snapshot file");
        std::fs::write(&db, listwatch_testkit::gunzip(&gz)).expect("write snapshot");
        let cluster = format!("m0=http://127.0.0.1:{peer_port}");
        let status = std::process::Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg("snapshot")
            .arg("restore")
            .arg(&db)
            .arg("--data-dir")
            .arg(dir.0.join("m0"))
            .arg("--name")
            .arg("m0")
            .arg("--initial-cluster")
            .arg(&cluster)
            .arg("--initial-advertise-peer-urls")
            .arg(format!("http://127.0.0.1:{peer_port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("etcdctl on PATH (Debian: etcd-client)");
        assert!(status.success(), "etcdctl snapshot restore failed");
        let mut m = Member {
            name: "m0".into(),
            client_port,
            peer_port,
            dir: dir.0.clone(),
            cluster,
            state: "existing",
            child: None,
            progress_notify: true,
        };
        m.spawn();
        let etcd = Etcd {
            members: vec![m],
            _dir: dir,
        };
        etcd.wait_healthy().await;
        etcd
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(Member::client_url).collect()
    }

    /// A client to the members that are up (tests write and compact through it).
    pub async fn client(&self) -> etcd_client::Client {
        let up: Vec<String> = self
            .members
            .iter()
            .filter(|m| m.child.is_some())
            .map(Member::client_url)
            .collect();
        etcd_client::Client::connect(up, None)
            .await
            .expect("etcd client")
    }

    /// Waits until every running member answers a linearizable read (a leader exists and
    /// each member accepts connections).
    pub async fn wait_healthy(&self) {
        for m in self.members.iter().filter(|m| m.child.is_some()) {
            let mut ok = false;
            for _ in 0..200 {
                if let Ok(mut c) = etcd_client::Client::connect([m.client_url()], None).await
                    && tokio::time::timeout(Duration::from_secs(1), c.get("/health-probe", None))
                        .await
                        .is_ok_and(|r| r.is_ok())
                {
                    ok = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert!(ok, "etcd member {} did not become healthy", m.name);
        }
    }
}

/// A TCP proxy in front of an etcd member that a test can cut: `cut()` closes every open
/// connection and refuses new ones until `restore()`.
pub struct Proxy {
    pub addr: SocketAddr,
    open: Arc<AtomicBool>,
    generation: tokio::sync::watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    pub async fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let open = Arc::new(AtomicBool::new(true));
        let (generation, _) = tokio::sync::watch::channel(0u64);
        let task = tokio::spawn({
            let open = open.clone();
            let generation = generation.clone();
            async move {
                loop {
                    let Ok((mut inbound, _)) = listener.accept().await else {
                        continue;
                    };
                    if !open.load(Ordering::SeqCst) {
                        drop(inbound);
                        continue;
                    }
                    let mut cut = generation.subscribe();
                    tokio::spawn(async move {
                        let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", target)).await
                        else {
                            return;
                        };
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                            _ = cut.changed() => {}
                        }
                    });
                }
            }
        });
        Proxy {
            addr,
            open,
            generation,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Severs every connection through the proxy and refuses new ones.
    pub fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    /// Accepts connections again.
    pub fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

/// A listwatch server following etcd; stops when dropped.
pub struct EtcdServer {
    pub addr: SocketAddr,
    pub source: Arc<EtcdSource>,
    /// Dropped with the server, it ends the server's shutdown future (`rx.await` returns).
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl EtcdServer {
    pub async fn start(endpoints: Vec<String>, progress: Duration) -> Self {
        Self::start_with(EtcdConfig {
            endpoints,
            progress_interval: progress,
            page_size: 100,
            // These tests write through listwatch to check what etcd then holds.
            unsafe_direct_writes: true,
            ..EtcdConfig::default()
        })
        .await
    }

    /// A replica with a source configured by the caller.
    pub async fn start_with(config: EtcdConfig) -> Self {
        let registry = Registry::new(builtin_resources(), 1, &StoreConfig::default());
        let source = EtcdSource::start(registry.clone(), config)
            .await
            .expect("etcd source");
        let (addr, _, stop) = super::serve_views(source.clone(), ServerConfig::default()).await;
        let s = EtcdServer {
            addr,
            source,
            _stop: stop,
        };
        s.wait_ready().await;
        s
    }

    /// Waits until every resource's cache is loaded (`/readyz` 200).
    pub async fn wait_ready(&self) {
        for _ in 0..300 {
            if super::get(self.addr, "/readyz").await.status == 200 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("listwatch over etcd did not become ready");
    }
}

/// The storage corpus's etcd (`shared/reference/storage/`) restored with every revision, and
/// a listwatch following it with the cluster's encryption configuration, once the corpus's
/// CRDs' resources are served.
#[allow(dead_code)]
pub async fn serve_corpus() -> (Etcd, EtcdServer) {
    let etcd = Etcd::restore(&listwatch_testkit::reference("storage/etcd-snapshot.db.gz")).await;
    let decryptor = listwatch_etcd::Decryptor::from_file(&listwatch_testkit::reference(
        "storage/encryption-config.yaml",
    ))
    .expect("encryption config");
    let server = EtcdServer::start_with(EtcdConfig {
        endpoints: etcd.endpoints(),
        decoder: listwatch_etcd::ValueDecoder::new(Some(decryptor)),
        ..EtcdConfig::default()
    })
    .await;
    for path in [
        "/apis/example.com/v1/widgets",
        "/apis/example.com/v1beta1/widgets",
        "/apis/example.com/v1/clusterthings",
    ] {
        let served = super::get_until(server.addr, path, Duration::from_secs(10), 200).await;
        assert_eq!(served.status, 200, "{path} not served from its CRD");
    }
    (etcd, server)
}
